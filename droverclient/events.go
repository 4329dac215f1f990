package droverclient

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Event is one event of the durable history, as the event streams send it.
type Event struct {
	ID int64 `json:"id"`
	// Subject is the task ID, or "session:<queue>/<session>".
	Subject string `json:"subject"`
	// StepIndex is the step the event is about; -1 for the task itself.
	StepIndex int    `json:"step_index"`
	Type      string `json:"type"`
	State     string `json:"state"`
	// Alert marks events an operator must look at.
	Alert     bool      `json:"alert"`
	Actor     string    `json:"actor"`
	Attempt   int       `json:"attempt"`
	Message   string    `json:"message"`
	CreatedAt time.Time `json:"created_at"`
}

// EventParams select events of the history.
type EventParams struct {
	// TaskID keeps one task's events; "" for every task.
	TaskID string
	// AlertsOnly keeps operator alerts.
	AlertsOnly bool
	// After returns events with a greater ID.
	After int64
	// Limit caps the events returned by Events; 0 for no cap.
	Limit int
	// Idle is ignored.
	//
	// Deprecated: Events reads the server's JSON list of the history page
	// by page, to its end, without waiting for events.
	Idle time.Duration
}

// DefaultEventsIdle was EventParams.Idle when not set.
//
// Deprecated: EventParams.Idle is ignored.
const DefaultEventsIdle = 500 * time.Millisecond

// maxEventPage is the largest page the server lists (its "limit" bound).
const maxEventPage = 1000

// Events returns the recorded events selected by p, in ID order: every
// one after p.After, or the first p.Limit of them.
//
// It reads the JSON list of GET /v1/events (or /v1/tasks/{id}/events)
// page by page, following next_after to the end of the history, so a long
// or busy history comes back whole, each event once. Events recorded
// while it reads may or may not be included; pass the last ID as After
// to go on, or use FollowEvents to be told of new ones.
func (c *Client) Events(ctx context.Context, p EventParams) ([]Event, error) {
	out := []Event{}
	after := p.After
	for {
		size := maxEventPage
		if p.Limit > 0 {
			size = min(size, p.Limit-len(out))
		}
		page, err := c.eventPage(ctx, p.TaskID, p.AlertsOnly, after, size)
		if err != nil {
			return nil, err
		}
		if len(page.Events) > size {
			return nil, fmt.Errorf("droverclient: the event list answered %d events for a page of %d", len(page.Events), size)
		}
		for _, e := range page.Events {
			if e.ID <= after {
				return nil, fmt.Errorf("droverclient: the event list answered event %d after event %d", e.ID, after)
			}
			out = append(out, e)
			after = e.ID
		}
		if page.NextAfter == 0 || (p.Limit > 0 && len(out) >= p.Limit) {
			return out, nil
		}
		if page.NextAfter != after {
			// A next page that does not start after this one's last
			// event would repeat or skip events, or never end.
			return nil, fmt.Errorf("droverclient: the event list answered next_after %d after event %d", page.NextAfter, after)
		}
	}
}

// eventPage is one page of the JSON event list.
type eventPage struct {
	Events    []Event `json:"events"`
	NextAfter int64   `json:"next_after"`
}

// eventPage reads one page of the JSON event list; an error answer is an
// *APIError.
func (c *Client) eventPage(ctx context.Context, taskID string, alerts bool, after int64, limit int) (*eventPage, error) {
	q := url.Values{}
	q.Set("after", strconv.FormatInt(after, 10))
	q.Set("limit", strconv.Itoa(limit))
	if alerts {
		q.Set("alerts", "true")
	}
	u := c.url(q, "/v1/events")
	if taskID != "" {
		u = c.url(q, "/v1/tasks", seg(taskID), "events")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("droverclient: %w", err)
	}
	// The Accept header selects the JSON list over the event stream.
	req.Header.Set("Accept", "application/json")
	c.setAuth(req)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("droverclient: GET %s: %w", req.URL.Path, err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode == http.StatusOK && !strings.HasPrefix(ct, "application/json") {
		// A server without the JSON list answers with the stream, which
		// would never end: do not read it.
		return nil, fmt.Errorf("droverclient: GET %s: answer is %q, not a JSON event list (a server older than the list?)", req.URL.Path, ct)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("droverclient: GET %s: read answer: %w", req.URL.Path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, decodeError(resp.StatusCode, data)
	}
	var page eventPage
	if err := json.Unmarshal(data, &page); err != nil {
		return nil, fmt.Errorf("droverclient: GET %s: decode answer: %w", req.URL.Path, err)
	}
	return &page, nil
}

// FollowOptions configure FollowEvents.
type FollowOptions struct {
	// TaskID follows one task's events; "" every task's.
	TaskID string
	// AlertsOnly follows operator alerts only.
	AlertsOnly bool
	// After starts after this event ID (the last one handled).
	After int64
	// MinBackoff and MaxBackoff bound the wait before reconnecting after a
	// dropped stream (doubling, with jitter). Defaults 100ms and 10s.
	MinBackoff, MaxBackoff time.Duration
	// OnReconnect, when set, is told why the stream was lost and how long
	// FollowEvents waits before it reconnects.
	OnReconnect func(err error, wait time.Duration)
	// StallTimeout drops a stream on which nothing (not even the server's
	// keep-alive comment, every 15s by default) arrived for this long — a
	// connection that died without closing — and reconnects. Default
	// DefaultStallTimeout.
	StallTimeout time.Duration
	// KeepFollowing, with TaskID, keeps following the task after it is
	// final (an alert's acknowledgement, a resubmission): the server does
	// not end the stream then. Without it FollowEvents returns nil once
	// the task is final and its events were given to fn.
	KeepFollowing bool
}

// DefaultStallTimeout is FollowOptions.StallTimeout when not set: three
// of the server's default keep-alive intervals.
const DefaultStallTimeout = 45 * time.Second

// Follow calls fn with every event of task taskID ("" for every task) after
// lastEventID, first the recorded ones then new ones as they are recorded,
// until ctx ends, fn returns an error (which Follow returns) or the task
// is final (nil). See FollowEvents.
func (c *Client) Follow(ctx context.Context, taskID string, lastEventID int64, fn func(*Event) error) error {
	return c.FollowEvents(ctx, FollowOptions{TaskID: taskID, After: lastEventID}, fn)
}

// FollowEvents reads an event stream and calls fn with each event, in ID
// order, each once. When the connection drops or the server ends the
// stream (a restart), it reconnects with back-off and resumes with
// Last-Event-ID set to the last event given to fn, so nothing is missed.
// A server busy or shutting down (429, 503) is retried too; other error
// answers (401, 403, 404, 400) and a failure of the very first connection
// are returned at once. It returns ctx.Err() when ctx ends, and nil when
// the server ends a task's stream because the task is final (unless
// KeepFollowing).
//
// The client's http.Client must not have a Timeout: it would cut the
// stream (the server sends a keep-alive comment every 15s).
func (c *Client) FollowEvents(ctx context.Context, o FollowOptions, fn func(*Event) error) error {
	if o.MinBackoff <= 0 {
		o.MinBackoff = 100 * time.Millisecond
	}
	if o.MaxBackoff < o.MinBackoff {
		o.MaxBackoff = max(10*time.Second, o.MinBackoff)
	}
	if o.StallTimeout <= 0 {
		o.StallTimeout = DefaultStallTimeout
	}
	last := o.After
	wait := o.MinBackoff
	connected := false
	for {
		var fnErr error
		delivered := false
		resp, err := c.openStream(ctx, o.TaskID, o.AlertsOnly, o.KeepFollowing, last)
		if err == nil {
			connected = true
			body := newWatchdog(resp.Body, o.StallTimeout)
			err = readStream(body, last, func(e *Event) error {
				if err := fn(e); err != nil {
					fnErr = err
					return err
				}
				last, delivered = e.ID, true
				return nil
			})
			body.Close()
			switch {
			case errors.Is(err, errStreamEnded):
				// The server's end event: not a dropped stream.
			case body.stalled.Load():
				err = fmt.Errorf("droverclient: nothing arrived on the event stream for %s", o.StallTimeout)
			case err == nil:
				err = io.ErrUnexpectedEOF
			}
		}
		switch {
		case fnErr != nil:
			return fnErr
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, errStreamEnded):
			return nil // the task is final
		}
		var ae *APIError
		var be *badEventError
		retryAfter := time.Duration(0)
		if errors.As(err, &be) {
			return err // the same data would come again
		}
		if errors.As(err, &ae) {
			if ae.Status != http.StatusTooManyRequests && ae.Status < 500 {
				return err
			}
			retryAfter = ae.retryAfter
		} else if !connected {
			return err
		}
		if delivered {
			wait = o.MinBackoff
		}
		// Full jitter between half the back-off and all of it, so many
		// clients dropped at once do not come back in step.
		d := wait/2 + rand.N(wait/2+1)
		d = max(d, retryAfter)
		if o.OnReconnect != nil {
			o.OnReconnect(err, d)
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, o.MaxBackoff)
	}
}

// watchdog closes a stream body when no byte arrived for a while, which
// ends a Read blocked on a dead connection.
type watchdog struct {
	io.ReadCloser
	timeout time.Duration
	timer   *time.Timer
	stalled atomic.Bool
}

func newWatchdog(rc io.ReadCloser, timeout time.Duration) *watchdog {
	w := &watchdog{ReadCloser: rc, timeout: timeout}
	w.timer = time.AfterFunc(timeout, func() {
		w.stalled.Store(true)
		rc.Close()
	})
	return w
}

func (w *watchdog) Read(p []byte) (int, error) {
	n, err := w.ReadCloser.Read(p)
	if n > 0 {
		w.timer.Reset(w.timeout)
	}
	return n, err
}

func (w *watchdog) Close() error {
	w.timer.Stop()
	return w.ReadCloser.Close()
}

// errStreamEnded is how the server says a task's stream is over: the task
// is final and every event up to it was sent (the "end" event, or 204 to a
// request for a final task's events after the last one).
var errStreamEnded = errors.New("droverclient: the task is final: end of its event stream")

// openStream opens an event stream after event ID after; an error answer
// is an *APIError.
func (c *Client) openStream(ctx context.Context, taskID string, alerts, keepFollowing bool, after int64) (*http.Response, error) {
	q := url.Values{}
	if alerts {
		q.Set("alerts", "true")
	}
	if keepFollowing && taskID != "" {
		q.Set("follow", "true")
	}
	u := c.url(q, "/v1/events")
	if taskID != "" {
		u = c.url(q, "/v1/tasks", seg(taskID), "events")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("droverclient: %w", err)
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Last-Event-ID", strconv.FormatInt(after, 10))
	c.setAuth(req)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("droverclient: GET %s: %w", req.URL.Path, err)
	}
	if resp.StatusCode == http.StatusNoContent && taskID != "" {
		resp.Body.Close()
		return nil, errStreamEnded
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		err := decodeError(resp.StatusCode, data)
		var ae *APIError
		if errors.As(err, &ae) {
			if s, perr := strconv.Atoi(resp.Header.Get("Retry-After")); perr == nil && s > 0 {
				ae.retryAfter = time.Duration(s) * time.Second
			}
			if resp.StatusCode < 400 {
				ae.Code, ae.Message = "unexpected_status", "the event stream answered "+resp.Status
			}
		}
		return nil, err
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		resp.Body.Close()
		return nil, fmt.Errorf("droverclient: GET %s: answer is %q, not an event stream", req.URL.Path, ct)
	}
	return resp, nil
}

// badEventError is an event whose data is not an event's JSON.
type badEventError struct {
	id  string
	err error
}

func (e *badEventError) Error() string {
	return fmt.Sprintf("droverclient: event %s: decode data: %v", e.id, e.err)
}

func (e *badEventError) Unwrap() error { return e.err }

// maxEventBytes caps one line of an event stream.
const maxEventBytes = 4 << 20

// readStream parses a text/event-stream and calls fn with each event whose
// ID is greater than after (and than the one before). It returns fn's
// error, a read error, errStreamEnded after the server's "end" event, or
// nil at the end of the stream.
func readStream(r io.Reader, after int64, fn func(*Event) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxEventBytes)
	var data strings.Builder
	var id, typ string
	last := after
	for sc.Scan() {
		line := sc.Text()
		if line == "" { // end of one event
			if typ == "end" {
				return errStreamEnded
			}
			if data.Len() > 0 {
				var e Event
				if err := json.Unmarshal([]byte(data.String()), &e); err != nil {
					return &badEventError{id: id, err: err}
				}
				if e.ID > last {
					if err := fn(&e); err != nil {
						return err
					}
					last = e.ID
				}
			}
			data.Reset()
			id, typ = "", ""
			continue
		}
		if strings.HasPrefix(line, ":") { // comment: connected, ping
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "data":
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.WriteString(value)
		case "id":
			id = value
		case "event":
			typ = value
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("droverclient: read event stream: %w", err)
	}
	return nil
}
