// Command priorities shows task priorities: among the tasks waiting to
// start, schedulers claim higher priorities first. A backlog of bulk
// exports (priority 0) is waiting when a customer's password reset
// (priority 9) arrives; the reset runs next, ahead of the bulk work
// submitted before it. Priorities are aged (drover.PriorityAging per
// level), so the bulk work is never starved.
//
//	go run ./examples/priorities
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/store/sqlite"
)

func main() {
	if err := run(context.Background()); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "drover-priorities-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	store, err := sqlite.Open(ctx, filepath.Join(dir, "drover.db"), sqlite.Options{Create: true})
	if err != nil {
		return err
	}
	defer store.Close()

	c, err := drover.New(drover.Config{
		Store: store,
		// One task at a time, so that the order they run in is the order
		// they were claimed in.
		Schedulers: 1, MaxInFlight: 1,
		Workflows: []drover.Workflow{
			{Name: "export", Steps: []drover.Step{{Name: "write", Agent: "worker"}}},
			// The workflow's priority is its tasks' unless a submission
			// gives another.
			{Name: "password-reset", Priority: 9, Steps: []drover.Step{{Name: "send", Agent: "worker"}}},
		},
		Agents: []drover.Agent{{Name: "worker", Func: func(_ context.Context, r *drover.AgentRequest) ([]byte, error) {
			fmt.Println("ran", r.TaskID)
			return nil, nil
		}}},
	})
	if err != nil {
		return err
	}
	if err := c.Migrate(ctx); err != nil {
		return err
	}
	// The backlog is stored before the client starts, the reset last.
	for _, id := range []string{"export-1", "export-2", "export-3"} {
		if _, err := c.Submit(ctx, "export", nil, &drover.SubmitOptions{ID: id}); err != nil {
			return err
		}
	}
	if _, err := c.Submit(ctx, "password-reset", nil, &drover.SubmitOptions{ID: "reset-42"}); err != nil {
		return err
	}
	// A submission may set its own priority: this export jumps the
	// other exports, not the reset.
	if _, err := c.Submit(ctx, "export", nil, &drover.SubmitOptions{ID: "export-vip", Priority: drover.PriorityOf(5)}); err != nil {
		return err
	}
	if err := c.Start(ctx); err != nil {
		return err
	}
	defer func() { _ = c.Stop(context.Background()) }()
	for _, id := range []string{"export-1", "export-2", "export-3", "reset-42", "export-vip"} {
		if _, err := c.Wait(ctx, id); err != nil {
			return err
		}
	}
	return nil
}
