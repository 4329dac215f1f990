package httpapi

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// Defaults of the caps on calls that hold a connection (Options).
const (
	// DefaultMaxWaiting caps the waiting calls of the whole server.
	DefaultMaxWaiting = 256
	// DefaultMaxWaitingPerToken caps the waiting calls of one token.
	DefaultMaxWaitingPerToken = 64
	// DefaultMaxStreamsPerToken caps the event streams of one token.
	DefaultMaxStreamsPerToken = 20
	// waitRetryAfter is the Retry-After (seconds) of a refused waiting call.
	waitRetryAfter = 1
)

// Failed authentication is limited per client address (Options.AuthFailRate
// and AuthFailBurst): by default after 10 unknown tokens, one more per
// second; beyond that the address gets 429 before its token is even
// looked at.
const (
	DefaultAuthFailRate  = 1
	DefaultAuthFailBurst = 10
	// maxAuthFailAddrs bounds the addresses remembered.
	maxAuthFailAddrs = 10000
)

// caller is what the server keeps per token (one for every caller
// without auth): its request rate limiter and the waiting calls and event
// streams it holds. A later grouping of tokens (a namespace) keeps the
// same counters one level up.
type caller struct {
	limiter    *rate.Limiter // nil: no rate limit
	waiting    atomic.Int64
	streams    atomic.Int64
	submitting atomic.Int64 // submits in progress, not yet counted by the store (quotaCheck)
}

// quotaCheck refuses a submit of a new task beyond a quota of tasks in
// flight: the token's (Options.MaxInFlightPerToken) or its namespace's
// (Options.MaxInFlightPerNamespace). Otherwise it returns the submitter to
// record and the function to call once the submit ended. Submits in
// progress in this process count too (those already committed may count
// twice: the check errs on the side of refusing), so that concurrent
// submits cannot pass a quota together.
func (h *Handler) quotaCheck(r *http.Request) (submitter string, done func(), err error) {
	p := principalOf(r)
	if p == nil {
		return "", func() {}, nil
	}
	var quotas []inFlightQuota
	if p.token != nil {
		submitter = p.token.actorName()
		if limit := h.opts.MaxInFlightPerToken; limit > 0 {
			quotas = append(quotas, inFlightQuota{"this token", "max-in-flight-per-token", limit,
				func() (int64, func()) { return p.caller.submitting.Add(1) - 1, func() { p.caller.submitting.Add(-1) } },
				func(ctx context.Context) (int, error) { return h.drover.ActiveTasksOf(ctx, submitter) }})
		}
	}
	// The default namespace has no quota: its tasks are not indexed apart.
	if limit, ns := h.opts.MaxInFlightPerNamespace, p.ns; limit > 0 && ns != "" {
		quotas = append(quotas, inFlightQuota{fmt.Sprintf("namespace %q", ns), "max-in-flight-per-namespace", limit,
			func() (int64, func()) {
				return int64(h.nsHolds.enter(ns, holdSubmit)), func() { h.nsHolds.give(ns, holdSubmit) }
			},
			func(ctx context.Context) (int, error) { return h.drover.ActiveTasksIn(ctx, ns) }})
	}
	var leave []func()
	done = func() {
		for _, f := range leave {
			f()
		}
	}
	for _, q := range quotas {
		others, left := q.enter()
		leave = append(leave, left)
		n, err := q.count(r.Context())
		if err != nil {
			done()
			return "", nil, err
		}
		if int64(n)+others >= int64(q.limit) {
			done()
			return "", nil, errorf(http.StatusTooManyRequests, "quota_exceeded",
				"%s has %d tasks in flight (not yet final), its quota %s is %d: wait for some to finish", q.who, n, q.flag, q.limit)
		}
	}
	return submitter, done, nil
}

// inFlightQuota is a quota of tasks in flight quotaCheck applies.
type inFlightQuota struct {
	who, flag string // whose quota, and the server flag that sets it, for the refusal
	limit     int
	// enter counts the submit as in progress, and returns how many others
	// are and the function that counts it out again.
	enter func() (others int64, leave func())
	// count counts the tasks in flight in the store.
	count func(ctx context.Context) (int, error)
}

// principal is who makes a request: the token (nil without auth) and its
// caller state.
type principal struct {
	token  *Token
	caller *caller
	ns     string // the request's namespace as stored ("": default)
}

// principalKey carries the request's principal in its context.
type principalKey struct{}

// principalOf returns the principal of an authorized request (nil on
// public routes).
func principalOf(r *http.Request) *principal {
	p, _ := r.Context().Value(principalKey{}).(*principal)
	return p
}

// holdKind is a kind of call that holds a connection open, or a submit
// in progress (counted per namespace for its quota, never refused by it).
type holdKind int

const (
	holdWaiting holdKind = iota // a long-poll: agent poll, session accept or receive with a wait
	holdStream                  // an event stream
	holdSubmit                  // a submit between its quota check and its end (quotaCheck)
	holdKinds                   // the number of kinds
)

// hold takes a slot of kind for the request's principal: it fails with
// 429 when the token holds its share already, 503 when the server does,
// both with Retry-After (written to w). Call the returned function when
// the call ends.
func (h *Handler) hold(w http.ResponseWriter, r *http.Request, kind holdKind) (func(), error) {
	if h.streamCtx.Err() != nil {
		w.Header().Set("Retry-After", strconv.Itoa(streamRetryAfter))
		return nil, errorf(http.StatusServiceUnavailable, "shutting_down", "the server is shutting down")
	}
	global, perToken, limit, perLimit, code, what, retry := &h.waiting, (*atomic.Int64)(nil), h.opts.MaxWaiting, h.opts.MaxWaitingPerToken,
		"too_many_waiting", "waiting calls (polls, accepts and receives with a wait)", waitRetryAfter
	if kind == holdStream {
		global, limit, perLimit, code, what, retry = &h.streams, h.opts.MaxStreams, h.opts.MaxStreamsPerToken, "too_many_streams", "open event streams", streamRetryAfter
	}
	if p := principalOf(r); p != nil {
		perToken = &p.caller.waiting
		if kind == holdStream {
			perToken = &p.caller.streams
		}
	}
	if perToken != nil {
		if n := perToken.Add(1); n > int64(perLimit) {
			perToken.Add(-1)
			w.Header().Set("Retry-After", strconv.Itoa(retry))
			return nil, errorf(http.StatusTooManyRequests, code, "too many %s for this token (limit %d); retry later", what, perLimit)
		}
	}
	// Once namespaces are in use, each holds at most its share, so one
	// namespace's calls leave room for the others'.
	ns, nsLimit, perNS := h.ns(r), h.opts.MaxWaitingPerNamespace, false
	if kind == holdStream {
		nsLimit = h.opts.MaxStreamsPerNamespace
	}
	if ns != "" {
		h.namespaced.Store(true)
	}
	if h.namespaced.Load() {
		if !h.nsHolds.take(ns, kind, nsLimit) {
			if perToken != nil {
				perToken.Add(-1)
			}
			w.Header().Set("Retry-After", strconv.Itoa(retry))
			return nil, errorf(http.StatusTooManyRequests, code, "too many %s in this namespace (limit %d); retry later", what, nsLimit)
		}
		perNS = true
	}
	if n := global.Add(1); n > int64(limit) {
		global.Add(-1)
		if perToken != nil {
			perToken.Add(-1)
		}
		if perNS {
			h.nsHolds.give(ns, kind)
		}
		w.Header().Set("Retry-After", strconv.Itoa(retry))
		return nil, errorf(http.StatusServiceUnavailable, code, "too many %s on this server (limit %d); retry later", what, limit)
	}
	return func() {
		global.Add(-1)
		if perToken != nil {
			perToken.Add(-1)
		}
		if perNS {
			h.nsHolds.give(ns, kind)
		}
	}, nil
}

// nsHolds counts the waiting calls, streams and submits in progress of
// each namespace holding any (a namespace holding none has no entry: the
// map stays as small as the namespaces in use).
type nsHolds struct {
	mu sync.Mutex
	m  map[string]*[holdKinds]int
}

// entry returns ns's counts, adding them if ns holds nothing; c.mu held.
func (c *nsHolds) entry(ns string) *[holdKinds]int {
	n := c.m[ns]
	if n == nil {
		if c.m == nil {
			c.m = map[string]*[holdKinds]int{}
		}
		n = &[holdKinds]int{}
		c.m[ns] = n
	}
	return n
}

// take takes a slot of kind for ns unless it holds limit already.
func (c *nsHolds) take(ns string, kind holdKind, limit int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.entry(ns)
	if n[kind] >= limit {
		if *n == ([holdKinds]int{}) {
			delete(c.m, ns)
		}
		return false
	}
	n[kind]++
	return true
}

// enter counts one more of kind for ns, whatever it holds, and returns
// how many ns held before; give gives it back.
func (c *nsHolds) enter(ns string, kind holdKind) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.entry(ns)
	n[kind]++
	return n[kind] - 1
}

// counts returns the slots of kind held per namespace (only namespaces
// holding any).
func (c *nsHolds) counts(kind holdKind) map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for ns, n := range c.m {
		if n[kind] > 0 {
			out[ns] = n[kind]
		}
	}
	return out
}

// NamespaceWaiting and NamespaceStreams return the waiting calls and the
// event streams held per namespace (as stored, "" for the default one;
// counted once namespaces are in use).
func (h *Handler) NamespaceWaiting() map[string]int { return h.nsHolds.counts(holdWaiting) }

// NamespaceStreams: see NamespaceWaiting.
func (h *Handler) NamespaceStreams() map[string]int { return h.nsHolds.counts(holdStream) }

// give gives back a slot take took.
func (c *nsHolds) give(ns string, kind holdKind) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.m[ns]
	if n[kind]--; *n == ([holdKinds]int{}) {
		delete(c.m, ns)
	}
}

// Waiting returns the number of waiting calls being served.
func (h *Handler) Waiting() int { return int(h.waiting.Load()) }

// untimedContext returns the request's context before the request
// timeout: waiting calls and streams outlive Options.RequestTimeout.
func untimedContext(r *http.Request) context.Context {
	if base, ok := r.Context().Value(untimedKey{}).(context.Context); ok {
		return base
	}
	return r.Context()
}

// addrLimiter limits failed authentications per client address, in a
// bounded map.
type addrLimiter struct {
	rate  float64 // negative: no limit
	burst int
	mu    sync.Mutex
	m     map[string]*rate.Limiter
}

// clientAddr is the key of a request's client: its IP address, or the /64
// network of an IPv6 one (which one holder gets whole). Behind a proxy it
// is the proxy's.
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return host
	}
	if ip.To4() == nil {
		return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
	}
	return ip.String()
}

// limited reports how long addr must wait before its token is looked at
// again (0: it may try now).
func (a *addrLimiter) limited(addr string, now time.Time) time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	l := a.m[addr]
	if l == nil {
		return 0
	}
	if tokens := l.TokensAt(now); tokens < 1 {
		return time.Duration((1 - tokens) / a.rate * float64(time.Second))
	}
	return 0
}

// failed records a failed authentication of addr.
func (a *addrLimiter) failed(addr string, now time.Time) {
	if a.rate < 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	l := a.m[addr]
	if l == nil {
		if a.m == nil {
			a.m = map[string]*rate.Limiter{}
		}
		if len(a.m) >= maxAuthFailAddrs {
			a.evict(now)
		}
		l = rate.NewLimiter(rate.Limit(a.rate), a.burst)
		a.m[addr] = l
	}
	l.AllowN(now, 1)
}

// evict makes room: it forgets the addresses whose limiter is full again
// (they hold nothing), and if none is, one at random.
func (a *addrLimiter) evict(now time.Time) {
	for k, l := range a.m {
		if l.TokensAt(now) >= float64(a.burst) {
			delete(a.m, k)
		}
	}
	for k := range a.m {
		if len(a.m) < maxAuthFailAddrs {
			break
		}
		delete(a.m, k)
	}
}

// retryAfter formats a wait as whole seconds for Retry-After (at least 1).
func retryAfter(d time.Duration) string {
	return fmt.Sprint(max(1, int((d+time.Second-1)/time.Second)))
}
