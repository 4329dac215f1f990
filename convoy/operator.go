package convoy

import (
	"context"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/notifier"
	"github.com/drover-run/drover/store"
)

// Event is an entry of the event history (see the Event* types).
type Event = dt.Event

// defaultLimit applies to listings called with limit <= 0.
const defaultLimit = 100

// Sessions lists a queue's sessions in ID order, after the session ID after
// ("" from the start), at most limit (default 100).
func (c *Client) Sessions(ctx context.Context, queue, after string, limit int) ([]*Session, error) {
	if err := checkQueue(queue); err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = defaultLimit
	}
	return c.store.Reader().SessionList(ctx, &store.SessionListParams{Queue: queue, AfterID: after, Limit: limit})
}

// Depth is a queue's depth: its sessions with messages to deliver and
// their pending messages (see Client.Depth).
type Depth = store.QueueDepth

// Depth counts a queue's sessions that have messages to deliver (pending
// and not blocked) and their pending messages, reading at most limit
// sessions (default 100; Capped reports that there were more), so its
// cost follows limit and not the queue's history.
func (c *Client) Depth(ctx context.Context, queue string, limit int) (Depth, error) {
	if err := checkQueue(queue); err != nil {
		return Depth{}, err
	}
	if limit <= 0 {
		limit = defaultLimit
	}
	return c.store.Reader().QueueDepth(ctx, &store.QueueDepthParams{Queue: queue, Limit: limit, Now: c.clock.Now()})
}

// Session returns one session's record, or an error wrapping ErrNotFound.
func (c *Client) Session(ctx context.Context, queue, sessionID string) (*Session, error) {
	if err := checkQueue(queue); err != nil {
		return nil, err
	}
	return c.store.Reader().SessionGet(ctx, &store.SessionGetParams{Queue: queue, SessionID: sessionID})
}

// Peek returns a session's messages from sequence number fromSeq on, in
// order, dead-lettered ones included, at most limit (default 100). It
// changes nothing and takes no lock.
func (c *Client) Peek(ctx context.Context, queue, sessionID string, fromSeq int64, limit int) ([]*StoredMessage, error) {
	if err := checkQueue(queue); err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = defaultLimit
	}
	return c.store.Reader().MessagePeek(ctx, &store.MessagePeekParams{Queue: queue, SessionID: sessionID, FromSeq: fromSeq, Limit: limit})
}

// DeadLetterCursor is a position in a dead-letter listing: the listing goes
// on after (SessionID, Seq). The zero cursor starts at the beginning.
type DeadLetterCursor struct {
	SessionID string
	Seq       int64
}

// DeadLetters lists a queue's dead-lettered messages (of one session, or of
// all when sessionID is "") in (session, seq) order after the cursor, at
// most limit (default 100). Under the skip policy they are the gaps of their
// sessions; under block the first one of a session is why it halted.
func (c *Client) DeadLetters(ctx context.Context, queue, sessionID string, after DeadLetterCursor, limit int) ([]*StoredMessage, error) {
	if err := checkQueue(queue); err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = defaultLimit
	}
	return c.store.Reader().DeadLetterList(ctx, &store.DeadLetterListParams{Queue: queue, SessionID: sessionID,
		AfterSessionID: after.SessionID, AfterSeq: after.Seq, Limit: limit})
}

// ResubmitDeadLetter puts a dead-lettered message back at the head of its
// session (its sequence number is the smallest pending one) with a fresh
// delivery count, and unblocks the session: it is delivered next. An event
// records it, with the actor "operator". ErrNotFound if no such dead
// letter exists.
func (c *Client) ResubmitDeadLetter(ctx context.Context, queue, sessionID string, seq int64) error {
	return c.ResubmitDeadLetterAs(ctx, queue, sessionID, seq, "operator")
}

// ResubmitDeadLetterAs is ResubmitDeadLetter recording actor (who did it:
// "http:<token name>" for the HTTP API and the console) in the event.
func (c *Client) ResubmitDeadLetterAs(ctx context.Context, queue, sessionID string, seq int64, actor string) error {
	return c.resolve(ctx, queue, sessionID, seq, EventDeadLetterResubmitted, actor)
}

// DiscardDeadLetter deletes a dead-lettered message and unblocks its
// session, which goes on with its next message. An event records it, with
// the actor "operator". ErrNotFound if no such dead letter exists.
func (c *Client) DiscardDeadLetter(ctx context.Context, queue, sessionID string, seq int64) error {
	return c.DiscardDeadLetterAs(ctx, queue, sessionID, seq, "operator")
}

// DiscardDeadLetterAs is DiscardDeadLetter recording actor in the event.
func (c *Client) DiscardDeadLetterAs(ctx context.Context, queue, sessionID string, seq int64, actor string) error {
	return c.resolve(ctx, queue, sessionID, seq, EventDeadLetterDiscarded, actor)
}

func (c *Client) resolve(ctx context.Context, queue, sessionID string, seq int64, typ dt.EventType, actor string) error {
	if actor == "" {
		actor = "operator"
	}
	if err := checkQueue(queue); err != nil {
		return err
	}
	now := c.now()
	err := c.store.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		var err error
		what := "resubmitted to the head of the session"
		if typ == EventDeadLetterResubmitted {
			err = x.DeadLetterResubmit(ctx, &store.DeadLetterResubmitParams{Queue: queue, SessionID: sessionID, Seq: seq, Now: now})
		} else {
			err = x.DeadLetterDiscard(ctx, &store.DeadLetterDiscardParams{Queue: queue, SessionID: sessionID, Seq: seq, Now: now})
			what = "discarded"
		}
		if err != nil {
			return err
		}
		if err := store.Notify(ctx, x, &store.NotifyParams{Topic: Topic(queue)}); err != nil {
			return err
		}
		return notifier.InsertEvents(ctx, x, []*dt.Event{{
			TaskID: dt.SessionSubject(queue, sessionID), StepIndex: -1, Type: typ, Actor: dt.Storable(actor), CreatedAt: now,
			Message: "dead-lettered message " + itoa(seq) + " " + what + "; the session is unblocked",
		}})
	})
	if err != nil {
		return err
	}
	c.hub.wake(queue)
	return nil
}

// SessionEvents returns the event history of a session (alerts, dead
// letters, operator actions) in ID order, after the event ID afterID, at
// most limit (default 100).
func (c *Client) SessionEvents(ctx context.Context, queue, sessionID string, afterID int64, limit int) ([]*Event, error) {
	if err := checkQueue(queue); err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = defaultLimit
	}
	return c.store.Reader().EventList(ctx, &store.EventListParams{TaskID: dt.SessionSubject(queue, sessionID), AfterID: afterID, Limit: limit})
}
