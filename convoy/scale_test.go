package convoy_test

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drover-run/drover/convoy"
	"github.com/drover-run/drover/store"
)

// Sessions appear at run time without configuration; idle sessions
// cost no goroutine; 100,000 sessions with pending messages are processed
// by a processor holding at most MaxSessions of them at a time. (20,000
// under the race detector, which slows everything tenfold; -short: 5,000.)
// Not parallel: it counts the process's goroutines.
func TestManySessions(t *testing.T) {
	eachDriver(t, false, func(t *testing.T, d store.Driver) {
		n := 100_000
		if raceEnabled {
			n = 20_000
		}
		if testing.Short() {
			n = 5_000
		}
		c := newClient(t, d)
		ctx := ctxT(t)
		before := runtime.NumGoroutine()
		batch := make([]convoy.Message, 0, 2000)
		for i := range n {
			batch = append(batch, convoy.Message{SessionID: fmt.Sprintf("order-%06d", i), Body: []byte("x")})
			if len(batch) == cap(batch) || i == n-1 {
				if _, err := c.Publish(ctx, "orders", batch...); err != nil {
					t.Fatal(err)
				}
				batch = batch[:0]
			}
		}
		if g := runtime.NumGoroutine(); g > before+10 {
			t.Fatalf("%d goroutines after creating %d sessions, %d before", g, n, before)
		}
		const maxSessions = 500
		var (
			done     atomic.Int64
			inFlight atomic.Int64
			peak     atomic.Int64
		)
		p := must[*convoy.Processor](t)(convoy.NewProcessor(c, "orders", func(ctx context.Context, m *convoy.ReceivedMessage) error {
			cur := inFlight.Add(1)
			defer inFlight.Add(-1)
			for {
				old := peak.Load()
				if cur <= old || peak.CompareAndSwap(old, cur) {
					break
				}
			}
			done.Add(1)
			return nil
		}, convoy.ProcessorOptions{MaxSessions: maxSessions}))
		startProcessor(t, p)
		start := time.Now()
		// A correctness test at scale, not a speed test: 100,000 sessions
		// take about 26 s on PostgreSQL alone on a 2-core machine, longer
		// beside the other packages' tests.
		waitForWithin(t, "every session processed", 3*time.Minute, func() bool { return p.Stats().Completed == int64(n) })
		t.Logf("%d sessions processed in %s", n, time.Since(start))
		if pk := peak.Load(); pk > maxSessions {
			t.Fatalf("%d handlers at once, MaxSessions %d", pk, maxSessions)
		}
		if st := p.Stats(); st.Completed != int64(n) || st.Accepted < int64(n) {
			t.Fatalf("stats %+v", st)
		}
		ss := must[[]*convoy.Session](t)(c.Sessions(ctx, "orders", "order-049999", 3))
		for _, s := range ss {
			if s.Pending != 0 || s.NextSeq != 1 {
				t.Fatalf("session %+v", s)
			}
		}
	})
}
