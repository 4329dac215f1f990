package httpapi

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/droverapi"
	"github.com/drover-run/drover/internal/testutil"
)

// A step in an extended wait is visible through the API: the task JSON
// carries the wait policy (and the steps their own), the task is Pending
// until available_at, and a step_waiting alert is in its events and in
// the alerts.
func TestExtendedWaitVisible(t *testing.T) {
	clk := &offsetClock{}
	cfg := drover.Config{
		Store: testutil.SQLite(t), PollInterval: 10 * time.Millisecond, SupervisorInterval: 20 * time.Millisecond, Clock: clk,
		Workflows: []drover.Workflow{{Name: "patient", FailureThreshold: 1,
			Wait: drover.WaitPolicy{MaxWaits: 2, Delay: time.Hour},
			Steps: []drover.Step{
				{Name: "a", Agent: "worker", Timeout: remoteStepTimeout},
				{Name: "b", Agent: "worker", OnFailure: drover.PolicyCompensate, Wait: &drover.WaitPolicy{}},
			}}},
		ExternalAgents: []string{"worker"},
	}
	e := startEnv(t, cfg, Options{Tokens: testTokens, Clock: clk})
	e.do("POST", "/v1/tasks", submitTok, `{"workflow":"patient","id":"p-1"}`).must(t, 201)
	e.waitState("p-1", "Processing")
	clk.Advance(remoteStepTimeout + time.Second) // nobody polls for worker: the step times out
	var task droverapi.Task
	if err := json.Unmarshal(e.waitState("p-1", "Pending").body, &task); err != nil {
		t.Fatal(err)
	}
	if task.Wait == nil || *task.Wait != (droverapi.WaitPolicy{MaxWaits: 2, DelayMS: 3600000, Multiplier: 2, MaxDelayMS: 3600000}) {
		t.Errorf("task wait = %+v", task.Wait)
	}
	if s := task.Steps[1]; s.OnFailure != "compensate" || s.Wait == nil || s.Wait.MaxWaits != 0 || task.Steps[0].Wait != nil {
		t.Errorf("steps' own policies: %+v / %+v", task.Steps[0], s)
	}
	evs := e.listPage("/v1/tasks/p-1/events", "").Events
	last := evs[len(evs)-1]
	if last.Type != "step_waiting" || !last.Alert || !task.AvailableAt.Equal(last.CreatedAt.Add(time.Hour)) {
		t.Errorf("last event %+v; task available_at %s: want a step_waiting alert an hour before it", last, task.AvailableAt)
	}
	var alerts struct {
		Alerts []struct {
			Type string `json:"type"`
		} `json:"alerts"`
	}
	if err := json.Unmarshal(e.do("GET", "/v1/alerts", submitTok, "").must(t, 200).body, &alerts); err != nil {
		t.Fatal(err)
	}
	if len(alerts.Alerts) != 1 || alerts.Alerts[0].Type != "step_waiting" {
		t.Errorf("alerts = %+v, want the step_waiting alert", alerts.Alerts)
	}
}
