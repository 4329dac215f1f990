package drover_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/store"
)

// signalWorkflows: an order reserves stock (undone by release), waits an
// hour for approval, then ships with the approval as its input. "lenient"
// approves by default at the deadline; "strict" compensates.
func signalWorkflows() []drover.Workflow {
	approve := drover.Step{Name: "approve", Signal: "approved", Timeout: time.Hour}
	lenient, strict := approve, approve
	lenient.SignalDefault = []byte(`{"approved":"by default"}`)
	strict.OnFailure = drover.PolicyCompensate
	steps := func(a drover.Step) []drover.Step {
		return []drover.Step{{Name: "reserve", Agent: "stock", Compensation: "release"}, a, {Name: "ship", Agent: "shipper"}}
	}
	return []drover.Workflow{
		{Name: "order", Steps: steps(approve)},
		{Name: "lenient", Steps: steps(lenient)},
		{Name: "strict", Steps: steps(strict)},
	}
}

// signalAgents records what the shipper got (the approval) and the
// releases; stock waits while hold has the task's ID.
type signalAgents struct {
	mu       sync.Mutex
	shipped  map[string]string
	released map[string]bool
	hold     map[string]chan struct{}
}

func newSignalAgents() *signalAgents {
	return &signalAgents{shipped: map[string]string{}, released: map[string]bool{}, hold: map[string]chan struct{}{}}
}

func (a *signalAgents) agents() []drover.Agent {
	return []drover.Agent{
		{Name: "stock", Func: func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) {
			a.mu.Lock()
			h := a.hold[r.TaskID]
			a.mu.Unlock()
			if h != nil {
				select {
				case <-h:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			return []byte(`"reserved"`), nil
		}},
		{Name: "release", Func: func(_ context.Context, r *drover.AgentRequest) ([]byte, error) {
			a.mu.Lock()
			defer a.mu.Unlock()
			a.released[r.TaskID] = true
			return []byte(`"released"`), nil
		}},
		{Name: "shipper", Func: func(_ context.Context, r *drover.AgentRequest) ([]byte, error) {
			a.mu.Lock()
			defer a.mu.Unlock()
			a.shipped[r.TaskID] = string(r.PreviousOutput)
			return []byte(`"shipped"`), nil
		}},
	}
}

func (a *signalAgents) shippedWith(id string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.shipped[id]
}

// waitSignalStep waits until task id's step 1 waits for its signal.
func waitSignalStep(t *testing.T, c *drover.Client, id string) *drover.Task {
	t.Helper()
	var tk *drover.Task
	waitFor(t, id+" to wait for its signal", func() bool {
		var err error
		tk, err = c.Task(context.Background(), id)
		return err == nil && tk.CurrentStep == 1 && tk.Steps[1].ProcessState == drover.Processing
	})
	return tk
}

// TestSignalStep: a signal step waits, held by no scheduler, until its
// signal (sent after it started waiting, or before it got there) completes
// it with the payload, which the next step gets; a duplicate ID is
// ignored; unknown and final tasks refuse signals; at the deadline the
// default outcome, Error with an alert, or compensation applies; a
// waiting task can be cancelled.
func TestSignalStep(t *testing.T) {
	t.Parallel()
	bothStores(t, func(t *testing.T, d store.Driver) {
		clk := &offsetClock{}
		ag := newSignalAgents()
		ag.hold["early"] = make(chan struct{})
		c := startClient(t, drover.Config{Store: d, Clock: clk, Workflows: signalWorkflows(), Agents: ag.agents()})
		ctx := context.Background()
		submit := func(wf, id string) {
			t.Helper()
			if _, err := c.Submit(ctx, wf, []byte(`{}`), &drover.SubmitOptions{ID: id}); err != nil {
				t.Fatal(err)
			}
		}

		// Sent while the step waits.
		submit("order", "after")
		tk := waitSignalStep(t, c, "after")
		if tk.LockedBy != drover.SignalHolder || tk.ProcessState != drover.Processing || tk.CompleteBy == nil {
			t.Fatalf("waiting task: %s locked by %q, CompleteBy %v", tk.ProcessState, tk.LockedBy, tk.CompleteBy)
		}
		if s := tk.Steps[1]; s.Attempt != 1 || s.CompleteBy == nil || !s.CompleteBy.Equal(*tk.CompleteBy) || s.Signal != "approved" {
			t.Fatalf("waiting step: %+v", s)
		}
		res, err := c.SendSignal(ctx, drover.SignalParams{TaskID: "after", Name: "approved", ID: "a1", Payload: []byte(`{"by":"ann"}`), Sender: "ann"})
		if err != nil || !res.Delivered || res.Duplicate || res.ID != "a1" {
			t.Fatalf("signal: %+v %v, want delivered", res, err)
		}
		if got := waitTask(t, c, "after"); got.ProcessState != drover.Processed || string(got.Steps[1].Output) != `{"by":"ann"}` {
			t.Fatalf("after the signal: %s, approve output %s", got.ProcessState, got.Steps[1].Output)
		}
		if got := ag.shippedWith("after"); got != `{"by":"ann"}` {
			t.Errorf("ship got %s, want the approval", got)
		}
		types := strings.Join(eventTypes(events(t, c, "after")), " ")
		if !strings.Contains(types, "signal_waiting signal_received step_processed") {
			t.Errorf("history: %s", types)
		}
		if _, err := c.Signal(ctx, "after", "approved", nil); !errors.Is(err, drover.ErrAlreadyFinal) {
			t.Errorf("signal to a final task: %v, want ErrAlreadyFinal", err)
		}
		if _, err := c.Signal(ctx, "nobody", "approved", nil); !errors.Is(err, drover.ErrTaskNotFound) {
			t.Errorf("signal to an unknown task: %v, want ErrTaskNotFound", err)
		}
		for _, bad := range []drover.SignalParams{{TaskID: "after", Name: "has space"}, {TaskID: "after", Name: "x", Payload: []byte("{")}, {TaskID: "after", Name: "x", ID: "a/b"}} {
			if _, err := c.SendSignal(ctx, bad); !errors.Is(err, drover.ErrInvalidInput) {
				t.Errorf("SendSignal(%+v) = %v, want ErrInvalidInput", bad, err)
			}
		}

		// Sent before the task gets to the step, twice with one ID.
		submit("order", "early")
		for i, want := range []bool{false, true} {
			res, err := c.SendSignal(ctx, drover.SignalParams{TaskID: "early", Name: "approved", ID: "e1", Payload: []byte(`{"n":1}`)})
			if err != nil || res.Delivered || res.Duplicate != want {
				t.Fatalf("early signal %d: %+v %v, want kept (duplicate %v)", i, res, err, want)
			}
		}
		if _, err := c.SendSignal(ctx, drover.SignalParams{TaskID: "early", Name: "approved", ID: "e2", Payload: []byte(`{"n":2}`)}); err != nil {
			t.Fatal(err)
		}
		close(ag.hold["early"])
		if got := waitTask(t, c, "early"); got.ProcessState != drover.Processed || ag.shippedWith("early") != `{"n":1}` {
			t.Fatalf("early: %s, shipped with %s; want the oldest signal", got.ProcessState, ag.shippedWith("early"))
		}
		sigs, err := c.Signals(ctx, "early")
		if err != nil || len(sigs) != 2 || sigs[0].ConsumedAt == nil || sigs[0].ConsumedStep != 1 || sigs[0].ConsumedAttempt != 1 || sigs[1].ConsumedAt != nil {
			t.Fatalf("signals of early: %v %v, want e1 consumed by step 1, e2 kept", sigs, err)
		}

		// Deadlines, and a cancel while waiting.
		for _, id := range []string{"lenient", "order", "strict"} {
			submit(id, "late-"+id)
			waitSignalStep(t, c, "late-"+id)
		}
		submit("order", "cancelled")
		waitSignalStep(t, c, "cancelled")
		if _, err := c.Cancel(ctx, "cancelled", "no longer wanted"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Signal(ctx, "cancelled", "approved", nil); !errors.Is(err, drover.ErrAlreadyFinal) {
			t.Errorf("signal to a cancelled task: %v", err)
		}
		clk.Advance(time.Hour + time.Second)
		if got := waitTask(t, c, "late-lenient"); got.ProcessState != drover.Processed || ag.shippedWith("late-lenient") != `{"approved":"by default"}` {
			t.Errorf("default outcome: %s, shipped with %s", got.ProcessState, ag.shippedWith("late-lenient"))
		}
		got := waitTask(t, c, "late-order")
		if got.ProcessState != drover.Error || got.Steps[1].ProcessState != drover.Error || !strings.Contains(got.LastError, `no signal "approved"`) || got.FailureCount != 1 {
			t.Errorf("policy error: %s (%s), FailureCount %d", got.ProcessState, got.LastError, got.FailureCount)
		}
		evs := events(t, c, "late-order")
		if last := evs[len(evs)-1]; last.Type != drover.EventError || !last.Alert {
			t.Errorf("last event %s alert %v, want an error alert", last.Type, last.Alert)
		}
		if got := waitTask(t, c, "late-strict"); got.ProcessState != drover.Compensated || !ag.released["late-strict"] || ag.shippedWith("late-strict") != "" {
			t.Errorf("compensate: %s, released %v", got.ProcessState, ag.released["late-strict"])
		}
		// A signal after the deadline is refused once the task is final.
		if _, err := c.Signal(ctx, "late-order", "approved", nil); !errors.Is(err, drover.ErrAlreadyFinal) {
			t.Errorf("late signal: %v", err)
		}
		// Resubmitted, the step waits again and a signal completes it.
		if _, err := c.Resubmit(ctx, "late-order", nil); err != nil {
			t.Fatal(err)
		}
		if tk := waitSignalStep(t, c, "late-order"); tk.Steps[1].Attempt != 2 {
			t.Errorf("resubmitted: attempt %d, want 2", tk.Steps[1].Attempt)
		}
		if res, err := c.Signal(ctx, "late-order", "approved", []byte(`"yes"`)); err != nil || !res.Delivered {
			t.Fatalf("signal after resubmit: %+v %v", res, err)
		}
		if got := waitTask(t, c, "late-order"); got.ProcessState != drover.Processed {
			t.Errorf("after resubmit: %s", got.ProcessState)
		}
	})
}

// TestSignalWaitOutlivesScheduler: a task waiting for a signal is held by
// no process: stopped, its scheduler's instance leaves nothing behind, a
// signal sent while no process runs is kept, and another process finishes
// the task.
func TestSignalWaitOutlivesScheduler(t *testing.T) {
	t.Parallel()
	bothStores(t, func(t *testing.T, d store.Driver) {
		ag := newSignalAgents()
		ctx := context.Background()
		c1, err := drover.New(fast(drover.Config{Store: d, InstanceID: "first", Workflows: signalWorkflows(), Agents: ag.agents()}))
		if err != nil {
			t.Fatal(err)
		}
		if err := c1.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := c1.Submit(ctx, "order", []byte(`{}`), &drover.SubmitOptions{ID: "o1"}); err != nil {
			t.Fatal(err)
		}
		waitSignalStep(t, c1, "o1")
		if err := c1.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		c2, err := drover.New(fast(drover.Config{Store: d, InstanceID: "second", Workflows: signalWorkflows(), Agents: ag.agents()}))
		if err != nil {
			t.Fatal(err)
		}
		res, err := c2.Signal(ctx, "o1", "approved", json.RawMessage(`{"ok":true}`))
		if err != nil || !res.Delivered || res.Task.ProcessState != drover.Pending {
			t.Fatalf("signal with no process running: %+v %v", res, err)
		}
		if err := c2.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c2.Stop(context.Background()) })
		if got := waitTask(t, c2, "o1"); got.ProcessState != drover.Processed || ag.shippedWith("o1") != `{"ok":true}` {
			t.Fatalf("o1: %s, shipped with %s", got.ProcessState, ag.shippedWith("o1"))
		}
	})
}

func TestSignalStepValidation(t *testing.T) {
	t.Parallel()
	w := drover.Workflow{Name: "w", Steps: []drover.Step{
		{Name: "a", Signal: "ok", Agent: "x", Compensation: "y", Retry: &drover.RetryPolicy{}, SignalDefault: []byte("{")},
		{Name: "b", SignalDefault: []byte("1")},
	}}
	var ve *drover.ValidationError
	if err := w.Validate(); !errors.As(err, &ve) {
		t.Fatalf("Validate = %v", err)
	}
	want := []string{
		`step 0 (a): waits for signal "ok", so it cannot also call agent "x"`,
		`step 0 (a): a signal step has nothing to undo: Compensation "y" must be unset`,
		"step 0 (a): a signal step is never retried: Retry and Wait must be unset",
		"step 0 (a): a signal step needs a Timeout: the deadline of its wait",
		"step 0 (a): SignalDefault must be a JSON document",
		"step 1 (b): SignalDefault is set but Signal is not",
	}
	if got := strings.Join(ve.Problems, "\n"); got != strings.Join(want, "\n") {
		t.Errorf("problems:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
}
