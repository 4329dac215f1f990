package cli

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/drover-run/drover/convoy"
	"github.com/drover-run/drover/droverclient"
	"github.com/drover-run/drover/internal/clicore"
)

// printPublished prints the outcome of "queue publish".
func (e *env) printPublished(queue, messageID, session string, seq int64, duplicate bool) error {
	if e.JSON {
		return clicore.WriteJSON(e.Stdout, PublishedJSON{Queue: queue, Session: session, Seq: seq, Duplicate: duplicate, MessageID: messageID})
	}
	if duplicate {
		fmt.Fprintf(e.Stdout, "duplicate: message ID %q was published within the dedupe window as message %d of session %s; nothing stored\n", messageID, seq, session)
		return nil
	}
	fmt.Fprintf(e.Stdout, "published message %d to session %s of queue %s\n", seq, session, queue)
	return nil
}

// printResolved prints the outcome of "queue resolve" with the session
// after it.
func (e *env) printResolved(queue, session string, seq int64, action string, s *convoy.Session) error {
	now := time.Now()
	if e.JSON {
		return clicore.WriteJSON(e.Stdout, struct {
			Queue   string      `json:"queue"`
			Seq     int64       `json:"seq"`
			Action  string      `json:"action"`
			Session SessionJSON `json:"session"`
		}{queue, seq, action, sessionJSON(s, now)})
	}
	if action == "resubmitted" {
		fmt.Fprintf(e.Stdout, "resubmitted message %d of session %s (queue %s): it is the head of the session again, delivered next; %d pending%s\n",
			seq, session, queue, s.Pending, sessionFlags(s, now))
	} else {
		fmt.Fprintf(e.Stdout, "discarded message %d of session %s (queue %s); %d pending%s\n", seq, session, queue, s.Pending, sessionFlags(s, now))
	}
	return nil
}

// printPolicy prints a queue's policy as "queue policy" does; created and
// changed tell the first line.
func (e *env) printPolicy(q *convoy.Queue, created, change bool) error {
	if e.JSON {
		return clicore.WriteJSON(e.Stdout, queueJSON(q))
	}
	switch {
	case created:
		fmt.Fprintf(e.Stdout, "created queue %s\n", q.Name)
	case change:
		fmt.Fprintf(e.Stdout, "updated the policy of queue %s\n", q.Name)
	}
	tw := newTable(e.Stdout)
	row(tw, "Queue:", q.Name)
	row(tw, "Max delivery count:", strconv.Itoa(q.MaxDeliveryCount))
	row(tw, "Poison policy:", string(q.PoisonPolicy))
	dw := q.DedupeWindow.String()
	if q.DedupeWindow == 0 {
		dw = "0s (off)"
	}
	row(tw, "Dedupe window:", dw)
	row(tw, "Lock duration:", q.LockDuration.String())
	row(tw, "Created:", fmtTime(&q.CreatedAt))
	row(tw, "Updated:", fmtTime(&q.UpdatedAt))
	return tw.Flush()
}

// remoteConsumeSource accepts sessions for "queue consume --server".
type remoteConsumeSource struct {
	e     *env
	queue string
}

// maxRemoteWait is the longest wait of one accept or receive call.
const maxRemoteWait = 30 * time.Second

func (s *remoteConsumeSource) accept(ctx, runCtx context.Context) (consumeSession, error) {
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
		l, err := s.e.remote.Accept(runCtx, s.queue, wait.Truncate(time.Millisecond))
		if err != nil {
			return nil, err
		}
		if l != nil {
			return newRemoteConsumeSession(s.e.remote, l), nil
		}
	}
}

func (s *remoteConsumeSource) explain(err error) error { return s.e.remoteErr(err) }

// remoteConsumeSession is a session held over the API: its lease is
// renewed in the background at a third of the lock duration until close.
type remoteConsumeSession struct {
	c         *droverclient.Client
	l         *droverclient.Lease
	lost      chan struct{}
	lostOnce  sync.Once
	stopRenew context.CancelFunc
	renewDone chan struct{}
}

func newRemoteConsumeSession(c *droverclient.Client, l *droverclient.Lease) *remoteConsumeSession {
	s := &remoteConsumeSession{c: c, l: l, lost: make(chan struct{}), renewDone: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	s.stopRenew = cancel
	go s.renewLoop(ctx)
	return s
}

func (s *remoteConsumeSession) markLost() { s.lostOnce.Do(func() { close(s.lost) }) }

func (s *remoteConsumeSession) isLost() bool {
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
func (s *remoteConsumeSession) renewLoop(ctx context.Context) {
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
func (s *remoteConsumeSession) lockErr(err error) error {
	if droverclient.IsLockLost(err) {
		s.markLost()
		return fmt.Errorf("%w: %w", convoy.ErrLockLost, err)
	}
	return err
}

func (s *remoteConsumeSession) receive(ctx context.Context, idle time.Duration) (*consumeMsg, error) {
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
	return &consumeMsg{Queue: m.Queue, SessionID: m.SessionID, Seq: m.Seq, MessageID: m.MessageID, Body: []byte(m.Body),
		DeliveryCount: m.DeliveryCount, EndOfSequence: m.EndOfSequence}, nil
}

func (s *remoteConsumeSession) complete(ctx context.Context, m *consumeMsg) error {
	return s.lockErr(s.c.Settle(ctx, s.l, m.Seq, droverclient.Settlement{Outcome: droverclient.Complete}))
}

func (s *remoteConsumeSession) abandon(ctx context.Context, m *consumeMsg, delay time.Duration) error {
	return s.lockErr(s.c.Settle(ctx, s.l, m.Seq, droverclient.Settlement{Outcome: droverclient.Abandon, Delay: delay}))
}

func (s *remoteConsumeSession) close(ctx context.Context) error {
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
