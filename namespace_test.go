package drover_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/drover-run/drover"
)

// TestNamespaceCannotTakeEveryInFlightSlot: namespace a's tasks call an
// agent that never answers within their deadline, more of them than the
// scheduler may hold; namespace b's task still runs well within its
// deadline, because a holds at most NamespaceMaxInFlight of the room.
// The same ID in both namespaces names two tasks.
func TestNamespaceCannotTakeEveryInFlightSlot(t *testing.T) {
	for name, d := range eagerStores(t) {
		t.Run(name, func(t *testing.T) {
			block := make(chan struct{})
			c := startClient(t, drover.Config{Store: d, Schedulers: 1, MaxInFlight: 8, NamespaceMaxInFlight: 6,
				Workflows: []drover.Workflow{
					{Name: "slow", Steps: []drover.Step{{Name: "s", Agent: "slow", Timeout: time.Minute}}},
					{Name: "fast", Steps: []drover.Step{{Name: "f", Agent: "fast", Timeout: 5 * time.Second}}},
				},
				Agents: []drover.Agent{
					{Name: "slow", Concurrency: 64, Func: func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) {
						select {
						case <-block:
						case <-ctx.Done():
						}
						return nil, ctx.Err()
					}},
					{Name: "fast", Func: func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) { return []byte(`"ok"`), nil }},
				}})
			t.Cleanup(func() { close(block) }) // before the client stops (cleanups run last first)
			ctx := context.Background()
			for i := range 20 {
				if _, err := c.Submit(ctx, "slow", nil, &drover.SubmitOptions{ID: fmt.Sprintf("t-%d", i), Namespace: "a"}); err != nil {
					t.Fatal(err)
				}
			}
			// a holds its share: 6 of its tasks are Processing, the rest wait.
			deadline := time.Now().Add(15 * time.Second)
			for {
				ts, err := c.Tasks(ctx, drover.ListParams{Namespace: "a", States: []drover.ProcessState{drover.Processing}})
				if err != nil {
					t.Fatal(err)
				}
				if len(ts) == 6 {
					break
				}
				if len(ts) > 6 || time.Now().After(deadline) {
					t.Fatalf("%d of a's tasks are Processing, want 6", len(ts))
				}
				time.Sleep(10 * time.Millisecond)
			}
			start := time.Now()
			if _, err := c.Submit(ctx, "fast", nil, &drover.SubmitOptions{ID: "t-0", Namespace: "b"}); err != nil {
				t.Fatal(err)
			}
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			task, err := c.Wait(wctx, "b/t-0")
			if err != nil || task.ProcessState != drover.Processed {
				t.Fatalf("b's task while a's hang: %v %+v", err, task)
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("b's task took %s", took)
			}
			ts, err := c.Tasks(ctx, drover.ListParams{Namespace: "a", States: []drover.ProcessState{drover.Processing}})
			if err != nil || len(ts) > 6 {
				t.Fatalf("a holds %d tasks (%v), want at most 6", len(ts), err)
			}
		})
	}
}
