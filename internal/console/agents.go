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
	"github.com/drover-run/drover/internal/httpagent"
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
	// Remote: whether it is a remote agent; Pollers: who polls the API
	// for its requests now (any server's pollers; none: nobody serves it).
	Remote  bool
	Pollers []drover.RemoteAgent
	// Calls and Failures are this process's calls of it in the last five
	// minutes (for a remote agent: the results it sent this server);
	// Breaker is its circuit breaker in this process ("" when this
	// process does not run it).
	Calls, Failures int
	Breaker         string
}

// ErrorRate is the share of Calls that failed, as a percentage ("-"
// without calls).
func (a *agentView) ErrorRate() string {
	if a.Calls == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*float64(a.Failures)/float64(a.Calls))
}

type agentsData struct {
	Agents []*agentView
	// Hosts are the hosts the built-in http agent of this process calls
	// (global viewers only).
	Hosts     []httpagent.HostHealth
	Capped    bool
	CountedAt time.Time
	// Counting: the running tasks are being counted for the first time
	// (no calls in flight shown yet).
	Counting bool
	Stats    drover.Stats
	Instance string
}

// agents is the Agents page: every agent the workflows (every version)
// name, where it runs, the steps it serves and the calls it has in
// flight, with this process's agent counters.
func (c *Console) agents(ctx context.Context, r *http.Request, v *viewer) (string, string, any, error) {
	list, tc, err := c.agentList(ctx, v)
	if err != nil {
		return "", "", nil, err
	}
	d := &agentsData{Agents: list, Capped: tc.RunningCapped, CountedAt: tc.At, Counting: tc.At.IsZero(), Stats: c.d.Stats(), Instance: c.d.InstanceID()}
	if !v.id.Confined() && c.opts.HTTPHosts != nil {
		d.Hosts = c.opts.HTTPHosts()
	}
	return "agents", "Agents", d, nil
}

// agentList is every agent the workflows name, by name, with the counts
// its calls in flight come from.
func (c *Console) agentList(ctx context.Context, v *viewer) ([]*agentView, *taskCounts, error) {
	ws, err := c.allVersions(ctx)
	if err != nil {
		return nil, nil, err
	}
	tc := c.versionCounts(ctx, v.id.ListNamespace())
	if tc == nil {
		tc = &taskCounts{} // being counted: no calls in flight shown yet
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
		for i, s := range w.FlatSteps() {
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
	if err := c.attachPollers(ctx, v, byName); err != nil {
		return nil, nil, err
	}
	c.attachHealth(byName)
	slices.SortFunc(list, func(a, b *agentView) int { return strings.Compare(a.Name, b.Name) })
	return list, tc, nil
}

// attachHealth adds this process's recent calls and breaker state to
// the agents it runs, and the results remote agents sent it to theirs.
func (c *Console) attachHealth(byName map[string]*agentView) {
	for _, h := range c.d.AgentHealth() {
		if a := byName[h.Agent]; a != nil {
			a.Calls, a.Failures, a.Breaker = h.Calls, h.Failures, h.Breaker
		}
	}
	for agent, r := range c.api.RemoteResults() {
		if a := byName[agent]; a != nil && a.Remote {
			a.Calls, a.Failures = r.Results, r.Failures
		}
	}
}

// attachPollers marks the remote agents of byName and lists who polls
// for each. Who polls (a token's name) is shown to a global viewer only.
func (c *Console) attachPollers(ctx context.Context, v *viewer, byName map[string]*agentView) error {
	for name, a := range byName {
		a.Remote = c.d.IsExternalAgent(name)
	}
	if v.id.Confined() {
		return nil
	}
	ps, err := c.d.RemoteAgents(ctx, pollersShown)
	if err != nil {
		return err
	}
	for _, p := range ps {
		if a := byName[p.Agent]; a != nil {
			a.Pollers = append(a.Pollers, p)
		}
	}
	return nil
}

// pollersShown caps the remote agents' pollers read for a page.
const pollersShown = 200

// heldShown caps the held tasks read for the overview's remote agents.
const heldShown = 1000

// remoteInFlight is every remote agent the workflows name with the calls
// in flight to it: the steps (or compensations) of the held tasks whose
// agent it is, at most heldShown read (Capped). It reads the held tasks
// through their index, never a listing of the task table.
func (c *Console) remoteInFlight(ctx context.Context, v *viewer) (list []*agentView, capped bool, err error) {
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
		for i, s := range w.FlatSteps() {
			use(s.Agent, held[heldKey{k, i, false}])
			if s.Compensation != "" {
				use(s.Compensation, held[heldKey{k, i, true}])
			}
		}
	}
	for _, a := range byName {
		list = append(list, a)
	}
	if err := c.attachPollers(ctx, v, byName); err != nil {
		return nil, false, err
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
