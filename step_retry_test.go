package drover_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/drover-run/drover"
)

var errDeclined = errors.New("card declined")

// A step's own retry policy replaces its agent's for that step's calls:
// which errors are retried (a declined card fails the step at once, not
// after retries until the deadline) and how many tries one attempt makes.
// The agent's own policy still applies to the other steps.
func TestStepRetryPolicy(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	calls := map[string]int{} // "task/step/attempt" → calls
	c := startClient(t, drover.Config{
		Store: newStore(t),
		Workflows: []drover.Workflow{
			{Name: "pay", Steps: []drover.Step{{Name: "charge", Agent: "psp", Timeout: 20 * time.Second,
				Retry: &drover.RetryPolicy{Retryable: func(err error) bool { return !errors.Is(err, errDeclined) }}}}},
			{Name: "pay-default", Steps: []drover.Step{{Name: "charge", Agent: "psp", Timeout: 20 * time.Second}}},
			{Name: "ping", FailureThreshold: 2, Steps: []drover.Step{{Name: "probe", Agent: "psp", Timeout: 300 * time.Millisecond,
				Retry: &drover.RetryPolicy{MaxTries: 3, InitialInterval: time.Millisecond, MaxInterval: time.Millisecond}}}},
		},
		Agents: []drover.Agent{{Name: "psp", Retry: drover.RetryPolicy{InitialInterval: time.Millisecond, MaxInterval: 2 * time.Millisecond, MaxTries: 10},
			Func: func(_ context.Context, r *drover.AgentRequest) ([]byte, error) {
				key := fmt.Sprintf("%s/%s/%d", r.TaskID, r.StepName, r.Attempt)
				mu.Lock()
				calls[key]++
				n := calls[key]
				mu.Unlock()
				if r.TaskID == "ping-1" {
					return nil, errors.New("service unavailable")
				}
				if r.TaskID == "default-1" && n < 4 {
					return nil, errDeclined // retried under the agent's policy
				}
				if r.TaskID == "pay-1" {
					return nil, errDeclined
				}
				return []byte(`"ok"`), nil
			}}},
	})
	ctx := context.Background()
	for id, wf := range map[string]string{"pay-1": "pay", "default-1": "pay-default", "ping-1": "ping"} {
		if _, err := c.Submit(ctx, wf, nil, &drover.SubmitOptions{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	got := func(key string) int {
		mu.Lock()
		defer mu.Unlock()
		return calls[key]
	}
	// The declined card is not retried under the step's policy: Error after one call.
	if tk := waitTask(t, c, "pay-1"); tk.ProcessState != drover.Error || !strings.Contains(tk.LastError, "card declined") || got("pay-1/charge/1") != 1 {
		t.Errorf("pay-1: %s %q after %d calls; want Error, card declined, 1 call", tk.ProcessState, tk.LastError, got("pay-1/charge/1"))
	}
	// The same error in the step without a policy of its own is retried
	// as the agent's policy says, and succeeds on the 4th call.
	if tk := waitTask(t, c, "default-1"); tk.ProcessState != drover.Processed || got("default-1/charge/1") != 4 {
		t.Errorf("default-1: %s after %d calls; want Processed after 4", tk.ProcessState, got("default-1/charge/1"))
	}
	// An unavailable service: 3 tries per attempt (the step's MaxTries, not
	// the agent's 10); the supervisor retries the step after each deadline.
	waitFor(t, "ping-1's second attempt", func() bool { return got("ping-1/probe/2") == 3 })
	if n := got("ping-1/probe/1"); n != 3 {
		t.Errorf("ping-1's first attempt made %d calls, want 3 (the step's MaxTries)", n)
	}
}

// A step's retry policy is validated with the workflow.
func TestStepRetryPolicyValidated(t *testing.T) {
	t.Parallel()
	w := drover.Workflow{Name: "w", Steps: []drover.Step{{Name: "s", Agent: "a",
		Retry: &drover.RetryPolicy{InitialInterval: time.Second, MaxInterval: time.Millisecond}}}}
	err := w.Validate()
	if err == nil || !strings.Contains(err.Error(), "step 0 (s): Retry.InitialInterval 1s is more than MaxInterval 1ms") {
		t.Fatalf("Validate: %v", err)
	}
	w.Steps[0].Retry = &drover.RetryPolicy{MaxInterval: -time.Second}
	if err := w.Validate(); err == nil || !strings.Contains(err.Error(), "Retry.MaxInterval -1s is negative") {
		t.Fatalf("Validate: %v", err)
	}
}
