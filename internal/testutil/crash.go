package testutil

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/drover-run/drover/store"
)

// CrashPoint is a store.Driver that makes one of its transactions fail:
// the At-th InTx (counting from 1) either rolls back after its work (a
// crash before COMMIT) or, with AfterCommit, commits and then reports
// failure (the connection died during COMMIT, so the caller cannot know
// it committed). Everything else is the real store. With At 0 it counts
// the transactions of a clean run (Calls).
type CrashPoint struct {
	store.Driver
	At          int64
	AfterCommit bool
	calls       atomic.Int64
	fired       atomic.Bool
}

// ErrCrash is the error of the transaction a CrashPoint fails.
var ErrCrash = errors.New("crash point")

// Calls is how many transactions InTx began.
func (c *CrashPoint) Calls() int64 { return c.calls.Load() }

// Fired reports whether the crash happened.
func (c *CrashPoint) Fired() bool { return c.fired.Load() }

// InTx runs fn in a transaction of the real store, failing the At-th.
func (c *CrashPoint) InTx(ctx context.Context, fn func(context.Context, store.Executor) error) error {
	n := c.calls.Add(1)
	if n != c.At {
		return c.Driver.InTx(ctx, fn)
	}
	c.fired.Store(true)
	if c.AfterCommit {
		if err := c.Driver.InTx(ctx, fn); err != nil {
			return err
		}
		return ErrCrash
	}
	return c.Driver.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		if err := fn(ctx, x); err != nil {
			return err
		}
		return ErrCrash
	})
}
