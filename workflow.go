package drover

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"
	"unicode"
)

// Workflow is an ordered pipeline of steps and the policy for when one fails.
type Workflow struct {
	Name string
	// Version is recorded with each task submitted (Task.WorkflowVersion),
	// so a task keeps the definition it started with when a newer version
	// is registered. 0 for workflows defined in code.
	Version int
	Steps   []Step
	// FailureThreshold is the FailureCount at which the supervisor stops
	// retrying a timed-out step and applies OnFailure. Default 3.
	FailureThreshold int
	// OnFailure applies when a step fails for good (threshold reached or a
	// permanent error): PolicyError (default) or PolicyCompensate.
	OnFailure FailurePolicy
	// RetryDelay is how long a recovered step waits before it is claimed
	// again, doubled on each further failure. Default 0.
	RetryDelay time.Duration
}

// Step is one step of a workflow.
type Step struct {
	Name  string
	Agent string
	// Timeout is the step's time budget: CompleteBy is dispatch time plus
	// Timeout. Default 30s.
	Timeout time.Duration
	// Compensation names the agent that undoes this step; optional.
	Compensation string
}

const (
	defaultStepTimeout      = 30 * time.Second
	defaultFailureThreshold = 3
	maxNameLen              = 200
)

func validName(s string) bool {
	if s == "" || len(s) > maxNameLen {
		return false
	}
	for _, r := range s {
		// "/" separates the parts of an idempotency key.
		if unicode.IsSpace(r) || !unicode.IsPrint(r) || r == '/' {
			return false
		}
	}
	return true
}

// Validate reports every problem with the definition as a *ValidationError.
func (w Workflow) Validate() error {
	var p []string
	if !validName(w.Name) {
		p = append(p, fmt.Sprintf("name %q must be 1-%d printable characters without spaces or \"/\"", w.Name, maxNameLen))
	}
	if w.Version < 0 {
		p = append(p, fmt.Sprintf("Version %d is negative", w.Version))
	}
	if len(w.Steps) == 0 {
		p = append(p, "it has no steps")
	}
	if w.FailureThreshold < 0 {
		p = append(p, fmt.Sprintf("FailureThreshold %d is negative", w.FailureThreshold))
	}
	if w.OnFailure != "" && !w.OnFailure.Valid() {
		p = append(p, fmt.Sprintf("OnFailure %q must be %q or %q", w.OnFailure, PolicyError, PolicyCompensate))
	}
	if w.RetryDelay < 0 {
		p = append(p, fmt.Sprintf("RetryDelay %s is negative", w.RetryDelay))
	}
	seen := map[string]bool{}
	for i, s := range w.Steps {
		if !validName(s.Name) {
			p = append(p, fmt.Sprintf("step %d: name %q must be 1-%d printable characters without spaces or \"/\"", i, s.Name, maxNameLen))
		} else if seen[s.Name] {
			p = append(p, fmt.Sprintf("step %d: name %q is used twice", i, s.Name))
		}
		seen[s.Name] = true
		if !validName(s.Agent) {
			p = append(p, fmt.Sprintf("step %d (%s): agent %q must be 1-%d printable characters without spaces or \"/\"", i, s.Name, s.Agent, maxNameLen))
		}
		if s.Timeout < 0 {
			p = append(p, fmt.Sprintf("step %d (%s): Timeout %s is negative", i, s.Name, s.Timeout))
		}
		if s.Compensation != "" && !validName(s.Compensation) {
			p = append(p, fmt.Sprintf("step %d (%s): compensation agent %q must be printable characters without spaces or \"/\"", i, s.Name, s.Compensation))
		}
	}
	if len(p) > 0 {
		return &ValidationError{Workflow: w.Name, Problems: p}
	}
	return nil
}

func (w Workflow) withDefaults() Workflow {
	if w.FailureThreshold == 0 {
		w.FailureThreshold = defaultFailureThreshold
	}
	if w.OnFailure == "" {
		w.OnFailure = PolicyError
	}
	steps := make([]Step, len(w.Steps))
	copy(steps, w.Steps)
	for i := range steps {
		if steps[i].Timeout == 0 {
			steps[i].Timeout = defaultStepTimeout
		}
	}
	w.Steps = steps
	return w
}

// AddWorkflows registers workflows while the client may be running, or
// replaces the registered workflow of the same name with a new definition
// (typically a new Version). It checks every workflow first — Validate, no
// name twice in ws, and, in a client with the Agent role, every agent and
// compensation agent registered in Config.Agents, listed in
// Config.ExternalAgents or in externalAgents — and registers all of them
// or, on any problem, none (the error lists every problem).
// externalAgents are added to the agents known to run in other processes.
//
// Submissions that start after AddWorkflows returns use the new
// definitions. Tasks submitted before keep theirs: their steps (agents,
// time budgets) and policy were stored at submit, and Task.WorkflowVersion
// records the version they started with.
func (c *Client) AddWorkflows(ws []Workflow, externalAgents []string) error {
	var errs []error
	for _, a := range externalAgents {
		if !validName(a) {
			errs = append(errs, fmt.Errorf("%w: external agent name %q must be 1-%d printable characters without spaces or \"/\"", ErrInvalidConfig, a, maxNameLen))
		}
	}
	seen := map[string]bool{}
	for _, w := range ws {
		if err := w.Validate(); err != nil {
			errs = append(errs, err)
			continue
		}
		if seen[w.Name] {
			errs = append(errs, fmt.Errorf("%w: workflow %q given twice", ErrInvalidWorkflow, w.Name))
		}
		seen[w.Name] = true
	}
	// One writer at a time, and the agent check sees the agents as they
	// are when the workflows are registered.
	c.wfMu.Lock()
	defer c.wfMu.Unlock()
	if c.cfg.Roles.Agent {
		for _, w := range ws {
			for _, s := range w.Steps {
				for _, a := range []string{s.Agent, s.Compensation} {
					if a != "" && !c.knownAgents[a] && !slices.Contains(externalAgents, a) {
						errs = append(errs, fmt.Errorf("workflow %q step %q: %w %q (register it in Config.Agents or list it as an external agent)", w.Name, s.Name, ErrUnknownAgent, a))
					}
				}
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for _, a := range externalAgents {
		c.knownAgents[a] = true
	}
	for _, w := range ws {
		c.workflows[w.Name] = w.withDefaults()
	}
	return nil
}

// Workflows returns the registered workflows, sorted by name, with their
// defaults filled in.
func (c *Client) Workflows() []Workflow {
	c.wfMu.RLock()
	out := make([]Workflow, 0, len(c.workflows))
	for _, w := range c.workflows {
		w.Steps = slices.Clone(w.Steps)
		out = append(out, w)
	}
	c.wfMu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
