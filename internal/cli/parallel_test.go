package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/flow"
	"github.com/drover-run/drover/store"
	"github.com/drover-run/drover/store/sqlite"
)

// A task at a parallel group: status names the group and each branch with
// its state; the steps table marks the branches; the JSON has each step's
// group and order of completion.
func TestStatusShowsParallelGroup(t *testing.T) {
	t.Parallel()
	db, path := migratedDB(t)
	now := time.Now().UTC().Truncate(time.Microsecond)
	deadline := now.Add(time.Minute)
	tk := &dt.Task{ID: "p1", Workflow: "order", Input: []byte(`{}`), InputHash: "h", ProcessState: dt.Processing,
		LockedBy: "sched-1", CompleteBy: &deadline, CurrentStep: 1, StepCount: 4, FailureThreshold: 3,
		OnFailure: dt.PolicyCompensate, AvailableAt: now, CreatedAt: now, UpdatedAt: now}
	step := func(i int, name, group string, state dt.ProcessState) *dt.StepRecord {
		return &dt.StepRecord{TaskID: "p1", Index: i, Name: name, Agent: name, Timeout: time.Second, ProcessState: state,
			IdempotencyKey: flow.IdempotencyKey("p1", i, name), UpdatedAt: now, Group: group}
	}
	steps := []*dt.StepRecord{
		step(0, "prepare", "", dt.Processed), step(1, "stock", "reserve", dt.Processed),
		step(2, "payment", "reserve", dt.Processing), step(3, "ship", "", dt.Pending),
	}
	steps[0].FinishSeq, steps[1].FinishSeq = 1, 2
	drv, err := sqlite.Open(t.Context(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := drv.InTx(t.Context(), func(ctx context.Context, x store.Executor) error {
		if _, err := x.TaskInsertMany(ctx, &store.TaskInsertManyParams{Tasks: []*dt.Task{tk}}); err != nil {
			return err
		}
		return x.StepInsertMany(ctx, &store.StepInsertManyParams{Steps: steps})
	}); err != nil {
		t.Fatal(err)
	}
	drv.Close()

	out := mustRun(t, "status", "p1", "--db", db)
	for _, want := range []string{
		"Current step:  2 of 4 (parallel group reserve, indexes 1-2: stock Processed, payment Processing)",
		"stock [parallel reserve]",
		"payment [parallel reserve]",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status does not show %q:\n%s", want, out)
		}
	}
	var j TaskJSON
	if err := json.Unmarshal([]byte(mustRun(t, "status", "p1", "--db", db, "--json")), &j); err != nil {
		t.Fatal(err)
	}
	if len(j.Steps) != 4 || j.Steps[0].Group != "" || j.Steps[1].Group != "reserve" || j.Steps[2].Group != "reserve" ||
		j.Steps[1].FinishSeq != 2 || j.Steps[2].FinishSeq != 0 {
		t.Errorf("status --json steps: %+v", j.Steps)
	}
}
