package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/flow"
	"github.com/drover-run/drover/store"
)

// The flow cases run drover's state machine (internal/flow) on the driver:
// whatever the database, the transitions must come out the same.
func flowCases() []testCase {
	return []testCase{
		{"SubmitIdempotent", testFlowSubmitIdempotent},
		{"SubmitSameIDComparesSubmissions", testFlowSubmitSameID},
		{"ClaimDispatchesFirstStep", testFlowClaimDispatch},
		{"RepliesAdvanceToProcessed", testFlowRepliesAdvance},
		{"LateReplyAfterSupervisorReset", testFlowLateReplyAfterReset},
		{"TickAppliesAndClaims", testFlowTick},
		{"TickLateReplyForClaimableTask", testFlowTickLateReplyClaimable},
		{"ReplyAfterCompleteByDiscarded", testFlowReplyAfterDeadline},
		{"StaleRepliesDiscarded", testFlowStaleReplies},
		{"PermanentFailurePolicyError", testFlowPermanentError},
		{"PermanentFailurePolicyCompensate", testFlowPermanentCompensate},
		{"CompensationPermanentFailure", testFlowCompensationFails},
		{"SupervisorThresholdError", testFlowSupervisorThresholdError},
		{"SupervisorThresholdCompensate", testFlowSupervisorThresholdCompensate},
		{"TimedOutStepCompensationRetried", testFlowTimedOutStepCompensationRetried},
		{"WaitPastThresholdThenError", testFlowWaitThenError},
		{"WaitPastThresholdThenSucceed", testFlowWaitThenSucceed},
		{"WaitThenCompensate", testFlowWaitThenCompensate},
		{"StepPolicyOverridesTask", testFlowStepPolicyOverrides},
		{"SweepNotLeaderChangesNothing", testFlowSweepNotLeader},
		{"CancelAndResubmit", testFlowCancelResubmit},
		{"ResubmitFromStep", testFlowResubmitFromStep},
		{"ResubmitResumesCompensation", testFlowResubmitCompensation},
		{"ConcurrentSchedulers", testFlowConcurrentSchedulers},
		{"ClaimRefusesTaskMissingSteps", testFlowClaimRefusesMissingSteps},
		{"ReplyRefusesTaskMissingSteps", testFlowReplyRefusesMissingSteps},
		{"ClaimFloorWhileClaimsComeBackFull", testFlowClaimFloor},
		{"ClaimWaitsForAvailableAt", testFlowClaimWaitsForAvailableAt},
		{"SubmitAndStart", testFlowSubmitAndStart},
		{"SubmitAndStartOneEventRowPerTask", testFlowSubmitAndStartEventRows},
		{"StartAfterOrderingWait", testFlowStartAfterOrderingWait},
	}
}

// testFlowClaimFloor: while claims come back full (a backlog), the next
// claim starts after the last task claimed (store.TaskClaimParams.After);
// a claim that is not full, or one a second after the floor was set,
// starts from the first claimable task again, so a task that became
// claimable before the floor waits at most that long.
func testFlowClaimFloor(t *testing.T, d store.Driver) {
	e := newEnv(t, d)
	w := orderWF()
	claimed := func(now time.Time, limit int) []string {
		t.Helper()
		reqs, _ := e.tick(now, limit)
		var ids []string
		for _, r := range reqs {
			ids = append(ids, r.TaskID)
		}
		return sorted(ids)
	}
	now := base.Add(time.Millisecond)
	for _, id := range []string{"t1", "t2", "t3"} {
		e.submit(w, id)
	}
	if got := claimed(now, 2); !slices.Equal(got, []string{"t1", "t2"}) {
		t.Fatalf("first claim = %v, want t1, t2", got)
	}
	e.submit(w, "t0") // same AvailableAt, before the floor (t2) in claim order
	var r flow.TickResult
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		var err error
		r, err = e.m.Tick(ctx, x, now, nil, 2)
		return err
	})
	e.m.Commit()
	if len(r.Requests) != 1 || r.Requests[0].TaskID != "t3" {
		t.Fatalf("claim after a full one = %v, want only t3 (it starts after t2)", r.Requests)
	}
	if !r.More {
		t.Error("a claim that started at the floor and was not full did not ask for another tick")
	}
	if got := claimed(now, 2); !slices.Equal(got, []string{"t0"}) {
		t.Fatalf("claim after one that was not full = %v, want t0 (from the start again)", got)
	}
	for _, id := range []string{"u1", "u2"} {
		e.submit(w, id)
	}
	if got := claimed(now, 2); !slices.Equal(got, []string{"u1", "u2"}) {
		t.Fatalf("claim = %v, want u1, u2", got)
	}
	e.submit(w, "t00")
	if got := claimed(now.Add(2*time.Second), 2); !slices.Equal(got, []string{"t00"}) {
		t.Fatalf("claim two seconds after the floor was set = %v, want t00 (from the start again)", got)
	}
}

// testFlowClaimWaitsForAvailableAt: a task submitted to start later (a
// delayed task: AvailableAt ahead) is not claimed before that time, while
// tasks after it are, and is claimed once its time has come.
func testFlowClaimWaitsForAvailableAt(t *testing.T, d store.Driver) {
	e := newEnv(t, d)
	w := orderWF()
	due := base.Add(time.Hour)
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		sub := w.submission("later", `{}`, base)
		sub.Task.AvailableAt = due
		_, err := flow.Submit(ctx, x, []flow.Submission{sub})
		return err
	})
	e.submit(w, "now")
	ids := func(reqs []*dt.AgentRequest) []string {
		var out []string
		for _, r := range reqs {
			out = append(out, r.TaskID)
		}
		return out
	}
	if got := ids(e.claim(base.Add(time.Second))); !slices.Equal(got, []string{"now"}) {
		t.Fatalf("claim before the delayed task's time = %v, want only now", got)
	}
	if got := ids(e.claim(due.Add(-time.Microsecond))); len(got) != 0 {
		t.Fatalf("claim a microsecond before its time = %v, want none", got)
	}
	if got := ids(e.claim(due)); !slices.Equal(got, []string{"later"}) {
		t.Fatalf("claim at its time = %v, want later", got)
	}
}

// ---- fixture ----

type wfStep struct {
	name, agent, comp string
}

type workflow struct {
	name       string
	steps      []wfStep
	policy     dt.FailurePolicy
	threshold  int
	retryDelay time.Duration
	timeout    time.Duration
	wait       dt.WaitPolicy
	// overrides sets steps' own policies, by index.
	overrides map[int]override
}

// override is a step's own failure policy.
type override struct {
	policy dt.FailurePolicy
	wait   *dt.WaitPolicy
}

// orderWF: reserve (undone by unreserve), charge (undone by refund), ship.
func orderWF() workflow {
	return workflow{
		name: "order",
		steps: []wfStep{
			{"reserve", "inventory", "unreserve"},
			{"charge", "payments", "refund"},
			{"ship", "shipping", ""},
		},
		policy: dt.PolicyError, threshold: 3, timeout: 10 * time.Second,
	}
}

func (w workflow) submission(id string, input string, now time.Time) flow.Submission {
	in := []byte(input)
	t := &dt.Task{
		ID: id, Workflow: w.name, Input: in, InputHash: flow.InputHash(w.name, in), ProcessState: dt.Pending,
		StepCount: len(w.steps), FailureThreshold: w.threshold, OnFailure: w.policy, RetryDelay: w.retryDelay,
		Wait: w.wait, AvailableAt: now, CreatedAt: now, UpdatedAt: now,
	}
	steps := make([]*dt.StepRecord, len(w.steps))
	for i, s := range w.steps {
		steps[i] = &dt.StepRecord{
			TaskID: id, Index: i, Name: s.name, Agent: s.agent, Timeout: w.timeout, Compensation: s.comp,
			ProcessState: dt.Pending, IdempotencyKey: flow.IdempotencyKey(id, i, s.name), UpdatedAt: now,
			OnFailure: w.overrides[i].policy, Wait: w.overrides[i].wait,
		}
	}
	return flow.Submission{Task: t, Steps: steps}
}

type env struct {
	t *testing.T
	d store.Driver
	m *flow.Machine
	c *flow.Counters
}

func newEnv(t *testing.T, d store.Driver) *env {
	c := &flow.Counters{}
	return &env{t: t, d: d, m: &flow.Machine{Instance: "sched-1", Counters: c}, c: c}
}

func (e *env) submit(w workflow, id string) {
	e.t.Helper()
	inTx(e.t, e.d, func(ctx context.Context, x store.Executor) error {
		_, err := flow.Submit(ctx, x, []flow.Submission{w.submission(id, `{"order":"`+id+`"}`, base)})
		return err
	})
}

func (e *env) claim(now time.Time) []*dt.AgentRequest {
	e.t.Helper()
	var reqs []*dt.AgentRequest
	inTx(e.t, e.d, func(ctx context.Context, x store.Executor) error {
		var err error
		reqs, _, _, err = e.m.Claim(ctx, x, now, 100)
		return err
	})
	e.m.Commit()
	return reqs
}

// tick runs Machine.Tick: the replies, then a claim of up to limit tasks.
func (e *env) tick(now time.Time, limit int, replies ...*dt.AgentReply) (reqs []*dt.AgentRequest, claimed int) {
	e.t.Helper()
	inTx(e.t, e.d, func(ctx context.Context, x store.Executor) error {
		r, err := e.m.Tick(ctx, x, now, replies, limit)
		if err == nil && len(r.Deferred) > 0 {
			err = fmt.Errorf("tick deferred %d replies with no other transaction open", len(r.Deferred))
		}
		reqs, claimed = r.Requests, r.Claimed
		return err
	})
	e.m.Commit()
	return reqs, claimed
}

func (e *env) apply(now time.Time, replies ...*dt.AgentReply) ([]*dt.AgentRequest, int) {
	e.t.Helper()
	var (
		reqs []*dt.AgentRequest
		rel  int
	)
	inTx(e.t, e.d, func(ctx context.Context, x store.Executor) error {
		var err error
		reqs, rel, err = e.m.ApplyReplies(ctx, x, now, replies)
		return err
	})
	e.m.Commit()
	return reqs, rel
}

// one expects exactly one request and returns it.
func (e *env) one(reqs []*dt.AgentRequest, what string) *dt.AgentRequest {
	e.t.Helper()
	if len(reqs) != 1 {
		e.t.Fatalf("%s: %d requests dispatched, want 1: %v", what, len(reqs), reqKeys(reqs))
	}
	return reqs[0]
}

func ok(r *dt.AgentRequest, out string) *dt.AgentReply {
	return &dt.AgentReply{TaskID: r.TaskID, StepIndex: r.StepIndex, Attempt: r.Attempt, Kind: r.Kind, Output: []byte(out), CreatedAt: base}
}

func failed(r *dt.AgentRequest, msg string) *dt.AgentReply {
	return &dt.AgentReply{TaskID: r.TaskID, StepIndex: r.StepIndex, Attempt: r.Attempt, Kind: r.Kind, Failed: true, Error: msg, CreatedAt: base}
}

// leader acquires the supervisor lease for holder and returns its fenced identity.
func (e *env) leader(holder string, now time.Time, ttl time.Duration) *flow.Leader {
	e.t.Helper()
	l, got := acquire(e.t, e.d, "supervisor", holder, now, ttl)
	if !got {
		e.t.Fatalf("%s could not acquire the supervisor lease (held by %s)", holder, l.Holder)
	}
	return &flow.Leader{Instance: holder, Term: l.Term, Lease: "supervisor", Counters: e.c}
}

// sweep runs one sweep and commits whatever it did, error or not.
func (e *env) sweep(sv *flow.Leader, now time.Time) (int, error) {
	e.t.Helper()
	var (
		n    int
		serr error
	)
	inTx(e.t, e.d, func(ctx context.Context, x store.Executor) error {
		n, serr = sv.Sweep(ctx, x, now, 100)
		return nil
	})
	sv.Commit()
	return n, serr
}

func (e *env) mustSweep(sv *flow.Leader, now time.Time, want int) {
	e.t.Helper()
	n, err := e.sweep(sv, now)
	if err != nil || n != want {
		e.t.Fatalf("Sweep at %s = %d, %v; want %d", now.Sub(base), n, err, want)
	}
}

func (e *env) task(id string) (*dt.Task, []*dt.StepRecord) {
	e.t.Helper()
	return getTask(e.t, e.d, id), getSteps(e.t, e.d, id)
}

// peek lists the queued requests of an agent without claiming them.
func (e *env) peek(agent string, now time.Time) []*dt.AgentRequest {
	e.t.Helper()
	var reqs []*dt.AgentRequest
	inTx(e.t, e.d, func(ctx context.Context, x store.Executor) error {
		var err error
		if reqs, err = x.RequestClaim(ctx, &store.RequestClaimParams{Agent: agent, ClaimedBy: "peek", Now: now, Limit: 1000}); err != nil {
			return err
		}
		_, err = x.RequestRelease(ctx, &store.RequestReleaseParams{ClaimedBy: "peek"})
		return err
	})
	return reqs
}

func (e *env) events(id string) []*dt.Event {
	e.t.Helper()
	return listEvents(e.t, e.d, store.EventListParams{TaskID: id})
}

// types renders events as "type[step]" with a "!" for alerts.
func types(evs []*dt.Event) string {
	var out []string
	for _, ev := range evs {
		s := string(ev.Type)
		if ev.StepIndex >= 0 {
			s += fmt.Sprintf("[%d]", ev.StepIndex)
		}
		if ev.Alert {
			s += "!"
		}
		out = append(out, s)
	}
	return strings.Join(out, " ")
}

func (e *env) wantEvents(id, want string) []*dt.Event {
	e.t.Helper()
	evs := e.events(id)
	if got := types(evs); got != want {
		e.t.Errorf("events of %s:\n got %s\nwant %s", id, got, want)
	}
	return evs
}

func (e *env) wantState(id string, task dt.ProcessState, steps ...dt.ProcessState) (*dt.Task, []*dt.StepRecord) {
	e.t.Helper()
	tk, ss := e.task(id)
	var got []string
	for _, s := range ss {
		st := string(s.ProcessState)
		if s.CompensationState != "" {
			st += "/" + string(s.CompensationState)
		}
		got = append(got, st)
	}
	var want []string
	for _, s := range steps {
		want = append(want, string(s))
	}
	if tk.ProcessState != task || strings.Join(got, " ") != strings.Join(want, " ") {
		e.t.Fatalf("task %s is %s with steps [%s]; want %s with steps [%s]", id, tk.ProcessState, strings.Join(got, " "), task, strings.Join(want, " "))
	}
	return tk, ss
}

// compState is a step state with a compensation state, as wantState prints it.
func compState(s, c dt.ProcessState) dt.ProcessState { return s + "/" + c }

func (e *env) wantUnlocked(tk *dt.Task) {
	e.t.Helper()
	if tk.LockedBy != "" || tk.CompleteBy != nil {
		e.t.Errorf("task %s still held: LockedBy %q CompleteBy %v", tk.ID, tk.LockedBy, tk.CompleteBy)
	}
}

// snapshot renders everything the store holds about the given tasks.
func (e *env) snapshot(ids []string, agents []string) string {
	e.t.Helper()
	var b strings.Builder
	for _, id := range ids {
		tk, steps := e.task(id)
		fmt.Fprintf(&b, "task %s\n", render(tk))
		for _, s := range steps {
			fmt.Fprintf(&b, "step %s\n", render(s))
		}
	}
	for _, ev := range listEvents(e.t, e.d, store.EventListParams{}) {
		fmt.Fprintf(&b, "event %s\n", render(ev))
	}
	for _, a := range agents {
		for _, r := range e.peek(a, base) {
			fmt.Fprintf(&b, "request %d %s\n", r.ID, reqKeys([]*dt.AgentRequest{r}))
		}
	}
	for _, name := range []string{"supervisor"} {
		if l, err := e.d.Reader().LeaseGet(context.Background(), &store.LeaseGetParams{Name: name}); err == nil {
			fmt.Fprintf(&b, "lease %s\n", render(l))
		}
	}
	return b.String()
}

var orderAgents = []string{"inventory", "unreserve", "payments", "refund", "shipping"}

// ---- cases ----

func testFlowSubmitIdempotent(t *testing.T, d store.Driver) {
	e := newEnv(t, d)
	w := orderWF()
	sub := w.submission("o1", `{"n":1}`, base)
	var out []*dt.Task
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		var err error
		out, err = flow.Submit(ctx, x, []flow.Submission{sub})
		return err
	})
	if len(out) != 1 || out[0].ID != "o1" {
		t.Fatalf("Submit returned %v", out)
	}
	stored := getTask(t, d, "o1")
	checkEqual(t, "submitted task", stored, sub.Task)
	steps := getSteps(t, d, "o1")
	if len(steps) != 3 {
		t.Fatalf("%d steps stored", len(steps))
	}
	for i, s := range steps {
		checkEqual(t, fmt.Sprintf("step %d", i), s, sub.Steps[i])
	}
	e.wantEvents("o1", "submitted")
	before := e.snapshot([]string{"o1"}, orderAgents)

	// Same ID, workflow and input, later: the stored task comes back.
	again := w.submission("o1", `{"n":1}`, at(time.Hour))
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		var err error
		out, err = flow.Submit(ctx, x, []flow.Submission{again, again})
		return err
	})
	if len(out) != 2 {
		t.Fatalf("Submit of two returned %d", len(out))
	}
	for _, o := range out {
		checkEqual(t, "resubmitted task returned", o, stored)
	}
	if after := e.snapshot([]string{"o1"}, orderAgents); after != before {
		t.Errorf("an identical submit changed the store:\nbefore %s\nafter  %s", before, after)
	}

	// Different input or workflow: conflict, nothing changes even if the
	// caller commits.
	other := orderWF()
	other.name = "other"
	for _, sub := range []flow.Submission{w.submission("o1", `{"n":2}`, base), other.submission("o1", `{"n":1}`, base)} {
		var err error
		inTx(t, d, func(ctx context.Context, x store.Executor) error {
			_, err = flow.Submit(ctx, x, []flow.Submission{sub})
			return nil
		})
		wantErrIs(t, err, flow.ErrTaskConflict, "conflicting submit")
	}
	// Two different submissions of one new ID in one call conflict too.
	err := d.InTx(context.Background(), func(ctx context.Context, x store.Executor) error {
		_, err := flow.Submit(ctx, x, []flow.Submission{w.submission("o2", `1`, base), w.submission("o2", `2`, base)})
		return err
	})
	wantErrIs(t, err, flow.ErrTaskConflict, "conflicting submissions in one call")
	if after := e.snapshot([]string{"o1"}, orderAgents); after != before {
		t.Errorf("a conflicting submit changed the store:\nbefore %s\nafter  %s", before, after)
	}
	if _, err := d.Reader().TaskGet(context.Background(), &store.TaskGetParams{ID: "o2"}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("o2 exists after a rolled-back conflicting submit: %v", err)
	}
}

// testFlowSubmitSameID: submitting an ID again is the same submission
// when the input is the same JSON value in other bytes (key order,
// spacing), whatever bytes the stored task's input hash was computed
// from; a different ordering key or callback URL is a conflict naming it.
func testFlowSubmitSameID(t *testing.T, d store.Driver) {
	e := newEnv(t, d)
	w := orderWF()
	submit := func(sub flow.Submission) ([]*dt.Task, error) {
		var out []*dt.Task
		var err error
		inTx(t, d, func(ctx context.Context, x store.Executor) error {
			out, err = flow.Submit(ctx, x, []flow.Submission{sub})
			return nil
		})
		return out, err
	}
	first := w.submission("o1", `{"order":"o-1","amount":5,"items":[{"sku":"a","n":1.50}]}`, base)
	first.Task.OrderingKey, first.Task.CallbackURL = "cust-1", "http://h/cb"
	if _, err := submit(first); err != nil {
		t.Fatal(err)
	}
	stored := getTask(t, d, "o1")
	// The stored hash is of the submitted bytes, as drover has always
	// stored it: the comparison does not depend on how it was computed.
	if stored.InputHash != flow.InputHash(w.name, first.Task.Input) {
		t.Fatalf("stored input hash %q", stored.InputHash)
	}
	before := e.snapshot([]string{"o1"}, orderAgents)
	same := w.submission("o1", " {\n \"items\": [ {\"n\":1.5, \"sku\":\"a\"} ],\"amount\":5, \"order\" : \"o-1\" }\n", at(time.Hour))
	same.Task.OrderingKey, same.Task.CallbackURL = "cust-1", "http://h/cb"
	out, err := submit(same)
	if err != nil {
		t.Fatalf("the same input in other bytes: %v", err)
	}
	checkEqual(t, "the same submission again", out[0], stored)
	if after := e.snapshot([]string{"o1"}, orderAgents); after != before {
		t.Errorf("an identical submit changed the store:\nbefore %s\nafter  %s", before, after)
	}

	for _, c := range []struct {
		name string
		edit func(*dt.Task)
		want string
	}{
		{"another ordering key", func(t *dt.Task) { t.OrderingKey = "cust-2" }, `ordering key: "cust-1" is stored, this submission has "cust-2"`},
		{"no ordering key", func(t *dt.Task) { t.OrderingKey = "" }, `ordering key: "cust-1" is stored, this submission has none`},
		{"another callback URL", func(t *dt.Task) { t.CallbackURL = "http://h/other" }, `callback URL: "http://h/cb" is stored, this submission has "http://h/other"`},
		{"other callback events", func(t *dt.Task) { t.CallbackEvents = dt.WebhookEventSet{"alerts", "final"} }, `callback events: final are stored, this submission has alerts,final`},
		{"another input", func(t *dt.Task) {
			t.Input = []byte(`{"order":"o-1","amount":6,"items":[{"sku":"a","n":1.5}]}`)
			t.InputHash = flow.InputHash(t.Workflow, t.Input)
		}, "the input"},
	} {
		sub := w.submission("o1", string(first.Task.Input), base)
		sub.Task.OrderingKey, sub.Task.CallbackURL = first.Task.OrderingKey, first.Task.CallbackURL
		c.edit(sub.Task)
		_, err := submit(sub)
		wantErrIs(t, err, flow.ErrTaskConflict, c.name)
		if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), `task "o1"`) {
			t.Errorf("%s: %q does not say %q", c.name, err, c.want)
		}
	}
	if after := e.snapshot([]string{"o1"}, orderAgents); after != before {
		t.Errorf("a conflicting submit changed the store:\nbefore %s\nafter  %s", before, after)
	}
	// Within one call too: equal values are one submission, another
	// ordering key is a conflict.
	a, b := w.submission("o2", `{"x":1,"y":2}`, base), w.submission("o2", `{"y":2, "x":1.0}`, base)
	var got []*dt.Task
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		var err error
		got, err = flow.Submit(ctx, x, []flow.Submission{a, b})
		return err
	})
	if len(got) != 2 || got[0] != got[1] {
		t.Fatalf("one ID twice in a call, equal inputs: %v", got)
	}
	c := w.submission("o3", `1`, base)
	c2 := w.submission("o3", `1`, base)
	c2.Task.OrderingKey = "k"
	err = d.InTx(context.Background(), func(ctx context.Context, x store.Executor) error {
		_, err := flow.Submit(ctx, x, []flow.Submission{c, c2})
		return err
	})
	wantErrIs(t, err, flow.ErrTaskConflict, "another ordering key in one call")
	if !strings.Contains(err.Error(), "ordering key") {
		t.Errorf("in one call: %q does not name the ordering key", err)
	}
}

func testFlowClaimDispatch(t *testing.T, d store.Driver) {
	e := newEnv(t, d)
	e.submit(orderWF(), "o1")
	now := at(time.Second)
	r := e.one(e.claim(now), "claim")
	deadline := now.Add(10 * time.Second)
	want := &dt.AgentRequest{
		ID: r.ID, Agent: "inventory", TaskID: "o1", Workflow: "order", StepIndex: 0, StepName: "reserve", Attempt: 1,
		Kind: dt.KindDo, IdempotencyKey: flow.IdempotencyKey("o1", 0, "reserve"), CompleteBy: deadline,
		Scheduler: "sched-1", CreatedAt: now,
	}
	checkEqual(t, "dispatched request", r, want, "ClaimedBy", "Input", "PreviousOutput", "StepOutput")
	if e.c.Dispatched.Load() != 1 {
		t.Errorf("Dispatched = %d, want 1", e.c.Dispatched.Load())
	}

	tk, steps := e.wantState("o1", dt.Processing, dt.Processing, dt.Pending, dt.Pending)
	if tk.LockedBy != "sched-1" || tk.CompleteBy == nil || !tk.CompleteBy.Equal(deadline) || tk.CurrentStep != 0 {
		t.Errorf("claimed task: LockedBy %q CompleteBy %v CurrentStep %d", tk.LockedBy, tk.CompleteBy, tk.CurrentStep)
	}
	s := steps[0]
	if s.Attempt != 1 || s.LockedBy != "sched-1" || s.CompleteBy == nil || !s.CompleteBy.Equal(deadline) ||
		s.StartedAt == nil || !s.StartedAt.Equal(now) || s.FailureCount != 0 {
		t.Errorf("dispatched step: %+v", s)
	}
	if steps[1].Attempt != 0 || steps[1].LockedBy != "" {
		t.Errorf("step 1 touched: %+v", steps[1])
	}

	queued := e.peek("inventory", now)
	if len(queued) != 1 {
		t.Fatalf("%d requests queued for inventory, want 1", len(queued))
	}
	q := queued[0]
	want.ID = q.ID
	want.Input = []byte(`{"order":"o1"}`)
	checkEqual(t, "queued request with payload", q, want, "ClaimedBy")
	evs := e.wantEvents("o1", "submitted step_started[0]")
	if len(evs) == 2 && (evs[1].Attempt != 1 || evs[1].Actor != "sched-1" || evs[1].State != dt.Processing) {
		t.Errorf("step_started event: %+v", evs[1])
	}
	if again := e.claim(at(time.Hour)); len(again) != 0 {
		t.Errorf("held task claimed again: %v", reqKeys(again))
	}
}

func testFlowRepliesAdvance(t *testing.T, d store.Driver) {
	e := newEnv(t, d)
	e.submit(orderWF(), "o1")
	r0 := e.one(e.claim(base), "claim")
	reqs, rel := e.apply(at(time.Second), ok(r0, `{"reserved":true}`))
	r1 := e.one(reqs, "after step 0")
	if rel != 0 {
		t.Errorf("released %d after step 0", rel)
	}
	if r1.StepIndex != 1 || r1.Attempt != 1 || r1.Agent != "payments" || r1.IdempotencyKey != flow.IdempotencyKey("o1", 1, "charge") ||
		!r1.CompleteBy.Equal(at(11*time.Second)) {
		t.Errorf("step 1 request: %+v", r1)
	}
	tk, steps := e.wantState("o1", dt.Processing, dt.Processed, dt.Processing, dt.Pending)
	if tk.CurrentStep != 1 || tk.LockedBy != "sched-1" || !tk.CompleteBy.Equal(at(11*time.Second)) {
		t.Errorf("task after step 0: %+v", tk)
	}
	s0 := steps[0]
	if string(s0.Output) != `{"reserved":true}` || s0.LockedBy != "" || s0.CompleteBy != nil || s0.FinishedAt == nil ||
		!s0.FinishedAt.Equal(at(time.Second)) {
		t.Errorf("step 0 after its reply: %+v", s0)
	}
	if q := e.peek("inventory", at(time.Second)); len(q) != 0 {
		t.Errorf("step 0's request still queued: %v", reqKeys(q))
	}
	q := e.peek("payments", at(time.Second))
	if len(q) != 1 || string(q[0].PreviousOutput) != `{"reserved":true}` || q[0].StepOutput != nil {
		t.Fatalf("step 1 request payload: %+v", q)
	}

	r2 := e.one(first(e.apply(at(2*time.Second), ok(r1, `{"charged":42}`))), "after step 1")
	reqs, rel = e.apply(at(3*time.Second), ok(r2, `{"tracking":"T1"}`))
	if len(reqs) != 0 || rel != 1 {
		t.Errorf("after the last step: %d requests, %d released; want 0, 1", len(reqs), rel)
	}
	tk, _ = e.wantState("o1", dt.Processed, dt.Processed, dt.Processed, dt.Processed)
	e.wantUnlocked(tk)
	if string(tk.Output) != `{"tracking":"T1"}` || tk.LastError != "" || tk.FailureCount != 0 {
		t.Errorf("finished task: output %q, LastError %q, FailureCount %d", tk.Output, tk.LastError, tk.FailureCount)
	}
	evs := e.wantEvents("o1", "submitted step_started[0] step_processed[0] step_started[1] step_processed[1] step_started[2] step_processed[2] processed")
	if last := evs[len(evs)-1]; last.State != dt.Processed || last.Alert {
		t.Errorf("processed event: %+v", last)
	}
	for _, a := range orderAgents {
		if q := e.peek(a, at(3*time.Second)); len(q) != 0 {
			t.Errorf("requests left for %s: %v", a, reqKeys(q))
		}
	}
	if e.c.RepliesApplied.Load() != 3 || e.c.LateReplies.Load() != 0 || e.c.Dispatched.Load() != 3 {
		t.Errorf("counters: applied %d late %d dispatched %d", e.c.RepliesApplied.Load(), e.c.LateReplies.Load(), e.c.Dispatched.Load())
	}
}

func first(reqs []*dt.AgentRequest, _ int) []*dt.AgentRequest { return reqs }

func testFlowLateReplyAfterReset(t *testing.T, d store.Driver) {
	e := newEnv(t, d)
	e.submit(orderWF(), "o1")
	old := e.one(e.claim(base), "claim") // CompleteBy base+10s

	// The agent is slow; the supervisor (leader) resets the step after its
	// CompleteBy, and the scheduler dispatches it again.
	sv := e.leader("sup", at(20*time.Second), time.Minute)
	e.mustSweep(sv, at(20*time.Second), 1)
	tk, steps := e.wantState("o1", dt.Pending, dt.Pending, dt.Pending, dt.Pending)
	e.wantUnlocked(tk)
	if steps[0].FailureCount != 1 || steps[0].Attempt != 1 {
		t.Errorf("step after reset: FailureCount %d Attempt %d", steps[0].FailureCount, steps[0].Attempt)
	}
	if q := e.peek("inventory", at(20*time.Second)); len(q) != 0 {
		t.Errorf("the reset step's request is still queued: %v", reqKeys(q))
	}
	cur := e.one(e.claim(at(20*time.Second)), "re-claim")
	if cur.Attempt != 2 || cur.IdempotencyKey != old.IdempotencyKey {
		t.Errorf("re-dispatch: attempt %d key %q; want attempt 2 and the same key %q", cur.Attempt, cur.IdempotencyKey, old.IdempotencyKey)
	}

	// The old attempt's answer finally arrives: it must be discarded.
	reqs, _ := e.apply(at(21*time.Second), ok(old, `"late"`))
	if len(reqs) != 0 {
		t.Errorf("a late reply dispatched %v", reqKeys(reqs))
	}
	if n := e.c.LateReplies.Load(); n != 1 {
		t.Errorf("LateReplies = %d, want 1", n)
	}
	tk, steps = e.wantState("o1", dt.Processing, dt.Processing, dt.Pending, dt.Pending)
	if steps[0].Attempt != 2 || steps[0].Output != nil || tk.LockedBy != "sched-1" || tk.CurrentStep != 0 {
		t.Errorf("after the late reply: step %+v task %+v", steps[0], tk)
	}
	evs := e.wantEvents("o1", "submitted step_started[0] step_timed_out[0] step_retry[0] step_started[0] reply_discarded[0]")
	if len(evs) == 6 {
		if d := evs[5]; d.Attempt != 1 || d.Actor != "sched-1" {
			t.Errorf("reply_discarded event: %+v", d)
		}
		if to := evs[2]; to.Actor != "sup" || to.Term != sv.Term || to.Attempt != 1 {
			t.Errorf("step_timed_out event: %+v", to)
		}
	}
	if q := e.peek("inventory", at(21*time.Second)); len(q) != 1 || q[0].Attempt != 2 {
		t.Errorf("queued after the late reply: %v, want attempt 2 only", reqKeys(q))
	}
	// The current attempt's answer applies.
	e.one(first(e.apply(at(22*time.Second), ok(cur, `"on time"`))), "after the current reply")
	_, steps = e.wantState("o1", dt.Processing, dt.Processed, dt.Processing, dt.Pending)
	if string(steps[0].Output) != `"on time"` {
		t.Errorf("step 0 output %q", steps[0].Output)
	}
}

func testFlowReplyAfterDeadline(t *testing.T, d store.Driver) {
	e := newEnv(t, d)
	e.submit(orderWF(), "o1")
	r := e.one(e.claim(base), "claim")
	reqs, _ := e.apply(r.CompleteBy.Add(time.Microsecond), ok(r, `"too late"`))
	if len(reqs) != 0 || e.c.LateReplies.Load() != 1 || e.c.RepliesApplied.Load() != 0 {
		t.Errorf("reply after CompleteBy: %d dispatched, late %d, applied %d", len(reqs), e.c.LateReplies.Load(), e.c.RepliesApplied.Load())
	}
	_, steps := e.wantState("o1", dt.Processing, dt.Processing, dt.Pending, dt.Pending)
	if steps[0].Output != nil || steps[0].Attempt != 1 {
		t.Errorf("step 0 after a late reply: %+v", steps[0])
	}
	e.wantEvents("o1", "submitted step_started[0] reply_discarded[0]")
	// The permanent-failure kind of late reply is discarded as well.
	e.apply(r.CompleteBy.Add(time.Second), failed(r, "late failure"))
	e.wantState("o1", dt.Processing, dt.Processing, dt.Pending, dt.Pending)
}

func testFlowStaleReplies(t *testing.T, d store.Driver) {
	e := newEnv(t, d)
	e.submit(orderWF(), "o1")
	r := e.one(e.claim(base), "claim")

	// Another scheduler instance does not hold the task.
	other := &flow.Machine{Instance: "sched-2", Counters: e.c}
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		_, _, err := other.ApplyReplies(ctx, x, at(time.Second), []*dt.AgentReply{ok(r, `"x"`)})
		return err
	})
	other.Commit()
	// Wrong attempt, wrong kind, no such step, no such task.
	wrongAttempt := ok(r, `"x"`)
	wrongAttempt.Attempt = 2
	wrongKind := ok(r, `"x"`)
	wrongKind.Kind = dt.KindCompensate
	noStep := ok(r, `"x"`)
	noStep.StepIndex = 9
	noTask := ok(r, `"x"`)
	noTask.TaskID = "missing"
	e.apply(at(time.Second), wrongAttempt, wrongKind, noStep, noTask)
	if n := e.c.LateReplies.Load(); n != 5 {
		t.Errorf("LateReplies = %d, want 5", n)
	}
	e.wantState("o1", dt.Processing, dt.Processing, dt.Pending, dt.Pending)
	e.wantEvents("o1", "submitted step_started[0] reply_discarded[0] reply_discarded[0] reply_discarded[0] reply_discarded[9]")

	// The right reply applies once; a duplicate of it is discarded.
	e.apply(at(2*time.Second), ok(r, `"first"`), ok(r, `"dup"`))
	_, steps := e.wantState("o1", dt.Processing, dt.Processed, dt.Processing, dt.Pending)
	if string(steps[0].Output) != `"first"` || e.c.RepliesApplied.Load() != 1 || e.c.LateReplies.Load() != 6 {
		t.Errorf("duplicate reply: output %q, applied %d, late %d", steps[0].Output, e.c.RepliesApplied.Load(), e.c.LateReplies.Load())
	}
}

func testFlowPermanentError(t *testing.T, d store.Driver) {
	e := newEnv(t, d)
	e.submit(orderWF(), "o1")
	r0 := e.one(e.claim(base), "claim")
	r1 := e.one(first(e.apply(at(time.Second), ok(r0, `"r"`))), "step 1")
	reqs, rel := e.apply(at(2*time.Second), failed(r1, "card declined"))
	if len(reqs) != 0 || rel != 1 {
		t.Errorf("after a permanent failure: %d requests, %d released", len(reqs), rel)
	}
	tk, steps := e.wantState("o1", dt.Error, dt.Processed, dt.Error, dt.Pending)
	e.wantUnlocked(tk)
	if !strings.Contains(tk.LastError, "card declined") || !strings.Contains(steps[1].LastError, "card declined") {
		t.Errorf("LastError: task %q, step %q", tk.LastError, steps[1].LastError)
	}
	evs := e.wantEvents("o1", "submitted step_started[0] step_processed[0] step_started[1] step_failed[1]! error!")
	if n := len(evs); n > 0 && (evs[n-1].State != dt.Error || !strings.Contains(evs[n-1].Message, "card declined")) {
		t.Errorf("error event: %+v", evs[n-1])
	}
	if e.c.Alerts.Load() != 2 {
		t.Errorf("Alerts = %d, want 2", e.c.Alerts.Load())
	}
	if q := e.peek("payments", at(2*time.Second)); len(q) != 0 {
		t.Errorf("failed step's request still queued: %v", reqKeys(q))
	}
	if again := e.claim(at(time.Hour)); len(again) != 0 {
		t.Errorf("an Error task was claimed: %v", reqKeys(again))
	}
}

func testFlowPermanentCompensate(t *testing.T, d store.Driver) {
	e := newEnv(t, d)
	w := workflow{
		name: "trip", policy: dt.PolicyCompensate, threshold: 3, timeout: 10 * time.Second,
		steps: []wfStep{{"flight", "air", "air-cancel"}, {"notify", "mail", ""}, {"hotel", "rooms", "rooms-cancel"}, {"car", "cars", "cars-cancel"}},
	}
	e.submit(w, "trip1")
	r := e.one(e.claim(base), "claim")
	r = e.one(first(e.apply(at(1*time.Second), ok(r, `"F"`))), "step 1")
	r = e.one(first(e.apply(at(2*time.Second), ok(r, `"N"`))), "step 2")
	r = e.one(first(e.apply(at(3*time.Second), ok(r, `"H"`))), "step 3")
	c2 := e.one(first(e.apply(at(4*time.Second), failed(r, "no cars"))), "first compensation")

	// Compensations run from the highest Processed step down, skipping
	// steps without one. The failed step (car) has a compensation but is
	// not undone: a permanent error says its call did not take effect
	// (a step that timed out is undone: testFlowSupervisorThresholdCompensate).
	if c2.StepIndex != 2 || c2.Kind != dt.KindCompensate || c2.Agent != "rooms-cancel" || c2.Attempt != 2 ||
		c2.IdempotencyKey != flow.IdempotencyKey("trip1", 2, "hotel")+"/compensate" {
		t.Errorf("first compensation request: %+v", c2)
	}
	tk, _ := e.wantState("trip1", dt.Compensating, dt.Processed, dt.Processed, compState(dt.Processed, dt.Processing), dt.Error)
	if tk.LockedBy != "sched-1" || tk.CurrentStep != 2 {
		t.Errorf("compensating task: LockedBy %q CurrentStep %d", tk.LockedBy, tk.CurrentStep)
	}
	q := e.peek("rooms-cancel", at(4*time.Second))
	if len(q) != 1 || string(q[0].StepOutput) != `"H"` || string(q[0].PreviousOutput) != `"N"` {
		t.Fatalf("compensation payload: %+v", q)
	}
	c0 := e.one(first(e.apply(at(5*time.Second), ok(c2, `"hotel cancelled"`))), "second compensation")
	if c0.StepIndex != 0 || c0.Kind != dt.KindCompensate || c0.Agent != "air-cancel" {
		t.Errorf("second compensation request: %+v", c0)
	}
	reqs, rel := e.apply(at(6*time.Second), ok(c0, `"flight cancelled"`))
	if len(reqs) != 0 || rel != 1 {
		t.Errorf("after the last compensation: %d requests, %d released", len(reqs), rel)
	}
	tk, steps := e.wantState("trip1", dt.Compensated,
		compState(dt.Processed, dt.Compensated), dt.Processed, compState(dt.Processed, dt.Compensated), dt.Error)
	e.wantUnlocked(tk)
	if string(steps[2].Output) != `"H"` {
		t.Errorf("compensation overwrote the step's output: %q", steps[2].Output)
	}
	e.wantEvents("trip1", "submitted step_started[0] step_processed[0] step_started[1] step_processed[1] step_started[2] step_processed[2] "+
		"step_started[3] step_failed[3]! compensating compensating[2] step_compensated[2] compensating[0] step_compensated[0] compensated")
}

func testFlowCompensationFails(t *testing.T, d store.Driver) {
	e := newEnv(t, d)
	w := orderWF()
	w.policy = dt.PolicyCompensate
	e.submit(w, "o1")
	r := e.one(e.claim(base), "claim")
	r = e.one(first(e.apply(at(time.Second), ok(r, `"R"`))), "step 1")
	c0 := e.one(first(e.apply(at(2*time.Second), failed(r, "declined"))), "compensation")
	if c0.StepIndex != 0 || c0.Agent != "unreserve" {
		t.Fatalf("compensation request: %+v", c0)
	}
	reqs, rel := e.apply(at(3*time.Second), failed(c0, "warehouse gone"))
	if len(reqs) != 0 || rel != 1 {
		t.Errorf("after a failed compensation: %d requests, %d released", len(reqs), rel)
	}
	tk, _ := e.wantState("o1", dt.Error, compState(dt.Processed, dt.Error), dt.Error, dt.Pending)
	e.wantUnlocked(tk)
	if !strings.Contains(tk.LastError, "warehouse gone") {
		t.Errorf("LastError %q", tk.LastError)
	}
	evs := e.wantEvents("o1", "submitted step_started[0] step_processed[0] step_started[1] step_failed[1]! compensating compensating[0] step_failed[0]! error!")
	if n := len(evs); n > 0 && evs[n-1].State != dt.Error {
		t.Errorf("final event state %s", evs[n-1].State)
	}
	if e.c.Alerts.Load() != 3 {
		t.Errorf("Alerts = %d, want 3", e.c.Alerts.Load())
	}
}

func testFlowSupervisorThresholdError(t *testing.T, d store.Driver) {
	e := newEnv(t, d)
	w := orderWF()
	w.retryDelay = time.Second
	e.submit(w, "o1")
	sv := e.leader("sup", base, time.Hour)
	key := flow.IdempotencyKey("o1", 0, "reserve")

	e.one(e.claim(base), "claim") // CompleteBy +10s
	if n, err := e.sweep(sv, at(10*time.Second)); n != 0 || err != nil {
		t.Fatalf("sweep at CompleteBy: %d %v; want nothing expired yet", n, err)
	}
	e.mustSweep(sv, at(11*time.Second), 1)
	tk, steps := e.wantState("o1", dt.Pending, dt.Pending, dt.Pending, dt.Pending)
	e.wantUnlocked(tk)
	if tk.FailureCount != 1 || steps[0].FailureCount != 1 || steps[0].LockedBy != "" || steps[0].CompleteBy != nil {
		t.Errorf("after 1st timeout: task FailureCount %d, step %+v", tk.FailureCount, steps[0])
	}
	if !tk.AvailableAt.Equal(at(12 * time.Second)) {
		t.Errorf("AvailableAt after 1st timeout = %s, want now + RetryDelay = +12s", tk.AvailableAt.Sub(base))
	}
	if e.c.SupervisorRecoveries.Load() != 1 {
		t.Errorf("Recoveries = %d", e.c.SupervisorRecoveries.Load())
	}
	if q := e.peek("inventory", at(11*time.Second)); len(q) != 0 {
		t.Errorf("requests of a recovered step: %v", reqKeys(q))
	}
	if r := e.claim(at(11 * time.Second)); len(r) != 0 {
		t.Errorf("claimed before the back-off: %v", reqKeys(r))
	}
	r := e.one(e.claim(at(12*time.Second)), "2nd dispatch") // CompleteBy +22s
	if r.Attempt != 2 || r.IdempotencyKey != key {
		t.Errorf("2nd dispatch: %+v", r)
	}

	e.mustSweep(sv, at(23*time.Second), 1)
	tk, steps = e.wantState("o1", dt.Pending, dt.Pending, dt.Pending, dt.Pending)
	if tk.FailureCount != 2 || steps[0].FailureCount != 2 || !tk.AvailableAt.Equal(at(25*time.Second)) {
		t.Errorf("after 2nd timeout: FailureCount %d/%d AvailableAt +%s; want 2/2 and +25s (doubled back-off)",
			tk.FailureCount, steps[0].FailureCount, tk.AvailableAt.Sub(base))
	}
	if r := e.claim(at(24 * time.Second)); len(r) != 0 {
		t.Errorf("claimed before the doubled back-off: %v", reqKeys(r))
	}
	r = e.one(e.claim(at(25*time.Second)), "3rd dispatch") // CompleteBy +35s
	if r.Attempt != 3 || r.IdempotencyKey != key {
		t.Errorf("3rd dispatch: %+v", r)
	}

	// At the threshold the policy applies: Error and an alert.
	e.mustSweep(sv, at(36*time.Second), 1)
	tk, steps = e.wantState("o1", dt.Error, dt.Error, dt.Pending, dt.Pending)
	e.wantUnlocked(tk)
	if tk.FailureCount != 3 || steps[0].FailureCount != 3 || tk.LastError == "" {
		t.Errorf("at the threshold: FailureCount %d/%d LastError %q", tk.FailureCount, steps[0].FailureCount, tk.LastError)
	}
	evs := e.wantEvents("o1", "submitted step_started[0] step_timed_out[0] step_retry[0] step_started[0] step_timed_out[0] step_retry[0] "+
		"step_started[0] step_timed_out[0] error!")
	for _, ev := range evs {
		if ev.Type == dt.EventStepTimedOut || ev.Type == dt.EventError || ev.Type == dt.EventStepRetry {
			if ev.Actor != "sup" || ev.Term != sv.Term {
				t.Errorf("supervisor event %s by %q term %d, want sup term %d", ev.Type, ev.Actor, ev.Term, sv.Term)
			}
		}
	}
	if e.c.SupervisorRecoveries.Load() != 2 || e.c.Alerts.Load() != 1 {
		t.Errorf("Recoveries %d Alerts %d; want 2, 1", e.c.SupervisorRecoveries.Load(), e.c.Alerts.Load())
	}
	if n, err := e.sweep(sv, at(time.Minute)); n != 0 || err != nil {
		t.Errorf("sweep after Error: %d %v", n, err)
	}
	if r := e.claim(at(time.Hour)); len(r) != 0 {
		t.Errorf("Error task claimed: %v", reqKeys(r))
	}
}

func testFlowSupervisorThresholdCompensate(t *testing.T, d store.Driver) {
	e := newEnv(t, d)
	w := orderWF()
	w.policy, w.threshold = dt.PolicyCompensate, 2
	e.submit(w, "o1")
	sv := e.leader("sup", base, time.Hour)
	r := e.one(e.claim(base), "claim")
	e.one(first(e.apply(at(time.Second), ok(r, `"R"`))), "step 1") // CompleteBy +11s

	e.mustSweep(sv, at(12*time.Second), 1)
	e.wantState("o1", dt.Pending, dt.Processed, dt.Pending, dt.Pending)
	e.one(e.claim(at(12*time.Second)), "step 1 again") // CompleteBy +22s
	e.mustSweep(sv, at(23*time.Second), 1)
	// Step 1 timed out: it may have taken effect, so it is marked for
	// compensation too, and is undone first (highest index).
	tk, _ := e.wantState("o1", dt.Compensating, dt.Processed, compState(dt.Error, dt.Pending), dt.Pending)
	e.wantUnlocked(tk)

	c := e.one(e.claim(at(23*time.Second)), "compensation of the timed-out step")
	if c.Kind != dt.KindCompensate || c.StepIndex != 1 || c.Agent != "refund" || c.Attempt != 3 {
		t.Errorf("compensation request: %+v", c)
	}
	// Then step 0, which completed, dispatched by the same transaction.
	reqs, _ := e.apply(at(24*time.Second), ok(c, `"refunded"`))
	c = e.one(reqs, "compensation of step 0")
	if c.Kind != dt.KindCompensate || c.StepIndex != 0 || c.Agent != "unreserve" || c.Attempt != 2 {
		t.Errorf("compensation request: %+v", c)
	}
	// The compensation times out too: retried below the threshold...
	e.mustSweep(sv, c.CompleteBy.Add(time.Second), 1)
	tk, steps := e.wantState("o1", dt.Compensating, compState(dt.Processed, dt.Pending), compState(dt.Error, dt.Compensated), dt.Pending)
	e.wantUnlocked(tk)
	if steps[0].FailureCount != 1 {
		t.Errorf("compensation FailureCount %d, want 1", steps[0].FailureCount)
	}
	now := c.CompleteBy.Add(time.Second)
	c = e.one(e.claim(now), "compensation again")
	if c.Kind != dt.KindCompensate || c.Attempt != 3 {
		t.Errorf("compensation retry: %+v", c)
	}
	// ...and then Error with an alert.
	e.mustSweep(sv, c.CompleteBy.Add(time.Second), 1)
	tk, _ = e.wantState("o1", dt.Error, compState(dt.Processed, dt.Error), compState(dt.Error, dt.Compensated), dt.Pending)
	e.wantUnlocked(tk)
	e.wantEvents("o1", "submitted step_started[0] step_processed[0] step_started[1] step_timed_out[1] step_retry[1] step_started[1] "+
		"step_timed_out[1] step_failed[1]! compensating compensating[1] step_compensated[1] compensating[0] step_timed_out[0] step_retry[0] compensating[0] step_timed_out[0] error!")
}

// testFlowTimedOutStepCompensationRetried: the compensation of a step that
// timed out past the threshold counts its own failures from zero, like every
// compensation: one timeout of it is retried, not the end of the task.
func testFlowTimedOutStepCompensationRetried(t *testing.T, d store.Driver) {
	e := newEnv(t, d)
	w := orderWF()
	w.policy, w.threshold = dt.PolicyCompensate, 2
	e.submit(w, "o1")
	sv := e.leader("sup", base, time.Hour)
	r := e.one(e.claim(base), "claim")
	e.one(first(e.apply(at(time.Second), ok(r, `"R"`))), "step 1") // CompleteBy +11s
	e.mustSweep(sv, at(12*time.Second), 1)
	r = e.one(e.claim(at(12*time.Second)), "step 1 again") // CompleteBy +22s
	e.mustSweep(sv, at(23*time.Second), 1)
	_, steps := e.wantState("o1", dt.Compensating, dt.Processed, compState(dt.Error, dt.Pending), dt.Pending)
	if steps[1].FailureCount != 0 || !strings.Contains(steps[1].LastError, "timed out 2 times") {
		t.Errorf("step 1 marked for compensation: FailureCount %d (want 0: its compensation counts its own), LastError %q",
			steps[1].FailureCount, steps[1].LastError)
	}
	c := e.one(e.claim(at(23*time.Second)), "compensation of the timed-out step")
	if c.Kind != dt.KindCompensate || c.StepIndex != 1 || c.Attempt != r.Attempt+1 {
		t.Fatalf("compensation request: %+v", c)
	}
	// The compensation times out once: below the threshold, it is retried.
	e.mustSweep(sv, c.CompleteBy.Add(time.Second), 1)
	tk, steps := e.wantState("o1", dt.Compensating, dt.Processed, compState(dt.Error, dt.Pending), dt.Pending)
	e.wantUnlocked(tk)
	if steps[1].FailureCount != 1 {
		t.Errorf("compensation FailureCount %d, want 1", steps[1].FailureCount)
	}
	c = e.one(e.claim(c.CompleteBy.Add(time.Second)), "compensation again")
	c = e.one(first(e.apply(c.CompleteBy.Add(-time.Second), ok(c, `"refunded"`))), "compensation of step 0")
	e.apply(c.CompleteBy.Add(-time.Second), ok(c, `"unreserved"`))
	e.wantState("o1", dt.Compensated, compState(dt.Processed, dt.Compensated), compState(dt.Error, dt.Compensated), dt.Pending)
	e.wantEvents("o1", "submitted step_started[0] step_processed[0] step_started[1] step_timed_out[1] step_retry[1] step_started[1] "+
		"step_timed_out[1] step_failed[1]! compensating compensating[1] step_timed_out[1] step_retry[1] compensating[1] step_compensated[1] "+
		"compensating[0] step_compensated[0] compensated")
}

// timeOut claims what is claimable at now (want: one request) and sweeps
// past that request's CompleteBy; it returns the request and the time of
// the sweep.
func (e *env) timeOut(sv *flow.Leader, now time.Time, what string) (*dt.AgentRequest, time.Time) {
	e.t.Helper()
	r := e.one(e.claim(now), what)
	swept := r.CompleteBy.Add(time.Second)
	e.mustSweep(sv, swept, 1)
	return r, swept
}

// testFlowWaitThenError: past the threshold a step with a WaitPolicy is not
// failed: it waits an extended period (a step_waiting alert, the task
// Pending and not claimable until then), longer each time and at most
// MaxDelay, and is tried once after each wait; after MaxWaits waits the
// failure policy applies.
func testFlowWaitThenError(t *testing.T, d store.Driver) {
	e := newEnv(t, d)
	w := orderWF()
	w.threshold, w.retryDelay = 2, time.Second
	w.wait = dt.WaitPolicy{MaxWaits: 2, Delay: time.Hour, Multiplier: 2, MaxDelay: 90 * time.Minute}
	e.submit(w, "o1")
	sv := e.leader("sup", base, 24*time.Hour)

	_, now := e.timeOut(sv, base, "1st dispatch")                 // FailureCount 1: a retry
	r, now := e.timeOut(sv, now.Add(time.Second), "2nd dispatch") // 2, the threshold: wait 1
	tk, steps := e.wantState("o1", dt.Pending, dt.Pending, dt.Pending, dt.Pending)
	e.wantUnlocked(tk)
	next := now.Add(time.Hour)
	if !tk.AvailableAt.Equal(next) || steps[0].FailureCount != 2 {
		t.Errorf("after the 1st wait began: AvailableAt +%s FailureCount %d; want +%s (Delay) and 2",
			tk.AvailableAt.Sub(base), steps[0].FailureCount, next.Sub(base))
	}
	evs := e.events("o1")
	last := evs[len(evs)-1]
	if last.Type != dt.EventStepWaiting || !last.Alert || last.StepIndex != 0 || last.Actor != "sup" || last.Term != sv.Term ||
		last.Attempt != r.Attempt || last.State != dt.Pending ||
		!strings.Contains(last.Message, "extended wait 1 of 2") || !strings.Contains(last.Message, next.Format(time.RFC3339Nano)) {
		t.Errorf("wait event: %+v; want a step_waiting alert by sup naming wait 1 of 2 and the next attempt %s", last, next.Format(time.RFC3339Nano))
	}
	if steps[0].LastError != last.Message {
		t.Errorf("step LastError %q, want the wait's message", steps[0].LastError)
	}
	if got := e.claim(next.Add(-time.Microsecond)); len(got) != 0 {
		t.Fatalf("claimed during the wait: %v", reqKeys(got))
	}
	r, now = e.timeOut(sv, next, "dispatch after the 1st wait") // 3: wait 2, 2h capped at 90m
	if r.Attempt != 3 || r.IdempotencyKey != flow.IdempotencyKey("o1", 0, "reserve") {
		t.Errorf("dispatch after the wait: %+v", r)
	}
	tk, _ = e.wantState("o1", dt.Pending, dt.Pending, dt.Pending, dt.Pending)
	next = now.Add(90 * time.Minute)
	if !tk.AvailableAt.Equal(next) {
		t.Errorf("2nd wait ends at +%s, want +%s (Delay·2 = 2h, capped by MaxDelay 90m)", tk.AvailableAt.Sub(base), next.Sub(base))
	}
	e.timeOut(sv, next, "dispatch after the 2nd wait") // 4: the waits are over: Error
	tk, _ = e.wantState("o1", dt.Error, dt.Error, dt.Pending, dt.Pending)
	e.wantUnlocked(tk)
	if tk.FailureCount != 4 || !strings.Contains(tk.LastError, "timed out 4 times (after 2 extended waits)") {
		t.Errorf("Error task: FailureCount %d LastError %q", tk.FailureCount, tk.LastError)
	}
	e.wantEvents("o1", "submitted step_started[0] step_timed_out[0] step_retry[0] step_started[0] step_timed_out[0] step_waiting[0]! "+
		"step_started[0] step_timed_out[0] step_waiting[0]! step_started[0] step_timed_out[0] error!")
	if e.c.SupervisorWaits.Load() != 2 || e.c.SupervisorRecoveries.Load() != 1 || e.c.Alerts.Load() != 3 {
		t.Errorf("Waits %d Recoveries %d Alerts %d; want 2, 1, 3", e.c.SupervisorWaits.Load(), e.c.SupervisorRecoveries.Load(), e.c.Alerts.Load())
	}
}

// testFlowWaitThenSucceed: the attempt after a wait can succeed; the task
// goes on as usual.
func testFlowWaitThenSucceed(t *testing.T, d store.Driver) {
	e := newEnv(t, d)
	w := orderWF()
	w.threshold = 1
	w.wait = dt.WaitPolicy{MaxWaits: 3, Delay: 10 * time.Minute, Multiplier: 1, MaxDelay: 10 * time.Minute}
	e.submit(w, "o1")
	sv := e.leader("sup", base, 24*time.Hour)
	_, now := e.timeOut(sv, base, "1st dispatch") // threshold 1: wait 1 at once
	e.wantState("o1", dt.Pending, dt.Pending, dt.Pending, dt.Pending)
	r := e.one(e.claim(now.Add(10*time.Minute)), "after the wait")
	r = e.one(first(e.apply(r.CompleteBy, ok(r, `"R"`))), "step 1")
	r = e.one(first(e.apply(r.CompleteBy, ok(r, `"C"`))), "step 2")
	e.apply(r.CompleteBy, ok(r, `"S"`))
	tk, _ := e.wantState("o1", dt.Processed, dt.Processed, dt.Processed, dt.Processed)
	if tk.FailureCount != 1 {
		t.Errorf("FailureCount %d, want 1", tk.FailureCount)
	}
	e.wantEvents("o1", "submitted step_started[0] step_timed_out[0] step_waiting[0]! step_started[0] step_processed[0] "+
		"step_started[1] step_processed[1] step_started[2] step_processed[2] processed")
}

// testFlowWaitThenCompensate: after its waits the step fails for good and
// the task compensates (the policy after the waits is OnFailure); the
// compensation of the timed-out step waits too before it fails.
func testFlowWaitThenCompensate(t *testing.T, d store.Driver) {
	e := newEnv(t, d)
	w := orderWF()
	w.policy, w.threshold = dt.PolicyCompensate, 1
	w.wait = dt.WaitPolicy{MaxWaits: 1, Delay: time.Hour, Multiplier: 2, MaxDelay: time.Hour}
	e.submit(w, "o1")
	sv := e.leader("sup", base, 24*time.Hour)
	r := e.one(e.claim(base), "claim")
	e.one(first(e.apply(at(time.Second), ok(r, `"R"`))), "step 1")
	e.mustSweep(sv, at(12*time.Second), 1) // threshold 1: wait 1
	e.wantState("o1", dt.Pending, dt.Processed, dt.Pending, dt.Pending)
	_, now := e.timeOut(sv, at(12*time.Second).Add(time.Hour), "step 1 after the wait") // the waits are over: compensate
	tk, _ := e.wantState("o1", dt.Compensating, dt.Processed, compState(dt.Error, dt.Pending), dt.Pending)
	if !strings.Contains(tk.LastError, "after 1 extended waits") {
		t.Errorf("LastError %q", tk.LastError)
	}
	// The compensation of step 1 times out: threshold 1, so it waits too.
	c, now := e.timeOut(sv, now, "compensation of step 1")
	if c.Kind != dt.KindCompensate || c.StepIndex != 1 {
		t.Fatalf("compensation request: %+v", c)
	}
	tk, _ = e.wantState("o1", dt.Compensating, dt.Processed, compState(dt.Error, dt.Pending), dt.Pending)
	if !tk.AvailableAt.Equal(now.Add(time.Hour)) {
		t.Errorf("compensation waits until +%s, want +%s", tk.AvailableAt.Sub(base), now.Add(time.Hour).Sub(base))
	}
	if got := e.claim(now.Add(time.Minute)); len(got) != 0 {
		t.Fatalf("compensation claimed during its wait: %v", reqKeys(got))
	}
	e.timeOut(sv, now.Add(time.Hour), "compensation after its wait")
	tk, _ = e.wantState("o1", dt.Error, dt.Processed, compState(dt.Error, dt.Error), dt.Pending)
	e.wantUnlocked(tk)
	e.wantEvents("o1", "submitted step_started[0] step_processed[0] step_started[1] step_timed_out[1] step_waiting[1]! "+
		"step_started[1] step_timed_out[1] step_failed[1]! compensating compensating[1] step_timed_out[1] step_waiting[1]! "+
		"compensating[1] step_timed_out[1] error!")
}

// testFlowStepPolicyOverrides: a step's own OnFailure and Wait apply to its
// failures instead of the task's; the other steps keep the task's.
func testFlowStepPolicyOverrides(t *testing.T, d store.Driver) {
	e := newEnv(t, d)
	sv := e.leader("sup", base, 24*time.Hour)
	w := orderWF()
	w.threshold = 1
	w.wait = dt.WaitPolicy{MaxWaits: 5, Delay: time.Hour, Multiplier: 2, MaxDelay: time.Hour}
	// Step 1 compensates (the task's policy is error) and does not wait.
	w.overrides = map[int]override{1: {policy: dt.PolicyCompensate, wait: &dt.WaitPolicy{}}}
	e.submit(w, "timeout")
	r := e.one(e.claim(base), "claim")
	e.one(first(e.apply(at(time.Second), ok(r, `"R"`))), "step 1")
	e.mustSweep(sv, at(12*time.Second), 1)
	e.wantState("timeout", dt.Compensating, dt.Processed, compState(dt.Error, dt.Pending), dt.Pending)
	_, steps := e.task("timeout")
	if steps[1].OnFailure != dt.PolicyCompensate || steps[1].Wait == nil || steps[1].Wait.MaxWaits != 0 ||
		steps[0].OnFailure != "" || steps[0].Wait != nil {
		t.Errorf("stored step policies: step 0 %q %v, step 1 %q %v", steps[0].OnFailure, steps[0].Wait, steps[1].OnFailure, steps[1].Wait)
	}
	c := e.one(e.claim(at(12*time.Second)), "compensation of step 1")
	c = e.one(first(e.apply(at(13*time.Second), ok(c, `"refunded"`))), "compensation of step 0")
	e.apply(at(14*time.Second), ok(c, `"unreserved"`))
	e.wantState("timeout", dt.Compensated, compState(dt.Processed, dt.Compensated), compState(dt.Error, dt.Compensated), dt.Pending)

	// A permanent error of step 1 compensates too.
	e.submit(w, "declined")
	r = e.one(e.claim(at(time.Minute)), "claim")
	r = e.one(first(e.apply(at(time.Minute), ok(r, `"R"`))), "step 1")
	c = e.one(first(e.apply(at(time.Minute), failed(r, "declined"))), "compensation of step 0")
	if c.Kind != dt.KindCompensate || c.StepIndex != 0 {
		t.Errorf("after step 1's permanent error: %+v, want the compensation of step 0", c)
	}
	e.apply(at(time.Minute), ok(c, `"unreserved"`))
	e.wantState("declined", dt.Compensated, compState(dt.Processed, dt.Compensated), dt.Error, dt.Pending)

	// Step 2 keeps the task's policy: it waits, and a permanent error of
	// it is Error, not compensated.
	w.overrides = map[int]override{2: {wait: &dt.WaitPolicy{MaxWaits: 1, Delay: 2 * time.Hour, Multiplier: 1, MaxDelay: 2 * time.Hour}}}
	e.submit(w, "own-wait")
	r = e.one(e.claim(at(time.Minute)), "claim")
	r = e.one(first(e.apply(at(time.Minute), ok(r, `"R"`))), "step 1")
	r = e.one(first(e.apply(at(time.Minute), ok(r, `"C"`))), "step 2")
	e.mustSweep(sv, r.CompleteBy.Add(time.Second), 1)
	tk, _ := e.wantState("own-wait", dt.Pending, dt.Processed, dt.Processed, dt.Pending)
	if want := r.CompleteBy.Add(time.Second + 2*time.Hour); !tk.AvailableAt.Equal(want) {
		t.Errorf("step 2 waits until +%s, want +%s (its own Delay)", tk.AvailableAt.Sub(base), want.Sub(base))
	}
	r = e.one(e.claim(tk.AvailableAt), "step 2 after its wait")
	e.apply(r.CompleteBy, failed(r, "gone"))
	e.wantState("own-wait", dt.Error, dt.Processed, dt.Processed, dt.Error)
}

func testFlowSweepNotLeader(t *testing.T, d store.Driver) {
	e := newEnv(t, d)
	e.submit(orderWF(), "o1")
	e.one(e.claim(base), "claim") // CompleteBy +10s
	now := at(time.Minute)
	before := e.snapshot([]string{"o1"}, orderAgents)
	check := func(what string, sv *flow.Leader, now time.Time) {
		t.Helper()
		n, err := e.sweep(sv, now)
		if !errors.Is(err, flow.ErrNotLeader) || n != 0 {
			t.Errorf("%s: Sweep = %d, %v; want 0, ErrNotLeader", what, n, err)
		}
		if after := e.snapshot([]string{"o1"}, orderAgents); after != before {
			t.Errorf("%s: the store changed:\nbefore %s\nafter  %s", what, before, after)
		}
	}
	check("no lease at all", &flow.Leader{Instance: "A", Term: 1, Lease: "supervisor"}, now)

	a := e.leader("A", now, 10*time.Second) // A leads in term 1 until +70s
	before = e.snapshot([]string{"o1"}, orderAgents)
	check("another instance", &flow.Leader{Instance: "B", Term: a.Term, Lease: "supervisor"}, now)
	check("the holder with a wrong term", &flow.Leader{Instance: "A", Term: a.Term + 1, Lease: "supervisor"}, now)
	check("the holder once its lease expired", a, at(70*time.Second))

	b := e.leader("B", at(71*time.Second), 10*time.Second)
	if b.Term <= a.Term {
		t.Fatalf("B's term %d not above A's %d", b.Term, a.Term)
	}
	before = e.snapshot([]string{"o1"}, orderAgents)
	check("the deposed leader with its old term", a, at(72*time.Second))
	check("the deposed leader claiming the new term", &flow.Leader{Instance: "A", Term: b.Term, Lease: "supervisor"}, at(72*time.Second))
	if err := d.InTx(context.Background(), func(ctx context.Context, x store.Executor) error {
		return a.CheckLeader(ctx, x, at(72*time.Second))
	}); !errors.Is(err, flow.ErrNotLeader) {
		t.Errorf("CheckLeader of the deposed leader = %v", err)
	}
	// The real leader acts.
	e.mustSweep(b, at(72*time.Second), 1)
	evs := e.events("o1")
	for _, ev := range evs {
		if ev.Type == dt.EventStepTimedOut && (ev.Actor != "B" || ev.Term != b.Term) {
			t.Errorf("timed out event by %q term %d, want B term %d", ev.Actor, ev.Term, b.Term)
		}
	}
}

func testFlowCancelResubmit(t *testing.T, d store.Driver) {
	e := newEnv(t, d)
	e.submit(orderWF(), "o1")
	r0 := e.one(e.claim(base), "claim")
	r1 := e.one(first(e.apply(at(time.Second), ok(r0, `"R"`))), "step 1")

	var (
		tk  *dt.Task
		err error
	)
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		tk, err = flow.Cancel(ctx, x, "o1", "operator", "customer changed their mind", at(2*time.Second))
		return err
	})
	if tk.ProcessState != dt.Cancelled {
		t.Errorf("Cancel returned %s", tk.ProcessState)
	}
	tk, steps := e.wantState("o1", dt.Cancelled, dt.Processed, dt.Cancelled, dt.Cancelled)
	e.wantUnlocked(tk)
	if steps[1].LockedBy != "" || steps[1].CompleteBy != nil {
		t.Errorf("cancelled step still held: %+v", steps[1])
	}
	if q := e.peek("payments", at(2*time.Second)); len(q) != 0 {
		t.Errorf("cancelled step's request still queued: %v", reqKeys(q))
	}
	evs := e.events("o1")
	if last := evs[len(evs)-1]; last.Type != dt.EventCancelled || last.Actor != "operator" || last.Message != "customer changed their mind" || last.State != dt.Cancelled {
		t.Errorf("cancelled event: %+v", last)
	}
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		_, err := flow.Cancel(ctx, x, "o1", "operator", "again", at(3*time.Second))
		wantErrIs(t, err, flow.ErrAlreadyFinal, "Cancel of a Cancelled task")
		_, err = flow.Cancel(ctx, x, "missing", "operator", "", at(3*time.Second))
		wantErrIs(t, err, store.ErrNotFound, "Cancel of a missing task")
		_, err = flow.Resubmit(ctx, x, "missing", "operator", -1, at(3*time.Second))
		wantErrIs(t, err, store.ErrNotFound, "Resubmit of a missing task")
		return nil
	})

	// The call in flight answers after the cancel: discarded.
	e.apply(at(3*time.Second), ok(r1, `"charged anyway"`))
	if e.c.LateReplies.Load() != 1 {
		t.Errorf("LateReplies = %d", e.c.LateReplies.Load())
	}
	e.wantState("o1", dt.Cancelled, dt.Processed, dt.Cancelled, dt.Cancelled)

	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		tk, err = flow.Resubmit(ctx, x, "o1", "ops", -1, at(4*time.Second))
		return err
	})
	tk, steps = e.wantState("o1", dt.Pending, dt.Processed, dt.Pending, dt.Pending)
	e.wantUnlocked(tk)
	if !tk.AvailableAt.Equal(at(4*time.Second)) || tk.FailureCount != 0 || tk.LastError != "" {
		t.Errorf("resubmitted task: %+v", tk)
	}
	for i, s := range steps {
		if want := flow.IdempotencyKey("o1", i, orderWF().steps[i].name); s.IdempotencyKey != want {
			t.Errorf("step %d key %q after resubmit, want %q", i, s.IdempotencyKey, want)
		}
	}
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		_, err := flow.Resubmit(ctx, x, "o1", "ops", -1, at(4*time.Second))
		wantErrIs(t, err, flow.ErrNotResubmittable, "Resubmit of a Pending task")
		return nil
	})
	r1b := e.one(e.claim(at(4*time.Second)), "after resubmit")
	if r1b.StepIndex != 1 || r1b.Attempt != 2 || r1b.IdempotencyKey != r1.IdempotencyKey {
		t.Errorf("resubmitted dispatch: step %d attempt %d key %q; want step 1 attempt 2 key %q", r1b.StepIndex, r1b.Attempt, r1b.IdempotencyKey, r1.IdempotencyKey)
	}
	r2 := e.one(first(e.apply(at(5*time.Second), ok(r1b, `"C"`))), "step 2")
	e.apply(at(6*time.Second), ok(r2, `"S"`))
	tk, _ = e.wantState("o1", dt.Processed, dt.Processed, dt.Processed, dt.Processed)
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		_, err := flow.Resubmit(ctx, x, "o1", "ops", -1, at(7*time.Second))
		wantErrIs(t, err, flow.ErrNotResubmittable, "Resubmit of a Processed task")
		_, err = flow.Cancel(ctx, x, "o1", "ops", "", at(7*time.Second))
		wantErrIs(t, err, flow.ErrAlreadyFinal, "Cancel of a Processed task")
		return nil
	})
	e.wantEvents("o1", "submitted step_started[0] step_processed[0] step_started[1] cancelled reply_discarded[1] resubmitted "+
		"step_started[1] step_processed[1] step_started[2] step_processed[2] processed")
}

func testFlowResubmitFromStep(t *testing.T, d store.Driver) {
	e := newEnv(t, d)
	e.submit(orderWF(), "o1")
	r0 := e.one(e.claim(base), "claim")
	r1 := e.one(first(e.apply(at(time.Second), ok(r0, `"R"`))), "step 1")
	e.apply(at(2*time.Second), failed(r1, "declined"))
	e.wantState("o1", dt.Error, dt.Processed, dt.Error, dt.Pending)

	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		_, err := flow.Resubmit(ctx, x, "o1", "ops", 3, at(3*time.Second))
		wantErrIs(t, err, flow.ErrBadStep, "Resubmit from a step that does not exist")
		return nil
	})
	e.wantState("o1", dt.Error, dt.Processed, dt.Error, dt.Pending)

	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		_, err := flow.Resubmit(ctx, x, "o1", "ops", 0, at(3*time.Second))
		return err
	})
	tk, steps := e.wantState("o1", dt.Pending, dt.Pending, dt.Pending, dt.Pending)
	if tk.LastError != "" || steps[1].LastError != "" || steps[0].FinishedAt != nil {
		t.Errorf("resubmit from step 0 kept old results: task %q step1 %q step0 finished %v", tk.LastError, steps[1].LastError, steps[0].FinishedAt)
	}
	evs := e.events("o1")
	if last := evs[len(evs)-1]; last.Type != dt.EventResubmitted || last.StepIndex != 0 || last.Actor != "ops" {
		t.Errorf("resubmitted event: %+v", last)
	}
	a := e.one(e.claim(at(3*time.Second)), "step 0 again")
	if a.StepIndex != 0 || a.Attempt != 2 || a.IdempotencyKey != r0.IdempotencyKey {
		t.Errorf("step 0 redo: %+v", a)
	}
	b := e.one(first(e.apply(at(4*time.Second), ok(a, `"R2"`))), "step 1 again")
	if b.StepIndex != 1 || b.Attempt != 2 || b.IdempotencyKey != r1.IdempotencyKey {
		t.Errorf("step 1 redo: %+v", b)
	}
	c := e.one(first(e.apply(at(5*time.Second), ok(b, `"C"`))), "step 2")
	e.apply(at(6*time.Second), ok(c, `"S"`))
	e.wantState("o1", dt.Processed, dt.Processed, dt.Processed, dt.Processed)
}

func testFlowResubmitCompensation(t *testing.T, d store.Driver) {
	e := newEnv(t, d)
	w := orderWF()
	w.policy = dt.PolicyCompensate
	e.submit(w, "o1")
	r := e.one(e.claim(base), "claim")
	r = e.one(first(e.apply(at(time.Second), ok(r, `"R"`))), "step 1")
	r = e.one(first(e.apply(at(2*time.Second), ok(r, `"C"`))), "step 2")
	c1 := e.one(first(e.apply(at(3*time.Second), failed(r, "no truck"))), "refund")
	e.apply(at(4*time.Second), failed(c1, "bank down"))
	e.wantState("o1", dt.Error, dt.Processed, compState(dt.Processed, dt.Error), dt.Error)

	var tk *dt.Task
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		var err error
		tk, err = flow.Resubmit(ctx, x, "o1", "ops", -1, at(5*time.Second))
		return err
	})
	tk, _ = e.wantState("o1", dt.Compensating, dt.Processed, compState(dt.Processed, dt.Pending), dt.Error)
	e.wantUnlocked(tk)
	c1b := e.one(e.claim(at(5*time.Second)), "refund again")
	if c1b.StepIndex != 1 || c1b.Kind != dt.KindCompensate || c1b.Agent != "refund" || c1b.Attempt != c1.Attempt+1 ||
		c1b.IdempotencyKey != c1.IdempotencyKey {
		t.Errorf("resumed compensation: %+v (first was %+v)", c1b, c1)
	}
	c0 := e.one(first(e.apply(at(6*time.Second), ok(c1b, `"refunded"`))), "unreserve")
	if c0.StepIndex != 0 || c0.Agent != "unreserve" {
		t.Errorf("next compensation: %+v", c0)
	}
	e.apply(at(7*time.Second), ok(c0, `"unreserved"`))
	tk, _ = e.wantState("o1", dt.Compensated, compState(dt.Processed, dt.Compensated), compState(dt.Processed, dt.Compensated), dt.Error)
	e.wantUnlocked(tk)
}

func testFlowConcurrentSchedulers(t *testing.T, d store.Driver) {
	const n = 200
	w := orderWF()
	var subs []flow.Submission
	for i := range n {
		subs = append(subs, w.submission(fmt.Sprintf("o%03d", i), `{}`, base))
	}
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		_, err := flow.Submit(ctx, x, subs)
		return err
	})
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		reqs []*dt.AgentRequest
		errs []error
	)
	for i := range 4 {
		m := &flow.Machine{Instance: fmt.Sprintf("sched-%d", i)}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				var got []*dt.AgentRequest
				err := d.InTx(context.Background(), func(ctx context.Context, x store.Executor) error {
					var err error
					got, _, _, err = m.Claim(ctx, x, base, 7)
					return err
				})
				mu.Lock()
				reqs = append(reqs, got...)
				if err != nil {
					errs = append(errs, err)
				}
				mu.Unlock()
				if err != nil || len(got) == 0 {
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for _, r := range reqs {
		if prev, dup := seen[r.TaskID]; dup {
			t.Errorf("task %s dispatched by %s and %s", r.TaskID, prev, r.Scheduler)
		}
		seen[r.TaskID] = r.Scheduler
	}
	if len(seen) != n {
		t.Errorf("%d tasks dispatched, want %d", len(seen), n)
	}
	if q := newEnv(t, d).peek("inventory", base); len(q) != n {
		t.Errorf("%d requests queued, want %d", len(q), n)
	}
	for _, id := range []string{"o000", "o123", "o199"} {
		tk := getTask(t, d, id)
		if tk.LockedBy != seen[id] || getSteps(t, d, id)[0].Attempt != 1 {
			t.Errorf("task %s held by %q, dispatched by %q", id, tk.LockedBy, seen[id])
		}
	}
}

// One Tick applies a reply (dispatching the task's next step) and claims
// another task (dispatching its first step).
func testFlowTick(t *testing.T, d store.Driver) {
	e := newEnv(t, d)
	e.submit(orderWF(), "o1")
	first := e.one(e.claim(base), "claim o1")
	e.submit(orderWF(), "o2")
	reqs, claimed := e.tick(at(time.Second), 10, ok(first, `"r1"`))
	if claimed != 1 || len(reqs) != 2 {
		t.Fatalf("tick: claimed %d, requests %v; want o2 claimed, o1/1 and o2/0 dispatched", claimed, reqKeys(reqs))
	}
	e.wantState("o1", dt.Processing, dt.Processed, dt.Processing, dt.Pending)
	e.wantState("o2", dt.Processing, dt.Processing, dt.Pending, dt.Pending)
	if n := e.c.RepliesApplied.Load(); n != 1 {
		t.Errorf("RepliesApplied = %d, want 1", n)
	}
}

// A late reply for a task the supervisor made claimable again: the tick
// discards the reply and claims the task again (its own lock does not make
// the claim skip it), dispatching attempt 2.
func testFlowTickLateReplyClaimable(t *testing.T, d store.Driver) {
	e := newEnv(t, d)
	e.submit(orderWF(), "o1")
	old := e.one(e.claim(base), "claim")
	sv := e.leader("sup", at(20*time.Second), time.Minute)
	e.mustSweep(sv, at(20*time.Second), 1)
	e.wantState("o1", dt.Pending, dt.Pending, dt.Pending, dt.Pending)

	reqs, claimed := e.tick(at(21*time.Second), 10, ok(old, `"late"`))
	if claimed != 1 || len(reqs) != 1 || reqs[0].Attempt != 2 || reqs[0].StepIndex != 0 {
		t.Fatalf("tick with the late reply: claimed %d, requests %v; want o1 claimed again, step 0 attempt 2", claimed, reqKeys(reqs))
	}
	tk, steps := e.wantState("o1", dt.Processing, dt.Processing, dt.Pending, dt.Pending)
	if tk.LockedBy != "sched-1" || tk.CompleteBy == nil || steps[0].Attempt != 2 || steps[0].Output != nil {
		t.Errorf("after the tick: task %+v step %+v", tk, steps[0])
	}
	if n := e.c.LateReplies.Load(); n != 1 {
		t.Errorf("LateReplies = %d, want 1", n)
	}
	e.wantEvents("o1", "submitted step_started[0] step_timed_out[0] step_retry[0] reply_discarded[0] step_started[0]")
}

// A task whose steps cannot all be read is not advanced as if they had
// run, nor does it stop the claim of others: it is set to Error with an
// operator alert, and cannot be resubmitted.
func testFlowClaimRefusesMissingSteps(t *testing.T, d store.Driver) {
	gap, ok := newTask("gap"), newTask("ok") // two steps each
	gap.OrderingKey, ok.OrderingKey = "", ""
	insertTasks(t, d, gap, ok)
	insertSteps(t, d, newStep("gap", 0), newStep("ok", 0), newStep("ok", 1)) // gap's step 1 missing
	e := newEnv(t, d)
	reqs := e.claim(base)
	if len(reqs) != 1 || reqs[0].TaskID != "ok" {
		t.Fatalf("claim dispatched %v, want only ok's first step", reqs)
	}
	got := getTask(t, d, "gap")
	if got.ProcessState != dt.Error || got.LockedBy != "" || !strings.Contains(got.LastError, "1 of the task's 2 steps") {
		t.Errorf("gap is %s, locked by %q, last error %q; want Error, unlocked, saying a step is missing", got.ProcessState, got.LockedBy, got.LastError)
	}
	if e.c.Alerts.Load() != 1 {
		t.Errorf("Alerts = %d, want 1", e.c.Alerts.Load())
	}
	err := d.InTx(context.Background(), func(ctx context.Context, x store.Executor) error {
		_, err := flow.Resubmit(ctx, x, "gap", "operator", -1, base)
		return err
	})
	if !errors.Is(err, flow.ErrNotResubmittable) {
		t.Errorf("Resubmit of gap = %v, want ErrNotResubmittable", err)
	}
}

// A reply for a held task whose steps cannot all be read is not applied:
// the task is set to Error with an alert instead of being finished.
func testFlowReplyRefusesMissingSteps(t *testing.T, d store.Driver) {
	deadline := base.Add(time.Minute)
	gap := newTask("gap") // two steps, only the first stored, in flight
	gap.OrderingKey, gap.ProcessState, gap.LockedBy, gap.CompleteBy = "", dt.Processing, "sched-1", &deadline
	s0 := newStep("gap", 0)
	s0.ProcessState, s0.LockedBy, s0.CompleteBy, s0.Attempt = dt.Processing, "sched-1", &deadline, 1
	insertTasks(t, d, gap)
	insertSteps(t, d, s0)
	insertRequests(t, d, newRequest("gap", 0, "agent-step0", deadline))
	e := newEnv(t, d)
	e.apply(base.Add(time.Second), &dt.AgentReply{TaskID: "gap", StepIndex: 0, Attempt: 1, Kind: dt.KindDo, Output: []byte(`1`)})
	got := getTask(t, d, "gap")
	if got.ProcessState != dt.Error || got.LockedBy != "" {
		t.Errorf("gap is %s, locked by %q; want Error, unlocked", got.ProcessState, got.LockedBy)
	}
	if reqs := e.peek("agent-step0", base.Add(time.Second)); len(reqs) != 0 {
		t.Errorf("%d requests of the broken task still queued; an agent could run its step again", len(reqs))
	}
	if e.c.RepliesApplied.Load() != 0 || e.c.Alerts.Load() != 1 {
		t.Errorf("replies applied %d, alerts %d; want 0, 1", e.c.RepliesApplied.Load(), e.c.Alerts.Load())
	}
}
