package drover_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/store/sqlite"
)

// Example runs an order workflow of two steps, each calling a (here simulated)
// remote service through an agent, and waits for the result.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "drover-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	// The state store: one SQLite file.
	drv, err := sqlite.Open(ctx, filepath.Join(dir, "drover.db"), sqlite.Options{Create: true})
	if err != nil {
		log.Fatal(err)
	}
	defer drv.Close()

	// Agents wrap the remote services. They get the task's input, the output
	// of the step before and a key that stays the same on every retry.
	reserve := func(ctx context.Context, req *drover.AgentRequest) ([]byte, error) {
		var order struct {
			Item string `json:"item"`
		}
		if err := json.Unmarshal(req.Input, &order); err != nil {
			return nil, drover.Permanent(err) // bad input: do not retry
		}
		return json.Marshal(map[string]string{"reservation": "R-" + order.Item})
	}
	charge := func(ctx context.Context, req *drover.AgentRequest) ([]byte, error) {
		var prev map[string]string
		if err := json.Unmarshal(req.PreviousOutput, &prev); err != nil {
			return nil, drover.Permanent(err)
		}
		return json.Marshal(map[string]string{"reservation": prev["reservation"], "payment": "P-" + req.IdempotencyKey})
	}

	client, err := drover.New(drover.Config{
		Store: drv,
		Workflows: []drover.Workflow{{
			Name: "order",
			Steps: []drover.Step{
				{Name: "reserve", Agent: "inventory", Timeout: 10 * time.Second},
				{Name: "charge", Agent: "payments", Timeout: 10 * time.Second},
			},
		}},
		Agents: []drover.Agent{
			{Name: "inventory", Func: reserve},
			{Name: "payments", Func: charge},
		},
		PollInterval: 10 * time.Millisecond,
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := client.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	if err := client.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer func() {
		if err := client.Stop(ctx); err != nil {
			log.Print(err)
		}
	}()

	// Submitting twice with the same ID and input is harmless: one task.
	for range 2 {
		if _, err := client.Submit(ctx, "order", []byte(`{"item":"book"}`), &drover.SubmitOptions{ID: "order-1"}); err != nil {
			log.Fatal(err)
		}
	}

	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	task, err := client.Wait(waitCtx, "order-1")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(task.ID, task.ProcessState)
	for _, s := range task.Steps {
		fmt.Println(s.Index, s.Name, s.ProcessState, "attempt", s.Attempt)
	}
	fmt.Println(string(task.Output))
	// Output:
	// order-1 Processed
	// 0 reserve Processed attempt 1
	// 1 charge Processed attempt 1
	// {"payment":"P-order-1/1/charge","reservation":"R-book"}
}
