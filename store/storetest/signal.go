package storetest

import (
	"context"
	"testing"
	"time"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/flow"
	"github.com/drover-run/drover/store"
)

func signalCases() []testCase {
	return []testCase{
		{"InsertTakeList", testSignalInsertTakeList},
		{"DeletedWithTask", testSignalDeletedWithTask},
		{"FlowWaitAndDeliver", testSignalFlow},
	}
}

func newSignal(task, name, id string, received time.Duration) *dt.Signal {
	return &dt.Signal{TaskID: task, Name: name, ID: id, Payload: []byte(`{"id":"` + id + `"}`), Sender: "ann", ReceivedAt: at(received)}
}

func insertSignal(ctx context.Context, t *testing.T, x store.Executor, s *dt.Signal) bool {
	t.Helper()
	ok, err := x.SignalInsert(ctx, &store.SignalInsertParams{Signal: s})
	if err != nil {
		t.Fatalf("SignalInsert(%s/%s/%s): %v", s.TaskID, s.Name, s.ID, err)
	}
	return ok
}

// testSignalInsertTakeList: a signal's ID is unique per task and name; a
// take consumes the oldest waiting one (or the one of an ID), once.
func testSignalInsertTakeList(t *testing.T, d store.Driver) {
	insertTasks(t, d, newTask("t1"), newTask("t2"))
	s1, s2, s3 := newSignal("t1", "approved", "s1", 0), newSignal("t1", "approved", "s2", time.Second), newSignal("t1", "approved", "s3", 2*time.Second)
	other := newSignal("t1", "paid", "s1", 3*time.Second) // same ID, other name: a signal of its own
	nilPayload := newSignal("t2", "approved", "n", 0)
	nilPayload.Payload, nilPayload.Sender = nil, ""
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		for _, s := range []*dt.Signal{s1, s2, s3, other, nilPayload} {
			if !insertSignal(ctx, t, x, s) {
				t.Errorf("signal %s/%s not inserted", s.Name, s.ID)
			}
		}
		dup := newSignal("t1", "approved", "s1", time.Hour)
		dup.Payload = []byte(`"other"`)
		if insertSignal(ctx, t, x, dup) {
			t.Error("a duplicate ID was inserted")
		}
		return nil
	})
	ctx := context.Background()
	got, err := d.Reader().SignalList(ctx, &store.SignalListParams{TaskID: "t1"})
	if err != nil {
		t.Fatal(err)
	}
	checkSignals(t, "signals of t1", got, []*dt.Signal{s1, s2, s3, other})
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		takes := []store.SignalTake{
			{TaskID: "t1", Name: "approved", StepIndex: 1, Attempt: 2},
			{TaskID: "t2", Name: "approved", StepIndex: 0, Attempt: 1},
		}
		taken, err := x.SignalTake(ctx, &store.SignalTakeParams{Takes: takes, At: at(time.Minute)})
		if err != nil {
			return err
		}
		w1, w2 := *s1, *nilPayload
		w1.ConsumedAt, w1.ConsumedStep, w1.ConsumedAttempt = tp(at(time.Minute)), 1, 2
		w2.ConsumedAt, w2.ConsumedStep, w2.ConsumedAttempt = tp(at(time.Minute)), 0, 1
		checkSignals(t, "first take", taken, []*dt.Signal{&w1, &w2})
		// By ID, past the older s2.
		taken, err = x.SignalTake(ctx, &store.SignalTakeParams{At: at(2 * time.Minute),
			Takes: []store.SignalTake{{TaskID: "t1", Name: "approved", ID: "s3", StepIndex: 1, Attempt: 3}}})
		if err != nil {
			return err
		}
		if len(taken) != 1 || taken[0] == nil || taken[0].ID != "s3" {
			t.Errorf("take by ID = %v, want s3", taken)
		}
		for i, want := range []string{"s2", ""} {
			taken, err = x.SignalTake(ctx, &store.SignalTakeParams{At: at(3 * time.Minute),
				Takes: []store.SignalTake{{TaskID: "t1", Name: "approved", StepIndex: 1, Attempt: 4}, {TaskID: "t2", Name: "approved"}}})
			if err != nil {
				return err
			}
			if len(taken) != 2 || taken[1] != nil || (want == "" && taken[0] != nil) || (want != "" && (taken[0] == nil || taken[0].ID != want)) {
				t.Errorf("take %d = %v, want [%s <nil>]", i+3, taken, want)
			}
		}
		return nil
	})
	got, err = d.Reader().SignalList(ctx, &store.SignalListParams{TaskID: "t1"})
	if err != nil || len(got) != 4 {
		t.Fatalf("signals after the takes: %v %v", got, err)
	}
	for i, want := range []int{2, 4, 3, 0} {
		if c := got[i].ConsumedAttempt; c != want || (want == 0) != (got[i].ConsumedAt == nil) {
			t.Errorf("signal %s/%s consumed by attempt %d at %v, want %d", got[i].Name, got[i].ID, c, got[i].ConsumedAt, want)
		}
	}
}

// testSignalDeletedWithTask: retention deletes a final task's signals.
func testSignalDeletedWithTask(t *testing.T, d store.Driver) {
	old := newTask("old")
	old.ProcessState, old.UpdatedAt = dt.Processed, at(-time.Hour)
	insertTasks(t, d, old, newTask("live"))
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		insertSignal(ctx, t, x, newSignal("old", "approved", "a", 0))
		insertSignal(ctx, t, x, newSignal("live", "approved", "a", 0))
		n, err := x.TaskDeleteFinished(ctx, &store.TaskDeleteFinishedParams{Before: base, Limit: 10})
		if err != nil || n != 1 {
			t.Errorf("TaskDeleteFinished = %d, %v", n, err)
		}
		return nil
	})
	for id, want := range map[string]int{"old": 0, "live": 1} {
		got, err := d.Reader().SignalList(context.Background(), &store.SignalListParams{TaskID: id})
		if err != nil || len(got) != want {
			t.Errorf("signals of %s: %v %v, want %d", id, got, err, want)
		}
	}
}

// testSignalFlow: through the state machine, a claimed task whose step is
// a signal step is let go of to SignalHolder (found by TaskListExpired, not
// by a claim or TaskListLockedBy); a signal completes the step and makes
// the task claimable; a signal stored before is taken at the step's start.
func testSignalFlow(t *testing.T, d store.Driver) {
	ctx := context.Background()
	for _, id := range []string{"late", "early"} {
		tk := newTask(id)
		tk.StepCount = 2
		wait := newStep(id, 1)
		wait.Agent, wait.Signal, wait.Timeout = "", "approved", time.Hour
		first := newStep(id, 0)
		first.ProcessState, first.Output = dt.Processed, []byte(`"done"`)
		insertTasks(t, d, tk)
		insertSteps(t, d, first, wait)
	}
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		_, err := flow.Signal(ctx, x, newSignal("early", "approved", "e", 0), at(0))
		return err
	})
	m := &flow.Machine{Instance: "sched-1"}
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		r, err := m.Tick(ctx, x, at(time.Second), nil, 10)
		if err == nil && (r.Claimed != 2 || len(r.Requests) != 0 || r.Released != 2) {
			t.Errorf("tick: claimed %d, requests %d, released %d; want 2, 0, 2", r.Claimed, len(r.Requests), r.Released)
		}
		return err
	})
	m.Commit()
	late, early := getTask(t, d, "late"), getTask(t, d, "early")
	if late.ProcessState != dt.Processing || late.LockedBy != dt.SignalHolder || late.CompleteBy == nil || !late.CompleteBy.Equal(at(time.Second+time.Hour)) {
		t.Errorf("late: %s locked by %q until %v, want waiting an hour", late.ProcessState, late.LockedBy, late.CompleteBy)
	}
	if s := getSteps(t, d, "early")[1]; early.ProcessState != dt.Pending || early.LockedBy != "" || s.ProcessState != dt.Processed || string(s.Output) != `{"id":"e"}` {
		t.Errorf("early: %s locked by %q, step %s with %s; want the stored signal taken", early.ProcessState, early.LockedBy, s.ProcessState, s.Output)
	}
	held, err := d.Reader().TaskListLockedBy(ctx, &store.TaskListLockedByParams{Instance: "sched-1", Limit: 10})
	if err != nil || len(held) != 0 {
		t.Errorf("held by the scheduler: %v %v", taskIDs(held), err)
	}
	expired, err := d.Reader().TaskListExpired(ctx, &store.TaskListExpiredParams{Now: at(2 * time.Hour), Limit: 10})
	if err != nil || len(expired) != 1 || expired[0].ID != "late" {
		t.Errorf("expired at +2h: %v %v, want late", taskIDs(expired), err)
	}
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		res, err := flow.Signal(ctx, x, newSignal("late", "approved", "l", 0), at(time.Minute))
		if err == nil && (!res.Delivered || res.Duplicate) {
			t.Errorf("signal to the waiting step: %+v", res)
		}
		return err
	})
	if tk, s := getTask(t, d, "late"), getSteps(t, d, "late")[1]; tk.ProcessState != dt.Pending || tk.LockedBy != "" || s.ProcessState != dt.Processed || s.Attempt != 1 {
		t.Errorf("late after its signal: %s locked by %q, step %s attempt %d", tk.ProcessState, tk.LockedBy, s.ProcessState, s.Attempt)
	}
}

// checkSignals compares signals one by one.
func checkSignals(t *testing.T, what string, got, want []*dt.Signal) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d signals, want %d", what, len(got), len(want))
	}
	for i := range want {
		if got[i] == nil {
			t.Fatalf("%s: signal %d missing", what, i)
		}
		checkEqual(t, what, *got[i], *want[i])
	}
}
