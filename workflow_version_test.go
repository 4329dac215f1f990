package drover_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/store"
)

// TestWorkflowVersionAndCallbackRecorded: the workflow's Version and the
// submission's CallbackURL are stored with the task and read back by every
// read of the Client, before and after the task runs.
func TestWorkflowVersionAndCallbackRecorded(t *testing.T) {
	t.Parallel()
	bothStores(t, testWorkflowVersionAndCallback)
}

func testWorkflowVersionAndCallback(t *testing.T, d store.Driver) {
	ctx := context.Background()
	c := startClient(t, drover.Config{
		Store:     d,
		Workflows: []drover.Workflow{{Name: "wf", Version: 3, Steps: []drover.Step{{Name: "s", Agent: "A"}}}, {Name: "code", Steps: []drover.Step{{Name: "s", Agent: "A"}}}},
		Agents:    []drover.Agent{okAgent("A")},
	})
	const cb = "https://hooks.example.com/drover?tenant=7&x=%2F"
	withCB, err := c.Submit(ctx, "wf", []byte(`1`), &drover.SubmitOptions{ID: "with-cb", CallbackURL: cb})
	if err != nil {
		t.Fatal(err)
	}
	if withCB.WorkflowVersion != 3 || withCB.CallbackURL != cb {
		t.Fatalf("Submit returned version %d, callback %q; want 3, %q", withCB.WorkflowVersion, withCB.CallbackURL, cb)
	}
	many, err := c.SubmitMany(ctx, []drover.SubmitParams{
		{Workflow: "wf", Input: []byte(`2`), Options: drover.SubmitOptions{ID: "no-cb"}},
		{Workflow: "code", Input: []byte(`3`), Options: drover.SubmitOptions{ID: "code-cb", CallbackURL: "http://127.0.0.1:8080/cb"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		version int
		cb      string
	}{"with-cb": {3, cb}, "no-cb": {3, ""}, "code-cb": {0, "http://127.0.0.1:8080/cb"}}
	check := func(what string, task *drover.Task) {
		t.Helper()
		w := want[task.ID]
		if task.WorkflowVersion != w.version || task.CallbackURL != w.cb {
			t.Errorf("%s: task %s has version %d, callback %q; want %d, %q", what, task.ID, task.WorkflowVersion, task.CallbackURL, w.version, w.cb)
		}
	}
	for _, task := range many {
		check("SubmitMany", task)
	}
	for id := range want {
		task := waitTask(t, c, id)
		if task.ProcessState != drover.Processed {
			t.Errorf("task %s: %s, want Processed", id, task.ProcessState)
		}
		check("Wait", task)
		task, err := c.Task(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		check("Task", task)
	}
	list, err := c.Tasks(ctx, drover.ListParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != len(want) {
		t.Fatalf("Tasks returned %d tasks, want %d", len(list), len(want))
	}
	for _, task := range list {
		check("Tasks", task)
	}
}

// TestRunningTaskKeepsDefinitionWhenWorkflowReplaced replaces a workflow
// with AddWorkflows while a task of the old version is in its first step:
// that task runs on with the old steps and agents and keeps its version;
// tasks submitted afterwards get the new definition.
func TestRunningTaskKeepsDefinitionWhenWorkflowReplaced(t *testing.T) {
	t.Parallel()
	bothStores(t, testWorkflowReplacedMidRun)
}

func testWorkflowReplacedMidRun(t *testing.T, d store.Driver) {
	ctx := context.Background()
	var (
		mu    sync.Mutex
		calls = map[string][]string{}
	)
	started, release := make(chan struct{}), make(chan struct{})
	agent := func(name string) drover.Agent {
		return drover.Agent{Name: name, Func: func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) {
			mu.Lock()
			calls[r.TaskID] = append(calls[r.TaskID], name)
			n := len(calls[r.TaskID])
			mu.Unlock()
			if r.TaskID == "old" && n == 1 {
				close(started)
				select {
				case <-release:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			return json.Marshal(name)
		}}
	}
	v1 := drover.Workflow{Name: "wf", Version: 1, OnFailure: drover.PolicyError, FailureThreshold: 5, Steps: []drover.Step{
		{Name: "a", Agent: "A", Timeout: time.Minute}, {Name: "b", Agent: "B", Timeout: time.Minute},
	}}
	v2 := drover.Workflow{Name: "wf", Version: 2, OnFailure: drover.PolicyCompensate, FailureThreshold: 2, Steps: []drover.Step{
		{Name: "c", Agent: "C", Compensation: "A"},
	}}
	c := startClient(t, drover.Config{
		Store: d, Workflows: []drover.Workflow{v1},
		Agents: []drover.Agent{agent("A"), agent("B"), agent("C")},
	})
	old, err := c.Submit(ctx, "wf", []byte(`{"n":1}`), &drover.SubmitOptions{ID: "old"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("the first step of the old task never started")
	}
	if err := c.AddWorkflows([]drover.Workflow{v2}, nil); err != nil {
		t.Fatalf("AddWorkflows: %v", err)
	}
	if got := c.Workflows(); len(got) != 1 || got[0].Version != 2 || len(got[0].Steps) != 1 {
		t.Fatalf("Workflows() after the replacement = %+v, want wf version 2 alone", got)
	}
	fresh, err := c.Submit(ctx, "wf", []byte(`{"n":2}`), &drover.SubmitOptions{ID: "new"})
	if err != nil {
		t.Fatal(err)
	}
	if fresh.WorkflowVersion != 2 || fresh.StepCount != 1 || fresh.OnFailure != drover.PolicyCompensate || fresh.FailureThreshold != 2 {
		t.Errorf("task submitted after the replacement: version %d, %d steps, %s/%d; want 2, 1, compensate/2",
			fresh.WorkflowVersion, fresh.StepCount, fresh.OnFailure, fresh.FailureThreshold)
	}
	// Submitting the old task again (same ID and input) is still the same
	// task, not a conflict with the new definition.
	again, err := c.Submit(ctx, "wf", []byte(`{"n":1}`), &drover.SubmitOptions{ID: "old"})
	if err != nil {
		t.Fatalf("idempotent resubmission after the replacement: %v", err)
	}
	if again.WorkflowVersion != 1 || again.StepCount != 2 {
		t.Errorf("idempotent resubmission returned version %d with %d steps; want the stored task (1, 2)", again.WorkflowVersion, again.StepCount)
	}
	close(release)

	done := waitTask(t, c, old.ID)
	if done.ProcessState != drover.Processed || done.WorkflowVersion != 1 || done.OnFailure != drover.PolicyError || done.FailureThreshold != 5 {
		t.Errorf("old task: %s, version %d, policy %s/%d; want Processed, 1, error/5", done.ProcessState, done.WorkflowVersion, done.OnFailure, done.FailureThreshold)
	}
	var steps []string
	for _, s := range done.Steps {
		steps = append(steps, s.Name+":"+s.Agent+":"+string(s.ProcessState))
	}
	if got := strings.Join(steps, ","); got != "a:A:Processed,b:B:Processed" {
		t.Errorf("old task's steps: %s; want a:A:Processed,b:B:Processed", got)
	}
	nd := waitTask(t, c, fresh.ID)
	if nd.ProcessState != drover.Processed || len(nd.Steps) != 1 || nd.Steps[0].Agent != "C" || nd.Steps[0].Compensation != "A" {
		t.Errorf("new task: %s with steps %+v; want Processed with step c (agent C, compensation A)", nd.ProcessState, nd.Steps)
	}
	mu.Lock()
	defer mu.Unlock()
	if got := strings.Join(calls["old"], ","); got != "A,B" {
		t.Errorf("old task called %s, want A,B", got)
	}
	if got := strings.Join(calls["new"], ","); got != "C" {
		t.Errorf("new task called %s, want C", got)
	}
}

// TestAddWorkflowsAllOrNone: AddWorkflows checks every workflow and agent
// first and registers all or nothing.
func TestAddWorkflowsAllOrNone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newStore(t)
	keep := drover.Workflow{Name: "keep", Version: 1, Steps: []drover.Step{{Name: "s", Agent: "A"}}}
	c, err := drover.New(drover.Config{Store: d, Workflows: []drover.Workflow{keep}, Agents: []drover.Agent{okAgent("A")}})
	if err != nil {
		t.Fatal(err)
	}
	names := func() string {
		var out []string
		for _, w := range c.Workflows() {
			out = append(out, fmt.Sprintf("%s@%d", w.Name, w.Version))
		}
		return strings.Join(out, ",")
	}
	good := drover.Workflow{Name: "new", Version: 1, Steps: []drover.Step{{Name: "s", Agent: "A"}}}
	ghost := drover.Workflow{Name: "haunted", Steps: []drover.Step{{Name: "s", Agent: "ghost"}, {Name: "t", Agent: "A", Compensation: "spook"}}}
	keep2 := drover.Workflow{Name: "keep", Version: 2, Steps: []drover.Step{{Name: "s", Agent: "A"}, {Name: "t", Agent: "A"}}}
	for _, tc := range []struct {
		name      string
		ws        []drover.Workflow
		externals []string
		is        error
		mentions  []string
	}{
		{"one invalid", []drover.Workflow{good, keep2, {Name: "broken"}}, nil, drover.ErrInvalidWorkflow, []string{"broken", "no steps"}},
		{"negative version", []drover.Workflow{good, {Name: "neg", Version: -1, Steps: good.Steps}}, nil, drover.ErrInvalidWorkflow, []string{"Version -1 is negative"}},
		{"unknown agents", []drover.Workflow{keep2, good, ghost}, nil, drover.ErrUnknownAgent, []string{"ghost", "spook"}},
		{"external covers one agent only", []drover.Workflow{ghost}, []string{"ghost"}, drover.ErrUnknownAgent, []string{"spook"}},
		{"name twice", []drover.Workflow{good, good}, nil, drover.ErrInvalidWorkflow, []string{`"new" given twice`}},
		{"bad external agent name", []drover.Workflow{good}, []string{"a b"}, drover.ErrInvalidConfig, []string{`"a b"`}},
		// "A" runs in this process: a remote agent of that name would be a
		// second provider, so the new workflow is refused, not served by
		// whichever takes the request.
		{"external agent is a local one", []drover.Workflow{good}, []string{"A"}, drover.ErrInvalidConfig, []string{`agent "A" has two providers`, "Config.Agents", "AddWorkflows' external agents"}},
	} {
		err := c.AddWorkflows(tc.ws, tc.externals)
		if !errors.Is(err, tc.is) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.is)
			continue
		}
		for _, m := range tc.mentions {
			if !strings.Contains(err.Error(), m) {
				t.Errorf("%s: error %q does not mention %q", tc.name, err, m)
			}
		}
		if got := names(); got != "keep@1" {
			t.Fatalf("%s: workflows after a refused AddWorkflows: %s, want keep@1", tc.name, got)
		}
		if _, err := c.Submit(ctx, "new", nil, nil); !errors.Is(err, drover.ErrUnknownWorkflow) {
			t.Fatalf("%s: submit of a refused workflow: err = %v, want ErrUnknownWorkflow", tc.name, err)
		}
		if task, err := c.Submit(ctx, "keep", nil, nil); err != nil || task.WorkflowVersion != 1 || task.StepCount != 1 {
			t.Fatalf("%s: submit of the kept workflow: %v, %+v; want version 1 with 1 step", tc.name, err, task)
		}
	}

	if err := c.AddWorkflows([]drover.Workflow{keep2, good, ghost}, []string{"ghost", "spook"}); err != nil {
		t.Fatalf("AddWorkflows with the agents declared external: %v", err)
	}
	if got := names(); got != "haunted@0,keep@2,new@1" {
		t.Fatalf("workflows: %s, want haunted@0,keep@2,new@1", got)
	}
	// The external agents stay known, and the registered ones are defaulted.
	if err := c.AddWorkflows([]drover.Workflow{{Name: "later", Steps: []drover.Step{{Name: "s", Agent: "ghost"}}}}, nil); err != nil {
		t.Fatalf("AddWorkflows naming an agent declared external before: %v", err)
	}
	ws := c.Workflows()
	if ws[1].Name != "keep" || ws[1].FailureThreshold != 3 || ws[1].OnFailure != drover.PolicyError || ws[1].Steps[0].Timeout != 30*time.Second {
		t.Errorf("registered keep@2 without defaults: %+v", ws[1])
	}
	// Workflows returns copies.
	ws[1].Steps[0].Agent = "mutated"
	if c.Workflows()[1].Steps[0].Agent != "A" {
		t.Error("changing a step of Workflows()'s result changed the registered workflow")
	}
	task, err := c.Submit(ctx, "keep", nil, nil)
	if err != nil || task.WorkflowVersion != 2 || task.StepCount != 2 {
		t.Fatalf("submit after the replacement: %v, %+v; want version 2 with 2 steps", err, task)
	}
	// With the agents known, Start accepts the registered workflows.
	if err := c.Start(ctx); err != nil {
		t.Fatalf("Start after AddWorkflows: %v", err)
	}
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.AddWorkflows(nil, nil); err != nil {
		t.Fatalf("AddWorkflows(nil): %v", err)
	}

	// A process without the Agent role does not check agents.
	sub, err := drover.New(drover.Config{Store: d, Roles: drover.Roles{Scheduler: true}})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.AddWorkflows([]drover.Workflow{ghost}, nil); err != nil {
		t.Fatalf("AddWorkflows without the Agent role: %v", err)
	}
}

// TestCallbackURLValidation: a bad CallbackURL is refused with a message
// that names it and says what is wrong, and nothing is stored.
func TestCallbackURLValidation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newStore(t)
	c, err := drover.New(drover.Config{Store: d, Workflows: []drover.Workflow{{Name: "wf", Steps: []drover.Step{{Name: "s", Agent: "A"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	long := "https://h.example/" + strings.Repeat("p", drover.MaxCallbackURLBytes)
	for _, tc := range []struct{ url, reason string }{
		{"ftp://example.com/hook", "http or https"},
		{"/relative/path", "http or https"},
		{"example.com/hook", "http or https"},
		{"mailto:ops@example.com", "http or https"},
		{"http://", "with a host"},
		{"https:///only/path", "with a host"},
		{"http:opaque", "with a host"},
		{"http://:8080/x", "empty host"},
		{"http://host:port/x", "not a URL"},
		{"http://host/x#frag", "fragment"},
		{"http://host/x#", "fragment"},
		{"https://user:secret@host/x", "user information"},
		{"http://host/a b", "space"},
		{"http://host/a\tb", "control character"},
		{"http://host/a\x7f", "control character"},
		{"http://host/a\u0085", "control character"},
		{"http://host/\xff", "UTF-8"},
		{long[:drover.MaxCallbackURLBytes+1], fmt.Sprintf("%d bytes, the limit is %d", drover.MaxCallbackURLBytes+1, drover.MaxCallbackURLBytes)},
	} {
		_, err := c.Submit(ctx, "wf", nil, &drover.SubmitOptions{CallbackURL: tc.url})
		var ce *drover.CallbackURLError
		if !errors.Is(err, drover.ErrInvalidInput) || !errors.As(err, &ce) {
			t.Errorf("CallbackURL %q: err = %v, want ErrInvalidInput and a *CallbackURLError", tc.url, err)
			continue
		}
		if !strings.Contains(err.Error(), "CallbackURL") || !strings.Contains(ce.Reason, tc.reason) {
			t.Errorf("CallbackURL %q: error %q should name CallbackURL and say %q", tc.url, err, tc.reason)
		}
		if len(err.Error()) > 400 {
			t.Errorf("CallbackURL %q: error is %d bytes long", tc.url[:40], len(err.Error()))
		}
	}
	// In a batch, the bad one is named and nothing is stored.
	_, err = c.SubmitMany(ctx, []drover.SubmitParams{
		{Workflow: "wf", Options: drover.SubmitOptions{CallbackURL: "https://ok.example/"}},
		{Workflow: "wf", Options: drover.SubmitOptions{CallbackURL: "gopher://old.example/"}},
	})
	if !errors.Is(err, drover.ErrInvalidInput) || !strings.Contains(err.Error(), "task 1") {
		t.Errorf("SubmitMany with a bad callback: err = %v, want ErrInvalidInput naming task 1", err)
	}
	wantNothingStored(t, c)

	for _, ok := range []string{
		"", "http://localhost/", "https://hooks.example.com/a/b?c=d&e=%20f", "HTTP://Example.COM:8080/p",
		"http://[::1]:9000/cb", "http://127.0.0.1/ünïcode", long[:drover.MaxCallbackURLBytes],
	} {
		if err := drover.ValidateCallbackURL(ok); err != nil {
			t.Errorf("ValidateCallbackURL(%.60q): %v", ok, err)
			continue
		}
		task, err := c.Submit(ctx, "wf", nil, &drover.SubmitOptions{CallbackURL: ok})
		if err != nil {
			t.Errorf("Submit with CallbackURL %.60q: %v", ok, err)
			continue
		}
		got, err := c.Task(ctx, task.ID)
		if err != nil || got.CallbackURL != ok {
			t.Errorf("stored CallbackURL %.60q, err %v; want %.60q", got.CallbackURL, err, ok)
		}
	}
}

// TestAddWorkflowsConcurrentWithSubmit replaces a workflow over and over
// while several goroutines submit it (run with -race): every task is built
// from one whole definition — its version, step count and steps agree.
func TestAddWorkflowsConcurrentWithSubmit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newStore(t)
	def := func(v int) drover.Workflow {
		w := drover.Workflow{Name: "wf", Version: v}
		for i := range v {
			w.Steps = append(w.Steps, drover.Step{Name: fmt.Sprintf("s%d", i), Agent: fmt.Sprintf("agent%d", v)})
		}
		return w
	}
	c, err := drover.New(drover.Config{Store: d, Workflows: []drover.Workflow{def(1)},
		ExternalAgents: []string{"agent1", "agent2", "agent3"}})
	if err != nil {
		t.Fatal(err)
	}
	const (
		submitters = 4
		perWorker  = 25
	)
	stop := make(chan struct{})
	var (
		wg       sync.WaitGroup
		replaced int
		addErr   error
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for v := 2; ; v = v%3 + 1 {
			select {
			case <-stop:
				return
			default:
			}
			if err := c.AddWorkflows([]drover.Workflow{def(v)}, nil); err != nil {
				addErr = err
				return
			}
			replaced++
			_ = c.Workflows()
		}
	}()
	var (
		sub  sync.WaitGroup
		mu   sync.Mutex
		ids  []string
		errs []error
	)
	for w := range submitters {
		sub.Add(1)
		go func() {
			defer sub.Done()
			for i := range perWorker {
				task, err := c.Submit(ctx, "wf", []byte(fmt.Sprintf(`{"w":%d,"i":%d}`, w, i)), nil)
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					ids = append(ids, task.ID)
				}
				mu.Unlock()
			}
		}()
	}
	sub.Wait()
	close(stop)
	wg.Wait()
	if addErr != nil {
		t.Fatalf("AddWorkflows: %v", addErr)
	}
	if len(errs) > 0 {
		t.Fatalf("Submit: %v", errors.Join(errs...))
	}
	if replaced == 0 {
		t.Fatal("AddWorkflows never ran during the submissions")
	}
	versions := map[int]int{}
	for _, id := range ids {
		task, err := c.Task(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		versions[task.WorkflowVersion]++
		v := task.WorkflowVersion
		if task.StepCount != v || len(task.Steps) != v {
			t.Fatalf("task %s: version %d with step count %d and %d steps", id, v, task.StepCount, len(task.Steps))
		}
		for _, s := range task.Steps {
			if s.Agent != fmt.Sprintf("agent%d", v) {
				t.Fatalf("task %s (version %d): step %s runs %s", id, v, s.Name, s.Agent)
			}
		}
	}
	if len(ids) != submitters*perWorker {
		t.Fatalf("%d tasks submitted, want %d", len(ids), submitters*perWorker)
	}
	t.Logf("%d replacements; tasks per version: %v", replaced, versions)
}
