package convoy

import (
	"context"
	"errors"
	"fmt"
	"time"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/notifier"
	"github.com/drover-run/drover/store"
)

// Leases are session locks held by a lock token alone, for consumers that
// live in other processes and reach the store through this client (the HTTP
// API's remote session consumers). Unlike a SessionReceiver nothing runs in
// the background: the consumer renews the lease itself, at a third of
// Lease.LockDuration, and every call names the lease by its LockRef. A stale
// token (the lock expired, was released, or another consumer accepted the
// session since) fails with ErrLockLost and changes nothing. Receives,
// settles, delivery counts, poison handling and events are those of
// SessionReceiver: the same store calls in the same transactions.
//
// A lease holder is trusted as a SessionReceiver is: a receive while the
// previous message is unsettled is not refused but delivers the head again
// (its delivery count grows), since the store cannot tell a consumer that
// lost its answer from one that did not settle. Either way message n+1 is
// never handed out before message n is settled.

// LockRef names a session held under a lock token.
type LockRef struct {
	Queue     string
	SessionID string
	Token     int64
	// Holder, when not "", must also be the session's lock holder: the
	// calls check it in the transaction of their operation, so a guessed
	// Token alone does not act on another holder's lease (ErrLockLost).
	Holder string
}

func (r LockRef) sessionRef() store.SessionRef {
	return store.SessionRef{Queue: r.Queue, SessionID: r.SessionID, Token: r.Token}
}

// checkHolder fails with ErrLockLost unless ref.Holder is "" or the
// session is held under ref.Token by ref.Holder. It runs inside the
// operation's transaction; SessionGet locks the row there, and a holder
// changes only on an accept, which also changes the token the operation
// checks.
func checkHolder(ctx context.Context, x store.Executor, ref LockRef) error {
	if ref.Holder == "" {
		return nil
	}
	s, err := x.SessionGet(ctx, &store.SessionGetParams{Queue: ref.Queue, SessionID: ref.SessionID})
	if errors.Is(err, store.ErrNotFound) {
		return ErrLockLost
	}
	if err != nil {
		return err
	}
	if s.LockHolder != ref.Holder || s.LockToken != ref.Token {
		return ErrLockLost
	}
	return nil
}

// Lease is an accepted session.
type Lease struct {
	Queue     string
	SessionID string
	// Token is the session's lock token; calls made under the lease name it.
	Token int64
	// Holder is the lock holder the session was accepted under.
	Holder string
	// LockedUntil is when the lock expires unless renewed.
	LockedUntil time.Time
	// LockDuration is the queue's lock duration: renew at a third of it.
	LockDuration time.Duration
}

// Ref returns the lock reference of the lease.
func (l *Lease) Ref() LockRef {
	return LockRef{Queue: l.Queue, SessionID: l.SessionID, Token: l.Token, Holder: l.Holder}
}

// AcceptLease locks a session of queue to holder ("" means this client's
// InstanceID) and returns the lease. With sessionID it accepts that session
// at once or fails (ErrNotFound, ErrSessionLocked); without, it accepts the
// next available session as AcceptNextSession does, waiting up to wait, and
// returns nil, nil when none became available in time. The lease's Ref
// carries holder, so the Lease calls made with it check the holder as well
// as the token: give each lease its own secret holder when tokens reach
// untrusted parties.
func (c *Client) AcceptLease(ctx context.Context, queue, sessionID, holder string, wait time.Duration) (*Lease, error) {
	if err := checkQueue(queue); err != nil {
		return nil, err
	}
	if holder == "" {
		holder = c.cfg.InstanceID
	}
	if sessionID != "" {
		if err := checkSession(sessionID); err != nil {
			return nil, err
		}
		return c.acceptLease(ctx, queue, sessionID, holder)
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	var l *Lease
	if _, err := c.waitQueue(ctx, queue, c.nextSessionWait(ctx, queue), deadline.C, func() (bool, error) {
		var err error
		l, err = c.acceptLease(ctx, queue, "", holder)
		return l != nil, err
	}); err != nil {
		return nil, err
	}
	return l, nil
}

func (c *Client) acceptLease(ctx context.Context, queue, sessionID, holder string) (*Lease, error) {
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
		got, err := x.SessionAccept(ctx, &store.SessionAcceptParams{Queue: queue, SessionID: sessionID, Holder: holder, Now: now, Limit: 1})
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
	l := &Lease{Queue: queue, SessionID: s.ID, Token: s.LockToken, Holder: holder, LockDuration: pol.LockDuration}
	if s.LockedUntil != nil {
		l.LockedUntil = *s.LockedUntil
		if d := s.LockedUntil.Sub(now); d > 0 {
			l.LockDuration = d
		}
	}
	return l, nil
}

// LeaseReceive waits up to wait for the head message of the leased session
// and returns it with its delivery count incremented, or nil, nil when none
// became available in time. Like SessionReceiver.Receive it dead-letters a
// message received more often than the queue's MaxDeliveryCount, and fails
// with ErrSessionBlocked, ErrSessionEnded or ErrLockLost.
func (c *Client) LeaseReceive(ctx context.Context, ref LockRef, wait time.Duration) (*ReceivedMessage, error) {
	if err := checkQueue(ref.Queue); err != nil {
		return nil, err
	}
	if err := checkSession(ref.SessionID); err != nil {
		return nil, err
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	var m *ReceivedMessage
	headWait := func(now time.Time) time.Duration {
		return c.headWait(ctx, ref.Queue, ref.SessionID, now, c.cfg.PollInterval)
	}
	if _, err := c.waitQueue(ctx, ref.Queue, headWait, deadline.C, func() (bool, error) {
		var err error
		m, err = c.receiveRef(ctx, ref)
		return m != nil, err
	}); err != nil {
		return nil, err
	}
	return m, nil
}

// receiveRef receives the head of a held session if it is available; nil,
// nil if not.
func (c *Client) receiveRef(ctx context.Context, ref LockRef) (*ReceivedMessage, error) {
	now := c.now()
	var (
		got     *dt.Message
		events  []*dt.Event
		outcome error
	)
	err := c.store.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		events = nil
		if err := checkHolder(ctx, x, ref); errors.Is(err, ErrLockLost) {
			outcome = err
			return nil
		} else if err != nil {
			return err
		}
		var err error
		got, events, outcome, err = c.receiveHead(ctx, x, ref.sessionRef(), now)
		return err
	})
	if err == nil {
		c.observeAlerts(events)
	}
	switch {
	case err != nil:
		return nil, err
	case errors.Is(outcome, ErrLockLost):
		return nil, fmt.Errorf("receive: session %q of queue %q: %w", ref.SessionID, ref.Queue, ErrLockLost)
	case outcome != nil:
		return nil, fmt.Errorf("session %q of queue %q: %w", ref.SessionID, ref.Queue, outcome)
	case got == nil:
		return nil, nil
	}
	m := newReceived(got, ref.Token, nil)
	c.traceReceived(m)
	return m, nil
}

// receiveHead is the transaction body of a receive, shared by
// SessionReceiver and leases: it receives the head of the held session,
// dead-lettering heads past the queue's MaxDeliveryCount (and recording
// their events). got is the message received; outcome is ErrLockLost,
// ErrSessionBlocked or ErrSessionEnded when nothing can be received; both
// nil when nothing is available now.
func (c *Client) receiveHead(ctx context.Context, x store.Executor, ref store.SessionRef, now time.Time) (got *dt.Message, events []*dt.Event, outcome, err error) {
	for {
		msgs, errs, err := x.MessageReceiveMany(ctx, &store.MessageReceiveManyParams{Refs: []store.SessionRef{ref}, Now: now})
		if err != nil {
			return nil, nil, nil, err
		}
		if errs[0] != nil {
			return nil, nil, errs[0], nil
		}
		m := msgs[0]
		if m == nil {
			s, err := x.SessionGet(ctx, &store.SessionGetParams{Queue: ref.Queue, SessionID: ref.SessionID})
			if err != nil {
				return nil, nil, nil, err
			}
			switch {
			case s.Blocked:
				outcome = ErrSessionBlocked
			case s.Closed && s.Pending == 0:
				outcome = ErrSessionEnded
			}
			return nil, events, outcome, notifier.InsertEvents(ctx, x, events)
		}
		pol, err := c.policy(ctx, x, ref.Queue)
		if err != nil {
			return nil, nil, nil, err
		}
		settle, bad := poisoned(m, ref.Token, pol)
		if !bad {
			return m, events, nil, notifier.InsertEvents(ctx, x, events)
		}
		serrs, err := x.MessageSettleMany(ctx, &store.MessageSettleManyParams{Settles: []store.MessageSettle{settle}, Now: now})
		if err != nil {
			return nil, nil, nil, err
		}
		if serrs[0] != nil {
			return nil, nil, nil, fmt.Errorf("dead-letter %s message %d: %w", ref.Queue, m.Seq, serrs[0])
		}
		events = append(events, deadLetterEvent(ref.Queue, ref.SessionID, m.Seq, m.DeliveryCount, settle.Reason, settle.Block, c.cfg.InstanceID, now))
		if settle.Block {
			return nil, events, ErrSessionBlocked, notifier.InsertEvents(ctx, x, events)
		}
	}
}

// LeaseComplete settles message seq of the leased session as done. It fails
// with ErrLockLost or ErrNotHead (seq is not the session's head: settled
// already, or never received) and then changes nothing.
func (c *Client) LeaseComplete(ctx context.Context, ref LockRef, seq int64) error {
	return c.leaseSettle(ctx, "complete", ref.Holder, store.MessageSettle{Ref: ref.sessionRef(), Seq: seq, Action: store.SettleComplete})
}

// LeaseAbandon gives message seq back: it stays the head and is delivered
// again once delay has passed. The lease stays held.
func (c *Client) LeaseAbandon(ctx context.Context, ref LockRef, seq int64, delay time.Duration) error {
	s := store.MessageSettle{Ref: ref.sessionRef(), Seq: seq, Action: store.SettleAbandon}
	if delay > 0 {
		s.AvailableAt = c.now().Add(delay)
	}
	return c.leaseSettle(ctx, "abandon", ref.Holder, s)
}

// LeaseDeadLetter moves message seq to the dead-letter list with reason,
// as SessionReceiver.DeadLetter does (under the block policy the session
// halts and an operator alert is recorded).
func (c *Client) LeaseDeadLetter(ctx context.Context, ref LockRef, seq int64, reason string) error {
	if err := checkReason(reason); err != nil {
		return err
	}
	if reason == "" {
		reason = "dead-lettered by the consumer"
	}
	return c.leaseSettle(ctx, "dead-letter", ref.Holder, store.MessageSettle{Ref: ref.sessionRef(), Seq: seq, Action: store.SettleDeadLetter, Reason: reason})
}

func (c *Client) leaseSettle(ctx context.Context, what, holder string, s store.MessageSettle) error {
	if err := checkQueue(s.Ref.Queue); err != nil {
		return err
	}
	if err := checkSession(s.Ref.SessionID); err != nil {
		return err
	}
	now := c.now()
	errs := []error{nil}
	var events []*dt.Event
	var traced *dt.Message // the message settled, read first when tracing is on
	err := c.store.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		errs, events, traced = []error{nil}, nil, nil
		ref := LockRef{Queue: s.Ref.Queue, SessionID: s.Ref.SessionID, Token: s.Ref.Token, Holder: holder}
		if err := checkHolder(ctx, x, ref); errors.Is(err, ErrLockLost) {
			errs[0] = err
			return nil
		} else if err != nil {
			return err
		}
		if c.tracer.On() {
			ms, err := x.MessagePeek(ctx, &store.MessagePeekParams{Queue: s.Ref.Queue, SessionID: s.Ref.SessionID, FromSeq: s.Seq, Limit: 1})
			if err != nil {
				return err
			}
			if len(ms) == 1 && ms[0].Seq == s.Seq {
				traced = ms[0]
			}
		}
		if s.Action == store.SettleDeadLetter {
			pol, err := c.policy(ctx, x, s.Ref.Queue)
			if err != nil {
				return err
			}
			s.Block = pol.PoisonPolicy == PoisonBlock
		}
		var err error
		if errs, err = x.MessageSettleMany(ctx, &store.MessageSettleManyParams{Settles: []store.MessageSettle{s}, Now: now}); err != nil || errs[0] != nil {
			return err
		}
		if s.Action != store.SettleDeadLetter {
			return nil
		}
		// The dead message is kept: its delivery count names the event.
		ms, err := x.MessagePeek(ctx, &store.MessagePeekParams{Queue: s.Ref.Queue, SessionID: s.Ref.SessionID, FromSeq: s.Seq, Limit: 1})
		if err != nil {
			return err
		}
		deliveries := 0
		if len(ms) == 1 && ms[0].Seq == s.Seq {
			deliveries = ms[0].DeliveryCount
		}
		ev := deadLetterEvent(s.Ref.Queue, s.Ref.SessionID, s.Seq, deliveries, s.Reason, s.Block, c.cfg.InstanceID, now)
		events = []*dt.Event{ev}
		return notifier.InsertEvents(ctx, x, events)
	})
	if err == nil {
		c.observeAlerts(events)
		if traced != nil {
			c.traceSettle(newReceived(traced, s.Ref.Token, nil), s.Action, errs[0])
		}
	}
	switch {
	case err != nil:
		return err
	case errs[0] != nil:
		return fmt.Errorf("%s message %d of session %q of queue %q: %w", what, s.Seq, s.Ref.SessionID, s.Ref.Queue, errs[0])
	}
	return nil
}

// LeaseRenew extends the lease's lock by the queue's lock duration from now
// and returns the new expiry; ErrLockLost if it is no longer held.
func (c *Client) LeaseRenew(ctx context.Context, ref LockRef) (time.Time, error) {
	if err := checkQueue(ref.Queue); err != nil {
		return time.Time{}, err
	}
	if err := checkSession(ref.SessionID); err != nil {
		return time.Time{}, err
	}
	now := c.now()
	var until time.Time
	err := c.store.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		pol, err := c.policy(ctx, x, ref.Queue)
		if err != nil {
			return err
		}
		until = now.Add(pol.LockDuration)
		if err := checkHolder(ctx, x, ref); err != nil {
			return err
		}
		errs, err := x.SessionRenew(ctx, &store.SessionRenewParams{Refs: []store.SessionRef{ref.sessionRef()}, Now: now, Until: until})
		if err != nil {
			return err
		}
		return errs[0]
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("renew session %q of queue %q: %w", ref.SessionID, ref.Queue, err)
	}
	return until, nil
}

// LeaseRelease frees the leased session so other consumers can accept it,
// as SessionReceiver.Close does; an unsettled message stays at the head.
// ErrLockLost if it is no longer held.
func (c *Client) LeaseRelease(ctx context.Context, ref LockRef) error {
	if err := checkQueue(ref.Queue); err != nil {
		return err
	}
	if err := checkSession(ref.SessionID); err != nil {
		return err
	}
	now := c.now()
	notify := false
	err := c.store.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		notify = false
		if err := checkHolder(ctx, x, ref); err != nil {
			return err
		}
		errs, err := x.SessionRelease(ctx, &store.SessionReleaseParams{Refs: []store.SessionRef{ref.sessionRef()}, Now: now})
		if err != nil {
			return err
		}
		if errs[0] != nil {
			return errs[0]
		}
		s, err := x.SessionGet(ctx, &store.SessionGetParams{Queue: ref.Queue, SessionID: ref.SessionID})
		if err != nil {
			return err
		}
		if notify = s.Pending > 0 && !s.Blocked; notify {
			return store.Notify(ctx, x, &store.NotifyParams{Topic: Topic(ref.Queue)})
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("release session %q of queue %q: %w", ref.SessionID, ref.Queue, err)
	}
	if notify {
		c.hub.wake(ref.Queue)
	}
	return nil
}
