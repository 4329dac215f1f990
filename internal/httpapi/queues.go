package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/drover-run/drover/droverapi"
	dt "github.com/drover-run/drover/drovertype"

	"github.com/drover-run/drover/convoy"
	"github.com/drover-run/drover/store"
)

func toMessageJSON(m *convoy.StoredMessage) droverapi.Message {
	return droverapi.Message{Queue: dt.LocalName(m.Queue), SessionID: m.SessionID, Seq: m.Seq, MessageID: m.MessageID, Body: jsonOrString(m.Body),
		DeliveryCount: m.DeliveryCount, EndOfSequence: m.EndOfSequence, AvailableAt: m.AvailableAt, Dead: m.Dead,
		DeadReason: m.DeadReason, DeadAt: m.DeadAt, EnqueuedAt: m.EnqueuedAt}
}

// publishBody is what the decoder sees: the embedded fields flattened, with
// pointers so a missing field is told from a zero one.
type publishBody struct {
	SessionID     *string          `json:"session_id"`
	Body          json.RawMessage  `json:"body"`
	MessageID     *string          `json:"message_id"`
	EndOfSequence *bool            `json:"end_of_sequence"`
	NotBefore     *time.Time       `json:"not_before"`
	Messages      []publishMessage `json:"messages"`
}

type publishMessage struct {
	SessionID     *string         `json:"session_id"`
	Body          json.RawMessage `json:"body"`
	MessageID     string          `json:"message_id"`
	EndOfSequence bool            `json:"end_of_sequence"`
	NotBefore     *time.Time      `json:"not_before"`
}

// DecodePublish decodes and checks the body of a publish: the messages in
// order.
func DecodePublish(body []byte) ([]droverapi.PublishMessage, error) {
	var b publishBody
	if err := decodeJSON(body, &b, true); err != nil {
		return nil, err
	}
	var raw []publishMessage
	single := b.SessionID != nil || b.Body != nil || b.MessageID != nil || b.EndOfSequence != nil || b.NotBefore != nil
	switch {
	case b.Messages != nil && single:
		return nil, badRequest("give either one message's fields or \"messages\", not both")
	case b.Messages != nil:
		if len(b.Messages) == 0 {
			return nil, errorf(http.StatusBadRequest, "invalid_field", "field \"messages\" is empty")
		}
		if len(b.Messages) > maxBatch {
			return nil, errorf(http.StatusBadRequest, "invalid_field", "field \"messages\" holds %d messages; at most %d per request", len(b.Messages), maxBatch)
		}
		raw = b.Messages
	default:
		m := publishMessage{SessionID: b.SessionID, Body: b.Body, NotBefore: b.NotBefore}
		if b.MessageID != nil {
			m.MessageID = *b.MessageID
		}
		if b.EndOfSequence != nil {
			m.EndOfSequence = *b.EndOfSequence
		}
		raw = []publishMessage{m}
	}
	out := make([]droverapi.PublishMessage, len(raw))
	for i, m := range raw {
		field := func(f string) string {
			if b.Messages == nil {
				return f
			}
			return "messages[" + strconv.Itoa(i) + "]." + f
		}
		if m.SessionID == nil {
			return nil, errorf(http.StatusBadRequest, "invalid_field", "field %q is required", field("session_id"))
		}
		if err := checkSession(*m.SessionID); err != nil {
			return nil, errorf(http.StatusBadRequest, "invalid_field", "field %q: %s", field("session_id"), err)
		}
		if m.Body == nil {
			return nil, errorf(http.StatusBadRequest, "invalid_field", "field %q is required (any JSON value)", field("body"))
		}
		if len(m.MessageID) > convoy.MaxMessageIDLen {
			return nil, errorf(http.StatusBadRequest, "invalid_field", "field %q is longer than %d bytes", field("message_id"), convoy.MaxMessageIDLen)
		}
		out[i] = droverapi.PublishMessage{SessionID: *m.SessionID, Body: m.Body, MessageID: m.MessageID, EndOfSequence: m.EndOfSequence, NotBefore: m.NotBefore}
	}
	return out, nil
}

func (h *Handler) publish(w http.ResponseWriter, r *http.Request) error {
	queue, body, err := namedBody(r, "queue", "queue name")
	if err != nil {
		return err
	}
	ms, err := DecodePublish(body)
	if err != nil {
		return err
	}
	msgs := make([]convoy.Message, len(ms))
	for i, m := range ms {
		msgs[i] = convoy.Message{SessionID: m.SessionID, Body: []byte(m.Body), MessageID: m.MessageID, EndOfSequence: m.EndOfSequence}
		if m.NotBefore != nil {
			msgs[i].NotBefore = *m.NotBefore
		}
	}
	if err := h.mayCreateQueue(r, queue); err != nil {
		return err
	}
	pub, err := h.convoy.Publish(r.Context(), queue, msgs...)
	if err != nil {
		return err
	}
	out := droverapi.PublishResult{Published: make([]droverapi.Published, len(pub))}
	status := http.StatusOK // every message was a duplicate: nothing stored
	for i, p := range pub {
		out.Published[i] = droverapi.Published{SessionID: p.SessionID, Seq: p.Seq, Duplicate: p.Duplicate}
		if !p.Duplicate {
			status = http.StatusCreated
		}
	}
	writeJSON(w, status, out)
	return nil
}

// listQueues serves GET /v1/queues: a page of queues in name order.
func (h *Handler) listQueues(w http.ResponseWriter, r *http.Request) error {
	q, err := queryParams(r, []string{"after", "limit"})
	if err != nil {
		return err
	}
	limit, err := parseLimit(q, 100)
	if err != nil {
		return err
	}
	after := q.Get("after")
	if after != "" {
		if err := checkName("queue name", after); err != nil {
			return paramCheck("after", err)
		}
	}
	if after != "" {
		after = h.qualify(r, after)
	}
	qs, err := h.convoy.QueuesIn(r.Context(), h.listNamespace(r), after, limit)
	if err != nil {
		return err
	}
	out := droverapi.QueueList{Queues: []droverapi.Queue{}}
	for _, q := range qs {
		out.Queues = append(out.Queues, toQueueJSON(q))
	}
	if len(qs) == limit {
		out.NextAfter = dt.LocalName(qs[len(qs)-1].Name)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// QueueCreate says who may create a queue by publishing to it
// (Options.QueueCreate).
type QueueCreate string

// Values of QueueCreate.
const (
	// QueueCreateSubmit: every token that may publish (the default).
	QueueCreateSubmit QueueCreate = "submit"
	// QueueCreateOperator: operator tokens only; others may publish to
	// existing queues. An operator creates one with PUT .../policy.
	QueueCreateOperator QueueCreate = "operator"
)

// mayCreateQueue refuses a publish that would create a queue when only
// operators may create them and the caller is not one. Queues are never
// deleted, so a queue seen here still exists when the publish commits.
func (h *Handler) mayCreateQueue(r *http.Request, queue string) error {
	if h.opts.QueueCreate != QueueCreateOperator {
		return nil
	}
	if p := principalOf(r); p == nil || p.token == nil || p.token.has(ScopeOperator) {
		return nil
	}
	if _, err := h.drover.Store().Reader().QueueGet(r.Context(), &store.QueueGetParams{Name: queue}); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return errorf(http.StatusForbidden, "forbidden",
				"queue %q does not exist, and on this server only operator tokens create queues: an operator creates it (PUT /v1/queues/%s/policy)", queue, url.PathEscape(queue))
		}
		return err
	}
	return nil
}

// queueExists answers 404 for a queue nothing was published to.
func (h *Handler) queueExists(r *http.Request, queue string) error {
	if err := checkQueueName(queue); err != nil {
		return err
	}
	if _, err := h.convoy.QueuePolicy(r.Context(), queue); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return errorf(http.StatusNotFound, "not_found", "queue %q not found", queue)
		}
		return err
	}
	return nil
}

func (h *Handler) listSessions(w http.ResponseWriter, r *http.Request) error {
	queue := r.PathValue("queue")
	q, err := queryParams(r, []string{"after", "limit"})
	if err != nil {
		return err
	}
	limit, err := parseLimit(q, 100)
	if err != nil {
		return err
	}
	after := q.Get("after")
	if after != "" {
		if err := checkSession(after); err != nil {
			return paramCheck("after", err)
		}
	}
	if err := h.queueExists(r, queue); err != nil {
		return err
	}
	ss, err := h.convoy.Sessions(r.Context(), queue, after, limit)
	if err != nil {
		return err
	}
	out := droverapi.SessionList{Sessions: []droverapi.Session{}}
	for _, s := range ss {
		out.Sessions = append(out.Sessions, droverapi.Session{Queue: dt.LocalName(s.Queue), ID: s.ID, NextSeq: s.NextSeq, Pending: s.Pending, ReadyAt: s.ReadyAt,
			LockHolder: s.LockHolder, LockedUntil: s.LockedUntil, State: jsonOrString(s.State), Closed: s.Closed, Blocked: s.Blocked,
			CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt})
	}
	if len(ss) == limit {
		out.NextAfter = ss[len(ss)-1].ID
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func parseSeq(what, s string, min int64) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < min {
		return 0, badRequest("%s: want an integer of at least %d, got %q", what, min, s)
	}
	return n, nil
}

func (h *Handler) peek(w http.ResponseWriter, r *http.Request) error {
	queue, session := r.PathValue("queue"), r.PathValue("session")
	if err := checkSession(session); err != nil {
		return err
	}
	q, err := queryParams(r, []string{"from_seq", "limit"})
	if err != nil {
		return err
	}
	limit, err := parseLimit(q, 100)
	if err != nil {
		return err
	}
	from, err := paramInt(q, "from_seq", 0, 0)
	if err != nil {
		return err
	}
	if err := h.queueExists(r, queue); err != nil {
		return err
	}
	if _, err := h.convoy.Session(r.Context(), queue, session); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return errorf(http.StatusNotFound, "not_found", "session %q of queue %q not found", session, queue)
		}
		return err
	}
	ms, err := h.convoy.Peek(r.Context(), queue, session, from, limit)
	if err != nil {
		return err
	}
	out := droverapi.MessageList{Messages: []droverapi.Message{}}
	for _, m := range ms {
		out.Messages = append(out.Messages, toMessageJSON(m))
	}
	if len(ms) == limit {
		out.NextFromSeq = ms[len(ms)-1].Seq + 1
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (h *Handler) listDeadLetters(w http.ResponseWriter, r *http.Request) error {
	queue := r.PathValue("queue")
	q, err := queryParams(r, []string{"session", "after_session", "after_seq", "limit"})
	if err != nil {
		return err
	}
	limit, err := parseLimit(q, 100)
	if err != nil {
		return err
	}
	session := q.Get("session")
	var cur convoy.DeadLetterCursor
	for _, name := range []string{"session", "after_session"} {
		if v := q.Get(name); v != "" {
			if err := checkSession(v); err != nil {
				return paramCheck(name, err)
			}
		}
	}
	cur.SessionID = q.Get("after_session")
	if cur.Seq, err = paramInt(q, "after_seq", 0, 0); err != nil {
		return err
	}
	if q.Get("after_seq") != "" && cur.SessionID == "" {
		// The cursor is a pair: a sequence number alone says nothing.
		return paramError("after_seq", "goes with \"after_session\" (the cursor is the next object's after_session and after_seq)")
	}
	if err := h.queueExists(r, queue); err != nil {
		return err
	}
	ms, err := h.convoy.DeadLetters(r.Context(), queue, session, cur, limit)
	if err != nil {
		return err
	}
	out := droverapi.DeadLetterList{DeadLetters: []droverapi.Message{}}
	for _, m := range ms {
		out.DeadLetters = append(out.DeadLetters, toMessageJSON(m))
	}
	if len(ms) == limit {
		last := ms[len(ms)-1]
		out.Next = &droverapi.DeadLetterCursor{AfterSession: last.SessionID, AfterSeq: last.Seq}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (h *Handler) resubmitDeadLetter(w http.ResponseWriter, r *http.Request) error {
	return h.resolveDeadLetter(w, r, "resubmitted")
}

func (h *Handler) discardDeadLetter(w http.ResponseWriter, r *http.Request) error {
	return h.resolveDeadLetter(w, r, "discarded")
}

func (h *Handler) resolveDeadLetter(w http.ResponseWriter, r *http.Request, action string) error {
	queue, session := r.PathValue("queue"), r.PathValue("session")
	if err := checkQueueName(queue); err != nil {
		return err
	}
	if err := checkSession(session); err != nil {
		return err
	}
	seq, err := parseSeq("sequence number", r.PathValue("seq"), 1)
	if err != nil {
		return err
	}
	if err := noQuery(r); err != nil {
		return err
	}
	body, err := readBody(r)
	if err != nil {
		return err
	}
	var empty struct{}
	if err := decodeJSON(body, &empty, false); err != nil {
		return err
	}
	if action == "resubmitted" {
		err = h.convoy.ResubmitDeadLetterAs(r.Context(), queue, session, seq, h.actor(r))
	} else {
		err = h.convoy.DiscardDeadLetterAs(r.Context(), queue, session, seq, h.actor(r))
	}
	if errors.Is(err, store.ErrNotFound) {
		return errorf(http.StatusNotFound, "not_found", "no dead letter %d in session %q of queue %q", seq, session, queue)
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, droverapi.DeadLetterAction{Queue: dt.LocalName(queue), SessionID: session, Seq: seq, Action: action})
	return nil
}

func toQueueJSON(q *convoy.Queue) droverapi.Queue {
	return droverapi.Queue{Name: dt.LocalName(q.Name), MaxDeliveryCount: q.MaxDeliveryCount, PoisonPolicy: string(q.PoisonPolicy),
		DedupeWindowMS: q.DedupeWindow.Milliseconds(), LockDurationMS: q.LockDuration.Milliseconds(), CreatedAt: q.CreatedAt, UpdatedAt: q.UpdatedAt}
}

// DecodePolicyChange decodes and checks the body of a policy change.
func DecodePolicyChange(body []byte) (*droverapi.PolicyChange, error) {
	var p droverapi.PolicyChange
	if err := decodeJSON(body, &p, true); err != nil {
		return nil, err
	}
	field := func(name, format string, args ...any) error {
		return errorf(http.StatusBadRequest, "invalid_field", "field %q: "+format, append([]any{name}, args...)...)
	}
	switch {
	case p.MaxDeliveryCount == nil && p.PoisonPolicy == nil && p.DedupeWindowMS == nil && p.LockDurationMS == nil:
		return nil, badRequest("nothing to change: give max_delivery_count, poison_policy, dedupe_window_ms or lock_duration_ms")
	case p.MaxDeliveryCount != nil && *p.MaxDeliveryCount < 1:
		return nil, field("max_delivery_count", "want an integer of at least 1, got %d", *p.MaxDeliveryCount)
	case p.PoisonPolicy != nil && !convoy.PoisonPolicy(*p.PoisonPolicy).Valid():
		return nil, field("poison_policy", "want %q or %q, got %q", convoy.PoisonBlock, convoy.PoisonSkip, *p.PoisonPolicy)
	case p.DedupeWindowMS != nil && (*p.DedupeWindowMS < 0 || *p.DedupeWindowMS > maxDurationMS):
		return nil, field("dedupe_window_ms", "want an integer from 0 (de-duplication off) to %d, got %d", int64(maxDurationMS), *p.DedupeWindowMS)
	case p.LockDurationMS != nil && (*p.LockDurationMS < 10 || *p.LockDurationMS > (24*time.Hour).Milliseconds()):
		return nil, field("lock_duration_ms", "want an integer from 10 to %d (10ms to 24h), got %d", (24 * time.Hour).Milliseconds(), *p.LockDurationMS)
	}
	return &p, nil
}

// maxDurationMS caps durations given in milliseconds (a time.Duration
// holds about 292 years).
const maxDurationMS = int64(time.Duration(1<<63-1) / time.Millisecond)

// getPolicy serves GET /v1/queues/{queue}/policy.
func (h *Handler) getPolicy(w http.ResponseWriter, r *http.Request) error {
	queue := r.PathValue("queue")
	if err := noQuery(r); err != nil {
		return err
	}
	if err := h.queueExists(r, queue); err != nil {
		return err
	}
	q, err := h.convoy.Store().Reader().QueueGet(r.Context(), &store.QueueGetParams{Name: queue})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toQueueJSON(q))
	return nil
}

// putPolicy serves PUT /v1/queues/{queue}/policy: it changes the parts
// given, creating the queue (201) if it does not exist.
func (h *Handler) putPolicy(w http.ResponseWriter, r *http.Request) error {
	queue, body, err := namedBody(r, "queue", "queue name")
	if err != nil {
		return err
	}
	ch, err := DecodePolicyChange(body)
	if err != nil {
		return err
	}
	p, err := h.convoy.QueuePolicy(r.Context(), queue)
	created := false
	switch {
	case errors.Is(err, store.ErrNotFound):
		created, p = true, convoy.QueuePolicy{Name: queue}
	case err != nil:
		return err
	}
	if ch.MaxDeliveryCount != nil {
		p.MaxDeliveryCount = *ch.MaxDeliveryCount
	}
	if ch.PoisonPolicy != nil {
		p.Poison = convoy.PoisonPolicy(*ch.PoisonPolicy)
	}
	if ch.DedupeWindowMS != nil {
		p.DedupeWindow = time.Duration(*ch.DedupeWindowMS) * time.Millisecond
		if p.DedupeWindow == 0 {
			p.DedupeWindow = convoy.NoDedupe
		}
	}
	if ch.LockDurationMS != nil {
		p.LockDuration = time.Duration(*ch.LockDurationMS) * time.Millisecond
	}
	if err := h.convoy.SetQueuePolicy(r.Context(), p); err != nil {
		if errors.Is(err, convoy.ErrInvalidPolicy) {
			return errorf(http.StatusBadRequest, "invalid_field", "%s", err)
		}
		return err
	}
	q, err := h.convoy.Store().Reader().QueueGet(r.Context(), &store.QueueGetParams{Name: queue})
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, toQueueJSON(q))
	return nil
}
