package droverclient_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/drover-run/drover/droverclient"
)

// TestSignal: Signal completes the step waiting for the signal; a repeated
// ID is a duplicate; an unknown task is 404, a final one 409.
func TestSignal(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	sub := e.client(t, submitTok)
	_, err := sub.Signal(ctx, "s-1", "approved", nil, nil)
	wantAPIError(t, err, 404, "not_found", droverclient.ErrNotFound)
	if _, _, err := sub.SubmitTask(ctx, droverclient.SubmitRequest{Workflow: "approval", ID: "s-1", Input: json.RawMessage(`{"n":1}`)}); err != nil {
		t.Fatal(err)
	}
	// Sent at once: delivered, or kept until the step waits for it.
	res, err := sub.Signal(ctx, "s-1", "approved", json.RawMessage(`{"ok":true}`), &droverclient.SignalOptions{ID: "a-1"})
	if err != nil || res.Duplicate || res.ID != "a-1" || res.Name != "approved" || res.Task.ID != "s-1" {
		t.Fatalf("signal: %+v %v", res, err)
	}
	// Follow ends once the task is final.
	if err := sub.Follow(ctx, "s-1", 0, func(*droverclient.Event) error { return nil }); err != nil {
		t.Fatal(err)
	}
	tk, err := sub.Task(ctx, "s-1")
	if err != nil || tk.State != droverclient.StateProcessed || string(tk.Steps[0].Output) != `{"ok":true}` || tk.Steps[0].Signal != "approved" {
		t.Fatalf("after the signal: %+v %v", tk, err)
	}
	_, err = sub.Signal(ctx, "s-1", "approved", nil, &droverclient.SignalOptions{ID: "a-1"})
	wantAPIError(t, err, 409, "wrong_state", droverclient.ErrConflict)
}
