package workflowdef

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/drover-run/drover"
	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/httpagent"
	"github.com/drover-run/drover/store"
)

// DefaultHTTPConcurrency is how many calls of the "http" agent one process
// makes at once unless Options.HTTPConcurrency says otherwise. The per-host
// limit of the HTTP caller applies within it.
const DefaultHTTPConcurrency = 256

// httpAgentSlots is how many requests the "http" agent takes per call slot
// (Options.HTTPConcurrency): a request past the slots waits in the caller
// (a goroutine), for its namespace's slots then the process's, rather
// than unclaimed in the store, so that a namespace at its cap does not
// keep another's requests from the caller.
const httpAgentSlots = 4

// Options configures a Registry.
type Options struct {
	// Store keeps the versions of every definition. Required.
	Store store.Driver
	// Logger receives one line per loaded workflow and every problem of
	// an invalid file on reload. Default: discard.
	Logger *slog.Logger
	// HTTP configures the caller of the built-in HTTP agent: per-host
	// concurrency limit and circuit breaker, response size limit.
	HTTP httpagent.Options
	// Caller, when set, is used instead of one built from HTTP.
	Caller *httpagent.Caller
	// HTTPConcurrency caps the calls of the "http" agent in this process
	// (default DefaultHTTPConcurrency): the calls the caller makes at once
	// (httpagent.Options.MaxConcurrent) when the registry builds it. The
	// agent takes up to httpAgentSlots times as many requests, which wait
	// in the caller for their namespace's slots and these.
	HTTPConcurrency int
	// HTTPMaxPerNamespace caps the calls of the "http" agent of one
	// namespace (httpagent.Options.MaxPerNamespace) when the registry
	// builds the caller and HTTP.MaxPerNamespace is not set. Default:
	// three quarters of HTTPConcurrency, so other namespaces always have
	// slots left.
	HTTPMaxPerNamespace int
	// Reserved names the workflows defined in code (such as "orders"),
	// which no file may take.
	Reserved []string
	// Now stamps stored versions (default time.Now).
	Now func() time.Time
}

type key struct {
	name    string
	version int
}

// Registry holds every loaded version of the declarative workflows,
// provides the "http" agent and the input mapping of remote agents, and
// reloads the workflow directory. It is safe for concurrent use.
type Registry struct {
	opts   Options
	log    *slog.Logger
	caller *httpagent.Caller

	reloadMu sync.Mutex // one load or reload at a time

	mu      sync.Mutex
	dir     string
	client  Client
	defs    map[key]*Definition    // every version seen: from files and from the store
	current map[string]*Definition // the version new tasks are submitted with
	scanned map[string]string      // path → digest at the last load, to notice changes
}

// NewRegistry returns an empty registry.
func NewRegistry(opts Options) (*Registry, error) {
	if opts.Store == nil {
		return nil, errors.New("workflowdef: Options.Store is required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.HTTPConcurrency <= 0 {
		opts.HTTPConcurrency = DefaultHTTPConcurrency
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.HTTPMaxPerNamespace <= 0 {
		opts.HTTPMaxPerNamespace = max(1, opts.HTTPConcurrency*3/4)
	}
	caller := opts.Caller
	if caller == nil {
		h := opts.HTTP
		if h.Logger == nil {
			h.Logger = opts.Logger
		}
		if h.MaxPerNamespace <= 0 {
			h.MaxPerNamespace = opts.HTTPMaxPerNamespace
		}
		if h.MaxConcurrent <= 0 {
			h.MaxConcurrent = opts.HTTPConcurrency
		}
		caller = httpagent.New(h)
	}
	return &Registry{
		opts: opts, log: opts.Logger, caller: caller,
		defs: map[key]*Definition{}, current: map[string]*Definition{}, scanned: map[string]string{},
	}, nil
}

// HTTPCalls returns the built-in http agent's calls in flight per
// namespace (as stored, "" for the default one; only namespaces with any).
func (r *Registry) HTTPCalls() map[string]int { return r.caller.NamespaceCalls() }

// HTTPHosts reports the hosts the built-in http agent has called: each
// one's circuit breaker, calls in flight and recent failures.
func (r *Registry) HTTPHosts() []httpagent.HostHealth { return r.caller.Hosts() }

// Client is what the registry uses of a *drover.Client.
type Client interface {
	// Task returns a task with its steps.
	Task(ctx context.Context, id string) (*drover.Task, error)
	// AddWorkflows registers new versions of workflows, all or none.
	AddWorkflows(ws []drover.Workflow, externalAgents []string) error
}

// scheduleAdder is the part of a *drover.Client a reload registers the
// changed files' schedules with.
type scheduleAdder interface {
	AddSchedules(ctx context.Context, ss []drover.Schedule) error
	RemoveSchedules(names ...string)
	DefinesSchedule(name string) bool
}

// Attach gives the registry the client (a *drover.Client) it reads tasks
// through and, on reload, registers new versions with. Call it before the
// client starts.
func (r *Registry) Attach(c Client) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.client = c
}

func storedLabel(name string, version int) string {
	return fmt.Sprintf("%s v%d (stored)", name, version)
}

// loadStored reads every stored version, so tasks submitted with an older
// version (by this process before a restart, or by another) run with it.
func (r *Registry) loadStored(ctx context.Context) error {
	rows, err := r.opts.Store.Reader().WorkflowDefList(ctx, &store.WorkflowDefListParams{Name: ""})
	if err != nil {
		return fmt.Errorf("read stored workflow versions: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, row := range rows {
		k := key{row.Name, row.Version}
		if r.defs[k] != nil {
			continue
		}
		d, err := r.compileStored(row)
		if err != nil {
			r.log.Warn("stored workflow version no longer valid; tasks using it will fail", "workflow", row.Name, "version", row.Version, "err", err)
			continue
		}
		r.defs[k] = d
	}
	return nil
}

func (r *Registry) compileStored(row *dt.WorkflowDef) (*Definition, error) {
	d, err := Parse(storedLabel(row.Name, row.Version), row.Source)
	if err != nil {
		return nil, err
	}
	if d.Name != row.Name {
		return nil, fmt.Errorf("stored source names workflow %q", d.Name)
	}
	d.Version = row.Version
	return d, nil
}

// put stores d as a version (or finds it stored) and sets d.Version.
func (r *Registry) put(ctx context.Context, d *Definition) (created bool, err error) {
	err = r.opts.Store.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		st, c, err := x.WorkflowDefPut(ctx, &store.WorkflowDefPutParams{Def: &dt.WorkflowDef{Name: d.Name, Digest: d.Digest, Source: d.Source, CreatedAt: r.opts.Now()}})
		if err != nil {
			return err
		}
		d.Version, created = st.Version, c
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("store workflow %q from %s: %w", d.Name, d.File, err)
	}
	return created, nil
}

// LoadDir loads the workflow directory at start-up: the stored versions,
// then every file, each stored as a version (a file already stored keeps
// its version). Any invalid file fails it with an *Error listing every
// problem of every file; nothing is stored then. Register the result with
// the client from Workflows and ExternalAgents.
func (r *Registry) LoadDir(ctx context.Context, dir string) error {
	r.reloadMu.Lock()
	defer r.reloadMu.Unlock()
	files, err := readDir(dir)
	if err != nil {
		return err
	}
	defs, bad := parseFiles(files, r.opts.Reserved, nil, r.caller.Egress())
	if len(bad) > 0 {
		var all []Problem
		for _, ps := range bad {
			all = append(all, ps...)
		}
		sortProblems(all)
		return &Error{Problems: all}
	}
	if err := r.loadStored(ctx); err != nil {
		return err
	}
	for _, d := range defs {
		created, err := r.put(ctx, d)
		if err != nil {
			return err
		}
		r.log.Info("workflow loaded", "workflow", d.Name, "version", d.Version, "file", d.File, "new_version", created, "steps", len(d.Steps))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dir = dir
	for _, d := range defs {
		r.defs[key{d.Name, d.Version}] = d
		r.current[d.Name] = d
	}
	for _, f := range files {
		r.scanned[f.path] = f.digest
	}
	if len(defs) == 0 {
		r.log.Warn("no workflow files in the workflows directory", "dir", dir)
	}
	return nil
}

// Workflows returns the current version of every loaded workflow, compiled,
// in name order.
func (r *Registry) Workflows() []drover.Workflow {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]drover.Workflow, 0, len(r.current))
	for _, d := range r.current {
		out = append(out, d.Workflow())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Versions returns every stored version of every declarative workflow,
// compiled, in name then version order: what the operator console draws.
// It reads the store first, so versions other processes stored are in.
func (r *Registry) Versions(ctx context.Context) ([]drover.Workflow, error) {
	if err := r.loadStored(ctx); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]drover.Workflow, 0, len(r.defs))
	for _, d := range r.defs {
		out = append(out, d.Workflow())
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return out[i].Version < out[j].Version
	})
	return out, nil
}

// ExternalAgents lists the remote agents named by any loaded version.
func (r *Registry) ExternalAgents() []string {
	src := r.RemoteAgentSources()
	out := make([]string, 0, len(src))
	for a := range src {
		out = append(out, a)
	}
	sort.Strings(out)
	return out
}

// RemoteAgentSources maps every remote agent named by a loaded version to
// the first version naming it (in name and version order), as
// `workflow "NAME" vN (FILE)`: what a message about the agent points to.
func (r *Registry) RemoteAgentSources() map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	keys := make([]key, 0, len(r.defs))
	for k := range r.defs {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].name != keys[j].name {
			return keys[i].name < keys[j].name
		}
		return keys[i].version < keys[j].version
	})
	out := map[string]string{}
	for _, k := range keys {
		d := r.defs[k]
		for _, a := range d.ExternalAgents() {
			if _, ok := out[a]; !ok {
				out[a] = fmt.Sprintf("workflow %q v%d (%s)", d.Name, d.Version, d.File)
			}
		}
	}
	return out
}

// IsRemoteAgent reports whether a loaded version names agent as a remote
// agent (one that runs in another process and polls the API).
func (r *Registry) IsRemoteAgent(agent string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, d := range r.defs {
		if slices.Contains(d.ExternalAgents(), agent) {
			return true
		}
	}
	return false
}

// LoadStored reads every stored version and makes the latest one of each
// workflow current (unless a directory load already chose one): a process
// without the workflow files, such as "drover submit" on the database,
// submits with what the servers stored.
func (r *Registry) LoadStored(ctx context.Context) error {
	if err := r.loadStored(ctx); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	latest := map[string]*Definition{}
	for k, d := range r.defs {
		if cur := latest[k.name]; cur == nil || d.Version > cur.Version {
			latest[k.name] = d
		}
	}
	for name, d := range latest {
		if r.current[name] == nil {
			r.current[name] = d
		}
	}
	return nil
}

// Current returns the version of a workflow new tasks are submitted with.
func (r *Registry) Current(name string) (*Definition, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	d, ok := r.current[name]
	return d, ok
}

// Definition returns one version of a workflow: loaded, or read from the
// store (a version another process stored) and kept.
func (r *Registry) Definition(ctx context.Context, name string, version int) (*Definition, error) {
	r.mu.Lock()
	d := r.defs[key{name, version}]
	r.mu.Unlock()
	if d != nil {
		return d, nil
	}
	row, err := r.opts.Store.Reader().WorkflowDefGet(ctx, &store.WorkflowDefGetParams{Name: name, Version: version})
	if err != nil {
		return nil, err
	}
	d, err = r.compileStored(row)
	if err != nil {
		// Permanent: retrying cannot make it load, and handing the request
		// back would keep it at the head of its agent's queue.
		return nil, drover.Permanent(fmt.Errorf("stored version %d of workflow %q does not load: %w", version, name, err))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if old := r.defs[key{name, version}]; old != nil {
		return old, nil
	}
	r.defs[key{name, version}] = d
	return d, nil
}

// ReloadResult says what a reload did.
type ReloadResult struct {
	Loaded  []*Definition // new current versions, registered
	Invalid *Error        // problems of the files left out; nil when none
}

// Reload reads the workflow directory again. Valid files whose content
// changed become new versions, registered with the client all together;
// invalid files are logged with every problem and their workflow keeps
// its previous version; tasks in flight are untouched. A workflow whose
// file was removed stays registered. The error is for a failure to read
// the directory, store versions or register them (nothing changed then).
func (r *Registry) Reload(ctx context.Context) (*ReloadResult, error) {
	r.reloadMu.Lock()
	defer r.reloadMu.Unlock()
	r.mu.Lock()
	dir, client := r.dir, r.client
	holders := map[string]string{}
	for name, d := range r.current {
		holders[name] = d.File
	}
	r.mu.Unlock()
	if dir == "" {
		return nil, errors.New("workflowdef: Reload before LoadDir")
	}
	files, err := readDir(dir)
	if err != nil {
		r.log.Error("reload workflows: cannot read the directory; keeping every workflow as it is", "dir", dir, "err", err)
		return nil, err
	}
	defs, bad := parseFiles(files, r.opts.Reserved, holders, r.caller.Egress())
	res := &ReloadResult{}
	if len(bad) > 0 {
		res.Invalid = &Error{}
		for _, ps := range bad {
			res.Invalid.Problems = append(res.Invalid.Problems, ps...)
		}
		sortProblems(res.Invalid.Problems)
		for _, p := range res.Invalid.Problems {
			r.log.Error("invalid workflow file; its previous version stays", "problem", p.String())
		}
	}
	r.logRemoved(files, defs, bad, holders)
	gone := r.goneSchedules(defs, bad, holders)

	var changed []*Definition
	r.mu.Lock()
	for _, d := range defs {
		if cur := r.current[d.Name]; cur == nil || cur.Digest != d.Digest {
			changed = append(changed, d)
		} else if cur.File != d.File {
			cur.File = d.File // renamed file, same content
		}
	}
	r.mu.Unlock()
	if len(changed) > 0 {
		for _, d := range changed {
			if _, err := r.put(ctx, d); err != nil {
				r.log.Error("reload workflows: nothing registered", "err", err)
				return res, err
			}
		}
		ws := make([]drover.Workflow, len(changed))
		agents := map[string]bool{}
		var external []string
		for i, d := range changed {
			ws[i] = d.Workflow()
			for _, a := range d.ExternalAgents() {
				if !agents[a] {
					agents[a] = true
					external = append(external, a)
				}
			}
		}
		if client != nil {
			err := client.AddWorkflows(ws, external)
			if sc, ok := client.(scheduleAdder); ok && err == nil {
				var ss []drover.Schedule
				for _, d := range changed {
					ss = append(ss, d.Schedules...)
				}
				if len(ss) > 0 {
					if err = sc.AddSchedules(ctx, ss); err != nil {
						err = fmt.Errorf("schedules: %w", err)
					}
				}
			}
			if err != nil {
				r.log.Error("reload workflows: registering the new versions failed; the previous ones stay", "err", err)
				if sc, ok := client.(scheduleAdder); ok {
					r.dropSchedules(sc, gone) // as the files say, whatever failed
				}
				r.mu.Lock()
				for _, d := range changed {
					// Stored: tasks another process submits with it can run here.
					r.defs[key{d.Name, d.Version}] = d
				}
				r.mu.Unlock()
				return res, err
			}
		}
		r.mu.Lock()
		for _, d := range changed {
			prev := 0
			if cur := r.current[d.Name]; cur != nil {
				prev = cur.Version
			}
			r.defs[key{d.Name, d.Version}] = d
			r.current[d.Name] = d
			r.log.Info("workflow loaded", "workflow", d.Name, "version", d.Version, "file", d.File, "previous_version", prev, "steps", len(d.Steps))
		}
		r.mu.Unlock()
		res.Loaded = changed
	}
	if sc, ok := client.(scheduleAdder); ok {
		r.dropSchedules(sc, gone)
		if err := r.addBackSchedules(ctx, sc, defs); err != nil {
			// Not marked scanned: the next look at the directory reloads.
			r.log.Error("reload workflows: schedules defined again could not be stored; tried again at the next reload", "err", err)
			return res, err
		}
	}
	r.mu.Lock()
	r.scanned = map[string]string{}
	for _, f := range files {
		r.scanned[f.path] = f.digest
	}
	r.mu.Unlock()
	return res, nil
}

// dropSchedules makes the client stop firing the schedules of gone it
// fires.
func (r *Registry) dropSchedules(sc scheduleAdder, gone []string) {
	var drop []string
	for _, name := range gone {
		if sc.DefinesSchedule(name) {
			drop = append(drop, name)
		}
	}
	if len(drop) > 0 {
		sc.RemoveSchedules(drop...)
		r.log.Info("schedules no workflow file defines any more: no longer fired here; they stay stored until deleted (drover schedule delete)",
			"schedules", strings.Join(drop, ","))
	}
}

// addBackSchedules makes the client fire the schedules of defs it does
// not: dropped by an earlier reload, and defined again by a file whose
// workflow did not change since (the same file back).
func (r *Registry) addBackSchedules(ctx context.Context, sc scheduleAdder, defs []*Definition) error {
	var back []drover.Schedule
	for _, d := range defs {
		for _, s := range d.Schedules {
			if !sc.DefinesSchedule(s.Name) {
				back = append(back, s)
			}
		}
	}
	if len(back) == 0 {
		return nil
	}
	return sc.AddSchedules(ctx, back)
}

// goneSchedules are the schedules of the current versions that the
// directory no longer defines: dropped from a workflow's file, or with
// the workflow's file removed. (The workflow itself stays registered, for
// its tasks; a schedule would go on submitting new ones.) An invalid
// file's workflows keep their previous version, schedules included.
func (r *Registry) goneSchedules(defs []*Definition, bad map[string][]Problem, holders map[string]string) []string {
	kept := map[string]bool{}
	for _, d := range defs {
		for _, s := range d.Schedules {
			kept[s.Name] = true
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, path := range holders {
		if cur := r.current[name]; cur != nil && bad[path] != nil {
			for _, s := range cur.Schedules {
				kept[s.Name] = true
			}
		}
	}
	var gone []string
	for _, cur := range r.current {
		for _, s := range cur.Schedules {
			if !kept[s.Name] {
				gone = append(gone, s.Name)
			}
		}
	}
	slices.Sort(gone)
	return slices.Compact(gone)
}

// logRemoved logs the workflows no file defines any more: they stay
// registered, so tasks can still be submitted and run.
func (r *Registry) logRemoved(files []sourceFile, defs []*Definition, bad map[string][]Problem, holders map[string]string) {
	present := map[string]bool{}
	for _, f := range files {
		present[f.path] = true
	}
	defined := map[string]bool{}
	for _, d := range defs {
		defined[d.Name] = true
	}
	for name, path := range holders {
		switch {
		case defined[name], bad[path] != nil:
		case !present[path]:
			r.log.Warn("workflow file removed; the workflow stays registered with its last version", "workflow", name, "file", path)
		default:
			r.log.Warn("workflow no longer defined by its file; it stays registered with its last version", "workflow", name, "file", path)
		}
	}
}

// changed reports whether the directory's workflow files differ from the
// last load (added, removed or edited).
func (r *Registry) changed() (bool, error) {
	r.mu.Lock()
	dir := r.dir
	r.mu.Unlock()
	files, err := readDir(dir)
	if err != nil {
		return false, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(files) != len(r.scanned) {
		return true, nil
	}
	for _, f := range files {
		if d, ok := r.scanned[f.path]; !ok || d != f.digest {
			return true, nil
		}
	}
	return false, nil
}

// Watch reloads the directory when a value arrives on hup (SIGHUP) and
// when its files change, checked every poll (0: only on hup), until ctx
// ends.
func (r *Registry) Watch(ctx context.Context, poll time.Duration, hup <-chan os.Signal) {
	var tick <-chan time.Time
	if poll > 0 {
		t := time.NewTicker(poll)
		defer t.Stop()
		tick = t.C
	}
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			r.log.Info("reloading workflows (signal)")
			_, _ = r.Reload(ctx)
		case <-tick:
			ch, err := r.changed()
			if err != nil {
				if !failing {
					r.log.Error("watch workflows: cannot read the directory", "err", err)
				}
				failing = true
				continue
			}
			failing = false
			if ch {
				r.log.Info("reloading workflows (files changed)")
				_, _ = r.Reload(ctx)
			}
		}
	}
}

// HTTPAgent is the built-in agent that runs every HTTP step and HTTP
// compensation. drover's runtime makes one try per call (the HTTP caller
// retries with the step's policy) and its breaker never opens (the
// caller's per-host breakers do that job, so one failing host does not
// stop calls to others).
func (r *Registry) HTTPAgent() drover.Agent {
	return drover.Agent{
		Name: HTTPAgentName, Func: r.callHTTP, Concurrency: r.opts.HTTPConcurrency * httpAgentSlots,
		Retry:   drover.RetryPolicy{MaxTries: 1},
		Breaker: drover.BreakerPolicy{Failures: math.MaxUint32},
	}
}

// resolved is one request with its task, definition and action.
type resolved struct {
	task   *drover.Task
	def    *Definition
	action *Action
	env    *evalEnv
}

func (r *Registry) task(ctx context.Context, id string) (*drover.Task, error) {
	r.mu.Lock()
	c := r.client
	r.mu.Unlock()
	if c == nil {
		return nil, errors.New("workflowdef: the registry is not attached to a client")
	}
	// A failed read is retried a few times at once: returned as a
	// transient error it would leave the step until its deadline passes.
	wait := 20 * time.Millisecond
	for try := 1; ; try++ {
		t, err := c.Task(ctx, id)
		switch {
		case err == nil:
			return t, nil
		case errors.Is(err, drover.ErrTaskNotFound):
			return nil, drover.Permanent(fmt.Errorf("task %s: %w", id, err))
		case try == 3 || ctx.Err() != nil:
			return nil, fmt.Errorf("read task %s: %w", id, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		wait *= 4
	}
}

// resolve finds the definition version the request's task was submitted
// with and the action the request is for. def is nil (and err too) when
// the task's workflow has no declarative definition.
func (r *Registry) resolve(ctx context.Context, req *drover.AgentRequest) (*resolved, error) {
	t, err := r.task(ctx, req.TaskID)
	if err != nil {
		return nil, err
	}
	if t.WorkflowVersion <= 0 {
		return &resolved{task: t}, nil
	}
	d, err := r.Definition(ctx, t.Workflow, t.WorkflowVersion)
	if errors.Is(err, store.ErrNotFound) {
		return &resolved{task: t}, nil
	}
	if err != nil {
		return nil, err
	}
	if req.StepIndex < 0 || req.StepIndex >= len(d.Steps) || (req.StepName != "" && d.Steps[req.StepIndex].Name != req.StepName) {
		return nil, drover.Permanent(fmt.Errorf("task %s: step %d (%s) is not a step of workflow %s version %d", t.ID, req.StepIndex, req.StepName, d.Name, d.Version))
	}
	s := d.Steps[req.StepIndex]
	act := &s.Do
	env := &evalEnv{taskID: t.ID, stepName: s.Name, key: req.IdempotencyKey, input: t.Input, outputs: map[string][]byte{}}
	for _, st := range t.Steps {
		if st.ProcessState == drover.Processed {
			env.outputs[st.Name] = st.Output
		}
	}
	if req.Kind == dt.KindCompensate {
		if s.Compensate == nil {
			return nil, drover.Permanent(fmt.Errorf("task %s: step %s of workflow %s version %d has no compensation", t.ID, s.Name, d.Name, d.Version))
		}
		act = s.Compensate
		env.ownSet = true
		env.own = req.StepOutput
		if req.StepIndex < len(t.Steps) {
			env.own = t.Steps[req.StepIndex].Output
		}
	}
	return &resolved{task: t, def: d, action: act, env: env}, nil
}

// permanentEval marks expression failures permanent: the data will not
// change by retrying.
func permanentEval(err error) error {
	var ee *evalError
	if errors.As(err, &ee) {
		return drover.Permanent(err)
	}
	return err
}

func (r *Registry) callHTTP(ctx context.Context, req *drover.AgentRequest) ([]byte, error) {
	res, err := r.resolve(ctx, req)
	if err != nil {
		return nil, err
	}
	if res.def == nil {
		return nil, drover.Permanent(fmt.Errorf("task %s: workflow %s version %d has no declarative definition for the http agent", res.task.ID, res.task.Workflow, res.task.WorkflowVersion))
	}
	h := res.action.HTTP
	if h == nil {
		return nil, drover.Permanent(fmt.Errorf("task %s: step %s of workflow %s version %d is not an http step", res.task.ID, req.StepName, res.def.Name, res.def.Version))
	}
	hr, err := h.request(res.env)
	if err != nil {
		return nil, permanentEval(err)
	}
	hr.IdempotencyKey = req.IdempotencyKey
	hr.Retry = res.action.Retry
	hr.Egress = res.def.EgressPolicy(r.caller.Egress())
	hr.Namespace = dt.NamespaceOf(req.TaskID)
	return r.caller.Do(ctx, hr)
}

// request renders the HTTP request of one call.
func (h *HTTPCall) request(env *evalEnv) (*httpagent.Request, error) {
	u, err := h.url.renderText(env, true)
	if err != nil {
		return nil, err
	}
	if err := h.checkRendered(env, u); err != nil {
		return nil, err
	}
	hr := &httpagent.Request{Method: h.Method, URL: u, Header: http.Header{}, Status: h.Status}
	for _, hd := range h.headers {
		v, err := hd.val.renderText(env, false)
		if err != nil {
			return nil, err
		}
		if strings.ContainsAny(v, "\r\n\x00") {
			return nil, &evalError{env.taskID, firstExpr(hd.val), fmt.Sprintf("the value of header %s would contain a line break or NUL", hd.name)}
		}
		hr.Header.Set(hd.name, v)
	}
	switch {
	case h.body != nil:
		if hr.Body, err = h.body.renderJSON(env); err != nil {
			return nil, err
		}
		if hr.Header.Get("Content-Type") == "" {
			hr.Header.Set("Content-Type", "application/json")
		}
	case h.bodyText != nil:
		s, err := h.bodyText.renderText(env, false)
		if err != nil {
			return nil, err
		}
		hr.Body = []byte(s)
		if hr.Header.Get("Content-Type") == "" {
			hr.Header.Set("Content-Type", "text/plain; charset=utf-8")
		}
	}
	return hr, nil
}

// checkRendered checks a rendered URL against its template: the scheme,
// host and port the template writes literally are the ones called (the
// escaping makes sure of it; this is the last line), and the path has no
// "." or ".." segment.
func (h *HTTPCall) checkRendered(env *evalEnv, rendered string) error {
	if h.url.whole() != nil {
		return nil // a whole URL: the egress policy checks its host
	}
	u, err := url.Parse(rendered)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return &evalError{env.taskID, firstExpr(h.url), "the rendered URL does not parse: " + err.Error()}
	}
	if o := h.origin; o != nil && (!strings.EqualFold(u.Scheme, o.Scheme) || !strings.EqualFold(u.Host, o.Host) || u.User.String() != o.User.String()) {
		origin := func(u *url.URL) string { return (&url.URL{Scheme: u.Scheme, User: u.User, Host: u.Host}).Redacted() }
		return &evalError{env.taskID, firstExpr(h.url), fmt.Sprintf("the rendered URL calls %s, not %s as the template says", origin(u), origin(o))}
	}
	if dotSegments(u) {
		return &evalError{env.taskID, firstExpr(h.url), "the rendered URL's path has a \".\" or \"..\" segment (as sent, or percent-decoded)"}
	}
	return nil
}

func firstExpr(t *strTmpl) *expr {
	if xs := t.exprs(); len(xs) > 0 {
		return xs[0]
	}
	return &expr{src: "literal"}
}

// RemoteInput returns the input a remote agent receives for a request: the
// step's (or compensation's) mapped input for a declarative workflow, the
// task input for a declarative step without a mapping, and req.Input
// unchanged for workflows not loaded from files. A mapping that names data
// the task does not have is a permanent error (drover.Permanent) naming
// the expression and the task.
func (r *Registry) RemoteInput(ctx context.Context, req *drover.AgentRequest) ([]byte, error) {
	res, err := r.resolve(ctx, req)
	if err != nil {
		return nil, err
	}
	if res.def == nil {
		return req.Input, nil
	}
	if res.action.input == nil {
		return res.task.Input, nil
	}
	out, err := res.action.input.renderJSON(res.env)
	if err != nil {
		return nil, permanentEval(err)
	}
	return out, nil
}
