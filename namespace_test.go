package drover_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/store"
)

// TestNamespaceCannotTakeEveryInFlightSlot: namespace a's tasks call an
// agent that never answers within their deadline, more of them than the
// scheduler may hold; namespace b's task still runs well within its
// deadline, because a holds at most NamespaceMaxInFlight of the room.
// The same ID in both namespaces names two tasks.
func TestNamespaceCannotTakeEveryInFlightSlot(t *testing.T) {
	for name, d := range eagerStores(t) {
		t.Run(name, func(t *testing.T) {
			c := startNamespaceCapClient(t, d)
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

// startNamespaceCapClient starts a client of one scheduler holding 8
// tasks, at most 6 of one namespace, with workflows "slow" (its agent
// answers only after the test) and "fast".
func startNamespaceCapClient(t *testing.T, d store.Driver) *drover.Client {
	t.Helper()
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
	return c
}

// TestNamespaceCapAppliesToEagerStart: once namespaces are in use, a
// Submit starts a task in its own transaction (eager start) only within
// its namespace's cap, the default namespace's included: of 20 slow tasks
// of the default namespace at most 6 are Processing, and b's task still
// finds room and runs at once.
func TestNamespaceCapAppliesToEagerStart(t *testing.T) {
	for name, d := range eagerStores(t) {
		t.Run(name, func(t *testing.T) {
			c := startNamespaceCapClient(t, d)
			ctx := context.Background()
			// Namespaces in use: a task of b has run.
			if _, err := c.Submit(ctx, "fast", nil, &drover.SubmitOptions{ID: "first", Namespace: "b"}); err != nil {
				t.Fatal(err)
			}
			if task := waitTask(t, c, "b/first"); task.ProcessState != drover.Processed {
				t.Fatalf("b's first task: %+v", task)
			}
			started := 0
			for i := range 20 {
				task, err := c.Submit(ctx, "slow", nil, &drover.SubmitOptions{ID: fmt.Sprintf("t-%d", i)})
				if err != nil {
					t.Fatal(err)
				}
				if task.ProcessState == drover.Processing {
					started++
				}
			}
			if started == 0 || started > 6 {
				t.Errorf("%d of 20 tasks started at submission, want 1 to 6", started)
			}
			ts, err := c.Tasks(ctx, drover.ListParams{Namespace: drovertype.DefaultNamespace, States: []drover.ProcessState{drover.Processing}})
			if err != nil || len(ts) > 6 {
				t.Fatalf("the default namespace holds %d tasks (%v), want at most 6", len(ts), err)
			}
			// The scheduler holds 8: b still finds room.
			if _, err := c.Submit(ctx, "fast", nil, &drover.SubmitOptions{ID: "t-0", Namespace: "b"}); err != nil {
				t.Fatal(err)
			}
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if task, err := c.Wait(wctx, "b/t-0"); err != nil || task.ProcessState != drover.Processed {
				t.Fatalf("b's task: %v %+v", err, task)
			}
		})
	}
}
