package drover_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/internal/clock"
	"github.com/drover-run/drover/store"
)

// Tasks waiting to start are claimed by priority, higher first, aged: a
// lower priority that has waited longer than PriorityAging per level of
// difference goes first. One scheduler holding one task at a time makes
// the agent's call order the claim order.
func TestTaskPriorities(t *testing.T) {
	t.Parallel()
	bothStores(t, func(t *testing.T, d store.Driver) {
		clk := clock.NewFake(time.Now())
		ran := make(chan string, 16)
		gate := make(chan struct{})
		c := startClient(t, drover.Config{
			Store: d, Clock: clk, LeaseTTL: 24 * time.Hour, NoEagerStart: true, // the lease outlives the clock's jumps
			Schedulers: 1, MaxInFlight: 1, ClaimBatch: 1,
			Workflows: []drover.Workflow{
				{Name: "job", Steps: []drover.Step{{Name: "run", Agent: "worker", Timeout: time.Hour}}},
				{Name: "urgent", Priority: 4, Steps: []drover.Step{{Name: "run", Agent: "worker", Timeout: time.Hour}}},
			},
			Agents: []drover.Agent{{Name: "worker", Concurrency: 1, Func: func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) {
				if strings.HasPrefix(r.TaskID, "blocker") {
					select {
					case <-gate:
					case <-ctx.Done():
						return nil, ctx.Err()
					}
				}
				ran <- r.TaskID
				return nil, nil
			}}},
		})
		ctx := context.Background()
		submit := func(id, workflow string, priority *int) {
			t.Helper()
			task, err := c.Submit(ctx, workflow, nil, &drover.SubmitOptions{ID: id, Priority: priority})
			if err != nil {
				t.Fatal(err)
			}
			want := 4
			if workflow == "job" {
				want = 0
			}
			if priority != nil {
				want = *priority
			}
			if task.Priority != want {
				t.Fatalf("%s: priority %d, want %d", id, task.Priority, want)
			}
		}
		// order holds the blocker (so the others queue up), submits tasks
		// one by one, each after the clock moved by its step, and returns
		// the order they ran in once the blocker is let go.
		order := func(blocker string, add func()) []string {
			t.Helper()
			submit(blocker, "job", drover.PriorityOf(drover.MaxPriority))
			waitFor(t, blocker+" held", func() bool {
				task, err := c.Task(ctx, blocker)
				return err == nil && task.LockedBy != ""
			})
			add()
			gate <- struct{}{}
			var got []string
			for range 5 {
				got = append(got, <-ran)
			}
			return got[1:]
		}
		got := order("blocker1", func() {
			submit("low1", "job", nil)
			submit("low2", "job", drover.PriorityOf(0))
			submit("top", "job", drover.PriorityOf(drover.MaxPriority))
			submit("urgent", "urgent", nil) // the workflow's priority, 4
		})
		if want := "top urgent low1 low2"; strings.Join(got, " ") != want {
			t.Fatalf("ran %v, want %s", got, want)
		}
		// Aging: old (priority 0) has waited 3 minutes when two (priority
		// 2, 2 minutes' lead) arrives, so it goes first; five (priority 5)
		// leads it by 5 minutes and goes before both; zero arrives last.
		got = order("blocker2", func() {
			submit("old", "job", nil)
			clk.Advance(3 * time.Minute)
			submit("two", "job", drover.PriorityOf(2))
			submit("five", "job", drover.PriorityOf(5))
			submit("zero", "job", nil)
		})
		if want := "five old two zero"; strings.Join(got, " ") != want {
			t.Fatalf("ran %v, want %s", got, want)
		}
	})
}

// A priority out of range is refused with a reason, in a submission and in
// a workflow's definition.
func TestTaskPriorityBadInput(t *testing.T) {
	t.Parallel()
	c := startClient(t, drover.Config{
		Store:     newStore(t),
		Workflows: []drover.Workflow{{Name: "job", Steps: []drover.Step{{Name: "run", Agent: "worker"}}}},
		Agents:    []drover.Agent{okAgent("worker")},
	})
	for _, p := range []int{-1, drover.MaxPriority + 1} {
		_, err := c.Submit(context.Background(), "job", nil, &drover.SubmitOptions{Priority: drover.PriorityOf(p)})
		if !errors.Is(err, drover.ErrInvalidInput) || !strings.Contains(err.Error(), "Priority") || !strings.Contains(err.Error(), "out of range") {
			t.Errorf("priority %d: %v, want ErrInvalidInput saying it is out of range", p, err)
		}
	}
	wantNothingStored(t, c)
	err := drover.Workflow{Name: "w", Priority: 11, Steps: []drover.Step{{Name: "s", Agent: "a"}}}.Validate()
	if err == nil || !strings.Contains(err.Error(), "Priority 11 is out of range") {
		t.Errorf("a workflow of priority 11: %v", err)
	}
}
