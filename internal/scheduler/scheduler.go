package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/clock"
	"github.com/drover-run/drover/internal/flow"
	"github.com/drover-run/drover/internal/logattr"
	"github.com/drover-run/drover/internal/notifier"
	"github.com/drover-run/drover/store"
)

// LocalAgents is the fast path to the agents of the scheduler's own
// process (package agentrt's Runtime): a dispatch reserves a free call
// slot, hands the request over in memory after commit instead of storing
// it, and a rollback returns the slots.
type LocalAgents interface {
	// Reserve takes a call slot of agent, if it runs here and has one free.
	Reserve(agent string) (claimedBy string, ok bool)
	// Dispatch hands over the requests of a committed transaction.
	Dispatch(reqs []*dt.AgentRequest)
	// Unreserve returns the slots of requests that were not dispatched.
	Unreserve(reqs []*dt.AgentRequest)
}

// UseLocalAgents makes a the scheduler's fast path: its Machine reserves
// slots of a, OnDispatch hands requests to a and OnRollback returns them.
func (s *Scheduler) UseLocalAgents(a LocalAgents) {
	s.Machine.Reserve = a.Reserve
	s.OnDispatch = a.Dispatch
	s.OnRollback = a.Unreserve
}

// Scheduler is one scheduler instance.
type Scheduler struct {
	Driver  store.Driver
	Clock   clock.Clock
	Machine *flow.Machine
	Log     *slog.Logger
	// ClaimBatch caps the tasks claimed per transaction.
	ClaimBatch int
	// MaxInFlight caps the tasks this instance holds at once, so deadlines
	// do not start ticking on more work than the agents can take.
	MaxInFlight int
	// PollInterval is how often the store is polled for tasks and replies
	// when nothing in this process signals new work.
	PollInterval time.Duration
	// Live, when set, reports whether notifications reach this process
	// (notifier.Hub.Live). While they do, and the Clock is the real one,
	// the scheduler polls the store only every IdlePoll (or PollInterval,
	// the longer) as a fallback: submits, recoveries and replies from
	// other processes notify it, and when it has nothing to claim it
	// sleeps until the next delayed task is due (TaskNextAvailable).
	Live func() bool
	// IdlePoll is the fallback poll while Live. Default DefaultIdlePoll.
	IdlePoll time.Duration
	// OnDispatch is told about every request dispatched, after commit (to
	// start or wake agents in this process).
	OnDispatch func([]*dt.AgentRequest)
	// OnRollback is told about the requests of a transaction that rolled
	// back (to return reserved agent slots).
	OnRollback func([]*dt.AgentRequest)
	// WakeMore, when set, is called after a tick whose claim came back
	// full: more tasks are probably waiting than this instance took, so
	// the process wakes another scheduler to share them.
	WakeMore func()
	// Fence, when set, runs first in every transaction; an error aborts it.
	// The client checks there that this process still holds its instance
	// lease, so a twin or a process that lost its lease cannot act.
	Fence func(ctx context.Context, x store.Executor, now time.Time) error

	inboxMu  sync.RWMutex // Deliver holds it shared; Run's exit exclusively
	stopped  bool         // Run has exited: Deliver refuses
	inbox    chan *dt.AgentReply
	pollNow  atomic.Bool      // replies for this instance are waiting in the store
	idle     bool             // the last tick claimed and applied nothing
	tickNow  time.Time        // the Clock's time in the last tick
	carry    *dt.AgentReply   // taken from the inbox while waiting; applied next tick
	deferred []*dt.AgentReply // replies whose tasks were locked elsewhere: next tick
	backoff  time.Duration    // wait before retrying deferred replies; grows while they stay
	putBack  bool             // the last tick put replies back in the store's queue
	wake     chan struct{}
	inFlight int
	failing  atomic.Bool // the last tick failed: backing off
	// accepting: Run has restored its in-flight requests and not stopped,
	// so tasks may be started for it outside its ticks (Adopt).
	accepting atomic.Bool

	// The room other goroutines see and take, changed together under
	// roomMu so that no reader sees a task both held and free.
	roomMu   sync.Mutex
	room     int // MaxInFlight - inFlight, as of the last change of inFlight
	adopted  int // tasks Adopt counted that no tick has added to inFlight yet
	reserved int // room set aside by Submits (Reserve) and claims (take) in progress
}

// DefaultIdlePoll is how often a scheduler polls the store while
// notifications arrive (Scheduler.Live).
const DefaultIdlePoll = 30 * time.Second

// nextDueLimit caps the tasks TaskNextAvailable reads.
const nextDueLimit = 1000

// New returns a scheduler for the given instance ID.
func New(d store.Driver, c clock.Clock, m *flow.Machine, log *slog.Logger) *Scheduler {
	return &Scheduler{
		Driver: d, Clock: c, Machine: m, Log: log,
		ClaimBatch: 256, MaxInFlight: 1024, PollInterval: 100 * time.Millisecond, IdlePoll: DefaultIdlePoll,
		inbox: make(chan *dt.AgentReply, 8192), wake: make(chan struct{}, 1),
	}
}

// Instance is the scheduler's LockedBy value.
func (s *Scheduler) Instance() string { return s.Machine.Instance }

// Room is how many more tasks this instance may hold, as of its last
// tick, less the tasks adopted and the room reserved since. Safe to call
// from any goroutine.
func (s *Scheduler) Room() int {
	s.roomMu.Lock()
	defer s.roomMu.Unlock()
	return s.room - s.adopted - s.reserved
}

// Accepting reports whether tasks may be started for this instance outside
// its own ticks (flow.Start): it is running, has stored again the requests
// of its steps in flight before a restart, and its transactions are not
// failing. Safe to call from any goroutine.
func (s *Scheduler) Accepting() bool { return s.accepting.Load() && !s.failing.Load() }

// Reserve sets aside room for up to n tasks that a transaction of this
// process is about to start for this instance (a Submit's, see flow.Start)
// and returns how many it set aside: none if the scheduler does not accept.
// The caller then calls Adopt with what it started and what it reserved.
// The scheduler's own claims set their room aside the same way, so neither
// takes the other's. Safe to call from any goroutine.
func (s *Scheduler) Reserve(n int) int {
	if !s.Accepting() {
		return 0
	}
	return s.take(n, 0)
}

// take sets aside up to n of Room plus extra (room that the caller's own
// transaction frees) and returns how much it set aside.
func (s *Scheduler) take(n, extra int) int {
	s.roomMu.Lock()
	defer s.roomMu.Unlock()
	k := min(n, s.room-s.adopted-s.reserved+extra)
	if k <= 0 {
		return 0
	}
	s.reserved += k
	return k
}

// give hands back k of the room take set aside.
func (s *Scheduler) give(k int) {
	s.roomMu.Lock()
	s.reserved -= k
	s.roomMu.Unlock()
}

// Adopt counts the started tasks of a transaction that reserved room for
// reserved tasks (Reserve) and committed, and frees the reservation: the
// started tasks are held, and their replies come to this scheduler like
// those of its own claims. Room counts them at once, the next tick adds
// them to the in-flight count. Safe to call from any goroutine.
func (s *Scheduler) Adopt(started, reserved int) {
	s.roomMu.Lock()
	s.adopted += started
	s.reserved -= reserved
	s.roomMu.Unlock()
}

// Pick returns the scheduler of list, other than except, to wake for new
// tasks: the first with room for a whole claim batch, else the one with the
// most room; one whose transactions are failing only if all are. The order
// is list's, starting after except: a scheduler passing on a backlog
// (WakeMore) wakes the next one, so a backlog reaches every scheduler in
// turn. Preferring the first keeps light load on one scheduler, whose ticks
// then carry more tasks each, instead of spreading it into more, smaller
// transactions. It returns nil when there is no other scheduler.
func Pick(list []*Scheduler, except *Scheduler) *Scheduler {
	start := 0
	for i, s := range list {
		if s == except {
			start = i + 1
		}
	}
	var best *Scheduler
	for i := range list {
		s := list[(start+i)%len(list)]
		if s == except {
			continue
		}
		failing := s.failing.Load()
		if !failing && s.Room() >= s.ClaimBatch {
			return s
		}
		if best == nil || (best.failing.Load() && !failing) ||
			(best.failing.Load() == failing && s.Room() > best.Room()) {
			best = s
		}
	}
	return best
}

// setInFlight records the held-task count and the room it leaves.
func (s *Scheduler) setInFlight(n int) {
	s.roomMu.Lock()
	s.setInFlightLocked(n)
	s.roomMu.Unlock()
}

func (s *Scheduler) setInFlightLocked(n int) {
	s.inFlight = n
	s.room = s.MaxInFlight - n
}

// Wake tells the scheduler that tasks may be waiting.
func (s *Scheduler) Wake() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// WakeReplies tells the scheduler that replies for it wait in the store's
// reply queue (another process wrote them).
func (s *Scheduler) WakeReplies() {
	s.pollNow.Store(true)
	s.Wake()
}

// Deliver hands a reply from an agent in this process to the scheduler. It
// returns false when the inbox is full; the caller then writes the reply to
// the store's reply queue.
func (s *Scheduler) Deliver(r *dt.AgentReply) bool {
	s.inboxMu.RLock()
	defer s.inboxMu.RUnlock()
	if s.stopped {
		return false
	}
	select {
	case s.inbox <- r:
		return true
	default:
		return false
	}
}

// shutdown refuses further deliveries and applies the replies already in
// the inbox, so calls that finished during shutdown are not redone.
func (s *Scheduler) shutdown() {
	s.accepting.Store(false)
	s.inboxMu.Lock()
	s.stopped = true
	s.inboxMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for s.carry != nil || len(s.inbox) > 0 || len(s.deferred) > 0 {
		if _, err := s.tick(ctx, tickOptions{applyOnly: true}); err != nil {
			s.Log.Warn("apply replies at shutdown; their steps will be redone", "err", err)
			return
		}
	}
}

// Run loops until ctx ends. A scheduler restarted with the same instance ID
// finds its tasks still locked to it and goes on: it first stores again the
// requests of its in-flight steps that had none (restoreOnce); the others
// are still queued, and replies to them still apply.
func (s *Scheduler) Run(ctx context.Context) error {
	defer s.shutdown()
	s.setInFlight(s.inFlight)
	timer := time.NewTimer(s.PollInterval)
	defer timer.Stop()
	var lastPoll, lastCount time.Time
	failures := 0
	restored := false
	for {
		live := notifier.Relied(s.Clock, s.Live)
		interval := s.PollInterval
		if live {
			interval = max(s.PollInterval, s.IdlePoll)
		}
		// The store's reply queue and the held-task count are read on a
		// timer, busy or not: a scheduler with a backlog must still apply
		// replies from agents in other processes before their deadlines.
		// While notifications arrive, replies for it notify it (pollNow),
		// and the timer is only a fallback.
		poll := s.pollNow.Swap(false) || time.Since(lastPoll) >= interval
		if poll {
			lastPoll = time.Now()
		}
		// The in-flight count only drifts when the supervisor or an operator
		// takes tasks away: a recount a second is plenty, and none while
		// this instance holds nothing (but a fallback's).
		recount := max(s.PollInterval, time.Second)
		if live && s.inFlight == 0 {
			recount = interval
		}
		if time.Since(lastCount) >= recount {
			lastCount = time.Now()
			s.recount(ctx)
		}
		var busy bool
		err := s.restoreOnce(ctx, &restored)
		if err == nil {
			s.accepting.Store(true)
			busy, err = s.tick(ctx, tickOptions{pollStore: poll, redeliver: true})
		}
		if err != nil && ctx.Err() == nil {
			// Back off while the store fails (a database restart, say), and
			// log the first failure and then only now and then. Another
			// scheduler may get through: hand it the work.
			s.failing.Store(true)
			if s.WakeMore != nil {
				s.WakeMore()
			}
			failures++
			if failures == 1 || failures%20 == 0 {
				s.Log.Warn("scheduler tick failed; retrying with back-off", "instance", s.Instance(), "failures", failures, "err", err)
			}
			select {
			case <-ctx.Done():
			case <-time.After(retryDelay(s.PollInterval, failures)):
			}
			continue
		}
		if failures > 0 && err == nil {
			s.Log.Info("scheduler recovered", "instance", s.Instance(), "after_failures", failures)
			failures = 0
			s.failing.Store(false)
		}
		if busy {
			if ctx.Err() != nil {
				return nil
			}
			// Let the goroutines this tick started run first: an agent in
			// this process that answers at once then has its reply in the
			// inbox for the next tick, instead of waiting a whole tick
			// more (new goroutines otherwise wait until this one blocks,
			// which is in the next tick's first round trip).
			runtime.Gosched()
			continue
		}
		// Deferred replies (in memory, or put back in the store's queue)
		// wait for another transaction's lock, which a claim elsewhere
		// holds for a few milliseconds: retry soon, then less and less
		// often while something else keeps the lock.
		var retry <-chan time.Time
		if len(s.deferred) > 0 || s.pollNow.Load() {
			retry = time.After(s.backoff)
		}
		wait := s.PollInterval
		if live {
			wait = s.idleWait(ctx, interval)
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return nil
		case <-retry:
		case <-s.wake:
		case r := <-s.inbox:
			s.carry = r
		case <-timer.C:
		}
	}
}

// idleWait is how long a scheduler relying on notifications waits for
// one: until the next delayed task is due, when its last tick found
// nothing, at most the fallback poll interval.
func (s *Scheduler) idleWait(ctx context.Context, interval time.Duration) time.Duration {
	if !s.idle {
		return min(interval, s.PollInterval)
	}
	// As of the tick's time: a task that became available since is due
	// at once (a task the tick could not see).
	next, err := s.Driver.Reader().TaskNextAvailable(ctx, &store.TaskNextAvailableParams{Now: s.tickNow, Limit: nextDueLimit, Due: true})
	switch {
	case err != nil:
		return s.PollInterval
	case next.IsZero():
		return interval
	case !next.After(s.tickNow):
		// A task claimable now that the tick's claim passed over (another
		// transaction held it locked, and may let it go without notifying),
		// or a bound from a truncated read (many delayed tasks of raised
		// priority): poll, as without notifications.
		return s.PollInterval
	}
	return notifier.Until(s.Clock.Now(), time.Millisecond, interval, next)
}

// recount refreshes the in-flight count from the store: the supervisor and
// operators take tasks away from this instance without telling it.
func (s *Scheduler) recount(ctx context.Context) {
	// Tasks adopted before the count are in it (Adopt comes after their
	// commit): the count replaces them.
	s.roomMu.Lock()
	adopted := s.adopted
	s.roomMu.Unlock()
	n, err := s.Driver.Reader().TaskCountLockedBy(ctx, &store.TaskCountLockedByParams{Instance: s.Instance()})
	if err == nil {
		s.roomMu.Lock()
		s.setInFlightLocked(n)
		s.adopted -= adopted
		s.roomMu.Unlock()
	}
	if s.Machine.NamespaceMaxInFlight > 0 && s.Machine.NamespacesInUse() {
		// The held tasks per namespace, likewise.
		ts, err := s.Driver.Reader().TaskListLockedBy(ctx, &store.TaskListLockedByParams{Instance: s.Instance(), Limit: 2 * s.MaxInFlight})
		if err == nil {
			held := map[string]int{}
			for _, t := range ts {
				held[dt.NamespaceOf(t.ID)]++
			}
			s.Machine.SetNamespaceHeld(held)
		}
	}
}

// restoreOnce stores the requests of the steps this instance had handed
// over in memory before it stopped (flow.Machine.Restore), once: the first
// time it succeeds sets *done.
func (s *Scheduler) restoreOnce(ctx context.Context, done *bool) error {
	if *done {
		return nil
	}
	var restored []*dt.AgentRequest
	err := s.Driver.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		now := s.Clock.Now()
		if s.Fence != nil {
			if err := s.Fence(ctx, x, now); err != nil {
				return err
			}
		}
		var err error
		restored, err = s.Machine.Restore(ctx, x, now, max(s.MaxInFlight, restoreLimit))
		return err
	})
	if err != nil {
		return fmt.Errorf("restore in-flight requests: %w", err)
	}
	*done = true
	if len(restored) > 0 {
		s.Log.Info("scheduler stored again the requests of steps in flight before a restart", "instance", s.Instance(), "count", len(restored))
		if s.OnDispatch != nil {
			s.OnDispatch(restored)
		}
	}
	return nil
}

// restoreLimit is the least number of held tasks restoreOnce looks at.
const restoreLimit = 10000

// Tick runs one loop iteration: it applies the replies waiting in the inbox
// (and, with pollStore, those in the store's reply queue), then claims new
// tasks, in one transaction. busy reports that more work is probably waiting.
func (s *Scheduler) Tick(ctx context.Context, pollStore bool) (busy bool, err error) {
	return s.tick(ctx, tickOptions{pollStore: pollStore, redeliver: true})
}

type tickOptions struct {
	pollStore bool // also take replies from the store's reply queue
	redeliver bool // on rollback, put inbox replies back
	applyOnly bool // apply replies, claim nothing (shutdown)
	// storeLimit caps the replies taken from the store's queue (0: the
	// tick's limit).
	storeLimit int
	// fail: apply every reply as a failure for this reason (its own
	// output or error could not be stored).
	fail error
}

// tick gathers the replies waiting for this scheduler and runs a tick on
// them. If the store refuses a value the tick writes (store.ErrBadData),
// the work is redone in parts (isolate), so that one bad reply does not
// hold back the others.
func (s *Scheduler) tick(ctx context.Context, o tickOptions) (busy bool, err error) {
	limit := 4 * s.ClaimBatch
	replies, retried := s.deferred, len(s.deferred)
	s.deferred = nil
	if s.carry != nil {
		replies = append(replies, s.carry)
		s.carry = nil
	}
fill:
	for len(replies) < limit {
		select {
		case r := <-s.inbox:
			replies = append(replies, r)
		default:
			break fill
		}
	}
	res, err := s.run(ctx, replies, retried, o)
	if err != nil && errors.Is(err, store.ErrBadData) && ctx.Err() == nil {
		return s.isolate(ctx, replies, o, err)
	}
	if err != nil {
		if o.redeliver {
			s.redeliver(replies)
		}
		return false, err
	}
	return res.busy, nil
}

// redeliver hands the replies of a transaction that rolled back back to
// the inbox, so a later tick applies them (they are fenced, so order is
// harmless). Replies that do not fit are dropped: the supervisor recovers
// their steps, and the agent's idempotency key makes the redo safe.
func (s *Scheduler) redeliver(replies []*dt.AgentReply) {
	for _, r := range replies {
		if !s.Deliver(r) {
			break
		}
	}
}

// runResult is what one tick transaction did.
type runResult struct {
	busy      bool // more work is probably waiting
	fromStore int  // replies taken from the store's queue
}

// run runs one tick transaction: it applies replies (and, with pollStore,
// those in the store's reply queue), then claims new tasks (unless
// applyOnly).
func (s *Scheduler) run(ctx context.Context, replies []*dt.AgentReply, retried int, o tickOptions) (runResult, error) {
	// The claims' room is set aside (take) like a started Submit's, and
	// given back once setInFlight has counted what they took.
	taken := 0
	defer func() { s.give(taken) }()
	// Count the adopted tasks as held (MaxInFlight may also have been set
	// since Run began).
	s.roomMu.Lock()
	s.setInFlightLocked(s.inFlight + s.adopted)
	s.adopted = 0
	s.roomMu.Unlock()
	limit := 4 * s.ClaimBatch
	storeLimit := limit
	if o.storeLimit > 0 {
		storeLimit = o.storeLimit
	}
	var (
		dispatched []*dt.AgentRequest
		released   int
		claimed    int
		asked      int
		fromStore  int
		again      bool             // a task of an ordering key became claimable
		deferred   []*dt.AgentReply // replies for tasks locked elsewhere
		putBack    int              // of those, taken from the store and put back
		applied    int              // replies the tick applied
		tickNow    time.Time        // the transaction's time
	)
	err := s.Driver.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		// Read the clock once the write lock is held: waiting for it must
		// not make a stale reply look on time, nor start a step late.
		now := s.Clock.Now()
		tickNow = now
		dispatched, released, claimed, asked, fromStore, again, deferred, putBack = nil, 0, 0, 0, 0, false, nil, 0
		if s.Fence != nil {
			if err := s.Fence(ctx, x, now); err != nil {
				return err
			}
		}
		all := replies
		if o.pollStore {
			more, err := x.ReplyTake(ctx, &store.ReplyTakeParams{Scheduler: s.Instance(), Limit: storeLimit})
			if err != nil {
				return err
			}
			fromStore = len(more)
			all = append(all[:len(replies):len(replies)], more...)
		}
		if o.fail != nil {
			all = failed(all, o.fail)
		}
		applied = len(all)
		if o.applyOnly {
			reqs, rel, err := s.Machine.ApplyReplies(ctx, x, now, all)
			dispatched, released = reqs, rel
			return err
		}
		// The replies and the claim are read together (one round trip
		// where the store can), so the claim asks for the room there is
		// before this tick's replies free any.
		s.give(taken) // a callback run again starts afresh
		taken = s.take(s.ClaimBatch, 0)
		asked = taken
		if len(all) == 0 && asked == 0 {
			return nil
		}
		res, err := s.Machine.Tick(ctx, x, now, all, asked)
		dispatched, claimed, released, again = res.Requests, res.Claimed, res.Released, res.More
		if err != nil {
			return err
		}
		// Hold on only to the room of the tasks the claim took.
		s.give(taken - claimed)
		taken = claimed
		// A reply whose task another transaction held locked waits for a
		// later tick: in memory if it came from the inbox, back in the
		// store's queue (this transaction deletes it there) if from it.
		var back []*dt.AgentReply
		deferred, back = splitDeferred(replies, res.Deferred)
		if len(back) > 0 {
			if err := x.ReplyInsertMany(ctx, &store.ReplyInsertManyParams{Replies: back}); err != nil {
				return err
			}
			putBack = len(back)
		}
		// The replies made room and the claim was full: fill the room now.
		if claimed == asked {
			if extra := s.take(s.ClaimBatch-asked, released); extra > 0 {
				taken += extra
				more, err := s.Machine.Tick(ctx, x, now, nil, extra)
				dispatched = append(dispatched, more.Requests...)
				if err != nil {
					return err
				}
				s.give(extra - more.Claimed)
				taken -= extra - more.Claimed
				asked, claimed, released = asked+extra, claimed+more.Claimed, released+more.Released
				again = again || more.More
			}
		}
		return nil
	})
	if err != nil {
		s.Machine.Discard()
		if s.OnRollback != nil && len(dispatched) > 0 {
			s.OnRollback(dispatched)
		}
		// The caller hands the replies back (tick) or splits them (isolate).
		return runResult{fromStore: fromStore}, err // how many the rolled-back try took
	}
	s.Machine.Commit()
	s.deferLater(replies[:retried], deferred, putBack)
	s.setInFlight(s.inFlight + claimed - released)
	if s.Log.Enabled(ctx, slog.LevelDebug) {
		for _, r := range dispatched {
			attrs := append(logattr.StepAttempt(r.TaskID, r.StepIndex, r.Attempt), logattr.Agent, r.Agent, "kind", r.Kind,
				"instance", s.Instance())
			s.Log.Debug("scheduler dispatched a step", append(attrs, logattr.TraceOf(r.TraceContext)...)...)
		}
	}
	if len(dispatched) > 0 && s.OnDispatch != nil {
		s.OnDispatch(dispatched)
	}
	if asked > 0 && claimed == asked && s.WakeMore != nil {
		s.WakeMore()
	}
	busy := (asked > 0 && claimed == asked) || again || len(s.inbox) > 0 || fromStore-putBack == storeLimit
	s.idle = asked > 0 && claimed == 0 && applied == 0 && released == 0
	s.tickNow = tickNow
	return runResult{busy: busy, fromStore: fromStore}, nil
}

// isolate redoes the work of a tick whose transaction the store refused
// because of a value of one of its items (cause wraps store.ErrBadData):
// the claim alone, then the replies of the store's queue one per
// transaction, then the inbox replies in halves until the one at fault is
// alone. Every other reply commits; the one at fault is applied as a
// failure of its step (flow.Unstorable), so its task follows its failure
// policy. This costs transactions only when a tick
// failed this way.
func (s *Scheduler) isolate(ctx context.Context, replies []*dt.AgentReply, o tickOptions, cause error) (busy bool, err error) {
	s.Log.Warn("scheduler: the store refused a value of a tick; applying its replies apart", "instance", s.Instance(), "replies", len(replies), "err", cause)
	if !o.applyOnly {
		res, err := s.run(ctx, nil, 0, tickOptions{})
		if err != nil {
			// The claim itself: nothing to split (a claim's tasks hold
			// only what was stored already). Back off as for any failure.
			s.redeliver(replies)
			return false, err
		}
		busy = res.busy
	}
	if o.pollStore {
		if err := s.applyStoredApart(ctx, cause); err != nil {
			s.redeliver(replies)
			return false, err
		}
	}
	if err := s.applyApart(ctx, replies); err != nil {
		return false, err
	}
	return busy || len(s.inbox) > 0, nil
}

// applyStoredApart applies the replies of the store's queue (as many as
// a tick takes) in chunks that halve while the store refuses a value of
// theirs; the reply at fault, alone, is applied as a failure, or dropped
// if even that is refused (it would come back every tick).
func (s *Scheduler) applyStoredApart(ctx context.Context, cause error) error {
	limit := 4 * s.ClaimBatch
	k := max(1, limit/2)
	for done := 0; done < limit; {
		o := tickOptions{applyOnly: true, pollStore: true, storeLimit: k}
		res, err := s.run(ctx, nil, 0, o)
		if errors.Is(err, store.ErrBadData) && res.fromStore > 1 {
			k = min(k, res.fromStore) / 2
			continue
		}
		if errors.Is(err, store.ErrBadData) {
			o.fail = err
			res, err = s.run(ctx, nil, 0, o)
			s.logFailed(err, cause, nil)
			if errors.Is(err, store.ErrBadData) {
				err = s.Driver.InTx(ctx, func(ctx context.Context, x store.Executor) error {
					rs, err := x.ReplyTake(ctx, &store.ReplyTakeParams{Scheduler: s.Instance(), Limit: 1})
					res.fromStore = len(rs)
					return err
				})
			}
			k = max(1, limit/2)
		}
		if err != nil {
			return err
		}
		if res.fromStore == 0 {
			return nil
		}
		done += res.fromStore
	}
	return nil
}

// applyApart applies replies, halving them while the store refuses a value
// of theirs, down to the reply at fault, which is then applied as a
// failure. On another error it hands the replies not applied back to the
// inbox and returns the error.
func (s *Scheduler) applyApart(ctx context.Context, replies []*dt.AgentReply) error {
	if len(replies) == 0 {
		return nil
	}
	_, err := s.run(ctx, replies, 0, tickOptions{applyOnly: true})
	switch {
	case err == nil:
		return nil
	case !errors.Is(err, store.ErrBadData) || ctx.Err() != nil:
		s.redeliver(replies)
		return err
	case len(replies) == 1:
		_, ferr := s.run(ctx, replies, 0, tickOptions{applyOnly: true, fail: err})
		s.logFailed(ferr, err, replies[0])
		if ferr != nil && !errors.Is(ferr, store.ErrBadData) {
			s.redeliver(replies)
			return ferr
		}
		return nil
	}
	h := len(replies) / 2
	if err := s.applyApart(ctx, replies[:h]); err != nil {
		s.redeliver(replies[h:])
		return err
	}
	return s.applyApart(ctx, replies[h:])
}

// logFailed logs a reply applied as a failure because the store refused
// a value of it (err nil), or dropped because even that failed: the
// supervisor then recovers its step after CompleteBy. r is the reply when
// known (nil: one the store handed back, not read).
func (s *Scheduler) logFailed(err, cause error, r *dt.AgentReply) {
	attrs := []any{"instance", s.Instance(), "err", cause}
	if r != nil {
		attrs = append(attrs, logattr.StepAttempt(r.TaskID, r.StepIndex, r.Attempt)...)
	}
	if err == nil {
		s.Log.Warn("scheduler: a reply could not be stored; its step failed", attrs...)
		return
	}
	s.Log.Error("scheduler: a reply could not be stored, nor its failure; the supervisor recovers its step after CompleteBy",
		append(attrs, "failure_err", err)...)
}

// failed returns replies as failures: a value of theirs could not be
// stored, for the reason cause.
func failed(replies []*dt.AgentReply, cause error) []*dt.AgentReply {
	out := make([]*dt.AgentReply, len(replies))
	for i, r := range replies {
		out[i] = flow.Unstorable(r, cause)
	}
	return out
}

// splitDeferred splits a tick's deferred replies (in the order of the
// replies it was given: those from the inbox, then those from the store)
// into the ones from inbox and the ones from the store.
func splitDeferred(inbox, deferred []*dt.AgentReply) (fromInbox, fromStore []*dt.AgentReply) {
	j := 0
	for _, r := range inbox {
		if j < len(deferred) && deferred[j] == r {
			j++
		}
	}
	return deferred[:j], deferred[j:]
}

// deferLater keeps a committed tick's deferred replies for the next tick
// and sets how long to wait for it: a millisecond after a new collision,
// doubling (up to PollInterval) while the same replies stay deferred, as
// when a transaction elsewhere holds a task long. retried are the replies
// the tick retried; putBack counts those it put back in the store's queue.
func (s *Scheduler) deferLater(retried, deferred []*dt.AgentReply, putBack int) {
	s.deferred = deferred
	if putBack > 0 {
		s.pollNow.Store(true)
	}
	// Deferred keeps the replies' order, retried ones first.
	stuck := (putBack > 0 && s.putBack) || (len(deferred) > 0 && slices.Contains(retried, deferred[0]))
	switch {
	case stuck:
		s.backoff = min(2*s.backoff, s.PollInterval)
	case len(deferred) > 0 || putBack > 0:
		s.backoff = time.Millisecond
	default:
		s.backoff = 0
	}
	s.putBack = putBack > 0
}

// retryDelay doubles base for each consecutive failure, up to 5s.
func retryDelay(base time.Duration, failures int) time.Duration {
	return min(base<<min(failures-1, 10), 5*time.Second)
}
