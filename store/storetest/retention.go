package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/store"
)

// testTaskDeleteFinished: retention deletes only final tasks last updated
// before the cutoff, oldest first and at most limit, with everything that
// hangs off them; live work and newer tasks are untouched.
func testTaskDeleteFinished(t *testing.T, d store.Driver) {
	ctx := context.Background()
	mk := func(id string, state dt.ProcessState, updated time.Duration) *dt.Task {
		tk := newTask(id)
		tk.ProcessState, tk.UpdatedAt = state, at(updated)
		if state == dt.Processing {
			tk.LockedBy = "s1"
			cb := at(time.Hour)
			tk.CompleteBy = &cb
		}
		return tk
	}
	tasks := []*dt.Task{
		mk("old-processed", dt.Processed, 1*time.Second),
		mk("old-error", dt.Error, 2*time.Second),
		mk("old-compensated", dt.Compensated, 3*time.Second),
		mk("old-cancelled", dt.Cancelled, 4*time.Second),
		mk("old-pending", dt.Pending, 0),
		mk("old-processing", dt.Processing, 0),
		mk("new-processed", dt.Processed, time.Hour),
	}
	insertTasks(t, d, tasks...)
	for _, tk := range tasks {
		insertSteps(t, d, newStep(tk.ID, 0))
	}
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		var evs []*dt.Event
		for _, tk := range tasks {
			evs = append(evs, &dt.Event{TaskID: tk.ID, StepIndex: -1, Type: dt.EventSubmitted, CreatedAt: base})
		}
		if err := x.EventInsertMany(ctx, &store.EventInsertManyParams{Events: evs}); err != nil {
			return err
		}
		return x.ReplyInsertMany(ctx, &store.ReplyInsertManyParams{Replies: []*dt.AgentReply{{TaskID: "old-processed", Attempt: 1, Kind: dt.KindDo, CreatedAt: base}}})
	})

	cutoff := at(time.Minute)
	var n int
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		var err error
		n, err = x.TaskDeleteFinished(ctx, &store.TaskDeleteFinishedParams{Before: cutoff, Limit: 3})
		return err
	})
	if n != 3 {
		t.Fatalf("first batch deleted %d, want 3 (the limit)", n)
	}
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		var err error
		n, err = x.TaskDeleteFinished(ctx, &store.TaskDeleteFinishedParams{Before: cutoff, Limit: 100})
		return err
	})
	if n != 1 {
		t.Fatalf("second batch deleted %d, want 1", n)
	}
	r := d.Reader()
	for _, tk := range tasks {
		_, err := r.TaskGet(ctx, &store.TaskGetParams{ID: tk.ID})
		gone := errors.Is(err, store.ErrNotFound)
		wantGone := tk.ID[:4] == "old-" && tk.ProcessState.Final()
		if gone != wantGone {
			t.Errorf("task %s (%s): gone %v, want %v (err %v)", tk.ID, tk.ProcessState, gone, wantGone, err)
		}
		steps, err := r.StepListByTasks(ctx, &store.StepListByTasksParams{TaskIDs: []string{tk.ID}})
		if err != nil {
			t.Fatal(err)
		}
		evs, err := r.EventList(ctx, &store.EventListParams{TaskID: tk.ID})
		if err != nil {
			t.Fatal(err)
		}
		if wantGone && (len(steps) != 0 || len(evs) != 0) {
			t.Errorf("task %s deleted but %d steps and %d events remain", tk.ID, len(steps), len(evs))
		}
		if !wantGone && (len(steps) != 1 || len(evs) != 1) {
			t.Errorf("task %s kept but has %d steps and %d events", tk.ID, len(steps), len(evs))
		}
	}
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		rs, err := x.ReplyTake(ctx, &store.ReplyTakeParams{Scheduler: "s1", Limit: 10})
		if err == nil && len(rs) != 0 {
			t.Errorf("replies of a deleted task remain: %d", len(rs))
		}
		return err
	})
}
