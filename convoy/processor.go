package convoy

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/fault"
	"github.com/drover-run/drover/internal/logattr"
	"github.com/drover-run/drover/internal/notifier"
	"github.com/drover-run/drover/internal/tracing"
	"github.com/drover-run/drover/store"
)

// Handler processes one message of a Processor. Returning nil completes the
// message; an error abandons it (it is delivered again after a back-off
// delay, until the queue's MaxDeliveryCount); an error wrapped with
// DeadLetterError dead-letters it. ctx is cancelled when the processor stops
// hard or when the session's lock is lost; the message is then not settled
// by this handler (it is delivered again).
type Handler func(ctx context.Context, m *ReceivedMessage) error

// HandlerTx is a Handler whose writes go through x, inside the store
// transaction that also completes the message: the writes and the
// completion commit together or not at all (a crash in between loses
// nothing and repeats nothing). A HandlerTx must make its durable effects
// only through x (store calls, PublishWith, or the application's own
// statements on the transaction that postgres.TxOf(x) or sqlite.TxOf(x)
// return), and must return the error of any of them that fails. Returning
// an error rolls back its writes.
type HandlerTx func(ctx context.Context, x store.Executor, m *ReceivedMessage) error

// ProcessorOptions tune a Processor. Zero values take the defaults.
type ProcessorOptions struct {
	// MaxSessions caps the sessions held at once, and so the handlers
	// running at once (one per session). Default 64.
	MaxSessions int
	// IdleTimeout releases a session that had nothing to deliver for this
	// long, so consumers elsewhere get their turn. Default 1s. A processor
	// holding MaxSessions sessions releases the ones with nothing to deliver
	// at once, to make room for others that may be waiting.
	IdleTimeout time.Duration
	// MaxHold, when positive, releases a session held this long at its next
	// settle even if it is busy, so hot sessions cannot starve others when
	// every slot is taken. Default 0: no limit.
	MaxHold time.Duration
	// LockDuration overrides the queue's lock duration for the sessions
	// this processor accepts. Default: the queue's.
	LockDuration time.Duration
	// AbandonDelay is the base delay before a message whose handler failed
	// is delivered again; it doubles with every delivery up to
	// MaxAbandonDelay, with jitter. Default 1s; negative: no delay.
	AbandonDelay time.Duration
	// MaxAbandonDelay caps the abandon delay. Default 1m.
	MaxAbandonDelay time.Duration
	// PollInterval is how often held sessions with nothing deliverable and
	// the queue are looked at again when no notification arrives. Default:
	// the Client's. A processor that holds no session and found none
	// sleeps longer while notifications arrive (IdlePoll).
	PollInterval time.Duration
	// OnError, when set, is told about what goes wrong outside handlers:
	// store round failures, and settles rejected because the session lock
	// was lost (errors wrapping ErrLockLost). It runs on the processor's
	// pump goroutine and must not block.
	OnError func(error)
}

// ProcessorStats counts what a processor did since it was created.
type ProcessorStats struct {
	Completed    int64 // messages completed
	Abandoned    int64 // messages abandoned after a handler error
	DeadLettered int64 // messages dead-lettered (handler or max delivery count)
	LockLost     int64 // sessions dropped because their lock was lost
	Accepted     int64 // sessions accepted
	Released     int64 // sessions released
	Rounds       int64 // store transactions committed by the pump
	RoundErrors  int64 // store transactions that failed
}

// Processor consumes a session queue with many sessions at once: the fast,
// batched consumer.
//
// One pump goroutine drives it. Each round is ONE store transaction that, in
// this order: renews the locks of the held sessions when a third of the lock
// duration has passed (and, on PostgreSQL, whenever the round would
// otherwise lock session rows in more than one statement: renewing locks them
// all at once, in key order, so a round never deadlocks with producers);
// applies the settles of the handlers that finished since the last round, in
// one batch, which also receives the next head of every settled session that
// stays held (MessageSettleReceiveMany: in the steady state that is the whole
// round); releases idle sessions (and ended or blocked ones); accepts new
// sessions up to MaxSessions; receives the head of every other held session
// with nothing in flight, in one batch; and dead-letters heads received more
// often than the queue's MaxDeliveryCount, with their events. After the commit,
// every received message goes to a handler goroutine of its own. A session
// has at most one message in flight, and its next message is received only
// in the round that commits the previous one's settle: message n+1 is never
// handed out, not even prefetched, before n is settled. Handlers finishing
// while a round runs are settled together by the next one, so the batches
// grow with the load. Several processors (in one process or many) can share
// a queue; on PostgreSQL, whose transactions run in parallel, two or more
// per process raise throughput.
//
// With a HandlerTx, the handlers run inside the round's transaction, one
// after the other, right after the receive; their completions are part of the
// same transaction. SQLite has one writer, so running them concurrently in
// transactions of their own would serialize them anyway and pay a commit
// each; in the round they share one commit (on PostgreSQL too). As the store
// has no savepoints, a HandlerTx that fails rolls the whole round back; the
// round is then redone at once without calling that handler again: its
// message is received again (counting the delivery) and abandoned (or
// dead-lettered) while the other handlers run again. Keep HandlerTx work
// short: the round waits for it.
//
// Every held session's lock is renewed while it is held. If renewals fail
// until less than a sixth of the lock duration is left, or the store reports
// the lock lost, the session is dropped: its handler's context is cancelled
// and its settle is rejected (OnError gets an error wrapping ErrLockLost), so
// a consumer that lost a session stops before another one can take it.
type Processor struct {
	c     *Client
	queue string
	h     Handler
	htx   HandlerTx
	o     ProcessorOptions
	// rowLocks: the store locks rows (PostgreSQL), so every round locks all
	// held sessions first, in one statement.
	rowLocks bool

	mu             sync.Mutex
	running        bool
	stopping       chan struct{}
	unmaintain     func() // ends this processor's share of the client's maintenance
	cancelRun      context.CancelFunc
	cancelHandlers context.CancelFunc
	done           chan struct{}

	resMu   sync.Mutex
	results []result
	resSig  chan struct{}

	completed, abandoned, deadLettered, lockLost, accepted, released, rounds, roundErrors atomic.Int64

	// The pump's state: only the pump goroutine touches it.
	held       map[string]*session
	zombies    map[string]int // handlers still running for dropped sessions
	carry      []result       // finished handlers whose settle is not committed yet
	failed     map[string]txFailure
	exhausted  bool // the last accept found fewer sessions than asked
	handlerCtx context.Context
	// hookRound, when set (tests), runs before every round's transaction;
	// an error fails the round as a store error would.
	hookRound func() error
	// htxRound, when set, handles all the messages of a round's HandlerTx
	// calls at once (the ledger processor: one publish per round); see
	// callAllTx. oneByOne makes the next round call htx instead.
	htxRound func(ctx context.Context, x store.Executor, ms []*ReceivedMessage) (int, error)
	oneByOne bool
}

// session is a session the processor holds.
type session struct {
	ref         store.SessionRef
	lockDur     time.Duration
	lockedUntil time.Time
	renewedAt   time.Time
	acceptedAt  time.Time
	state       []byte
	inflight    *ReceivedMessage
	cancel      context.CancelFunc
	idleSince   time.Time // when it last had nothing to deliver; zero while busy
	empty       bool      // the last receive found nothing: skip it until a wake or poll
	release     bool      // release at the next round (ended or blocked)
	dropped     bool
}

type result struct {
	s   *session
	m   *ReceivedMessage
	err error
}

// txFailure is a HandlerTx error whose round was rolled back; the message is
// settled accordingly in the next round, without calling the handler.
type txFailure struct {
	seq int64
	err error
}

// errRetryRound: a HandlerTx failed and its round was rolled back; redo it.
var errRetryRound = errors.New("handler failed; round rolled back")

// errOneByOne: a round handler (htxRound) failed in a way it cannot pin on
// one message; the round is rolled back and redone calling the HandlerTx on
// one message after the other.
var errOneByOne = errors.New("round handler failed; redo the round one message at a time")

// NewProcessor returns a processor of queue calling h for every message.
// Start runs it.
func NewProcessor(c *Client, queue string, h Handler, opts ProcessorOptions) (*Processor, error) {
	if h == nil {
		return nil, fmt.Errorf("%w: Handler is nil", ErrInvalidConfig)
	}
	return newProcessor(c, queue, h, nil, opts)
}

// NewProcessorTx returns a processor of queue calling h for every message
// inside the transaction that completes it (see HandlerTx and Processor).
func NewProcessorTx(c *Client, queue string, h HandlerTx, opts ProcessorOptions) (*Processor, error) {
	if h == nil {
		return nil, fmt.Errorf("%w: HandlerTx is nil", ErrInvalidConfig)
	}
	return newProcessor(c, queue, nil, h, opts)
}

func newProcessor(c *Client, queue string, h Handler, htx HandlerTx, o ProcessorOptions) (*Processor, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: Client is nil", ErrInvalidConfig)
	}
	if err := checkQueue(queue); err != nil {
		return nil, err
	}
	if o.MaxSessions == 0 {
		o.MaxSessions = 64
	}
	if o.IdleTimeout == 0 {
		o.IdleTimeout = time.Second
	}
	if o.AbandonDelay == 0 {
		o.AbandonDelay = time.Second
	}
	if o.MaxAbandonDelay == 0 {
		o.MaxAbandonDelay = time.Minute
	}
	if o.PollInterval == 0 {
		o.PollInterval = c.cfg.PollInterval
	}
	switch {
	case o.MaxSessions < 1 || o.MaxSessions > 100000:
		return nil, fmt.Errorf("%w: MaxSessions %d must be 1-100000", ErrInvalidConfig, o.MaxSessions)
	case o.IdleTimeout < 0 || o.MaxHold < 0 || o.MaxAbandonDelay < 0:
		return nil, fmt.Errorf("%w: IdleTimeout, MaxHold and MaxAbandonDelay must not be negative", ErrInvalidConfig)
	case o.LockDuration != 0 && (o.LockDuration < 10*time.Millisecond || o.LockDuration > 24*time.Hour):
		return nil, fmt.Errorf("%w: LockDuration %s must be between 10ms and 24h", ErrInvalidConfig, o.LockDuration)
	case o.PollInterval < time.Millisecond:
		return nil, fmt.Errorf("%w: PollInterval %s must be at least 1ms", ErrInvalidConfig, o.PollInterval)
	}
	return &Processor{c: c, queue: queue, h: h, htx: htx, o: o, rowLocks: c.store.Name() != "sqlite",
		resSig: make(chan struct{}, 1)}, nil
}

// Queue returns the queue the processor consumes.
func (p *Processor) Queue() string { return p.queue }

// Start runs the processor in the background until Stop. ctx is used only
// for starting: cancelling it later does not stop the processor.
func (p *Processor) Start(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.running {
		return ErrAlreadyStarted
	}
	runCtx, cancelRun := context.WithCancel(context.WithoutCancel(ctx))
	handlerCtx, cancelHandlers := context.WithCancel(runCtx)
	p.running = true
	p.stopping, p.done = make(chan struct{}), make(chan struct{})
	p.cancelRun, p.cancelHandlers = cancelRun, cancelHandlers
	p.held, p.zombies, p.failed = map[string]*session{}, map[string]int{}, map[string]txFailure{}
	p.carry, p.exhausted, p.handlerCtx = nil, false, handlerCtx
	p.takeResults() // of handlers a hard stop left running: their sessions are gone
	w := p.c.hub.subscribe(p.queue)
	p.unmaintain = p.c.maintain(ctx)
	go p.pump(runCtx, w, p.stopping, p.done)
	return nil
}

// Stop stops accepting and receiving, waits for the running handlers,
// settles their messages and releases every session, up to ctx's deadline.
// When ctx ends first, handlers' contexts are cancelled, their messages are
// left at the head of their sessions (delivered again, their delivery
// counted), the sessions are released as far as possible, and ctx's error is
// returned.
func (p *Processor) Stop(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.running {
		return nil
	}
	defer func() {
		p.running = false
		p.unmaintain()
	}()
	close(p.stopping)
	select {
	case <-p.done:
		p.cancelRun()
		return nil
	case <-ctx.Done():
		p.cancelHandlers()
		p.cancelRun()
		<-p.done
		return ctx.Err()
	}
}

// Stats returns the processor's counters.
func (p *Processor) Stats() ProcessorStats {
	return ProcessorStats{
		Completed: p.completed.Load(), Abandoned: p.abandoned.Load(), DeadLettered: p.deadLettered.Load(),
		LockLost: p.lockLost.Load(), Accepted: p.accepted.Load(), Released: p.released.Load(),
		Rounds: p.rounds.Load(), RoundErrors: p.roundErrors.Load(),
	}
}

func (p *Processor) report(err error) {
	if p.o.OnError != nil {
		p.o.OnError(err)
	}
}

func (p *Processor) push(r result) {
	p.resMu.Lock()
	p.results = append(p.results, r)
	p.resMu.Unlock()
	select {
	case p.resSig <- struct{}{}:
	default:
	}
}

func (p *Processor) takeResults() []result {
	p.resMu.Lock()
	defer p.resMu.Unlock()
	r := p.results
	p.results = nil
	return r
}

// ---- the pump ----

func (p *Processor) pump(ctx context.Context, w *waiter, stopping <-chan struct{}, done chan struct{}) {
	defer close(done)
	defer p.c.hub.unsubscribe(w)
	defer p.shutdown()
	var (
		failures  int
		conflicts int
		draining  bool
		lastClear = time.Now()
	)
	for ctx.Err() == nil {
		if !draining {
			select {
			case <-stopping:
				draining = true
			default:
			}
		}
		now := p.c.clock.Now()
		p.expire(now)
		busy, err := p.round(ctx, now, draining)
		if errors.Is(err, errRetryRound) {
			continue // a HandlerTx failed; its message is settled next round
		}
		if errors.Is(err, store.ErrConflict) && conflicts < 3 {
			conflicts++ // the database broke a deadlock: redo the round at once
			continue
		}
		if errors.Is(err, store.ErrBadData) && p.unstorableReasons(err) {
			continue // redo the round with reasons that can be stored
		}
		conflicts = 0
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			p.roundErrors.Add(1)
			if failures == 1 || failures%20 == 0 {
				p.c.log.Warn("convoy: processor round failed; retrying with back-off", "queue", p.queue, "failures", failures, "err", err)
			}
			p.report(fmt.Errorf("processor of queue %q: round failed: %w", p.queue, err))
			t := time.NewTimer(max(min(p.o.PollInterval<<min(failures, 6), 5*time.Second, p.untilExpiry(now)), time.Millisecond))
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
			continue
		}
		if failures > 0 {
			p.c.log.Info("convoy: processor recovered", "queue", p.queue, "after_failures", failures)
			failures = 0
		}
		if draining && len(p.held) == 0 {
			return
		}
		if busy {
			continue
		}
		var stopC <-chan struct{}
		if !draining {
			stopC = stopping
		}
		wait := p.nextDue(now)
		if !draining && len(p.held) == 0 && p.exhausted && notifier.Relied(p.c.clock, p.c.hub.notes.Live) {
			wait = p.c.idleWait(ctx, p.queue, p.c.clock.Now(), p.o.PollInterval)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-stopC:
			draining = true
		case <-p.resSig:
		case <-w.ch:
			p.clearEmpty()
		case <-t.C:
		}
		t.Stop()
		if time.Since(lastClear) >= p.o.PollInterval {
			p.clearEmpty()
			lastClear = time.Now()
		}
	}
}

// clearEmpty makes held sessions with nothing deliverable, and the queue, be
// looked at again.
func (p *Processor) clearEmpty() {
	p.exhausted = false
	for _, s := range p.held {
		s.empty = false
	}
}

// nextDue is how long the pump may wait before something is due: a renewal,
// an idle release; at most the poll interval.
func (p *Processor) nextDue(now time.Time) time.Duration {
	d := p.o.PollInterval
	for _, s := range p.held {
		d = min(d, s.renewedAt.Add(s.lockDur/3).Sub(now))
		if s.inflight == nil && !s.idleSince.IsZero() {
			d = min(d, s.idleSince.Add(p.o.IdleTimeout).Sub(now))
		}
	}
	return max(d, time.Millisecond)
}

// untilExpiry is how long until expire will drop a held session.
func (p *Processor) untilExpiry(now time.Time) time.Duration {
	d := time.Duration(1<<63 - 1)
	for _, s := range p.held {
		d = min(d, s.lockedUntil.Add(-s.lockDur/6).Sub(now))
	}
	return d
}

// expire drops the sessions whose lock is about to expire without a
// successful renewal (the store is failing): their handlers must stop before
// another consumer can take the session.
func (p *Processor) expire(now time.Time) {
	for _, s := range p.held {
		if !now.Before(s.lockedUntil.Add(-s.lockDur / 6)) {
			p.drop(s, "renewals failed until the lock was about to expire")
		}
	}
}

// drop forgets a session whose lock is lost.
func (p *Processor) drop(s *session, why string) {
	if p.held[s.ref.SessionID] == s {
		delete(p.held, s.ref.SessionID)
	}
	if s.dropped {
		return
	}
	s.dropped = true
	if s.inflight != nil {
		s.cancel()
		p.zombies[s.ref.SessionID]++
	}
	delete(p.failed, s.ref.SessionID)
	p.lockLost.Add(1)
	p.report(fmt.Errorf("session %q of queue %q dropped (%s): %w", s.ref.SessionID, p.queue, why, ErrLockLost))
}

// shutdown releases what the pump still holds when it ends (hard stop).
func (p *Processor) shutdown() {
	p.cancelHandlers()
	if len(p.held) == 0 {
		return
	}
	refs := make([]store.SessionRef, 0, len(p.held))
	for _, s := range p.held {
		refs = append(refs, s.ref)
		s.dropped = true // results of handlers still running are discarded
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	now := p.c.now()
	err := p.c.store.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		if _, err := x.SessionRelease(ctx, &store.SessionReleaseParams{Refs: refs, Now: now}); err != nil {
			return err
		}
		return store.Notify(ctx, x, &store.NotifyParams{Topic: Topic(p.queue)})
	})
	if err != nil {
		p.c.log.Warn("convoy: release sessions at stop; they are free once their locks expire", "queue", p.queue, "err", err)
	} else {
		p.released.Add(int64(len(refs)))
	}
	p.held = map[string]*session{}
}

// settleItem is a finished handler's settle.
type settleItem struct {
	s  *session
	m  *ReceivedMessage
	st store.MessageSettle
}

// received is a head received in a round.
type received struct {
	s *session
	m *dt.Message
}

// roundOut is what a round's transaction did; applied once it commits.
type roundOut struct {
	renewed   bool
	until     time.Time
	lost      map[*session]bool
	settleErr []error
	released  []*session
	accepted  []*session
	received  []*session // with msg set in recv
	recv      map[*session]*dt.Message
	empty     []*session
	poisoned  map[*session]bool // dead-lettered at receive
	block     bool              // the queue's poison policy is block
	txSettles map[*session]store.MessageSettle
	events    []*dt.Event // the round's events (for the Observer)
}

func (p *Processor) round(ctx context.Context, now time.Time, draining bool) (busy bool, err error) {
	now = now.UTC().Truncate(time.Microsecond)

	// Settles of the handlers that finished.
	p.carry = append(p.carry, p.takeResults()...)
	keep := p.carry[:0]
	var settles []settleItem
	settling := map[*session]int{}
	for _, r := range p.carry {
		if r.s.dropped {
			p.zombies[r.s.ref.SessionID]--
			if p.zombies[r.s.ref.SessionID] <= 0 {
				delete(p.zombies, r.s.ref.SessionID)
			}
			p.report(fmt.Errorf("settle %s rejected: %w", r.m, ErrLockLost))
			continue
		}
		keep = append(keep, r)
		settling[r.s] = len(settles)
		settles = append(settles, settleItem{s: r.s, m: r.m, st: p.settleFor(r, now)})
	}
	p.carry = keep

	// What to release and receive.
	var held, release, receive []*session
	notify := false
	// A full processor gives sessions with nothing to deliver up at once
	// when the queue may have others waiting; IdleTimeout applies otherwise.
	full := !draining && !p.exhausted && len(p.held) >= p.o.MaxSessions
	for _, s := range p.held {
		held = append(held, s)
		_, isSettling := settling[s]
		if s.inflight != nil && !isSettling {
			continue
		}
		hold := p.o.MaxHold > 0 && now.Sub(s.acceptedAt) >= p.o.MaxHold
		idle := !isSettling && !s.idleSince.IsZero() && (full || now.Sub(s.idleSince) >= p.o.IdleTimeout)
		switch {
		case draining || hold || s.release || idle:
			release = append(release, s)
			notify = notify || draining || hold
		case isSettling || !s.empty:
			if p.zombies[s.ref.SessionID] == 0 {
				receive = append(receive, s)
			}
		}
	}
	acceptN := 0
	if !draining && !p.exhausted {
		acceptN = p.o.MaxSessions - (len(p.held) - len(release))
	}
	renewDue := false
	for _, s := range held {
		if !now.Before(s.renewedAt.Add(s.lockDur / 3)) {
			renewDue = true
			break
		}
	}
	touches := len(settles)+len(release)+len(receive) > 0
	renew := len(held) > 0 && (renewDue || (p.rowLocks && p.locksMore(settling, release, receive, acceptN > 0)))
	if !renew && !touches && acceptN <= 0 {
		return false, nil
	}
	// Key order, so that logs and the store see a stable order.
	slices.SortFunc(held, func(a, b *session) int { return strings.Compare(a.ref.SessionID, b.ref.SessionID) })

	if p.hookRound != nil {
		if err := p.hookRound(); err != nil {
			return false, err
		}
	}
	var o *roundOut
	err = p.c.store.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		o = &roundOut{lost: map[*session]bool{}, recv: map[*session]*dt.Message{}, poisoned: map[*session]bool{},
			txSettles: map[*session]store.MessageSettle{}, settleErr: make([]error, len(settles))}
		return p.roundTx(ctx, x, now, o, held, renew, settles, settling, release, notify, receive, acceptN)
	})
	if err != nil {
		return false, err
	}
	p.rounds.Add(1)
	p.observe(o, held)
	return p.apply(now, o, held, settles, acceptN), nil
}

// locksMore reports whether the round's statements would lock session rows
// in more than one statement: settles, then releases, then accepts (which
// skip locked rows, never wait, but hold what they lock), then receives, each
// locking its sessions in key order. A statement that locks rows beyond
// those an earlier one locked could wait, while holding rows, for a producer
// that waits for one of them: a deadlock. Then the round renews every held
// session first, in one statement, which locks them all at once. In the
// steady state a round receives exactly the sessions it settles, and needs
// no extra statement.
func (p *Processor) locksMore(settling map[*session]int, release, receive []*session, accept bool) bool {
	first := len(settling) > 0
	for k, set := range [][]*session{release, receive} {
		if k == 1 && accept {
			first = true
		}
		for _, s := range set {
			if _, ok := settling[s]; ok {
				continue
			}
			if first {
				return true // locks rows the settle statement did not
			}
		}
		first = first || len(set) > 0
	}
	return false
}

// settleFor turns a handler's outcome into a settle.
func (p *Processor) settleFor(r result, now time.Time) store.MessageSettle {
	st := store.MessageSettle{Ref: r.m.ref(), Seq: r.m.Seq}
	switch {
	case r.err == nil:
		st.Action = store.SettleComplete
		st.SetState, st.State = r.m.setState, r.m.newState
	case IsDeadLetter(r.err):
		st.Action, st.Reason = store.SettleDeadLetter, reason(r.err)
	default:
		st.Action = store.SettleAbandon
		if d := p.backoff(r.m.DeliveryCount); d > 0 {
			st.AvailableAt = now.Add(d)
		}
	}
	return st
}

// unstorableReason is the dead-letter reason of a message whose handler's
// reason the store refused.
type unstorableReason struct{ cause string }

func (e *unstorableReason) Error() string {
	return "the dead-letter reason could not be stored: " + e.cause
}

// unstorableReasons handles a round the store refused for a value
// (cause wraps store.ErrBadData): the only text of a round's settles is
// the dead-letter reasons of the handlers, so it replaces each with one
// naming cause, the messages are still dead-lettered as the handlers
// asked, and the round is redone. It reports whether it replaced any; if
// not (or they were replaced already), the round fails as for any error.
func (p *Processor) unstorableReasons(cause error) bool {
	changed := false
	for i, r := range p.carry {
		var u *unstorableReason
		if IsDeadLetter(r.err) && !errors.As(r.err, &u) {
			p.carry[i].err = DeadLetterError(&unstorableReason{cause: dt.Storable(cause.Error())})
			changed = true
		}
	}
	if changed {
		p.c.log.Warn("convoy: the store refused a dead-letter reason; recording those of the round as unstorable",
			"queue", p.queue, "err", cause)
	}
	return changed
}

// reason is an error's text, capped for the dead-letter record and made
// storable (drovertype.Storable): a handler's error may hold any bytes.
func reason(err error) string {
	s := err.Error()
	if s == "" {
		s = "dead-lettered by the handler"
	}
	const maxLen = 2000
	if len(s) > maxLen {
		// Cut at a rune's start, so the cut itself leaves no broken UTF-8.
		n := maxLen
		for n > maxLen-utf8.UTFMax && !utf8.RuneStart(s[n]) {
			n--
		}
		s = s[:n]
	}
	return dt.Storable(s)
}

// backoff is the delay before a message abandoned after its deliveries-th
// delivery is delivered again: AbandonDelay doubling per delivery, capped,
// with jitter (between half and all of it).
func (p *Processor) backoff(deliveries int) time.Duration {
	if p.o.AbandonDelay < 0 {
		return 0
	}
	d := p.o.AbandonDelay
	for i := 1; i < deliveries && d < p.o.MaxAbandonDelay; i++ {
		d *= 2
	}
	d = min(d, p.o.MaxAbandonDelay)
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2+1)
}

func (p *Processor) lockDuration(q dt.Queue) time.Duration {
	if p.o.LockDuration > 0 {
		return p.o.LockDuration
	}
	return q.LockDuration
}

// roundTx is the body of a round's transaction. It only fills o; the pump's
// state changes in apply, after the commit.
func (p *Processor) roundTx(ctx context.Context, x store.Executor, now time.Time, o *roundOut, held []*session, renew bool,
	settles []settleItem, settling map[*session]int, release []*session, notify bool, receive []*session, acceptN int) error {
	pol, err := p.c.policy(ctx, x, p.queue)
	if err != nil {
		return err
	}
	o.block = pol.PoisonPolicy == PoisonBlock
	lockDur := p.lockDuration(pol)
	var events []*dt.Event

	// 1. Renew (on PostgreSQL: lock every held session, in key order).
	if renew {
		o.renewed, o.until = true, now.Add(lockDur)
		refs := make([]store.SessionRef, len(held))
		for i, s := range held {
			refs[i] = s.ref
		}
		errs, err := x.SessionRenew(ctx, &store.SessionRenewParams{Refs: refs, Now: now, Until: o.until})
		if err != nil {
			return err
		}
		for i, e := range errs {
			if e != nil {
				o.lost[held[i]] = true
			}
		}
	}

	// 2. Settles of finished handlers. A session that stays held (it is
	// among receive) receives its next head in the same store call, so
	// message n+1 comes in the statement that settles n.
	var recvd []received
	settledRecv := map[*session]bool{} // receive sessions whose settle call received for them
	if len(settles) > 0 {
		next := make(map[*session]bool, len(receive))
		for _, s := range receive {
			if _, ok := settling[s]; ok {
				next[s] = true
			}
		}
		var (
			batch []store.MessageSettle
			idx   []int
		)
		for i, it := range settles {
			if o.lost[it.s] {
				o.settleErr[i] = ErrLockLost
				continue
			}
			st := it.st
			if st.Action == store.SettleDeadLetter {
				st.Block = o.block
			}
			st.ReceiveNext = next[it.s]
			settles[i].st = st
			batch, idx = append(batch, st), append(idx, i)
		}
		if len(batch) > 0 && fault.Armed() {
			for _, st := range batch {
				if err := fault.Text(st.Reason); err != nil {
					return err
				}
			}
		}
		if len(batch) > 0 {
			msgs, errs, err := x.MessageSettleReceiveMany(ctx, &store.MessageSettleReceiveManyParams{Settles: batch, Now: now})
			if err != nil {
				return err
			}
			for j, e := range errs {
				i := idx[j]
				o.settleErr[i] = e
				s := settles[i].s
				if e == nil && batch[j].ReceiveNext {
					settledRecv[s] = true
					if msgs[j] != nil {
						recvd = append(recvd, received{s, msgs[j]})
					} else {
						o.empty = append(o.empty, s)
					}
				}
				if e == nil && batch[j].Action == store.SettleDeadLetter {
					m := settles[i].m
					events = append(events, deadLetterEvent(p.queue, m.SessionID, m.Seq, m.DeliveryCount, batch[j].Reason, batch[j].Block, p.c.cfg.InstanceID, now))
				}
			}
		}
	}

	// 3. Releases.
	var refs []store.SessionRef
	for _, s := range release {
		if !o.lost[s] {
			o.released = append(o.released, s)
			refs = append(refs, s.ref)
		}
	}
	if len(refs) > 0 {
		if _, err := x.SessionRelease(ctx, &store.SessionReleaseParams{Refs: refs, Now: now}); err != nil {
			return err
		}
		// A session given up with nothing deliverable may still have a
		// delayed head: consumers asleep until its lock's end (IdlePoll)
		// must hear of it.
		for i := 0; !notify && i < len(refs); i++ {
			s, err := x.SessionGet(ctx, &store.SessionGetParams{Queue: refs[i].Queue, SessionID: refs[i].SessionID})
			if err != nil {
				return err
			}
			notify = s.Pending > 0 && !s.Blocked
		}
		if notify {
			if err := store.Notify(ctx, x, &store.NotifyParams{Topic: Topic(p.queue)}); err != nil {
				return err
			}
		}
	}

	// 4. Accepts.
	if acceptN > 0 {
		got, err := x.SessionAccept(ctx, &store.SessionAcceptParams{Queue: p.queue, Holder: p.c.cfg.InstanceID, Now: now,
			LockDuration: lockDur, Limit: acceptN})
		if err != nil {
			return err
		}
		for _, g := range got {
			s := &session{ref: store.SessionRef{Queue: p.queue, SessionID: g.ID, Token: g.LockToken}, lockDur: lockDur,
				lockedUntil: now.Add(lockDur), renewedAt: now, acceptedAt: now, state: g.State}
			if g.LockedUntil != nil {
				s.lockedUntil = *g.LockedUntil
			}
			o.accepted = append(o.accepted, s)
		}
	}

	// 5. Receive the heads of the other sessions to receive: those with
	// nothing in flight, the accepted ones, and settled ones whose settle
	// call received nothing for them (ErrNotHead: applied before).
	var targets []*session
	for _, s := range receive {
		if o.lost[s] || settledRecv[s] {
			continue
		}
		if i, ok := settling[s]; ok && errors.Is(o.settleErr[i], ErrLockLost) {
			continue
		}
		targets = append(targets, s)
	}
	for _, s := range o.accepted {
		if p.zombies[s.ref.SessionID] == 0 {
			targets = append(targets, s)
		}
	}
	if len(targets) > 0 {
		refs := make([]store.SessionRef, len(targets))
		for i, s := range targets {
			refs[i] = s.ref
		}
		msgs, errs, err := x.MessageReceiveMany(ctx, &store.MessageReceiveManyParams{Refs: refs, Now: now})
		if err != nil {
			return err
		}
		for i, s := range targets {
			switch m := msgs[i]; {
			case errs[i] != nil:
				o.lost[s] = true
			case m == nil:
				o.empty = append(o.empty, s)
			default:
				recvd = append(recvd, received{s, m})
			}
		}
	}
	// Heads received more often than the queue allows are dead-lettered.
	if len(recvd) > 0 {
		var poison []store.MessageSettle
		for _, r := range recvd {
			s, m := r.s, r.m
			if st, bad := poisoned(m, s.ref.Token, pol); bad {
				poison = append(poison, st)
				o.poisoned[s] = true
				events = append(events, deadLetterEvent(p.queue, m.SessionID, m.Seq, m.DeliveryCount, st.Reason, st.Block, p.c.cfg.InstanceID, now))
				continue
			}
			o.recv[s] = m
			o.received = append(o.received, s)
		}
		if len(poison) > 0 {
			errs, err := x.MessageSettleMany(ctx, &store.MessageSettleManyParams{Settles: poison, Now: now})
			if err != nil {
				return err
			}
			for i, e := range errs {
				if e != nil {
					return fmt.Errorf("dead-letter message %d of session %q: %w", poison[i].Seq, poison[i].Ref.SessionID, e)
				}
			}
		}
	}

	// 6. Transactional handlers, in the round's transaction.
	if p.htx != nil && len(o.received) > 0 {
		batch := make([]store.MessageSettle, 0, len(o.received))
		var (
			calls []*ReceivedMessage
			of    []*session
		)
		for _, s := range o.received {
			m := o.recv[s]
			rm := newReceived(m, s.ref.Token, s.state)
			if f, ok := p.failed[s.ref.SessionID]; ok && f.seq == m.Seq {
				st := p.settleFor(result{s: s, m: rm, err: f.err}, now)
				if st.Action == store.SettleDeadLetter {
					st.Block = o.block
					events = append(events, deadLetterEvent(p.queue, m.SessionID, m.Seq, m.DeliveryCount, st.Reason, st.Block, p.c.cfg.InstanceID, now))
				}
				o.txSettles[s] = st
				batch = append(batch, st)
				continue
			}
			calls, of = append(calls, rm), append(of, s)
		}
		if i, err := p.callAllTx(ctx, x, calls); err != nil {
			switch {
			case ctx.Err() != nil:
				return ctx.Err()
			case errors.Is(err, store.ErrConflict):
				return err // the database's doing, not the handler's: redo the round
			case errors.Is(err, errOneByOne):
				p.oneByOne = true
				return errRetryRound
			case i < 0:
				return err // not one message's doing: a failed round
			}
			p.failed[of[i].ref.SessionID] = txFailure{seq: calls[i].Seq, err: err}
			return errRetryRound
		}
		for i, rm := range calls {
			st := store.MessageSettle{Ref: of[i].ref, Seq: rm.Seq, Action: store.SettleComplete, SetState: rm.setState, State: rm.newState}
			o.txSettles[of[i]] = st
			batch = append(batch, st)
		}
		errs, err := x.MessageSettleMany(ctx, &store.MessageSettleManyParams{Settles: batch, Now: now})
		if err != nil {
			return err
		}
		for i, e := range errs {
			if e != nil {
				// The handler's writes must not commit without the
				// completion: roll the round back.
				return fmt.Errorf("settle message %d of session %q: %w", batch[i].Seq, batch[i].Ref.SessionID, e)
			}
		}
	}

	// 7. Events last: on PostgreSQL readers of the history wait for an
	// event-writing transaction to end, so it should end soon after.
	o.events = events
	return notifier.InsertEvents(ctx, x, events)
}

// observe tells the client's Observer what a committed round did: the
// locks it renewed or found lost, and the alerts it recorded.
func (p *Processor) observe(o *roundOut, held []*session) {
	if p.c.cfg.Observer == nil {
		return
	}
	if o.renewed {
		for _, s := range held {
			p.c.observeLock(p.queue, !o.lost[s])
		}
	}
	p.c.observeAlerts(o.events)
}

// apply brings the pump's state in line with a committed round. It reports
// whether more work is probably waiting at once.
func (p *Processor) apply(now time.Time, o *roundOut, held []*session, settles []settleItem, acceptN int) (busy bool) {
	p.carry = nil
	if o.renewed {
		for _, s := range held {
			if !o.lost[s] {
				s.lockedUntil, s.renewedAt = o.until, now
			}
		}
	}
	for i, it := range settles {
		s, err := it.s, o.settleErr[i]
		s.cancel()
		s.inflight, s.cancel = nil, nil
		if errors.Is(err, ErrLockLost) {
			o.lost[s] = true
			p.report(fmt.Errorf("settle %s rejected: %w", it.m, ErrLockLost))
			continue
		}
		// nil, or ErrNotHead: the settle was applied already (a commit
		// whose outcome was unknown).
		p.settled(s, it.m, it.st, err == nil)
	}
	for s := range o.lost {
		p.drop(s, "the store reports the lock lost")
	}
	for _, s := range o.released {
		if p.held[s.ref.SessionID] == s {
			delete(p.held, s.ref.SessionID)
			p.released.Add(1)
		}
	}
	for _, s := range o.accepted {
		if o.lost[s] {
			continue
		}
		p.held[s.ref.SessionID] = s
		p.accepted.Add(1)
	}
	if acceptN > 0 && len(o.accepted) < acceptN {
		p.exhausted = true
	}
	busy = acceptN > 0 && len(o.accepted) == acceptN
	for _, s := range o.empty {
		s.empty = true
		if s.idleSince.IsZero() {
			s.idleSince = now
		}
	}
	if len(o.empty) > 0 && !p.exhausted && len(p.held) >= p.o.MaxSessions {
		busy = true // make room for sessions that may be waiting
	}
	for s := range o.poisoned {
		p.deadLettered.Add(1)
		delete(p.failed, s.ref.SessionID)
		s.empty, s.idleSince = false, time.Time{}
		if o.block {
			s.release = true
		}
		busy = true // the next head (skip) or the release (block) is due
	}
	// The round read the clock before its transaction; if the transaction
	// took most of the lock duration (a long wait for the database), the
	// lock may be about to expire, and another consumer could take the
	// session while a handler here runs. Such messages are not handed out:
	// the session is dropped and the message stays at its head.
	late := p.c.clock.Now()
	for _, s := range o.received {
		s.empty, s.idleSince = false, time.Time{}
		if p.htx == nil && !late.Before(s.lockedUntil.Add(-s.lockDur/6)) {
			p.drop(s, "the round took most of the lock duration")
			continue
		}
		if p.htx != nil {
			st := o.txSettles[s]
			p.settled(s, newReceived(o.recv[s], s.ref.Token, s.state), st, true)
			delete(p.failed, s.ref.SessionID)
			busy = true
			continue
		}
		p.dispatch(s, o.recv[s])
	}
	for _, s := range p.held {
		busy = busy || s.release
	}
	return busy
}

// settled accounts for an applied settle.
func (p *Processor) settled(s *session, m *ReceivedMessage, st store.MessageSettle, applied bool) {
	p.c.traceSettle(m, st.Action, nil)
	s.empty, s.idleSince = false, time.Time{}
	switch st.Action {
	case store.SettleComplete:
		p.completed.Add(1)
		if applied && st.SetState {
			s.state = st.State
		}
		if m.EndOfSequence {
			s.release = true // nothing can follow
		}
	case store.SettleAbandon:
		p.abandoned.Add(1)
	case store.SettleDeadLetter:
		p.deadLettered.Add(1)
		if st.Block {
			s.release = true
		}
	}
}

// dispatch runs the handler of a received message on its own goroutine.
func (p *Processor) dispatch(s *session, dm *dt.Message) {
	m := newReceived(dm, s.ref.Token, s.state)
	ctx, cancel := context.WithCancel(p.handlerCtx)
	s.inflight, s.cancel = m, cancel
	go func() {
		ctx, span := p.c.traceReceive(ctx, m)
		err := p.call(ctx, m)
		tracing.Outcome(ctx, "", err)
		span.End()
		p.push(result{s: s, m: m, err: err})
	}()
}

func (p *Processor) call(ctx context.Context, m *ReceivedMessage) (err error) {
	defer func() {
		if r := recover(); r != nil {
			p.c.log.Error("convoy: handler panicked", append(append(logattr.Message(m.Queue, m.SessionID, m.Seq), logattr.TraceOf(m.TraceContext)...),
				"panic", r, "stack", string(debug.Stack()))...)
			err = fmt.Errorf("handler panicked: %v", r)
		}
	}()
	return p.h(ctx, m)
}

// callAllTx runs the transactional handler on each message, in order, or
// the round handler (htxRound) on them all at once. It stops at the first
// failure: i is the index of the message that failed, or negative for a
// failure of no message in particular.
func (p *Processor) callAllTx(ctx context.Context, x store.Executor, ms []*ReceivedMessage) (i int, err error) {
	if len(ms) == 0 {
		return 0, nil
	}
	if p.htxRound == nil || p.oneByOne {
		p.oneByOne = false
		for i, m := range ms {
			if err := p.callTx(ctx, x, m); err != nil {
				return i, err
			}
		}
		return 0, nil
	}
	defer func() {
		if r := recover(); r != nil {
			// Redo the round one message at a time: that names the one.
			p.c.log.Error("convoy: round handler panicked", "queue", p.queue, "panic", r, "stack", string(debug.Stack()))
			i, err = -1, errOneByOne
		}
	}()
	return p.htxRound(ctx, x, ms)
}

func (p *Processor) callTx(ctx context.Context, x store.Executor, m *ReceivedMessage) (err error) {
	defer func() {
		if r := recover(); r != nil {
			p.c.log.Error("convoy: handler panicked", append(append(logattr.Message(m.Queue, m.SessionID, m.Seq), logattr.TraceOf(m.TraceContext)...),
				"panic", r, "stack", string(debug.Stack()))...)
			err = fmt.Errorf("handler panicked: %v", r)
		}
	}()
	ctx, span := p.c.traceReceive(ctx, m)
	defer func() { tracing.Outcome(ctx, "", err); span.End() }()
	return p.htx(ctx, x, m)
}
