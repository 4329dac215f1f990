package testutil

import (
	"context"
	"sync"
	"testing"

	"github.com/drover-run/drover/store"
)

// HoldTx runs fn in a transaction of d and keeps the transaction open, with
// whatever fn locked, until release is called (at the latest when the test
// ends). release returns the transaction's error. HoldTx fails the test if
// fn fails; fn runs on another goroutine, so it must return errors, not
// call t.Fatal.
func HoldTx(t testing.TB, d store.Driver, fn func(context.Context, store.Executor) error) (release func() error) {
	t.Helper()
	locked, unblock, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		done <- d.InTx(context.Background(), func(ctx context.Context, x store.Executor) error {
			if err := fn(ctx, x); err != nil {
				return err
			}
			close(locked)
			<-unblock
			return nil
		})
	}()
	var (
		once sync.Once
		err  error
	)
	release = func() error {
		once.Do(func() {
			close(unblock)
			err = <-done
		})
		return err
	}
	select {
	case <-locked:
	case err := <-done:
		t.Fatalf("HoldTx: %v", err)
	}
	t.Cleanup(func() { _ = release() })
	return release
}
