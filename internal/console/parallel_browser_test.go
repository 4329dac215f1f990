package console_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/internal/testutil"
	"github.com/drover-run/drover/server"
	"github.com/drover-run/drover/store"
)

// The task page draws a parallel group: a head row over its branches,
// each branch with its own state, the story says which branch runs; the
// Workflows page draws the group as a box of its branches.
func TestBrowserParallelGroup(t *testing.T) {
	browserStore(t, "sqlite", func(t *testing.T, d store.Driver) {
		release := make(chan struct{})
		e := startServerWith(t, d, false, nil, func(c *server.Config) {
			c.Workflows = append(c.Workflows, drover.Workflow{Name: "trip", Steps: []drover.Step{
				{Name: "quote", Agent: "quick"},
				{Name: "reserve", Parallel: []drover.Step{
					{Name: "hotel", Agent: "quick", Compensation: "quick"},
					{Name: "car", Agent: "slow", Timeout: time.Minute},
				}},
				{Name: "confirm", Agent: "quick"},
			}})
			c.Agents = append(c.Agents,
				drover.Agent{Name: "quick", Func: func(_ context.Context, r *drover.AgentRequest) ([]byte, error) {
					return json.Marshal(r.StepName + " ok")
				}},
				drover.Agent{Name: "slow", Func: func(ctx context.Context, _ *drover.AgentRequest) ([]byte, error) {
					select { // stays running while the test looks
					case <-release:
					case <-ctx.Done():
					}
					return nil, drover.Permanent(errors.New("released"))
				}})
		})
		t.Cleanup(func() { close(release) }) // before the server stops
		e.api("POST", "/v1/tasks", `{"workflow":"trip","id":"trip-1","input":{}}`, nil)
		testutil.WaitFor(t, "hotel done while car runs", func() bool {
			var tk struct {
				Steps []struct {
					Name  string `json:"name"`
					State string `json:"state"`
				} `json:"steps"`
			}
			e.api("GET", "/v1/tasks/trip-1", "", &tk)
			return len(tk.Steps) == 4 && tk.Steps[1].State == "Processed" && tk.Steps[2].State == "Processing"
		})
		b := newTab(t)
		b.signIn(e.base, readToken, "")
		b.do(chromedp.Navigate(e.base+"/tasks/trip-1"), chromedp.WaitVisible(chromedp.ID("story")), b.shot("task-parallel"))
		b.want("#story", "Parallel group “reserve” is running", "step 1 “hotel” processed", "step 2 “car” processing (attempt 1", "join before the next step")
		b.want("table.steps tr.group-head", "parallel", "group reserve", "steps 1–2 run at the same time, 1 of 2 done", "join before step 3")
		b.want(`table.steps tr.branch[data-group="reserve"]`, "hotel")
		b.want(`table.steps tr.branch[data-group="reserve"] + tr.branch`, "car", "Processing")
		b.do(chromedp.Navigate(e.base+"/workflows"), chromedp.WaitVisible(chromedp.ID("workflows-list")))
		b.do(chromedp.ScrollIntoView(chromedp.CSS(`#wf-trip`)), b.shot("workflows-parallel"))
		b.want(`#wf-trip li.stepbox.group`, "reserve", "parallel", "hotel", "car", "slow", "undo: quick")
	})
}
