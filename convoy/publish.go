package convoy

import (
	"context"
	"fmt"
	"time"

	"github.com/drover-run/drover/store"
)

// Message is one message to publish to a session queue.
type Message struct {
	// SessionID groups related messages (for example an order ID): messages
	// of one session are delivered one at a time in publish order. Required;
	// at most MaxSessionIDLen bytes of UTF-8 without control characters. The
	// session is created by its first message.
	SessionID string
	// Body is the payload, at most Config.MaxBodyBytes.
	Body []byte
	// MessageID, when set, de-duplicates the message: publishing the same ID
	// to the queue again within its DedupeWindow stores nothing and reports
	// the original's sequence number with Duplicate set. At most
	// MaxMessageIDLen bytes.
	MessageID string
	// EndOfSequence marks the session's last message: later publishes to the
	// session fail with ErrSessionClosed, and once it is settled the session
	// has ended.
	EndOfSequence bool
	// NotBefore delays delivery until then. The message still holds its
	// place: the messages after it in its session wait too. Zero: at once.
	NotBefore time.Time
}

// Published is the outcome of one published message.
type Published struct {
	SessionID string
	// Seq is the message's per-session sequence number: 1, 2, 3 … in commit
	// order, without gaps. For a duplicate, the original's.
	Seq int64
	// Duplicate: the MessageID was published within the dedupe window;
	// nothing was stored.
	Duplicate bool
}

// Publish stores messages in queue in one transaction: all or none. Messages
// of one session get consecutive sequence numbers in call order. The queue is
// created with the default policy by its first publish. Consumers are woken
// at once, in this process and (on PostgreSQL) in others.
func (c *Client) Publish(ctx context.Context, queue string, msgs ...Message) ([]Published, error) {
	var out []Published
	err := c.store.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		var err error
		out, err = c.publish(ctx, x, queue, msgs)
		return err
	})
	if err != nil {
		return nil, err
	}
	c.hub.wake(queue)
	return out, nil
}

// PublishTx stores messages inside the caller's own transaction, so the
// application's rows and the messages commit together or not at all. For
// PostgreSQL tx is a pgx.Tx or a *sql.Tx of the pgx stdlib driver; for SQLite
// a *sql.Tx on the same database file. The caller commits.
//
// Consumers of other processes are notified when the transaction commits
// (PostgreSQL). Consumers in this process are woken at once; on SQLite they
// wait for the caller's write transaction to end, and otherwise they find the
// messages at their next poll.
//
// Publishing holds each session's next sequence number until the caller's
// transaction ends: other producers of the same sessions wait for it.
func (c *Client) PublishTx(ctx context.Context, tx any, queue string, msgs ...Message) ([]Published, error) {
	var out []Published
	err := c.store.InExternalTx(ctx, tx, func(ctx context.Context, x store.Executor) error {
		var err error
		out, err = c.publish(ctx, x, queue, msgs)
		return err
	})
	if err != nil {
		return nil, err
	}
	c.hub.wake(queue)
	return out, nil
}

// PublishWith stores messages through x, an Executor of a store transaction
// already open (inside Driver.InTx, or a HandlerTx of a Processor), so they
// commit with it. Consumers are notified as PublishTx describes.
func (c *Client) PublishWith(ctx context.Context, x store.Executor, queue string, msgs ...Message) ([]Published, error) {
	out, err := c.publish(ctx, x, queue, msgs)
	if err != nil {
		return nil, err
	}
	c.hub.wake(queue)
	return out, nil
}

func (c *Client) publish(ctx context.Context, x store.Executor, queue string, msgs []Message) (_ []Published, err error) {
	pms, err := c.prepare(queue, msgs)
	if err != nil {
		return nil, err
	}
	if len(pms) == 0 {
		return []Published{}, nil
	}
	var res []store.PublishResult
	if c.tracer.On() {
		spans := c.tracePublish(ctx, pms)
		defer func() { endPublish(spans, res, err) }()
	}
	res, err = x.MessagePublishMany(ctx, &store.MessagePublishManyParams{Messages: pms, Now: c.now()})
	if err != nil {
		return nil, err
	}
	if err := store.Notify(ctx, x, &store.NotifyParams{Topic: Topic(queue)}); err != nil {
		return nil, err
	}
	out := make([]Published, len(res))
	for i, r := range res {
		out[i] = Published{SessionID: msgs[i].SessionID, Seq: r.Seq, Duplicate: r.Duplicate}
	}
	return out, nil
}

// prepare validates messages and builds their store records.
func (c *Client) prepare(queue string, msgs []Message) ([]store.PublishMessage, error) {
	if err := checkQueue(queue); err != nil {
		return nil, err
	}
	out := make([]store.PublishMessage, len(msgs))
	for i, m := range msgs {
		if err := c.checkMessage(m); err != nil {
			if len(msgs) > 1 {
				return nil, fmt.Errorf("message %d: %w", i, err)
			}
			return nil, err
		}
		var avail time.Time
		if !m.NotBefore.IsZero() {
			avail = m.NotBefore.UTC().Truncate(time.Microsecond)
		}
		out[i] = store.PublishMessage{Queue: queue, SessionID: m.SessionID, MessageID: m.MessageID, Body: m.Body,
			EndOfSequence: m.EndOfSequence, AvailableAt: avail}
	}
	return out, nil
}

func (c *Client) checkMessage(m Message) error {
	if p := idProblem(m.SessionID, MaxSessionIDLen); p != "" {
		return fmt.Errorf("%w: SessionID %q %s", ErrInvalidMessage, m.SessionID, p)
	}
	if m.MessageID != "" {
		if p := idProblem(m.MessageID, MaxMessageIDLen); p != "" {
			return fmt.Errorf("%w: MessageID %q %s", ErrInvalidMessage, m.MessageID, p)
		}
	}
	if len(m.Body) > c.cfg.MaxBodyBytes {
		return fmt.Errorf("%w: Body is %d bytes, the limit is %d (Config.MaxBodyBytes)", ErrInvalidMessage, len(m.Body), c.cfg.MaxBodyBytes)
	}
	if !m.NotBefore.IsZero() && (m.NotBefore.Year() < 1970 || m.NotBefore.Year() > 9999) {
		return fmt.Errorf("%w: NotBefore %s is out of range (years 1970-9999)", ErrInvalidMessage, m.NotBefore)
	}
	return nil
}
