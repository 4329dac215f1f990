package convoy

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/logattr"
	"github.com/drover-run/drover/internal/notifier"
	"github.com/drover-run/drover/store"
)

// SessionReceiver holds one session under an exclusive lock and hands out
// its messages one at a time, in sequence order (peek-lock: a message stays
// until it is settled). Its lock is renewed in the background, at a third of
// the lock duration, until Close. It is the Service Bus session receiver's
// shape; Processor is the faster, batched consumer of many sessions.
//
// Methods are safe for concurrent use, but the session is sequential: the
// next message is handed out only once the previous one is settled.
type SessionReceiver struct {
	c       *Client
	queue   string
	id      string
	token   int64
	lockDur time.Duration
	w       *waiter

	lost      chan struct{}
	lostOnce  sync.Once
	closedCh  chan struct{}
	stopRenew context.CancelFunc
	renewDone chan struct{}

	mu          sync.Mutex // held by every store call but the renewals
	closed      bool
	receiving   bool
	current     *ReceivedMessage
	state       []byte
	untilMu     sync.Mutex
	lockedUntil time.Time
}

// AcceptSession locks the named session of queue for this client. It fails
// with ErrNotFound if the session does not exist (nothing was ever published
// to it) and with ErrSessionLocked if another consumer holds it. A blocked
// session can be accepted (its Receive then returns ErrSessionBlocked).
func (c *Client) AcceptSession(ctx context.Context, queue, sessionID string) (*SessionReceiver, error) {
	if err := checkQueue(queue); err != nil {
		return nil, err
	}
	if err := checkSession(sessionID); err != nil {
		return nil, err
	}
	r, err := c.accept(ctx, queue, sessionID)
	if err != nil {
		return nil, err
	}
	return r, nil
}

// AcceptNextSession locks the next available session of queue: one whose
// head message is deliverable, not blocked and not held by another consumer,
// oldest head first. It waits until there is one or ctx ends; it is woken by
// publishes (in this process at once, from other processes by notification
// on PostgreSQL) and polls every Config.PollInterval as a fallback (see
// IdlePoll while notifications arrive).
func (c *Client) AcceptNextSession(ctx context.Context, queue string) (*SessionReceiver, error) {
	if err := checkQueue(queue); err != nil {
		return nil, err
	}
	var r *SessionReceiver
	_, err := c.waitQueue(ctx, queue, c.nextSessionWait(ctx, queue), nil, func() (bool, error) {
		var err error
		r, err = c.accept(ctx, queue, "")
		return r != nil, err
	})
	return r, err
}

// IdlePoll is how long a consumer waiting to accept a session sleeps while
// notifications arrive (PostgreSQL), when none can be accepted: a Processor
// that holds no session, AcceptNextSession, and AcceptLease of the next
// session. A publish, a release of a session with messages left and an
// operator's resolve notify it; it wakes by itself when a delayed message
// becomes due or another holder's lock ends (store.SessionNextReady), and
// after IdlePoll as a fallback. Without notifications it looks every
// PollInterval.
const IdlePoll = 30 * time.Second

// idleWait is how long a consumer that could accept no session of queue
// sleeps while notifications arrive: until the next session may be
// accepted, at least poll and at most IdlePoll. If that cannot be read,
// poll.
func (c *Client) idleWait(ctx context.Context, queue string, now time.Time, poll time.Duration) time.Duration {
	next, err := c.store.Reader().SessionNextReady(ctx, &store.SessionNextReadyParams{Queue: queue})
	if err != nil {
		return poll
	}
	return notifier.Until(now, poll, IdlePoll, next)
}

// headWait is how long a consumer waiting for the next message of a
// session it holds sleeps while notifications arrive (a publish to the
// session notifies): until the session's head is due or its lock ends,
// at least poll and at most IdlePoll. If that cannot be read, poll.
func (c *Client) headWait(ctx context.Context, queue, sessionID string, now time.Time, poll time.Duration) time.Duration {
	s, err := c.store.Reader().SessionGet(ctx, &store.SessionGetParams{Queue: queue, SessionID: sessionID})
	if err != nil {
		return poll
	}
	var head, lockEnd time.Time
	if s.Pending > 0 && s.ReadyAt != nil {
		head = *s.ReadyAt
	}
	if s.LockedUntil != nil {
		lockEnd = *s.LockedUntil
	}
	return notifier.Until(now, poll, IdlePoll, head, lockEnd)
}

// nextSessionWait is waitQueue's idle for a wait to accept the next
// session of queue.
func (c *Client) nextSessionWait(ctx context.Context, queue string) func(time.Time) time.Duration {
	return func(now time.Time) time.Duration { return c.idleWait(ctx, queue, now, c.cfg.PollInterval) }
}

// waitQueue calls try until it reports done or fails, waking on publishes
// to queue (in this process at once, from others by notification) and
// every Config.PollInterval as a fallback; while notifications arrive it
// sleeps for idle(now) instead (idleWait, headWait), when idle is set. It
// gives up when ctx ends (with ctx's error) or when deadline fires
// (timedOut; a nil deadline never does).
func (c *Client) waitQueue(ctx context.Context, queue string, idle func(now time.Time) time.Duration, deadline <-chan time.Time, try func() (done bool, err error)) (timedOut bool, err error) {
	var w *waiter
	defer func() {
		if w != nil {
			c.hub.unsubscribe(w)
		}
	}()
	for {
		done, err := try()
		if err != nil || done {
			return false, err
		}
		if w == nil {
			// Subscribe, then look again: a publish between the look and the
			// subscription would otherwise wait for the poll.
			w = c.hub.subscribe(queue)
			continue
		}
		wait := c.cfg.PollInterval
		if idle != nil && notifier.Relied(c.clock, c.hub.notes.Live) {
			wait = idle(c.clock.Now())
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return false, ctx.Err()
		case <-deadline:
			t.Stop()
			return true, nil
		case <-w.ch:
		case <-t.C:
		}
		t.Stop()
	}
}

// mayAccept reports whether an accept is worth its write transaction: a
// named one always is; one of the next available session only when a
// cheap read finds one, so that waiting consumers polling an idle queue
// take no write lock.
func (c *Client) mayAccept(ctx context.Context, queue, sessionID string, now time.Time) (bool, error) {
	if sessionID != "" {
		return true, nil
	}
	ok, err := c.store.Reader().SessionAvailable(ctx, &store.SessionAvailableParams{Queue: queue, Now: now})
	if err != nil {
		return false, err
	}
	return ok, nil
}

// accept locks a session (the named one, or the next available one) and
// returns its receiver; nil, nil when no session is available.
func (c *Client) accept(ctx context.Context, queue, sessionID string) (*SessionReceiver, error) {
	now := c.now()
	if ok, err := c.mayAccept(ctx, queue, sessionID, now); !ok {
		return nil, err
	}
	var (
		s   *dt.Session
		pol dt.Queue
	)
	err := c.store.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		s = nil
		got, err := x.SessionAccept(ctx, &store.SessionAcceptParams{Queue: queue, SessionID: sessionID, Holder: c.cfg.InstanceID, Now: now, Limit: 1})
		if err != nil || len(got) == 0 {
			return err
		}
		s = got[0]
		pol, err = c.policy(ctx, x, queue)
		return err
	})
	if err != nil || s == nil {
		return nil, err
	}
	r := &SessionReceiver{
		c: c, queue: queue, id: s.ID, token: s.LockToken, lockDur: pol.LockDuration, state: s.State,
		lost: make(chan struct{}), closedCh: make(chan struct{}), renewDone: make(chan struct{}),
	}
	if s.LockedUntil != nil {
		r.lockedUntil = *s.LockedUntil
		if d := s.LockedUntil.Sub(now); d > 0 {
			r.lockDur = d
		}
	}
	r.w = c.hub.subscribe(queue)
	renewCtx, cancel := context.WithCancel(context.Background())
	r.stopRenew = cancel
	go r.renewLoop(renewCtx)
	return r, nil
}

// Queue returns the queue of the session.
func (r *SessionReceiver) Queue() string { return r.queue }

// SessionID returns the ID of the session held.
func (r *SessionReceiver) SessionID() string { return r.id }

// LockedUntil returns when the lock expires unless renewed, as of the last
// accept or renewal.
func (r *SessionReceiver) LockedUntil() time.Time {
	r.untilMu.Lock()
	defer r.untilMu.Unlock()
	return r.lockedUntil
}

// LockLost returns a channel closed once the lock is lost: a renewal found
// another consumer holding the session or the lock expired, or renewals kept
// failing until the lock was about to expire. From then on every call fails
// with ErrLockLost and changes nothing; Close the receiver.
func (r *SessionReceiver) LockLost() <-chan struct{} { return r.lost }

func (r *SessionReceiver) isLost() bool {
	select {
	case <-r.lost:
		return true
	default:
		return false
	}
}

func (r *SessionReceiver) markLost() { r.lostOnce.Do(func() { close(r.lost) }) }

func (r *SessionReceiver) ref() store.SessionRef {
	return store.SessionRef{Queue: r.queue, SessionID: r.id, Token: r.token}
}

func (r *SessionReceiver) lostErr(what string) error {
	return fmt.Errorf("%s: session %q of queue %q: %w", what, r.id, r.queue, ErrLockLost)
}

// renewLoop extends the lock every third of its duration until stopped. If
// renewals keep failing (the store is unreachable) until less than a sixth
// of the duration is left, the lock counts as lost, so the consumer stops
// before another one can take the session over.
func (r *SessionReceiver) renewLoop(ctx context.Context) {
	defer close(r.renewDone)
	t := time.NewTicker(max(r.lockDur/3, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.lost:
			return
		case <-t.C:
		}
		now := r.c.now()
		until := now.Add(r.lockDur)
		var errs []error
		err := r.c.store.InTx(ctx, func(ctx context.Context, x store.Executor) error {
			var err error
			errs, err = x.SessionRenew(ctx, &store.SessionRenewParams{Refs: []store.SessionRef{r.ref()}, Now: now, Until: until})
			return err
		})
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			r.c.log.Warn("convoy: renew session lock", logattr.Queue, r.queue, logattr.Session, r.id, "err", err)
			if !now.Before(r.LockedUntil().Add(-r.lockDur / 6)) {
				r.markLost()
				return
			}
		case errs[0] != nil:
			r.c.observeLock(r.queue, false)
			r.markLost()
			return
		default:
			r.c.observeLock(r.queue, true)
			r.untilMu.Lock()
			r.lockedUntil = until
			r.untilMu.Unlock()
		}
	}
}

// Receive waits for the session's head message and returns it, with its
// delivery count incremented. It returns ErrMessageUnsettled while the
// previously received message is not settled, ErrSessionBlocked if the
// session is blocked (it may become so here: a message received more often
// than the queue's MaxDeliveryCount is dead-lettered instead of returned;
// under the skip policy Receive goes on with the next one), ErrSessionEnded
// once the end-of-sequence message was settled, ErrLockLost, or ctx's error.
func (r *SessionReceiver) Receive(ctx context.Context) (*ReceivedMessage, error) {
	r.mu.Lock()
	switch {
	case r.closed:
		r.mu.Unlock()
		return nil, ErrReceiverClosed
	case r.isLost():
		r.mu.Unlock()
		return nil, r.lostErr("receive")
	case r.current != nil:
		r.mu.Unlock()
		return nil, fmt.Errorf("%w: settle message %d first", ErrMessageUnsettled, r.current.Seq)
	case r.receiving:
		r.mu.Unlock()
		return nil, fmt.Errorf("%w: another Receive is waiting", ErrMessageUnsettled)
	}
	r.receiving = true
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.receiving = false
		r.mu.Unlock()
	}()
	for {
		m, err := r.tryReceive(ctx)
		if err != nil || m != nil {
			return m, err
		}
		wait := r.c.cfg.PollInterval
		if notifier.Relied(r.c.clock, r.c.hub.notes.Live) {
			wait = r.c.headWait(ctx, r.queue, r.id, r.c.clock.Now(), wait)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-r.lost:
			t.Stop()
			return nil, r.lostErr("receive")
		case <-r.closedCh:
			t.Stop()
			return nil, ErrReceiverClosed
		case <-r.w.ch:
		case <-t.C:
		}
		t.Stop()
	}
}

// tryReceive receives the head if it is available; nil, nil if not.
func (r *SessionReceiver) tryReceive(ctx context.Context) (*ReceivedMessage, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, ErrReceiverClosed
	}
	now := r.c.now()
	var (
		got     *dt.Message
		events  []*dt.Event
		outcome error
	)
	err := r.c.store.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		var err error
		got, events, outcome, err = r.c.receiveHead(ctx, x, r.ref(), now)
		return err
	})
	if err == nil {
		r.c.observeAlerts(events)
	}
	switch {
	case err != nil:
		return nil, err
	case errors.Is(outcome, ErrLockLost):
		r.markLost()
		return nil, r.lostErr("receive")
	case outcome != nil:
		return nil, fmt.Errorf("session %q of queue %q: %w", r.id, r.queue, outcome)
	case got == nil:
		return nil, nil
	}
	r.current = newReceived(got, r.token, r.state)
	r.c.traceReceived(r.current)
	return r.current, nil
}

// CompleteOptions are optional settings of Complete.
type CompleteOptions struct {
	// SetState replaces the session's state with State (nil clears it) in
	// the same transaction as the completion.
	SetState bool
	State    []byte
}

// Complete settles m as done: it is removed and the next message becomes the
// head. With opts.SetState (or after m.SetSessionState) the session state
// changes in the same transaction. A stale lock fails with ErrLockLost and
// changes nothing.
func (r *SessionReceiver) Complete(ctx context.Context, m *ReceivedMessage, opts *CompleteOptions) error {
	s := store.MessageSettle{Action: store.SettleComplete}
	switch {
	case opts != nil && opts.SetState:
		s.SetState, s.State = true, opts.State
	case m != nil && m.setState:
		s.SetState, s.State = true, m.newState
	}
	return r.settle(ctx, "complete", m, s)
}

// Abandon gives m back: it stays the head of its session and is delivered
// again (its delivery count grows) once delay has passed. The lock stays
// held; Close the receiver to let another consumer have the session.
func (r *SessionReceiver) Abandon(ctx context.Context, m *ReceivedMessage, delay time.Duration) error {
	s := store.MessageSettle{Action: store.SettleAbandon}
	if delay > 0 {
		s.AvailableAt = r.c.now().Add(delay)
	}
	return r.settle(ctx, "abandon", m, s)
}

// DeadLetter moves m to the dead-letter list with reason (at most
// MaxReasonBytes of UTF-8 without NUL characters, else ErrInvalidReason). Under the queue's
// block policy the session halts (an operator alert is recorded) until the
// dead letter is resubmitted or discarded; under skip the session goes on.
func (r *SessionReceiver) DeadLetter(ctx context.Context, m *ReceivedMessage, reason string) error {
	if err := checkReason(reason); err != nil {
		return err
	}
	if reason == "" {
		reason = "dead-lettered by the consumer"
	}
	return r.settle(ctx, "dead-letter", m, store.MessageSettle{Action: store.SettleDeadLetter, Reason: reason})
}

func (r *SessionReceiver) settle(ctx context.Context, what string, m *ReceivedMessage, s store.MessageSettle) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.closed:
		return ErrReceiverClosed
	case m == nil || m != r.current:
		return fmt.Errorf("%s: %w", what, ErrNotReceived)
	case r.isLost():
		r.current = nil
		return r.lostErr(what + " " + m.String())
	}
	now := r.c.now()
	s.Ref, s.Seq = r.ref(), m.Seq
	var errs []error
	var events []*dt.Event
	err := r.c.store.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		events = nil
		if s.Action == store.SettleDeadLetter {
			pol, err := r.c.policy(ctx, x, r.queue)
			if err != nil {
				return err
			}
			s.Block = pol.PoisonPolicy == PoisonBlock
		}
		var err error
		if errs, err = x.MessageSettleMany(ctx, &store.MessageSettleManyParams{Settles: []store.MessageSettle{s}, Now: now}); err != nil || errs[0] != nil {
			return err
		}
		if s.Action == store.SettleDeadLetter {
			ev := deadLetterEvent(r.queue, r.id, m.Seq, m.DeliveryCount, s.Reason, s.Block, r.c.cfg.InstanceID, now)
			events = []*dt.Event{ev}
			return notifier.InsertEvents(ctx, x, events)
		}
		return nil
	})
	if err == nil {
		r.c.traceSettle(m, s.Action, errs[0])
		r.c.observeAlerts(events)
	}
	switch {
	case err != nil:
		return err
	case errors.Is(errs[0], ErrLockLost):
		r.markLost()
		r.current = nil
		return r.lostErr(what + " " + m.String())
	case errs[0] != nil:
		r.current = nil
		return fmt.Errorf("%s %s: %w", what, m, errs[0])
	}
	r.current = nil
	if s.SetState {
		r.state = s.State
	}
	return nil
}

// State returns the session's state blob (nil when never set).
func (r *SessionReceiver) State(ctx context.Context) ([]byte, error) {
	s, err := r.c.store.Reader().SessionGet(ctx, &store.SessionGetParams{Queue: r.queue, SessionID: r.id})
	if err != nil {
		return nil, err
	}
	return s.State, nil
}

// SetState replaces the session's state blob (nil clears it). To change it
// atomically with a completion, use CompleteOptions instead.
func (r *SessionReceiver) SetState(ctx context.Context, state []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.closed:
		return ErrReceiverClosed
	case r.isLost():
		return r.lostErr("set state")
	}
	now := r.c.now()
	err := r.c.store.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		return x.SessionStateSet(ctx, &store.SessionStateSetParams{Ref: r.ref(), State: state, Now: now})
	})
	if errors.Is(err, ErrLockLost) {
		r.markLost()
		return r.lostErr("set state")
	}
	if err != nil {
		return err
	}
	r.state = state
	return nil
}

// Close stops the renewals and releases the session so other consumers can
// accept it. An unsettled message stays at the head and is delivered again
// (its delivery count already counts this delivery). Closing a receiver
// whose lock was lost only stops it.
func (r *SessionReceiver) Close(ctx context.Context) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	close(r.closedCh)
	r.mu.Unlock()
	r.stopRenew()
	<-r.renewDone
	r.c.hub.unsubscribe(r.w)
	if r.isLost() {
		return nil
	}
	now := r.c.now()
	notify := false
	err := r.c.store.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		notify = false
		errs, err := x.SessionRelease(ctx, &store.SessionReleaseParams{Refs: []store.SessionRef{r.ref()}, Now: now})
		if err != nil || errs[0] != nil {
			return err // a lost lock has nothing to release
		}
		s, err := x.SessionGet(ctx, &store.SessionGetParams{Queue: r.queue, SessionID: r.id})
		if err != nil {
			return err
		}
		if notify = s.Pending > 0 && !s.Blocked; notify {
			return store.Notify(ctx, x, &store.NotifyParams{Topic: Topic(r.queue)})
		}
		return nil
	})
	if notify {
		r.c.hub.wake(r.queue)
	}
	return err
}
