package maintenance

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/drover-run/drover/internal/clock"
	"github.com/drover-run/drover/internal/flow"
	"github.com/drover-run/drover/internal/instrument"
	"github.com/drover-run/drover/internal/leader"
	"github.com/drover-run/drover/internal/logattr"
	"github.com/drover-run/drover/internal/tracing"
	"github.com/drover-run/drover/store"
)

// Leases of the chores that do not run under the supervisor's.
const (
	// DedupeLease: the expiry of session-queue dedupe entries.
	DedupeLease = "maintenance:dedupe"
	// WebhookLease: the retention of webhook deliveries.
	WebhookLease = "maintenance:webhooks"
)

// Service is one chore: Step handles up to limit items in the caller's
// transaction, fenced by sv (its CheckLeader first), and returns how many.
type Service struct {
	Name string
	Step func(ctx context.Context, x store.Executor, sv *flow.Leader, now time.Time, limit int) (int, error)
	// Counters, when set, receive the counts of Step's committed batches
	// (flow.Leader.Commit).
	Counters *flow.Counters
	// After is called after a batch that handled items (for example to
	// wake the schedulers).
	After func()
}

// StepRecovery recovers held tasks whose CompleteBy passed
// (flow.Leader.Sweep), counting into counters; after each batch that
// recovered tasks it calls onRecover.
func StepRecovery(counters *flow.Counters, onRecover func()) Service {
	return Service{Name: "step recovery", Counters: counters, After: onRecover,
		Step: func(ctx context.Context, x store.Executor, sv *flow.Leader, now time.Time, limit int) (int, error) {
			return sv.Sweep(ctx, x, now, limit)
		}}
}

// RequestExpiry deletes the requests nobody answered, a while
// (flow.RequestGrace) after their CompleteBy: their steps have been
// recovered by then (flow.Leader.ExpireRequests).
func RequestExpiry() Service {
	return Service{Name: "request expiry",
		Step: func(ctx context.Context, x store.Executor, sv *flow.Leader, now time.Time, limit int) (int, error) {
			return sv.ExpireRequests(ctx, x, now, limit)
		}}
}

// Retention deletes final tasks last updated more than age ago, with
// their history (flow.Leader.Retain).
func Retention(age time.Duration) Service {
	return Service{Name: "retention",
		Step: func(ctx context.Context, x store.Executor, sv *flow.Leader, now time.Time, limit int) (int, error) {
			return sv.Retain(ctx, x, now, age, limit)
		}}
}

// DedupeExpiry deletes the session-queue de-duplication entries whose
// window has passed (flow.Leader.ForgetDedupe); without it they would
// pile up for ever.
func DedupeExpiry() Service {
	return Service{Name: "dedupe expiry",
		Step: func(ctx context.Context, x store.Executor, sv *flow.Leader, now time.Time, limit int) (int, error) {
			return sv.ForgetDedupe(ctx, x, now, limit)
		}}
}

// WebhookRetention deletes delivered and failed webhook deliveries last
// updated more than age ago.
func WebhookRetention(age time.Duration) Service {
	return Service{Name: "webhook retention",
		Step: func(ctx context.Context, x store.Executor, sv *flow.Leader, now time.Time, limit int) (int, error) {
			if err := sv.CheckLeader(ctx, x, now); err != nil {
				return 0, err
			}
			return x.WebhookDeliveryDeleteFinished(ctx, &store.WebhookDeliveryDeleteFinishedParams{Before: now.Add(-age), Limit: limit})
		}}
}

// Runner runs services while it holds Lease.
type Runner struct {
	Driver   store.Driver
	Clock    clock.Clock
	Log      *slog.Logger
	Lease    string
	Instance string
	// Interval between rounds of the services. Default 1s.
	Interval time.Duration
	// LeaseTTL is how long leadership lasts unrenewed. Default 10s.
	LeaseTTL time.Duration
	// Tick is how often, in real time, Run renews the lease and looks
	// whether Interval has passed on Clock. Default: Interval or
	// LeaseTTL/3, the shorter.
	Tick time.Duration
	// Batch caps the items of one transaction. Default 500.
	Batch    int
	Services []Service
	// Recorder, when set, counts the lease's changes of leader.
	Recorder *instrument.Recorder
	// Trace, when on, records the spans of the services' transactions
	// (the supervisor's recoveries).
	Trace *tracing.Tracer

	electorOnce sync.Once
	elector     *leader.Elector
}

func (r *Runner) defaults() {
	if r.Interval <= 0 {
		r.Interval = time.Second
	}
	if r.LeaseTTL <= 0 {
		r.LeaseTTL = 10 * time.Second
	}
	if r.Batch <= 0 {
		r.Batch = 500
	}
	if r.Tick <= 0 {
		r.Tick = min(r.Interval, r.LeaseTTL/3)
	}
}

// Elector returns the runner's lease elector, created on first use (after
// the caller set LeaseTTL), once: Term is read while Run runs.
func (r *Runner) Elector() *leader.Elector {
	r.electorOnce.Do(func() {
		r.defaults()
		r.elector = &leader.Elector{Driver: r.Driver, Clock: r.Clock, Name: r.Lease, Instance: r.Instance, TTL: r.LeaseTTL, Recorder: r.Recorder}
	})
	return r.elector
}

// Term returns the term the runner leads in, 0 if it does not lead.
func (r *Runner) Term() int64 { return r.Elector().Term() }

// Run renews the lease and runs every service each Interval until ctx
// ends, then resigns.
func (r *Runner) Run(ctx context.Context) error {
	el := r.Elector()
	ticker := time.NewTicker(r.Tick)
	defer ticker.Stop()
	var last time.Time
	for {
		if _, err := el.TryAcquire(ctx); err != nil && ctx.Err() == nil {
			r.Log.Warn("maintenance lease", "lease", r.Lease, "instance", r.Instance, "err", err)
		}
		// A round counts only while leading: a lease that ran out between
		// its renewal and now (a clock moved on) is renewed at the next
		// tick, and the round runs then.
		if now := r.Clock.Now(); now.Sub(last) >= r.Interval && r.Term() != 0 {
			last = now
			for _, s := range r.Services {
				if _, err := r.RunService(ctx, s); err != nil && ctx.Err() == nil {
					r.Log.Warn("maintenance", "service", s.Name, "instance", r.Instance, "err", err)
				}
			}
		}
		select {
		case <-ctx.Done():
			_ = el.Resign(context.WithoutCancel(ctx))
			return nil
		case <-ticker.C:
		}
	}
}

// RunService runs s once, one transaction per batch, until a batch
// handles fewer than Batch items or the runner no longer leads; it
// returns how many items it handled. A runner that does not lead does
// nothing.
func (r *Runner) RunService(ctx context.Context, s Service) (int, error) {
	r.Elector()
	total := 0
	for {
		term := r.Term()
		if term == 0 {
			return total, nil
		}
		sv := &flow.Leader{Instance: r.Instance, Term: term, Lease: r.Lease, Counters: s.Counters, Trace: r.Trace}
		var n int
		err := r.Driver.InTx(ctx, func(ctx context.Context, x store.Executor) error {
			var err error
			n, err = s.Step(ctx, x, sv, r.Clock.Now(), r.Batch)
			return err
		})
		if s.Counters != nil || r.Trace.On() {
			if err != nil {
				sv.Discard()
			} else {
				sv.Commit()
			}
		}
		if err == nil {
			for i, e := range sv.Recovered {
				attrs := append(logattr.StepAttempt(e.TaskID, e.StepIndex, e.Attempt), "instance", r.Instance, "detail", e.Message)
				if i < len(sv.RecoveredTrace) {
					attrs = append(attrs, logattr.TraceOf(sv.RecoveredTrace[i])...)
				}
				r.Log.Info("supervisor recovered a step whose deadline passed", attrs...)
			}
		}
		if errors.Is(err, flow.ErrNotLeader) {
			return total, nil
		}
		if err != nil {
			return total, err
		}
		total += n
		if n > 0 && s.After != nil {
			s.After()
		}
		if n < r.Batch {
			return total, nil
		}
	}
}
