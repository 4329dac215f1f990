package droverclient

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/drover-run/drover/droverapi"
)

// Remote session consumers (docs/convoy.md, "Consumers over HTTP"): accept
// a session to get a Lease, then Receive, Settle each message, Renew the
// lease at a third of its LockDuration and Release it. Messages of a
// session come one at a time in sequence order. A stale lease fails with
// an APIError for which IsLockLost is true, and changes nothing.

// maxConsumeWait caps the waits of Accept and Receive.
const maxConsumeWait = 60 * time.Second

// Lease is an accepted session of a queue, held under its lock token.
type Lease struct {
	Queue   string
	Session string
	// LockToken is the opaque token the accept returned ("<n>.<nonce>"):
	// every call under the lease sends it back unchanged.
	LockToken    string
	LockedUntil  time.Time
	LockDuration time.Duration
}

// ReceivedMessage is a message handed to a remote consumer. Settle it with
// its Seq.
type ReceivedMessage = droverapi.ReceivedMessage

// Received is the answer of Receive: a message, or none (Message nil),
// with Blocked or Ended telling when none will come from this session
// (blocked by a dead letter; its end-of-sequence message settled).
type Received = droverapi.ReceiveResult

// Settle outcomes.
const (
	Complete   = "complete"
	Abandon    = "abandon"
	DeadLetter = "dead_letter"
)

// Settlement settles a received message.
type Settlement struct {
	// Outcome is Complete, Abandon or DeadLetter.
	Outcome string
	// Reason (DeadLetter) is recorded with the dead letter.
	Reason string
	// Delay (Abandon) is how long until the message is delivered again.
	Delay time.Duration
}

// IsLockLost reports whether err is the server's answer to a stale lock
// token (409 lock_lost): the lease is gone, accept the session again.
func IsLockLost(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Status == http.StatusConflict && ae.Code == "lock_lost"
}

func checkWait(wait time.Duration) error {
	if wait < 0 || wait > maxConsumeWait {
		return fmt.Errorf("droverclient: wait %v: want 0-%v", wait, maxConsumeWait)
	}
	return nil
}

func (c *Client) leasePath(l *Lease, action string) (string, error) {
	if l == nil || l.Queue == "" || l.Session == "" || l.LockToken == "" {
		return "", errors.New("droverclient: the lease has no queue, session or lock token (use a Lease from Accept)")
	}
	return c.url(nil, "/v1/queues", seg(l.Queue), "sessions", seg(l.Session), action), nil
}

// Accept accepts the next available session of queue, waiting up to wait
// (at most 60s) for one; nil, nil when none came. See AcceptSession for a
// named one.
func (c *Client) Accept(ctx context.Context, queue string, wait time.Duration) (*Lease, error) {
	if err := checkWait(wait); err != nil {
		return nil, err
	}
	ms := wait.Milliseconds()
	return c.accept(ctx, queue, droverapi.AcceptRequest{WaitMS: &ms})
}

// AcceptSession accepts the named session of queue at once. Unknown:
// ErrNotFound; held by another consumer: ErrConflict (code
// "session_locked").
func (c *Client) AcceptSession(ctx context.Context, queue, session string) (*Lease, error) {
	if session == "" {
		return nil, errors.New("droverclient: the session ID is empty")
	}
	return c.accept(ctx, queue, droverapi.AcceptRequest{Session: &session})
}

func (c *Client) accept(ctx context.Context, queue string, body droverapi.AcceptRequest) (*Lease, error) {
	var out droverapi.Lease
	if _, err := c.do(ctx, http.MethodPost, c.url(nil, "/v1/queues", seg(queue), "/sessions:accept"), body, &out); err != nil {
		return nil, err
	}
	if out.Session == nil {
		return nil, nil
	}
	l := &Lease{Queue: queue, Session: *out.Session, LockToken: out.LockToken,
		LockDuration: time.Duration(out.LockDurationMS) * time.Millisecond}
	if out.LockedUntil != nil {
		l.LockedUntil = *out.LockedUntil
	}
	return l, nil
}

// Receive waits up to wait (at most 60s) for the head message of the
// leased session. Settle it before the next Receive: receiving again
// without a settle delivers the same message again.
func (c *Client) Receive(ctx context.Context, l *Lease, wait time.Duration) (*Received, error) {
	if err := checkWait(wait); err != nil {
		return nil, err
	}
	u, err := c.leasePath(l, "receive")
	if err != nil {
		return nil, err
	}
	ms := wait.Milliseconds()
	body := droverapi.ReceiveRequest{LockToken: &l.LockToken, WaitMS: &ms}
	var out Received
	if _, err := c.do(ctx, http.MethodPost, u, body, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Settle settles message seq of the leased session. A message settled
// already: ErrConflict (code "not_head").
func (c *Client) Settle(ctx context.Context, l *Lease, seq int64, s Settlement) error {
	u, err := c.leasePath(l, "settle")
	if err != nil {
		return err
	}
	body := droverapi.SettleRequest{LockToken: &l.LockToken, Seq: &seq, Outcome: &s.Outcome}
	if s.Reason != "" {
		body.Reason = &s.Reason
	}
	if s.Delay > 0 {
		ms := s.Delay.Milliseconds()
		body.DelayMS = &ms
	}
	_, err = c.do(ctx, http.MethodPost, u, body, nil)
	return err
}

// Renew extends the lease's lock by the queue's lock duration and updates
// l.LockedUntil.
func (c *Client) Renew(ctx context.Context, l *Lease) error {
	u, err := c.leasePath(l, "renew")
	if err != nil {
		return err
	}
	var out droverapi.LockRenewed
	if _, err := c.do(ctx, http.MethodPost, u, droverapi.LockRequest{LockToken: &l.LockToken}, &out); err != nil {
		return err
	}
	l.LockedUntil = out.LockedUntil
	return nil
}

// Release frees the leased session for other consumers; an unsettled
// message stays at its head.
func (c *Client) Release(ctx context.Context, l *Lease) error {
	u, err := c.leasePath(l, "release")
	if err != nil {
		return err
	}
	_, err = c.do(ctx, http.MethodPost, u, droverapi.LockRequest{LockToken: &l.LockToken}, nil)
	return err
}
