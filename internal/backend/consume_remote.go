package backend

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/drover-run/drover/convoy"
	"github.com/drover-run/drover/droverclient"
)

// maxRemoteWait is the longest wait of one accept or receive call.
const maxRemoteWait = 30 * time.Second

// A consumer whose sessions keep losing their locks before a message is
// completed waits before accepting again, from one lock duration, doubled
// per lost session up to maxAcceptBackoff: each accept is work for a
// server that is already too slow, and looping on it only makes it slower.
const maxAcceptBackoff = 5 * time.Second

// lostBeforeRefusing is how many sessions in a row may be lost before a
// consumer whose round trip is over half the lock duration gives up.
const lostBeforeRefusing = 3

// minRenewInterval bounds how often a lease is renewed.
const minRenewInterval = 10 * time.Millisecond

// ErrLockTooShort is the failure of a remote consume whose round trips to
// the server take so long that a session's lock expires before one of its
// messages can be received and completed.
var ErrLockTooShort = errors.New("the queue's lock duration is too short for the round trips to the server")

// remoteConsumer accepts sessions over the API. Its sessions report the
// round trips they measure and whether they lost their lock, so that a
// loaded server sees fewer accepts instead of a loop of them.
type remoteConsumer struct {
	r     *Remote
	queue string

	rtt  atomic.Int64 // the last round trip measured, in ns (0: none yet)
	mu   sync.Mutex
	lock time.Duration // the lock duration of the last session accepted
	lost int           // sessions lost in a row with no message completed
}

func (s *remoteConsumer) Accept(ctx, runCtx context.Context) (Session, error) {
	if err := s.backoff(ctx); err != nil {
		return nil, err
	}
	for {
		wait := maxRemoteWait
		if dl, ok := ctx.Deadline(); ok {
			wait = min(wait, time.Until(dl))
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if wait <= 0 {
			return nil, context.DeadlineExceeded
		}
		// The call runs under runCtx, not ctx: the server ends the wait,
		// so an accepted session is never lost to a cut request.
		start := time.Now()
		l, err := s.r.Client.Accept(runCtx, s.queue, wait.Truncate(time.Millisecond))
		if err != nil {
			return nil, err
		}
		if l != nil {
			// An accept that found a session at once took a round trip;
			// one that waited took more. Either way it bounds the first
			// renewal's round trip until a renewal measures it.
			if s.rtt.Load() == 0 {
				s.rtt.Store(int64(time.Since(start)))
			}
			return newHeldSession(s, l), nil
		}
	}
}

// backoff waits before an accept after sessions were lost, or refuses when
// the round trip leaves no time to complete a message within the lock.
func (s *remoteConsumer) backoff(ctx context.Context) error {
	s.mu.Lock()
	lost := s.lost
	s.mu.Unlock()
	if lost == 0 {
		return nil
	}
	lock := s.lockDuration()
	rtt := time.Duration(s.rtt.Load())
	if lost >= lostBeforeRefusing && 2*rtt >= lock {
		return fmt.Errorf("%w: %d sessions of queue %q in a row lost their lock (%s) before a message was completed; a round trip takes %s, and a receive and a complete take two: raise the lock duration ('drover queue policy --queue %s --lock-duration DURATION') or consume nearer the server",
			ErrLockTooShort, lost, s.queue, lock, rtt.Round(time.Millisecond), s.queue)
	}
	d := min(lock<<min(lost-1, 16), maxAcceptBackoff)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// lockDuration is the lock duration of the last session accepted.
func (s *remoteConsumer) lockDuration() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lock
}

func (s *remoteConsumer) Explain(err error) error {
	if errors.Is(err, ErrLockTooShort) {
		return err
	}
	return s.r.Err(err)
}

// ended records how a session ended: lost with nothing completed, or not.
func (s *remoteConsumer) ended(lost, completed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case completed:
		s.lost = 0
	case lost:
		s.lost++
	}
}

// heldSession is a session held over the API: its lease is renewed in the
// background until close, early enough that a renewal's round trip ends
// before the lock does.
type heldSession struct {
	src       *remoteConsumer
	c         *droverclient.Client
	l         *droverclient.Lease
	lost      chan struct{}
	lostOnce  sync.Once
	completed atomic.Bool // a message was completed under this lease
	stopRenew context.CancelFunc
	renewDone chan struct{}
}

func newHeldSession(src *remoteConsumer, l *droverclient.Lease) *heldSession {
	src.mu.Lock()
	src.lock = l.LockDuration
	src.mu.Unlock()
	s := &heldSession{src: src, c: src.r.Client, l: l, lost: make(chan struct{}), renewDone: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	s.stopRenew = cancel
	go s.renewLoop(ctx)
	return s
}

func (s *heldSession) markLost() { s.lostOnce.Do(func() { close(s.lost) }) }

func (s *heldSession) isLost() bool {
	select {
	case <-s.lost:
		return true
	default:
		return false
	}
}

// renewInterval is the wait before the next renewal: a third of the lock
// duration, less when the measured round trip would otherwise bring the
// renewal to the server after the lock ended.
func (s *heldSession) renewInterval() time.Duration {
	lock := s.l.LockDuration
	rtt := time.Duration(s.src.rtt.Load())
	return max(min(lock/3, lock-2*rtt), minRenewInterval)
}

// timed runs one call and records its round trip.
func (s *heldSession) timed(call func() error) error {
	start := time.Now()
	err := call()
	if err == nil || droverclient.IsLockLost(err) {
		s.src.rtt.Store(int64(time.Since(start)))
	}
	return err
}

// renewLoop renews the lease until stopped or lost. A failed renewal
// (the server unreachable) is retried at the next tick; the server's
// lock_lost ends the session.
func (s *heldSession) renewLoop(ctx context.Context) {
	defer close(s.renewDone)
	t := time.NewTimer(s.renewInterval())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// A renewal helps until the lock ends, however slow the server:
		// cut sooner, a round trip longer than the cut never renews.
		rctx, cancel := context.WithTimeout(ctx, max(s.l.LockDuration, time.Second))
		err := s.timed(func() error { return s.c.Renew(rctx, s.l) })
		cancel()
		if droverclient.IsLockLost(err) {
			s.markLost()
			return
		}
		t.Reset(s.renewInterval())
	}
}

// lockErr turns the server's lock_lost into convoy.ErrLockLost.
func (s *heldSession) lockErr(err error) error {
	if droverclient.IsLockLost(err) {
		s.markLost()
		return fmt.Errorf("%w: %w", convoy.ErrLockLost, err)
	}
	return err
}

func (s *heldSession) Receive(ctx context.Context, idle time.Duration) (*Message, error) {
	if s.isLost() {
		return nil, convoy.ErrLockLost
	}
	r, err := s.c.Receive(ctx, s.l, min(idle, maxRemoteWait).Truncate(time.Millisecond))
	switch {
	case err != nil:
		return nil, s.lockErr(err)
	case r.Blocked:
		return nil, convoy.ErrSessionBlocked
	case r.Ended:
		return nil, convoy.ErrSessionEnded
	case r.Message == nil:
		return nil, context.DeadlineExceeded
	}
	m := r.Message
	return &Message{Queue: m.Queue, SessionID: m.SessionID, Seq: m.Seq, MessageID: m.MessageID, Body: []byte(m.Body),
		DeliveryCount: m.DeliveryCount, EndOfSequence: m.EndOfSequence}, nil
}

func (s *heldSession) Complete(ctx context.Context, m *Message) error {
	err := s.timed(func() error {
		return s.c.Settle(ctx, s.l, m.Seq, droverclient.Settlement{Outcome: droverclient.Complete})
	})
	if err == nil {
		s.completed.Store(true)
	}
	return s.lockErr(err)
}

func (s *heldSession) Abandon(ctx context.Context, m *Message, delay time.Duration) error {
	return s.lockErr(s.timed(func() error {
		return s.c.Settle(ctx, s.l, m.Seq, droverclient.Settlement{Outcome: droverclient.Abandon, Delay: delay})
	}))
}

func (s *heldSession) Close(ctx context.Context) error {
	s.stopRenew()
	<-s.renewDone
	if s.isLost() {
		s.src.ended(true, s.completed.Load())
		return nil
	}
	err := s.timed(func() error { return s.c.Release(ctx, s.l) })
	s.src.ended(droverclient.IsLockLost(err), s.completed.Load())
	if droverclient.IsLockLost(err) {
		return nil
	}
	return err
}
