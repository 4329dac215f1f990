package convoy

import (
	"context"
	"fmt"
	"time"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/store"
)

// Queue is a queue and its policy, as the store records it.
type Queue = dt.Queue

// Session is a session's state-store record: its next sequence number,
// pending count, lock, state blob and closed/blocked flags.
type Session = dt.Session

// StoredMessage is a message's state-store record (Peek, DeadLetters).
type StoredMessage = dt.Message

// PoisonPolicy says what a dead-lettered message does to its session.
type PoisonPolicy = dt.PoisonPolicy

// Poison policies.
const (
	// PoisonBlock halts the session until an operator resubmits or discards
	// the dead letter: strict FIFO is kept. The default.
	PoisonBlock = dt.PoisonBlock
	// PoisonSkip goes on with the session's next message; the dead letter
	// is the recorded gap.
	PoisonSkip = dt.PoisonSkip
)

// NoDedupe as QueuePolicy.DedupeWindow turns de-duplication off.
const NoDedupe time.Duration = -1

// QueuePolicy is a queue's policy. Zero fields take the defaults: 10
// deliveries, PoisonBlock, a 10-minute dedupe window, a 30-second lock.
type QueuePolicy struct {
	// Name is the queue's name.
	Name string
	// MaxDeliveryCount is how many times a message is delivered; a message
	// received once more than that is dead-lettered instead, with the reason
	// ReasonMaxDeliveryCount.
	MaxDeliveryCount int
	// Poison is what a dead-lettered message does to its session.
	Poison PoisonPolicy
	// DedupeWindow is how long a message ID is remembered; NoDedupe turns
	// de-duplication off.
	DedupeWindow time.Duration
	// LockDuration is how long an accepted session stays locked without a
	// renewal; receivers and processors renew at a third of it. 10ms to 24h.
	LockDuration time.Duration
}

// SetQueuePolicy creates the queue with policy p or replaces its policy. A
// new policy applies to messages delivered from then on; processors in other
// processes pick it up within a few seconds.
func (c *Client) SetQueuePolicy(ctx context.Context, p QueuePolicy) error {
	q, err := p.toQueue()
	if err != nil {
		return err
	}
	now := c.now()
	q.CreatedAt, q.UpdatedAt = now, now
	err = c.store.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		return x.QueuePut(ctx, &store.QueuePutParams{Queue: q})
	})
	c.forgetPolicy(p.Name)
	return err
}

// QueuePolicy returns the queue's policy, or an error wrapping ErrNotFound if
// nothing was published to it and no policy set.
func (c *Client) QueuePolicy(ctx context.Context, name string) (QueuePolicy, error) {
	if err := checkQueue(name); err != nil {
		return QueuePolicy{}, err
	}
	q, err := c.store.Reader().QueueGet(ctx, &store.QueueGetParams{Name: name})
	if err != nil {
		return QueuePolicy{}, err
	}
	return policyOf(q), nil
}

// Queues returns every queue with its policy, in name order. QueuesAfter
// reads them a page at a time.
func (c *Client) Queues(ctx context.Context) ([]*Queue, error) {
	return c.store.Reader().QueueList(ctx, &store.QueueListParams{})
}

// QueuesAfter lists the queues with their policies in name order, after
// the name after ("" from the start), at most limit (default 100).
func (c *Client) QueuesAfter(ctx context.Context, after string, limit int) ([]*Queue, error) {
	return c.QueuesIn(ctx, "", after, limit)
}

// QueuesIn is QueuesAfter of the namespace ns only (their names as stored,
// "<ns>/<queue>"; drovertype.DefaultNamespace: the queues without a
// namespace; "": every queue).
func (c *Client) QueuesIn(ctx context.Context, ns, after string, limit int) ([]*Queue, error) {
	if limit <= 0 {
		limit = defaultLimit
	}
	return c.store.Reader().QueueList(ctx, &store.QueueListParams{AfterName: after, Limit: limit, Namespace: ns})
}

func policyOf(q *dt.Queue) QueuePolicy {
	p := QueuePolicy{Name: q.Name, MaxDeliveryCount: q.MaxDeliveryCount, Poison: q.PoisonPolicy,
		DedupeWindow: q.DedupeWindow, LockDuration: q.LockDuration}
	if p.DedupeWindow == 0 {
		p.DedupeWindow = NoDedupe
	}
	return p
}

// toQueue validates p and fills in the defaults.
func (p QueuePolicy) toQueue() (*dt.Queue, error) {
	if err := checkQueue(p.Name); err != nil {
		return nil, err
	}
	q := &dt.Queue{Name: p.Name, MaxDeliveryCount: p.MaxDeliveryCount, PoisonPolicy: p.Poison,
		DedupeWindow: p.DedupeWindow, LockDuration: p.LockDuration}
	if q.MaxDeliveryCount == 0 {
		q.MaxDeliveryCount = dt.DefaultMaxDeliveryCount
	}
	if q.PoisonPolicy == "" {
		q.PoisonPolicy = dt.DefaultPoisonPolicy
	}
	switch {
	case q.DedupeWindow == 0:
		q.DedupeWindow = dt.DefaultDedupeWindow
	case q.DedupeWindow < 0:
		q.DedupeWindow = 0
	}
	if q.LockDuration == 0 {
		q.LockDuration = dt.DefaultLockDuration
	}
	switch {
	case q.MaxDeliveryCount < 1:
		return nil, fmt.Errorf("%w: queue %q: MaxDeliveryCount %d must be at least 1", ErrInvalidPolicy, p.Name, p.MaxDeliveryCount)
	case !q.PoisonPolicy.Valid():
		return nil, fmt.Errorf("%w: queue %q: Poison %q must be %q or %q", ErrInvalidPolicy, p.Name, p.Poison, PoisonBlock, PoisonSkip)
	case q.LockDuration < 10*time.Millisecond || q.LockDuration > 24*time.Hour:
		return nil, fmt.Errorf("%w: queue %q: LockDuration %s must be between 10ms and 24h", ErrInvalidPolicy, p.Name, p.LockDuration)
	}
	return q, nil
}
