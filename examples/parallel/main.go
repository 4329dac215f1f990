// Command parallel shows parallel steps: a step group whose branches run
// at the same time and join before the next step, which reads each
// branch's output by name. When a branch fails for good, the other
// branches are abandoned and, with PolicyCompensate, every completed
// branch and earlier step is undone in reverse order of completion.
//
//	go run ./examples/parallel
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/store/sqlite"
)

func main() {
	if err := run(context.Background()); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "drover-parallel-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	store, err := sqlite.Open(ctx, filepath.Join(dir, "drover.db"), sqlite.Options{Create: true})
	if err != nil {
		return err
	}
	defer store.Close()

	// Each branch waits until the other has started: the task finishes
	// only because both run at once.
	var mu sync.Mutex
	started := map[string]chan struct{}{}
	arrive := func(task, branch, other string) <-chan struct{} {
		mu.Lock()
		defer mu.Unlock()
		for _, b := range []string{branch, other} {
			if started[task+b] == nil {
				started[task+b] = make(chan struct{})
			}
		}
		select {
		case <-started[task+branch]:
		default:
			close(started[task+branch])
		}
		return started[task+other]
	}
	var c *drover.Client
	branch := func(name, other string) drover.Agent {
		return drover.Agent{Name: name, Func: func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) {
			select {
			case <-arrive(r.TaskID, name, other):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			if name == "payments" && r.TaskID == "order-2" {
				// Declined once the stock is reserved: that reservation
				// and the quote are undone.
				if err := stockReserved(ctx, c, r.TaskID); err != nil {
					return nil, err
				}
				return nil, drover.Permanent(errors.New("card declined"))
			}
			return json.Marshal(name + " ok for " + r.TaskID)
		}}
	}
	undo := func(name string) drover.Agent {
		return drover.Agent{Name: "undo-" + name, Func: func(_ context.Context, r *drover.AgentRequest) ([]byte, error) {
			fmt.Printf("%s: undo %s\n", r.TaskID, r.StepName)
			return nil, nil
		}}
	}
	c, err = drover.New(drover.Config{
		Store: store,
		Workflows: []drover.Workflow{{Name: "order", OnFailure: drover.PolicyCompensate, Steps: []drover.Step{
			{Name: "quote", Agent: "quotes", Compensation: "undo-quote"},
			{Name: "reserve", Parallel: []drover.Step{
				{Name: "stock", Agent: "inventory", Compensation: "undo-stock", Timeout: 10 * time.Second},
				{Name: "payment", Agent: "payments", Compensation: "undo-payment", Timeout: 10 * time.Second},
			}},
			{Name: "ship", Agent: "shipping"},
		}}},
		Agents: []drover.Agent{
			{Name: "quotes", Func: func(context.Context, *drover.AgentRequest) ([]byte, error) { return []byte(`{"price":42}`), nil }},
			branch("inventory", "payments"), branch("payments", "inventory"),
			{Name: "shipping", Func: func(_ context.Context, r *drover.AgentRequest) ([]byte, error) {
				// The group's output: each branch's by name.
				fmt.Printf("%s: ship got %s\n", r.TaskID, r.PreviousOutput)
				return []byte(`"shipped"`), nil
			}},
			undo("quote"), undo("stock"), undo("payment"),
		},
	})
	if err != nil {
		return err
	}
	if err := c.Migrate(ctx); err != nil {
		return err
	}
	if err := c.Start(ctx); err != nil {
		return err
	}
	defer func() { _ = c.Stop(context.Background()) }()

	for _, id := range []string{"order-1", "order-2"} {
		if _, err := c.Submit(ctx, "order", nil, &drover.SubmitOptions{ID: id}); err != nil {
			return err
		}
		t, err := c.Wait(ctx, id)
		if err != nil {
			return err
		}
		fmt.Printf("%s: %s", id, t.ProcessState)
		if t.LastError != "" {
			fmt.Printf(" (%s)", t.LastError)
		}
		fmt.Println()
		for _, s := range t.Steps {
			group := ""
			if s.Group != "" {
				group = " in group " + s.Group
			}
			fmt.Printf("  step %d %s%s: %s\n", s.Index, s.Name, group, s.ProcessState)
		}
	}
	return nil
}

// stockReserved waits until task id's stock branch has completed.
func stockReserved(ctx context.Context, c *drover.Client, id string) error {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		t, err := c.Task(ctx, id)
		if err != nil {
			return err
		}
		for _, s := range t.Steps {
			if s.Name == "stock" && s.ProcessState == drover.Processed {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}
