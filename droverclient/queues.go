package droverclient

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"

	"github.com/drover-run/drover/droverapi"
)

// Queue is a session queue and its policy.
type Queue = droverapi.Queue

// Session is one session of a queue.
type Session = droverapi.Session

// Message is a stored message of a session: pending, or dead-lettered.
type Message = droverapi.Message

// PublishMessage is one message to publish.
type PublishMessage = droverapi.PublishMessage

// Published is the outcome of one published message.
type Published = droverapi.Published

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
		body = droverapi.PublishRequest{Messages: msgs}
	}
	var out droverapi.PublishResult
	if _, err := c.do(ctx, http.MethodPost, c.url(nil, "/v1/queues", seg(queue), "messages"), body, &out); err != nil {
		return nil, err
	}
	return out.Published, nil
}

// QueuePage is one page of the queues, in name order.
type QueuePage = droverapi.QueueList

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
type SessionPage = droverapi.SessionList

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
type MessagePage = droverapi.MessageList

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
type DeadLetterCursor = droverapi.DeadLetterCursor

// DeadLetterPage is one page of dead letters in (session, sequence) order.
type DeadLetterPage = droverapi.DeadLetterList

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
type PolicyChange = droverapi.PolicyChange

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
