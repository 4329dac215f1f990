package scheduler

import (
	"context"
	"testing"
	"time"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/testutil"
	"github.com/drover-run/drover/store"
)

// The retry wait grows only while the same replies stay deferred; a reply
// deferred for the first time is retried after a millisecond, however long
// earlier ones waited.
func TestBackoffGrowsOnlyForTheSameReplies(t *testing.T) {
	ctx := context.Background()
	d := testutil.Postgres(t)
	submit(t, d, 1, time.Minute, "a", "b")
	s := newScheduler(d)
	reqs := map[string]*dt.AgentRequest{}
	s.OnDispatch = func(rs []*dt.AgentRequest) {
		for _, r := range rs {
			reqs[r.TaskID] = r
		}
	}
	tick := func() {
		t.Helper()
		if _, err := s.Tick(ctx, false); err != nil {
			t.Fatal(err)
		}
	}
	tick()
	deliver := func(id string) {
		r := reqs[id]
		s.Deliver(&dt.AgentReply{TaskID: id, StepIndex: r.StepIndex, Attempt: r.Attempt, Kind: r.Kind, Output: []byte(`1`), Scheduler: "A"})
	}
	lock := func(id string) func() error {
		return testutil.HoldTx(t, d, func(ctx context.Context, x store.Executor) error {
			_, err := x.TaskGet(ctx, &store.TaskGetParams{ID: id})
			return err
		})
	}

	unlockA := lock("a")
	deliver("a")
	for i, want := range []time.Duration{time.Millisecond, 2 * time.Millisecond, 4 * time.Millisecond} {
		tick()
		if s.backoff != want {
			t.Fatalf("while a stays locked, retry %d: back-off %s, want %s", i, s.backoff, want)
		}
	}
	if err := unlockA(); err != nil {
		t.Fatal(err)
	}
	lock("b")
	deliver("b")
	tick() // a's reply applied; b's deferred for the first time
	if s.backoff != time.Millisecond || len(s.deferred) != 1 || s.deferred[0].TaskID != "b" {
		t.Fatalf("after a new collision: back-off %s, deferred %d; want 1ms, b's reply", s.backoff, len(s.deferred))
	}
}
