// Command delayed shows delayed tasks: a task submitted with
// SubmitOptions.Delay (or RunAt) waits Pending, unclaimed, until its time,
// then runs like any other; one cancelled while it waits never runs.
//
//	go run ./examples/delayed
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
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
	dir, err := os.MkdirTemp("", "drover-delayed-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	store, err := sqlite.Open(ctx, filepath.Join(dir, "drover.db"), sqlite.Options{Create: true})
	if err != nil {
		return err
	}
	defer store.Close()

	submitted := time.Now()
	c, err := drover.New(drover.Config{
		Store:     store,
		Workflows: []drover.Workflow{{Name: "reminder", Steps: []drover.Step{{Name: "send", Agent: "mailer"}}}},
		Agents: []drover.Agent{{Name: "mailer", Func: func(_ context.Context, r *drover.AgentRequest) ([]byte, error) {
			fmt.Printf("%s sent %.1fs after the submits\n", r.TaskID, time.Since(submitted).Seconds())
			return nil, nil
		}}},
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

	for _, s := range []struct {
		id    string
		delay time.Duration
	}{{"now", 0}, {"in-2s", 2 * time.Second}, {"in-1h", time.Hour}} {
		t, err := c.Submit(ctx, "reminder", nil, &drover.SubmitOptions{ID: s.id, Delay: s.delay})
		if err != nil {
			return err
		}
		fmt.Printf("%s submitted: %s, starts at %s\n", t.ID, t.ProcessState, t.AvailableAt.Sub(submitted).Round(time.Second))
	}
	// Nobody needs the hour's reminder after all.
	if _, err := c.Cancel(ctx, "in-1h", "the meeting was cancelled"); err != nil {
		return err
	}
	for _, id := range []string{"now", "in-2s", "in-1h"} {
		t, err := c.Wait(ctx, id)
		if err != nil {
			return err
		}
		fmt.Printf("%s: %s\n", id, t.ProcessState)
	}
	return nil
}
