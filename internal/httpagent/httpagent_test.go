package httpagent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/internal/egress/egresstest"
	"github.com/drover-run/drover/internal/remotesim"
)

// guard bounds every wait on a condition so a bug fails the test instead of
// hanging it.
const guard = 10 * time.Second

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// fast retries quickly so tests do not wait on back-off.
var fast = RetryPolicy{InitialInterval: time.Millisecond, MaxInterval: 2 * time.Millisecond}

// server is an httptest server that records every call it gets.
type server struct {
	*httptest.Server
	calls    atomic.Int64
	mu       sync.Mutex
	keys     []string
	bodies   []string
	arrivals []time.Time
	release  chan struct{} // closed at cleanup: frees handlers that block
}

// newServer serves handle, which gets the 1-based number of the call.
func newServer(t *testing.T, handle func(w http.ResponseWriter, r *http.Request, n int64)) *server {
	t.Helper()
	s := &server{release: make(chan struct{})}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Read the body first: the server notices a gone client only then.
		body, _ := io.ReadAll(r.Body)
		n := s.calls.Add(1)
		s.mu.Lock()
		s.keys = append(s.keys, r.Header.Get("Idempotency-Key"))
		s.bodies = append(s.bodies, string(body))
		s.arrivals = append(s.arrivals, time.Now())
		s.mu.Unlock()
		handle(w, r, n)
	}))
	t.Cleanup(s.Close)
	t.Cleanup(func() { close(s.release) }) // runs before Close
	return s
}

func (s *server) hostport() string { return strings.TrimPrefix(s.URL, "http://") }

func (s *server) recorded() ([]string, []time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.keys...), append([]time.Time(nil), s.arrivals...)
}

// hang blocks until the caller goes away (or the test ends).
func (s *server) hang(r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-s.release:
	}
}

func reply(code int, body string) func(http.ResponseWriter, *http.Request, int64) {
	return func(w http.ResponseWriter, _ *http.Request, _ int64) {
		w.WriteHeader(code)
		_, _ = io.WriteString(w, body)
	}
}

func newCaller(t *testing.T, opts Options) *Caller {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quiet
	}
	if opts.Egress == nil {
		opts.Egress = egresstest.Open(t, "127.0.0.1") // where the test servers listen
	}
	c := New(opts)
	t.Cleanup(c.CloseIdleConnections)
	return c
}

func deadline(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond until it holds or guard passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(guard)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func wantStatus(t *testing.T, err error, code int) {
	t.Helper()
	_ = statusOf(t, err, code)
}

// statusOf is wantStatus returning the error, for checks of its details.
func statusOf(t *testing.T, err error, code int) *StatusError {
	t.Helper()
	var se *StatusError
	if !errors.As(err, &se) || se.Code != code {
		t.Fatalf("err = %v, want HTTP %d", err, code)
	}
	return se
}

func TestIdempotencyKeyOnEveryTryAndRetryToSuccess(t *testing.T) {
	t.Parallel()
	var gotHeader, gotType atomic.Value
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		if n < 3 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		gotHeader.Store(r.Header.Get("X-Tenant"))
		gotType.Store(r.Header.Get("Content-Type"))
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, ` {"ok":true} `)
	})
	c := newCaller(t, Options{})
	out, err := c.Do(deadline(t, guard), &Request{
		Method: http.MethodPost, URL: s.URL + "/charge", Body: []byte(`{"amount":5}`),
		Header:         http.Header{"X-Tenant": {"t1"}, "Idempotency-Key": {"overridden"}},
		IdempotencyKey: "task-1/0", Retry: fast,
	})
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != `{"ok":true}` {
		t.Fatalf("out = %s", out)
	}
	keys, _ := s.recorded()
	if want := []string{"task-1/0", "task-1/0", "task-1/0"}; fmt.Sprint(keys) != fmt.Sprint(want) {
		t.Fatalf("Idempotency-Key per try = %q, want %q", keys, want)
	}
	s.mu.Lock()
	bodies := fmt.Sprint(s.bodies)
	s.mu.Unlock()
	if want := `[{"amount":5} {"amount":5} {"amount":5}]`; bodies != want {
		t.Fatalf("bodies = %s, want %s", bodies, want)
	}
	if gotHeader.Load() != "t1" || gotType.Load() != "application/json" {
		t.Fatalf("X-Tenant = %v, Content-Type = %v", gotHeader.Load(), gotType.Load())
	}
}

func TestRemotesimRetriesWithoutDuplicateEffects(t *testing.T) {
	t.Parallel()
	svc := remotesim.New(remotesim.Config{TransientRate: 0.5, Seed: 7})
	ts := httptest.NewServer(svc.Handler())
	t.Cleanup(ts.Close)
	t.Cleanup(svc.Close)
	c := newCaller(t, Options{Breaker: BreakerPolicy{Failures: 1000}})
	ctx := deadline(t, guard)

	const n = 40
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			_, err := c.Do(ctx, &Request{
				Method: http.MethodPost, URL: ts.URL + "/v1/charge", IdempotencyKey: fmt.Sprintf("k-%d", i),
				Body: fmt.Appendf(nil, `{"order_id":"o-%d","amount":10}`, i), Retry: fast,
			})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	st := svc.Stats()
	if st.Transient == 0 || st.Applied != n || st.DuplicateEffects != 0 {
		t.Fatalf("stats = %+v, want transient failures, %d applied once each", st, n)
	}
	// A later Do with the same key is answered from the service's store.
	out, err := c.Do(ctx, &Request{Method: http.MethodPost, URL: ts.URL + "/v1/charge", IdempotencyKey: "k-3",
		Body: []byte(`{"order_id":"o-3","amount":10}`), Retry: fast})
	if err != nil {
		t.Fatal(err)
	}
	var resp remotesim.Response
	if err := json.Unmarshal(out, &resp); err != nil || !resp.Deduplicated || svc.Applied("charge", "o-3") != 1 {
		t.Fatalf("out = %s (%v), applied = %d", out, err, svc.Applied("charge", "o-3"))
	}
}

func TestPermanentStatusReturnsAtOnce(t *testing.T) {
	t.Parallel()
	s := newServer(t, reply(http.StatusUnprocessableEntity, `{"error":"card declined"}`))
	c := newCaller(t, Options{Breaker: BreakerPolicy{Failures: 1}})
	_, err := c.Do(deadline(t, guard), &Request{Method: http.MethodPost, URL: s.URL + "/charge", Retry: fast})
	if !drover.IsPermanent(err) {
		t.Fatalf("err = %v, want permanent", err)
	}
	se := statusOf(t, err, http.StatusUnprocessableEntity)
	if se.Body != `{"error":"card declined"}` || se.Method != "POST" {
		t.Fatalf("status error = %+v", se)
	}
	if n := s.calls.Load(); n != 1 {
		t.Fatalf("calls = %d, want 1", n)
	}
	// Permanent failures are the service answering: the breaker stays closed.
	if st := c.BreakerState(s.hostport()); st != "closed" {
		t.Fatalf("breaker = %s", st)
	}
}

func TestStatusClassification(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name          string
		code          int
		policy        StatusPolicy
		wantCalls     int64
		wantPermanent bool
	}{
		{"500 transient", 500, StatusPolicy{}, 3, false},
		{"408 transient", 408, StatusPolicy{}, 3, false},
		{"425 transient", 425, StatusPolicy{}, 3, false},
		{"429 transient", 429, StatusPolicy{}, 3, false},
		{"400 permanent", 400, StatusPolicy{}, 1, true},
		{"409 permanent", 409, StatusPolicy{}, 1, true},
		{"302 permanent", 302, StatusPolicy{}, 1, true},
		{"404 made transient", 404, StatusPolicy{Transient: []int{404}}, 3, false},
		{"503 made permanent", 503, StatusPolicy{Permanent: []int{503}}, 1, true},
		{"202 made transient", 202, StatusPolicy{Transient: []int{202}}, 3, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newServer(t, reply(tc.code, "no"))
			c := newCaller(t, Options{})
			r := &Request{Method: http.MethodGet, URL: s.URL, Status: tc.policy,
				Retry: RetryPolicy{InitialInterval: time.Millisecond, MaxTries: 3}}
			_, err := c.Do(deadline(t, guard), r)
			wantStatus(t, err, tc.code)
			if drover.IsPermanent(err) != tc.wantPermanent {
				t.Fatalf("permanent = %v, want %v: %v", drover.IsPermanent(err), tc.wantPermanent, err)
			}
			if n := s.calls.Load(); n != tc.wantCalls {
				t.Fatalf("calls = %d, want %d", n, tc.wantCalls)
			}
		})
	}
}

func TestRedirectIsNotFollowed(t *testing.T) {
	t.Parallel()
	var other atomic.Int64
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, _ int64) {
		if r.URL.Path == "/other" {
			other.Add(1)
			return
		}
		http.Redirect(w, r, "/other", http.StatusFound)
	})
	c := newCaller(t, Options{})
	_, err := c.Do(deadline(t, guard), &Request{Method: http.MethodPost, URL: s.URL + "/start", IdempotencyKey: "k"})
	if !drover.IsPermanent(err) {
		t.Fatalf("err = %v, want permanent", err)
	}
	wantStatus(t, err, http.StatusFound)
	if other.Load() != 0 {
		t.Fatal("redirect was followed")
	}
}

func TestDeadlineCutsHangingCall(t *testing.T) {
	t.Parallel()
	cancelled := make(chan struct{}, 1)
	var s *server
	s = newServer(t, func(w http.ResponseWriter, r *http.Request, _ int64) {
		s.hang(r)
		if r.Context().Err() != nil {
			cancelled <- struct{}{}
		}
	})
	c := newCaller(t, Options{Breaker: BreakerPolicy{Failures: 1}})
	start := time.Now()
	_, err := c.Do(deadline(t, 300*time.Millisecond), &Request{Method: http.MethodPost, URL: s.URL, Body: []byte("x"), Retry: fast})
	if !errors.Is(err, context.DeadlineExceeded) || drover.IsPermanent(err) {
		t.Fatalf("err = %v, want a transient deadline error", err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("Do returned after %s", el)
	}
	select {
	case <-cancelled:
	case <-time.After(guard):
		t.Fatal("the in-flight request was not cancelled")
	}
	if n := s.calls.Load(); n != 1 {
		t.Fatalf("calls = %d, want 1", n)
	}
	// Our deadline is not the service failing.
	if st := c.BreakerState(s.hostport()); st != "closed" {
		t.Fatalf("breaker = %s after a call cut by the deadline", st)
	}
}

func TestNoTryStartsAfterDeadline(t *testing.T) {
	t.Parallel()
	s := newServer(t, reply(http.StatusServiceUnavailable, "busy"))
	c := newCaller(t, Options{Breaker: BreakerPolicy{Failures: 1000}})
	ctx := deadline(t, 400*time.Millisecond)
	dl, _ := ctx.Deadline()
	// When each try starts: the client asks for a connection right after
	// Do's check of the context, in the same goroutine.
	var mu sync.Mutex
	var starts []time.Time
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GetConn: func(string) {
		mu.Lock()
		starts = append(starts, time.Now())
		mu.Unlock()
	}})
	_, err := c.Do(ctx, &Request{Method: http.MethodGet, URL: s.URL,
		Retry: RetryPolicy{InitialInterval: 30 * time.Millisecond, MaxInterval: 30 * time.Millisecond}})
	wantStatus(t, err, http.StatusServiceUnavailable)
	if drover.IsPermanent(err) {
		t.Fatalf("exhausted transient failure marked permanent: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(starts) < 2 {
		t.Fatalf("only %d tries", len(starts))
	}
	// Do checks the context before each try, and a request whose context
	// is over is not sent: a try starts before the deadline (give or take
	// the moment between the check and the connection's request).
	const slack = 20 * time.Millisecond
	for i, a := range starts {
		if a.Sub(dl) > slack {
			t.Fatalf("try %d started %s after the deadline", i+1, a.Sub(dl))
		}
	}

	// A context already over makes no call at all.
	done, cancel := context.WithCancel(t.Context())
	cancel()
	before := s.calls.Load()
	if _, err := c.Do(done, &Request{Method: http.MethodGet, URL: s.URL}); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	if s.calls.Load() != before {
		t.Fatal("a call was made with a context already over")
	}
}

func TestGivesUpWhenNextTryWouldPassDeadline(t *testing.T) {
	t.Parallel()
	s := newServer(t, reply(http.StatusBadGateway, "down"))
	c := newCaller(t, Options{})
	ctx := deadline(t, 2*time.Second)
	dl, _ := ctx.Deadline()
	_, err := c.Do(ctx, &Request{Method: http.MethodGet, URL: s.URL,
		Retry: RetryPolicy{InitialInterval: time.Minute, MaxInterval: time.Minute}})
	wantStatus(t, err, http.StatusBadGateway)
	if drover.IsPermanent(err) || !strings.Contains(err.Error(), "after the deadline") {
		t.Fatalf("err = %v", err)
	}
	if !time.Now().Before(dl) {
		t.Fatal("Do waited for the deadline instead of giving up at once")
	}
	if n := s.calls.Load(); n != 1 {
		t.Fatalf("calls = %d", n)
	}
}

func TestBreakerOpensPerHost(t *testing.T) {
	t.Parallel()
	bad := newServer(t, reply(http.StatusInternalServerError, "boom"))
	good := newServer(t, reply(http.StatusOK, `"fine"`))
	c := newCaller(t, Options{Breaker: BreakerPolicy{Failures: 3, OpenFor: time.Hour}})
	ctx := deadline(t, guard)
	r := &Request{Method: http.MethodGet, URL: bad.URL, Retry: RetryPolicy{InitialInterval: time.Millisecond, MaxTries: 3}}
	if _, err := c.Do(ctx, r); err == nil {
		t.Fatal("no error")
	}
	if st := c.BreakerState(bad.hostport()); st != "open" {
		t.Fatalf("breaker of the failing host = %s after 3 failures", st)
	}
	if st := c.BreakerState(bad.URL + "/any/path"); st != "open" {
		t.Fatalf("BreakerState by URL = %s", st)
	}
	_, err := c.Do(ctx, r)
	if !errors.Is(err, ErrBreakerOpen) || drover.IsPermanent(err) {
		t.Fatalf("err = %v, want a transient breaker-open error", err)
	}
	if n := bad.calls.Load(); n != 3 {
		t.Fatalf("calls = %d: an open breaker let calls through", n)
	}
	out, err := c.Do(ctx, &Request{Method: http.MethodGet, URL: good.URL})
	if err != nil || string(out) != `"fine"` {
		t.Fatalf("other host: %s, %v", out, err)
	}
	if st := c.BreakerState(good.hostport()); st != "closed" {
		t.Fatalf("breaker of the healthy host = %s", st)
	}
	// Hosts reports both, each with its breaker and its recent requests:
	// the refused call was never sent.
	want := []HostHealth{
		{Host: "http://" + bad.hostport(), Breaker: "open", Calls: 3, Failures: 3},
		{Host: "http://" + good.hostport(), Breaker: "closed", Calls: 1},
	}
	slices.SortFunc(want, func(a, b HostHealth) int { return strings.Compare(a.Host, b.Host) })
	if got := c.Hosts(); !slices.Equal(got, want) {
		t.Fatalf("Hosts() = %+v, want %+v", got, want)
	}
}

func TestBreakerOpenIsRetriedUntilHalfOpen(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(w http.ResponseWriter, _ *http.Request, n int64) {
		if n == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, `{"n":2}`)
	})
	c := newCaller(t, Options{Breaker: BreakerPolicy{Failures: 1, OpenFor: 100 * time.Millisecond}})
	var states []string
	c.log = slog.New(&stateRecorder{states: &states, mu: &sync.Mutex{}})
	out, err := c.Do(deadline(t, guard), &Request{Method: http.MethodGet, URL: s.URL, Retry: fast})
	if err != nil || string(out) != `{"n":2}` {
		t.Fatalf("out = %s, err = %v", out, err)
	}
	if n := s.calls.Load(); n != 2 {
		t.Fatalf("calls = %d, want 2 (an open breaker refuses without calling)", n)
	}
	// Half-open closes after max(1, MaxConcurrentPerHost/8) = 2 trial successes.
	if _, err := c.Do(deadline(t, guard), &Request{Method: http.MethodGet, URL: s.URL, Retry: fast}); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(states); got != "[closed>open open>half-open half-open>closed]" {
		t.Fatalf("breaker transitions = %s", got)
	}
}

// stateRecorder is a slog handler keeping breaker transitions.
type stateRecorder struct {
	mu     *sync.Mutex
	states *[]string
}

func (h *stateRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (h *stateRecorder) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *stateRecorder) WithGroup(string) slog.Handler            { return h }
func (h *stateRecorder) Handle(_ context.Context, r slog.Record) error {
	var from, to string
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "from":
			from = a.Value.String()
		case "to":
			to = a.Value.String()
		}
		return true
	})
	if from != "" {
		h.mu.Lock()
		*h.states = append(*h.states, from+">"+to)
		h.mu.Unlock()
	}
	return nil
}

func TestConcurrencyLimitPerHost(t *testing.T) {
	t.Parallel()
	const limit, callers = 3, 10
	var active, peak atomic.Int64
	gate := make(chan struct{})
	var openGate sync.Once
	s := newServer(t, func(w http.ResponseWriter, _ *http.Request, _ int64) {
		n := active.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		<-gate
		active.Add(-1)
		_, _ = io.WriteString(w, "{}")
	})
	// Cleanups run last first: this one before the server's Close, which
	// waits for handlers, also when the test fails early.
	t.Cleanup(func() { openGate.Do(func() { close(gate) }) })
	other := newServer(t, reply(http.StatusOK, "{}"))
	c := newCaller(t, Options{MaxConcurrentPerHost: limit})
	ctx := deadline(t, guard)
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for range callers {
		wg.Go(func() {
			_, err := c.Do(ctx, &Request{Method: http.MethodGet, URL: s.URL})
			errs <- err
		})
	}
	// Every caller is either in the handler or waiting for a slot.
	eventually(t, "3 calls in flight and 7 waiting", func() bool {
		return active.Load() == limit && c.waiting.Load() == callers-limit
	})
	// Another host has its own slots.
	if _, err := c.Do(ctx, &Request{Method: http.MethodGet, URL: other.URL}); err != nil {
		t.Fatal(err)
	}
	openGate.Do(func() { close(gate) })
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if p := peak.Load(); p != limit {
		t.Fatalf("peak concurrent calls = %d, limit %d", p, limit)
	}
	if n := s.calls.Load(); n != callers {
		t.Fatalf("calls = %d", n)
	}
}

func TestSlotWaitEndsWithContext(t *testing.T) {
	t.Parallel()
	var s *server
	s = newServer(t, func(w http.ResponseWriter, r *http.Request, _ int64) { s.hang(r) })
	c := newCaller(t, Options{MaxConcurrentPerHost: 1})
	holder := make(chan error, 1)
	go func() {
		_, err := c.Do(deadline(t, guard), &Request{Method: http.MethodGet, URL: s.URL})
		holder <- err
	}()
	eventually(t, "the first call in flight", func() bool { return s.calls.Load() == 1 })
	_, err := c.Do(deadline(t, 200*time.Millisecond), &Request{Method: http.MethodGet, URL: s.URL})
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "waiting for a call slot") {
		t.Fatalf("err = %v", err)
	}
	if n := s.calls.Load(); n != 1 {
		t.Fatalf("calls = %d: the limit let a second call through", n)
	}
}

func TestRetryAfterHonoured(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(w http.ResponseWriter, _ *http.Request, n int64) {
		if n == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		_, _ = io.WriteString(w, "{}")
	})
	c := newCaller(t, Options{})
	if _, err := c.Do(deadline(t, guard), &Request{Method: http.MethodGet, URL: s.URL, Retry: fast}); err != nil {
		t.Fatal(err)
	}
	_, arrivals := s.recorded()
	if len(arrivals) != 2 {
		t.Fatalf("tries = %d", len(arrivals))
	}
	if gap := arrivals[1].Sub(arrivals[0]); gap < time.Second {
		t.Fatalf("retried %s after a Retry-After of 1s", gap)
	}
}

func TestRetryAfterPastDeadlineGivesUp(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(w http.ResponseWriter, _ *http.Request, _ int64) {
		w.Header().Set("Retry-After", "30")
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	c := newCaller(t, Options{})
	ctx := deadline(t, 2*time.Second)
	dl, _ := ctx.Deadline()
	_, err := c.Do(ctx, &Request{Method: http.MethodGet, URL: s.URL, Retry: fast})
	se := statusOf(t, err, http.StatusServiceUnavailable)
	if se.RetryAfter != 30*time.Second || drover.IsPermanent(err) {
		t.Fatalf("err = %v", err)
	}
	if !time.Now().Before(dl) || s.calls.Load() != 1 {
		t.Fatalf("calls = %d; Do should give up at once", s.calls.Load())
	}
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 22, 13, 0, 0, 0, time.UTC)
	for v, want := range map[string]time.Duration{
		"":                              0,
		"3":                             3 * time.Second,
		" 120 ":                         2 * time.Minute,
		"-1":                            0,
		"soon":                          0,
		"Sun, 22 Nov 2026 13:00:05 GMT": 5 * time.Second,
		"Sun, 22 Nov 2026 12:59:00 GMT": 0,
	} {
		if got := parseRetryAfter(v, now); got != want {
			t.Errorf("parseRetryAfter(%q) = %s, want %s", v, got, want)
		}
	}
}

func TestResponseSizeCap(t *testing.T) {
	t.Parallel()
	const limit = 100
	exact := `"` + strings.Repeat("a", limit-2) + `"`
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, _ int64) {
		switch r.URL.Path {
		case "/exact":
			_, _ = io.WriteString(w, exact)
		case "/over":
			_, _ = io.WriteString(w, exact+" ")
		case "/chunked": // no Content-Length: the cap must hold while reading
			_, _ = io.WriteString(w, exact[:50])
			w.(http.Flusher).Flush()
			_, _ = io.WriteString(w, exact[50:]+"  ")
		}
	})
	c := newCaller(t, Options{MaxResponseBytes: limit})
	ctx := deadline(t, guard)
	out, err := c.Do(ctx, &Request{Method: http.MethodGet, URL: s.URL + "/exact"})
	if err != nil || string(out) != exact {
		t.Fatalf("at the limit: %s, %v", out, err)
	}
	for _, path := range []string{"/over", "/chunked"} {
		_, err := c.Do(ctx, &Request{Method: http.MethodGet, URL: s.URL + path, Retry: fast})
		if !errors.Is(err, ErrResponseTooLarge) || !drover.IsPermanent(err) {
			t.Fatalf("%s: err = %v, want permanent ErrResponseTooLarge", path, err)
		}
	}
	if n := s.calls.Load(); n != 3 {
		t.Fatalf("calls = %d", n)
	}
}

func TestOutputIsAlwaysJSON(t *testing.T) {
	t.Parallel()
	bodies := map[string]string{
		"/json":  `{"id": 7, "tags": ["a"]}`,
		"/num":   "42\n",
		"/text":  "OK \"done\"\nline 2",
		"/empty": "",
		"/blank": " \n",
		"/html":  "<p>hi</p>",
	}
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, _ int64) {
		_, _ = io.WriteString(w, bodies[r.URL.Path])
	})
	want := map[string]string{
		"/json":  `{"id": 7, "tags": ["a"]}`,
		"/num":   "42",
		"/text":  `"OK \"done\"\nline 2"`,
		"/empty": "null",
		"/blank": "null",
		"/html":  `"\u003cp\u003ehi\u003c/p\u003e"`,
	}
	c := newCaller(t, Options{})
	for path, w := range want {
		out, err := c.Do(deadline(t, guard), &Request{Method: http.MethodGet, URL: s.URL + path})
		if err != nil {
			t.Fatal(err)
		}
		if string(out) != w || !json.Valid(out) {
			t.Errorf("%s: out = %s, want %s", path, out, w)
		}
	}
}

func TestErrorsAndLogsHideSecrets(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 1000)
	s := newServer(t, reply(http.StatusInternalServerError, long))
	var logs bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &mu}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c := newCaller(t, Options{Logger: log})
	raw := strings.Replace(s.URL, "http://", "http://alice:pw-secret@", 1) + "/pay?token=q-secret&page=2#frag"
	_, err := c.Do(deadline(t, guard), &Request{Method: http.MethodPost, URL: raw,
		Header: http.Header{"Authorization": {"Bearer hdr-secret"}},
		Retry:  RetryPolicy{InitialInterval: time.Millisecond, MaxTries: 2}})
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	wantURL := s.URL + "/pay?token=REDACTED&page=REDACTED"
	if !strings.Contains(msg, "POST "+wantURL+": HTTP 500: "+strings.Repeat("x", 200)) ||
		strings.Contains(msg, strings.Repeat("x", 201)) {
		t.Fatalf("error = %.400s", msg)
	}
	// A connection error: url.Error would repeat the raw URL.
	s.Close()
	_, err = c.Do(deadline(t, guard), &Request{Method: http.MethodGet, URL: raw, Retry: RetryPolicy{MaxTries: 1}})
	if err == nil || drover.IsPermanent(err) || !strings.Contains(err.Error(), "GET "+wantURL) {
		t.Fatalf("connection error = %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	all := msg + "\n" + err.Error() + "\n" + logs.String()
	if !strings.Contains(logs.String(), "giving up") {
		t.Fatalf("nothing logged: %s", logs.String())
	}
	for _, secret := range []string{"pw-secret", "alice", "q-secret", "hdr-secret", "frag"} {
		if strings.Contains(all, secret) {
			t.Fatalf("%q leaked:\n%s", secret, all)
		}
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func TestBadRequestIsPermanentWithoutCall(t *testing.T) {
	t.Parallel()
	s := newServer(t, reply(http.StatusOK, "{}"))
	c := newCaller(t, Options{})
	cases := map[string]*Request{
		"nil request":  nil,
		"bad method":   {Method: "post", URL: s.URL},
		"TRACE":        {Method: "TRACE", URL: s.URL},
		"bad URL":      {Method: "GET", URL: "http://[::1"},
		"ftp scheme":   {Method: "GET", URL: "ftp://example.com/x"},
		"relative URL": {Method: "GET", URL: "/just/a/path"},
		"bad status":   {Method: "GET", URL: s.URL, Status: StatusPolicy{Transient: []int{700}}},
	}
	for name, r := range cases {
		_, err := c.Do(deadline(t, guard), r)
		if !drover.IsPermanent(err) {
			t.Errorf("%s: err = %v, want permanent", name, err)
		}
	}
	if n := s.calls.Load(); n != 0 {
		t.Fatalf("calls = %d", n)
	}
}

func TestValidateMethod(t *testing.T) {
	t.Parallel()
	for _, m := range []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"} {
		if err := ValidateMethod(m); err != nil {
			t.Errorf("%s: %v", m, err)
		}
	}
	for m, want := range map[string]string{"post": `must be upper case: "POST"`, "CONNECT": "is not one of", "": "is not one of"} {
		if err := ValidateMethod(m); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err = %v, want %q", m, err, want)
		}
	}
}

func TestValidateStatusPolicy(t *testing.T) {
	t.Parallel()
	if err := ValidateStatusPolicy(StatusPolicy{Transient: []int{404, 202}, Permanent: []int{503, 100, 599}}); err != nil {
		t.Fatal(err)
	}
	err := ValidateStatusPolicy(StatusPolicy{Transient: []int{99, 404, 404}, Permanent: []int{404, 600}})
	for _, want := range []string{"transient status 99", "permanent status 600", "status 404 is listed as both"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want %q", err, want)
		}
	}
	if strings.Count(err.Error(), "404") != 1 {
		t.Errorf("404 reported more than once: %v", err)
	}
}

func TestHostKey(t *testing.T) {
	t.Parallel()
	c := newCaller(t, Options{Breaker: BreakerPolicy{Failures: 1, OpenFor: time.Hour}})
	host := func(u string) *host {
		h := c.hosts.acquire(hostKey(mustParse(t, u)))
		c.hosts.release(h)
		return h
	}
	h := host("HTTPS://Example.COM/x")
	if h != host("https://example.com:443/y?z=1") {
		t.Fatal("same host, different keys")
	}
	if h == host("http://example.com/") {
		t.Fatal("http and https share a key")
	}
	if _, err := h.cb.Execute(func() ([]byte, error) { return nil, failed(transient, errors.New("x")) }); err == nil {
		t.Fatal("no error")
	}
	if st := c.BreakerState("example.com:443"); st != "open" {
		t.Fatalf("BreakerState(host:port) = %s", st)
	}
	if st := c.BreakerState("https://example.com"); st != "open" {
		t.Fatalf("BreakerState(URL) = %s", st)
	}
	if st := c.BreakerState("example.com:80"); st != "closed" {
		t.Fatalf("BreakerState(http host) = %s", st)
	}
}

func mustParse(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
