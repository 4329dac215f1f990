package storetest

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/flow"
	"github.com/drover-run/drover/store"
)

// submitStart runs flow.SubmitAndStart in a transaction of its own and
// returns the tasks, the Start as it was when the transaction ended, and
// the topics it notified.
func (e *env) submitStart(start *flow.Start, subs ...flow.Submission) ([]*dt.Task, []string) {
	e.t.Helper()
	var out []*dt.Task
	topics := inTxNotes(e.t, e.d, func(ctx context.Context, x store.Executor) error {
		var err error
		out, err = flow.SubmitAndStart(ctx, x, subs, start)
		return err
	})
	return out, topics
}

// testFlowSubmitAndStart: a task started at submission (flow.Start) is
// stored exactly as a claim and dispatch by the same scheduler would have
// left it, with the same history, and the scheduler's machine then applies
// its reply as if it had claimed it. Tasks with an ordering key, or beyond
// the room, stay Pending; a submission of an existing ID starts nothing and
// gives its reservation back; a failing fence stores nothing.
func testFlowSubmitAndStart(t *testing.T, d store.Driver) {
	e := newEnv(t, d)
	w := orderWF()
	now := at(time.Second)
	reserved := 0
	inProcess := func(agent string) (string, bool) {
		reserved++
		return "rt-1", true
	}

	// Handed over in memory: no request row, no wake-up for anyone.
	sub := w.submission("o1", `{"order":"o1"}`, base)
	start := &flow.Start{Machine: &flow.Machine{Instance: "sched-1", Reserve: inProcess}, Room: 10, Clock: func() time.Time { return now }}
	out, topics := e.submitStart(start, sub)
	if sub.Task.ProcessState != dt.Pending || sub.Steps[0].Attempt != 0 {
		t.Errorf("SubmitAndStart changed the caller's records: task %s, step attempt %d", sub.Task.ProcessState, sub.Steps[0].Attempt)
	}
	if start.Started != 1 || len(start.Requests) != 1 || len(start.Dropped) != 0 || reserved != 1 {
		t.Fatalf("Start after commit: started %d, %d requests, %d dropped, %d reserved; want 1, 1, 0, 1",
			start.Started, len(start.Requests), len(start.Dropped), reserved)
	}
	r := start.Requests[0]
	deadline := now.Add(10 * time.Second)
	want := &dt.AgentRequest{
		Agent: "inventory", TaskID: "o1", Workflow: "order", StepIndex: 0, StepName: "reserve", Attempt: 1,
		Kind: dt.KindDo, IdempotencyKey: flow.IdempotencyKey("o1", 0, "reserve"), CompleteBy: deadline,
		Scheduler: "sched-1", CreatedAt: now, ClaimedBy: "rt-1", InProcess: true, Input: []byte(`{"order":"o1"}`),
	}
	checkEqual(t, "request started at submission", r, want)
	if len(topics) != 0 {
		t.Errorf("a task started in process notified %v, want nothing", topics)
	}
	tk, steps := e.wantState("o1", dt.Processing, dt.Processing, dt.Pending, dt.Pending)
	checkEqual(t, "returned task", out[0], tk)
	if tk.LockedBy != "sched-1" || tk.CompleteBy == nil || !tk.CompleteBy.Equal(deadline) || tk.CurrentStep != 0 || !tk.UpdatedAt.Equal(now) {
		t.Errorf("started task: LockedBy %q CompleteBy %v CurrentStep %d UpdatedAt %v", tk.LockedBy, tk.CompleteBy, tk.CurrentStep, tk.UpdatedAt)
	}
	s := steps[0]
	if s.Attempt != 1 || s.LockedBy != "sched-1" || s.CompleteBy == nil || !s.CompleteBy.Equal(deadline) ||
		s.StartedAt == nil || !s.StartedAt.Equal(now) || s.FailureCount != 0 {
		t.Errorf("started step: %+v", s)
	}
	if q := e.peek("inventory", now); len(q) != 0 {
		t.Errorf("%d request rows stored for a request handed over in memory", len(q))
	}
	evs := e.wantEvents("o1", "submitted step_started[0]")
	if len(evs) == 2 {
		if evs[0].State != dt.Pending || evs[0].Actor != "" || !evs[0].CreatedAt.Equal(base) {
			t.Errorf("submitted event: %+v", evs[0])
		}
		if evs[1].Attempt != 1 || evs[1].Actor != "sched-1" || evs[1].State != dt.Processing || !evs[1].CreatedAt.Equal(now) {
			t.Errorf("step_started event: %+v", evs[1])
		}
	}
	if again := e.claim(at(time.Hour)); len(again) != 0 {
		t.Errorf("started task claimed again: %v", reqKeys(again))
	}
	// The scheduler's machine takes it from there.
	next, rel := e.apply(at(2*time.Second), ok(r, `"r1"`))
	if rel != 0 || e.one(next, "reply to the started step").StepIndex != 1 {
		t.Errorf("reply to the started step: released %d, next %v", rel, reqKeys(next))
	}
	e.wantState("o1", dt.Processing, dt.Processed, dt.Processing, dt.Pending)

	// No agent here takes it: a request row, and the agent's wake-up.
	start = &flow.Start{Machine: &flow.Machine{Instance: "sched-1"}, Room: 10, Clock: func() time.Time { return now }}
	_, topics = e.submitStart(start, w.submission("o2", `{"order":"o2"}`, base))
	if start.Started != 1 || start.Requests[0].InProcess {
		t.Fatalf("started %d (in process: %v), want 1 stored", start.Started, start.Requests[0].InProcess)
	}
	if q := e.peek("inventory", now); len(q) != 1 || q[0].TaskID != "o2" || q[0].Attempt != 1 {
		t.Errorf("queued requests for inventory: %v, want o2's", reqKeys(q))
	}
	if !contains(topics, store.TopicRequests("inventory")) || notifiesTasks(topics) {
		t.Errorf("a started task with a stored request notified %v, want %s only", topics, store.TopicRequests("inventory"))
	}

	// Room for none: nothing starts.
	start = &flow.Start{Machine: &flow.Machine{Instance: "sched-1", Reserve: inProcess}, Room: 0, Clock: func() time.Time { return now }}
	if out, _ = e.submitStart(start, w.submission("o0", `{"order":"o0"}`, base)); start.Started != 0 || out[0].ProcessState != dt.Pending {
		t.Errorf("room 0: started %d, task %s; want 0, Pending", start.Started, out[0].ProcessState)
	}
	// Room for one: the second stays Pending, for a claim. A keyed task
	// always waits for a claim.
	start = &flow.Start{Machine: &flow.Machine{Instance: "sched-1", Reserve: inProcess}, Room: 1, Clock: func() time.Time { return now }}
	out, topics = e.submitStart(start, w.submission("o3", `{"order":"o3"}`, base), w.submission("o4", `{"order":"o4"}`, base), keyed(w, "o5", "k"))
	if start.Started != 1 || out[0].ProcessState != dt.Processing || out[1].ProcessState != dt.Pending || out[2].ProcessState != dt.Pending {
		t.Errorf("room 1: started %d, states %s %s %s; want 1, Processing Pending Pending", start.Started, out[0].ProcessState, out[1].ProcessState, out[2].ProcessState)
	}
	if !notifiesTasks(topics) {
		t.Errorf("tasks left Pending notified %v, want %s", topics, store.TopicTasks)
	}
	e.wantEvents("o4", "submitted")
	if got := e.claimIDs(at(time.Hour)); len(got) != 3 || got[0] != "o0" || got[1] != "o4" || got[2] != "o5" {
		t.Errorf("claimable after a start with room 1: %v, want o0, o4 and o5", got)
	}

	// An existing ID: the stored task comes back, nothing is dispatched
	// again, and the reservation is handed back.
	before := e.snapshot([]string{"o1"}, orderAgents)
	reserved = 0
	start = &flow.Start{Machine: &flow.Machine{Instance: "sched-2", Reserve: inProcess}, Room: 10, Clock: func() time.Time { return at(3 * time.Second) }}
	out, _ = e.submitStart(start, w.submission("o1", `{"order":"o1"}`, base))
	if start.Started != 0 || len(start.Requests) != 0 || len(start.Dropped) != 1 || reserved != 1 {
		t.Errorf("existing ID: started %d, %d requests, %d dropped of %d reserved; want 0, 0, 1, 1",
			start.Started, len(start.Requests), len(start.Dropped), reserved)
	}
	if out[0].LockedBy != "sched-1" {
		t.Errorf("existing ID returned a task locked by %q, want the stored one (sched-1)", out[0].LockedBy)
	}
	if after := e.snapshot([]string{"o1"}, orderAgents); after != before {
		t.Errorf("submitting an existing ID changed the store:\nbefore %s\nafter  %s", before, after)
	}

	// A Start used again (a retried transaction) reports only its last
	// try: one that fails before starting anything holds no reservation.
	start = &flow.Start{Machine: &flow.Machine{Instance: "sched-1", Reserve: inProcess}, Room: 10, Clock: func() time.Time { return now }}
	e.submitStart(start, w.submission("o7", `{"order":"o7"}`, base))
	if len(start.Reserved()) != 1 {
		t.Fatalf("Reserved() = %d requests, want 1", len(start.Reserved()))
	}
	err := d.InTx(context.Background(), func(ctx context.Context, x store.Executor) error {
		_, err := flow.SubmitAndStart(ctx, x, []flow.Submission{w.submission("o8", `1`, base), w.submission("o8", `2`, base)}, start)
		return err
	})
	wantErrIs(t, err, flow.ErrTaskConflict, "conflicting submissions with a used Start")
	if len(start.Reserved()) != 0 || len(start.Requests) != 0 || start.Started != 0 {
		t.Errorf("a used Start after a try that started nothing: %d reserved, %d requests, %d started; want none",
			len(start.Reserved()), len(start.Requests), start.Started)
	}

	// A failing fence (the instance lease is gone): nothing is stored.
	lost := errors.New("lease lost")
	start = &flow.Start{Machine: &flow.Machine{Instance: "sched-1", Reserve: inProcess}, Room: 10, Clock: func() time.Time { return now },
		Fence: func(context.Context, store.Executor, time.Time) error { return lost }}
	err = d.InTx(context.Background(), func(ctx context.Context, x store.Executor) error {
		_, err := flow.SubmitAndStart(ctx, x, []flow.Submission{w.submission("o6", `{"order":"o6"}`, base)}, start)
		return err
	})
	wantErrIs(t, err, lost, "SubmitAndStart with a failing fence")
	if len(start.Reserved()) != 1 {
		t.Errorf("Reserved() = %d requests after a failed fence, want the 1 to give back", len(start.Reserved()))
	}
	if _, err := d.Reader().TaskGet(context.Background(), &store.TaskGetParams{ID: "o6"}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("task o6 after a failed fence: %v, want ErrNotFound", err)
	}
}

// testFlowStartAfterOrderingWait: a submission whose keyed task waits for
// another transaction holding the key starts its other tasks only after
// that wait, so their steps' budgets do not run while it waits.
func testFlowStartAfterOrderingWait(t *testing.T, d store.Driver) {
	probe, ok := d.(LockWaits)
	if !ok {
		t.Fatalf("driver %T does not implement storetest.LockWaits, which this case needs", d)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w := oneStepWF()
	release := holdOpen(ctx, t, d, func(ctx context.Context, x store.Executor) error {
		_, err := flow.Submit(ctx, x, []flow.Submission{keyed(w, "k1", "k")})
		return err
	})
	waitsBefore, err := probe.LockWaits(ctx)
	if err != nil {
		t.Fatalf("LockWaits: %v", err)
	}
	var released, early atomic.Bool
	start := &flow.Start{Machine: &flow.Machine{Instance: "sched-1"}, Room: 10, Clock: func() time.Time {
		if !released.Load() {
			early.Store(true)
		}
		return base
	}, Fence: func(context.Context, store.Executor, time.Time) error {
		if !released.Load() {
			early.Store(true)
		}
		return nil
	}}
	t2 := make(chan error, 1)
	go func() {
		t2 <- d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
			_, err := flow.SubmitAndStart(ctx, x, []flow.Submission{keyed(w, "k2", "k"), w.submission("u1", `{}`, base)}, start)
			return err
		})
	}()
	for {
		n, err := probe.LockWaits(ctx)
		if err != nil {
			t.Fatalf("LockWaits: %v", err)
		}
		if n > waitsBefore {
			break
		}
		select {
		case err := <-t2:
			t.Fatalf("the second submission ended (%v) while another transaction held its key", err)
		case <-time.After(2 * time.Millisecond):
		}
	}
	released.Store(true)
	if err := release(); err != nil {
		t.Fatal(err)
	}
	if err := <-t2; err != nil {
		t.Fatal(err)
	}
	if early.Load() {
		t.Errorf("the unkeyed task's step started, or the fence ran, before the wait for key k ended")
	}
	if start.Started != 1 || start.Requests[0].TaskID != "u1" {
		t.Errorf("started %d (%v), want u1 only", start.Started, reqKeys(start.Requests))
	}
}

// testFlowSubmitAndStartEventRows: tasks started in one submission record
// each task's submitted and step_started one after the other, so the store
// keeps them in one event row (their IDs are consecutive, store.GroupEvents),
// and each task's history reads as a claim's would.
func testFlowSubmitAndStartEventRows(t *testing.T, d store.Driver) {
	e := newEnv(t, d)
	w := orderWF()
	now := at(time.Second)
	start := &flow.Start{Machine: &flow.Machine{Instance: "sched-1", Reserve: func(string) (string, bool) { return "rt-1", true }},
		Room: 10, Clock: func() time.Time { return now }}
	ids := []string{"r1", "r2", "r3"}
	var subs []flow.Submission
	for _, id := range ids {
		subs = append(subs, w.submission(id, `{"order":"`+id+`"}`, base))
	}
	e.submitStart(start, subs...)
	if start.Started != len(ids) {
		t.Fatalf("%d tasks started, want %d", start.Started, len(ids))
	}
	for _, id := range ids {
		evs := e.wantEvents(id, "submitted step_started[0]")
		if len(evs) == 2 && evs[1].ID != evs[0].ID+1 {
			t.Errorf("%s: submitted has ID %d, step_started %d: not one event row", id, evs[0].ID, evs[1].ID)
		}
	}
}
