package agentrt_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/drover-run/drover/internal/testutil"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/agentrt"
	"github.com/drover-run/drover/internal/clock"
	"github.com/drover-run/drover/internal/flow"
	"github.com/drover-run/drover/store"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// waitFor polls cond every few milliseconds until it holds or 10s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	waitWithin(t, 10*time.Second, what, cond)
}

// waitWithin is waitFor with its own deadline.
func waitWithin(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// setup stores n one-step tasks for agent and dispatches them (unclaimed
// requests with CompleteBy now+timeout), as a scheduler "sched" would.
func setup(t *testing.T, n int, agent string, timeout time.Duration) (store.Driver, []*dt.AgentRequest) {
	t.Helper()
	ctx := context.Background()
	d := testutil.SQLite(t)
	now := time.Now().UTC()
	subs := make([]flow.Submission, n)
	for i := range subs {
		id := fmt.Sprintf("t%03d", i)
		in := []byte(fmt.Sprintf(`{"n":%d}`, i))
		subs[i] = flow.Submission{
			Task: &dt.Task{ID: id, Workflow: "wf", Input: in, InputHash: flow.InputHash("wf", in), ProcessState: dt.Pending,
				StepCount: 1, FailureThreshold: 3, OnFailure: dt.PolicyError, AvailableAt: now, CreatedAt: now, UpdatedAt: now},
			Steps: []*dt.StepRecord{{TaskID: id, Index: 0, Name: "call", Agent: agent, Timeout: timeout, ProcessState: dt.Pending,
				IdempotencyKey: flow.IdempotencyKey(id, 0, "call"), UpdatedAt: now}},
		}
	}
	var reqs []*dt.AgentRequest
	err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		if _, err := flow.Submit(ctx, x, subs); err != nil {
			return err
		}
		var err error
		reqs, _, _, err = (&flow.Machine{Instance: "sched"}).Claim(ctx, x, now, n)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != n {
		t.Fatalf("dispatched %d requests, want %d", len(reqs), n)
	}
	return d, reqs
}

// sink records the replies the runtime delivers in process.
type sink struct {
	mu      sync.Mutex
	replies []*dt.AgentReply
	scheds  []string
}

func (s *sink) deliver(r *dt.AgentReply, sched string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.replies = append(s.replies, r)
	s.scheds = append(s.scheds, sched)
	return true
}

func (s *sink) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.replies)
}

func (s *sink) all() []*dt.AgentReply {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*dt.AgentReply(nil), s.replies...)
}

func newRuntime(d store.Driver, instance string, specs ...agentrt.Spec) *agentrt.Runtime {
	rt := agentrt.New(d, clock.Real{}, instance, quiet, specs)
	rt.PollInterval = 10 * time.Millisecond
	return rt
}

// run starts rt and returns a function that stops it and waits for Run to
// return; it is also called at cleanup.
func run(t *testing.T, rt *agentrt.Runtime) func() {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rt.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(15 * time.Second):
				t.Error("Run did not return after its context ended")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// storedReplies takes the replies waiting in the store's reply queue.
func storedReplies(t *testing.T, d store.Driver) []*dt.AgentReply {
	t.Helper()
	var out []*dt.AgentReply
	if err := d.InTx(context.Background(), func(ctx context.Context, x store.Executor) error {
		var err error
		out, err = x.ReplyTake(ctx, &store.ReplyTakeParams{Scheduler: "sched", Limit: 1000})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

var errPermanent = errors.New("permanent")

func isPermanent(err error) bool { return errors.Is(err, errPermanent) }

func TestRetriesTransientErrorsThenSucceeds(t *testing.T) {
	t.Parallel()
	d, reqs := setup(t, 1, "flaky", 10*time.Second)
	var (
		calls atomic.Int64
		mu    sync.Mutex
		keys  []string
	)
	rt := newRuntime(d, "rt-1", agentrt.Spec{
		Name: "flaky", Retry: agentrt.Retry{InitialInterval: time.Millisecond, MaxInterval: 5 * time.Millisecond},
		Func: func(ctx context.Context, r *dt.AgentRequest) ([]byte, error) {
			mu.Lock()
			keys = append(keys, r.IdempotencyKey)
			mu.Unlock()
			if calls.Add(1) < 3 {
				return nil, errors.New("503 service unavailable")
			}
			return []byte(`{"ok":true}`), nil
		},
	})
	rt.IsPermanent = isPermanent
	var s sink
	rt.Deliver = s.deliver
	run(t, rt)
	waitFor(t, "a reply", func() bool { return s.len() == 1 })

	r := s.all()[0]
	want := reqs[0]
	if r.Failed || string(r.Output) != `{"ok":true}` || r.TaskID != want.TaskID || r.StepIndex != want.StepIndex ||
		r.Attempt != want.Attempt || r.Kind != want.Kind {
		t.Errorf("reply %+v does not answer request %+v", r, want)
	}
	if s.scheds[0] != "sched" {
		t.Errorf("reply delivered to scheduler %q, want the dispatching one", s.scheds[0])
	}
	if n := calls.Load(); n != 3 {
		t.Errorf("agent called %d times, want 3 (two transient failures, then success)", n)
	}
	if rt.Stats.AgentCalls.Load() != 3 || rt.Stats.AgentRetries.Load() != 2 || rt.Stats.Replies.Load() != 1 || rt.Stats.Permanent.Load() != 0 {
		t.Errorf("stats: calls %d retries %d replies %d permanent %d", rt.Stats.AgentCalls.Load(), rt.Stats.AgentRetries.Load(),
			rt.Stats.Replies.Load(), rt.Stats.Permanent.Load())
	}
	mu.Lock()
	defer mu.Unlock()
	for _, k := range keys {
		if k != want.IdempotencyKey {
			t.Errorf("retry used idempotency key %q, want the stable %q", k, want.IdempotencyKey)
		}
	}
}

func TestPermanentErrorRepliesFailedWithoutRetry(t *testing.T) {
	t.Parallel()
	d, reqs := setup(t, 1, "strict", 10*time.Second)
	var calls atomic.Int64
	rt := newRuntime(d, "rt-1", agentrt.Spec{
		Name: "strict", Retry: agentrt.Retry{InitialInterval: time.Millisecond},
		Func: func(ctx context.Context, r *dt.AgentRequest) ([]byte, error) {
			calls.Add(1)
			return nil, fmt.Errorf("card declined: %w", errPermanent)
		},
	})
	rt.IsPermanent = isPermanent
	var s sink
	rt.Deliver = s.deliver
	run(t, rt)
	waitFor(t, "a reply", func() bool { return s.len() == 1 })
	r := s.all()[0]
	if !r.Failed || r.Error != "card declined: permanent" || r.TaskID != reqs[0].TaskID || r.Attempt != reqs[0].Attempt {
		t.Errorf("reply %+v, want a Failed reply carrying the error", r)
	}
	if calls.Load() != 1 || rt.Stats.AgentRetries.Load() != 0 || rt.Stats.Permanent.Load() != 1 {
		t.Errorf("calls %d retries %d permanent %d; want 1, 0, 1", calls.Load(), rt.Stats.AgentRetries.Load(), rt.Stats.Permanent.Load())
	}
}

func TestHungAgentAbandonedAtCompleteBySendsNothing(t *testing.T) {
	t.Parallel()
	d, reqs := setup(t, 1, "hung", time.Second)
	gate := make(chan struct{})
	var (
		started  atomic.Int64
		returned atomic.Int64
	)
	rt := newRuntime(d, "rt-1", agentrt.Spec{
		Name: "hung",
		Func: func(ctx context.Context, r *dt.AgentRequest) ([]byte, error) {
			started.Add(1)
			<-gate // ignores ctx
			returned.Add(1)
			return []byte(`"too late"`), nil
		},
	})
	var s sink
	rt.Deliver = s.deliver
	stop := run(t, rt)
	t.Cleanup(func() { close(gate) })

	waitFor(t, "the call to start", func() bool { return started.Load() == 1 })
	waitFor(t, "the call to be abandoned", func() bool { return rt.Stats.AbandonedCalls.Load() == 1 })
	if now := time.Now(); now.Before(reqs[0].CompleteBy) {
		t.Errorf("abandoned %s before CompleteBy", reqs[0].CompleteBy.Sub(now))
	}
	if returned.Load() != 0 {
		t.Fatal("the agent function returned: the test did not exercise a hung call")
	}
	// Stopping does not wait for the hung function, and nothing is ever sent.
	stop()
	if s.len() != 0 || rt.Stats.Replies.Load() != 0 {
		t.Errorf("a hung call produced %d replies (stats %d)", s.len(), rt.Stats.Replies.Load())
	}
	if got := storedReplies(t, d); len(got) != 0 {
		t.Errorf("a hung call wrote %d replies to the store", len(got))
	}
}

func TestTransientToTheEndSendsNothing(t *testing.T) {
	t.Parallel()
	// The runtime stops calling after MaxTries and abandons the request at
	// its deadline; the deadline is far enough out that a loaded machine
	// still claims the request before it passes (an expired request is
	// never claimed).
	d, _ := setup(t, 1, "down", 5*time.Second)
	var calls atomic.Int64
	rt := newRuntime(d, "rt-1", agentrt.Spec{
		Name: "down", Retry: agentrt.Retry{MaxTries: 2, InitialInterval: time.Millisecond},
		Func: func(ctx context.Context, r *dt.AgentRequest) ([]byte, error) {
			calls.Add(1)
			return nil, errors.New("connection refused")
		},
	})
	var s sink
	rt.Deliver = s.deliver
	stop := run(t, rt)
	waitWithin(t, 30*time.Second, "the call to be abandoned", func() bool { return rt.Stats.AbandonedCalls.Load() == 1 })
	stop()
	if calls.Load() != 2 {
		t.Errorf("calls = %d, want MaxTries = 2", calls.Load())
	}
	if s.len() != 0 || len(storedReplies(t, d)) != 0 {
		t.Error("a transient failure sent a reply: it must be left to the supervisor")
	}
}

func TestCircuitBreakerOpensAfterConsecutiveFailures(t *testing.T) {
	t.Parallel()
	// 3s, not less: the three calls and the refusal must all come before
	// the deadline, and a loaded machine can take a second to claim.
	d, _ := setup(t, 1, "broken", 3*time.Second)
	var calls atomic.Int64
	rt := newRuntime(d, "rt-1", agentrt.Spec{
		Name: "broken", Retry: agentrt.Retry{InitialInterval: time.Millisecond, MaxInterval: 5 * time.Millisecond},
		BreakerFailures: 3, BreakerOpen: time.Minute,
		Func: func(ctx context.Context, r *dt.AgentRequest) ([]byte, error) {
			calls.Add(1)
			return nil, errors.New("500 internal error")
		},
	})
	var s sink
	rt.Deliver = s.deliver
	stop := run(t, rt)
	waitFor(t, "the breaker to refuse a call", func() bool { return rt.Stats.BreakerRefused.Load() > 0 })
	waitFor(t, "the call to be abandoned", func() bool { return rt.Stats.AbandonedCalls.Load() == 1 })
	stop()
	if n := calls.Load(); n != 3 {
		t.Errorf("the service was called %d times, want 3: the breaker opens after 3 consecutive failures", n)
	}
	if rt.Stats.AgentCalls.Load() != 3 {
		t.Errorf("Stats.AgentCalls = %d, want 3", rt.Stats.AgentCalls.Load())
	}
	if s.len() != 0 {
		t.Errorf("replies sent: %d", s.len())
	}
}

func TestConcurrencyLimit(t *testing.T) {
	t.Parallel()
	const n, limit = 30, 3
	d, _ := setup(t, n, "slow", 30*time.Second)
	var active, peak, calls atomic.Int64
	rt := newRuntime(d, "rt-1", agentrt.Spec{
		Name: "slow", Concurrency: limit,
		Func: func(ctx context.Context, r *dt.AgentRequest) ([]byte, error) {
			cur := active.Add(1)
			defer active.Add(-1)
			calls.Add(1)
			for {
				p := peak.Load()
				if cur <= p || peak.CompareAndSwap(p, cur) {
					break
				}
			}
			time.Sleep(3 * time.Millisecond) // the remote call's latency
			return []byte(`1`), nil
		},
	})
	var s sink
	rt.Deliver = s.deliver
	run(t, rt)
	waitFor(t, "every reply", func() bool { return s.len() == n })
	if p := peak.Load(); p > limit {
		t.Errorf("%d calls ran at once, Concurrency is %d", p, limit)
	} else if p < 2 {
		t.Errorf("calls never overlapped (peak %d): the limit was not exercised", p)
	}
	if calls.Load() != n {
		t.Errorf("%d calls, want %d", calls.Load(), n)
	}
	seen := map[string]bool{}
	for _, r := range s.all() {
		if seen[r.TaskID] {
			t.Errorf("two replies for %s", r.TaskID)
		}
		seen[r.TaskID] = true
	}
}

// Without an in-process scheduler, replies go to the store's reply queue.
func TestRepliesGoToStoreWhenNotDelivered(t *testing.T) {
	t.Parallel()
	d, reqs := setup(t, 5, "remote", 10*time.Second)
	rt := newRuntime(d, "rt-1", agentrt.Spec{
		Name: "remote",
		Func: func(ctx context.Context, r *dt.AgentRequest) ([]byte, error) {
			return []byte(`"` + r.TaskID + `"`), nil
		},
	})
	rt.Deliver = func(*dt.AgentReply, string) bool { return false }
	run(t, rt)
	var got []*dt.AgentReply
	waitFor(t, "5 replies in the store", func() bool {
		got = append(got, storedReplies(t, d)...)
		return len(got) >= 5
	})
	byTask := map[string]*dt.AgentReply{}
	for _, r := range got {
		byTask[r.TaskID] = r
	}
	for _, q := range reqs {
		r := byTask[q.TaskID]
		if r == nil || string(r.Output) != `"`+q.TaskID+`"` || r.Attempt != q.Attempt || r.Failed {
			t.Errorf("stored reply for %s: %+v", q.TaskID, r)
		}
	}
}

// A runtime restarted with the same instance ID redoes the requests it had
// claimed before it died; until then no other instance takes them.
func TestRestartRedoesClaimedRequests(t *testing.T) {
	t.Parallel()
	d, reqs := setup(t, 3, "a", 10*time.Second)
	// The previous incarnation claimed every request, then crashed.
	if err := d.InTx(context.Background(), func(ctx context.Context, x store.Executor) error {
		got, err := x.RequestClaim(ctx, &store.RequestClaimParams{Agent: "a", ClaimedBy: "rt-1", Now: time.Now(), Limit: 10})
		if len(got) != 3 {
			return fmt.Errorf("claimed %d", len(got))
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	// While claimed, no other instance gets them.
	if err := d.InTx(context.Background(), func(ctx context.Context, x store.Executor) error {
		got, err := x.RequestClaim(ctx, &store.RequestClaimParams{Agent: "a", ClaimedBy: "rt-2", Now: time.Now(), Limit: 10})
		if len(got) != 0 {
			t.Errorf("rt-2 claimed %d requests rt-1 holds", len(got))
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}

	var s sink
	rt := newRuntime(d, "rt-1", agentrt.Spec{Name: "a", Func: func(ctx context.Context, r *dt.AgentRequest) ([]byte, error) {
		return []byte(`"redone"`), nil
	}})
	rt.Deliver = s.deliver
	run(t, rt)
	waitFor(t, "the claimed requests to be redone", func() bool { return s.len() == 3 })
	for _, r := range s.all() {
		found := false
		for _, q := range reqs {
			found = found || (q.TaskID == r.TaskID && q.Attempt == r.Attempt)
		}
		if !found {
			t.Errorf("reply %+v answers no request", r)
		}
	}
}

// The in-process fast path: a scheduler reserves a slot, inserts the request
// already claimed, and hands it over after commit.
func TestReserveAndDispatch(t *testing.T) {
	t.Parallel()
	d, _ := setup(t, 0, "a", time.Second)
	var calls atomic.Int64
	rt := newRuntime(d, "rt-1", agentrt.Spec{Name: "a", Concurrency: 2, Func: func(ctx context.Context, r *dt.AgentRequest) ([]byte, error) {
		calls.Add(1)
		return []byte(`"fast"`), nil
	}})
	if _, ok := rt.Reserve("a"); ok {
		t.Error("Reserve succeeded before Run")
	}
	if _, ok := rt.Reserve("unknown"); ok {
		t.Error("Reserve succeeded for an agent the runtime does not run")
	}
	var s sink
	rt.Deliver = s.deliver
	run(t, rt)
	waitFor(t, "the runtime to run", func() bool {
		inst, ok := rt.Reserve("a")
		if ok {
			rt.Unreserve([]*dt.AgentRequest{{Agent: "a", ClaimedBy: inst}})
		}
		return ok
	})

	now := time.Now().UTC()
	in := []byte(`{}`)
	m := &flow.Machine{Instance: "sched", Reserve: rt.Reserve}
	var reqs []*dt.AgentRequest
	if err := d.InTx(context.Background(), func(ctx context.Context, x store.Executor) error {
		var subs []flow.Submission
		for i := range 3 {
			id := fmt.Sprintf("f%d", i)
			subs = append(subs, flow.Submission{
				Task: &dt.Task{ID: id, Workflow: "wf", Input: in, InputHash: flow.InputHash("wf", in), ProcessState: dt.Pending,
					StepCount: 1, FailureThreshold: 3, OnFailure: dt.PolicyError, AvailableAt: now, CreatedAt: now, UpdatedAt: now},
				Steps: []*dt.StepRecord{{TaskID: id, Name: "s", Agent: "a", Timeout: 10 * time.Second, ProcessState: dt.Pending,
					IdempotencyKey: flow.IdempotencyKey(id, 0, "s"), UpdatedAt: now}},
			})
		}
		if _, err := flow.Submit(ctx, x, subs); err != nil {
			return err
		}
		var err error
		reqs, _, _, err = m.Claim(ctx, x, now, 10)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	reserved := 0
	for _, r := range reqs {
		if r.ClaimedBy == "rt-1" {
			reserved++
		}
	}
	if reserved != 2 {
		t.Errorf("%d of 3 requests reserved with Concurrency 2, want 2", reserved)
	}
	rt.Dispatch(reqs)
	waitFor(t, "all three replies (two fast, one pulled)", func() bool { return s.len() == 3 })
	if calls.Load() != 3 {
		t.Errorf("calls = %d, want 3", calls.Load())
	}
}

// Run "waits for calls in flight to finish": the reply of a call that
// finishes during shutdown, for a scheduler in another process, must reach
// the store's reply queue. (Several rounds, as the loss is a race.)
func TestShutdownKeepsRepliesOfCallsInFlight(t *testing.T) {
	t.Parallel()
	const rounds = 10
	lost := 0
	for range rounds {
		d, _ := setup(t, 1, "a", 20*time.Second)
		release := make(chan struct{})
		var started atomic.Bool
		rt := newRuntime(d, "rt-1", agentrt.Spec{Name: "a", Func: func(ctx context.Context, r *dt.AgentRequest) ([]byte, error) {
			started.Store(true)
			<-release
			return []byte(`"finished during shutdown"`), nil
		}})
		rt.Deliver = func(*dt.AgentReply, string) bool { return false } // the scheduler is elsewhere
		stop := run(t, rt)
		waitFor(t, "the call to start", started.Load)
		stopped := make(chan struct{})
		go func() { stop(); close(stopped) }()
		close(release)
		<-stopped
		if rt.Stats.Replies.Load() != 1 {
			t.Fatalf("the call produced %d replies", rt.Stats.Replies.Load())
		}
		if len(storedReplies(t, d)) == 0 {
			lost++
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d replies produced during shutdown never reached the store: Run stops the reply writer "+
			"(stopWriter) right after the calls end, and writeReplies drops what it has not written once its context ends", lost, rounds)
	}
}

// pausedClaims lets a test hold the runtime's pull inside RequestClaim.
type pausedClaims struct {
	store.Driver
	entered chan struct{} // receives once a pull is inside RequestClaim
	release chan struct{} // closed to let it claim
}

func (d *pausedClaims) InTx(ctx context.Context, fn func(context.Context, store.Executor) error) error {
	return d.Driver.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		return fn(ctx, pausedExecutor{x, d})
	})
}

type pausedExecutor struct {
	store.Executor
	d *pausedClaims
}

func (x pausedExecutor) RequestClaim(ctx context.Context, p *store.RequestClaimParams) ([]*dt.AgentRequest, error) {
	select {
	case x.d.entered <- struct{}{}:
	default:
	}
	<-x.d.release
	return x.Executor.RequestClaim(ctx, p)
}

// A pull in progress does not turn the scheduler's fast path away: before,
// the pull took every free slot for its transaction's length, so requests
// dispatched meanwhile went through the store's queue and woke the pull
// again. With FastPath it takes half; the two together still never take
// more than Concurrency slots.
func TestPullInProgressLeavesRoomForFastPath(t *testing.T) {
	t.Parallel()
	d, queued := setup(t, 1, "a", 30*time.Second)
	paused := &pausedClaims{Driver: d, entered: make(chan struct{}, 1), release: make(chan struct{})}
	rt := newRuntime(paused, "rt-1", agentrt.Spec{Name: "a", Concurrency: 4, Func: func(ctx context.Context, r *dt.AgentRequest) ([]byte, error) {
		return []byte(`1`), nil
	}})
	rt.FastPath = true
	var s sink
	rt.Deliver = s.deliver
	run(t, rt)
	defer func() {
		select {
		case <-paused.release:
		default:
			close(paused.release)
		}
	}()
	select {
	case <-paused.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the pull never reached RequestClaim")
	}
	var fast []*dt.AgentRequest
	for i := range 3 {
		inst, ok := rt.Reserve("a")
		if ok != (i < 2) {
			t.Fatalf("Reserve %d while a pull was claiming: ok=%v; want the two slots the pull left, and no more", i+1, ok)
		}
		if ok {
			fast = append(fast, &dt.AgentRequest{TaskID: fmt.Sprintf("fast%d", i), Agent: "a", Attempt: 1, Kind: dt.KindDo,
				ClaimedBy: inst, InProcess: true, CompleteBy: time.Now().Add(30 * time.Second), Scheduler: "sched"})
		}
	}
	rt.Dispatch(fast)
	close(paused.release)
	waitFor(t, "three replies", func() bool { return s.len() == 3 })
	got := map[string]bool{}
	for _, r := range s.all() {
		got[r.TaskID] = true
		if r.InProcess != strings.HasPrefix(r.TaskID, "fast") {
			t.Errorf("reply for %s: InProcess %v", r.TaskID, r.InProcess)
		}
	}
	if !got["fast0"] || !got["fast1"] || !got[queued[0].TaskID] {
		t.Errorf("replies for %v, want fast0, fast1 and %s", got, queued[0].TaskID)
	}
	// The pull gave back the slot it took and did not use.
	waitFor(t, "every slot free", func() bool {
		n := 0
		for {
			if _, ok := rt.Reserve("a"); !ok {
				break
			}
			n++
		}
		rt.Unreserve(slices.Repeat([]*dt.AgentRequest{{Agent: "a", ClaimedBy: "rt-1"}}, n))
		return n == 4
	})
}
