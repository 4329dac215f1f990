package drover

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	dt "github.com/drover-run/drover/drovertype"
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
	// OnFailure applies when a step fails for good (threshold reached, and
	// any extended waits of Wait over, or a permanent error): PolicyError
	// (default) or PolicyCompensate. A step may set its own.
	OnFailure FailurePolicy
	// RetryDelay is how long a recovered step waits before it is claimed
	// again, doubled on each further failure. Default 0.
	RetryDelay time.Duration
	// ValidateInput, when set, checks a task's input before it is stored,
	// whichever way it is submitted (Submit, SubmitMany, SubmitTx, and so
	// the HTTP API and the CLI): an error refuses the submission, wrapped
	// with ErrInvalidInput (errors.Is finds both). input is a valid JSON
	// document ("null" when none was given). It must not change input, and
	// should be quick: it runs on the submitting goroutine. Default: any
	// JSON document.
	ValidateInput func(input []byte) error
	// Priority is the priority of the workflow's tasks (Task.Priority),
	// from 0 (the default, lowest) to MaxPriority; a submission may set
	// its own (SubmitOptions.Priority).
	Priority int
	// Wait, with MaxWaits set, makes a step that reached FailureThreshold
	// wait an extended period and try again, up to MaxWaits times, before
	// OnFailure applies; each wait raises a step_waiting alert. Defaults
	// (with MaxWaits set): Delay 5m, Multiplier 2, MaxDelay 1h. A step may
	// set its own. Default: off.
	Wait WaitPolicy
}

// Step is one step of a workflow: a definition. Its state while a task runs
// is a TaskStep (Task.Steps).
type Step struct {
	Name  string
	Agent string
	// Timeout is the step's time budget: CompleteBy is dispatch time plus
	// Timeout. Default 30s.
	Timeout time.Duration
	// OnFailure, when set, overrides the workflow's OnFailure for this
	// step's failures.
	OnFailure FailurePolicy
	// Wait, when not nil, overrides the workflow's Wait for this step
	// (&WaitPolicy{} turns waiting off for it).
	Wait *WaitPolicy
	// Retry, when not nil, replaces the retry policy of the step's agent
	// for this step's calls (not its compensation's): the tries, the
	// back-off between them and which errors are retried, within the
	// step's deadline. Zero fields take RetryPolicy's defaults. It applies
	// to agents in the processes that register this workflow; a remote
	// agent retries on its own.
	Retry *RetryPolicy
	// Compensation names the agent that undoes this step; optional. With
	// PolicyCompensate it runs for the step if the step completed or timed
	// out past the threshold (its call may have taken effect), not if its
	// agent failed it with a Permanent error (it did not take effect).
	Compensation string
	// Signal, when set, makes this a signal step: it calls no agent (Agent,
	// Compensation, Retry and Wait stay unset) but waits for the signal of
	// this name (Client.Signal). Timeout, which such a step must set, is
	// the deadline of the wait; past it, the step completes with
	// SignalDefault if set, else it fails at once and its failure policy
	// applies (OnFailure: Error with an alert, or compensation of the
	// steps before). A missed deadline is never retried.
	Signal string
	// SignalDefault, when not nil, is the output (a JSON document) a signal
	// step completes with when its deadline passes without the signal.
	SignalDefault []byte
	// Parallel, when set, makes this step a parallel group named Name: its
	// branches (at least two, each a step with its own agent, Timeout,
	// retries and FailureCount; no group within a group) run at the same
	// time and join before the next step, which gets as previous output a
	// JSON object of the branches' outputs by name. A group sets nothing
	// but Name and Parallel. If a branch fails for good, its failure policy
	// applies to the whole task: the other branches are abandoned (their
	// late replies are refused) and, with PolicyCompensate, every
	// completed branch and earlier step is undone in reverse order of
	// completion.
	Parallel []Step
}

// FlatStep is a step as a task stores it: a step of its own, or one
// branch of a parallel group (Group names the group).
type FlatStep struct {
	Step
	Group string
}

// FlatSteps returns the workflow's steps as its tasks store them, each
// parallel group replaced by its branches: a step's index in the result is
// its index in the task (TaskStep.Index).
func (w Workflow) FlatSteps() []FlatStep {
	out := make([]FlatStep, 0, len(w.Steps))
	for _, s := range w.Steps {
		if len(s.Parallel) == 0 {
			out = append(out, FlatStep{Step: s})
			continue
		}
		for _, b := range s.Parallel {
			out = append(out, FlatStep{Step: b, Group: s.Name})
		}
	}
	return out
}

const (
	defaultStepTimeout      = 30 * time.Second
	defaultFailureThreshold = 3
	maxNameLen              = dt.MaxNameBytes
)

// Defaults of a WaitPolicy with MaxWaits set.
const (
	DefaultWaitDelay      = 5 * time.Minute
	DefaultWaitMultiplier = 2.0
	DefaultWaitMaxDelay   = time.Hour
)

// retryProblems lists what is wrong with a retry policy; field prefixes
// the names.
func retryProblems(field string, r RetryPolicy) []string {
	var p []string
	if r.InitialInterval < 0 {
		p = append(p, fmt.Sprintf("%s.InitialInterval %s is negative", field, r.InitialInterval))
	}
	if r.MaxInterval < 0 {
		p = append(p, fmt.Sprintf("%s.MaxInterval %s is negative", field, r.MaxInterval))
	}
	if r.MaxInterval > 0 && r.InitialInterval > r.MaxInterval {
		p = append(p, fmt.Sprintf("%s.InitialInterval %s is more than MaxInterval %s", field, r.InitialInterval, r.MaxInterval))
	}
	return p
}

// waitProblems lists what is wrong with a wait policy; field prefixes the
// names (e.g. "Wait" or "step 1 (charge): Wait").
func waitProblems(field string, w WaitPolicy) []string {
	var p []string
	if w.MaxWaits < 0 {
		p = append(p, fmt.Sprintf("%s.MaxWaits %d is negative", field, w.MaxWaits))
	}
	if w.Delay < 0 {
		p = append(p, fmt.Sprintf("%s.Delay %s is negative", field, w.Delay))
	}
	if w.MaxDelay < 0 {
		p = append(p, fmt.Sprintf("%s.MaxDelay %s is negative", field, w.MaxDelay))
	}
	if w.Multiplier != 0 && !(w.Multiplier >= 1 && w.Multiplier <= 1000) {
		p = append(p, fmt.Sprintf("%s.Multiplier %g must be between 1 and 1000 (0: the default, 2)", field, w.Multiplier))
	}
	if d := withWaitDefaults(w); d.MaxDelay < d.Delay {
		p = append(p, fmt.Sprintf("%s.MaxDelay %s is less than Delay %s", field, d.MaxDelay, d.Delay))
	}
	return p
}

// groupProblems lists what is wrong with parallel group g, the workflow's
// i-th step (not counting branches), and records its name in seen.
func groupProblems(i int, g Step, seen map[string]bool) []string {
	var p []string
	if !validName(g.Name) {
		p = append(p, fmt.Sprintf("group %d: name %q must be 1-%d printable characters without spaces or \"/\"", i, g.Name, maxNameLen))
	} else if seen[g.Name] {
		p = append(p, fmt.Sprintf("group %d: name %q is used twice", i, g.Name))
	}
	seen[g.Name] = true
	if len(g.Parallel) < 2 {
		p = append(p, fmt.Sprintf("group %d (%s): a group needs at least 2 branches, it has %d", i, g.Name, len(g.Parallel)))
	}
	if g.Agent != "" || g.Compensation != "" || g.Timeout != 0 || g.OnFailure != "" || g.Wait != nil || g.Retry != nil {
		p = append(p, fmt.Sprintf("group %d (%s): a group sets only Name and Parallel; set Agent, Timeout, Compensation, OnFailure, Wait and Retry on its branches", i, g.Name))
	}
	return p
}

// withWaitDefaults fills in the defaults of a policy that waits.
func withWaitDefaults(w WaitPolicy) WaitPolicy {
	if w.MaxWaits <= 0 {
		return WaitPolicy{}
	}
	if w.Delay == 0 {
		w.Delay = DefaultWaitDelay
	}
	if w.Multiplier == 0 {
		w.Multiplier = DefaultWaitMultiplier
	}
	if w.MaxDelay == 0 {
		w.MaxDelay = max(DefaultWaitMaxDelay, w.Delay)
	}
	return w
}

// validName is the rule of names (drovertype.NameProblem): "/" separates
// the parts of an idempotency key.
func validName(s string) bool { return dt.NameProblem(s) == "" }

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
	if why := priorityProblem(w.Priority); why != "" {
		p = append(p, "Priority "+why)
	}
	p = append(p, waitProblems("Wait", w.Wait)...)
	seen := map[string]bool{}
	for i, g := range w.Steps {
		if len(g.Parallel) > 0 {
			p = append(p, groupProblems(i, g, seen)...)
		}
	}
	for i, s := range w.FlatSteps() {
		if s.Group != "" {
			if len(s.Parallel) > 0 {
				p = append(p, fmt.Sprintf("step %d (%s): a branch of group %q cannot be a group itself", i, s.Name, s.Group))
			}
		} else if s.Parallel != nil {
			p = append(p, fmt.Sprintf("step %d (%s): Parallel is set but empty; a group needs at least 2 branches", i, s.Name))
		}
		if !validName(s.Name) {
			p = append(p, fmt.Sprintf("step %d: name %q must be 1-%d printable characters without spaces or \"/\"", i, s.Name, maxNameLen))
		} else if seen[s.Name] {
			p = append(p, fmt.Sprintf("step %d: name %q is used twice", i, s.Name))
		}
		seen[s.Name] = true
		if s.Signal != "" || s.SignalDefault != nil {
			if s.Group != "" {
				p = append(p, fmt.Sprintf("step %d (%s): a branch of group %q cannot wait for a signal; put the signal step before or after the group", i, s.Name, s.Group))
			}
			p = append(p, signalStepProblems(i, s.Step)...)
		} else if !validName(s.Agent) {
			p = append(p, fmt.Sprintf("step %d (%s): agent %q must be 1-%d printable characters without spaces or \"/\"", i, s.Name, s.Agent, maxNameLen))
		}
		if s.Timeout < 0 {
			p = append(p, fmt.Sprintf("step %d (%s): Timeout %s is negative", i, s.Name, s.Timeout))
		}
		if s.Compensation != "" && !validName(s.Compensation) {
			p = append(p, fmt.Sprintf("step %d (%s): compensation agent %q must be printable characters without spaces or \"/\"", i, s.Name, s.Compensation))
		}
		if s.OnFailure != "" && !s.OnFailure.Valid() {
			p = append(p, fmt.Sprintf("step %d (%s): OnFailure %q must be %q or %q", i, s.Name, s.OnFailure, PolicyError, PolicyCompensate))
		}
		if s.Wait != nil {
			p = append(p, waitProblems(fmt.Sprintf("step %d (%s): Wait", i, s.Name), *s.Wait)...)
		}
		if s.Retry != nil {
			p = append(p, retryProblems(fmt.Sprintf("step %d (%s): Retry", i, s.Name), *s.Retry)...)
		}
	}
	if len(p) > 0 {
		return &ValidationError{Workflow: w.Name, Problems: p}
	}
	return nil
}

// signalStepProblems lists what is wrong with signal step i.
func signalStepProblems(i int, s Step) []string {
	var p []string
	at := fmt.Sprintf("step %d (%s): ", i, s.Name)
	if s.Signal == "" {
		return append(p, at+"SignalDefault is set but Signal is not")
	}
	if !validName(s.Signal) {
		p = append(p, fmt.Sprintf("%ssignal %q must be 1-%d printable characters without spaces or \"/\"", at, s.Signal, maxNameLen))
	}
	if s.Agent != "" {
		p = append(p, fmt.Sprintf("%swaits for signal %q, so it cannot also call agent %q", at, s.Signal, s.Agent))
	}
	if s.Compensation != "" {
		p = append(p, fmt.Sprintf("%sa signal step has nothing to undo: Compensation %q must be unset", at, s.Compensation))
	}
	if s.Retry != nil || s.Wait != nil {
		p = append(p, at+"a signal step is never retried: Retry and Wait must be unset")
	}
	if s.Timeout <= 0 {
		p = append(p, at+"a signal step needs a Timeout: the deadline of its wait")
	}
	if s.SignalDefault != nil && !json.Valid(s.SignalDefault) {
		p = append(p, at+"SignalDefault must be a JSON document")
	}
	return p
}

func (w Workflow) withDefaults() Workflow {
	if w.FailureThreshold == 0 {
		w.FailureThreshold = defaultFailureThreshold
	}
	if w.OnFailure == "" {
		w.OnFailure = PolicyError
	}
	w.Wait = withWaitDefaults(w.Wait)
	w.Steps = stepDefaults(w.Steps)
	return w
}

// stepDefaults returns a copy of steps with their defaults (and their
// branches') filled in.
func stepDefaults(in []Step) []Step {
	steps := make([]Step, len(in))
	copy(steps, in)
	for i := range steps {
		if len(steps[i].Parallel) > 0 {
			steps[i].Parallel = stepDefaults(steps[i].Parallel)
			continue
		}
		if steps[i].Timeout == 0 {
			steps[i].Timeout = defaultStepTimeout
		}
		if steps[i].Wait != nil {
			d := withWaitDefaults(*steps[i].Wait)
			steps[i].Wait = &d
		}
	}
	return steps
}

// AddWorkflows registers workflows while the client may be running, or
// replaces the registered workflow of the same name with a new definition
// (typically a new Version). It checks every workflow first — Validate, no
// name twice in ws, and, in a client with the Agent role, every agent and
// compensation agent registered in Config.Agents, listed in
// Config.ExternalAgents or in externalAgents — and registers all of them
// or, on any problem, none (the error lists every problem).
// externalAgents are added to the agents known to run in other processes;
// none may be an agent of Config.Agents, which runs in this process.
//
// Submissions that start after AddWorkflows returns use the new
// definitions. Tasks submitted before keep theirs: their steps (agents,
// time budgets) and policy were stored at submit, and Task.WorkflowVersion
// records the version they started with.
func (c *Client) AddWorkflows(ws []Workflow, externalAgents []string) error {
	var errs []error
	for _, a := range slices.Compact(slices.Sorted(slices.Values(externalAgents))) {
		if !validName(a) {
			errs = append(errs, fmt.Errorf("%w: external agent name %q must be 1-%d printable characters without spaces or \"/\"", ErrInvalidConfig, a, maxNameLen))
		}
		if c.localAgents[a] {
			errs = append(errs, agentTwiceError(a, "AddWorkflows' external agents"))
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
			for _, s := range w.FlatSteps() {
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

// IsExternalAgent reports whether name is an agent declared to run in
// another process (Config.ExternalAgents, or AddWorkflows' externalAgents)
// and not in this one (Config.Agents).
func (c *Client) IsExternalAgent(name string) bool {
	c.wfMu.RLock()
	defer c.wfMu.RUnlock()
	return c.knownAgents[name] && !c.localAgents[name]
}

// Workflows returns the registered workflows, sorted by name, with their
// defaults filled in.
func (c *Client) Workflows() []Workflow {
	c.wfMu.RLock()
	out := make([]Workflow, 0, len(c.workflows))
	for _, w := range c.workflows {
		w.Steps = cloneSteps(w.Steps)
		out = append(out, w)
	}
	c.wfMu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// cloneSteps copies steps deeply enough that the caller cannot change the
// registered definition: wait policies and branches.
func cloneSteps(in []Step) []Step {
	steps := slices.Clone(in)
	for i, s := range steps {
		if s.Wait != nil {
			d := *s.Wait
			steps[i].Wait = &d
		}
		if s.Parallel != nil {
			steps[i].Parallel = cloneSteps(s.Parallel)
		}
	}
	return steps
}
