package drover_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/drover-run/drover"
)

// errNoAmount is what the test workflow's ValidateInput returns.
var errNoAmount = errors.New("amount is required")

// A workflow's ValidateInput runs for every way a task is submitted: a
// refused input is ErrInvalidInput wrapping the validator's error, and
// nothing is stored.
func TestValidateInputRunsOnEverySubmit(t *testing.T) {
	t.Parallel()
	d := newStore(t)
	ctx := context.Background()
	var seen [][]byte
	c := startClient(t, drover.Config{
		Store: d,
		Workflows: []drover.Workflow{{
			Name: "order", Steps: []drover.Step{{Name: "charge", Agent: "payments"}},
			ValidateInput: func(input []byte) error {
				seen = append(seen, input)
				var in struct{ Amount *int }
				if err := json.Unmarshal(input, &in); err != nil || in.Amount == nil {
					return errNoAmount
				}
				return nil
			},
		}},
		Agents: []drover.Agent{okAgent("payments")},
	})
	wantRefused := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, drover.ErrInvalidInput) || !errors.Is(err, errNoAmount) {
			t.Errorf("%s: err = %v, want ErrInvalidInput wrapping the validator's error", what, err)
		}
	}
	_, err := c.Submit(ctx, "order", []byte(`{"x":1}`), &drover.SubmitOptions{ID: "a"})
	wantRefused("Submit", err)
	_, err = c.Submit(ctx, "order", nil, nil)
	wantRefused("Submit without input", err)
	_, err = c.SubmitMany(ctx, []drover.SubmitParams{
		{Workflow: "order", Input: []byte(`{"amount":1}`)},
		{Workflow: "order", Input: []byte(`{"x":1}`)},
	})
	wantRefused("SubmitMany", err)
	tx, err := d.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.SubmitTx(ctx, tx, "order", []byte(`{"x":1}`), nil)
	wantRefused("SubmitTx", err)
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	wantNothingStored(t, c)
	if len(seen) < 2 || string(seen[1]) != "null" {
		t.Errorf("the validator got %q, want the null document second", seen)
	}

	// A good input goes through, and runs.
	task, err := c.Submit(ctx, "order", []byte(`{"amount":5}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := waitTask(t, c, task.ID); got.ProcessState != drover.Processed {
		t.Fatalf("task %s", got.ProcessState)
	}
}
