package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/droverapi"
	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/engine"
	"github.com/drover-run/drover/internal/notifier"
	"github.com/drover-run/drover/internal/recent"
	"github.com/drover-run/drover/store"
)

// Remote agents: an agent process in any language long-polls
// POST /v1/agents/{agent}/poll for requests, then completes or fails each
// with the token it came with. The token names the request and the claim
// the poll made on it (ClaimedBy "remote:<nonce>"); the store acts on it
// only while that claim holds and CompleteBy has not passed, so a late or
// stale completion changes nothing (409 stale_token).

// Defaults and limits of the agent routes.
const (
	// DefaultAgentPollInterval is how often a waiting poll looks for new
	// requests (Options.AgentPollInterval).
	DefaultAgentPollInterval = 50 * time.Millisecond
	// DefaultPollWait is a poll's wait when the body gives no wait_ms.
	DefaultPollWait = 30 * time.Second
	// MaxPollWait caps wait_ms.
	MaxPollWait = 60 * time.Second
	// MaxPollRequests caps a poll's max.
	MaxPollRequests = 100
	// maxAgentError caps the error message of a failed request, in bytes.
	maxAgentError = 4096
	// claimPrefix marks the claims of remote agents in agent_requests.claimed_by.
	claimPrefix = "remote:"
	// DefaultRedeliveryFirst and DefaultRedeliveryMax are
	// Options.Redelivery's default: a request given back waits 1s before
	// it is delivered again, then 2s, 4s … at most 30s.
	DefaultRedeliveryFirst = time.Second
	DefaultRedeliveryMax   = 30 * time.Second
	// listenPollInterval is the poll interval of waiting polls while the
	// store's notifications (PostgreSQL LISTEN/NOTIFY) wake them.
	listenPollInterval = time.Second
)

// tokenPattern is the form of a request token: "<request id>.<nonce>".
var tokenPattern = regexp.MustCompile(`^([1-9][0-9]{0,18})\.([0-9a-f]{32})$`)

// DecodePoll decodes and checks the body of a poll (it may be empty) and
// returns max and the wait.
func DecodePoll(body []byte) (int, time.Duration, error) {
	var req droverapi.PollRequest
	if err := decodeJSON(body, &req, false); err != nil {
		return 0, 0, err
	}
	n, wait := 1, DefaultPollWait
	if req.Max != nil {
		if *req.Max < 1 || *req.Max > MaxPollRequests {
			return 0, 0, errorf(http.StatusBadRequest, "invalid_field", "field \"max\": want an integer from 1 to %d, got %d", MaxPollRequests, *req.Max)
		}
		n = *req.Max
	}
	if req.WaitMS != nil {
		if *req.WaitMS < 0 || *req.WaitMS > int64(MaxPollWait/time.Millisecond) {
			return 0, 0, errorf(http.StatusBadRequest, "invalid_field", "field \"wait_ms\": want an integer from 0 to %d, got %d", MaxPollWait/time.Millisecond, *req.WaitMS)
		}
		wait = time.Duration(*req.WaitMS) * time.Millisecond
	}
	return n, wait, nil
}

// DecodeComplete decodes and checks the body of a completion. An absent
// output is stored as JSON null.
func DecodeComplete(body []byte) (*droverapi.CompleteRequest, error) {
	var req droverapi.CompleteRequest
	if err := decodeJSON(body, &req, true); err != nil {
		return nil, err
	}
	if req.Token == "" {
		return nil, errorf(http.StatusBadRequest, "invalid_field", "field \"token\" is required (the token the request came with)")
	}
	if len(req.Output) == 0 {
		req.Output = json.RawMessage("null")
	}
	return &req, nil
}

// DecodeFail decodes and checks the body of a failure.
func DecodeFail(body []byte) (*droverapi.FailRequest, error) {
	var req droverapi.FailRequest
	if err := decodeJSON(body, &req, true); err != nil {
		return nil, err
	}
	if req.Token == "" {
		return nil, errorf(http.StatusBadRequest, "invalid_field", "field \"token\" is required (the token the request came with)")
	}
	if req.Error == "" {
		return nil, errorf(http.StatusBadRequest, "invalid_field", "field \"error\" is required: say what went wrong")
	}
	if err := checkText("error", req.Error, maxAgentError); err != nil {
		return nil, err
	}
	return &req, nil
}

// newNonce returns 128 random bits in hex: the secret part of the claim.
func newNonce() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("random nonce: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// parseToken checks a token against the request ID of the path and returns
// the claim it stands for.
func parseToken(tok string, id int64) (claimedBy string, err error) {
	m := tokenPattern.FindStringSubmatch(tok)
	if m == nil {
		return "", errorf(http.StatusBadRequest, "invalid_field", "field \"token\": not a request token (send the token the poll returned, unchanged)")
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil || n != id {
		return "", errorf(http.StatusBadRequest, "invalid_field", "field \"token\": the token is not for request %d", id)
	}
	return claimPrefix + m[2], nil
}

// parseRequestID reads the {id} of an agent request path: a decimal integer
// of at least 1 without sign or leading zeros.
func parseRequestID(s string) (int64, error) {
	if s == "" || len(s) > 19 || s[0] < '1' || s[0] > '9' {
		return 0, badRequest("request ID: want a positive integer, got %q", s)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, badRequest("request ID: want a positive integer, got %q", s)
	}
	return n, nil
}

// mayServe refuses an agent that is not a remote one (the built-in http
// agent, an agent running in the server, one no workflow names) and one
// the caller's token is not bound to.
func (h *Handler) mayServe(r *http.Request, agent string) error {
	if p := principalOf(r); p != nil && p.token != nil && !p.token.serves(agent) {
		return errorf(http.StatusForbidden, "forbidden", "this token may not serve the agent %q (it serves %s)", agent, servedAgents(p.token))
	}
	if !h.opts.RemoteAgent(agent) {
		return errorf(http.StatusNotFound, "not_found",
			"agent %q is not a remote agent of this server: only agents that workflows declare as running elsewhere are handed to remote agents, never built-in ones or those running in the server", agent)
	}
	return nil
}

// servedAgents lists the agents a token is bound to, for messages.
func servedAgents(t *Token) string {
	if len(t.Agents) == 0 {
		return "no agent"
	}
	return "only " + strings.Join(t.Agents, ", ")
}

// staleToken is the answer to a token whose claim no longer holds.
func staleToken(id int64) *apiError {
	return errorf(http.StatusConflict, "stale_token",
		"the token of request %d is stale: the request was already completed or failed, handed to another agent, "+
			"or its deadline (complete_by) passed; drop the result, the step is (or will be) retried with a new token", id)
}

// staleOr maps the store's stale and not-found answers to stale_token.
func staleOr(err error, id int64) error {
	if errors.Is(err, store.ErrStale) || errors.Is(err, store.ErrNotFound) {
		return staleToken(id)
	}
	return err
}

func (h *Handler) agentPollInterval() time.Duration {
	if h.opts.AgentPollInterval > 0 {
		return h.opts.AgentPollInterval
	}
	return DefaultAgentPollInterval
}

// pollAgent serves POST /v1/agents/{agent}/poll: it claims up to max
// requests for the agent, waiting up to wait_ms for one to arrive.
func (h *Handler) pollAgent(w http.ResponseWriter, r *http.Request) error {
	agent, body, err := namedBody(r, "agent", "agent")
	if err != nil {
		return err
	}
	limit, wait, err := DecodePoll(body)
	if err != nil {
		return err
	}
	if err := h.mayServe(r, agent); err != nil {
		return err
	}
	h.notePresence(r, agent)
	if h.streamCtx.Err() != nil {
		w.Header().Set("Retry-After", strconv.Itoa(streamRetryAfter))
		return errorf(http.StatusServiceUnavailable, "shutting_down", "the server is shutting down")
	}
	if wait > 0 {
		release, err := h.hold(w, r, holdWaiting)
		if err != nil {
			return err
		}
		defer release()
	}
	nonce, err := newNonce()
	if err != nil {
		return err
	}
	claimedBy := claimPrefix + nonce

	// The wait outlives Options.RequestTimeout (each store call keeps
	// it), and ends early when the client goes away or the server drains.
	base := untimedContext(r)
	waitCtx, cancel := context.WithTimeout(base, wait)
	defer cancel()
	stop := context.AfterFunc(h.streamCtx, cancel)
	defer stop()
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(wait + h.opts.RequestTimeout))

	wake, unsubscribe := h.agentWake.subscribe(h, agent)
	defer unsubscribe()
	interval := h.agentPollInterval()
	if h.agentWake.listening() {
		// Notifications wake the poll; polling only covers lost ones.
		interval = max(interval, listenPollInterval)
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	h.pollsWaiting.Add(1)
	defer h.pollsWaiting.Add(-1)
	var out []droverapi.AgentRequest
	for {
		out, err = h.claimRemote(base, agent, claimedBy, nonce, limit)
		if err != nil {
			// The claim may have committed before the error: give back
			// whatever this poll holds rather than leave it to the
			// supervisor after CompleteBy.
			h.releaseClaim(agent, claimedBy)
			return err
		}
		if len(out) > 0 {
			break
		}
		select {
		case <-waitCtx.Done():
		case <-tick.C:
			continue
		case <-wake:
			continue
		}
		break
	}
	if base.Err() != nil && len(out) > 0 {
		// Nobody will read the answer: hand the requests back at once
		// rather than leave them to the supervisor after CompleteBy.
		h.releaseClaim(agent, claimedBy)
		return nil
	}
	if out == nil {
		out = []droverapi.AgentRequest{}
	}
	writeJSON(w, http.StatusOK, droverapi.PollResult{Requests: out})
	return nil
}

// claimRemote claims up to limit requests for agent in one transaction and
// prepares them for the answer. A cheap read first keeps idle polls from
// taking the write lock.
func (h *Handler) claimRemote(base context.Context, agent, claimedBy, nonce string, limit int) ([]droverapi.AgentRequest, error) {
	ctx, cancel := context.WithTimeout(base, h.opts.RequestTimeout)
	defer cancel()
	remote := h.remote()
	ok, err := remote.Available(ctx, agent)
	if err != nil || !ok {
		return nil, err
	}
	reqs, err := remote.Claim(ctx, agent, claimedBy, limit)
	if err != nil {
		return nil, err
	}
	out := make([]droverapi.AgentRequest, 0, len(reqs))
	for _, q := range reqs {
		input := q.Input
		if h.opts.RemoteInput != nil {
			in, err := h.opts.RemoteInput(ctx, q)
			if err != nil && !drover.IsPermanent(err) {
				// A passing failure (the store, say): give the request back
				// for a later poll rather than failing the step.
				h.log.Warn("remote agent input not available yet; the request is given back", "agent", agent, "task", q.TaskID, "step", q.StepIndex, "err", err)
				if err := remote.Defer(ctx, q.ID, claimedBy, h.opts.Redelivery); err != nil && !errors.Is(err, store.ErrStale) && !errors.Is(err, store.ErrNotFound) {
					return nil, err
				}
				continue
			}
			if err != nil {
				// The step cannot run with this input: fail it for good.
				h.log.Warn("remote agent input failed; failing the request permanently", "agent", agent, "task", q.TaskID, "step", q.StepIndex, "err", err)
				if err := remote.Fail(ctx, q.ID, claimedBy, "input: "+err.Error(), nil); err != nil && !errors.Is(err, store.ErrStale) && !errors.Is(err, store.ErrNotFound) {
					return nil, err
				}
				continue
			}
			input = in
		}
		traceparent, tracestate, _ := strings.Cut(q.TraceContext, " ")
		out = append(out, droverapi.AgentRequest{
			ID: q.ID, Token: strconv.FormatInt(q.ID, 10) + "." + nonce, Agent: q.Agent, TaskID: q.TaskID,
			Workflow: q.Workflow, StepIndex: q.StepIndex, StepName: q.StepName, Kind: string(q.Kind),
			Attempt: q.Attempt, IdempotencyKey: q.IdempotencyKey, CompleteBy: q.CompleteBy,
			Input: jsonOrNull(input), PreviousOutput: jsonOrString(q.PreviousOutput), StepOutput: jsonOrString(q.StepOutput),
			Traceparent: traceparent, Tracestate: tracestate,
		})
	}
	return out, nil
}

// jsonOrNull is jsonOrString, with nil as JSON null.
func jsonOrNull(b []byte) json.RawMessage {
	if b == nil {
		return json.RawMessage("null")
	}
	return jsonOrString(b)
}

const (
	// presenceTTL is how long a poller counts as connected after its last
	// recorded poll: longer than the longest wait (MaxPollWait), so a
	// poller that polls again at once never drops out.
	presenceTTL = 90 * time.Second
	// presenceRenew is how often a server records the same poller again.
	presenceRenew = 20 * time.Second
)

// notePresence records that the caller polls for agent, at most every
// presenceRenew per agent and token in this process, so that any
// process's console lists it (drover.Client.RemoteAgents). A failure
// only costs the listing: it is logged, and the poll goes on.
func (h *Handler) notePresence(r *http.Request, agent string) {
	poller := "anonymous"
	if p := principalOf(r); p != nil && p.token != nil {
		poller = strings.TrimPrefix(p.token.actorName(), "http:")
	}
	key, now := agent+"/"+poller, h.clock.Now()
	if last, ok := h.presence.Load(key); ok && now.Sub(last.(time.Time)) < presenceRenew {
		return
	}
	h.presence.Store(key, now)
	ctx, cancel := context.WithTimeout(untimedContext(r), h.opts.RequestTimeout)
	defer cancel()
	if err := h.remote().Present(ctx, agent, poller, h.drover.InstanceID(), presenceTTL); err != nil {
		h.presence.Delete(key)
		h.log.Warn("record a remote agent's poll for the console", "agent", agent, "poller", poller, "err", err)
	}
}

// releaseClaim gives back every request claimed by a poll whose client went
// away.
func (h *Handler) releaseClaim(agent, claimedBy string) {
	ctx, cancel := context.WithTimeout(context.Background(), h.opts.RequestTimeout)
	defer cancel()
	if err := h.remote().ReleaseAll(ctx, agent, claimedBy); err != nil {
		h.log.Warn("release the requests of an abandoned poll; the supervisor recovers them after their deadline", "agent", agent, "err", err)
	}
}

// remote is the engine's API of remote agents' state transitions.
func (h *Handler) remote() engine.Remote {
	return engine.Remote{Store: h.drover.Store(), Clock: h.clock}
}

// agentRequestBody reads the {id} and the body shared by complete and fail.
func agentRequestBody(r *http.Request) (int64, []byte, error) {
	id, err := parseRequestID(r.PathValue("id"))
	if err != nil {
		return 0, nil, err
	}
	if err := noQuery(r); err != nil {
		return 0, nil, err
	}
	body, err := readBody(r)
	return id, body, err
}

// completeRequest serves POST /v1/agents/requests/{id}/complete.
func (h *Handler) completeRequest(w http.ResponseWriter, r *http.Request) error {
	id, body, err := agentRequestBody(r)
	if err != nil {
		return err
	}
	req, err := DecodeComplete(body)
	if err != nil {
		return err
	}
	claimedBy, err := parseToken(req.Token, id)
	if err != nil {
		return err
	}
	check, agent := h.requestCheck(r)
	if err := h.remote().Complete(r.Context(), id, claimedBy, req.Output, check); err != nil {
		return staleOr(err, id)
	}
	h.countResult(*agent, false)
	writeJSON(w, http.StatusOK, droverapi.Accepted{Accepted: true})
	return nil
}

// failRequest serves POST /v1/agents/requests/{id}/fail: a permanent
// failure is the step's reply (the task's failure policy applies); a
// transient one gives the request back so that it is delivered again, to
// any agent, before its deadline, after the redelivery delay
// (Options.Redelivery), which grows with each transient failure.
func (h *Handler) failRequest(w http.ResponseWriter, r *http.Request) error {
	id, body, err := agentRequestBody(r)
	if err != nil {
		return err
	}
	req, err := DecodeFail(body)
	if err != nil {
		return err
	}
	claimedBy, err := parseToken(req.Token, id)
	if err != nil {
		return err
	}
	check, agent := h.requestCheck(r)
	if req.Permanent {
		err = h.remote().Fail(r.Context(), id, claimedBy, req.Error, check)
	} else {
		err = h.remote().Release(r.Context(), id, claimedBy, h.opts.Redelivery, check)
		if err == nil {
			h.log.Info("remote agent failed a request transiently; it is redelivered", "request", id, "err", req.Error)
		}
	}
	if err != nil {
		return staleOr(err, id)
	}
	h.countResult(*agent, true)
	writeJSON(w, http.StatusOK, droverapi.Accepted{Accepted: true})
	return nil
}

// requestCheck returns the check of a completion or failure: the
// request's agent must be one the caller may serve, checked in the
// transaction that acts on it. It keeps the agent's name, once checked.
func (h *Handler) requestCheck(r *http.Request) (func(*dt.AgentRequest) error, *string) {
	agent := new(string)
	return func(q *dt.AgentRequest) error {
		if err := h.mayServe(r, q.Agent); err != nil {
			return err
		}
		*agent = q.Agent
		return nil
	}, agent
}

// countResult counts a remote agent's result, failed or not, for the
// console's recent error rate (RemoteResults). The agents are those a
// workflow names as remote (mayServe), so the map stays small.
func (h *Handler) countResult(agent string, failed bool) {
	if agent == "" {
		return
	}
	w, _ := h.remoteResults.LoadOrStore(agent, &recent.Window{})
	w.(*recent.Window).Add(h.clock.Now(), failed)
}

// RemoteResult is what the remote agents of one agent name sent this
// server in the last five minutes (recent.Span).
type RemoteResult struct {
	// Results counts completions and failures, Failures the failures
	// (permanent or transient).
	Results, Failures int
}

// RemoteResults returns the remote agents' results this server received
// recently, by agent. Each server counts the results sent to it.
func (h *Handler) RemoteResults() map[string]RemoteResult {
	now := h.clock.Now()
	out := map[string]RemoteResult{}
	h.remoteResults.Range(func(k, v any) bool {
		n, f := v.(*recent.Window).Counts(now)
		if n > 0 {
			out[k.(string)] = RemoteResult{Results: n, Failures: f}
		}
		return true
	})
	return out
}

// agentWaker wakes waiting polls when the store notifies new requests for
// their agent (store.TopicRequests; PostgreSQL's LISTEN/NOTIFY): one
// subscription to the process's notifier per Handler, taken by the first
// poll, dropped with the streams (CloseStreams). Without a store.Listener
// it does nothing and polls find work by polling.
type agentWaker struct {
	mu      sync.Mutex
	started bool
	up      atomic.Bool // the listener has been started
	waiters map[string]map[chan struct{}]struct{}
}

// subscribe registers a waiting poll for agent; its channel receives a
// value when requests for agent may have arrived.
func (a *agentWaker) subscribe(h *Handler, agent string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.started {
		a.started = true
		if notes := notifier.For(h.drover.Store()); notes.Listening() {
			a.up.Store(true)
			unsubscribe := notes.Subscribe(a.wake)
			go func() {
				<-h.streamCtx.Done()
				unsubscribe()
			}()
		}
	}
	if a.waiters == nil {
		a.waiters = map[string]map[chan struct{}]struct{}{}
	}
	if a.waiters[agent] == nil {
		a.waiters[agent] = map[chan struct{}]struct{}{}
	}
	a.waiters[agent][ch] = struct{}{}
	return ch, func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		delete(a.waiters[agent], ch)
		if len(a.waiters[agent]) == 0 {
			delete(a.waiters, agent)
		}
	}
}

// listening reports whether notifications wake the polls.
func (a *agentWaker) listening() bool { return a.up.Load() }

// wake is the notifier's callback.
func (a *agentWaker) wake(t notifier.Topic) {
	a.mu.Lock()
	defer a.mu.Unlock()
	signal := func(ws map[chan struct{}]struct{}) {
		for ch := range ws {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
	switch t.Kind {
	case notifier.All:
		for _, ws := range a.waiters {
			signal(ws)
		}
	case notifier.Requests:
		signal(a.waiters[t.Name])
	}
}
