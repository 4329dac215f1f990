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
	"github.com/drover-run/drover/internal/notifier"
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
	// Next, when set, tells when the service has work next, as far as the
	// store shows: the Runner calls it in the transaction of the last
	// batch of a run that handled nothing, and while notifications arrive
	// (Runner.Live) it runs the service again an Interval after that time
	// (a zero time: after IdleInterval), instead of every Interval.
	Next func(ctx context.Context, x store.Executor, now time.Time) (time.Time, error)
}

// StepRecovery recovers held tasks whose CompleteBy passed
// (flow.Leader.Sweep), counting into counters; after each batch that
// recovered tasks it calls onRecover.
//
// Its Next: now while any task is held, since a scheduler may start a
// step with a short deadline at any moment; else when the next delayed
// task becomes available (claimed then, it is held). Tasks that
// another process starts in its Submit's transaction (an eager start)
// notify no one: while none are held, the service runs every quiet
// interval (Runner.IdleInterval) to see them.
func StepRecovery(counters *flow.Counters, onRecover func()) Service {
	return Service{Name: "step recovery", Counters: counters, After: onRecover,
		Step: func(ctx context.Context, x store.Executor, sv *flow.Leader, now time.Time, limit int) (int, error) {
			return sv.Sweep(ctx, x, now, limit)
		},
		Next: func(ctx context.Context, x store.Executor, now time.Time) (time.Time, error) {
			held, err := x.TaskListExpired(ctx, &store.TaskListExpiredParams{Now: farFuture, Limit: 1, Peek: true})
			if err != nil || len(held) > 0 {
				return now, err
			}
			return x.TaskNextAvailable(ctx, &store.TaskNextAvailableParams{Now: now, Limit: 1000})
		}}
}

// farFuture is after every deadline.
var farFuture = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

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
	// Tick is how often, in real time, Run looks whether a service is due
	// on Clock. Default: Interval or LeaseTTL/3, the shorter. The lease is
	// renewed every LeaseTTL/3 (or Tick, the longer).
	Tick time.Duration
	// Live, when set, reports whether notifications reach this process
	// (notifier.Hub.Live). While they do, and Clock is the real one, a
	// service that found nothing to do runs again only after IdleInterval,
	// or an Interval after its Next time, or an Interval after Wake.
	Live func() bool
	// IdleInterval is how often a service with nothing to do runs while
	// Live. Default: Interval or 30s, the longer.
	IdleInterval time.Duration
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
	wake        chan struct{}
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
	if r.IdleInterval <= 0 {
		r.IdleInterval = max(r.Interval, 30*time.Second)
	}
	r.IdleInterval = max(r.IdleInterval, r.Interval) // an idle service never runs more often than a busy one
}

// Elector returns the runner's lease elector, created on first use (after
// the caller set LeaseTTL), once: Term is read while Run runs.
func (r *Runner) Elector() *leader.Elector {
	r.electorOnce.Do(func() {
		r.defaults()
		r.wake = make(chan struct{}, 1)
		r.elector = &leader.Elector{Driver: r.Driver, Clock: r.Clock, Name: r.Lease, Instance: r.Instance, TTL: r.LeaseTTL, Recorder: r.Recorder}
	})
	return r.elector
}

// Term returns the term the runner leads in, 0 if it does not lead.
func (r *Runner) Term() int64 { return r.Elector().Term() }

// Wake has the services run within an Interval (work may have started
// that their Next did not foresee: a submit, say). Safe to call from any
// goroutine, before Run too.
func (r *Runner) Wake() {
	r.Elector()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Run renews the lease every LeaseTTL/3 and runs the services while it
// leads, each every Interval (while Live, less often when idle: see
// IdleInterval), until ctx ends, then resigns.
func (r *Runner) Run(ctx context.Context) error {
	el := r.Elector()
	ticker := time.NewTicker(r.Tick)
	defer ticker.Stop()
	var renewed time.Time                     // real time
	due := make([]time.Time, len(r.Services)) // on Clock: when each service runs next
	for {
		// A failed try is tried again at the next tick.
		if time.Since(renewed) >= max(r.LeaseTTL/3, r.Tick) {
			if _, err := el.TryAcquire(ctx); err != nil && ctx.Err() == nil {
				r.Log.Warn("maintenance lease", "lease", r.Lease, "instance", r.Instance, "err", err)
			} else {
				renewed = time.Now()
			}
		}
		// A round counts only while leading: a lease that ran out between
		// its renewal and now (a clock moved on) is renewed at its next
		// renewal, and the round runs then.
		now := r.Clock.Now()
		if r.Term() != 0 {
			live := notifier.Relied(r.Clock, r.Live)
			for i, s := range r.Services {
				if now.Before(due[i]) {
					continue
				}
				n, next, err := r.runService(ctx, s)
				if err != nil && ctx.Err() == nil {
					r.Log.Warn("maintenance", "service", s.Name, "instance", r.Instance, "err", err)
				}
				due[i] = r.nextRun(now, live, n, next, err)
			}
		} else {
			clear(due)
		}
		select {
		case <-ctx.Done():
			_ = el.Resign(context.WithoutCancel(ctx))
			return nil
		case <-ticker.C:
		case <-r.wake:
			// Within an Interval, not at once: what woke us (a task
			// submitted, say) is being claimed meanwhile.
			soon := r.Clock.Now().Add(r.Interval)
			for i := range due {
				if due[i].After(soon) {
					due[i] = soon
				}
			}
		}
	}
}

// nextRun is when a service that ran at now, handled n items and said its
// work is next at next (zero: none known) runs again.
func (r *Runner) nextRun(now time.Time, live bool, n int, next time.Time, err error) time.Time {
	switch {
	case !live || n > 0 || err != nil:
		return now.Add(r.Interval)
	case next.IsZero():
		return now.Add(r.IdleInterval)
	}
	// An Interval after its work is due (at least one from now).
	return now.Add(notifier.Until(now, r.Interval, r.IdleInterval, next.Add(r.Interval)))
}

// RunService runs s once, one transaction per batch, until a batch
// handles fewer than Batch items or the runner no longer leads; it
// returns how many items it handled. A runner that does not lead does
// nothing.
func (r *Runner) RunService(ctx context.Context, s Service) (int, error) {
	n, _, err := r.runService(ctx, s)
	return n, err
}

// runService is RunService that also returns the service's Next time,
// read when the run handled nothing (zero otherwise, or without Next).
func (r *Runner) runService(ctx context.Context, s Service) (total int, next time.Time, err error) {
	r.Elector()
	for {
		term := r.Term()
		if term == 0 {
			return total, time.Time{}, nil
		}
		sv := &flow.Leader{Instance: r.Instance, Term: term, Lease: r.Lease, Counters: s.Counters, Trace: r.Trace}
		var n int
		err := r.Driver.InTx(ctx, func(ctx context.Context, x store.Executor) error {
			now := r.Clock.Now()
			var err error
			n, err = s.Step(ctx, x, sv, now, r.Batch)
			if err == nil && n == 0 && total == 0 && s.Next != nil {
				next, err = s.Next(ctx, x, now)
			}
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
			return total, time.Time{}, nil
		}
		if err != nil {
			return total, time.Time{}, err
		}
		total += n
		if n > 0 && s.After != nil {
			s.After()
		}
		if n < r.Batch {
			return total, next, nil
		}
	}
}
