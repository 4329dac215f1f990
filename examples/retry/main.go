// Command retry shows per-step retry policies: one agent serves two steps,
// and each step retries its calls its own way (Step.Retry replaces the
// agent's policy for that step). The quote step retries a flaky pricing
// service up to five times, quickly; the charge step never retries a
// declined card (RetryPolicy.Retryable), which fails the task at once
// instead of trying again until its deadline.
//
//	go run ./examples/retry
package main

import (
	"context"
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

var (
	errBusy     = errors.New("pricing service busy")
	errDeclined = errors.New("card declined")
)

func main() {
	if err := run(context.Background()); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "drover-retry-")
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
		tries = map[string]int{} // task/step → calls
	)
	payments := func(_ context.Context, r *drover.AgentRequest) ([]byte, error) {
		mu.Lock()
		tries[r.TaskID+"/"+r.StepName]++
		n := tries[r.TaskID+"/"+r.StepName]
		mu.Unlock()
		switch {
		case r.StepName == "quote" && n < 3:
			return nil, errBusy // busy twice, then a price
		case r.StepName == "quote":
			return []byte(`{"price":42}`), nil
		case r.TaskID == "order-declined":
			return nil, errDeclined
		}
		return []byte(`"charged"`), nil
	}
	c, err := drover.New(drover.Config{
		Store: store,
		Workflows: []drover.Workflow{{Name: "checkout", Steps: []drover.Step{
			{Name: "quote", Agent: "payments", Timeout: 10 * time.Second,
				Retry: &drover.RetryPolicy{MaxTries: 5, InitialInterval: 10 * time.Millisecond, MaxInterval: 50 * time.Millisecond}},
			{Name: "charge", Agent: "payments", Timeout: 10 * time.Second,
				Retry: &drover.RetryPolicy{Retryable: func(err error) bool { return !errors.Is(err, errDeclined) }}},
		}}},
		Agents: []drover.Agent{{Name: "payments", Func: payments}},
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

	for _, id := range []string{"order-ok", "order-declined"} {
		if _, err := c.Submit(ctx, "checkout", nil, &drover.SubmitOptions{ID: id}); err != nil {
			return err
		}
		t, err := c.Wait(ctx, id)
		if err != nil {
			return err
		}
		mu.Lock()
		fmt.Printf("%s: %s; quote called %d times, charge %d\n", id, t.ProcessState, tries[id+"/quote"], tries[id+"/charge"])
		mu.Unlock()
		if t.LastError != "" {
			fmt.Printf("%s: %s\n", id, t.LastError)
		}
	}
	return nil
}
