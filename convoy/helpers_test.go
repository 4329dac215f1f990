package convoy_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/drover-run/drover/convoy"
	"github.com/drover-run/drover/internal/clock"
	"github.com/drover-run/drover/internal/testutil"
	"github.com/drover-run/drover/store"
	"github.com/drover-run/drover/store/postgres"
	"github.com/drover-run/drover/store/sqlite"
)

// drivers runs fn, in parallel, on a fresh SQLite store and a fresh
// PostgreSQL schema.
func drivers(t *testing.T, fn func(t *testing.T, d store.Driver)) {
	t.Helper()
	eachDriver(t, true, fn)
}

func eachDriver(t *testing.T, parallel bool, fn func(t *testing.T, d store.Driver)) {
	t.Helper()
	t.Run("sqlite", func(t *testing.T) {
		if parallel {
			t.Parallel()
		}
		fn(t, testutil.SQLite(t))
	})
	t.Run("postgres", func(t *testing.T) {
		if parallel {
			t.Parallel()
		}
		fn(t, testutil.Postgres(t))
	})
}

// secondDriver opens another driver on the same store, as another process
// would.
func secondDriver(t *testing.T, d store.Driver) store.Driver {
	t.Helper()
	ctx := context.Background()
	switch d := d.(type) {
	case *sqlite.Driver:
		d2, err := sqlite.Open(ctx, d.Path(), sqlite.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d2.Close() })
		return d2
	case *postgres.Driver:
		d2, err := postgres.Open(ctx, testutil.PostgresURL(t), postgres.Options{Schema: d.Schema()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d2.Close() })
		return d2
	}
	t.Fatalf("unknown driver %T", d)
	return nil
}

type clientOpt func(*convoy.Config)

func withClock(c convoy.Clock) clientOpt { return func(cfg *convoy.Config) { cfg.Clock = c } }
func withPoll(d time.Duration) clientOpt { return func(cfg *convoy.Config) { cfg.PollInterval = d } }
func withID(id string) clientOpt         { return func(cfg *convoy.Config) { cfg.InstanceID = id } }

func newClient(t *testing.T, d store.Driver, opts ...clientOpt) *convoy.Client {
	t.Helper()
	cfg := convoy.Config{Store: d, PollInterval: 10 * time.Millisecond}
	for _, o := range opts {
		o(&cfg)
	}
	c, err := convoy.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func fakeClock() *clock.Fake { return clock.NewFake(time.Now()) }

// waitFor polls cond until it holds, failing the test after 30s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	waitForWithin(t, what, 30*time.Second, cond)
}

// waitForWithin is waitFor with its own limit, for waits whose length
// grows with the work (a scale test on a loaded machine).
func waitForWithin(t *testing.T, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// recv waits for a value on ch, failing the test after 30s.
func recv[T any](t *testing.T, what string, ch <-chan T) T {
	t.Helper()
	return recvWithin(t, what, 30*time.Second, ch)
}

// recvWithin is recv with its own limit, for a value that must come
// sooner than a fallback poll would bring it.
func recvWithin[T any](t *testing.T, what string, limit time.Duration, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(limit):
		t.Fatalf("timed out after %v waiting for %s", limit, what)
		panic("unreachable")
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func publish(t *testing.T, c *convoy.Client, queue string, msgs ...convoy.Message) []convoy.Published {
	t.Helper()
	out, err := c.Publish(context.Background(), queue, msgs...)
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	return out
}

// msgs returns n messages of session, bodies "<session>:1" … "<session>:n".
func msgs(session string, n int) []convoy.Message {
	out := make([]convoy.Message, n)
	for i := range out {
		out[i] = convoy.Message{SessionID: session, Body: fmt.Appendf(nil, "%s:%d", session, i+1)}
	}
	return out
}

func peek(t *testing.T, c *convoy.Client, queue, session string) []*convoy.StoredMessage {
	t.Helper()
	ms, err := c.Peek(context.Background(), queue, session, 0, 100000)
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

func session(t *testing.T, c *convoy.Client, queue, id string) *convoy.Session {
	t.Helper()
	s, err := c.Session(context.Background(), queue, id)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// beginTx opens an application transaction on the store's database: a
// *sql.Tx on the SQLite file, a pgx.Tx on PostgreSQL.
func beginTx(t *testing.T, d store.Driver) (tx any, commit, rollback func() error) {
	t.Helper()
	ctx := context.Background()
	switch d := d.(type) {
	case *sqlite.Driver:
		tx, err := d.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		return tx, tx.Commit, tx.Rollback
	case *postgres.Driver:
		tx, err := d.Pool().Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return tx, func() error { return tx.Commit(ctx) }, func() error { return tx.Rollback(ctx) }
	}
	t.Fatalf("unknown driver %T", d)
	return nil, nil, nil
}

// errorLog collects the errors a processor reports.
type errorLog struct {
	mu   sync.Mutex
	errs []error
}

func (l *errorLog) add(err error) {
	l.mu.Lock()
	l.errs = append(l.errs, err)
	l.mu.Unlock()
}

func (l *errorLog) all() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]error(nil), l.errs...)
}

func (l *errorLog) count(target error) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, e := range l.errs {
		if errors.Is(e, target) {
			n++
		}
	}
	return n
}

func startProcessor(t *testing.T, p *convoy.Processor) {
	t.Helper()
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := p.Stop(ctx); err != nil {
			t.Errorf("stop processor: %v", err)
		}
	})
}

func newTestSQLite(t *testing.T) *sqlite.Driver { return testutil.SQLite(t) }

// beginTxNoT is beginTx for goroutines other than the test's.
func beginTxNoT(d store.Driver) (tx any, commit, rollback func() error) {
	ctx := context.Background()
	switch d := d.(type) {
	case *sqlite.Driver:
		tx, err := d.DB().BeginTx(ctx, nil)
		if err != nil {
			panic(err)
		}
		return tx, tx.Commit, tx.Rollback
	case *postgres.Driver:
		tx, err := d.Pool().Begin(ctx)
		if err != nil {
			panic(err)
		}
		return tx, func() error { return tx.Commit(ctx) }, func() error { return tx.Rollback(ctx) }
	}
	panic(fmt.Sprintf("unknown driver %T", d))
}

func itoa(i int) string { return fmt.Sprint(i) }
