package backend

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/drover-run/drover/convoy"
	"github.com/drover-run/drover/droverclient"
)

// remoteConsumer accepts sessions over the API.
type remoteConsumer struct {
	r     *Remote
	queue string
}

// maxRemoteWait is the longest wait of one accept or receive call.
const maxRemoteWait = 30 * time.Second

func (s *remoteConsumer) Accept(ctx, runCtx context.Context) (Session, error) {
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
		l, err := s.r.Client.Accept(runCtx, s.queue, wait.Truncate(time.Millisecond))
		if err != nil {
			return nil, err
		}
		if l != nil {
			return newHeldSession(s.r.Client, l), nil
		}
	}
}

func (s *remoteConsumer) Explain(err error) error { return s.r.Err(err) }

// heldSession is a session held over the API: its lease is
// renewed in the background at a third of the lock duration until close.
type heldSession struct {
	c         *droverclient.Client
	l         *droverclient.Lease
	lost      chan struct{}
	lostOnce  sync.Once
	stopRenew context.CancelFunc
	renewDone chan struct{}
}

func newHeldSession(c *droverclient.Client, l *droverclient.Lease) *heldSession {
	s := &heldSession{c: c, l: l, lost: make(chan struct{}), renewDone: make(chan struct{})}
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

// renewLoop renews the lease until stopped or lost. A failed renewal
// (the server unreachable) is retried at the next tick; the server's
// lock_lost ends the session.
func (s *heldSession) renewLoop(ctx context.Context) {
	defer close(s.renewDone)
	t := time.NewTicker(max(s.l.LockDuration/3, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, max(s.l.LockDuration/3, time.Second))
		err := s.c.Renew(rctx, s.l)
		cancel()
		if droverclient.IsLockLost(err) {
			s.markLost()
			return
		}
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
	return s.lockErr(s.c.Settle(ctx, s.l, m.Seq, droverclient.Settlement{Outcome: droverclient.Complete}))
}

func (s *heldSession) Abandon(ctx context.Context, m *Message, delay time.Duration) error {
	return s.lockErr(s.c.Settle(ctx, s.l, m.Seq, droverclient.Settlement{Outcome: droverclient.Abandon, Delay: delay}))
}

func (s *heldSession) Close(ctx context.Context) error {
	s.stopRenew()
	<-s.renewDone
	if s.isLost() {
		return nil
	}
	err := s.c.Release(ctx, s.l)
	if droverclient.IsLockLost(err) {
		return nil
	}
	return err
}
