package testutil

import (
	"context"
	"errors"
	"sync/atomic"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/store"
)

// ErrProcessCrash is the error of every transaction of a ProcessCrash from its crash on.
var ErrProcessCrash = errors.New("process crashed")

// ProcessCrash is a store.Driver whose process crashes at its At-th writing
// transaction (one that stored or changed a task, step, request or reply;
// counting from 1): before the commit (the transaction rolls back), or,
// with AfterCommit, after it (the commit happened, the caller never
// learned it). From then on every transaction fails, as nothing runs in a
// dead process. Reads and everything else are the real store's. With At 0
// it never crashes and counts the writing transactions of a clean run.
type ProcessCrash struct {
	store.Driver
	At          int64
	AfterCommit bool
	writes      atomic.Int64
	fired       atomic.Bool
}

// Writes is how many writing transactions committed or crashed.
func (c *ProcessCrash) Writes() int64 { return c.writes.Load() }

// Fired reports whether the crash happened.
func (c *ProcessCrash) Fired() bool { return c.fired.Load() }

// InTx implements store.Driver.
func (c *ProcessCrash) InTx(ctx context.Context, fn func(context.Context, store.Executor) error) error {
	if c.fired.Load() {
		return ErrProcessCrash
	}
	var n int64
	err := c.Driver.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		spy := &writeSpy{Executor: x}
		if err := fn(ctx, spy); err != nil || !spy.wrote {
			return err
		}
		n = c.writes.Add(1)
		if n == c.At && !c.AfterCommit {
			c.fired.Store(true)
			return ErrProcessCrash
		}
		return nil
	})
	if err == nil && n == c.At && c.AfterCommit {
		c.fired.Store(true)
		return ErrProcessCrash
	}
	return err
}

// writeSpy notes whether a transaction wrote the state of work; it passes
// every call on, optional capabilities included (through the store's
// functions, which fall back as for any Executor).
type writeSpy struct {
	store.Executor
	wrote bool
}

func (w *writeSpy) TaskInsertMany(ctx context.Context, p *store.TaskInsertManyParams) ([]bool, error) {
	w.wrote = true
	return w.Executor.TaskInsertMany(ctx, p)
}

func (w *writeSpy) TaskUpdateMany(ctx context.Context, p *store.TaskUpdateManyParams) error {
	w.wrote = w.wrote || len(p.Tasks) > 0
	return w.Executor.TaskUpdateMany(ctx, p)
}

func (w *writeSpy) StepUpdateMany(ctx context.Context, p *store.StepUpdateManyParams) error {
	w.wrote = w.wrote || len(p.Steps) > 0
	return w.Executor.StepUpdateMany(ctx, p)
}

func (w *writeSpy) RequestInsertMany(ctx context.Context, p *store.RequestInsertManyParams) error {
	w.wrote = w.wrote || len(p.Requests) > 0
	return w.Executor.RequestInsertMany(ctx, p)
}

func (w *writeSpy) ReplyInsertMany(ctx context.Context, p *store.ReplyInsertManyParams) error {
	w.wrote = w.wrote || len(p.Replies) > 0
	return w.Executor.ReplyInsertMany(ctx, p)
}

func (w *writeSpy) ReplyTake(ctx context.Context, p *store.ReplyTakeParams) ([]*dt.AgentReply, error) {
	r, err := w.Executor.ReplyTake(ctx, p)
	w.wrote = w.wrote || len(r) > 0
	return r, err
}

func (w *writeSpy) RequestClaim(ctx context.Context, p *store.RequestClaimParams) ([]*dt.AgentRequest, error) {
	r, err := w.Executor.RequestClaim(ctx, p)
	w.wrote = w.wrote || len(r) > 0
	return r, err
}

func (w *writeSpy) Notify(ctx context.Context, p *store.NotifyParams) error {
	return store.Notify(ctx, w.Executor, p)
}

func (w *writeSpy) TaskGetAndClaim(ctx context.Context, p *store.TaskGetAndClaimParams) (store.GetAndClaim, error) {
	return store.TaskGetAndClaim(ctx, w.Executor, p)
}

func (w *writeSpy) TaskClaimWithSteps(ctx context.Context, p *store.TaskClaimParams) ([]*dt.Task, []*dt.StepRecord, error) {
	return store.TaskClaimWithSteps(ctx, w.Executor, p)
}
