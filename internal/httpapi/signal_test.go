package httpapi

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/droverapi"
	"github.com/drover-run/drover/store"
)

// TestSignalRoute: POST /v1/tasks/{id}/signals/{name} completes the step
// waiting for the signal (201, delivered), ignores a duplicate ID (200),
// and refuses bad input (400), unknown tasks (404) and final ones (409);
// GET shows the waiting step.
func TestSignalRoute(t *testing.T) {
	drivers(t, func(t *testing.T, open func(t *testing.T) store.Driver) {
		e := startEnv(t, drover.Config{Store: open(t), PollInterval: 10 * time.Millisecond, SupervisorInterval: 50 * time.Millisecond,
			Workflows: []drover.Workflow{{Name: "approval", Steps: []drover.Step{
				{Name: "approve", Signal: "approved", Timeout: time.Hour},
				{Name: "confirm", Signal: "confirmed", Timeout: time.Hour},
				{Name: "ship", Agent: "prev"},
			}}},
			Agents: []drover.Agent{{Name: "prev", Func: func(_ context.Context, r *drover.AgentRequest) ([]byte, error) {
				return r.PreviousOutput, nil
			}}},
		}, Options{Tokens: testTokens})
		e.do("POST", "/v1/tasks", submitTok, `{"workflow":"approval","id":"o1"}`).must(t, 201)
		var task droverapi.Task
		deadline := time.Now().Add(15 * time.Second)
		for {
			r := e.do("GET", "/v1/tasks/o1", submitTok, "").must(t, 200)
			if err := json.Unmarshal(r.body, &task); err != nil {
				t.Fatal(err)
			}
			if len(task.Steps) == 3 && task.Steps[0].State == "Processing" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the step never waited: %s", r.body)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if s := task.Steps[0]; s.Signal != "approved" || s.LockedBy != drover.SignalHolder || s.CompleteBy == nil || task.LockedBy != drover.SignalHolder {
			t.Fatalf("waiting step: %+v", s)
		}

		e.do("POST", "/v1/tasks/o1/signals/a%20b", submitTok, `{}`).mustError(t, 400, "invalid_request")
		e.do("POST", "/v1/tasks/o1/signals/approved", submitTok, `{"payload":`).mustError(t, 400, "malformed_json")
		e.do("POST", "/v1/tasks/o1/signals/approved", submitTok, `{"id":"a/b"}`).mustError(t, 400, "invalid_request")
		e.do("POST", "/v1/tasks/nobody/signals/approved", submitTok, `{}`).mustError(t, 404, "not_found")

		var res droverapi.SignalResult
		r := e.do("POST", "/v1/tasks/o1/signals/approved", submitTok, `{"id":"x1","payload":{"ok":true}}`).must(t, 201)
		if err := json.Unmarshal(r.body, &res); err != nil || !res.Delivered || res.Duplicate || res.ID != "x1" || res.Task.ID != "o1" {
			t.Fatalf("signal: %s", r.body)
		}
		r = e.do("POST", "/v1/tasks/o1/signals/approved", submitTok, `{"id":"x1","payload":{"ok":false}}`).must(t, 200)
		if err := json.Unmarshal(r.body, &res); err != nil || !res.Duplicate || res.Delivered {
			t.Fatalf("duplicate: %s", r.body)
		}
		// The task waits for "confirmed" now, or soon (kept until then).
		e.do("POST", "/v1/tasks/o1/signals/confirmed", submitTok, `{"payload":{"ok":true}}`).must(t, 201)
		got := e.waitState("o1", "Processed")
		if out, _ := json.Marshal(got.json["output"]); string(out) != `{"ok":true}` {
			t.Errorf("output %s, want the signal's payload", out)
		}
		e.do("POST", "/v1/tasks/o1/signals/approved", submitTok, `{}`).mustError(t, 409, "wrong_state")
		sigs, err := e.d.Signals(context.Background(), "o1")
		if err != nil || len(sigs) != 2 || sigs[0].Sender == "" || sigs[0].ConsumedAt == nil || sigs[1].ConsumedAt == nil || string(sigs[0].Payload) != `{"ok":true}` {
			t.Errorf("stored signals: %+v %v", sigs, err)
		}
	})
}
