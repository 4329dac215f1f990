// Command signals shows signal steps: an order reserves stock, then waits
// for a person's approval, sent with Client.Signal (or POST
// /v1/tasks/{id}/signals/approved, or drover signal), before it ships.
// Signals are durable: one sent before the order reaches its approval is
// kept and taken when it gets there; a repeat with the same ID is ignored;
// an order nobody approves in time is compensated (its stock released).
//
//	go run ./examples/signals
package main

import (
	"context"
	"errors"
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
	dir, err := os.MkdirTemp("", "drover-signals-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	store, err := sqlite.Open(ctx, filepath.Join(dir, "drover.db"), sqlite.Options{Create: true})
	if err != nil {
		return err
	}
	defer store.Close()

	order := drover.Workflow{Name: "order", OnFailure: drover.PolicyCompensate, Steps: []drover.Step{
		{Name: "reserve", Agent: "stock", Compensation: "release"},
		// Waits for the signal "approved"; a real approval would wait days.
		{Name: "approve", Signal: "approved", Timeout: 2 * time.Second},
		{Name: "ship", Agent: "shipper"},
	}}
	c, err := drover.New(drover.Config{
		Store: store, Workflows: []drover.Workflow{order}, SupervisorInterval: 100 * time.Millisecond,
		Agents: []drover.Agent{
			{Name: "stock", Func: func(_ context.Context, r *drover.AgentRequest) ([]byte, error) {
				time.Sleep(300 * time.Millisecond) // the warehouse takes its time
				return []byte(`"reserved"`), nil
			}},
			{Name: "release", Func: func(_ context.Context, r *drover.AgentRequest) ([]byte, error) {
				fmt.Printf("%s: stock released\n", r.TaskID)
				return nil, nil
			}},
			{Name: "shipper", Func: func(_ context.Context, r *drover.AgentRequest) ([]byte, error) {
				fmt.Printf("%s: shipped, approved with %s\n", r.TaskID, r.PreviousOutput)
				return []byte(`"shipped"`), nil
			}},
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

	for _, id := range []string{"o-1", "o-2", "o-3"} {
		if _, err := c.Submit(ctx, "order", []byte(`{}`), &drover.SubmitOptions{ID: id}); err != nil {
			return err
		}
	}
	// o-2 is approved at once, while its stock is still being reserved:
	// the signal is kept until the order waits for it.
	res, err := c.SendSignal(ctx, drover.SignalParams{TaskID: "o-2", Name: "approved", ID: "approval-o-2", Payload: []byte(`{"by":"bob"}`)})
	if err != nil {
		return err
	}
	fmt.Printf("o-2: approval sent early, completed a step: %v\n", res.Delivered)

	// o-1 is approved once it waits; the button is pressed twice.
	if err := waitForApproval(ctx, c, "o-1"); err != nil {
		return err
	}
	for range 2 {
		res, err := c.SendSignal(ctx, drover.SignalParams{TaskID: "o-1", Name: "approved", ID: "approval-o-1", Payload: []byte(`{"by":"ann"}`)})
		if err != nil {
			return err
		}
		fmt.Printf("o-1: approval sent, completed a step: %v, duplicate: %v\n", res.Delivered, res.Duplicate)
	}

	// Nobody approves o-3: past its deadline the order is compensated.
	for _, id := range []string{"o-1", "o-2", "o-3"} {
		t, err := c.Wait(ctx, id)
		if err != nil {
			return err
		}
		fmt.Printf("%s: %s %s\n", id, t.ProcessState, t.LastError)
	}
	// A signal to a finished order is refused.
	if _, err := c.Signal(ctx, "o-3", "approved", nil); errors.Is(err, drover.ErrAlreadyFinal) {
		fmt.Println("o-3: a late approval is refused:", err)
	}
	return nil
}

// waitForApproval waits until order id's approval step waits for its
// signal (drover status and the console show the same).
func waitForApproval(ctx context.Context, c *drover.Client, id string) error {
	for {
		t, err := c.Task(ctx, id)
		if err != nil {
			return err
		}
		if s := t.Steps[t.CurrentStep]; s.Waiting() {
			fmt.Printf("%s: waiting for signal %q until %s\n", id, s.Signal, s.CompleteBy.Format(time.TimeOnly))
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}
