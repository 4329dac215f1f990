package engine

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/agentrt"
	"github.com/drover-run/drover/internal/clock"
	"github.com/drover-run/drover/internal/flow"
	"github.com/drover-run/drover/internal/maintenance"
	"github.com/drover-run/drover/internal/notifier"
	"github.com/drover-run/drover/internal/scheduler"
	"github.com/drover-run/drover/internal/startstop"
	"github.com/drover-run/drover/internal/supervisor"
	"github.com/drover-run/drover/internal/tracing"
	"github.com/drover-run/drover/store"
)

// Config is what the engine runs.
type Config struct {
	Store store.Driver
	Clock clock.Clock
	Log   *slog.Logger
	// Instance is the process's instance ID; roles are named after it.
	Instance string
	// Counters receive what the roles do.
	Counters *flow.Counters
	// Fence checks the instance lease inside a scheduler's transaction.
	Fence func(ctx context.Context, x store.Executor, now time.Time) error

	// Schedulers is how many schedulers to run; 0 runs none.
	Schedulers   int
	ClaimBatch   int
	MaxInFlight  int
	PollInterval time.Duration
	// Live, when set, reports whether notifications reach this process
	// (notifier.Hub.Live): the roles then poll only as a slow fallback
	// and sleep until their next due time (see scheduler.Scheduler.Live).
	Live func() bool
	// NamespaceMaxInFlight caps the tasks of one namespace a scheduler
	// holds (flow.Machine.NamespaceMaxInFlight).
	NamespaceMaxInFlight int

	// Agents are the agents this process runs; none runs no agent runtime.
	Agents []agentrt.Spec
	// IsPermanent classifies agent errors.
	IsPermanent func(error) bool
	// StepRetry returns a step's own retry policy (agentrt.Runtime.StepRetry).
	StepRetry func(*dt.AgentRequest) *agentrt.Retry

	// Supervisor runs the supervisor role.
	Supervisor         bool
	SupervisorInterval time.Duration
	LeaseTTL           time.Duration
	Retention          time.Duration

	// Trace, when on, has every role record its spans.
	Trace *tracing.Tracer
}

// The agent runtime is the schedulers' fast path.
var _ scheduler.LocalAgents = (*agentrt.Runtime)(nil)

// Engine is a process's running roles.
type Engine struct {
	cfg        Config
	schedulers map[string]*scheduler.Scheduler
	order      []*scheduler.Scheduler // the schedulers, for Pick
	runtime    *agentrt.Runtime       // nil without agents
	supervisor *supervisor.Supervisor // nil without the role
	services   startstop.Group
}

// New builds the roles of cfg and wires them together: the fast path
// from the schedulers to the local agent runtime and back, and the
// supervisor's wake-ups of the schedulers. It starts nothing.
func New(cfg Config) *Engine {
	e := &Engine{cfg: cfg, schedulers: map[string]*scheduler.Scheduler{}}
	if len(cfg.Agents) > 0 {
		rt := agentrt.New(cfg.Store, cfg.Clock, cfg.Instance+"/agent", cfg.Log, cfg.Agents)
		rt.PollInterval, rt.Live = cfg.PollInterval, cfg.Live
		rt.IsPermanent = cfg.IsPermanent
		rt.StepRetry = cfg.StepRetry
		if cfg.Counters != nil {
			rt.Recorder = cfg.Counters.Recorder
		}
		rt.Trace = cfg.Trace
		e.runtime = rt
	}
	for i := range cfg.Schedulers {
		id := fmt.Sprintf("%s/scheduler-%d", cfg.Instance, i)
		m := &flow.Machine{Instance: id, Counters: cfg.Counters, NamespaceMaxInFlight: cfg.NamespaceMaxInFlight, Trace: cfg.Trace}
		s := scheduler.New(cfg.Store, cfg.Clock, m, cfg.Log)
		s.ClaimBatch, s.MaxInFlight, s.PollInterval = cfg.ClaimBatch, cfg.MaxInFlight, cfg.PollInterval
		s.Fence, s.Live = cfg.Fence, cfg.Live
		s.WakeMore = func() { e.wakeScheduler(s) }
		if rt := e.runtime; rt != nil {
			rt.FastPath = true
			s.UseLocalAgents(rt)
		}
		e.schedulers[id] = s
		e.order = append(e.order, s)
	}
	if rt := e.runtime; rt != nil {
		rt.Deliver = func(r *dt.AgentReply, sched string) bool {
			if s := e.schedulers[sched]; s != nil {
				return s.Deliver(r)
			}
			return false
		}
		e.services = append(e.services, &startstop.Func{Name: "agent", Run: rt.Run, Log: cfg.Log})
	}
	for _, s := range e.order {
		e.services = append(e.services, &startstop.Func{Name: "scheduler " + s.Machine.Instance, Log: cfg.Log,
			Run: func(ctx context.Context) error {
				// Claim once the local agents take requests, so that the
				// first dispatches take the fast path, not the queue.
				if rt := e.runtime; rt != nil {
					select {
					case <-rt.Ready():
					case <-ctx.Done():
						return nil
					}
				}
				return s.Run(ctx)
			}})
	}
	if cfg.Supervisor {
		sv := supervisor.New(cfg.Store, cfg.Clock, cfg.Instance+"/supervisor", cfg.Log, cfg.Counters)
		sv.Interval, sv.LeaseTTL, sv.Retention = cfg.SupervisorInterval, cfg.LeaseTTL, cfg.Retention
		sv.OnRecover = e.WakeSchedulers
		sv.Trace, sv.Live = cfg.Trace, cfg.Live
		e.supervisor = sv
		e.services = append(e.services, &startstop.Func{Name: "supervisor", Run: sv.Run, Log: cfg.Log})
		// Session queues' dedupe entries expire under their own lease, which
		// processes running only session queues (package convoy) take too.
		dedupe := &maintenance.Runner{Driver: cfg.Store, Clock: cfg.Clock, Log: cfg.Log, Lease: maintenance.DedupeLease,
			Instance: cfg.Instance + "/maintenance", Interval: cfg.SupervisorInterval, LeaseTTL: cfg.LeaseTTL,
			Services: []maintenance.Service{maintenance.DedupeExpiry()}, Live: cfg.Live}
		if cfg.Counters != nil {
			dedupe.Recorder = cfg.Counters.Recorder
		}
		e.services = append(e.services, &startstop.Func{Name: "dedupe expiry", Run: dedupe.Run, Log: cfg.Log})
	}
	return e
}

// Start starts every role: the agent runtime first, so that the
// schedulers' first dispatches find it.
func (e *Engine) Start(ctx context.Context) error { return e.services.Start(ctx) }

// Stop stops every role and waits for them. Agent calls in flight run on
// until they finish or reach their CompleteBy.
func (e *Engine) Stop() { e.services.Stop() }

// Runtime returns the agent runtime, nil if the process runs no agents.
func (e *Engine) Runtime() *agentrt.Runtime { return e.runtime }

// NamespaceHeld returns the tasks of each namespace the schedulers hold
// (flow.Machine.NamespaceHeld), summed.
func (e *Engine) NamespaceHeld() map[string]int {
	out := map[string]int{}
	for _, s := range e.order {
		for ns, n := range s.Machine.NamespaceHeld() {
			out[ns] += n
		}
	}
	return out
}

// SupervisorTerm returns the term the supervisor leads in, or 0.
func (e *Engine) SupervisorTerm() int64 {
	if e.supervisor == nil {
		return 0
	}
	return e.supervisor.Term()
}

// WakeFor wakes the roles a notification topic concerns.
func (e *Engine) WakeFor(t notifier.Topic) {
	rt := e.runtime
	switch t.Kind {
	case notifier.Tasks:
		e.WakeSchedulers() // and the supervisor
	case notifier.Requests:
		if rt != nil && rt.Has(t.Name) {
			rt.Wake()
		}
	case notifier.Replies:
		if s := e.schedulers[t.Name]; s != nil {
			s.WakeReplies()
		}
	case notifier.Queue, notifier.Events:
		// Session-queue publishes (package convoy) and events for
		// webhooks are no work for the task roles; convoy's consumers
		// and the webhook dispatcher subscribe themselves.
	default: // notifier.All
		for _, s := range e.order {
			s.WakeReplies()
		}
		e.wakeSupervisor()
		if rt != nil {
			rt.Wake()
		}
	}
}

// wakeSupervisor has the supervisor look soon: tasks may be held.
func (e *Engine) wakeSupervisor() {
	if e.supervisor != nil {
		e.supervisor.Wake()
	}
}

// WakeSchedulers tells the schedulers that new tasks wait. It wakes one
// (scheduler.Pick): waking all would make the others run empty claims for
// a task one of them gets. A scheduler whose claim comes back full, or
// whose transaction failed, wakes the next, so a backlog still reaches
// all of them.
func (e *Engine) WakeSchedulers() {
	e.wakeScheduler(nil)
	e.wakeSupervisor()
}

// wakeScheduler wakes the scheduler scheduler.Pick chooses, other than
// except.
func (e *Engine) wakeScheduler(except *scheduler.Scheduler) {
	if s := scheduler.Pick(e.order, except); s != nil {
		s.Wake()
	}
}
