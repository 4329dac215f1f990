package scheduler_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/clock"
	"github.com/drover-run/drover/internal/flow"
	"github.com/drover-run/drover/internal/scheduler"
	"github.com/drover-run/drover/internal/testutil"
	"github.com/drover-run/drover/store"
)

// On PostgreSQL a tick does not wait for a held task that another
// transaction has locked: the task's reply waits for a later tick, in
// memory if it came from the inbox and back in the store's reply queue if
// it came from there, and is applied once the lock is gone.
func TestReplyForLockedTaskIsDeferredNotLost(t *testing.T) {
	ctx := context.Background()
	d, s, reqs := dispatchedOnPostgres(t, 2)
	// lock holds the task's row in another transaction until the returned
	// function is called.
	lock := func(id string) (unlock func()) {
		release := testutil.HoldTx(t, d, func(ctx context.Context, x store.Executor) error {
			_, err := x.TaskGet(ctx, &store.TaskGetParams{ID: id})
			return err
		})
		return func() {
			if err := release(); err != nil {
				t.Fatal(err)
			}
		}
	}
	state := func(id string) dt.ProcessState {
		tk, err := d.Reader().TaskGet(ctx, &store.TaskGetParams{ID: id})
		if err != nil {
			t.Fatal(err)
		}
		return tk.ProcessState
	}
	tick := func(poll bool) {
		t.Helper()
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if _, err := s.Tick(tctx, poll); err != nil {
			t.Fatalf("tick while another transaction holds a task: %v", err)
		}
	}

	// From the inbox.
	inbox := reqs[0]
	unlock := lock(inbox.TaskID)
	if !s.Deliver(reply(inbox)) {
		t.Fatal("Deliver refused")
	}
	tick(false)
	if got := state(inbox.TaskID); got != dt.Processing {
		t.Fatalf("%s is %s with its row locked elsewhere, want still Processing", inbox.TaskID, got)
	}
	unlock()
	tick(false)
	if got := state(inbox.TaskID); got != dt.Processed {
		t.Fatalf("%s is %s after the lock went, want Processed", inbox.TaskID, got)
	}

	// From the store's reply queue (an agent in another process).
	queued := reqs[1]
	if err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		return x.ReplyInsertMany(ctx, &store.ReplyInsertManyParams{Replies: []*dt.AgentReply{reply(queued)}})
	}); err != nil {
		t.Fatal(err)
	}
	unlock = lock(queued.TaskID)
	tick(true)
	if got := state(queued.TaskID); got != dt.Processing {
		t.Fatalf("%s is %s with its row locked elsewhere, want still Processing", queued.TaskID, got)
	}
	unlock()
	// A new scheduler value, as after a crash: the reply must be in the
	// store, not only in the first one's memory.
	s = scheduler.New(d, clock.Real{}, &flow.Machine{Instance: "A"}, quiet)
	tick(true)
	if got := state(queued.TaskID); got != dt.Processed {
		t.Fatalf("%s is %s after the lock went, want Processed (reply lost?)", queued.TaskID, got)
	}
}

// While another transaction keeps a held task locked, the scheduler keeps
// retrying its deferred reply, less and less often (the wait doubles from
// 1ms) instead of every millisecond, and applies it once the lock is gone.
func TestDeferredReplyRetriesBackOff(t *testing.T) {
	ctx := context.Background()
	d, s, reqs := dispatchedOnPostgres(t, 1)
	r := reqs[0]
	// No poll timer in the way: only the back-off paces the retries.
	s.PollInterval = time.Minute
	var (
		mu  sync.Mutex
		txs []time.Time // the start of every transaction of the scheduler's
	)
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(txs) }
	s.Fence = func(context.Context, store.Executor, time.Time) error {
		mu.Lock()
		txs = append(txs, time.Now())
		mu.Unlock()
		return nil
	}
	stop := runFn(t, s.Run)
	defer stop()
	// Restore (which locks the held tasks, so would wait for the lock
	// below) is done once the first tick has begun.
	waitFor(t, "Restore and a first tick", func() bool { return count() >= 2 })
	release := testutil.HoldTx(t, d, func(ctx context.Context, x store.Executor) error {
		_, err := x.TaskGet(ctx, &store.TaskGetParams{ID: r.TaskID})
		return err
	})
	from := count()
	if !s.Deliver(reply(r)) {
		t.Fatal("Deliver refused")
	}
	// It keeps retrying: a stalled scheduler fails here.
	const retries = 8
	waitFor(t, fmt.Sprintf("%d transactions while the task stays locked", retries), func() bool { return count() >= from+retries })
	mu.Lock()
	got := append([]time.Time(nil), txs[from:from+retries]...)
	mu.Unlock()
	// Transaction k (from 0: the one that first deferred the reply) starts
	// at least 2^(k-1) ms after the one before: timers never fire early,
	// so these bounds hold however slow the machine.
	for k := 1; k < retries; k++ {
		if gap, least := got[k].Sub(got[k-1]), time.Millisecond<<(k-1); gap < least {
			t.Errorf("transaction %d started %s after the one before, want at least %s: the retries do not back off", k, gap, least)
		}
	}
	if err := release(); err != nil {
		t.Fatal(err)
	}
	s.Wake() // the back-off is long by now
	waitFor(t, "the deferred reply applied", func() bool {
		tk, err := d.Reader().TaskGet(ctx, &store.TaskGetParams{ID: r.TaskID})
		return err == nil && tk.ProcessState == dt.Processed
	})
}

// dispatchedOnPostgres stores n single-step tasks on PostgreSQL and returns
// a scheduler "A" that has claimed them, and the requests it dispatched.
func dispatchedOnPostgres(t *testing.T, n int) (store.Driver, *scheduler.Scheduler, []*dt.AgentRequest) {
	t.Helper()
	d := testutil.Postgres(t)
	seed(t, d, n, 1, time.Minute)
	s := scheduler.New(d, clock.Real{}, &flow.Machine{Instance: "A"}, quiet)
	var reqs []*dt.AgentRequest
	s.OnDispatch = func(r []*dt.AgentRequest) { reqs = append(reqs, r...) }
	if _, err := s.Tick(context.Background(), false); err != nil || len(reqs) != n {
		t.Fatalf("first tick: %v, %d requests dispatched, want %d", err, len(reqs), n)
	}
	return d, s, reqs
}

// reply is a successful reply to r.
func reply(r *dt.AgentRequest) *dt.AgentReply {
	return &dt.AgentReply{TaskID: r.TaskID, StepIndex: r.StepIndex, Attempt: r.Attempt, Kind: r.Kind,
		Output: []byte(`1`), CreatedAt: time.Now(), Scheduler: r.Scheduler}
}

// Replies taken from the store and put back because their tasks are locked
// do not count as a full take: the tick is not busy, so the scheduler waits
// (backing off) instead of taking and putting them back at once, again and
// again.
func TestPutBackRepliesDoNotMakeTickBusy(t *testing.T) {
	ctx := context.Background()
	d, s, reqs := dispatchedOnPostgres(t, 4)
	s.ClaimBatch = 1 // a take of 4 replies is a full one
	var ids []string
	var replies []*dt.AgentReply
	for _, r := range reqs {
		ids = append(ids, r.TaskID)
		replies = append(replies, reply(r))
	}
	if err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		return x.ReplyInsertMany(ctx, &store.ReplyInsertManyParams{Replies: replies})
	}); err != nil {
		t.Fatal(err)
	}
	testutil.HoldTx(t, d, func(ctx context.Context, x store.Executor) error {
		_, err := x.TaskGetMany(ctx, &store.TaskGetManyParams{IDs: ids})
		return err
	})
	busy, err := s.Tick(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	if busy {
		t.Error("tick busy after putting back every reply it took")
	}
}
