package httpapi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/drover-run/drover/droverapi"
	dt "github.com/drover-run/drover/drovertype"

	"github.com/drover-run/drover/convoy"
	"github.com/drover-run/drover/store"
)

// Remote session consumers: a consumer accepts a session (a lease under a
// lock token), receives its messages one at a time, settles each, renews
// the lock at a third of its duration and releases the session. Every call
// goes through convoy's lease functions, so ordering, delivery counts,
// poison handling and events are those of in-process consumers. A stale
// lock token answers 409 lock_lost and changes nothing; one for a session
// the caller's namespace does not have answers 404.
//
// The lock token is "<session lock token>.<nonce>": each accept draws 128
// random bits and locks the session under a holder derived from them (see
// remoteHolder), and every call checks both the sequential token and that
// holder, so another consumer cannot guess its way onto a lease.

// Limits of the consumer routes.
const (
	// MaxConsumeWait caps wait_ms of accept and receive.
	MaxConsumeWait = 60 * time.Second
	// MaxAbandonDelay caps delay_ms of an abandon.
	MaxAbandonDelay = 24 * time.Hour
	// remoteHolderPrefix marks the session locks of remote consumers.
	remoteHolderPrefix = "remote:"
)

// remoteHolder returns the lock holder of a remote consumer's lease:
// "remote:" and the first 128 bits of the SHA-256 of its nonce, in hex.
// Not the nonce itself: session listings (GET /v1/queues/{queue}/sessions,
// submit scope) show the holder, and must not show the secret.
func remoteHolder(nonce string) string {
	sum := sha256.Sum256([]byte(nonce))
	return remoteHolderPrefix + hex.EncodeToString(sum[:16])
}

// LockToken is a decoded lock token: the session's sequential lock token
// and the holder its nonce stands for.
type LockToken struct {
	Token  int64
	Holder string
}

// ref returns the lock reference of the token for a session.
func (t LockToken) ref(queue, session string) convoy.LockRef {
	return convoy.LockRef{Queue: queue, SessionID: session, Token: t.Token, Holder: t.Holder}
}

func waitField(ms *int64) (time.Duration, error) {
	if ms == nil {
		return 0, nil
	}
	if *ms < 0 || *ms > MaxConsumeWait.Milliseconds() {
		return 0, errorf(http.StatusBadRequest, "invalid_field", "field \"wait_ms\": want an integer from 0 to %d, got %d", MaxConsumeWait.Milliseconds(), *ms)
	}
	return time.Duration(*ms) * time.Millisecond, nil
}

// tokenField parses a lock token strictly: "<token>.<32 hex digits>", as
// the accept returned it (the same form as a remote agent's token).
func tokenField(t *string) (LockToken, error) {
	if t == nil {
		return LockToken{}, errorf(http.StatusBadRequest, "invalid_field", "field \"lock_token\" is required (from the accept)")
	}
	bad := errorf(http.StatusBadRequest, "invalid_field", "field \"lock_token\": want the token the accept returned (\"<number>.<32 hex digits>\")")
	m := tokenPattern.FindStringSubmatch(*t)
	if m == nil {
		return LockToken{}, bad
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		return LockToken{}, bad
	}
	return LockToken{Token: n, Holder: remoteHolder(m[2])}, nil
}

// DecodeAccept decodes and checks the body of an accept (it may be empty):
// the session named ("" for the next available one) and the wait.
func DecodeAccept(body []byte) (string, time.Duration, error) {
	var req droverapi.AcceptRequest
	if err := decodeJSON(body, &req, false); err != nil {
		return "", 0, err
	}
	wait, err := waitField(req.WaitMS)
	if err != nil {
		return "", 0, err
	}
	session := ""
	if req.Session != nil {
		if err := checkSession(*req.Session); err != nil {
			return "", 0, errorf(http.StatusBadRequest, "invalid_field", "field \"session\": %s", err)
		}
		session = *req.Session
	}
	return session, wait, nil
}

// DecodeReceive decodes and checks the body of a receive.
func DecodeReceive(body []byte) (LockToken, time.Duration, error) {
	var req droverapi.ReceiveRequest
	if err := decodeJSON(body, &req, true); err != nil {
		return LockToken{}, 0, err
	}
	tok, err := tokenField(req.LockToken)
	if err != nil {
		return LockToken{}, 0, err
	}
	wait, err := waitField(req.WaitMS)
	return tok, wait, err
}

// Settle outcomes.
const (
	OutcomeComplete   = "complete"
	OutcomeAbandon    = "abandon"
	OutcomeDeadLetter = "dead_letter"
)

// Settle is a decoded settle request.
type Settle struct {
	LockToken LockToken
	Seq       int64
	Outcome   string
	Reason    string
	Delay     time.Duration
}

// DecodeSettle decodes and checks the body of a settle.
func DecodeSettle(body []byte) (*Settle, error) {
	var req droverapi.SettleRequest
	if err := decodeJSON(body, &req, true); err != nil {
		return nil, err
	}
	tok, err := tokenField(req.LockToken)
	if err != nil {
		return nil, err
	}
	s := &Settle{LockToken: tok}
	switch {
	case req.Seq == nil:
		return nil, errorf(http.StatusBadRequest, "invalid_field", "field \"seq\" is required (the received message's)")
	case *req.Seq < 1:
		return nil, errorf(http.StatusBadRequest, "invalid_field", "field \"seq\": want a positive integer, got %d", *req.Seq)
	case req.Outcome == nil:
		return nil, errorf(http.StatusBadRequest, "invalid_field", "field \"outcome\" is required: complete, abandon or dead_letter")
	}
	s.Seq, s.Outcome = *req.Seq, *req.Outcome
	switch s.Outcome {
	case OutcomeComplete, OutcomeAbandon, OutcomeDeadLetter:
	default:
		return nil, errorf(http.StatusBadRequest, "invalid_field", "field \"outcome\": want complete, abandon or dead_letter, got %q", s.Outcome)
	}
	if req.Reason != nil {
		if s.Outcome != OutcomeDeadLetter {
			return nil, errorf(http.StatusBadRequest, "invalid_field", "field \"reason\" goes with outcome dead_letter only")
		}
		if err := checkText("reason", *req.Reason, convoy.MaxReasonBytes); err != nil {
			return nil, err
		}
		s.Reason = *req.Reason
	}
	if req.DelayMS != nil {
		if s.Outcome != OutcomeAbandon {
			return nil, errorf(http.StatusBadRequest, "invalid_field", "field \"delay_ms\" goes with outcome abandon only")
		}
		if *req.DelayMS < 0 || *req.DelayMS > MaxAbandonDelay.Milliseconds() {
			return nil, errorf(http.StatusBadRequest, "invalid_field", "field \"delay_ms\": want an integer from 0 to %d, got %d", MaxAbandonDelay.Milliseconds(), *req.DelayMS)
		}
		s.Delay = time.Duration(*req.DelayMS) * time.Millisecond
	}
	return s, nil
}

// DecodeLock decodes and checks the body of a renew or release.
func DecodeLock(body []byte) (LockToken, error) {
	var req droverapi.LockRequest
	if err := decodeJSON(body, &req, true); err != nil {
		return LockToken{}, err
	}
	return tokenField(req.LockToken)
}

// sessionLeaseErr is leaseErr for a call naming a session: a lock lost
// on a session the caller's namespace does not have answers 404, as every
// other route does for another namespace's objects, not 409.
func (h *Handler) sessionLeaseErr(r *http.Request, queue, session string, err error) error {
	if errors.Is(err, convoy.ErrLockLost) {
		h.opts.Recorder.SessionLock(queue, false)
		if _, serr := h.convoy.Session(r.Context(), queue, session); errors.Is(serr, store.ErrNotFound) {
			return errorf(http.StatusNotFound, "not_found", "session %q of queue %q not found", session, dt.LocalName(queue))
		}
	}
	return leaseErr(err)
}

// leaseErr maps the lease errors of convoy to answers.
func leaseErr(err error) error {
	switch {
	case errors.Is(err, convoy.ErrLockLost):
		return errorf(http.StatusConflict, "lock_lost", "%s: the lock token is stale (the lock expired, was released, or another consumer accepted the session); nothing was changed: accept the session again", err)
	case errors.Is(err, convoy.ErrNotHead):
		return errorf(http.StatusConflict, "not_head", "%s: settle the message last received (it may be settled already)", err)
	case errors.Is(err, convoy.ErrSessionLocked):
		return errorf(http.StatusConflict, "session_locked", "%s", err)
	}
	return err
}

// sessionPath reads and checks the queue and session of a session route.
func sessionPath(r *http.Request) (string, string, error) {
	queue, session := r.PathValue("queue"), r.PathValue("session")
	if err := checkQueueName(queue); err != nil {
		return "", "", err
	}
	if err := checkSession(session); err != nil {
		return "", "", err
	}
	return queue, session, noQuery(r)
}

// waitContext returns the context of a waiting call: it outlives
// Options.RequestTimeout by wait, ends when the client goes away or the
// server drains, and the response's write deadline is moved to match.
// A call with a wait takes one of the waiting slots (Options.MaxWaiting,
// MaxWaitingPerToken) until it ends.
func (h *Handler) waitContext(w http.ResponseWriter, r *http.Request, wait time.Duration) (context.Context, context.CancelFunc, error) {
	if h.streamCtx.Err() != nil {
		w.Header().Set("Retry-After", strconv.Itoa(streamRetryAfter))
		return nil, nil, errorf(http.StatusServiceUnavailable, "shutting_down", "the server is shutting down")
	}
	release := func() {}
	if wait > 0 {
		var err error
		if release, err = h.hold(w, r, holdWaiting); err != nil {
			return nil, nil, err
		}
	}
	ctx, cancel := context.WithTimeout(untimedContext(r), wait+h.opts.RequestTimeout)
	stop := context.AfterFunc(h.streamCtx, cancel)
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(wait + h.opts.RequestTimeout))
	return ctx, func() { stop(); cancel(); release() }, nil
}

// acceptSession serves POST /v1/queues/{queue}/sessions:accept.
func (h *Handler) acceptSession(w http.ResponseWriter, r *http.Request) error {
	queue, body, err := namedBody(r, "queue", "queue name")
	if err != nil {
		return err
	}
	session, wait, err := DecodeAccept(body)
	if err != nil {
		return err
	}
	ctx, cancel, err := h.waitContext(w, r, wait)
	if err != nil {
		return err
	}
	defer cancel()
	nonce, err := newNonce()
	if err != nil {
		return err
	}
	l, err := h.convoy.AcceptLease(ctx, queue, session, remoteHolder(nonce), wait)
	if errors.Is(err, store.ErrNotFound) {
		return errorf(http.StatusNotFound, "not_found", "session %q of queue %q not found", session, queue)
	}
	if err != nil && ctx.Err() != nil && r.Context().Err() == nil {
		// The server is draining: no session was taken.
		l, err = nil, nil
	}
	if err != nil {
		return leaseErr(err)
	}
	if l == nil {
		writeJSON(w, http.StatusOK, droverapi.Lease{})
		return nil
	}
	id := l.SessionID
	writeJSON(w, http.StatusOK, droverapi.Lease{Queue: dt.LocalName(queue), Session: &id, LockToken: strconv.FormatInt(l.Token, 10) + "." + nonce, LockedUntil: &l.LockedUntil,
		LockDurationMS: l.LockDuration.Milliseconds()})
	return nil
}

// receiveMessage serves POST .../sessions/{session}/receive.
func (h *Handler) receiveMessage(w http.ResponseWriter, r *http.Request) error {
	queue, session, body, err := sessionBody(r)
	if err != nil {
		return err
	}
	tok, wait, err := DecodeReceive(body)
	if err != nil {
		return err
	}
	ctx, cancel, err := h.waitContext(w, r, wait)
	if err != nil {
		return err
	}
	defer cancel()
	m, err := h.convoy.LeaseReceive(ctx, tok.ref(queue, session), wait)
	var out droverapi.ReceiveResult
	switch {
	case errors.Is(err, convoy.ErrSessionBlocked):
		out.Blocked = true
	case errors.Is(err, convoy.ErrSessionEnded):
		out.Ended = true
	case err != nil && ctx.Err() != nil && r.Context().Err() == nil:
		// Draining ended the wait before anything was received.
	case err != nil:
		return h.sessionLeaseErr(r, queue, session, err)
	case m != nil:
		traceparent, tracestate, _ := strings.Cut(m.TraceContext, " ")
		out.Message = &droverapi.ReceivedMessage{Queue: dt.LocalName(m.Queue), SessionID: m.SessionID, Seq: m.Seq, MessageID: m.MessageID, Body: jsonOrString(m.Body),
			DeliveryCount: m.DeliveryCount, EndOfSequence: m.EndOfSequence, EnqueuedAt: m.EnqueuedAt, AvailableAt: m.AvailableAt,
			Traceparent: traceparent, Tracestate: tracestate}
		if out.Message.Body == nil {
			out.Message.Body = json.RawMessage("null")
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// settleMessage serves POST .../sessions/{session}/settle.
func (h *Handler) settleMessage(w http.ResponseWriter, r *http.Request) error {
	queue, session, body, err := sessionBody(r)
	if err != nil {
		return err
	}
	s, err := DecodeSettle(body)
	if err != nil {
		return err
	}
	ref := s.LockToken.ref(queue, session)
	switch s.Outcome {
	case OutcomeComplete:
		err = h.convoy.LeaseComplete(r.Context(), ref, s.Seq)
	case OutcomeAbandon:
		err = h.convoy.LeaseAbandon(r.Context(), ref, s.Seq, s.Delay)
	default:
		err = h.convoy.LeaseDeadLetter(r.Context(), ref, s.Seq, s.Reason)
	}
	if err != nil {
		return h.sessionLeaseErr(r, queue, session, err)
	}
	writeJSON(w, http.StatusOK, droverapi.SettleResult{Queue: queue, SessionID: session, Seq: s.Seq, Outcome: s.Outcome})
	return nil
}

// renewLock serves POST .../sessions/{session}/renew.
func (h *Handler) renewLock(w http.ResponseWriter, r *http.Request) error {
	ref, err := lockRef(r)
	if err != nil {
		return err
	}
	until, err := h.convoy.LeaseRenew(r.Context(), ref)
	if err != nil {
		return h.sessionLeaseErr(r, ref.Queue, ref.SessionID, err)
	}
	h.opts.Recorder.SessionLock(ref.Queue, true)
	writeJSON(w, http.StatusOK, droverapi.LockRenewed{Queue: dt.LocalName(ref.Queue), SessionID: ref.SessionID, LockedUntil: until})
	return nil
}

// releaseLock serves POST .../sessions/{session}/release.
func (h *Handler) releaseLock(w http.ResponseWriter, r *http.Request) error {
	ref, err := lockRef(r)
	if err != nil {
		return err
	}
	if err := h.convoy.LeaseRelease(r.Context(), ref); err != nil {
		return h.sessionLeaseErr(r, ref.Queue, ref.SessionID, err)
	}
	writeJSON(w, http.StatusOK, droverapi.LockReleased{Queue: dt.LocalName(ref.Queue), SessionID: ref.SessionID, Released: true})
	return nil
}

// lockRef reads the session route and the lock token of a renew or release
// body.
func lockRef(r *http.Request) (convoy.LockRef, error) {
	queue, session, body, err := sessionBody(r)
	if err != nil {
		return convoy.LockRef{}, err
	}
	tok, err := DecodeLock(body)
	if err != nil {
		return convoy.LockRef{}, err
	}
	return tok.ref(queue, session), nil
}
