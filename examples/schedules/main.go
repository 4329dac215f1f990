// Command schedules shows recurring schedules: a workflow submitted at
// every due time of a fixed interval or of a cron expression in a time
// zone, one task per due time (its ID says which), then paused, and run
// once outside its due times.
//
//	go run ./examples/schedules
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"
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
	dir, err := os.MkdirTemp("", "drover-schedules-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	store, err := sqlite.Open(ctx, filepath.Join(dir, "drover.db"), sqlite.Options{Create: true})
	if err != nil {
		return err
	}
	defer store.Close()

	var (
		mu    sync.Mutex
		beats []string
	)
	three := make(chan struct{})
	c, err := drover.New(drover.Config{
		Store: store,
		Workflows: []drover.Workflow{
			{Name: "heartbeat", Steps: []drover.Step{{Name: "ping", Agent: "pinger"}}},
			{Name: "report", Steps: []drover.Step{{Name: "build", Agent: "reporter"}}},
		},
		Agents: []drover.Agent{
			{Name: "pinger", Func: func(_ context.Context, r *drover.AgentRequest) ([]byte, error) {
				mu.Lock()
				defer mu.Unlock()
				beats = append(beats, r.TaskID)
				if len(beats) == 3 {
					close(three)
				}
				return nil, nil
			}},
			{Name: "reporter", Func: func(_ context.Context, r *drover.AgentRequest) ([]byte, error) {
				fmt.Printf("report built by task %s with input %s\n", r.TaskID, r.Input)
				return nil, nil
			}},
		},
		Schedules: []drover.Schedule{
			// Every second; after downtime, the missed beats are skipped.
			{Name: "heartbeat", Workflow: "heartbeat", Every: time.Second, CatchUp: drover.CatchUpSkip},
			// At 06:00 in Berlin every weekday; after downtime, the last
			// missed report runs (the default catch-up).
			{Name: "daily-report", Workflow: "report", Input: []byte(`{"kind":"sales"}`), Cron: "0 6 * * 1-5", TimeZone: "Europe/Berlin"},
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

	select {
	case <-three:
	case <-time.After(30 * time.Second):
		return fmt.Errorf("the heartbeat did not fire three times in 30s")
	}
	fmt.Println("heartbeat fired three times, one task per due time:")
	mu.Lock()
	for _, id := range beats[:3] {
		fmt.Println(" ", id)
	}
	mu.Unlock()
	if _, err := c.PauseSchedule(ctx, "heartbeat"); err != nil {
		return err
	}
	fmt.Println("heartbeat paused")

	t, err := c.RunScheduleNow(ctx, "daily-report", "report-rerun-1")
	if err != nil {
		return err
	}
	if t, err = c.Wait(ctx, t.ID); err != nil {
		return err
	}
	fmt.Printf("daily-report run now: %s %s\n", t.ID, t.ProcessState)

	states, err := c.Schedules(ctx)
	if err != nil {
		return err
	}
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		return err
	}
	for _, s := range states {
		if s.Paused {
			fmt.Printf("%s: paused, its last task a due time's: %v\n", s.Name, strings.HasPrefix(s.LastTask, "schedule:heartbeat:"))
			continue
		}
		next := s.NextDue[0].In(berlin)
		fmt.Printf("%s: next due %s %s in Berlin (%d due times listed)\n", s.Name, next.Weekday(), next.Format("15:04"), len(s.NextDue))
	}
	return nil
}
