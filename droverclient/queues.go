package droverclient

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Queue is a session queue and its policy.
type Queue struct {
	Name             string    `json:"name"`
	MaxDeliveryCount int       `json:"max_delivery_count"`
	PoisonPolicy     string    `json:"poison_policy"` // "block" or "skip"
	DedupeWindowMS   int64     `json:"dedupe_window_ms"`
	LockDurationMS   int64     `json:"lock_duration_ms"`
	CreatedAt        time.Time `json:"created_at"`
	UpdatedAt        time.Time `json:"updated_at"`
}

// Session is one session of a queue.
type Session struct {
	Queue string `json:"queue"`
	ID    string `json:"id"`
	// NextSeq is the last sequence number assigned (0: none yet).
	NextSeq     int64           `json:"next_seq"`
	Pending     int             `json:"pending"`
	ReadyAt     *time.Time      `json:"ready_at"`
	LockHolder  string          `json:"lock_holder"`
	LockedUntil *time.Time      `json:"locked_until"`
	State       json.RawMessage `json:"state"`
	Closed      bool            `json:"closed"`
	Blocked     bool            `json:"blocked"`
	CreatedAt   time.Time       `json:"created_at"`
	UpdatedAt   time.Time       `json:"updated_at"`
}

// Message is a stored message of a session: pending, or dead-lettered.
type Message struct {
	Queue     string `json:"queue"`
	SessionID string `json:"session_id"`
	Seq       int64  `json:"seq"`
	MessageID string `json:"message_id"`
	// Body is the body as JSON; a body that is not JSON (published through
	// the Go API) comes as a JSON string.
	Body          json.RawMessage `json:"body"`
	DeliveryCount int             `json:"delivery_count"`
	EndOfSequence bool            `json:"end_of_sequence"`
	AvailableAt   time.Time       `json:"available_at"`
	Dead          bool            `json:"dead"`
	DeadReason    string          `json:"dead_reason"`
	DeadAt        *time.Time      `json:"dead_at"`
	EnqueuedAt    time.Time       `json:"enqueued_at"`
}

// PublishMessage is one message to publish.
type PublishMessage struct {
	// SessionID is the session (an order ID, say); required.
	SessionID string `json:"session_id"`
	// Body is any JSON document; nil sends null.
	Body json.RawMessage `json:"body"`
	// MessageID de-duplicates within the queue's dedupe window.
	MessageID string `json:"message_id,omitempty"`
	// EndOfSequence marks the session's last message.
	EndOfSequence bool `json:"end_of_sequence,omitempty"`
	// NotBefore delays delivery until this time.
	NotBefore *time.Time `json:"not_before,omitempty"`
}

// Published is the outcome of one published message.
type Published struct {
	SessionID string `json:"session_id"`
	Seq       int64  `json:"seq"`
	// Duplicate: a message with the same MessageID was published within
	// the dedupe window; Seq is the original's and nothing was stored.
	Duplicate bool `json:"duplicate"`
}

// Publish publishes messages to queue, all or none (at most 1000), and
// returns their outcomes in order.
func (c *Client) Publish(ctx context.Context, queue string, msgs ...PublishMessage) ([]Published, error) {
	if len(msgs) == 0 {
		return nil, errors.New("droverclient: Publish needs at least one message")
	}
	for i := range msgs {
		if msgs[i].Body == nil {
			msgs[i].Body = json.RawMessage("null")
		}
	}
	var body any = msgs[0]
	if len(msgs) > 1 {
		body = struct {
			Messages []PublishMessage `json:"messages"`
		}{msgs}
	}
	var out struct {
		Published []Published `json:"published"`
	}
	if _, err := c.do(ctx, http.MethodPost, c.url(nil, "/v1/queues", seg(queue), "messages"), body, &out); err != nil {
		return nil, err
	}
	return out.Published, nil
}

// QueuePage is one page of the queues, in name order.
type QueuePage struct {
	Queues []Queue `json:"queues"`
	// NextAfter is the after of the next page; "" on the last page.
	NextAfter string `json:"next_after"`
}

// QueuesPage lists the queues and their policies whose name sorts after
// after, at most limit (0: the server's default, 100).
func (c *Client) QueuesPage(ctx context.Context, after string, limit int) (*QueuePage, error) {
	var page QueuePage
	if _, err := c.do(ctx, http.MethodGet, c.url(pageQuery(after, limit), "/v1/queues"), nil, &page); err != nil {
		return nil, err
	}
	if page.Queues == nil {
		page.Queues = []Queue{}
	}
	return &page, nil
}

// Queues lists every queue and its policy, reading page after page.
func (c *Client) Queues(ctx context.Context) ([]Queue, error) {
	out := []Queue{}
	for after := ""; ; {
		page, err := c.QueuesPage(ctx, after, 1000)
		if err != nil {
			return nil, err
		}
		out = append(out, page.Queues...)
		if page.NextAfter == "" {
			return out, nil
		}
		after = page.NextAfter
	}
}

// pageQuery is the query of a keyset page: after and limit, when given.
func pageQuery(after string, limit int) url.Values {
	q := url.Values{}
	if after != "" {
		q.Set("after", after)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	return q
}

// SessionPage is one page of a queue's sessions, in ID order.
type SessionPage struct {
	Sessions []Session `json:"sessions"`
	// NextAfter is the after of the next page; "" on the last page.
	NextAfter string `json:"next_after"`
}

// Sessions lists the sessions of queue whose ID sorts after after, at most
// limit (0: the server's default, 100). An unknown queue: ErrNotFound.
func (c *Client) Sessions(ctx context.Context, queue, after string, limit int) (*SessionPage, error) {
	var page SessionPage
	if _, err := c.do(ctx, http.MethodGet, c.url(pageQuery(after, limit), "/v1/queues", seg(queue), "sessions"), nil, &page); err != nil {
		return nil, err
	}
	return &page, nil
}

// MessagePage is one page of a session's messages, in sequence order.
type MessagePage struct {
	Messages []Message `json:"messages"`
	// NextFromSeq is the fromSeq of the next page; 0 on the last page.
	NextFromSeq int64 `json:"next_from_seq"`
}

// Peek lists the pending and dead-lettered messages of a session from
// sequence number fromSeq on, at most limit (0: the server's default),
// without changing anything. An unknown queue or session: ErrNotFound.
func (c *Client) Peek(ctx context.Context, queue, session string, fromSeq int64, limit int) (*MessagePage, error) {
	q := url.Values{}
	if fromSeq > 0 {
		q.Set("from_seq", strconv.FormatInt(fromSeq, 10))
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var page MessagePage
	if _, err := c.do(ctx, http.MethodGet, c.url(q, "/v1/queues", seg(queue), "sessions", seg(session), "messages"), nil, &page); err != nil {
		return nil, err
	}
	return &page, nil
}

// DeadLetterParams filter and page a dead-letter listing.
type DeadLetterParams struct {
	// Session keeps one session's dead letters.
	Session string
	// After is the cursor of the next page (DeadLetterPage.Next).
	After *DeadLetterCursor
	// Limit caps the page (1-1000); 0 takes the server's default (100).
	Limit int
}

// DeadLetterCursor is a position in a dead-letter listing.
type DeadLetterCursor struct {
	AfterSession string `json:"after_session"`
	AfterSeq     int64  `json:"after_seq"`
}

// DeadLetterPage is one page of dead letters in (session, sequence) order.
type DeadLetterPage struct {
	DeadLetters []Message `json:"dead_letters"`
	// Next is the cursor of the next page; nil on the last page.
	Next *DeadLetterCursor `json:"next"`
}

// DeadLetters lists the dead-lettered messages of queue. An unknown
// queue: ErrNotFound.
func (c *Client) DeadLetters(ctx context.Context, queue string, p DeadLetterParams) (*DeadLetterPage, error) {
	q := url.Values{}
	if p.Session != "" {
		q.Set("session", p.Session)
	}
	if p.After != nil && p.After.AfterSession != "" {
		// The server refuses after_seq without after_session.
		q.Set("after_session", p.After.AfterSession)
		q.Set("after_seq", strconv.FormatInt(p.After.AfterSeq, 10))
	}
	if p.Limit > 0 {
		q.Set("limit", strconv.Itoa(p.Limit))
	}
	var page DeadLetterPage
	if _, err := c.do(ctx, http.MethodGet, c.url(q, "/v1/queues", seg(queue), "deadletters"), nil, &page); err != nil {
		return nil, err
	}
	return &page, nil
}

// ResubmitDeadLetter puts dead letter seq of a session back at the head of
// its session and unblocks the session (operator scope). No such dead
// letter: ErrNotFound.
func (c *Client) ResubmitDeadLetter(ctx context.Context, queue, session string, seq int64) error {
	return c.resolveDeadLetter(ctx, queue, session, seq, "resubmit")
}

// DiscardDeadLetter deletes dead letter seq of a session and unblocks the
// session (operator scope). No such dead letter: ErrNotFound.
func (c *Client) DiscardDeadLetter(ctx context.Context, queue, session string, seq int64) error {
	return c.resolveDeadLetter(ctx, queue, session, seq, "discard")
}

func (c *Client) resolveDeadLetter(ctx context.Context, queue, session string, seq int64, action string) error {
	_, err := c.do(ctx, http.MethodPost, c.url(nil, "/v1/queues", seg(queue), "sessions", seg(session), "deadletters", strconv.FormatInt(seq, 10), action), struct{}{}, nil)
	return err
}

// seg is a path segment from a caller's value (a task ID, queue or
// session), escaped as a whole: url treats a segment that starts with "/"
// as a literal path, and session IDs may start with one.
func seg(s string) string { return "/" + url.PathEscape(s) }

// Policy returns queue's policy. An unknown queue: ErrNotFound.
func (c *Client) Policy(ctx context.Context, queue string) (*Queue, error) {
	var q Queue
	if _, err := c.do(ctx, http.MethodGet, c.url(nil, "/v1/queues", seg(queue), "policy"), nil, &q); err != nil {
		return nil, err
	}
	return &q, nil
}

// PolicyChange is the parts of a queue's policy to change; nil fields stay
// as they are. At least one must be set.
type PolicyChange struct {
	MaxDeliveryCount *int    `json:"max_delivery_count,omitempty"`
	PoisonPolicy     *string `json:"poison_policy,omitempty"` // "block" or "skip"
	// DedupeWindowMS 0 turns de-duplication off.
	DedupeWindowMS *int64 `json:"dedupe_window_ms,omitempty"`
	LockDurationMS *int64 `json:"lock_duration_ms,omitempty"` // 10 to 86400000
}

// SetPolicy changes the parts of queue's policy given (operator scope),
// creating the queue if it does not exist (created is then true), and
// returns the queue as it is now. Bad values: ErrInvalid, nothing changed.
func (c *Client) SetPolicy(ctx context.Context, queue string, ch PolicyChange) (q *Queue, created bool, err error) {
	var out Queue
	status, err := c.do(ctx, http.MethodPut, c.url(nil, "/v1/queues", seg(queue), "policy"), ch, &out)
	if err != nil {
		return nil, false, err
	}
	return &out, status == http.StatusCreated, nil
}
