package console

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/drover-run/drover"
	dt "github.com/drover-run/drover/drovertype"
)

// countCap bounds the tasks the Workflows page reads to count running and
// failed tasks per version: at most countCap of each, then "N+".
const countCap = 1000

// countTTL is how long counts are reused: many viewers (or reloads) of
// the page read the task list once per countTTL and namespace.
const countTTL = 10 * time.Second

// runningStates are the states counted as running.
var runningStates = []dt.ProcessState{dt.Pending, dt.Processing, dt.Compensating}

// versionKey names one version of a workflow (0: defined in code).
type versionKey struct {
	Name    string
	Version int
}

// taskCounts are the running and Error tasks per version, and whether a
// cap was reached (then they are lower bounds).
type taskCounts struct {
	Running, Failed           map[versionKey]int
	RunningCapped, FailCapped bool
	At                        time.Time
	// Held counts the running tasks a scheduler holds, by the step (or
	// compensation) in flight: the calls its agent is making.
	Held map[heldKey]int
}

// heldKey is a step of a workflow version in flight, or its compensation.
type heldKey struct {
	versionKey
	Step int
	Undo bool
}

// countCache keeps the last counts of each namespace.
type countCache struct {
	mu sync.Mutex
	m  map[string]*refreshed[*taskCounts]
}

// versionCounts returns the running and Error tasks of the viewer's
// namespace per workflow version (nil while they are first counted):
// counted off the page's path at most every countTTL, reading at most
// countCap tasks of each through the task listing (never a COUNT over
// the table).
func (c *Console) versionCounts(ctx context.Context, ns string) *taskCounts {
	c.counts.mu.Lock()
	r := c.counts.m[ns]
	if r == nil {
		if c.counts.m == nil {
			c.counts.m = map[string]*refreshed[*taskCounts]{}
		}
		r = &refreshed[*taskCounts]{}
		c.counts.m[ns] = r
	}
	c.counts.mu.Unlock()
	tc, _, _ := r.get(ctx, c, countTTL, "counting tasks per workflow version", func(ctx context.Context) (*taskCounts, error) {
		return c.countVersions(ctx, ns)
	})
	return tc
}

// countVersions counts the running and Error tasks of namespace ns per
// workflow version.
func (c *Console) countVersions(ctx context.Context, ns string) (*taskCounts, error) {
	tc := &taskCounts{Running: map[versionKey]int{}, Failed: map[versionKey]int{}, Held: map[heldKey]int{}, At: c.clock.Now()}
	var err error
	held := func(t *drover.Task) {
		if t.LockedBy != "" {
			tc.Held[heldKey{versionKey{t.Workflow, t.WorkflowVersion}, t.CurrentStep, t.ProcessState == dt.Compensating}]++
		}
	}
	if tc.RunningCapped, err = c.countInto(ctx, ns, runningStates, tc.Running, held); err != nil {
		return nil, err
	}
	if tc.FailCapped, err = c.countInto(ctx, ns, []dt.ProcessState{dt.Error}, tc.Failed, nil); err != nil {
		return nil, err
	}
	return tc, nil
}

// countInto counts the tasks in states per version into into, and calls
// each (when not nil) with every task read.
func (c *Console) countInto(ctx context.Context, ns string, states []dt.ProcessState, into map[versionKey]int, each func(*drover.Task)) (capped bool, err error) {
	ts, err := c.d.Tasks(ctx, drover.ListParams{States: states, Namespace: ns, Limit: countCap + 1})
	if err != nil {
		return false, err
	}
	if len(ts) > countCap {
		ts, capped = ts[:countCap], true
	}
	for _, t := range ts {
		into[versionKey{t.Workflow, t.WorkflowVersion}]++
		if each != nil {
			each(t)
		}
	}
	return capped, nil
}

// workflowView is one workflow and its versions, newest first.
type workflowView struct {
	Name     string
	Versions []versionView
}

// versionView is one version of a workflow as the page draws it.
type versionView struct {
	drover.Workflow
	Current bool // the version new tasks get in this server
	Running int
	Failed  int
}

type workflowsData struct {
	Workflows []workflowView
	// Counting: the tasks are being counted for the first time (no
	// counts yet).
	Counting                  bool
	RunningCapped, FailCapped bool
	CountedAt                 time.Time
}

// workflows is the Workflows page: every workflow the server runs and
// every stored version of the declarative ones, each drawn as its steps,
// with its running and failed tasks.
func (c *Console) workflows(ctx context.Context, r *http.Request, v *viewer) (string, string, any, error) {
	current := c.d.Workflows()
	var stored []drover.Workflow
	if c.opts.Versions != nil {
		var err error
		if stored, err = c.opts.Versions(ctx); err != nil {
			return "", "", nil, err
		}
	}
	tc := c.versionCounts(ctx, v.id.ListNamespace())
	byName := map[string]*workflowView{}
	var order []string
	add := func(w drover.Workflow, cur bool) {
		wv := byName[w.Name]
		if wv == nil {
			wv = &workflowView{Name: w.Name}
			byName[w.Name] = wv
			order = append(order, w.Name)
		}
		for i := range wv.Versions {
			if wv.Versions[i].Version == w.Version {
				wv.Versions[i].Current = wv.Versions[i].Current || cur
				return
			}
		}
		vv := versionView{Workflow: w, Current: cur}
		if tc != nil {
			k := versionKey{w.Name, w.Version}
			vv.Running, vv.Failed = tc.Running[k], tc.Failed[k]
		}
		wv.Versions = append(wv.Versions, vv)
	}
	for _, w := range current {
		add(w, true)
	}
	for _, w := range stored {
		add(w, false)
	}
	d := &workflowsData{Counting: tc == nil}
	if tc != nil {
		d.RunningCapped, d.FailCapped, d.CountedAt = tc.RunningCapped, tc.FailCapped, tc.At
	}
	slices.Sort(order)
	for _, n := range order {
		wv := byName[n]
		slices.SortFunc(wv.Versions, func(a, b versionView) int { return b.Version - a.Version })
		d.Workflows = append(d.Workflows, *wv)
	}
	return "workflows", "Workflows", d, nil
}

// Threshold is the FailureCount at which a timed-out step fails for good
// (the default when the definition gives none).
func (v versionView) Threshold() int {
	if v.FailureThreshold == 0 {
		return 3
	}
	return v.FailureThreshold
}

// Policy is what happens when step s fails for good: its own policy, or
// the workflow's.
func (v versionView) Policy(s drover.Step) string {
	p := s.OnFailure
	if p == "" {
		p = v.OnFailure
	}
	if p == drover.PolicyCompensate {
		return "compensate the completed steps"
	}
	return "Error, alert an operator"
}

// Waits describes the extended waits of step s before it fails for good
// ("" when it does not wait).
func (v versionView) Waits(s drover.Step) string {
	w := v.Wait
	if s.Wait != nil {
		w = *s.Wait
	}
	if w.MaxWaits <= 0 {
		return ""
	}
	d := w.Delay
	if d == 0 {
		d = drover.DefaultWaitDelay
	}
	return fmt.Sprintf("then waits %s (growing) up to %d time%s", d, w.MaxWaits, plural(w.MaxWaits))
}

// Timeout is step s's time budget (the default when none is given).
func (v versionView) Timeout(s drover.Step) time.Duration {
	if s.Timeout == 0 {
		return 30 * time.Second
	}
	return s.Timeout
}

// Compensates reports whether a failure of the version can compensate
// (the workflow's policy or a step's): the compensation row is drawn.
func (v versionView) Compensates() bool {
	if v.OnFailure == drover.PolicyCompensate {
		return true
	}
	return slices.ContainsFunc(v.FlatSteps(), func(s drover.FlatStep) bool {
		return s.OnFailure == drover.PolicyCompensate || s.Compensation != ""
	})
}

// stepBox is one step's box on the page: the step and its version.
type stepBox struct {
	V      versionView
	S      drover.Step
	Branch bool // a branch of a parallel group (its name is drawn in the box)
}

// Box is step s's box.
func (v versionView) Box(s drover.Step) stepBox {
	return stepBox{V: v, S: s, Branch: !slices.ContainsFunc(v.Steps, func(o drover.Step) bool { return o.Name == s.Name })}
}

// Label is the version's name on the page.
func (v versionView) Label() string {
	if v.Version == 0 {
		return "defined in code"
	}
	return "version " + fmt.Sprint(v.Version)
}

// anchor is the HTML id of a workflow's section.
func anchor(name string) string {
	return "wf-" + strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, name)
}
