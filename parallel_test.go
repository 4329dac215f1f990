package drover_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/store"
)

// recorder keeps what agents saw, in order, safe for concurrent agents.
type recorder struct {
	mu    sync.Mutex
	calls []string // "agent:step:attempt", in call order
	prev  map[string]string
}

func (r *recorder) add(agent string, q *drover.AgentRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, fmt.Sprintf("%s:%s:%d", agent, q.StepName, q.Attempt))
	if r.prev == nil {
		r.prev = map[string]string{}
	}
	r.prev[q.StepName] = string(q.PreviousOutput)
}

func (r *recorder) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

func (r *recorder) previous(step string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.prev[step]
}

// until waits in an agent for cond, or for the call's deadline.
func until(ctx context.Context, cond func() bool) error {
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}

// stepState reads step name's state of task id.
func stepState(c *drover.Client, id, name string) (drover.ProcessState, drover.ProcessState) {
	tk, err := c.Task(context.Background(), id)
	if err != nil {
		return "", ""
	}
	for _, s := range tk.Steps {
		if s.Name == name {
			return s.ProcessState, s.CompensationState
		}
	}
	return "", ""
}

func stepNamed(t *testing.T, tk *drover.Task, name string) drover.TaskStep {
	t.Helper()
	for _, s := range tk.Steps {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("task %s has no step %s", tk.ID, name)
	return drover.TaskStep{}
}

// The branches of a group run at the same time (each agent waits until
// the other has started, so they finish only if both are in flight at
// once), join, and the next step reads each branch's output by name. A
// workflow may start and end with a group (eager start included).
func TestParallelBranchesRunTogetherAndJoin(t *testing.T) {
	t.Parallel()
	bothStores(t, func(t *testing.T, d store.Driver) {
		rec := &recorder{}
		started := map[string]chan struct{}{"stock": make(chan struct{}), "payment": make(chan struct{})}
		var once sync.Map
		branch := func(name, other string) drover.Agent {
			return drover.Agent{Name: name, Func: func(ctx context.Context, q *drover.AgentRequest) ([]byte, error) {
				rec.add(name, q)
				if q.TaskID == "order-1" {
					if _, done := once.LoadOrStore(name, true); !done {
						close(started[name])
					}
					select {
					case <-started[other]:
					case <-ctx.Done():
						return nil, fmt.Errorf("%s: the other branch never started: %w", name, ctx.Err())
					}
				}
				return json.Marshal(name + " ok")
			}}
		}
		plain := func(name string) drover.Agent {
			return drover.Agent{Name: name, Func: func(_ context.Context, q *drover.AgentRequest) ([]byte, error) {
				rec.add(name, q)
				return json.Marshal(name + " ok")
			}}
		}
		group := drover.Step{Name: "reserve", Parallel: []drover.Step{
			{Name: "stock", Agent: "stock", Timeout: 10 * time.Second},
			{Name: "payment", Agent: "payment", Timeout: 10 * time.Second},
		}}
		c := startClient(t, drover.Config{
			Store: d,
			Workflows: []drover.Workflow{
				{Name: "order", Steps: []drover.Step{{Name: "prepare", Agent: "prepare"}, group, {Name: "ship", Agent: "ship"}}},
				{Name: "only", Steps: []drover.Step{group}},
			},
			Agents: []drover.Agent{branch("stock", "payment"), branch("payment", "stock"), plain("prepare"), plain("ship")},
		})
		ctx := context.Background()
		if _, err := c.Submit(ctx, "order", json.RawMessage(`{"n":1}`), &drover.SubmitOptions{ID: "order-1"}); err != nil {
			t.Fatal(err)
		}
		tk := waitTask(t, c, "order-1")
		if tk.ProcessState != drover.Processed {
			t.Fatalf("order-1 is %s (%s), want Processed", tk.ProcessState, tk.LastError)
		}
		if got, want := rec.previous("ship"), `{"stock":"stock ok","payment":"payment ok"}`; got != want {
			t.Errorf("ship's previous output %s, want %s", got, want)
		}
		for _, b := range []string{"stock", "payment"} {
			if got := rec.previous(b); got != `"prepare ok"` {
				t.Errorf("branch %s's previous output %s, want prepare's", b, got)
			}
		}
		if len(tk.Steps) != 4 || tk.StepCount != 4 {
			t.Fatalf("order-1 has %d steps (StepCount %d), want 4 rows: prepare, stock, payment, ship", len(tk.Steps), tk.StepCount)
		}
		for i, want := range []struct{ name, group string }{{"prepare", ""}, {"stock", "reserve"}, {"payment", "reserve"}, {"ship", ""}} {
			if s := tk.Steps[i]; s.Name != want.name || s.Group != want.group || s.ProcessState != drover.Processed {
				t.Errorf("step %d: %s of group %q %s; want %s of group %q Processed", i, s.Name, s.Group, s.ProcessState, want.name, want.group)
			}
		}
		if stock, pay := stepNamed(t, tk, "stock"), stepNamed(t, tk, "payment"); stock.IdempotencyKey == pay.IdempotencyKey {
			t.Errorf("branches share idempotency key %s", stock.IdempotencyKey)
		}

		// A workflow that is one group: started at submission, its
		// output the branches' outputs by name.
		if _, err := c.Submit(ctx, "only", nil, &drover.SubmitOptions{ID: "only-1"}); err != nil {
			t.Fatal(err)
		}
		tk = waitTask(t, c, "only-1")
		if tk.ProcessState != drover.Processed || string(tk.Output) != `{"stock":"stock ok","payment":"payment ok"}` {
			t.Errorf("only-1: %s, output %s; want Processed with both branches' outputs", tk.ProcessState, tk.Output)
		}
		if got := rec.previous("stock"); got != "" {
			t.Errorf("a first group's branch got previous output %s, want none", got)
		}
	})
}

// A branch whose CompleteBy passes is recovered on its own: its
// FailureCount counts, it is sent again with its key, and the other
// branch goes on in flight (called once) while it does.
func TestParallelBranchTimeoutRetriedAlone(t *testing.T) {
	t.Parallel()
	bothStores(t, func(t *testing.T, d store.Driver) {
		rec := &recorder{}
		keys := &sync.Map{} // attempt → key of slow
		c := startClient(t, drover.Config{
			Store: d,
			Workflows: []drover.Workflow{{Name: "w", Steps: []drover.Step{{Name: "g", Parallel: []drover.Step{
				{Name: "slow", Agent: "slow", Timeout: 2 * time.Second},
				{Name: "steady", Agent: "steady", Timeout: 20 * time.Second},
			}}}}},
			Agents: []drover.Agent{
				{Name: "slow", Func: func(ctx context.Context, q *drover.AgentRequest) ([]byte, error) {
					rec.add("slow", q)
					keys.Store(q.Attempt, q.IdempotencyKey)
					if q.Attempt == 1 {
						<-ctx.Done() // no answer: the supervisor recovers it
						return nil, ctx.Err()
					}
					return json.Marshal("slow ok")
				}},
				{Name: "steady", Func: func(ctx context.Context, q *drover.AgentRequest) ([]byte, error) {
					rec.add("steady", q)
					// Answers only once slow's second attempt has started:
					// it stayed in flight across slow's recovery.
					if err := until(ctx, func() bool { _, ok := keys.Load(2); return ok }); err != nil {
						return nil, err
					}
					return json.Marshal("steady ok")
				}},
			},
		})
		if _, err := c.Submit(context.Background(), "w", nil, &drover.SubmitOptions{ID: "t1"}); err != nil {
			t.Fatal(err)
		}
		tk := waitTask(t, c, "t1")
		if tk.ProcessState != drover.Processed {
			t.Fatalf("t1 is %s (%s), want Processed", tk.ProcessState, tk.LastError)
		}
		slow, steady := stepNamed(t, tk, "slow"), stepNamed(t, tk, "steady")
		if slow.FailureCount != 1 || slow.Attempt != 2 || steady.FailureCount != 0 || steady.Attempt != 1 {
			t.Errorf("slow: FailureCount %d attempt %d; steady: FailureCount %d attempt %d; want 1/2 and 0/1",
				slow.FailureCount, slow.Attempt, steady.FailureCount, steady.Attempt)
		}
		k1, _ := keys.Load(1)
		k2, _ := keys.Load(2)
		if k1 != k2 || k1 != slow.IdempotencyKey {
			t.Errorf("slow's attempts used keys %v and %v, want its one key %s", k1, k2, slow.IdempotencyKey)
		}
		if calls := rec.list(); slices.Index(calls, "steady:steady:1") < 0 || slices.Contains(calls, "steady:steady:2") {
			t.Errorf("calls %v: want steady called once, attempt 1", calls)
		}
		if string(tk.Output) != `{"slow":"slow ok","steady":"steady ok"}` {
			t.Errorf("output %s", tk.Output)
		}
	})
}

// A branch failing for good abandons the others: with PolicyCompensate
// every completed branch and earlier step is undone in reverse order of
// completion (not of index), the abandoned branch first (its outcome is
// unknown), the failed one not at all; the abandoned branch's late reply
// is refused.
func TestParallelBranchFailureCompensatesInCompletionOrder(t *testing.T) {
	t.Parallel()
	bothStores(t, func(t *testing.T, d store.Driver) {
		var (
			mu      sync.Mutex
			undone  []string
			release = make(chan struct{})
			late    = make(chan struct{})
		)
		var c *drover.Client
		processed := func(id, step string) func() bool {
			return func() bool { s, _ := stepState(c, id, step); return s == drover.Processed }
		}
		undo := func(name string) drover.Agent {
			return drover.Agent{Name: "undo-" + name, Func: func(_ context.Context, q *drover.AgentRequest) ([]byte, error) {
				mu.Lock()
				undone = append(undone, q.StepName)
				mu.Unlock()
				return nil, nil
			}}
		}
		agent := func(name string, fn func(ctx context.Context, q *drover.AgentRequest) ([]byte, error)) drover.Agent {
			return drover.Agent{Name: name, Func: fn}
		}
		ok := func(context.Context, *drover.AgentRequest) ([]byte, error) { return []byte(`"ok"`), nil }
		br := func(name string) drover.Step {
			return drover.Step{Name: name, Agent: name, Compensation: "undo-" + name, Timeout: 20 * time.Second}
		}
		c = startClient(t, drover.Config{
			Store: d,
			Workflows: []drover.Workflow{{Name: "w", OnFailure: drover.PolicyCompensate, Steps: []drover.Step{
				{Name: "first", Agent: "first", Compensation: "undo-first"},
				{Name: "g", Parallel: []drover.Step{br("a"), br("b"), br("c"), br("d")}},
				{Name: "after", Agent: "first"},
			}}},
			Agents: []drover.Agent{
				agent("first", ok),
				agent("b", ok),
				// a completes after b: completion order differs from index order.
				agent("a", func(ctx context.Context, q *drover.AgentRequest) ([]byte, error) {
					return []byte(`"a"`), until(ctx, processed(q.TaskID, "b"))
				}),
				// c stays in flight until the task is over, then answers late.
				agent("c", func(ctx context.Context, q *drover.AgentRequest) ([]byte, error) {
					<-release
					defer close(late)
					return []byte(`"c"`), nil
				}),
				// d fails for good once a completed.
				agent("d", func(ctx context.Context, q *drover.AgentRequest) ([]byte, error) {
					if err := until(ctx, processed(q.TaskID, "a")); err != nil {
						return nil, err
					}
					return nil, drover.Permanent(errors.New("out of stock"))
				}),
				undo("first"), undo("a"), undo("b"), undo("c"), undo("d"),
			},
		})
		if _, err := c.Submit(context.Background(), "w", nil, &drover.SubmitOptions{ID: "t1"}); err != nil {
			t.Fatal(err)
		}
		tk := waitTask(t, c, "t1")
		if tk.ProcessState != drover.Compensated {
			t.Fatalf("t1 is %s (%s), want Compensated", tk.ProcessState, tk.LastError)
		}
		mu.Lock()
		got := slices.Clone(undone)
		mu.Unlock()
		if want := []string{"c", "a", "b", "first"}; !slices.Equal(got, want) {
			t.Errorf("compensations ran in order %v, want %v (abandoned c, then reverse completion: a, b, first)", got, want)
		}
		if c := stepNamed(t, tk, "c"); c.ProcessState != drover.Cancelled || c.CompensationState != drover.Compensated {
			t.Errorf("branch c is %s, compensation %s; want Cancelled (abandoned) and Compensated", c.ProcessState, c.CompensationState)
		}
		if d := stepNamed(t, tk, "d"); d.ProcessState != drover.Error || d.CompensationState != "" {
			t.Errorf("branch d is %s, compensation %q; want Error and not compensated", d.ProcessState, d.CompensationState)
		}
		// The history says c was abandoned, ending its first attempt, before
		// its compensation started.
		var trail []string
		for _, e := range events(t, c, "t1") {
			if e.StepIndex == stepNamed(t, tk, "c").Index {
				trail = append(trail, fmt.Sprintf("%s/%d", e.Type, e.Attempt))
			}
		}
		if want := []string{"step_started/1", "step_abandoned/1", "compensating/2", "step_compensated/2"}; !slices.Equal(trail, want) {
			t.Errorf("branch c's history %v, want %v", trail, want)
		}
		close(release)
		<-late
		waitFor(t, "c's late reply refused", func() bool {
			for _, e := range events(t, c, "t1") {
				if e.Type == drover.EventReplyDiscarded && e.StepIndex == stepNamed(t, tk, "c").Index {
					return true
				}
			}
			return false
		})
		if tk, _ := c.Task(context.Background(), "t1"); stepNamed(t, tk, "c").ProcessState != drover.Cancelled || tk.ProcessState != drover.Compensated {
			t.Errorf("the late reply changed the task: %s, c %s", tk.ProcessState, stepNamed(t, tk, "c").ProcessState)
		}
	})
}

// A branch that times out past the threshold under PolicyError fails the
// task at once: the other branch, still in flight, is abandoned and its
// late reply refused.
func TestParallelBranchTimeoutFailsTask(t *testing.T) {
	t.Parallel()
	bothStores(t, func(t *testing.T, d store.Driver) {
		release, late := make(chan struct{}), make(chan struct{})
		var fixed atomic.Bool
		c := startClient(t, drover.Config{
			Store: d,
			Workflows: []drover.Workflow{{Name: "w", FailureThreshold: 1, Steps: []drover.Step{{Name: "g", Parallel: []drover.Step{
				{Name: "hang", Agent: "hang", Timeout: 200 * time.Millisecond},
				{Name: "long", Agent: "long", Timeout: 20 * time.Second},
			}}}}},
			Agents: []drover.Agent{
				{Name: "hang", Func: func(ctx context.Context, _ *drover.AgentRequest) ([]byte, error) {
					if fixed.Load() {
						return []byte(`"fixed"`), nil
					}
					<-ctx.Done()
					return nil, ctx.Err()
				}},
				{Name: "long", Func: func(context.Context, *drover.AgentRequest) ([]byte, error) {
					if fixed.Load() {
						return []byte(`"again"`), nil
					}
					<-release
					defer close(late)
					return []byte(`"late"`), nil
				}},
			},
		})
		if _, err := c.Submit(context.Background(), "w", nil, &drover.SubmitOptions{ID: "t1"}); err != nil {
			t.Fatal(err)
		}
		tk := waitTask(t, c, "t1")
		if tk.ProcessState != drover.Error || !strings.Contains(tk.LastError, "hang") {
			t.Fatalf("t1 is %s (%q), want Error naming the branch hang", tk.ProcessState, tk.LastError)
		}
		if s := stepNamed(t, tk, "long"); s.ProcessState != drover.Cancelled || s.CompensationState != "" {
			t.Errorf("long is %s (compensation %q), want Cancelled", s.ProcessState, s.CompensationState)
		}
		close(release)
		<-late
		waitFor(t, "long's late reply refused", func() bool {
			return slices.Contains(eventTypes(events(t, c, "t1")), string(drover.EventReplyDiscarded))
		})
		if tk, _ := c.Task(context.Background(), "t1"); tk.ProcessState != drover.Error || stepNamed(t, tk, "long").ProcessState != drover.Cancelled {
			t.Errorf("the late reply changed the task: %s", tk.ProcessState)
		}
		// Fixed and resubmitted, the group runs again: both branches
		// (neither had completed), each with its own key, and joins.
		fixed.Store(true)
		if _, err := c.Resubmit(context.Background(), "t1", nil); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "t1 Processed after the resubmit", func() bool {
			tk, err := c.Task(context.Background(), "t1")
			return err == nil && tk.ProcessState == drover.Processed
		})
		if tk, _ := c.Task(context.Background(), "t1"); string(tk.Output) != `{"hang":"fixed","long":"again"}` {
			t.Errorf("output after the resubmit: %s", tk.Output)
		}
	})
}

func TestParallelGroupValidation(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		w    drover.Workflow
		want string
	}{
		{"one branch", drover.Workflow{Name: "w", Steps: []drover.Step{{Name: "g", Parallel: []drover.Step{{Name: "a", Agent: "x"}}}}},
			"group 0 (g): a group needs at least 2 branches, it has 1"},
		{"empty", drover.Workflow{Name: "w", Steps: []drover.Step{{Name: "g", Agent: "x", Parallel: []drover.Step{}}}},
			"Parallel is set but empty"},
		{"agent on group", drover.Workflow{Name: "w", Steps: []drover.Step{{Name: "g", Agent: "x", Parallel: []drover.Step{{Name: "a", Agent: "x"}, {Name: "b", Agent: "x"}}}}},
			"a group sets only Name and Parallel"},
		{"nested", drover.Workflow{Name: "w", Steps: []drover.Step{{Name: "g", Parallel: []drover.Step{{Name: "a", Agent: "x"},
			{Name: "h", Parallel: []drover.Step{{Name: "b", Agent: "x"}, {Name: "c", Agent: "x"}}}}}}},
			`a branch of group "g" cannot be a group itself`},
		{"name twice", drover.Workflow{Name: "w", Steps: []drover.Step{{Name: "a", Agent: "x"}, {Name: "g", Parallel: []drover.Step{{Name: "a", Agent: "x"}, {Name: "b", Agent: "x"}}}}},
			`step 1: name "a" is used twice`},
		{"group name twice", drover.Workflow{Name: "w", Steps: []drover.Step{{Name: "g", Agent: "x"}, {Name: "g", Parallel: []drover.Step{{Name: "a", Agent: "x"}, {Name: "b", Agent: "x"}}}}},
			`name "g" is used twice`},
		{"signal branch", drover.Workflow{Name: "w", Steps: []drover.Step{{Name: "g", Parallel: []drover.Step{{Name: "a", Agent: "x"},
			{Name: "approve", Signal: "approved", Timeout: time.Hour}}}}},
			`step 1 (approve): a branch of group "g" cannot wait for a signal`},
	}
	for _, tc := range cases {
		err := tc.w.Validate()
		var ve *drover.ValidationError
		if !errors.As(err, &ve) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want a ValidationError saying %q", tc.name, err, tc.want)
		}
	}
	ok := drover.Workflow{Name: "w", Steps: []drover.Step{{Name: "g", Parallel: []drover.Step{{Name: "a", Agent: "x"}, {Name: "b", Agent: "y"}}}, {Name: "c", Agent: "z"}}}
	if err := ok.Validate(); err != nil {
		t.Errorf("a valid group: %v", err)
	}
	flat := ok.FlatSteps()
	if len(flat) != 3 || flat[0].Group != "g" || flat[1].Name != "b" || flat[2].Group != "" {
		t.Errorf("FlatSteps: %+v", flat)
	}
}
