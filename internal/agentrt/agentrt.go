package agentrt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/sony/gobreaker/v2"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/clock"
	"github.com/drover-run/drover/internal/fault"
	"github.com/drover-run/drover/internal/flow"
	"github.com/drover-run/drover/internal/instrument"
	"github.com/drover-run/drover/internal/logattr"
	"github.com/drover-run/drover/internal/recent"
	"github.com/drover-run/drover/internal/tracing"
	"github.com/drover-run/drover/store"
	"go.opentelemetry.io/otel/trace"
)

// Func is the code of one agent: it calls a remote service and returns the
// step's output. ctx ends at the request's CompleteBy.
type Func func(ctx context.Context, req *dt.AgentRequest) ([]byte, error)

// Classifier reports whether an error is permanent (not worth retrying).
type Classifier func(error) bool

// Spec describes one agent.
type Spec struct {
	Name        string
	Func        Func
	Concurrency int // calls at once in this process
	// Retry backoff inside the deadline.
	Retry
	// Circuit breaker: opens after BreakerFailures consecutive failures and
	// stays open BreakerOpen before letting a trial call through.
	BreakerFailures uint32
	BreakerOpen     time.Duration
}

// Retry is how an agent's calls are retried within the step's deadline.
type Retry struct {
	InitialInterval time.Duration // default 50ms
	MaxInterval     time.Duration // default 5s
	MaxTries        uint          // 0: until the deadline
	// Retryable, when set, decides which errors are retried: one it
	// returns false for fails the step at once, as a permanent error does.
	Retryable func(error) bool
}

// withDefaults fills in the default intervals.
func (r Retry) withDefaults() Retry {
	if r.InitialInterval <= 0 {
		r.InitialInterval = 50 * time.Millisecond
	}
	if r.MaxInterval <= 0 {
		r.MaxInterval = 5 * time.Second
	}
	return r
}

// Delivery hands a reply to the scheduler that holds the task. It returns
// false when that scheduler is not in this process.
type Delivery func(r *dt.AgentReply, scheduler string) bool

// Stats counts what the runtime did; the names are those of drover.Stats
// and of the metrics (package metrics).
type Stats struct {
	AgentCalls     atomic.Int64 // invocations of agent functions, retries included
	AgentRetries   atomic.Int64
	AbandonedCalls atomic.Int64 // requests whose deadline passed: nothing sent
	Replies        atomic.Int64
	Permanent      atomic.Int64
	BreakerRefused atomic.Int64 // calls refused by an open breaker
}

type agent struct {
	spec    Spec
	breaker *gobreaker.CircuitBreaker[[]byte]
	active  atomic.Int64  // call slots taken: at most Concurrency
	recent  recent.Window // calls and failures of the last minutes (Health)
}

// Runtime runs the registered agents of one process.
type Runtime struct {
	Driver       store.Driver
	Clock        clock.Clock
	Instance     string
	Log          *slog.Logger
	PollInterval time.Duration
	// Live, when set, reports whether notifications reach this process
	// (notifier.Hub.Live): new requests for its agents from other
	// processes notify it, and it polls only every IdlePoll (or
	// PollInterval, the longer) as a fallback.
	Live func() bool
	// IdlePoll is the fallback poll while Live (default 30s).
	IdlePoll    time.Duration
	IsPermanent Classifier
	Deliver     Delivery
	// StepRetry, when set, returns the retry policy of a request's step
	// when the step has its own (nil: the agent's applies). It is not
	// asked for compensations.
	StepRetry func(*dt.AgentRequest) *Retry
	// FastPath says a scheduler in this process dispatches through
	// Reserve: a pull then takes at most half the free slots for its
	// transaction, leaving the other half to the fast path meanwhile. (So
	// filling every slot from a backlog in the queue takes a few pulls:
	// half, a quarter, …)
	FastPath bool
	// Recorder, when set, records each call's duration and outcome.
	Recorder *instrument.Recorder
	Stats    Stats
	// Trace, when on, records a span per agent call, a child of the
	// task's trace, and its context is the agent function's.
	Trace *tracing.Tracer

	agents  map[string]*agent
	order   []string
	wake    chan struct{}
	replies chan *dt.AgentReply
	wg      sync.WaitGroup

	mu      sync.Mutex
	running context.Context // set while Run runs; nil before and after
	ready   chan struct{}   // closed once Run has set running (see Ready)
	// backlog is set when a pull filled the slots it took, or found none
	// free, so requests may be waiting in the store for a slot to free up.
	backlog atomic.Bool
}

// New builds a runtime for the given agents.
func New(d store.Driver, c clock.Clock, instance string, log *slog.Logger, specs []Spec) *Runtime {
	rt := &Runtime{
		Driver: d, Clock: c, Instance: instance, Log: log, PollInterval: 200 * time.Millisecond, IdlePoll: 30 * time.Second,
		agents: map[string]*agent{}, wake: make(chan struct{}, 1), replies: make(chan *dt.AgentReply, 4096),
		ready: make(chan struct{}),
	}
	for _, s := range specs {
		if s.Concurrency <= 0 {
			s.Concurrency = 64
		}
		s.Retry = s.Retry.withDefaults()
		if s.BreakerFailures == 0 {
			s.BreakerFailures = 10
		}
		if s.BreakerOpen <= 0 {
			s.BreakerOpen = 2 * time.Second
		}
		a := &agent{spec: s}
		failures := s.BreakerFailures
		a.breaker = gobreaker.NewCircuitBreaker[[]byte](gobreaker.Settings{
			Name: s.Name,
			// Several trial calls when half-open, so one hung trial does
			// not shut the agent out until its deadline.
			MaxRequests: uint32(max(1, s.Concurrency/8)),
			Timeout:     s.BreakerOpen,
			ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= failures },
			// Business errors say nothing about the service's health.
			IsSuccessful: func(err error) bool { return err == nil || rt.permanent(err) },
			// Our own deadline passing is not the service failing: calls
			// dispatched together would otherwise time out together and
			// trip the breaker for every later step.
			IsExcluded: func(err error) bool {
				return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
			},
		})
		rt.agents[s.Name] = a
		rt.order = append(rt.order, s.Name)
	}
	return rt
}

// Ready is closed once Run has released the requests claimed before a
// restart and takes requests: from then on Reserve can succeed. A
// scheduler of the same process waits for it before its first claim, so
// that its first dispatches take the fast path rather than the queue.
// Run may be called once.
func (rt *Runtime) Ready() <-chan struct{} { return rt.ready }

// Has reports whether the runtime runs the named agent.
func (rt *Runtime) Has(name string) bool { _, ok := rt.agents[name]; return ok }

// Health is how one of this process's agents is doing.
type Health struct {
	Agent string
	// Breaker is its circuit breaker's state: "closed", "open" or
	// "half-open".
	Breaker string
	// InFlight is the calls it is making now (call slots taken).
	InFlight int
	// Calls and Failures count its function's calls in the last five
	// minutes (recent.Span), retries included; a call refused by the open
	// breaker is not one.
	Calls, Failures int
}

// Health reports every agent this runtime runs, by name.
func (rt *Runtime) Health() []Health {
	now := rt.Clock.Now()
	out := make([]Health, 0, len(rt.agents))
	for name, a := range rt.agents {
		calls, failures := a.recent.Counts(now)
		out = append(out, Health{Agent: name, Breaker: a.breaker.State().String(), InFlight: int(a.active.Load()), Calls: calls, Failures: failures})
	}
	slices.SortFunc(out, func(a, b Health) int { return strings.Compare(a.Agent, b.Agent) })
	return out
}

// Reserve takes a free call slot of the named agent for a request the
// scheduler is about to dispatch in this process (the fast path). On ok the
// request is marked claimed by the returned instance and InProcess (no
// request row is stored) and must be passed to Dispatch after commit, or to
// Unreserve if the transaction failed.
func (rt *Runtime) Reserve(name string) (string, bool) {
	a := rt.agents[name]
	if a == nil {
		return "", false
	}
	rt.mu.Lock()
	running := rt.running != nil
	rt.mu.Unlock()
	if !running {
		return "", false
	}
	for {
		n := a.active.Load()
		if n >= int64(a.spec.Concurrency) {
			return "", false
		}
		if a.active.CompareAndSwap(n, n+1) {
			return rt.Instance, true
		}
	}
}

// Unreserve returns the slots of reserved requests whose dispatch rolled back.
func (rt *Runtime) Unreserve(reqs []*dt.AgentRequest) {
	for _, r := range reqs {
		if r.ClaimedBy == rt.Instance {
			rt.agents[r.Agent].active.Add(-1)
		}
	}
}

// Dispatch starts the calls of committed requests reserved through Reserve,
// and wakes the puller if other requests are for agents it runs.
func (rt *Runtime) Dispatch(reqs []*dt.AgentRequest) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	wake := false
	for _, r := range reqs {
		a := rt.agents[r.Agent]
		switch {
		case a == nil:
		case r.ClaimedBy != rt.Instance:
			wake = true
		case rt.running == nil:
			// Shutting down: a restart with the same ID dispatches it
			// again (it has no request row), or the supervisor recovers
			// the step after its CompleteBy.
			a.active.Add(-1)
		default:
			rt.wg.Add(1)
			go rt.handle(rt.running, a, r)
		}
	}
	if wake {
		rt.Wake()
	}
}

// Wake tells the runtime that requests may be waiting.
func (rt *Runtime) Wake() {
	select {
	case rt.wake <- struct{}{}:
	default:
	}
}

func (rt *Runtime) permanent(err error) bool {
	return rt.IsPermanent != nil && rt.IsPermanent(err)
}

// Run pulls and runs requests until ctx ends, then waits for calls in flight
// to finish or reach their deadlines.
func (rt *Runtime) Run(ctx context.Context) error {
	if len(rt.agents) == 0 {
		close(rt.ready)
		<-ctx.Done()
		return nil
	}
	// Requests this instance had claimed before a restart are ours to redo.
	if err := rt.Driver.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		n, err := x.RequestRelease(ctx, &store.RequestReleaseParams{ClaimedBy: rt.Instance})
		if n > 0 {
			rt.Log.Info("agent runtime resumed requests claimed before restart", "count", n)
		}
		return err
	}); err != nil && ctx.Err() == nil {
		rt.Log.Error("release claimed requests", "err", err)
	}
	rt.mu.Lock()
	rt.running = ctx
	rt.mu.Unlock()
	close(rt.ready)
	writerDone := make(chan struct{})
	writerCtx, stopWriter := context.WithCancel(context.WithoutCancel(ctx))
	go func() { defer close(writerDone); rt.writeReplies(writerCtx) }()

	timer := time.NewTimer(rt.PollInterval)
	defer timer.Stop()
	failures := 0
	for {
		more, err := rt.pull(ctx)
		if err != nil && ctx.Err() == nil {
			failures++
			if failures == 1 || failures%20 == 0 {
				rt.Log.Warn("claim agent requests failed; retrying with back-off", "failures", failures, "err", err)
			}
			select {
			case <-ctx.Done():
			case <-time.After(min(rt.PollInterval<<min(failures-1, 10), 5*time.Second)):
			}
			continue
		}
		if failures > 0 {
			rt.Log.Info("agent runtime recovered", "after_failures", failures)
			failures = 0
		}
		if more {
			continue
		}
		if rt.Live != nil && rt.Live() {
			timer.Reset(max(rt.PollInterval, rt.IdlePoll))
		} else {
			timer.Reset(rt.PollInterval)
		}
		select {
		case <-ctx.Done():
			rt.mu.Lock()
			rt.running = nil
			rt.mu.Unlock()
			rt.wg.Wait()
			stopWriter()
			<-writerDone
			return nil
		case <-rt.wake:
		case <-timer.C:
		}
	}
}

// pull claims requests for every agent with free slots, in one transaction.
// more reports that some agent filled the slots it took.
func (rt *Runtime) pull(ctx context.Context) (more bool, err error) {
	var (
		claimed []*dt.AgentRequest
		taken   = make(map[string]int, len(rt.order))
		got     = make(map[string]int, len(rt.order))
		full    bool // some agent had no free slot: wake when one frees up
	)
	// Give back the slots taken but not used, whatever happens.
	giveBack := func() {
		for name, n := range taken {
			rt.agents[name].active.Add(-int64(n - got[name]))
		}
		clear(taken)
	}
	err = rt.Driver.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		clear(got) // an earlier run of fn rolled back: nothing it claimed holds
		giveBack()
		claimed, more, full = claimed[:0], false, false
		now := rt.Clock.Now()
		for _, name := range rt.order {
			// Take the slots before claiming, inside the transaction: the
			// fast path (Reserve) cannot hand out the same ones meanwhile,
			// and no slot is held while waiting for the write lock. With a
			// fast path, take only half: taking all would turn it away for
			// the transaction's length, and every request turned away
			// would go through the queue and wake this pull again.
			n := rt.agents[name].take(rt.FastPath)
			if n == 0 {
				full = true
				continue
			}
			taken[name] = n
			reqs, err := x.RequestClaim(ctx, &store.RequestClaimParams{Agent: name, ClaimedBy: rt.Instance, Now: now, Limit: n})
			if err != nil {
				return err
			}
			if len(reqs) == n {
				more = true
			}
			got[name] = len(reqs)
			claimed = append(claimed, reqs...)
		}
		return nil
	})
	if err != nil {
		clear(got)
	}
	giveBack()
	if err != nil {
		return false, err
	}
	rt.backlog.Store(more || full)
	rt.mu.Lock()
	defer rt.mu.Unlock()
	for _, r := range claimed {
		rt.wg.Add(1)
		go rt.handle(ctx, rt.agents[r.Agent], r)
	}
	return more && len(claimed) > 0, nil
}

// take takes the agent's free call slots, or half of them (rounded up)
// when half is set, and returns how many.
func (a *agent) take(half bool) int {
	for {
		n := a.active.Load()
		free := int64(a.spec.Concurrency) - n
		if free <= 0 {
			return 0
		}
		if half {
			free = (free + 1) / 2
		}
		if a.active.CompareAndSwap(n, n+free) {
			return int(free)
		}
	}
}

// callSlot is one taken call slot. It is freed once: when the call ends,
// or, for a call abandoned at its deadline whose function ignores its
// context, when that function finally returns — so the agent never runs
// more than Concurrency functions at once.
type callSlot struct {
	rt    *Runtime
	a     *agent
	once  sync.Once
	mu    sync.Mutex
	state slotState // of the current attempt
}

type slotState int

const (
	slotRunning   slotState = iota // the function is running, the caller waits
	slotFinished                   // the function returned
	slotAbandoned                  // the caller left at the deadline; the function frees the slot
)

func (c *callSlot) free() {
	c.once.Do(func() {
		c.a.active.Add(-1)
		if c.rt.backlog.Load() {
			c.rt.Wake()
		}
	})
}

func (rt *Runtime) handle(ctx context.Context, a *agent, r *dt.AgentRequest) {
	defer rt.wg.Done()
	slot := &callSlot{rt: rt, a: a}
	defer func() {
		slot.mu.Lock()
		abandoned := slot.state == slotAbandoned
		slot.mu.Unlock()
		if !abandoned {
			slot.free()
		}
	}()
	ids := append(logattr.StepAttempt(r.TaskID, r.StepIndex, r.Attempt), logattr.Agent, a.spec.Name)
	left := r.CompleteBy.Sub(rt.Clock.Now())
	if left <= 0 {
		// Never start a call after CompleteBy.
		rt.Stats.AbandonedCalls.Add(1)
		rt.Log.Debug("agent call not started: the step's deadline has passed", ids...)
		return
	}
	// The call keeps running through a shutdown; only the deadline ends it.
	// Its context carries the step's IDs for the agent's own logs, and
	// the call's span when tracing.
	callCtx := context.WithoutCancel(ctx)
	if rt.Trace.On() {
		var span trace.Span
		callCtx, span = rt.Trace.AgentCall(callCtx, r)
		ids = append(ids, logattr.Trace(callCtx)...)
		defer span.End()
	}
	callCtx, cancel := context.WithTimeout(logattr.With(callCtx, ids...), left)
	defer cancel()
	start := rt.Clock.Now()
	out, err := rt.call(callCtx, a, r, slot)
	if callCtx.Err() != nil || !rt.Clock.Now().Before(r.CompleteBy) {
		// Past CompleteBy the agent sends nothing back.
		rt.Stats.AbandonedCalls.Add(1)
		tracing.Outcome(callCtx, "abandoned", err)
		rt.Log.Debug("agent call abandoned: the step's deadline passed", append(ids, "duration", rt.Clock.Now().Sub(start))...)
		return
	}
	tracing.Outcome(callCtx, "", err)
	rt.Log.Debug("agent call finished", append(ids, "failed", err != nil, "duration", rt.Clock.Now().Sub(start))...)
	reply := &dt.AgentReply{TaskID: r.TaskID, StepIndex: r.StepIndex, Attempt: r.Attempt, Kind: r.Kind, Output: out,
		CreatedAt: rt.Clock.Now(), Scheduler: r.Scheduler, InProcess: r.InProcess}
	if err != nil {
		reply.Failed = true
		// An agent's error may quote anything (a remote service's answer):
		// make it storable here, the same for every driver.
		reply.Error = dt.Storable(err.Error())
		rt.Stats.Permanent.Add(1)
	}
	rt.Stats.Replies.Add(1)
	if rt.Deliver != nil && rt.Deliver(reply, r.Scheduler) {
		return
	}
	select {
	case rt.replies <- reply:
	case <-callCtx.Done():
		rt.Stats.AbandonedCalls.Add(1)
	}
}

// call runs the agent function with retries inside ctx's deadline. It returns
// a nil error on success, the permanent error, or whatever stopped it when the
// deadline passed.
func (rt *Runtime) call(ctx context.Context, a *agent, r *dt.AgentRequest, slot *callSlot) ([]byte, error) {
	policy := a.spec.Retry
	if r.Kind == dt.KindDo && rt.StepRetry != nil {
		if p := rt.StepRetry(r); p != nil {
			policy = p.withDefaults()
		}
	}
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = policy.InitialInterval
	b.MaxInterval = policy.MaxInterval
	b.RandomizationFactor = 0.5 // jitter
	opts := []backoff.RetryOption{backoff.WithBackOff(b), backoff.WithMaxElapsedTime(0)}
	if policy.MaxTries > 0 {
		opts = append(opts, backoff.WithMaxTries(policy.MaxTries))
	}
	permanent := func(err error) bool {
		return rt.permanent(err) || (policy.Retryable != nil && !policy.Retryable(err))
	}
	tries := 0
	out, err := backoff.Retry(ctx, func() ([]byte, error) {
		if tries++; tries > 1 {
			rt.Stats.AgentRetries.Add(1)
		}
		start := rt.Clock.Now()
		out, err := a.breaker.Execute(func() ([]byte, error) {
			rt.Stats.AgentCalls.Add(1)
			out, err := rt.invoke(ctx, a, r, slot)
			a.recent.Add(rt.Clock.Now(), err != nil)
			return out, err
		})
		outcome := instrument.CallOK
		defer func() { rt.Recorder.AgentCall(a.spec.Name, outcome, rt.Clock.Now().Sub(start)) }()
		if errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests) {
			rt.Stats.BreakerRefused.Add(1)
			outcome = instrument.CallRefused
			return nil, err
		}
		if err != nil && permanent(err) {
			outcome = instrument.CallPermanent
			return nil, backoff.Permanent(err)
		}
		if err != nil {
			outcome = instrument.CallError
		}
		return out, err
	}, opts...)
	if err != nil && !permanent(err) {
		// Transient to the end (tries exhausted): leave the step to the
		// supervisor, as if the deadline had passed.
		<-ctx.Done()
	}
	return out, err
}

// invoke calls the function but stops waiting at the deadline, so a function
// that ignores its context cannot hold the reply past CompleteBy. Such a
// function keeps its call slot until it returns.
func (rt *Runtime) invoke(ctx context.Context, a *agent, r *dt.AgentRequest, slot *callSlot) (out []byte, err error) {
	type result struct {
		out []byte
		err error
	}
	done := make(chan result, 1)
	slot.mu.Lock()
	slot.state = slotRunning
	slot.mu.Unlock()
	go func() {
		var res result
		defer func() {
			if p := recover(); p != nil {
				res = result{err: fmt.Errorf("agent %s panicked: %v", a.spec.Name, p)}
			}
			slot.mu.Lock()
			abandoned := slot.state == slotAbandoned
			slot.state = slotFinished
			slot.mu.Unlock()
			if abandoned {
				slot.free()
			}
			done <- res
		}()
		res.out, res.err = a.spec.Func(ctx, r)
	}()
	select {
	case res := <-done:
		return res.out, res.err
	case <-ctx.Done():
		slot.mu.Lock()
		if slot.state == slotRunning {
			slot.state = slotAbandoned
		}
		slot.mu.Unlock()
		return nil, ctx.Err()
	}
}

// insertReplies queues replies in the store and wakes their schedulers.
func insertReplies(ctx context.Context, x store.Executor, batch []*dt.AgentReply) error {
	if fault.Armed() {
		for _, r := range batch {
			if err := fault.Text(r.Error); err != nil {
				return err
			}
		}
	}
	if err := x.ReplyInsertMany(ctx, &store.ReplyInsertManyParams{Replies: batch}); err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, r := range batch {
		if r.Scheduler != "" && !seen[r.Scheduler] {
			seen[r.Scheduler] = true
			if err := store.Notify(ctx, x, &store.NotifyParams{Topic: store.TopicReplies(r.Scheduler)}); err != nil {
				return err
			}
		}
	}
	return nil
}

// flushReplies writes the replies still queued at shutdown, so work that
// finished is not redone. It gets a few seconds of its own.
func (rt *Runtime) flushReplies() {
	var batch []*dt.AgentReply
	for {
		select {
		case r := <-rt.replies:
			batch = append(batch, r)
			continue
		default:
		}
		break
	}
	if len(batch) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := rt.storeReplies(ctx, batch); err != nil {
		rt.Log.Warn("write agent replies at shutdown; their steps will be redone", "count", len(batch), "err", err)
	}
}

// storeReplies queues replies in the store in one transaction. If the
// store refuses a value of one of them (store.ErrBadData), it stores them
// in halves down to the one at fault, which it stores as a failure of its
// step (flow.Unstorable), or drops if even that is refused (the
// supervisor recovers its step after CompleteBy): one bad reply never
// holds back the others. On another error, done says how many replies at
// the batch's start are stored (or dropped) all the same.
func (rt *Runtime) storeReplies(ctx context.Context, batch []*dt.AgentReply) (done int, err error) {
	err = rt.Driver.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		return insertReplies(ctx, x, batch)
	})
	if err == nil {
		return len(batch), nil
	}
	if !errors.Is(err, store.ErrBadData) || ctx.Err() != nil {
		return 0, err
	}
	if len(batch) > 1 {
		h := len(batch) / 2
		n, err := rt.storeReplies(ctx, batch[:h])
		if err != nil {
			return n, err
		}
		n, err = rt.storeReplies(ctx, batch[h:])
		return h + n, err
	}
	f := flow.Unstorable(batch[0], err)
	ferr := rt.Driver.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		return insertReplies(ctx, x, []*dt.AgentReply{f})
	})
	if ferr == nil {
		rt.Log.Warn("agent reply could not be stored; stored as a failure of its step", append(logattr.StepAttempt(f.TaskID, f.StepIndex, f.Attempt), "err", err)...)
		return 1, nil
	}
	if errors.Is(ferr, store.ErrBadData) {
		rt.Log.Error("agent reply could not be stored, nor its failure; the supervisor recovers its step after CompleteBy",
			append(logattr.StepAttempt(f.TaskID, f.StepIndex, f.Attempt), "err", err, "failure_err", ferr)...)
		return 1, nil
	}
	return 0, ferr
}

// writeReplies batches replies for schedulers in other processes into the
// reply queue.
func (rt *Runtime) writeReplies(ctx context.Context) {
	for {
		var first *dt.AgentReply
		select {
		case first = <-rt.replies:
		case <-ctx.Done():
			rt.flushReplies()
			return
		}
		batch := []*dt.AgentReply{first}
	fill:
		for len(batch) < 512 {
			select {
			case r := <-rt.replies:
				batch = append(batch, r)
			default:
				break fill
			}
		}
		for {
			// Its own deadline, not ctx: ctx ends at shutdown, when the
			// batch in hand must still be written.
			wctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			n, err := rt.storeReplies(wctx, batch)
			cancel()
			batch = batch[n:]
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				rt.Log.Warn("write agent replies at shutdown; their steps will be redone", "count", len(batch), "err", err)
				break
			}
			rt.Log.Warn("write agent replies; retrying", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
}
