package drover_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drover-run/drover"
)

// offsetClock is the system clock moved on by Advance: the supervisor and
// the schedulers run on their own, and the test moves time past deadlines
// and waits instead of sleeping through them.
type offsetClock struct{ off atomic.Int64 }

func (c *offsetClock) Now() time.Time          { return time.Now().UTC().Add(time.Duration(c.off.Load())) }
func (c *offsetClock) Advance(d time.Duration) { c.off.Add(int64(d)) }

func TestWaitPolicyValidation(t *testing.T) {
	t.Parallel()
	w := drover.Workflow{Name: "w",
		Wait: drover.WaitPolicy{MaxWaits: -1, Delay: -time.Second, Multiplier: 0.5, MaxDelay: -time.Minute},
		Steps: []drover.Step{
			{Name: "a", Agent: "x", OnFailure: "wait"},
			{Name: "b", Agent: "x", Wait: &drover.WaitPolicy{MaxWaits: 2, Delay: 2 * time.Hour, MaxDelay: time.Hour}},
		}}
	var ve *drover.ValidationError
	if err := w.Validate(); !errors.As(err, &ve) {
		t.Fatalf("Validate = %v, want a *ValidationError", err)
	}
	want := []string{
		"Wait.MaxWaits -1 is negative", "Wait.Delay -1s is negative", "Wait.MaxDelay -1m0s is negative",
		"Wait.Multiplier 0.5 must be between 1 and 1000 (0: the default, 2)",
		`step 0 (a): OnFailure "wait" must be "error" or "compensate"`,
		"step 1 (b): Wait.MaxDelay 1h0m0s is less than Delay 2h0m0s",
	}
	if got := strings.Join(ve.Problems, "\n"); got != strings.Join(want, "\n") {
		t.Errorf("problems:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
}

// TestWaitPolicyEndToEnd: a step that keeps timing out waits (its own
// policy, defaults filled in at registration and copied into the store at
// submit), then is tried again, and after its waits the task compensates
// by the step's own OnFailure; a task submitted before the workflow was
// replaced keeps the policy it started with.
func TestWaitPolicyEndToEnd(t *testing.T) {
	t.Parallel()
	clk := &offsetClock{}
	wf := drover.Workflow{Name: "trip", FailureThreshold: 1, Steps: []drover.Step{
		{Name: "flight", Agent: "air", Compensation: "air-undo"},
		// worker runs in no process: its requests time out.
		{Name: "car", Agent: "worker", Timeout: time.Minute, OnFailure: drover.PolicyCompensate, Wait: &drover.WaitPolicy{MaxWaits: 2}},
	}}
	c := startClient(t, drover.Config{
		Store: newStore(t), Clock: clk, Workflows: []drover.Workflow{wf},
		Agents:         []drover.Agent{okAgent("air"), okAgent("air-undo")},
		ExternalAgents: []string{"worker"},
	})
	ctx := context.Background()
	if _, err := c.Submit(ctx, "trip", []byte(`{}`), &drover.SubmitOptions{ID: "t1"}); err != nil {
		t.Fatal(err)
	}
	// Replaced while t1 runs: t1 keeps its policy.
	wf.Steps[1].Wait = &drover.WaitPolicy{}
	if err := c.AddWorkflows([]drover.Workflow{wf}, nil); err != nil {
		t.Fatal(err)
	}
	task := func() *drover.Task {
		t.Helper()
		tk, err := c.Task(ctx, "t1")
		if err != nil {
			t.Fatal(err)
		}
		return tk
	}
	tk := task()
	if s := tk.Steps[1]; s.OnFailure != drover.PolicyCompensate || s.Wait == nil ||
		*s.Wait != (drover.WaitPolicy{MaxWaits: 2, Delay: drover.DefaultWaitDelay, Multiplier: drover.DefaultWaitMultiplier, MaxDelay: drover.DefaultWaitMaxDelay}) {
		t.Fatalf("stored policy of step car: %q %+v", s.OnFailure, s.Wait)
	}
	if tk.OnFailure != drover.PolicyError || tk.Wait.On() {
		t.Errorf("task policy %q %+v, want the workflow's: error, no waits", tk.OnFailure, tk.Wait)
	}
	waits := func(n int) {
		t.Helper()
		waitFor(t, "the step to be dispatched", func() bool { s := task().Steps[1]; return s.ProcessState == drover.Processing })
		clk.Advance(time.Minute + time.Second) // past CompleteBy
		waitFor(t, "the supervisor to act", func() bool { return task().Steps[1].ProcessState != drover.Processing })
		if n == 0 {
			return
		}
		evs := events(t, c, "t1")
		last := evs[len(evs)-1]
		if last.Type != drover.EventStepWaiting || !last.Alert || last.StepIndex != 1 {
			t.Fatalf("after timeout %d: last event %s (alert %v), want a step_waiting alert", n, last.Type, last.Alert)
		}
		tk := task()
		want := []time.Duration{5 * time.Minute, 10 * time.Minute}[n-1]
		if tk.ProcessState != drover.Pending || tk.AvailableAt.Sub(last.CreatedAt) != want {
			t.Fatalf("wait %d: task %s, next attempt %s after the event; want Pending, %s", n, tk.ProcessState, tk.AvailableAt.Sub(last.CreatedAt), want)
		}
		clk.Advance(want)
	}
	waits(1)
	waits(2)
	waits(0) // the waits are over: the step's own policy, compensate
	if tk := waitTask(t, c, "t1"); tk.ProcessState != drover.Compensated || !strings.Contains(tk.LastError, "after 2 extended waits") {
		t.Fatalf("t1 ended %s (%s), want Compensated after 2 waits", tk.ProcessState, tk.LastError)
	}
	if st := c.Stats(); st.SupervisorWaits != 2 {
		t.Errorf("Stats().SupervisorWaits = %d, want 2", st.SupervisorWaits)
	}
}
