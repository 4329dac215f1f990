package droverclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/trace"

	"github.com/drover-run/drover/droverapi"
	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/logattr"
	"github.com/drover-run/drover/internal/tracing"
)

// ErrStale matches (errors.Is) the server's 409 stale_token: the token of
// a request no longer holds — it was completed or failed already, handed
// to another agent, or its CompleteBy passed. Drop the result: the step is
// (or will be) retried with a new token. It also matches ErrConflict.
var ErrStale = errors.New("stale request token")

// Request is one request handed to a remote agent by Poll.
type Request = droverapi.AgentRequest

// maxPollWait is the server's limit on a poll's wait.
const maxPollWait = 60 * time.Second

// Poll claims up to max (1-100) requests for agent, waiting up to wait
// (at most 60s; 0: do not wait) for one to arrive. It returns an empty
// slice when the wait ended with none. Each request must then be completed
// or failed with its token before its CompleteBy. The token must be bound
// to agent (scope agent:AGENT, or operator): ErrForbidden otherwise;
// ErrNotFound when the server has no remote agent of that name (it is
// built in, runs in the server, or no workflow names it). A server with
// too many waiting calls answers ErrRateLimited or ErrUnavailable.
func (c *Client) Poll(ctx context.Context, agent string, max int, wait time.Duration) ([]*Request, error) {
	if agent == "" {
		return nil, errors.New("droverclient: the agent name is empty")
	}
	if max < 1 || max > 100 {
		return nil, fmt.Errorf("droverclient: poll max %d: want 1-100", max)
	}
	if wait < 0 || wait > maxPollWait {
		return nil, fmt.Errorf("droverclient: poll wait %v: want 0-%v", wait, maxPollWait)
	}
	ms := wait.Milliseconds()
	body := droverapi.PollRequest{Max: &max, WaitMS: &ms}
	var out droverapi.PollResult
	if _, err := c.do(ctx, http.MethodPost, c.url(nil, "/v1/agents", agent, "/poll"), body, &out); err != nil {
		return nil, err
	}
	reqs := make([]*Request, len(out.Requests))
	for i := range out.Requests {
		reqs[i] = &out.Requests[i]
	}
	return reqs, nil
}

func requestPath(c *Client, req *Request, action string) (string, error) {
	if req == nil || req.ID < 1 || req.Token == "" {
		return "", errors.New("droverclient: the request has no ID or token (use a Request from Poll)")
	}
	return c.url(nil, "/v1/agents/requests", fmt.Sprint(req.ID), "/"+action), nil
}

// Complete completes req with output (one JSON document; nil sends null).
// ErrStale when the token no longer holds.
func (c *Client) Complete(ctx context.Context, req *Request, output json.RawMessage) error {
	u, err := requestPath(c, req, "complete")
	if err != nil {
		return err
	}
	if output == nil {
		output = json.RawMessage("null")
	}
	if !json.Valid(output) {
		return errors.New("droverclient: the output is not valid JSON")
	}
	body := droverapi.CompleteRequest{Token: req.Token, Output: output}
	_, err = c.do(ctx, http.MethodPost, u, body, nil)
	return err
}

// Fail fails req with the message msg. permanent: the step fails for good
// and the task's failure policy applies (Error, or compensation);
// otherwise the request is handed back and delivered again, to any agent,
// before its deadline, once the server's redelivery delay has passed (it
// doubles with each transient failure of the request). ErrStale when the
// token no longer holds.
func (c *Client) Fail(ctx context.Context, req *Request, msg string, permanent bool) error {
	u, err := requestPath(c, req, "fail")
	if err != nil {
		return err
	}
	if msg == "" {
		msg = "failed"
	}
	// The server takes at most 4096 bytes of UTF-8 without NUL
	// characters: an agent's error may quote anything.
	msg = dt.Storable(msg)
	if len(msg) > 4096 {
		n := 4096
		for !utf8.RuneStart(msg[n]) {
			n--
		}
		msg = msg[:n]
	}
	body := droverapi.FailRequest{Token: req.Token, Error: msg, Permanent: permanent}
	_, err = c.do(ctx, http.MethodPost, u, body, nil)
	return err
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent marks an agent handler's error as permanent: RunAgent fails
// the request for good instead of retrying it.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err}
}

// IsPermanent reports whether err was marked with Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

// AgentHandler runs one request and returns the step's output (one JSON
// document). ctx ends at the request's CompleteBy.
type AgentHandler func(ctx context.Context, req *Request) (json.RawMessage, error)

// AgentOptions configure RunAgent.
type AgentOptions struct {
	// Concurrency is how many requests run at once. Default 1.
	Concurrency int
	// Wait is how long each poll waits for work. Default 30s, at most 60s.
	Wait time.Duration
	// MaxTries is how often a request is tried in this process when the
	// handler fails with an error not marked Permanent, before it is
	// handed back (delivered again, possibly to another agent). Default 3.
	MaxTries int
	// RetryDelay is the first back-off between tries, doubled each time
	// (with jitter). Default 200ms.
	RetryDelay time.Duration
	// Logger defaults to a discarding logger.
	Logger *slog.Logger
}

// RunAgent serves agent until ctx ends: it polls for requests, runs h on
// each (at most Concurrency at once) with a context whose deadline is the
// request's CompleteBy, and completes the request with h's output. An
// error marked with Permanent fails the request for good; other errors
// are retried here (MaxTries, with back-off) and then handed back. Past
// CompleteBy nothing is sent: the server recovers the step. Polls that
// fail for server or network reasons are retried with back-off; a refusal
// that retrying cannot fix (a wrong token or scope, a bad agent name) is
// returned. When ctx ends, RunAgent stops polling, lets the calls in
// flight finish (each within its deadline), and returns nil.
func (c *Client) RunAgent(ctx context.Context, agent string, h AgentHandler, opts AgentOptions) error {
	if h == nil {
		return errors.New("droverclient: RunAgent needs a handler")
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = 1
	}
	if opts.Wait <= 0 {
		opts.Wait = 30 * time.Second
	}
	opts.Wait = min(opts.Wait, maxPollWait)
	if opts.MaxTries <= 0 {
		opts.MaxTries = 3
	}
	if opts.RetryDelay <= 0 {
		opts.RetryDelay = 200 * time.Millisecond
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	slots := make(chan struct{}, opts.Concurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	backoff := time.Duration(0)
	for {
		// Take one slot (waiting for it), then every other free one.
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		n := 1
	more:
		for n < opts.Concurrency {
			select {
			case slots <- struct{}{}:
				n++
			default:
				break more
			}
		}
		reqs, err := c.Poll(ctx, agent, min(n, 100), opts.Wait)
		// Give back the slots no request took.
		for range n - len(reqs) {
			<-slots
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if !retryable(err) {
				return fmt.Errorf("droverclient: agent %s: %w", agent, err)
			}
			backoff = min(max(2*backoff, 100*time.Millisecond), 10*time.Second)
			d := backoff/2 + rand.N(backoff/2+1)
			opts.Logger.Warn("agent poll failed; retrying", "agent", agent, "in", d, "err", err)
			if !sleep(ctx, d) {
				return nil
			}
			continue
		}
		backoff = 0
		for _, r := range reqs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-slots }()
				c.runRequest(ctx, r, h, opts)
			}()
		}
	}
}

// retryable reports whether a failed call may succeed later: network
// errors, 429 and 5xx.
func retryable(err error) bool {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Status == http.StatusTooManyRequests || ae.Status >= 500
	}
	return true
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// runRequest runs h on r with retries inside r's deadline and sends the
// outcome. The call is not cut when RunAgent's ctx ends, only at the
// deadline.
func (c *Client) runRequest(ctx context.Context, r *Request, h AgentHandler, opts AgentOptions) {
	log := opts.Logger.With("agent", r.Agent, "task", r.TaskID, "step", r.StepIndex, "attempt", r.Attempt)
	callCtx, cancel := context.WithDeadline(context.WithoutCancel(ctx), r.CompleteBy)
	defer cancel()
	var (
		out json.RawMessage
		err error
	)
	if c.tracer.On() {
		var span trace.Span
		callCtx, span = c.traceCall(callCtx, r)
		log = log.With(logattr.Trace(callCtx)...)
		defer func() { tracing.Outcome(callCtx, "", err); span.End() }()
	}
	delay := opts.RetryDelay
	for try := 1; ; try++ {
		out, err = call(callCtx, r, h)
		if err == nil || IsPermanent(err) || try >= opts.MaxTries || callCtx.Err() != nil {
			break
		}
		d := delay/2 + rand.N(delay/2+1)
		delay *= 2
		log.Info("agent handler failed; retrying", "try", try, "in", d, "err", err)
		if !sleep(callCtx, d) {
			break
		}
	}
	if callCtx.Err() != nil || !time.Now().Before(r.CompleteBy) {
		log.Warn("agent request passed its deadline; sending nothing (the server retries the step)", "err", err)
		return
	}
	// Sending the outcome gets until the deadline (the server refuses it
	// after), retrying what may be passing trouble.
	send := func(ctx context.Context) error {
		switch {
		case err == nil:
			if out != nil && !json.Valid(out) {
				return c.Fail(ctx, r, "agent returned an output that is not valid JSON", true)
			}
			return c.Complete(ctx, r, out)
		case IsPermanent(err):
			return c.Fail(ctx, r, err.Error(), true)
		default:
			return c.Fail(ctx, r, err.Error(), false)
		}
	}
	backoff := 100 * time.Millisecond
	for {
		serr := send(callCtx)
		switch {
		case serr == nil:
			return
		case errors.Is(serr, ErrStale):
			log.Warn("agent result refused: the request's token is stale", "err", serr)
			return
		case callCtx.Err() != nil || !retryable(serr):
			log.Error("agent result not delivered", "err", serr)
			return
		}
		log.Warn("sending agent result failed; retrying", "err", serr)
		if !sleep(callCtx, backoff) {
			log.Error("agent result not delivered before the deadline", "err", serr)
			return
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// traceCall starts the span of a call of r's handler, a child of r's
// trace context (the task's), for the handler's context.
func (c *Client) traceCall(ctx context.Context, r *Request) (context.Context, trace.Span) {
	stored := r.Traceparent
	if stored != "" && r.Tracestate != "" {
		stored += " " + r.Tracestate
	}
	return c.tracer.AgentCall(ctx, &dt.AgentRequest{TaskID: r.TaskID, Workflow: r.Workflow, StepIndex: r.StepIndex,
		StepName: r.StepName, Agent: r.Agent, Attempt: r.Attempt, Kind: dt.RequestKind(r.Kind),
		IdempotencyKey: r.IdempotencyKey, TraceContext: stored})
}

// call runs the handler, turning a panic into an error.
func call(ctx context.Context, r *Request, h AgentHandler) (out json.RawMessage, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("agent handler panicked: %v", p)
		}
	}()
	return h(ctx, r)
}
