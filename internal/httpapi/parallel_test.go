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

// GET /v1/tasks/{id} shows each branch of a parallel group as a step with
// its group, and the order the steps completed.
func TestTaskShowsParallelGroup(t *testing.T) {
	drivers(t, func(t *testing.T, open func(t *testing.T) store.Driver) {
		echo := func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) { return json.Marshal(r.StepName) }
		e := startEnv(t, drover.Config{
			Store: open(t), PollInterval: 10 * time.Millisecond, SupervisorInterval: 50 * time.Millisecond,
			Workflows: []drover.Workflow{{Name: "par", Steps: []drover.Step{
				{Name: "g", Parallel: []drover.Step{{Name: "x", Agent: "echo"}, {Name: "y", Agent: "echo"}}},
				{Name: "z", Agent: "echo"},
			}}},
			Agents: []drover.Agent{{Name: "echo", Func: echo}},
		}, Options{Tokens: testTokens})
		e.do("POST", "/v1/tasks", submitTok, `{"workflow":"par","id":"p-1"}`).must(t, 201)
		r := e.waitState("p-1", "Processed")
		var task droverapi.Task
		if err := json.Unmarshal(r.body, &task); err != nil {
			t.Fatal(err)
		}
		if len(task.Steps) != 3 {
			t.Fatalf("steps: %s", r.body)
		}
		for i, want := range []string{"g", "g", ""} {
			if s := task.Steps[i]; s.Group != want || s.FinishSeq == 0 {
				t.Errorf("step %d (%s): group %q, finish_seq %d; want group %q and a finish_seq", i, s.Name, s.Group, s.FinishSeq, want)
			}
		}
		if task.Steps[2].FinishSeq != 3 {
			t.Errorf("z finished %d-th, want 3rd: %s", task.Steps[2].FinishSeq, r.body)
		}
	})
}
