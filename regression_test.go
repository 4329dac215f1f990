package drover_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drover-run/drover"
)

// Regression tests for bugs found in review; each failed before its fix.

// An agent's Concurrency holds across its two intake paths: the scheduler's
// in-process fast path (Reserve) and the pull from the request queue (work
// dispatched by a scheduler in another process).
func TestAgentConcurrencyLimitAcrossIntakePaths(t *testing.T) {
	d := newStore(t)
	ctx := context.Background()
	const limit = 4
	var cur, peak atomic.Int64
	wfs := []drover.Workflow{{Name: "w", Steps: []drover.Step{{Name: "s", Agent: "w", Timeout: 30 * time.Second}}}}
	fn := func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) {
		n := cur.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(3 * time.Millisecond)
		cur.Add(-1)
		return []byte(`1`), nil
	}
	// B: scheduler only, in "another process": dispatches to the queue.
	startClient(t, drover.Config{Store: d, InstanceID: "B", Workflows: wfs, Roles: drover.Roles{Scheduler: true}, ExternalAgents: []string{"w"}, MaxInFlight: 64})
	a := startClient(t, drover.Config{Store: d, InstanceID: "A", Workflows: wfs, MaxInFlight: 64,
		Agents: []drover.Agent{{Name: "w", Concurrency: limit, Func: fn}}})
	ps := make([]drover.SubmitParams, 600)
	for i := range ps {
		ps[i] = drover.SubmitParams{Workflow: "w", Input: []byte(`{}`)}
	}
	if _, err := a.SubmitMany(ctx, ps); err != nil {
		t.Fatal(err)
	}
	waitWithin(t, 90*time.Second, "all processed", func() bool { c, _ := a.Counts(ctx); return c[drover.Processed] == len(ps) })
	t.Logf("peak concurrent calls %d, limit %d", peak.Load(), limit)
	if peak.Load() > limit {
		t.Errorf("agent ran %d calls at once, Concurrency is %d", peak.Load(), limit)
	}
}

// A task whose compensation failed part-way can only resume compensating:
// running steps forward again would leave it Processed with undone steps.
func TestResubmitAfterPartialCompensation(t *testing.T) {
	d := newStore(t)
	ctx := context.Background()
	var cFails, caFails atomic.Bool
	cFails.Store(true)
	caFails.Store(true)
	ok := func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) { return []byte(`"ok"`), nil }
	wfs := []drover.Workflow{{Name: "w", OnFailure: drover.PolicyCompensate, Steps: []drover.Step{
		{Name: "a", Agent: "a", Compensation: "ca", Timeout: 5 * time.Second},
		{Name: "b", Agent: "b", Compensation: "cb", Timeout: 5 * time.Second},
		{Name: "c", Agent: "c", Timeout: 5 * time.Second},
	}}}
	c := startClient(t, drover.Config{Store: d, Workflows: wfs, Agents: []drover.Agent{
		{Name: "a", Func: ok}, {Name: "b", Func: ok}, {Name: "cb", Func: ok},
		{Name: "ca", Func: func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) {
			if caFails.Load() {
				return nil, drover.Permanent(errors.New("ca down"))
			}
			return []byte(`"ok"`), nil
		}},
		{Name: "c", Func: func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) {
			if cFails.Load() {
				return nil, drover.Permanent(errors.New("c refused"))
			}
			return []byte(`"ok"`), nil
		}},
	}})
	tk, err := c.Submit(ctx, "w", []byte(`{}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	got := waitTask(t, c, tk.ID)
	for _, s := range got.Steps {
		t.Logf("after failure: task %s; step %s %s comp=%q", got.ProcessState, s.Name, s.ProcessState, s.CompensationState)
	}
	if got.ProcessState != drover.Error || got.Steps[1].CompensationState != drover.Compensated || got.Steps[0].CompensationState != drover.Error {
		t.Fatalf("after the failed compensation: task %s, steps %+v", got.ProcessState, got.Steps)
	}
	cFails.Store(false)
	from := 2
	if _, err := c.Resubmit(ctx, tk.ID, &drover.ResubmitOptions{FromStep: &from}); !errors.Is(err, drover.ErrNotResubmittable) {
		t.Fatalf("resubmit forward after compensation: err %v, want ErrNotResubmittable", err)
	}
	// The operator fixes the compensation and resubmits: it resumes undoing.
	caFails.Store(false)
	if _, err := c.Resubmit(ctx, tk.ID, nil); err != nil {
		t.Fatal(err)
	}
	got = waitTask(t, c, tk.ID)
	if got.ProcessState != drover.Compensated || got.Steps[0].CompensationState != drover.Compensated {
		t.Errorf("after resubmit: task %s, step a compensation %q; want Compensated", got.ProcessState, got.Steps[0].CompensationState)
	}
}

// A scheduler kept busy by a backlog and by its in-process agents still takes
// the replies of agents in other processes from the store before their
// deadlines.
func TestBusySchedulerTakesStoreReplies(t *testing.T) {
	d := newStore(t)
	ctx := context.Background()
	wfs := []drover.Workflow{
		{Name: "lw", Steps: []drover.Step{{Name: "l", Agent: "local", Timeout: 60 * time.Second}}},
		// 3s: far less than the backlog takes (so replies left waiting
		// for it would time out), with room for a loaded test machine.
		{Name: "rw", Steps: []drover.Step{{Name: "r", Agent: "remote", Timeout: 3 * time.Second}}},
	}
	// B: agent-only process running "remote"; its replies go to the store.
	startClient(t, drover.Config{Store: d, InstanceID: "B", Workflows: wfs, Roles: drover.Roles{Agent: true},
		Agents:         []drover.Agent{{Name: "remote", Func: func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) { return []byte(`"r"`), nil }}},
		ExternalAgents: []string{"local"}, PollInterval: 20 * time.Millisecond})
	sub, err := drover.New(drover.Config{Store: d, Workflows: wfs})
	if err != nil {
		t.Fatal(err)
	}
	var rids []string
	for i := 0; i < 20; i++ {
		tk, err := sub.Submit(ctx, "rw", []byte(`{}`), &drover.SubmitOptions{ID: fmt.Sprintf("remote-%02d", i)})
		if err != nil {
			t.Fatal(err)
		}
		rids = append(rids, tk.ID)
	}
	for b := 0; b < 30; b++ {
		ps := make([]drover.SubmitParams, 1000)
		for i := range ps {
			ps[i] = drover.SubmitParams{Workflow: "lw", Input: []byte(`{}`)}
		}
		if _, err := sub.SubmitMany(ctx, ps); err != nil {
			t.Fatal(err)
		}
	}
	// A: scheduler + supervisor + the in-process "local" agent.
	a := startClient(t, drover.Config{Store: d, InstanceID: "A", Workflows: wfs, PollInterval: 20 * time.Millisecond,
		Agents: []drover.Agent{{Name: "local", Concurrency: 512, Func: func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) {
			time.Sleep(2 * time.Millisecond)
			return []byte(`"l"`), nil
		}}}, ExternalAgents: []string{"remote"}})
	// Every remote task completes at its first attempt: each reply was
	// taken from the store and applied before its 3s deadline.
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, 40*time.Second)
	defer cancel()
	final := make([]*drover.Task, len(rids))
	for i, id := range rids {
		if final[i], err = a.Wait(wctx, id); err != nil {
			t.Fatalf("remote task %s not final after %s: %v", id, time.Since(start).Round(time.Millisecond), err)
		}
	}
	for i, id := range rids {
		if tk := final[i]; tk.ProcessState != drover.Processed || tk.Steps[0].Attempt != 1 {
			t.Errorf("remote task %s: %s at attempt %d, want Processed at attempt 1", id, tk.ProcessState, tk.Steps[0].Attempt)
		}
		for _, e := range events(t, a, id) {
			if e.Type == drover.EventStepTimedOut || e.Type == drover.EventReplyDiscarded {
				t.Errorf("remote task %s: %s event (its reply sat in the store while the scheduler was busy)", id, e.Type)
			}
		}
	}
	// The premise: the scheduler was busy with the backlog all along (the
	// remote tasks are final: whatever is not is the backlog's).
	active, err := a.Active(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if active == 0 {
		t.Errorf("the backlog was done before the remote tasks: the scheduler was not kept busy, the test proves nothing")
	}
	t.Logf("remote tasks done after %s, %d backlog tasks still active", time.Since(start).Round(time.Millisecond), active)
}

func TestTaskIDAndNamesCannotContainSlash(t *testing.T) {
	// "/" separates the parts of an idempotency key: task "order/1" step
	// "charge" and task "order" step "1/charge" would share one.
	t.Parallel()
	w := drover.Workflow{Name: "w", Steps: []drover.Step{{Name: "0/charge", Agent: "a"}}}
	if err := w.Validate(); !errors.Is(err, drover.ErrInvalidWorkflow) {
		t.Errorf("step name with a slash: %v, want ErrInvalidWorkflow", err)
	}
	c, err := drover.New(drover.Config{Store: newStore(t), Workflows: []drover.Workflow{{Name: "w", Steps: []drover.Step{{Name: "s", Agent: "a"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Submit(context.Background(), "w", nil, &drover.SubmitOptions{ID: "order/1"}); !errors.Is(err, drover.ErrInvalidTaskID) {
		t.Errorf("task ID with a slash: %v, want ErrInvalidTaskID", err)
	}
}

// Two live processes with one InstanceID would both act as the same
// scheduler; the second Start is refused until the first lets go.
func TestSecondClientWithSameInstanceIDIsRefused(t *testing.T) {
	t.Parallel()
	d := newStore(t)
	ctx := context.Background()
	wfs := []drover.Workflow{{Name: "w", Steps: []drover.Step{{Name: "s", Agent: "a"}}}}
	agents := []drover.Agent{{Name: "a", Func: func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) { return nil, nil }}}
	first := startClient(t, drover.Config{Store: d, InstanceID: "twin", Workflows: wfs, Agents: agents})
	second, err := drover.New(drover.Config{Store: d, InstanceID: "twin", Workflows: wfs, Agents: agents})
	if err != nil {
		t.Fatal(err)
	}
	if err := second.Start(ctx); !errors.Is(err, drover.ErrInstanceInUse) {
		t.Fatalf("twin started: %v, want ErrInstanceInUse", err)
	}
	if err := first.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	// A clean Stop releases the ID at once.
	if err := second.Start(ctx); err != nil {
		t.Fatalf("start after the first stopped: %v", err)
	}
	if err := second.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}

// A Compensated task can be resubmitted: it runs again from its first step
// as a new run, with new idempotency keys, since the remote services saw
// (and undid) the old ones.
func TestResubmitCompensatedIsNewRun(t *testing.T) {
	d := newStore(t)
	ctx := context.Background()
	var bFails atomic.Bool
	bFails.Store(true)
	var mu sync.Mutex
	keys := map[string][]string{} // agent → keys seen
	record := func(r *drover.AgentRequest) {
		mu.Lock()
		defer mu.Unlock()
		keys[r.Agent] = append(keys[r.Agent], r.IdempotencyKey)
	}
	ok := func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) {
		record(r)
		return []byte(`"ok"`), nil
	}
	wfs := []drover.Workflow{{Name: "w", OnFailure: drover.PolicyCompensate, Steps: []drover.Step{
		{Name: "a", Agent: "a", Compensation: "ca", Timeout: 5 * time.Second},
		{Name: "b", Agent: "b", Timeout: 5 * time.Second},
	}}}
	c := startClient(t, drover.Config{Store: d, Workflows: wfs, Agents: []drover.Agent{
		{Name: "a", Func: ok}, {Name: "ca", Func: ok},
		{Name: "b", Func: func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) {
			record(r)
			if bFails.Load() {
				return nil, drover.Permanent(errors.New("card declined"))
			}
			return []byte(`"charged"`), nil
		}},
	}})
	tk, err := c.Submit(ctx, "w", []byte(`{}`), &drover.SubmitOptions{ID: "order-9"})
	if err != nil {
		t.Fatal(err)
	}
	if got := waitTask(t, c, tk.ID); got.ProcessState != drover.Compensated {
		t.Fatalf("first run ended %s, want Compensated", got.ProcessState)
	}
	from := 1
	if _, err := c.Resubmit(ctx, tk.ID, &drover.ResubmitOptions{FromStep: &from}); !errors.Is(err, drover.ErrNotResubmittable) {
		t.Fatalf("resubmit a compensated task from step 1: err %v, want ErrNotResubmittable", err)
	}
	bFails.Store(false)
	re, err := c.Resubmit(ctx, tk.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if re.ProcessState != drover.Pending {
		t.Fatalf("resubmitted task is %s, want Pending", re.ProcessState)
	}
	got := waitTask(t, c, tk.ID)
	if got.ProcessState != drover.Processed || string(got.Output) != `"charged"` {
		t.Fatalf("second run: task %s output %s, want Processed \"charged\"", got.ProcessState, got.Output)
	}
	for _, s := range got.Steps {
		if s.CompensationState != "" || s.ProcessState != drover.Processed {
			t.Errorf("step %s after the second run: %s, compensation %q", s.Name, s.ProcessState, s.CompensationState)
		}
		if !strings.HasSuffix(s.IdempotencyKey, "/run-2") {
			t.Errorf("step %s key %q, want the run-2 key", s.Name, s.IdempotencyKey)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	want := map[string][]string{
		"a":  {"order-9/0/a", "order-9/0/a/run-2"},
		"ca": {"order-9/0/a/compensate"},
		"b":  {"order-9/1/b", "order-9/1/b/run-2"},
	}
	for agent, w := range want {
		if fmt.Sprint(keys[agent]) != fmt.Sprint(w) {
			t.Errorf("agent %s saw keys %v, want %v", agent, keys[agent], w)
		}
	}
	evs, err := c.Events(ctx, drover.EventQuery{TaskID: tk.ID})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range evs {
		if e.Type == drover.EventResubmitted && strings.Contains(e.Message, "run 2") {
			found = true
		}
	}
	if !found {
		t.Errorf("no resubmitted event naming run 2 in %d events", len(evs))
	}
}
