// Package clienttest starts drover clients for tests. It is apart from
// internal/testutil because the root package's own tests use testutil,
// which therefore cannot import the root package.
package clienttest

import (
	"context"
	"testing"
	"time"

	"github.com/drover-run/drover"
)

// Start creates and starts a drover client from cfg; it is stopped when
// the test ends.
func Start(t testing.TB, cfg drover.Config) *drover.Client {
	t.Helper()
	c, err := drover.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Stop(ctx)
	})
	return c
}
