package console

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/drover-run/drover"
	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/workflowdef"
)

// agentView is one agent the workflows name.
type agentView struct {
	Name  string
	Where string   // where it runs, from this server's point of view
	Uses  []string // "orders v2 step 0 reserve", "… undoes step 0 reserve"
	// InFlight counts the steps held by a scheduler whose call it makes
	// (among the running tasks read).
	InFlight int
}

type agentsData struct {
	Agents    []*agentView
	Capped    bool
	CountedAt time.Time
	Stats     drover.Stats
	Instance  string
}

// agents is the Agents page: every agent the workflows (every version)
// name, where it runs, the steps it serves and the calls it has in
// flight, with this process's agent counters.
func (c *Console) agents(ctx context.Context, r *http.Request, v *viewer) (string, string, any, error) {
	list, tc, err := c.agentList(ctx, v)
	if err != nil {
		return "", "", nil, err
	}
	d := &agentsData{Agents: list, Capped: tc.RunningCapped, CountedAt: tc.At, Stats: c.d.Stats(), Instance: c.d.InstanceID()}
	return "agents", "Agents", d, nil
}

// agentList is every agent the workflows name, by name, with the counts
// its calls in flight come from.
func (c *Console) agentList(ctx context.Context, v *viewer) ([]*agentView, *taskCounts, error) {
	ws, err := c.allVersions(ctx)
	if err != nil {
		return nil, nil, err
	}
	tc, err := c.versionCounts(ctx, v.id.ListNamespace())
	if err != nil {
		return nil, nil, err
	}
	byName := map[string]*agentView{}
	use := func(agent, what string, n int) {
		a := byName[agent]
		if a == nil {
			a = &agentView{Name: agent, Where: c.where(agent)}
			byName[agent] = a
		}
		a.Uses = append(a.Uses, what)
		a.InFlight += n
	}
	for _, w := range ws {
		label := w.Name
		if w.Version > 0 {
			label += fmt.Sprintf(" v%d", w.Version)
		}
		for i, s := range w.Steps {
			k := versionKey{w.Name, w.Version}
			use(s.Agent, fmt.Sprintf("%s step %d %s", label, i, s.Name), tc.Held[heldKey{k, i, false}])
			if s.Compensation != "" {
				use(s.Compensation, fmt.Sprintf("%s undoes step %d %s", label, i, s.Name), tc.Held[heldKey{k, i, true}])
			}
		}
	}
	var list []*agentView
	for _, a := range byName {
		a.Uses = slices.Compact(a.Uses)
		list = append(list, a)
	}
	slices.SortFunc(list, func(a, b *agentView) int { return strings.Compare(a.Name, b.Name) })
	return list, tc, nil
}

// heldShown caps the held tasks read for the overview's remote agents.
const heldShown = 1000

// remoteInFlight is every remote agent the workflows name with the calls
// in flight to it: the steps (or compensations) of the held tasks whose
// agent it is, at most heldShown read (Capped). It reads the held tasks
// through their index, never a listing of the task table.
func (c *Console) remoteInFlight(ctx context.Context) (list []*agentView, capped bool, err error) {
	ws, err := c.allVersions(ctx)
	if err != nil {
		return nil, false, err
	}
	ts, err := c.d.HeldTasks(ctx, heldShown+1)
	if err != nil {
		return nil, false, err
	}
	if len(ts) > heldShown {
		ts, capped = ts[:heldShown], true
	}
	held := map[heldKey]int{}
	for _, t := range ts {
		held[heldKey{versionKey{t.Workflow, t.WorkflowVersion}, t.CurrentStep, t.ProcessState == dt.Compensating}]++
	}
	byName := map[string]*agentView{}
	use := func(agent string, n int) {
		if !c.d.IsExternalAgent(agent) {
			return
		}
		a := byName[agent]
		if a == nil {
			a = &agentView{Name: agent}
			byName[agent] = a
		}
		a.InFlight += n
	}
	for _, w := range ws {
		k := versionKey{w.Name, w.Version}
		for i, s := range w.Steps {
			use(s.Agent, held[heldKey{k, i, false}])
			if s.Compensation != "" {
				use(s.Compensation, held[heldKey{k, i, true}])
			}
		}
	}
	for _, a := range byName {
		list = append(list, a)
	}
	slices.SortFunc(list, func(a, b *agentView) int { return strings.Compare(a.Name, b.Name) })
	return list, capped, nil
}

// where says where an agent runs as this server knows it.
func (c *Console) where(agent string) string {
	switch {
	case agent == workflowdef.HTTPAgentName:
		return "built-in HTTP agent (in every server with the agent role)"
	case c.d.IsExternalAgent(agent):
		return "remote: another process polls the API for its requests"
	}
	return "in this server's process (a Go agent)"
}

// allVersions is every workflow the client runs and every stored version
// of the declarative ones (a version in both once).
func (c *Console) allVersions(ctx context.Context) ([]drover.Workflow, error) {
	ws := c.d.Workflows()
	if c.opts.Versions == nil {
		return ws, nil
	}
	stored, err := c.opts.Versions(ctx)
	if err != nil {
		return nil, err
	}
	for _, s := range stored {
		if !slices.ContainsFunc(ws, func(w drover.Workflow) bool { return w.Name == s.Name && w.Version == s.Version }) {
			ws = append(ws, s)
		}
	}
	return ws, nil
}
