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
	ctx := context.Background()
	d := testutil.SQLite(t)
	now := time.Now().UTC()
	in := []byte(`{}`)
	var steps []*dt.Step
	for i := range n {
		name := fmt.Sprintf("s%d", i)
		steps = append(steps, &dt.Step{TaskID: "t1", Index: i, Name: name, Agent: "a", Timeout: timeout,
			ProcessState: dt.Pending, IdempotencyKey: flow.IdempotencyKey("t1", i, name), UpdatedAt: now})
	}
	sub := flow.Submission{Task: &dt.Task{ID: "t1", Workflow: "wf", Input: in, InputHash: flow.InputHash("wf", in), ProcessState: dt.Pending,
		StepCount: n, FailureThreshold: 3, OnFailure: dt.PolicyError, AvailableAt: now, CreatedAt: now, UpdatedAt: now}, Steps: steps}
	if err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		_, err := flow.Submit(ctx, x, []flow.Submission{sub})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	s := New(d, clock.Real{}, &flow.Machine{Instance: "A"}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if _, err := s.Tick(ctx, false); err != nil {
		t.Fatal(err)
	}
	return d, s
}
