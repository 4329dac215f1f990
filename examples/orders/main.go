// Command orders shows drover used as a library: it runs the orders workflow
// (reserve stock, charge, ship; compensated when a step fails for good)
// against an in-process simulated remote service that fails now and then.
//
//	go run ./examples/orders
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/internal/orders"
	"github.com/drover-run/drover/internal/remotesim"
	"github.com/drover-run/drover/store/sqlite"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	// The remote service: 20% of calls fail with a 503, 5% are rejected for
	// good (the order is then compensated).
	svc := remotesim.New(remotesim.Config{Seed: 42, TransientRate: 0.2, PermanentRate: 0.05})
	url, stopRemote, err := svc.Serve(ctx, "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer stopRemote()

	// The state store: one SQLite file.
	dir, err := os.MkdirTemp("", "drover-example-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	drv, err := sqlite.Open(ctx, filepath.Join(dir, "drover.db"), sqlite.Options{Create: true})
	if err != nil {
		return err
	}
	defer drv.Close()

	// One client running every role: scheduler, agents and supervisor.
	opts := orders.Options{
		StepTimeout: 2 * time.Second,
		Retry:       drover.RetryPolicy{InitialInterval: 20 * time.Millisecond, MaxInterval: 200 * time.Millisecond},
	}
	client, err := drover.New(drover.Config{
		Store:              drv,
		Workflows:          []drover.Workflow{orders.Workflow(opts)},
		Agents:             orders.Agents(url, opts),
		SupervisorInterval: 200 * time.Millisecond,
	})
	if err != nil {
		return err
	}
	if err := client.Migrate(ctx); err != nil {
		return err
	}
	if err := client.Start(ctx); err != nil {
		return err
	}
	defer client.Stop(context.Background())

	// Submit a few orders. The task ID makes submission idempotent.
	var ids []string
	for i := 1; i <= 8; i++ {
		orderID := fmt.Sprintf("o-%d", i)
		t, err := client.Submit(ctx, orders.WorkflowName, orders.Input(orderID, int64(i*1000)), &drover.SubmitOptions{ID: "order-" + orderID})
		if err != nil {
			return err
		}
		ids = append(ids, t.ID)
	}

	// Wait for each to be final and print what happened.
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, id := range ids {
		t, err := client.Wait(waitCtx, id)
		if err != nil {
			return err
		}
		fmt.Printf("%-10s %-11s", t.ID, t.ProcessState)
		switch t.ProcessState {
		case drover.Processed:
			var shipped remotesim.Response
			_ = json.Unmarshal(t.Output, &shipped)
			fmt.Printf(" shipped, confirmation %s\n", shipped.Confirmation)
		default:
			fmt.Printf(" %s\n", t.LastError)
			for _, s := range t.Steps {
				comp := ""
				if s.CompensationState != "" {
					comp = "compensation " + string(s.CompensationState)
				}
				fmt.Printf("           step %-7s %-9s %s\n", s.Name, s.ProcessState, comp)
			}
		}
	}
	st := svc.Stats()
	fmt.Printf("\nremote service: %d calls, %d effects applied, %d deduplicated, %d applied twice\n",
		st.Calls, st.Applied, st.DeduplicatedCalls, st.DuplicateEffects)
	fmt.Printf("drover: %+v\n", client.Stats())
	return nil
}
