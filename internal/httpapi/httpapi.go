package httpapi

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/convoy"
	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/clock"
	"github.com/drover-run/drover/internal/instrument"
	"github.com/drover-run/drover/internal/webhook"
	"github.com/drover-run/drover/metrics"
	"github.com/drover-run/drover/store"
)

// Defaults of Options.
const (
	DefaultMaxBodyBytes   = 1 << 20
	DefaultRate           = 50 // requests per second per token
	DefaultBurst          = 100
	DefaultRequestTimeout = 30 * time.Second
	DefaultReadyTimeout   = 2 * time.Second
	// maxURLBytes caps the request target; longer ones are refused.
	maxURLBytes = 4096
	// maxListLimit caps the limit of every listing.
	maxListLimit = 1000
	// maxBatch caps the messages of one publish.
	maxBatch = 1000
)

// Options configure a Handler.
type Options struct {
	// Recorder, when set, counts the requests by route and status, and
	// the session locks renewed and lost.
	Recorder *instrument.Recorder
	// Tokens are the accepted bearer tokens. Required unless NoAuth.
	Tokens []Token
	// NoAuth serves every route without a token (for a loopback-only
	// development server). Rate limits then apply to all callers together.
	NoAuth bool
	// MaxBodyBytes caps a request body; larger ones get 413. Default
	// DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// Rate is the sustained requests per second allowed per token and Burst
	// the bucket size. Defaults DefaultRate and DefaultBurst; a negative
	// Rate turns the limit off.
	Rate  float64
	Burst int
	// AuthFailRate is the sustained unknown tokens per second allowed per
	// client address and AuthFailBurst the bucket size; an address over
	// it gets 429 with Retry-After before its token is looked at. Defaults
	// DefaultAuthFailRate and DefaultAuthFailBurst; a negative
	// AuthFailRate turns the limit off.
	AuthFailRate  float64
	AuthFailBurst int
	// RequestTimeout bounds the store work of one request. Default 30s.
	RequestTimeout time.Duration
	// ReadyTimeout bounds the readiness probe's store read. Default 2s.
	ReadyTimeout time.Duration
	// Logger defaults to a discarding logger. Tokens are never logged.
	Logger *slog.Logger
	// Clock tells the handler the time (rate limits, remote agents'
	// deadlines); tests inject their own. Default: the system clock.
	Clock clock.Clock
	// Actor is recorded as the actor of operator actions. Default "http-api".
	Actor string
	// Heartbeat is the interval of the ": ping" comments on event streams
	// that keep proxies from closing idle streams. Default DefaultHeartbeat.
	Heartbeat time.Duration
	// MaxStreams caps the event streams served at once; more get 503 with
	// Retry-After. Default DefaultMaxStreams.
	MaxStreams int
	// MaxStreamsPerToken caps the event streams one token holds open; more
	// get 429 with Retry-After. Default DefaultMaxStreamsPerToken. Without
	// auth every caller counts as one token.
	MaxStreamsPerToken int
	// MaxWaiting caps the waiting calls served at once: remote agents'
	// polls, and session accepts and receives with a wait_ms above 0. More
	// get 503 with Retry-After. Default DefaultMaxWaiting.
	MaxWaiting int
	// MaxWaitingPerToken caps the waiting calls of one token; more get 429
	// with Retry-After. Default DefaultMaxWaitingPerToken.
	MaxWaitingPerToken int
	// MaxWaitingPerNamespace and MaxStreamsPerNamespace cap the waiting
	// calls and event streams of one namespace (all its tokens, and global
	// tokens acting in it), so that one namespace cannot take the whole
	// server's; more get 429 with Retry-After. They apply once namespaces
	// are in use (a token has one, or a request named one): a server
	// without namespaces keeps only the server and token caps. Default:
	// three quarters of MaxWaiting and MaxStreams (at least 1).
	MaxWaitingPerNamespace int
	MaxStreamsPerNamespace int
	// MaxInFlightPerToken caps the tasks one token has in flight: those it
	// submitted that are not final yet (Pending, Processing or
	// Compensating). A submit of a new task beyond it gets 429
	// quota_exceeded; submitting an existing ID again is not refused.
	// Tokens are told apart by their name (tokens sharing one share the
	// quota), else by a hash of the secret; the store records that name
	// with each task (drovertype.Task.Submitter), so the quota holds
	// across restarts and processes. Default 0: no quota. Without auth
	// there is none.
	MaxInFlightPerToken int
	// MaxInFlightPerNamespace caps the tasks of one namespace in flight:
	// not final yet (Pending, Processing or Compensating), whoever
	// submitted them. A submit of a new task into a namespace holding as
	// many gets 429 quota_exceeded; submitting an existing ID again is not
	// refused. The store counts them, so the quota holds across restarts
	// and processes. The default namespace has no such quota: its tasks
	// are not indexed apart (drover.Client.ActiveTasksIn). Default 0: no
	// quota.
	MaxInFlightPerNamespace int
	// RemoteAgent reports whether an agent runs in another process and is
	// served by remote agents over this API. Polls, completions and
	// failures for any other agent (the built-in http agent, agents that
	// run in the server) are refused. Default: the agents the drover
	// client declares external (drover.Client.IsExternalAgent).
	RemoteAgent func(agent string) bool
	// QueueCreate is who may create a queue by publishing to one that does
	// not exist: QueueCreateSubmit (default: every token that may publish)
	// or QueueCreateOperator (operator tokens only; others get 403).
	QueueCreate QueueCreate
	// EventPollInterval is how often an event stream reads the history.
	// Default: drover.Subscription's default (50ms).
	EventPollInterval time.Duration
	// AgentPollInterval is how often a waiting remote-agent poll looks for
	// new requests. Default DefaultAgentPollInterval.
	AgentPollInterval time.Duration
	// Redelivery is how long a request a remote agent failed transiently
	// (or whose RemoteInput failed transiently) waits before it is
	// delivered again; the delay doubles with each such failure of the
	// request. Default DefaultRedeliveryFirst doubling to
	// DefaultRedeliveryMax; a negative First delivers it again at once.
	// Otherwise store.Redelivery.Validate applies (First at least 1µs,
	// Max at most a day).
	Redelivery store.Redelivery
	// RemoteInput, when set, computes the "input" handed to a remote agent
	// (the declarative workflows' input mapping); by default it is the
	// task's input. An error fails that request permanently with its
	// message. ctx carries the request timeout.
	RemoteInput func(ctx context.Context, req *drover.AgentRequest) ([]byte, error)
	// CallbackAllow is where a submitted task's callback_url may point
	// (URL prefixes and an egress policy); others are refused with 400.
	// Default (nil): any URL whose host the default egress policy does not
	// refuse on sight (a loopback, private or link-local address...).
	CallbackAllow *webhook.Allow
	// Metrics, when set, is served at GET /metrics in Prometheus's text
	// format (scope metrics); without it that route answers 404. A token
	// of a namespace gets only the series labelled with its namespace
	// (metrics.ForNamespace).
	Metrics prometheus.Gatherer
}

// Handler is the HTTP API. Create it with New.
type Handler struct {
	drover *drover.Client
	convoy *convoy.Client
	opts   Options
	log    *slog.Logger
	clock  clock.Clock
	mux    *http.ServeMux
	auth   *authenticator
	routes []route

	callers  []*caller    // per token, by index; the last one: every caller without auth
	authFail addrLimiter  // failed authentications per client address
	waiting  atomic.Int64 // waiting calls being served (limits.go)
	streams  atomic.Int64 // open event streams
	// nsHolds counts waiting calls and streams per namespace, once
	// namespaced is set (a token has a namespace, or a request named one),
	// and submits in progress under a namespace's quota.
	nsHolds    nsHolds
	namespaced atomic.Bool

	draining atomic.Bool

	pollsWaiting  atomic.Int64 // remote-agent polls waiting for requests (agents.go)
	agentWake     agentWaker   // wakes them on the store's notifications (agents.go)
	presence      sync.Map     // agent + "/" + poller → time.Time of the last presence written (agents.go)
	remoteResults sync.Map     // agent → *recent.Window of the results remote agents sent (agents.go)

	metrics   http.Handler            // Options.Metrics served, or nil
	nsMetrics map[string]http.Handler // by stored namespace: its series of Options.Metrics

	streamCtx   context.Context
	stopStreams context.CancelFunc
}

// route is one endpoint: the method and the ServeMux pattern, the scope it
// needs ("" for public routes) and its handler.
type route struct {
	method  string
	pattern string
	scope   Scope
	fn      func(w http.ResponseWriter, r *http.Request) error
}

// New returns the API handler over the task client d and the queue client q.
func New(d *drover.Client, q *convoy.Client, opts Options) (*Handler, error) {
	if d == nil || q == nil {
		return nil, fmt.Errorf("httpapi: a drover and a convoy client are required")
	}
	if !opts.NoAuth && len(opts.Tokens) == 0 {
		return nil, fmt.Errorf("httpapi: no tokens configured (and NoAuth not set)")
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.Rate == 0 {
		opts.Rate = DefaultRate
	}
	if opts.Burst <= 0 {
		opts.Burst = DefaultBurst
	}
	if opts.AuthFailRate == 0 {
		opts.AuthFailRate = DefaultAuthFailRate
	}
	if opts.AuthFailBurst <= 0 {
		opts.AuthFailBurst = DefaultAuthFailBurst
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = DefaultRequestTimeout
	}
	if opts.ReadyTimeout <= 0 {
		opts.ReadyTimeout = DefaultReadyTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.Actor == "" {
		opts.Actor = "http-api"
	}
	if opts.Heartbeat <= 0 {
		opts.Heartbeat = DefaultHeartbeat
	}
	if opts.MaxStreams <= 0 {
		opts.MaxStreams = DefaultMaxStreams
	}
	if opts.MaxStreamsPerToken <= 0 {
		opts.MaxStreamsPerToken = DefaultMaxStreamsPerToken
	}
	if opts.MaxWaiting <= 0 {
		opts.MaxWaiting = DefaultMaxWaiting
	}
	if opts.MaxWaitingPerToken <= 0 {
		opts.MaxWaitingPerToken = DefaultMaxWaitingPerToken
	}
	if opts.MaxWaitingPerNamespace <= 0 {
		opts.MaxWaitingPerNamespace = max(1, opts.MaxWaiting*3/4)
	}
	if opts.MaxStreamsPerNamespace <= 0 {
		opts.MaxStreamsPerNamespace = max(1, opts.MaxStreams*3/4)
	}
	if opts.RemoteAgent == nil {
		opts.RemoteAgent = d.IsExternalAgent
	}
	switch opts.QueueCreate {
	case "":
		opts.QueueCreate = QueueCreateSubmit
	case QueueCreateSubmit, QueueCreateOperator:
	default:
		return nil, fmt.Errorf("httpapi: QueueCreate %q: want %q or %q", opts.QueueCreate, QueueCreateSubmit, QueueCreateOperator)
	}
	switch {
	case opts.Redelivery == store.Redelivery{}:
		opts.Redelivery = store.Redelivery{First: DefaultRedeliveryFirst, Max: DefaultRedeliveryMax}
	case opts.Redelivery.First < 0:
		opts.Redelivery = store.Redelivery{}
	default:
		if err := opts.Redelivery.Validate(); err != nil {
			return nil, fmt.Errorf("httpapi: %w", err)
		}
	}
	auth, err := newAuthenticator(opts.Tokens)
	if err != nil {
		return nil, err
	}
	h := &Handler{drover: d, convoy: q, opts: opts, log: opts.Logger, clock: opts.Clock,
		mux: http.NewServeMux(), auth: auth, authFail: addrLimiter{rate: opts.AuthFailRate, burst: opts.AuthFailBurst}}
	for range len(opts.Tokens) + 1 {
		c := &caller{}
		if opts.Rate > 0 {
			c.limiter = rate.NewLimiter(rate.Limit(opts.Rate), opts.Burst)
		}
		h.callers = append(h.callers, c)
	}
	for _, t := range opts.Tokens {
		if t.Namespace != "" {
			h.namespaced.Store(true)
		}
		if t.unboundAgent() && !t.has(ScopeOperator) {
			h.log.Warn("a token has the plain agent scope: it may serve every remote agent; bind it to the agents it serves with agent:NAME scopes",
				"token", t.String())
		}
	}
	h.streamCtx, h.stopStreams = context.WithCancel(context.Background())
	if opts.Metrics != nil {
		h.metrics = metrics.Handler(opts.Metrics, opts.Logger, 0) // the request timeout bounds it
		// A namespace's tokens scrape its own series only: one handler per
		// namespace of the tokens, each with its own bound on scrapes.
		h.nsMetrics = map[string]http.Handler{}
		for _, t := range opts.Tokens {
			if ns := dt.StoredNamespace(t.Namespace); t.Namespace != "" && h.nsMetrics[ns] == nil {
				h.nsMetrics[ns] = metrics.Handler(metrics.ForNamespace(opts.Metrics, t.Namespace), opts.Logger, 0)
			}
		}
	}
	h.routes = []route{
		{"GET", "/healthz", "", h.healthz},
		{"GET", "/readyz", "", h.readyz},
		{"GET", "/openapi.json", "", h.openAPI},
		{"GET", "/metrics", ScopeMetrics, h.serveMetrics},

		{"POST", "/v1/tasks", ScopeSubmit, h.submitTask},
		{"GET", "/v1/tasks", ScopeSubmit, h.listTasks},
		{"GET", "/v1/tasks/{id}", ScopeSubmit, h.getTask},
		{"POST", "/v1/tasks/{id}/resubmit", ScopeOperator, h.resubmitTask},
		{"POST", "/v1/tasks/{id}/cancel", ScopeOperator, h.cancelTask},
		{"POST", "/v1/tasks/{id}/signals/{name}", ScopeSubmit, h.signalTask},
		{"GET", "/v1/tasks/{id}/events", ScopeSubmit, h.taskEvents},

		{"GET", "/v1/events", ScopeSubmit, h.allEvents},

		{"GET", "/v1/alerts", ScopeSubmit, h.listAlerts},
		{"POST", "/v1/alerts/{id}/ack", ScopeOperator, h.ackAlert},

		{"GET", "/v1/schedules", ScopeSubmit, h.listSchedules},
		{"GET", "/v1/schedules/{name}", ScopeSubmit, h.getSchedule},
		{"POST", "/v1/schedules/{name}/pause", ScopeOperator, h.pauseSchedule},
		{"POST", "/v1/schedules/{name}/resume", ScopeOperator, h.resumeSchedule},
		{"POST", "/v1/schedules/{name}/run", ScopeOperator, h.runSchedule},
		{"DELETE", "/v1/schedules/{name}", ScopeOperator, h.deleteSchedule},

		{"GET", "/v1/queues", ScopeSubmit, h.listQueues},
		{"POST", "/v1/queues/{queue}/messages", ScopeSubmit, h.publish},
		{"GET", "/v1/queues/{queue}/sessions", ScopeSubmit, h.listSessions},
		{"GET", "/v1/queues/{queue}/sessions/{session}/messages", ScopeSubmit, h.peek},
		{"GET", "/v1/queues/{queue}/deadletters", ScopeSubmit, h.listDeadLetters},
		{"POST", "/v1/queues/{queue}/sessions/{session}/deadletters/{seq}/resubmit", ScopeOperator, h.resubmitDeadLetter},
		{"POST", "/v1/queues/{queue}/sessions/{session}/deadletters/{seq}/discard", ScopeOperator, h.discardDeadLetter},
		{"GET", "/v1/queues/{queue}/policy", ScopeSubmit, h.getPolicy},
		{"PUT", "/v1/queues/{queue}/policy", ScopeOperator, h.putPolicy},
		{"POST", "/v1/queues/{queue}/sessions:accept", ScopeSubmit, h.acceptSession},
		{"POST", "/v1/queues/{queue}/sessions/{session}/receive", ScopeSubmit, h.receiveMessage},
		{"POST", "/v1/queues/{queue}/sessions/{session}/settle", ScopeSubmit, h.settleMessage},
		{"POST", "/v1/queues/{queue}/sessions/{session}/renew", ScopeSubmit, h.renewLock},
		{"POST", "/v1/queues/{queue}/sessions/{session}/release", ScopeSubmit, h.releaseLock},

		{"POST", "/v1/agents/{agent}/poll", ScopeAgent, h.pollAgent},
		{"POST", "/v1/agents/requests/{id}/complete", ScopeAgent, h.completeRequest},
		{"POST", "/v1/agents/requests/{id}/fail", ScopeAgent, h.failRequest},
	}
	for _, rt := range h.routes {
		h.mux.Handle(rt.method+" "+rt.pattern, h.wrap(rt))
	}
	// Everything else: a JSON 404 (or 405 when the path exists with other
	// methods), never ServeMux's plain-text answers or redirects.
	h.mux.HandleFunc("/", h.notFound)
	return h, nil
}

// SetDraining makes /readyz answer 503 ("shutting down") from now on: a load
// balancer stops sending work while requests in flight finish. It also ends
// the open event streams (CloseStreams), which would otherwise keep the
// HTTP server's Shutdown waiting until its deadline.
func (h *Handler) SetDraining() {
	h.draining.Store(true)
	h.CloseStreams()
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	err := h.checkBrowser(r)
	if err == nil {
		err = checkPath(r)
	}
	if err != nil {
		h.unmatched(w, r, func(w http.ResponseWriter) { h.writeError(w, r, err) })
		return
	}
	h.mux.ServeHTTP(w, r)
}

// unmatched answers a request no route serves with answer, counted under
// the route instrument.Unmatched.
func (h *Handler) unmatched(w http.ResponseWriter, r *http.Request, answer func(http.ResponseWriter)) {
	start := time.Now()
	sw := &statusWriter{ResponseWriter: w}
	answer(sw)
	h.opts.Recorder.HTTPRequest(r.Method, instrument.Unmatched, sw.status, time.Since(start))
}

// checkPath refuses request targets that are too long, not canonical (".",
// "..", "//" — ServeMux would redirect them) or hold control characters.
func checkPath(r *http.Request) error {
	if len(r.RequestURI) > maxURLBytes || len(r.URL.Path) > maxURLBytes {
		return errorf(http.StatusBadRequest, "invalid_path", "the request target is longer than %d bytes", maxURLBytes)
	}
	p := r.URL.Path
	if p == "" || p[0] != '/' {
		return errorf(http.StatusBadRequest, "invalid_path", "the path must start with /")
	}
	clean := path.Clean(p)
	if strings.HasSuffix(p, "/") && p != "/" {
		clean += "/"
	}
	if clean != p {
		return errorf(http.StatusBadRequest, "invalid_path", "the path is not canonical (no \".\", \"..\" or empty segments)")
	}
	for _, c := range p {
		if unicode.IsControl(c) {
			return errorf(http.StatusBadRequest, "invalid_path", "the path contains the control character %U", c)
		}
	}
	return nil
}

func (h *Handler) notFound(w http.ResponseWriter, r *http.Request) {
	h.unmatched(w, r, func(w http.ResponseWriter) { h.answerNotFound(w, r) })
}

func (h *Handler) answerNotFound(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/v1") {
		// Unauthenticated callers learn nothing about which paths exist.
		if h.authorize(w, r, "") == nil {
			return
		}
	}
	var allowed []string
	for _, rt := range h.routes {
		if rt.method != r.Method && matchPattern(rt.pattern, r.URL.EscapedPath()) {
			allowed = append(allowed, rt.method)
		}
	}
	if len(allowed) > 0 {
		w.Header().Set("Allow", strings.Join(allowed, ", "))
		h.writeError(w, r, errorf(http.StatusMethodNotAllowed, "method_not_allowed", "%s is not allowed on %s (allowed: %s)", r.Method, r.URL.Path, strings.Join(allowed, ", ")))
		return
	}
	h.writeError(w, r, errorf(http.StatusNotFound, "not_found", "no endpoint %s %s", r.Method, r.URL.Path))
}

// matchPattern reports whether the escaped path p matches a route pattern
// segment by segment ({name} matches any one non-empty segment).
func matchPattern(pattern, p string) bool {
	ps, xs := strings.Split(pattern, "/"), strings.Split(p, "/")
	if len(ps) != len(xs) {
		return false
	}
	for i := range ps {
		if strings.HasPrefix(ps[i], "{") {
			if xs[i] == "" {
				return false
			}
			continue
		}
		if ps[i] != xs[i] {
			return false
		}
	}
	return true
}

// wrap adds authentication, authorization, the rate limit, the JSON
// Content-Type of writes, the body limit and the request timeout around a
// route, and writes its error.
func (h *Handler) wrap(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		defer func() {
			if v := recover(); v != nil {
				h.log.Error("http: handler panicked", "method", r.Method, "route", rt.pattern, "panic", fmt.Sprint(v))
				if sw.status == 0 {
					h.writeError(sw, r, errorf(http.StatusInternalServerError, "internal", "internal error"))
				}
			}
			h.log.Debug("http request", "method", r.Method, "route", rt.pattern, "status", sw.status, "duration", time.Since(start))
			h.opts.Recorder.HTTPRequest(r.Method, rt.pattern, sw.status, time.Since(start))
		}()
		if rt.scope != "" {
			p := h.authorize(sw, r, rt.scope)
			if p == nil {
				return
			}
			if !h.allow(sw, r, p.caller) {
				return
			}
			ns, err := requestNamespace(r, p.token)
			if err != nil {
				h.writeError(sw, r, err)
				return
			}
			p.ns = ns
			if err := qualifyQueue(r, ns); err != nil {
				h.writeError(sw, r, err)
				return
			}
			r = r.WithContext(context.WithValue(r.Context(), principalKey{}, p))
		}
		if err := checkContentType(r); err != nil {
			h.writeError(sw, r, err)
			return
		}
		if r.ContentLength > h.opts.MaxBodyBytes {
			h.writeError(sw, r, tooLarge(h.opts.MaxBodyBytes))
			return
		}
		r.Body = http.MaxBytesReader(sw, r.Body, h.opts.MaxBodyBytes)
		ctx, cancel := context.WithTimeout(context.WithValue(r.Context(), untimedKey{}, r.Context()), h.opts.RequestTimeout)
		defer cancel()
		if err := rt.fn(sw, r.WithContext(ctx)); err != nil {
			h.writeError(sw, r, err)
		}
	})
}

// allow applies the rate limit of the caller's token.
func (h *Handler) allow(w http.ResponseWriter, r *http.Request, c *caller) bool {
	d := h.reserve(c)
	if d == 0 {
		return true
	}
	w.Header().Set("Retry-After", retryAfter(d))
	h.writeError(w, r, errorf(http.StatusTooManyRequests, "rate_limited", "too many requests for this token; retry in %ss", retryAfter(d)))
	return false
}

// reserve takes one request from the caller's rate limit: 0, or how long
// to wait when it is over (then nothing is taken).
func (h *Handler) reserve(c *caller) time.Duration {
	if c.limiter == nil {
		return 0
	}
	now := h.clock.Now()
	res := c.limiter.ReserveN(now, 1)
	d := res.DelayFrom(now)
	if res.OK() && d == 0 {
		return 0
	}
	res.CancelAt(now)
	return d // rate.InfDuration when the burst could never take it
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }
