package scheduler

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/clock"
	"github.com/drover-run/drover/internal/flow"
	"github.com/drover-run/drover/internal/testutil"
	"github.com/drover-run/drover/store"
	"github.com/drover-run/drover/store/sqlite"
)

// oneTask stores task "t1" of n steps (agent "a", the given budget) and
// returns a scheduler "A" that has claimed it: step 0 is dispatched.
func oneTask(t *testing.T, n int, timeout time.Duration) (*sqlite.Driver, *Scheduler) {
	t.Helper()
	d := testutil.SQLite(t)
	submit(t, d, n, timeout, "t1")
	s := newScheduler(d)
	if _, err := s.Tick(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	return d, s
}

// submit stores a Pending task of n steps (agent "a", the given budget)
// for each of ids.
func submit(t *testing.T, d store.Driver, n int, timeout time.Duration, ids ...string) {
	t.Helper()
	now := time.Now().UTC()
	in := []byte(`{}`)
	var subs []flow.Submission
	for _, id := range ids {
		var steps []*dt.StepRecord
		for i := range n {
			name := fmt.Sprintf("s%d", i)
			steps = append(steps, &dt.StepRecord{TaskID: id, Index: i, Name: name, Agent: "a", Timeout: timeout,
				ProcessState: dt.Pending, IdempotencyKey: flow.IdempotencyKey(id, i, name), UpdatedAt: now})
		}
		subs = append(subs, flow.Submission{Task: &dt.Task{ID: id, Workflow: "wf", Input: in, InputHash: flow.InputHash("wf", in),
			ProcessState: dt.Pending, StepCount: n, FailureThreshold: 3, OnFailure: dt.PolicyError,
			AvailableAt: now, CreatedAt: now, UpdatedAt: now}, Steps: steps})
	}
	if err := d.InTx(context.Background(), func(ctx context.Context, x store.Executor) error {
		_, err := flow.Submit(ctx, x, subs)
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// newScheduler returns a quiet scheduler "A" on d.
func newScheduler(d store.Driver) *Scheduler {
	return New(d, clock.Real{}, &flow.Machine{Instance: "A"}, slog.New(slog.NewTextHandler(io.Discard, nil)))
}
