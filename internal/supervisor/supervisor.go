// Package supervisor is the Supervisor role: periodically, and only while it
// is the elected leader, it finds tasks whose CompleteBy has passed and asks
// for their recovery (retry, Error with an alert, or compensation). It knows
// no business logic: thresholds and policies come from the task record.
package supervisor

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/drover-run/drover/internal/clock"
	"github.com/drover-run/drover/internal/flow"
	"github.com/drover-run/drover/internal/leader"
	"github.com/drover-run/drover/store"
)

// LeaseName is the lease the supervisors compete for.
const LeaseName = "supervisor"

// Supervisor is one supervisor instance.
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

	electorOnce sync.Once
	elector     *leader.Elector
}

// New returns a supervisor.
func New(d store.Driver, c clock.Clock, instance string, log *slog.Logger, counters *flow.Counters) *Supervisor {
	s := &Supervisor{Driver: d, Clock: c, Instance: instance, Log: log, Counters: counters,
		Interval: time.Second, LeaseTTL: 10 * time.Second, Batch: 500}
	return s
}

// el creates the elector on first use (after the caller set LeaseTTL), once:
// Term is read from other goroutines while Run runs.
func (s *Supervisor) el() *leader.Elector {
	s.electorOnce.Do(func() {
		s.elector = &leader.Elector{Driver: s.Driver, Clock: s.Clock, Name: LeaseName, Instance: s.Instance, TTL: s.LeaseTTL}
	})
	return s.elector
}

// Term returns the term this supervisor leads in, 0 if it is not the leader.
func (s *Supervisor) Term() int64 { return s.el().Term() }

// Run renews the lease and sweeps every Interval until ctx ends, then resigns.
func (s *Supervisor) Run(ctx context.Context) error {
	renew := min(s.Interval, s.LeaseTTL/3)
	ticker := time.NewTicker(renew)
	defer ticker.Stop()
	var lastSweep time.Time
	for {
		if _, err := s.el().TryAcquire(ctx); err != nil && ctx.Err() == nil {
			s.Log.Warn("supervisor lease", "instance", s.Instance, "err", err)
		}
		if now := s.Clock.Now(); now.Sub(lastSweep) >= s.Interval {
			lastSweep = now
			if _, err := s.Sweep(ctx); err != nil && ctx.Err() == nil {
				s.Log.Warn("supervisor sweep", "instance", s.Instance, "err", err)
			}
			if _, err := s.Retain(ctx); err != nil && ctx.Err() == nil {
				s.Log.Warn("supervisor retention", "instance", s.Instance, "err", err)
			}
			if _, err := s.ForgetDedupe(ctx); err != nil && ctx.Err() == nil {
				s.Log.Warn("supervisor dedupe cleanup", "instance", s.Instance, "err", err)
			}
		}
		select {
		case <-ctx.Done():
			_ = s.el().Resign(context.WithoutCancel(ctx))
			return nil
		case <-ticker.C:
		}
	}
}

// Sweep recovers expired tasks if this instance is the leader, in batches,
// and returns how many it handled. A non-leader does nothing.
func (s *Supervisor) Sweep(ctx context.Context) (int, error) {
	total := 0
	for {
		term := s.Term()
		if term == 0 {
			return total, nil
		}
		sv := &flow.Supervisor{Instance: s.Instance, Term: term, Lease: LeaseName, Counters: s.Counters}
		var n int
		err := s.Driver.InTx(ctx, func(ctx context.Context, x store.Executor) error {
			var err error
			n, err = sv.Sweep(ctx, x, s.Clock.Now(), s.Batch)
			return err
		})
		if err != nil {
			sv.Discard()
		} else {
			sv.Commit()
		}
		if errors.Is(err, flow.ErrNotLeader) {
			return total, nil
		}
		if err != nil {
			return total, err
		}
		total += n
		if n > 0 && s.OnRecover != nil {
			s.OnRecover()
		}
		if n < s.Batch {
			return total, nil
		}
	}
}

// Retain deletes final tasks older than Retention, in batches, if this
// instance leads; it returns how many it deleted.
func (s *Supervisor) Retain(ctx context.Context) (int, error) {
	if s.Retention <= 0 {
		return 0, nil
	}
	return s.inBatches(ctx, func(ctx context.Context, sv *flow.Supervisor, x store.Executor) (int, error) {
		return sv.Retain(ctx, x, s.Clock.Now(), s.Retention, s.Batch)
	})
}

// ForgetDedupe deletes the session-queue de-duplication entries whose
// window has passed, in batches, if this instance leads; it returns how many
// it deleted. Without it the entries would pile up for ever.
func (s *Supervisor) ForgetDedupe(ctx context.Context) (int, error) {
	return s.inBatches(ctx, func(ctx context.Context, sv *flow.Supervisor, x store.Executor) (int, error) {
		return sv.ForgetDedupe(ctx, x, s.Clock.Now(), s.Batch)
	})
}

// inBatches runs one leader-only clean-up step per transaction until a step
// handles fewer than Batch items or this instance no longer leads.
func (s *Supervisor) inBatches(ctx context.Context, step func(context.Context, *flow.Supervisor, store.Executor) (int, error)) (int, error) {
	total := 0
	for {
		term := s.Term()
		if term == 0 {
			return total, nil
		}
		sv := &flow.Supervisor{Instance: s.Instance, Term: term, Lease: LeaseName}
		var n int
		err := s.Driver.InTx(ctx, func(ctx context.Context, x store.Executor) error {
			var err error
			n, err = step(ctx, sv, x)
			return err
		})
		if errors.Is(err, flow.ErrNotLeader) {
			return total, nil
		}
		if err != nil {
			return total, err
		}
		total += n
		if n < s.Batch {
			return total, nil
		}
	}
}

// Acquire tries once to become (or stay) leader; for tests and tools.
func (s *Supervisor) Acquire(ctx context.Context) (int64, error) { return s.el().TryAcquire(ctx) }
