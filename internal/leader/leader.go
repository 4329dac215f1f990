package leader

import (
	"context"
	"sync/atomic"
	"time"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/clock"
	"github.com/drover-run/drover/internal/instrument"
	"github.com/drover-run/drover/store"
)

// Elector tries to hold one named lease.
type Elector struct {
	Driver   store.Driver
	Clock    clock.Clock
	Name     string
	Instance string
	TTL      time.Duration
	// Recorder, when set, counts the times the lease is taken and lost.
	Recorder *instrument.Recorder

	term    atomic.Int64 // 0 when not leader
	expires atomic.Int64 // unix micro of our lease expiry
	// held is the last term acquired, kept through errors so Resign can
	// release a lease whose renewal failed (the release is conditional on
	// holder and term, so releasing a lost lease is harmless).
	held atomic.Int64
}

// Term returns the term this instance leads in, or 0 when it is not leader
// (or its lease ran out locally).
func (e *Elector) Term() int64 {
	t := e.term.Load()
	if t == 0 || !e.Clock.Now().Before(time.UnixMicro(e.expires.Load())) {
		return 0
	}
	return t
}

// TryAcquire takes or renews the lease and reports the term it leads in.
func (e *Elector) TryAcquire(ctx context.Context) (int64, error) {
	var (
		l  *dt.Lease
		ok bool
	)
	now := e.Clock.Now()
	err := e.Driver.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		var err error
		l, ok, err = x.LeaseAcquire(ctx, &store.LeaseAcquireParams{Name: e.Name, Holder: e.Instance, Now: now, TTL: e.TTL})
		return err
	})
	if err != nil {
		e.setTerm(0)
		return 0, err
	}
	if !ok {
		e.setTerm(0)
		return 0, nil
	}
	e.expires.Store(l.ExpiresAt.UnixMicro())
	e.held.Store(l.Term)
	e.setTerm(l.Term)
	return l.Term, nil
}

// setTerm sets the term led in, counting a change of leadership.
func (e *Elector) setTerm(t int64) {
	if old := e.term.Swap(t); old != t {
		switch {
		case old == 0:
			e.Recorder.LeaderChange(e.Name, true)
		case t == 0:
			e.Recorder.LeaderChange(e.Name, false)
		default: // another term of ours: lost and taken again in between
			e.Recorder.LeaderChange(e.Name, false)
			e.Recorder.LeaderChange(e.Name, true)
		}
	}
}

// Resign gives the lease up so another instance can take over at once.
func (e *Elector) Resign(ctx context.Context) error {
	e.setTerm(0)
	t := e.held.Swap(0)
	if t == 0 {
		return nil
	}
	return e.Driver.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		return x.LeaseRelease(ctx, &store.LeaseReleaseParams{Name: e.Name, Holder: e.Instance, Term: t})
	})
}
