package scheduler

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/clock"
	"github.com/drover-run/drover/internal/flow"
	"github.com/drover-run/drover/store"
	"github.com/drover-run/drover/store/sqlite"
)

// A reply delivered to the inbox just before Run exits is applied by the
// shutdown, promptly (it once spun on empty transactions for 5s and dropped it).
func TestShutdownAppliesInboxReplies(t *testing.T) {
	ctx := context.Background()
	d, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "d.db"), sqlite.Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	in := []byte(`{}`)
	sub := flow.Submission{Task: &dt.Task{ID: "t1", Workflow: "wf", Input: in, InputHash: flow.InputHash("wf", in), ProcessState: dt.Pending,
		StepCount: 1, FailureThreshold: 3, OnFailure: dt.PolicyError, AvailableAt: now, CreatedAt: now, UpdatedAt: now},
		Steps: []*dt.Step{{TaskID: "t1", Index: 0, Name: "s0", Agent: "a", Timeout: time.Minute, ProcessState: dt.Pending,
			IdempotencyKey: flow.IdempotencyKey("t1", 0, "s0"), UpdatedAt: now}}}
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
	if !s.Deliver(&dt.AgentReply{TaskID: "t1", StepIndex: 0, Attempt: 1, Kind: dt.KindDo, Output: []byte(`"ok"`), CreatedAt: time.Now()}) {
		t.Fatal("deliver")
	}
	start := time.Now()
	s.shutdown()
	took := time.Since(start)
	task, _ := d.Reader().TaskGet(ctx, "t1")
	t.Logf("shutdown took %s; inbox left %d; task state %s", took, len(s.inbox), task.ProcessState)
	if task.ProcessState != dt.Processed {
		t.Errorf("reply in inbox at shutdown was not applied (task %s, shutdown took %s)", task.ProcessState, took)
	}
	if took > 2*time.Second {
		t.Errorf("shutdown took %s", took)
	}
}
