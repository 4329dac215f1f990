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

// A task in an extended wait shows it: status names the step, the end of
// the wait and which wait it is; list shows until when the task waits; the
// JSON has the policies and available_at.
func TestStatusAndListShowExtendedWait(t *testing.T) {
	t.Parallel()
	db, path := migratedDB(t)
	now := time.Now().UTC().Truncate(time.Microsecond)
	next := now.Add(time.Hour)
	wait := dt.WaitPolicy{MaxWaits: 3, Delay: 5 * time.Minute, Multiplier: 2, MaxDelay: time.Hour}
	// What the supervisor leaves when a step reached the threshold (2) and
	// its first wait began.
	tk := &dt.Task{ID: "w1", Workflow: "trip", Input: []byte(`{}`), InputHash: "h", ProcessState: dt.Pending,
		FailureCount: 2, StepCount: 2, FailureThreshold: 2, OnFailure: dt.PolicyError, Wait: wait,
		AvailableAt: next, CreatedAt: now, UpdatedAt: now}
	steps := []*dt.StepRecord{
		{TaskID: "w1", Index: 0, Name: "reserve", Agent: "inventory", Timeout: time.Second, ProcessState: dt.Pending,
			FailureCount: 2, Attempt: 2, IdempotencyKey: flow.IdempotencyKey("w1", 0, "reserve"), UpdatedAt: now,
			LastError: "step 0 (reserve) timed out 2 times; extended wait 1 of 3"},
		{TaskID: "w1", Index: 1, Name: "charge", Agent: "payments", Timeout: time.Second, ProcessState: dt.Pending,
			IdempotencyKey: flow.IdempotencyKey("w1", 1, "charge"), UpdatedAt: now,
			OnFailure: dt.PolicyCompensate, Wait: &dt.WaitPolicy{}},
	}
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

	until := next.Format(timeFormat)
	out := mustRun(t, "status", "w1", "--db", db)
	for _, want := range []string{
		"Pending until " + until,
		"Waiting:       step 0 (reserve), extended wait 1 of 3",
		"threshold 2, then up to 3 extended waits of 5m0s, ×2, at most 1h0m0s; on failure: error",
		"step 1 (charge) has its own failure policy: no extended waits; on failure: compensate",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status does not show %q:\n%s", want, out)
		}
	}
	if out := mustRun(t, "list", "--db", db); !strings.Contains(out, "Pending until "+until) {
		t.Errorf("list does not show until when the task waits:\n%s", out)
	}
	var j TaskJSON
	if err := json.Unmarshal([]byte(mustRun(t, "status", "w1", "--db", db, "--json")), &j); err != nil {
		t.Fatal(err)
	}
	if j.Wait == nil || *j.Wait != (WaitJSON{MaxWaits: 3, DelaySeconds: 300, Multiplier: 2, MaxDelaySeconds: 3600}) ||
		!j.AvailableAt.Equal(next) || len(j.Steps) != 2 || j.Steps[0].OnFailure != "" || j.Steps[0].Wait != nil ||
		j.Steps[1].OnFailure != "compensate" || j.Steps[1].Wait == nil || j.Steps[1].Wait.MaxWaits != 0 {
		t.Errorf("status --json: wait %+v available_at %s steps %+v", j.Wait, j.AvailableAt, j.Steps)
	}
}
