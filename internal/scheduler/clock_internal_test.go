package scheduler

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/clock"
	"github.com/drover-run/drover/internal/flow"
	"github.com/drover-run/drover/internal/testutil"
	"github.com/drover-run/drover/store"
)

// The scheduler reads the clock once it holds the write lock: waiting for the
// lock must not let a reply be applied after its CompleteBy, nor dispatch a
// step with a CompleteBy computed from before the wait. The fake clock moves
// while the tick waits for the lock (SQLite's one write connection, held by
// an application's transaction).
func TestTickReadsClockUnderWriteLock(t *testing.T) {
	ctx := context.Background()
	d := testutil.SQLite(t)
	submit(t, d, 2, 800*time.Millisecond, "t1")
	fake := clock.NewFake(time.Now().Add(time.Second)) // later than the tasks' AvailableAt
	s := New(d, fake, &flow.Machine{Instance: "A"}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if _, err := s.Tick(ctx, false); err != nil {
		t.Fatal(err)
	}
	st, err := d.Reader().StepListByTasks(ctx, &store.StepListByTasksParams{TaskIDs: []string{"t1"}})
	if err != nil {
		t.Fatal(err)
	}
	cb0 := *st[0].CompleteBy
	// The agent answers 100ms before CompleteBy; task t2 waits to be claimed.
	fake.Advance(cb0.Sub(fake.Now()) - 100*time.Millisecond)
	s.Deliver(&dt.AgentReply{TaskID: "t1", StepIndex: 0, Attempt: 1, Kind: dt.KindDo, Output: []byte(`1`)})
	submit(t, d, 1, time.Second, "t2")

	// Another writer (an application's SubmitTx-style transaction) holds
	// the write connection; the tick waits for it.
	tx, err := d.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	waits := d.DB().Stats().WaitCount
	done := make(chan error, 1)
	go func() {
		_, err := s.Tick(ctx, false)
		done <- err
	}()
	deadline := time.Now().Add(15 * time.Second)
	for d.DB().Stats().WaitCount == waits {
		if time.Now().After(deadline) {
			t.Fatal("the tick never waited for the write connection")
		}
		time.Sleep(time.Millisecond)
	}
	// Meanwhile CompleteBy passes.
	fake.Advance(200 * time.Millisecond)
	committed := fake.Now()
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Tick: %v", err)
	}

	st, err = d.Reader().StepListByTasks(ctx, &store.StepListByTasksParams{TaskIDs: []string{"t1", "t2"}})
	if err != nil {
		t.Fatal(err)
	}
	if st[0].ProcessState != dt.Processing || st[1].CompleteBy != nil {
		t.Errorf("t1: step 0 %s, step 1 dispatched %v: the reply, due at %s, was applied at %s (a clock read before the wait)",
			st[0].ProcessState, st[1].CompleteBy != nil, cb0.Format("15:04:05.000"), committed.Format("15:04:05.000"))
	}
	evs, err := d.Reader().EventList(ctx, &store.EventListParams{TaskID: "t1", Lookup: true})
	if err != nil {
		t.Fatal(err)
	}
	discarded := 0
	for _, e := range evs {
		if e.Type == dt.EventReplyDiscarded {
			discarded++
		}
	}
	if discarded != 1 {
		t.Errorf("t1: %d reply_discarded events, want 1 (the late reply)", discarded)
	}
	t2 := st[2]
	if t2.TaskID != "t2" || t2.CompleteBy == nil {
		t.Fatalf("t2 step 0 not dispatched: %+v", t2)
	}
	if want := committed.Add(time.Second); !t2.CompleteBy.Equal(want) {
		t.Errorf("t2 step 0 CompleteBy %s, want %s: its 1s budget must start when the tick holds the lock",
			t2.CompleteBy.Format("15:04:05.000"), want.Format("15:04:05.000"))
	}
}
