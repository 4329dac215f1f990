package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/drover-run/drover/internal/testutil"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drover-run/drover"
	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/agentrt"
	"github.com/drover-run/drover/internal/clock"
	"github.com/drover-run/drover/internal/flow"
	"github.com/drover-run/drover/internal/scheduler"
	"github.com/drover-run/drover/store"
	"github.com/drover-run/drover/store/sqlite"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func openStore(t *testing.T) *sqlite.Driver {
	t.Helper()
	return testutil.SQLite(t)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// seed submits n tasks of `steps` steps, all run by agent "a".
func seed(t *testing.T, d store.Driver, n, steps int, timeout time.Duration) []string {
	t.Helper()
	now := time.Now().UTC()
	var ids []string
	subs := make([]flow.Submission, n)
	for i := range subs {
		id := fmt.Sprintf("t%03d", i)
		ids = append(ids, id)
		in := []byte(`{}`)
		subs[i].Task = &dt.Task{ID: id, Workflow: "wf", Input: in, InputHash: flow.InputHash("wf", in), ProcessState: dt.Pending,
			StepCount: steps, FailureThreshold: 3, OnFailure: dt.PolicyError, AvailableAt: now, CreatedAt: now, UpdatedAt: now}
		for j := range steps {
			name := fmt.Sprintf("s%d", j)
			subs[i].Steps = append(subs[i].Steps, &dt.StepRecord{TaskID: id, Index: j, Name: name, Agent: "a", Timeout: timeout,
				ProcessState: dt.Pending, IdempotencyKey: flow.IdempotencyKey(id, j, name), UpdatedAt: now})
		}
	}
	if err := d.InTx(context.Background(), func(ctx context.Context, x store.Executor) error {
		_, err := flow.Submit(ctx, x, subs)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return ids
}

// runFn runs f until the returned stop function is called (also at cleanup).
func runFn(t *testing.T, f func(context.Context) error) func() {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("role returned %v", err)
				}
			case <-time.After(15 * time.Second):
				t.Error("role did not stop")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func count(t *testing.T, d store.Driver, s dt.ProcessState) int {
	t.Helper()
	c, err := d.Reader().TaskCountByState(context.Background(), &store.TaskCountByStateParams{})
	if err != nil {
		t.Fatal(err)
	}
	return c[s]
}

func newScheduler(d store.Driver, instance string) *scheduler.Scheduler {
	s := scheduler.New(d, clock.Real{}, &flow.Machine{Instance: instance, Counters: &flow.Counters{}}, quiet)
	s.PollInterval = 10 * time.Millisecond
	return s
}

// checkNoRecovery checks that every step ran exactly once (attempt 1) and the
// supervisor never had to step in.
func checkNoRecovery(t *testing.T, d store.Driver, ids []string) {
	t.Helper()
	steps, err := d.Reader().StepListByTasks(context.Background(), &store.StepListByTasksParams{TaskIDs: ids})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range steps {
		if s.ProcessState != dt.Processed || s.Attempt != 1 || s.FailureCount != 0 {
			t.Errorf("step %s/%d: %s attempt %d failures %d; want Processed at attempt 1", s.TaskID, s.Index, s.ProcessState, s.Attempt, s.FailureCount)
		}
	}
	evs, err := d.Reader().EventList(context.Background(), &store.EventListParams{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if e.Type == dt.EventStepTimedOut || e.Type == dt.EventStepRetry || e.Type == dt.EventReplyDiscarded {
			t.Errorf("unexpected %s event for %s", e.Type, e.TaskID)
		}
	}
}

// A scheduler restarted under the same instance ID finds the tasks it held and
// finishes them, with the agent runtime restarted under its own ID redoing
// the calls that were in flight: no supervisor involved.
func TestRestartWithSameInstanceResumes(t *testing.T) {
	t.Parallel()
	for _, viaStore := range []bool{false, true} {
		name := "in-process replies"
		if viaStore {
			name = "replies through the store"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			d := openStore(t)
			ids := seed(t, d, 5, 2, 30*time.Second)

			// First life: the scheduler dispatches step 0 of every task; the
			// agent runtime claims the requests and dies mid-call.
			s1 := newScheduler(d, "sched-A")
			stop1 := runFn(t, s1.Run)
			waitFor(t, "all tasks held by sched-A", func() bool {
				n, err := d.Reader().TaskCountLockedBy(context.Background(), &store.TaskCountLockedByParams{Instance: "sched-A"})
				return err == nil && n == 5
			})
			if err := d.InTx(context.Background(), func(ctx context.Context, x store.Executor) error {
				got, err := x.RequestClaim(ctx, &store.RequestClaimParams{Agent: "a", ClaimedBy: "agent-A", Now: time.Now(), Limit: 100})
				if err == nil && len(got) != 5 {
					err = fmt.Errorf("agent claimed %d requests, want 5", len(got))
				}
				return err
			}); err != nil {
				t.Fatal(err)
			}
			stop1()

			// Second life, same IDs.
			s2 := newScheduler(d, "sched-A")
			var calls atomic.Int64
			rt := agentrt.New(d, clock.Real{}, "agent-A", quiet, []agentrt.Spec{{Name: "a",
				Func: func(ctx context.Context, r *dt.AgentRequest) ([]byte, error) {
					calls.Add(1)
					return []byte(fmt.Sprintf(`"%s/%d"`, r.TaskID, r.StepIndex)), nil
				}}})
			rt.PollInterval = 10 * time.Millisecond
			if !viaStore {
				rt.Deliver = func(r *dt.AgentReply, sched string) bool { return sched == s2.Instance() && s2.Deliver(r) }
				s2.OnDispatch = rt.Dispatch
			}
			runFn(t, rt.Run)
			runFn(t, s2.Run)
			waitFor(t, "every task Processed", func() bool { return count(t, d, dt.Processed) == 5 })
			checkNoRecovery(t, d, ids)
			if calls.Load() != 10 {
				t.Errorf("agent called %d times, want 10 (each of 2 steps of 5 tasks once)", calls.Load())
			}
		})
	}
}

// The same, through the Client: stop a Client while its agent calls hang,
// start a new one with the same InstanceID and no supervisor.
func TestClientRestartWithSameInstanceIDResumes(t *testing.T) {
	t.Parallel()
	d := openStore(t)
	ctx := context.Background()
	wf := drover.Workflow{Name: "wf", Steps: []drover.Step{
		{Name: "one", Agent: "a", Timeout: 20 * time.Second},
		{Name: "two", Agent: "a", Timeout: 20 * time.Second},
	}}
	roles := drover.Roles{Scheduler: true, Agent: true} // no supervisor
	gate := make(chan struct{})
	var hung atomic.Int64
	// A short instance lease: the "crashed" first life stops renewing it at
	// Stop, and the second life may start once it has expired.
	const leaseTTL = 3 * time.Second // long enough that a loaded machine reaches the twin check before it expires
	c1, err := drover.New(drover.Config{Store: d, InstanceID: "node-1", Workflows: []drover.Workflow{wf}, Roles: roles,
		PollInterval: 10 * time.Millisecond, LeaseTTL: leaseTTL,
		Agents: []drover.Agent{{Name: "a", Func: func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) {
			hung.Add(1)
			<-gate
			return nil, errors.New("the first life never answers")
		}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c1.Start(ctx); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range 3 {
		task, err := c1.Submit(ctx, "wf", []byte(fmt.Sprintf(`{"i":%d}`, i)), nil)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, task.ID)
	}
	waitFor(t, "three hung calls", func() bool { return hung.Load() == 3 })
	// The calls came by the fast path, which stores no request rows: only
	// the second life's restore brings them back.
	attempts := make([]store.StepAttempt, len(ids))
	for i, id := range ids {
		attempts[i] = store.StepAttempt{TaskID: id, Attempt: 1, Kind: dt.KindDo}
	}
	if stored, err := d.Reader().StepMessagesExist(ctx, &store.StepMessagesExistParams{Attempts: attempts}); err != nil || slices.Contains(stored, true) {
		t.Fatalf("request rows of the in-process calls: %v, %v; want none", stored, err)
	}
	stopCtx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_ = c1.Stop(stopCtx) // the hung calls keep it from stopping cleanly: a crash, in effect
	cancel()
	t.Cleanup(func() { close(gate) }) // runs before the store closes

	var calls atomic.Int64
	c2, err := drover.New(drover.Config{Store: d, InstanceID: "node-1", Workflows: []drover.Workflow{wf}, Roles: roles,
		PollInterval: 10 * time.Millisecond, LeaseTTL: leaseTTL,
		Agents: []drover.Agent{{Name: "a", Func: func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) {
			calls.Add(1)
			return []byte(`"ok"`), nil
		}}}})
	if err != nil {
		t.Fatal(err)
	}
	// The first life's lease is still live right after its Stop: a twin is
	// refused until it expires, as after a real crash.
	if err := c2.Start(ctx); !errors.Is(err, drover.ErrInstanceInUse) {
		t.Fatalf("second life started while the first one's lease was live: %v", err)
	}
	waitFor(t, "the first life's instance lease to expire", func() bool {
		err := c2.Start(ctx)
		if err != nil && !errors.Is(err, drover.ErrInstanceInUse) {
			t.Fatal(err)
		}
		return err == nil
	})
	t.Cleanup(func() { _ = c2.Stop(context.Background()) }) // it may have stopped already
	for _, id := range ids {
		wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		task, err := c2.Wait(wctx, id)
		cancel()
		if err != nil {
			t.Fatalf("Wait(%s): %v", id, err)
		}
		if task.ProcessState != drover.Processed {
			t.Errorf("task %s ended %s", id, task.ProcessState)
		}
	}
	checkNoRecovery(t, d, ids)
	if calls.Load() != 6 {
		t.Errorf("second life called the agent %d times, want 6", calls.Load())
	}
	if st := c2.Stats(); st.SupervisorRecoveries != 0 || st.LateReplies != 0 {
		t.Errorf("stats %+v: want no recoveries and no late replies", st)
	}
}

// A scheduler never holds more than MaxInFlight tasks, and takes new ones as
// it lets others go.
func TestMaxInFlight(t *testing.T) {
	t.Parallel()
	d := openStore(t)
	seed(t, d, 10, 1, 30*time.Second)
	s := newScheduler(d, "sched")
	s.MaxInFlight, s.ClaimBatch = 3, 10
	var dispatched []*dt.AgentRequest
	s.OnDispatch = func(reqs []*dt.AgentRequest) { dispatched = append(dispatched, reqs...) }
	ctx := context.Background()
	held := func() int {
		n, err := d.Reader().TaskCountLockedBy(ctx, &store.TaskCountLockedByParams{Instance: "sched"})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	for range 2 {
		if _, err := s.Tick(ctx, true); err != nil {
			t.Fatal(err)
		}
		if n := held(); n != 3 {
			t.Fatalf("holding %d tasks, MaxInFlight is 3", n)
		}
	}
	if len(dispatched) != 3 {
		t.Fatalf("OnDispatch told of %d requests, want 3", len(dispatched))
	}
	// One finishes: one more is taken.
	r := dispatched[0]
	if !s.Deliver(&dt.AgentReply{TaskID: r.TaskID, StepIndex: r.StepIndex, Attempt: r.Attempt, Kind: r.Kind, Output: []byte(`1`), CreatedAt: time.Now()}) {
		t.Fatal("inbox refused a reply")
	}
	if _, err := s.Tick(ctx, false); err != nil {
		t.Fatal(err)
	}
	if n := held(); n != 3 {
		t.Errorf("holding %d after one finished, want 3", n)
	}
	if c := count(t, d, dt.Processed); c != 1 {
		t.Errorf("%d Processed, want 1", c)
	}
	if len(dispatched) != 4 {
		t.Errorf("%d dispatched, want 4", len(dispatched))
	}
}

// A tick whose claim comes back full asks for another scheduler
// (WakeMore); a partial claim, or no room to claim, does not.
func TestWakeMoreAfterFullClaim(t *testing.T) {
	d := openStore(t)
	seed(t, d, 5, 1, time.Minute)
	s := scheduler.New(d, clock.Real{}, &flow.Machine{Instance: "A"}, quiet)
	s.ClaimBatch, s.MaxInFlight = 2, 4
	wakes := 0
	s.WakeMore = func() { wakes++ }
	ctx := context.Background()
	for i, want := range []struct{ wakes, room int }{
		{1, 2}, // claimed 2 of 2
		{2, 0}, // claimed 2 of 2
		{2, 0}, // no room: asked for nothing
	} {
		if _, err := s.Tick(ctx, false); err != nil {
			t.Fatal(err)
		}
		if wakes != want.wakes || s.Room() != want.room {
			t.Fatalf("after tick %d: %d wakes, room %d; want %d, %d", i+1, wakes, s.Room(), want.wakes, want.room)
		}
	}
	s.MaxInFlight = 8 // one task is left: a partial claim
	if _, err := s.Tick(ctx, false); err != nil {
		t.Fatal(err)
	}
	if wakes != 2 || s.Room() != 3 {
		t.Fatalf("after a partial claim: %d wakes, room %d; want 2, 3", wakes, s.Room())
	}
}

// A scheduler whose transactions fail hands the work to another (WakeMore)
// before backing off.
func TestFailingTickWakesAnother(t *testing.T) {
	d := openStore(t)
	seed(t, d, 1, 1, time.Minute)
	s := scheduler.New(d, clock.Real{}, &flow.Machine{Instance: "A"}, quiet)
	s.Fence = func(context.Context, store.Executor, time.Time) error { return errors.New("store down") }
	var wakes atomic.Int64
	s.WakeMore = func() { wakes.Add(1) }
	stop := runFn(t, s.Run)
	defer stop()
	waitFor(t, "a wake for another scheduler", func() bool { return wakes.Load() > 0 })
}

// Restore stores a request again only for in-flight steps with nothing on
// its way: a step whose reply already waits in the reply queue (a remote
// agent answered while the scheduler was down) must not be run again. A
// reply of an earlier attempt (late) does not count: that step's current
// attempt is restored.
func TestRestoreSkipsStepsWithAWaitingReply(t *testing.T) {
	t.Parallel()
	d := openStore(t)
	ctx := context.Background()
	ids := seed(t, d, 3, 1, 30*time.Second)
	now := time.Now().UTC()
	// First life: the steps dispatched by the fast path, so no rows.
	first := &flow.Machine{Instance: "sched-A", Reserve: func(string) (string, bool) { return "rt-A", true }}
	var reqs []*dt.AgentRequest
	if err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		var err error
		reqs, _, _, err = first.Claim(ctx, x, now, 10)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 3 || !reqs[0].InProcess || !reqs[1].InProcess || !reqs[2].InProcess {
		t.Fatalf("dispatched %+v, want three in-process requests", reqs)
	}
	byTask := map[string]*dt.AgentRequest{}
	for _, r := range reqs {
		byTask[r.TaskID] = r
	}
	// The reply to the first task's step waits in the store; the third
	// task's step has only a late reply of an earlier attempt.
	if err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		return x.ReplyInsertMany(ctx, &store.ReplyInsertManyParams{Replies: []*dt.AgentReply{
			{TaskID: ids[0], Attempt: byTask[ids[0]].Attempt, Kind: dt.KindDo, Output: []byte(`1`), CreatedAt: now},
			{TaskID: ids[2], Attempt: byTask[ids[2]].Attempt - 1, Kind: dt.KindDo, Output: []byte(`1`), CreatedAt: now},
		}})
	}); err != nil {
		t.Fatal(err)
	}
	// Second life.
	var restored []*dt.AgentRequest
	if err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		var err error
		restored, err = (&flow.Machine{Instance: "sched-A"}).Restore(ctx, x, now.Add(time.Second), 100)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, r := range restored {
		want := byTask[r.TaskID]
		if r.Attempt != want.Attempt || r.IdempotencyKey != want.IdempotencyKey || r.InProcess {
			t.Errorf("restored %+v, want the same attempt and key as %+v, stored", r, want)
		}
		got[r.TaskID] = true
	}
	if len(restored) != 2 || !got[ids[1]] || !got[ids[2]] {
		t.Fatalf("restored %+v, want %s's and %s's requests", restored, ids[1], ids[2])
	}
	var attempts []store.StepAttempt
	for _, id := range ids {
		attempts = append(attempts, store.StepAttempt{TaskID: id, Attempt: byTask[id].Attempt, Kind: dt.KindDo})
	}
	stored, err := d.Reader().StepMessagesExist(ctx, &store.StepMessagesExistParams{Attempts: attempts})
	if err != nil || !slices.Equal(stored, []bool{true, true, true}) {
		t.Fatalf("messages stored: %v, %v; want a reply for %s and requests for the others", stored, err, ids[0])
	}
}

// slowRelease holds the agent runtime's first transaction (RequestRelease,
// at its start) for a while, as a loaded database would.
type slowRelease struct{ store.Driver }

func (d slowRelease) InTx(ctx context.Context, fn func(context.Context, store.Executor) error) error {
	return d.Driver.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		return fn(ctx, slowReleaseExecutor{x})
	})
}

type slowReleaseExecutor struct{ store.Executor }

func (x slowReleaseExecutor) RequestRelease(ctx context.Context, params *store.RequestReleaseParams) (int, error) {
	claimedBy := params.ClaimedBy
	time.Sleep(300 * time.Millisecond)
	return x.Executor.RequestRelease(ctx, &store.RequestReleaseParams{ClaimedBy: claimedBy})
}

// A Client's schedulers claim only once its agent runtime takes requests:
// otherwise the first dispatches find no fast path and go through the
// store's queue. On PostgreSQL: SQLite's one writer serializes the
// runtime's first transaction with the first claim anyway.
func TestSchedulersWaitForLocalAgents(t *testing.T) {
	t.Parallel()
	d := testutil.Postgres(t)
	ctx := context.Background()
	gate := make(chan struct{})
	var called atomic.Int64
	c, err := drover.New(drover.Config{Store: slowRelease{d}, InstanceID: "node-1", PollInterval: 10 * time.Millisecond,
		Roles:     drover.Roles{Scheduler: true, Agent: true},
		Workflows: []drover.Workflow{{Name: "wf", Steps: []drover.Step{{Name: "one", Agent: "a", Timeout: 20 * time.Second}}}},
		Agents: []drover.Agent{{Name: "a", Func: func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) {
			called.Add(1)
			<-gate
			return []byte(`"ok"`), nil
		}}}})
	if err != nil {
		t.Fatal(err)
	}
	task, err := c.Submit(ctx, "wf", []byte(`{}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	t.Cleanup(func() { close(gate) })
	waitFor(t, "the agent to be called", func() bool { return called.Load() == 1 })
	stored, err := d.Reader().StepMessagesExist(ctx, &store.StepMessagesExistParams{Attempts: []store.StepAttempt{{TaskID: task.ID, Attempt: 1, Kind: dt.KindDo}}})
	if err != nil || stored[0] {
		t.Fatalf("request row stored: %v, %v; want the fast path (no row)", stored, err)
	}
}
