package supervisor

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/drover-run/drover/internal/clock"
	"github.com/drover-run/drover/internal/flow"
	"github.com/drover-run/drover/internal/maintenance"
	"github.com/drover-run/drover/internal/tracing"
	"github.com/drover-run/drover/store"
)

// LeaseName is the lease the supervisors compete for.
const LeaseName = "supervisor"

// Supervisor is one supervisor instance: a maintenance.Runner of the
// task chores (step recovery, request expiry, and retention when set)
// under LeaseName.
type Supervisor struct {
	Driver   store.Driver
	Clock    clock.Clock
	Instance string
	Log      *slog.Logger
	Counters *flow.Counters
	// Interval between sweeps.
	Interval time.Duration
	// LeaseTTL is how long leadership lasts without renewal.
	LeaseTTL time.Duration
	// Batch caps the tasks recovered per transaction.
	Batch int
	// Retention, when positive, is the age after which the leader deletes
	// final tasks and their history.
	Retention time.Duration
	// OnRecover is called after a sweep that changed tasks (to wake schedulers).
	OnRecover func()
	// Trace, when on, records a span per recovery.
	Trace *tracing.Tracer
	// Live, when set, reports whether notifications reach this process
	// (maintenance.Runner.Live): while they do, an idle supervisor looks
	// for expired steps every LeaseTTL/3 instead of every Interval, and
	// every Interval again once tasks are held.
	Live func() bool

	runnerOnce sync.Once
	runner     *maintenance.Runner
}

// New returns a supervisor.
func New(d store.Driver, c clock.Clock, instance string, log *slog.Logger, counters *flow.Counters) *Supervisor {
	s := &Supervisor{Driver: d, Clock: c, Instance: instance, Log: log, Counters: counters,
		Interval: time.Second, LeaseTTL: 10 * time.Second, Batch: 500}
	return s
}

// r creates the runner on first use (after the caller set the fields), once:
// Term is read from other goroutines while Run runs.
func (s *Supervisor) r() *maintenance.Runner {
	s.runnerOnce.Do(func() {
		services := []maintenance.Service{maintenance.StepRecovery(s.Counters, s.OnRecover), maintenance.RequestExpiry()}
		if s.Retention > 0 {
			services = append(services, maintenance.Retention(s.Retention))
		}
		s.runner = &maintenance.Runner{Driver: s.Driver, Clock: s.Clock, Log: s.Log, Lease: LeaseName, Instance: s.Instance,
			Interval: s.Interval, LeaseTTL: s.LeaseTTL, Batch: s.Batch, Services: services, Trace: s.Trace,
			Live: s.Live, IdleInterval: max(s.Interval, s.LeaseTTL/3)}
		if s.Counters != nil {
			s.runner.Recorder = s.Counters.Recorder
		}
	})
	return s.runner
}

// Wake has the supervisor look within an Interval: tasks were submitted
// or recovered, and may soon be held.
func (s *Supervisor) Wake() { s.r().Wake() }

// Term returns the term this supervisor leads in, 0 if it is not the leader.
func (s *Supervisor) Term() int64 { return s.r().Term() }

// Run renews the lease and sweeps every Interval until ctx ends, then resigns.
func (s *Supervisor) Run(ctx context.Context) error { return s.r().Run(ctx) }

// Sweep recovers expired tasks if this instance is the leader, in batches,
// and returns how many it handled. A non-leader does nothing.
func (s *Supervisor) Sweep(ctx context.Context) (int, error) {
	return s.r().RunService(ctx, maintenance.StepRecovery(s.Counters, s.OnRecover))
}

// Retain deletes final tasks older than Retention, in batches, if this
// instance leads; it returns how many it deleted.
func (s *Supervisor) Retain(ctx context.Context) (int, error) {
	if s.Retention <= 0 {
		return 0, nil
	}
	return s.r().RunService(ctx, maintenance.Retention(s.Retention))
}

// Acquire tries once to become (or stay) leader; for tests and tools.
func (s *Supervisor) Acquire(ctx context.Context) (int64, error) {
	return s.r().Elector().TryAcquire(ctx)
}
