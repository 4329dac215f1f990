package webhook

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/internal/notifier"
	"github.com/drover-run/drover/internal/testutil"
	"github.com/drover-run/drover/store"
	"github.com/drover-run/drover/store/postgres"
)

// scanCounter is a PostgreSQL driver whose reader counts the event reads
// (a dispatcher's scans and its held-back checks).
type scanCounter struct {
	*postgres.Driver
	reads *atomic.Int64
}

func (d scanCounter) Reader() store.Executor { return countedReader{d.Driver.Reader(), d.reads} }

type countedReader struct {
	store.Executor
	reads *atomic.Int64
}

func (r countedReader) EventList(ctx context.Context, p *store.EventListParams) ([]*drover.Event, error) {
	r.reads.Add(1)
	return r.Executor.EventList(ctx, p)
}

// A retry that comes due while every slot is busy waits for a slot: the
// dispatcher does not wake for it again and again meanwhile (it scanned
// the events about every millisecond, reading the store each time), and
// sends it once the slot frees.
func TestRetryDueWhileSlotsBusyWaitsForASlot(t *testing.T) {
	t.Parallel()
	pg := testutil.Postgres(t)
	drv := scanCounter{pg, &atomic.Int64{}}
	rc := newReceiver(t)
	release := make(chan struct{})
	var heldIn atomic.Bool
	rc.respond = func(h hit, before int) int {
		if h.Path == "/cb/fails-once" && before == 0 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	}
	rc.hold = func(r *http.Request, h hit) {
		if h.Path == "/cb/held" {
			heldIn.Store(true)
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
	}
	c := startClient(t, pg)
	opts := fastOptions(&logBuffer{})
	opts.Concurrency, opts.PollInterval = 1, time.Hour
	opts.BackoffBase, opts.BackoffMax = 4*time.Second, 4*time.Second // due 2-4 s after the failure
	stop := run(t, newDispatcher(t, drv, opts))
	defer stop()
	waitFor(t, "notifications", notifier.For(drv).Live)

	submit(t, c, "echo", "fails-once", rc.url("/cb/fails-once"))
	waitFor(t, "the first attempt, failed", func() bool { return len(rc.all()) == 1 })
	failedAt := time.Now()
	submit(t, c, "echo", "held", rc.url("/cb/held")) // takes the one slot before the retry is due
	waitFor(t, "the held request in flight", heldIn.Load)
	if late := time.Since(failedAt); late >= 2*time.Second {
		t.Fatalf("the held request took the slot %s after the failure, after the retry may have come due", late)
	}
	// A window after the retry is due, while the slot stays busy: the
	// length of the measurement, not a wait for something to happen.
	time.Sleep(time.Until(failedAt.Add(4*time.Second + 50*time.Millisecond)))
	before := drv.reads.Load()
	time.Sleep(300 * time.Millisecond)
	if n := drv.reads.Load() - before; n > 10 {
		t.Errorf("%d event reads in 300 ms while the retry waited for the busy slot, want a few at most", n)
	}
	close(release)
	waitFor(t, "both webhooks delivered", func() bool { return len(rc.okCount()) == 2 })
}
