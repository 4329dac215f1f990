package httpagent

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/sony/gobreaker/v2"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/internal/egress"
	"github.com/drover-run/drover/internal/logattr"
	"github.com/drover-run/drover/internal/recent"
	"github.com/drover-run/drover/internal/tracing"
)

// drainLimit is how much of an unread body is read before closing it, so
// the connection can be reused; past it the connection is dropped instead.
const drainLimit = 64 << 10

// Options configures a Caller. Zero fields take the documented defaults.
type Options struct {
	// Egress is where calls may connect (egress.Policy): checked on each
	// request's URL before it is sent and on every address connected to.
	// Default: the default policy, which refuses loopback, private,
	// link-local and other special-purpose addresses. A Request may
	// bring its own (a workflow's hosts).
	Egress *egress.Policy
	// MaxConcurrentPerHost bounds the calls in flight to one host (default
	// 16); further calls wait for a slot or the end of their context.
	MaxConcurrentPerHost int
	// MaxHosts bounds the hosts whose breaker and call slots are kept
	// (default 1024); past it the least recently called host that no call
	// holds is forgotten.
	MaxHosts int
	// Breaker configures the circuit breaker of each host.
	Breaker BreakerPolicy
	// MaxConcurrent bounds the calls in flight of the Caller; further
	// calls wait for a slot or the end of their context. Default 0: no
	// bound (the agent's concurrency bounds them).
	MaxConcurrent int
	// MaxPerNamespace bounds the calls of one namespace (Request.Namespace)
	// in flight, so that one namespace's calls to slow hosts cannot take
	// every slot of MaxConcurrent: further calls of the namespace wait for
	// one of its slots (or the end of their context) without holding one
	// of MaxConcurrent. It applies once a call of a namespace other than
	// the default one was made. Default 0: no bound.
	MaxPerNamespace int
	// MaxResponseBytes bounds a success body (default 1 MiB); a larger one
	// is a permanent failure.
	MaxResponseBytes int64
	// Logger receives retries, give-ups and breaker changes (default
	// slog.Default()). Header values are never logged.
	Logger *slog.Logger
}

// Request is one logical call; Do may send it several times.
type Request struct {
	// Method is one ValidateMethod accepts.
	Method string
	// URL is an absolute http or https URL.
	URL string
	// Header is sent on every try. Without a Content-Type, a Body that is
	// valid JSON is sent as application/json.
	Header http.Header
	// Body is sent on every try; nil sends none.
	Body []byte
	// IdempotencyKey is sent as the Idempotency-Key header on every try
	// (replacing one in Header); empty sends none.
	IdempotencyKey string
	// Retry is the back-off between tries.
	Retry RetryPolicy
	// Status overrides the classification of status codes.
	Status StatusPolicy
	// Egress, when set, replaces Options.Egress for this call.
	Egress *egress.Policy
	// Namespace is the namespace of the task making the call (as stored;
	// "" for the default one). Each namespace has its own per-host slots
	// and breakers, and at most Options.MaxPerNamespace calls in flight.
	Namespace string
}

// Caller makes the HTTP agent's calls. It is safe for concurrent use; the
// breakers and concurrency limits of a Caller are per host and shared by all
// its calls, so a process should use one Caller.
type Caller struct {
	egress   *egress.Policy
	maxConc  int
	breaker  BreakerPolicy
	maxBytes int64
	log      *slog.Logger
	now      func() time.Time // replaced by tests

	hosts   *hostTable
	clients clientCache

	// waiting counts calls waiting for a concurrency slot (tests watch it).
	waiting atomic.Int64

	global     chan struct{} // MaxConcurrent's slots; nil: no bound
	maxPerNS   int
	namespaced atomic.Bool // a call of a namespace other than the default one was made
	nsMu       sync.Mutex
	perNS      map[string]int // calls in flight by namespace (entries > 0 only)
	nsFreed    chan struct{}  // closed (and replaced) when a namespace's call ends
}

// host is the breaker and the call slots of one scheme+host+port.
type host struct {
	key    string
	cb     *gobreaker.CircuitBreaker[[]byte]
	slots  chan struct{}
	refs   int           // calls holding it (hostTable)
	recent recent.Window // requests sent and failed in the last minutes
}

// New returns a Caller with opts, defaults filled in.
func New(opts Options) *Caller {
	c := &Caller{
		egress:   opts.Egress,
		maxConc:  opts.MaxConcurrentPerHost,
		breaker:  opts.Breaker,
		maxBytes: opts.MaxResponseBytes,
		log:      opts.Logger,
		now:      time.Now,
		maxPerNS: opts.MaxPerNamespace,
		perNS:    map[string]int{},
		nsFreed:  make(chan struct{}),
	}
	if opts.MaxConcurrent > 0 {
		c.global = make(chan struct{}, opts.MaxConcurrent)
	}
	if c.egress == nil {
		c.egress = egress.New(egress.Options{})
	}
	if c.maxConc <= 0 {
		c.maxConc = DefaultMaxConcurrentPerHost
	}
	if c.breaker.Failures == 0 {
		c.breaker.Failures = DefaultBreakerFailures
	}
	if c.breaker.OpenFor <= 0 {
		c.breaker.OpenFor = DefaultBreakerOpenFor
	}
	if c.maxBytes <= 0 {
		c.maxBytes = DefaultMaxResponseBytes
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	maxHosts := opts.MaxHosts
	if maxHosts <= 0 {
		maxHosts = DefaultMaxHosts
	}
	c.hosts = newHostTable(maxHosts, c.newHost)
	return c
}

// Egress returns the Caller's egress policy (Options.Egress).
func (c *Caller) Egress() *egress.Policy { return c.egress }

// CloseIdleConnections closes the idle connections of every policy's pool.
func (c *Caller) CloseIdleConnections() { c.clients.closeIdle() }

// maxClients bounds the connection pools kept, one per egress policy in
// use (the server's, and each workflow's that lists its hosts).
const maxClients = 64

// clientCache holds one *http.Client per egress policy (Policy.Key), so a
// connection dialed under one policy never serves a call of another.
type clientCache struct {
	mu    sync.Mutex
	byKey map[string]*pooled
	tick  uint64
}

type pooled struct {
	client *http.Client
	used   uint64
}

// clientFor returns the client of policy p, made on first use with c's
// pool sizes.
func (c *Caller) clientFor(p *egress.Policy) *http.Client {
	cc := &c.clients
	cc.mu.Lock()
	defer cc.mu.Unlock()
	cc.tick++
	if e, ok := cc.byKey[p.Key()]; ok {
		e.used = cc.tick
		return e.client
	}
	if cc.byKey == nil {
		cc.byKey = map[string]*pooled{}
	}
	if len(cc.byKey) >= maxClients {
		oldest := ""
		for k, e := range cc.byKey {
			if oldest == "" || e.used < cc.byKey[oldest].used {
				oldest = k
			}
		}
		cc.byKey[oldest].client.CloseIdleConnections()
		delete(cc.byKey, oldest)
	}
	e := &pooled{client: newClient(p, c.maxConc), used: cc.tick}
	cc.byKey[p.Key()] = e
	return e.client
}

func (cc *clientCache) closeIdle() {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	for _, e := range cc.byKey {
		e.client.CloseIdleConnections()
	}
}

// newClient bounds connecting, not calling: a slow but healthy service is
// cut by the step's deadline alone.
func newClient(p *egress.Policy, perHost int) *http.Client {
	tr := p.Transport(10 * time.Second)
	tr.MaxIdleConnsPerHost = perHost
	return &http.Client{
		Transport: tr,
		// A redirect is an answer to classify, not to follow: following it
		// would resend the body and the Idempotency-Key elsewhere.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// BreakerState returns the state of a host's circuit breaker: "closed",
// "open" or "half-open". hostport is "host:port" or a URL (its scheme, host
// and port are used); a host never called is "closed".
func (c *Caller) BreakerState(hostport string) string {
	var keys []string
	if strings.Contains(hostport, "://") {
		u, err := url.Parse(hostport)
		if err != nil {
			return gobreaker.StateClosed.String()
		}
		keys = []string{hostKey(u)}
	} else {
		keys = []string{"http://" + hostport, "https://" + hostport}
	}
	for _, k := range keys {
		if h := c.hosts.get(k); h != nil {
			return h.cb.State().String()
		}
	}
	return gobreaker.StateClosed.String()
}

// HostHealth is how the HTTP agent's calls to one host are doing.
type HostHealth struct {
	// Host is scheme://host:port.
	Host string
	// Breaker is the host's circuit breaker: "closed", "open" or
	// "half-open".
	Breaker string
	// InFlight is the requests being sent to it now.
	InFlight int
	// Calls and Failures count the requests sent in the last five
	// minutes (recent.Span) and those that failed as the breaker counts
	// failures (no answer, 5xx, 429: not a clear 4xx refusal); a request
	// cut by its step's deadline is neither.
	Calls, Failures int
}

// Hosts reports the hosts the caller has called and still remembers (at
// most Options.MaxHosts), by key.
func (c *Caller) Hosts() []HostHealth {
	now := c.now()
	var out []HostHealth
	c.hosts.each(func(h *host) {
		calls, failures := h.recent.Counts(now)
		out = append(out, HostHealth{Host: h.key, Breaker: h.cb.State().String(), InFlight: len(h.slots), Calls: calls, Failures: failures})
	})
	slices.SortFunc(out, func(a, b HostHealth) int { return strings.Compare(a.Host, b.Host) })
	return out
}

// hostKey is scheme://host:port with the scheme's default port filled in.
func hostKey(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = "80"
		if strings.EqualFold(u.Scheme, "https") {
			port = "443"
		}
	}
	return strings.ToLower(u.Scheme) + "://" + net.JoinHostPort(strings.ToLower(u.Hostname()), port)
}

// newHost makes the breaker and slots of key.
func (c *Caller) newHost(key string) *host {
	failures := c.breaker.Failures
	h := &host{key: key, slots: make(chan struct{}, c.maxConc)}
	h.cb = gobreaker.NewCircuitBreaker[[]byte](gobreaker.Settings{
		Name: key,
		// A few trial calls when half-open, so one hung trial does not
		// shut the host out until its deadline.
		MaxRequests: uint32(max(1, c.maxConc/8)),
		Timeout:     c.breaker.OpenFor,
		ReadyToTrip: func(n gobreaker.Counts) bool { return n.ConsecutiveFailures >= failures },
		// A permanent failure is the service answering clearly: healthy.
		IsSuccessful: func(err error) bool { o := outcomeOf(err); return o == success || o == permanent },
		// The caller's deadline passing says nothing about the service.
		IsExcluded: func(err error) bool { return outcomeOf(err) == cut },
		OnStateChange: func(name string, from, to gobreaker.State) {
			c.log.Warn("http agent circuit breaker changed", "host", name, "from", from.String(), "to", to.String())
		},
	})
	return h
}

// call is a validated Request.
type call struct {
	client  *http.Client
	method  string
	url     string // as given, for the request
	safeURL string // for errors and logs
	host    string
	header  http.Header
	body    []byte
	status  StatusPolicy
}

func (c *Caller) prepare(r *Request) (*call, error) {
	if r == nil {
		return nil, errors.New("httpagent: nil request")
	}
	u, err := url.Parse(r.URL)
	if err != nil {
		// url.Error repeats the raw URL, secrets included: keep the reason.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("httpagent: invalid URL: %w", err)
	}
	cl := &call{method: r.Method, url: r.URL, safeURL: redact(u), body: r.Body, status: r.Status}
	if err := ValidateMethod(r.Method); err != nil {
		return nil, fmt.Errorf("httpagent: %s: %w", cl.safeURL, err)
	}
	if s := strings.ToLower(u.Scheme); s != "http" && s != "https" {
		return nil, fmt.Errorf("httpagent: URL %s: scheme must be http or https", cl.safeURL)
	}
	if u.Hostname() == "" {
		return nil, fmt.Errorf("httpagent: URL %s has no host", cl.safeURL)
	}
	pol := r.Egress
	if pol == nil {
		pol = c.egress
	}
	if err := pol.CheckURL(u); err != nil {
		return nil, fmt.Errorf("%w (%s %s)", err, cl.method, cl.safeURL)
	}
	cl.client = c.clientFor(pol)
	if err := ValidateStatusPolicy(r.Status); err != nil {
		return nil, fmt.Errorf("httpagent: %s %s: %w", cl.method, cl.safeURL, err)
	}
	cl.host = hostKey(u)
	if r.Namespace != "" {
		// A namespace's own slots and breaker for the host.
		cl.host = r.Namespace + " " + cl.host
	}
	cl.header = r.Header.Clone()
	if cl.header == nil {
		cl.header = http.Header{}
	}
	if r.IdempotencyKey != "" {
		cl.header.Set("Idempotency-Key", r.IdempotencyKey)
	}
	if len(r.Body) > 0 && cl.header.Get("Content-Type") == "" && json.Valid(r.Body) {
		cl.header.Set("Content-Type", "application/json")
	}
	return cl, nil
}

// Do makes the call r describes, retrying transient failures until
// r.Retry.MaxTries or ctx's deadline, and returns the response body as JSON
// (see the package documentation). A permanent failure is returned at once,
// wrapped with drover.Permanent. When the tries run out, or the next one
// could only start after the deadline, Do returns the last failure
// unwrapped; when ctx ends, the last failure (if any) with ctx's error.
func (c *Caller) Do(ctx context.Context, r *Request) ([]byte, error) {
	cl, err := c.prepare(r)
	if err != nil {
		return nil, drover.Permanent(err)
	}
	if !c.enterNamespace(ctx, r.Namespace) {
		return nil, fmt.Errorf("%s %s: waiting for one of the namespace's %d call slots: %w", cl.method, cl.safeURL, c.maxPerNS, ctx.Err())
	}
	defer c.leaveNamespace(r.Namespace)
	if c.global != nil {
		select {
		case c.global <- struct{}{}:
			defer func() { <-c.global }()
		case <-ctx.Done():
			return nil, fmt.Errorf("%s %s: waiting for one of the %d call slots: %w", cl.method, cl.safeURL, cap(c.global), ctx.Err())
		}
	}
	h := c.hosts.acquire(cl.host)
	defer c.hosts.release(h)
	b := &backoff.ExponentialBackOff{
		InitialInterval:     r.Retry.InitialInterval,
		MaxInterval:         r.Retry.MaxInterval,
		RandomizationFactor: 0.5,
		Multiplier:          2,
	}
	if b.InitialInterval <= 0 {
		b.InitialInterval = DefaultInitialInterval
	}
	if b.MaxInterval <= 0 {
		b.MaxInterval = max(DefaultMaxInterval, b.InitialInterval)
	}
	b.Reset()
	var last error
	for try := uint(1); ; try++ {
		if ctx.Err() != nil {
			return nil, c.stopped(ctx, cl, last)
		}
		out, err := c.try(ctx, h, cl)
		switch outcomeOf(err) {
		case success:
			return jsonOutput(out), nil
		case permanent:
			return nil, drover.Permanent(unwrapTry(err))
		case cut:
			if last == nil {
				return nil, unwrapTry(err)
			}
			return nil, c.stopped(ctx, cl, last)
		}
		last = unwrapTry(err)
		if r.Retry.MaxTries > 0 && try >= r.Retry.MaxTries {
			return nil, c.giveUp(ctx, cl, last, try, "no tries left")
		}
		wait := b.NextBackOff()
		var se *StatusError
		if errors.As(last, &se) && se.RetryAfter > 0 {
			wait = se.RetryAfter
		}
		// No try starts after the deadline, so waiting past it is pointless:
		// hand the step back now.
		if dl, ok := ctx.Deadline(); ok && !c.now().Add(wait).Before(dl) {
			return nil, c.giveUp(ctx, cl, last, try, fmt.Sprintf("the next try, in %s, would start after the deadline", wait.Round(time.Millisecond)))
		}
		c.log.Debug("http agent call failed; retrying", logattr.Append(ctx, "method", cl.method, "url", cl.safeURL, "try", try,
			"wait", wait, "err", last)...)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, c.stopped(ctx, cl, last)
		}
		// The timer and the deadline can fire together, and select then
		// picks either: do not start a try once the context is over.
		if ctx.Err() != nil {
			return nil, c.stopped(ctx, cl, last)
		}
	}
}

// enterNamespace counts a call of ns in flight, waiting while ns has
// MaxPerNamespace of them; false: ctx ended first.
func (c *Caller) enterNamespace(ctx context.Context, ns string) bool {
	if ns != "" {
		c.namespaced.Store(true)
	}
	for {
		c.nsMu.Lock()
		if c.maxPerNS <= 0 || !c.namespaced.Load() || c.perNS[ns] < c.maxPerNS {
			c.perNS[ns]++
			c.nsMu.Unlock()
			return true
		}
		freed := c.nsFreed
		c.nsMu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return false
		}
	}
}

// InFlight returns the calls of namespace ns (as stored) in flight.
func (c *Caller) InFlight(ns string) int {
	c.nsMu.Lock()
	defer c.nsMu.Unlock()
	return c.perNS[ns]
}

// NamespaceCalls returns the calls in flight per namespace (as stored;
// only namespaces with any).
func (c *Caller) NamespaceCalls() map[string]int {
	c.nsMu.Lock()
	defer c.nsMu.Unlock()
	return maps.Clone(c.perNS)
}

// leaveNamespace ends a call enterNamespace counted.
func (c *Caller) leaveNamespace(ns string) {
	c.nsMu.Lock()
	defer c.nsMu.Unlock()
	if c.perNS[ns]--; c.perNS[ns] <= 0 {
		delete(c.perNS, ns)
	}
	close(c.nsFreed)
	c.nsFreed = make(chan struct{})
}

// stopped is the error of a Do whose ctx ended: the last failure, if any,
// with ctx's error.
func (c *Caller) stopped(ctx context.Context, cl *call, last error) error {
	if last == nil {
		return fmt.Errorf("%s %s: %w", cl.method, cl.safeURL, ctx.Err())
	}
	return fmt.Errorf("%w (stopped: %w)", last, ctx.Err())
}

// giveUp is the error of a Do that stopped retrying before its deadline.
func (c *Caller) giveUp(ctx context.Context, cl *call, last error, tries uint, why string) error {
	c.log.Warn("http agent call failed; giving up", logattr.Append(ctx, "method", cl.method, "url", cl.safeURL, "tries", tries,
		"reason", why, "err", last)...)
	return fmt.Errorf("%w (gave up after %d tries: %s)", last, tries, why)
}

// try makes one try through the host's breaker and concurrency limit.
func (c *Caller) try(ctx context.Context, h *host, cl *call) ([]byte, error) {
	breakerOpen := func() error {
		return failed(transient, fmt.Errorf("%s %s: %w for %s", cl.method, cl.safeURL, ErrBreakerOpen, h.key))
	}
	// Fail fast rather than queue for a slot only to be refused.
	if h.cb.State() == gobreaker.StateOpen {
		return nil, breakerOpen()
	}
	c.waiting.Add(1)
	select {
	case h.slots <- struct{}{}:
		c.waiting.Add(-1)
	case <-ctx.Done():
		c.waiting.Add(-1)
		return nil, failed(cut, fmt.Errorf("%s %s: waiting for a call slot: %w", cl.method, cl.safeURL, ctx.Err()))
	}
	defer func() { <-h.slots }()
	// select picks at random when both are ready: never start after the end.
	if err := ctx.Err(); err != nil {
		return nil, failed(cut, fmt.Errorf("%s %s: %w", cl.method, cl.safeURL, err))
	}
	out, err := h.cb.Execute(func() ([]byte, error) {
		out, err := c.send(ctx, cl)
		// As the breaker counts: a clear refusal is the host answering,
		// and a call cut by its deadline says nothing about the host.
		if o := outcomeOf(err); o != cut {
			h.recent.Add(c.now(), o != success && o != permanent)
		}
		return out, err
	})
	if errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests) {
		return nil, breakerOpen()
	}
	return out, err
}

// send sends the request once and classifies the answer.
func (c *Caller) send(ctx context.Context, cl *call) ([]byte, error) {
	var body io.Reader
	if cl.body != nil {
		body = bytes.NewReader(cl.body)
	}
	req, err := http.NewRequestWithContext(ctx, cl.method, cl.url, body)
	if err != nil {
		return nil, failed(permanent, fmt.Errorf("%s %s: %w", cl.method, cl.safeURL, stripURLError(err)))
	}
	req.Header = cl.header.Clone()
	// The step's call, when traced, continues in the remote service.
	tracing.Inject(ctx, req.Header)
	res, err := cl.client.Do(req)
	if err != nil {
		err = stripURLError(err)
		if ctx.Err() != nil {
			return nil, failed(cut, fmt.Errorf("%s %s: %w", cl.method, cl.safeURL, ctx.Err()))
		}
		// Refused at connect (the name resolved to a refused address):
		// no retry makes it allowed.
		var denied *egress.DeniedError
		if errors.As(err, &denied) {
			return nil, failed(permanent, fmt.Errorf("%w (%s %s)", denied, cl.method, cl.safeURL))
		}
		// A certificate that does not verify needs an operator, not a retry.
		var cv *tls.CertificateVerificationError
		if errors.As(err, &cv) {
			return nil, failed(permanent, fmt.Errorf("%s %s: %w", cl.method, cl.safeURL, err))
		}
		return nil, failed(transient, fmt.Errorf("%s %s: %w", cl.method, cl.safeURL, err))
	}
	defer func() {
		_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, drainLimit))
		_ = res.Body.Close()
	}()

	if o := cl.status.classify(res.StatusCode); o != success {
		// Best effort: a failed read only shortens the excerpt.
		b, _ := io.ReadAll(io.LimitReader(res.Body, 2*bodyExcerpt))
		se := &StatusError{Method: cl.method, URL: cl.safeURL, Code: res.StatusCode, Body: excerpt(b)}
		if o == transient && (res.StatusCode == http.StatusTooManyRequests || res.StatusCode == http.StatusServiceUnavailable) {
			se.RetryAfter = parseRetryAfter(res.Header.Get("Retry-After"), c.now())
		}
		return nil, failed(o, se)
	}
	tooLarge := func() error {
		return failed(permanent, fmt.Errorf("%s %s: HTTP %d: %w: over %d bytes", cl.method, cl.safeURL, res.StatusCode,
			ErrResponseTooLarge, c.maxBytes))
	}
	if res.ContentLength > c.maxBytes {
		return nil, tooLarge()
	}
	b, err := io.ReadAll(io.LimitReader(res.Body, c.maxBytes+1))
	if err != nil {
		if ctx.Err() != nil {
			return nil, failed(cut, fmt.Errorf("%s %s: read body: %w", cl.method, cl.safeURL, ctx.Err()))
		}
		return nil, failed(transient, fmt.Errorf("%s %s: HTTP %d: read body: %w", cl.method, cl.safeURL, res.StatusCode, err))
	}
	if int64(len(b)) > c.maxBytes {
		return nil, tooLarge()
	}
	return b, nil
}

// stripURLError drops the *url.Error around err: its message repeats the
// raw URL, query secrets and userinfo included.
func stripURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// parseRetryAfter reads a Retry-After value, seconds or an HTTP date; 0 when
// absent, invalid or past.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseUint(v, 10, 32); err == nil {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// jsonOutput makes a success body a step output, which must be JSON.
func jsonOutput(body []byte) []byte {
	t := bytes.TrimSpace(body)
	if len(t) == 0 {
		return []byte("null")
	}
	if json.Valid(t) {
		return t
	}
	out, _ := json.Marshal(string(body)) // a string always marshals
	return out
}
