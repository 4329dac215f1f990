package httpapi

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/convoy"
	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/clock"
	"github.com/drover-run/drover/store"
)

const submit2Tok = "second-submit-token-0123456789"

// waiter is a waiting call in flight against a real server.
type waiter struct {
	cancel context.CancelFunc
	done   chan int // its status, once answered
}

// startWait sends a waiting POST and returns at once.
func startWait(t *testing.T, srv *httptest.Server, path, token, body string) *waiter {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &waiter{cancel: cancel, done: make(chan int, 1)}
	req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	go func() {
		resp, err := srv.Client().Do(req)
		if err != nil {
			w.done <- -1
			return
		}
		resp.Body.Close()
		w.done <- resp.StatusCode
	}()
	t.Cleanup(cancel)
	return w
}

// waitCount waits until the handler serves n waiting calls.
func waitCount(t *testing.T, what string, get func() int, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); get() != n; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d, want %d", what, get(), n)
		}
	}
}

// Waiting calls (agent polls, session accepts and receives with a wait)
// are capped per token (429) and for the server (503), with Retry-After;
// calls without a wait are not counted; a slot is free again when its
// call ends.
func TestWaitingCaps(t *testing.T) {
	drivers(t, func(t *testing.T, open func(t *testing.T) store.Driver) {
		e, _ := newAgentEnv(t, open(t), Options{MaxWaiting: 3, MaxWaitingPerToken: 2,
			Tokens: append(append([]Token(nil), testTokens...), Token{Secret: submit2Tok, Scopes: []Scope{ScopeSubmit}})})
		srv := httptest.NewServer(e.h)
		t.Cleanup(srv.Close)
		e.do("POST", "/v1/queues/q/messages", submitTok, `{"session_id":"s","body":1,"not_before":"2100-01-01T00:00:00Z"}`).must(t, 201)
		const accept = "/v1/queues/q/sessions:accept"
		a1 := startWait(t, srv, accept, submitTok, `{"wait_ms":60000}`)
		a2 := startWait(t, srv, "/v1/agents/worker/poll", agentTok, `{"wait_ms":60000}`)
		a3 := startWait(t, srv, accept, submitTok, `{"wait_ms":60000}`)
		waitCount(t, "waiting calls", e.h.Waiting, 3)

		// The submit token holds its two: a third waiting call is 429.
		for _, c := range []struct{ path, body string }{
			{accept, `{"wait_ms":1000}`},
			{"/v1/queues/q/sessions/s/receive", `{"lock_token":"1.` + strings.Repeat("0", 32) + `","wait_ms":1000}`},
		} {
			r := e.do("POST", c.path, submitTok, c.body).mustError(t, 429, "too_many_waiting")
			if r.header.Get("Retry-After") == "" || !strings.Contains(r.errMsg(), "for this token (limit 2)") {
				t.Fatalf("%s: %s %v", c.path, r.body, r.header)
			}
		}
		// Without a wait the call is not held back.
		e.do("POST", accept, submitTok, `{"wait_ms":0}`).must(t, 200)
		// Another token has its own share, but the server holds 3.
		r := e.do("POST", accept, submit2Tok, `{"wait_ms":1000}`).mustError(t, 503, "too_many_waiting")
		if r.header.Get("Retry-After") == "" || !strings.Contains(r.errMsg(), "on this server (limit 3)") {
			t.Fatalf("global cap: %s %v", r.body, r.header)
		}
		// A call that ends frees its slot for its token and the server.
		a1.cancel()
		<-a1.done
		waitCount(t, "waiting calls", e.h.Waiting, 2)
		a4 := startWait(t, srv, accept, submitTok, `{"wait_ms":60000}`)
		waitCount(t, "waiting calls", e.h.Waiting, 3)
		for _, w := range []*waiter{a2, a3, a4} {
			w.cancel()
			<-w.done
		}
		waitCount(t, "waiting calls", e.h.Waiting, 0)
	})
}

// Event streams are capped per token (429) as well as for the server
// (503).
func TestStreamCapPerToken(t *testing.T) {
	e := newEnv(t, testutilSQLite(t), Options{MaxStreams: 3, MaxStreamsPerToken: 2,
		Tokens: append(append([]Token(nil), testTokens...), Token{Secret: submit2Tok, Scopes: []Scope{ScopeSubmit}})})
	srv := httptest.NewServer(e.h)
	t.Cleanup(srv.Close)
	s1 := openStream(t, srv, "/v1/events", submitTok, "")
	openStream(t, srv, "/v1/events", submitTok, "")
	_, r := tryStream(t, srv, "/v1/events", submitTok, "")
	if r == nil {
		t.Fatal("a third stream of one token was served")
	}
	r.mustError(t, 429, "too_many_streams")
	if r.header.Get("Retry-After") == "" {
		t.Fatal("429 without Retry-After")
	}
	openStream(t, srv, "/v1/events", submit2Tok, "")
	_, r = tryStream(t, srv, "/v1/events", operatorTok, "")
	if r == nil {
		t.Fatal("a fourth stream was served")
	}
	r.mustError(t, 503, "too_many_streams")
	s1.close()
	waitCount(t, "open streams", e.h.OpenStreams, 2)
	openStream(t, srv, "/v1/events", submitTok, "")
}

// Unknown tokens are limited per client address: past the burst the
// address gets 429 before its token is looked at (even a good one), other
// addresses are not affected, and the limit refills with time.
func TestAuthFailureLimit(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	e := newEnv(t, testutilSQLite(t), Options{AuthFailRate: 1, AuthFailBurst: 3, Clock: clk})
	from := func(addr, token string) *response {
		req := newReq("GET", "/v1/queues", "")
		req.RemoteAddr = addr
		req.Header.Set("Authorization", "Bearer "+token)
		return e.serve(req)
	}
	const a, b = "198.51.100.7:40000", "198.51.100.8:40000"
	for range 3 {
		from(a, "guess-0123456789abcdef").mustError(t, 401, "unauthorized")
	}
	r := from(a, submitTok).mustError(t, 429, "rate_limited")
	if r.header.Get("Retry-After") != "1" || !strings.Contains(r.errMsg(), "unknown tokens from this address") {
		t.Fatalf("429: %s %v", r.body, r.header)
	}
	from("198.51.100.7:40001", "guess-0123456789abcdef").mustError(t, 429, "rate_limited") // another port: the same client
	from(b, submitTok).must(t, 200)
	clk.Advance(time.Second)
	from(a, submitTok).must(t, 200)
	from(a, "guess-0123456789abcdef").mustError(t, 401, "unauthorized")
	from(a, "guess-0123456789abcdef").mustError(t, 429, "rate_limited")
	// IPv6: one /64 is one client.
	for range 3 {
		from("[2001:db8:1:2::1]:40000", "guess-0123456789abcdef").mustError(t, 401, "unauthorized")
	}
	from("[2001:db8:1:2:ffff::9]:40000", submitTok).mustError(t, 429, "rate_limited")
	from("[2001:db8:1:3::1]:40000", submitTok).must(t, 200)
}

// The addresses remembered are bounded.
func TestAuthFailureLimitBounded(t *testing.T) {
	a := addrLimiter{rate: 1, burst: 2}
	now := time.Unix(1_700_000_000, 0)
	for i := range maxAuthFailAddrs + 100 {
		a.failed(strconv.Itoa(i), now)
		a.failed(strconv.Itoa(i), now)
	}
	if n := len(a.m); n > maxAuthFailAddrs {
		t.Fatalf("%d addresses remembered, at most %d", n, maxAuthFailAddrs)
	}
	// The newest one is limited still.
	if a.limited(strconv.Itoa(maxAuthFailAddrs+99), now) == 0 {
		t.Fatal("the last address is not limited")
	}
	// Once the limiters have refilled, they are forgotten first.
	later := now.Add(time.Hour)
	a.failed("new", later)
	if n := len(a.m); n != 1 {
		t.Fatalf("%d addresses remembered after the others refilled, want 1", n)
	}
}

// txCounter counts the write transactions run through a driver.
type txCounter struct {
	store.Driver
	n atomic.Int64
}

func (c *txCounter) InTx(ctx context.Context, fn func(ctx context.Context, x store.Executor) error) error {
	c.n.Add(1)
	return c.Driver.InTx(ctx, fn)
}

// Accepts waiting on a queue with nothing available run no write
// transaction: each look is a cheap read (store.SessionAvailable) until a
// session is ready. (The queue client polls every 10ms here, and without
// notifications: 20 waiters for 500ms would otherwise run about 1000.)
func TestIdleAcceptsWriteNothing(t *testing.T) {
	drivers(t, func(t *testing.T, open func(t *testing.T) store.Driver) {
		drv := open(t)
		e := newEnv(t, drv, Options{})
		counted := &txCounter{Driver: drv}
		q, err := convoy.New(convoy.Config{Store: counted, PollInterval: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		h, err := New(e.d, q, Options{Tokens: testTokens, Rate: -1, AuthFailRate: -1})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		t.Cleanup(h.CloseStreams)
		e.do("POST", "/v1/queues/q/messages", submitTok, `{"session_id":"later","body":1,"not_before":"2100-01-01T00:00:00Z"}`).must(t, 201)

		const n = 20
		before := counted.n.Load()
		var ws []*waiter
		for range n {
			ws = append(ws, startWait(t, srv, "/v1/queues/q/sessions:accept", submitTok, `{"wait_ms":500}`))
		}
		waitCount(t, "waiting accepts", h.Waiting, n)
		for _, w := range ws {
			if status := <-w.done; status != 200 {
				t.Fatalf("accept: %d", status)
			}
		}
		if writes := counted.n.Load() - before; writes != 0 {
			t.Fatalf("%d idle accepts ran %d write transactions; want 0", n, writes)
		}
		// A session that becomes available is accepted, with a write.
		w := startWait(t, srv, "/v1/queues/q/sessions:accept", submitTok, `{"wait_ms":20000}`)
		waitCount(t, "waiting accepts", h.Waiting, 1)
		e.do("POST", "/v1/queues/q/messages", submitTok, `{"session_id":"now","body":2}`).must(t, 201)
		if status := <-w.done; status != 200 || counted.n.Load() == before {
			t.Fatalf("accept of an available session: %d, %d writes", status, counted.n.Load()-before)
		}
	})
}

// TestInFlightQuotaPerToken: a token holding MaxInFlightPerToken tasks
// not yet final gets 429 quota_exceeded for a new one, naming the quota;
// submitting an existing ID again is served; another token is not
// affected; once one of its tasks is final the token submits again. The
// store records the token's name with each task, never the secret.
func TestInFlightQuotaPerToken(t *testing.T) {
	drivers(t, func(t *testing.T, open func(t *testing.T) store.Driver) {
		const ciTok = "ci-token-with-a-quota-0123456789"
		tokens := append([]Token{{Secret: ciTok, Scopes: []Scope{ScopeSubmit}, Name: "ci"}}, testTokens...)
		e := newEnv(t, open(t), Options{Tokens: tokens, MaxInFlightPerToken: 3})
		for i := range 3 {
			e.do("POST", "/v1/tasks", ciTok, `{"workflow":"external","id":"q-`+itoa(int64(i))+`"}`).must(t, 201)
		}
		r := e.do("POST", "/v1/tasks", ciTok, `{"workflow":"external","id":"q-3"}`).mustError(t, 429, "quota_exceeded")
		if !strings.Contains(r.errMsg(), "max-in-flight-per-token is 3") || !strings.Contains(r.errMsg(), "3 tasks in flight") {
			t.Errorf("the error does not name the quota: %s", r.body)
		}
		if _, err := e.d.Task(context.Background(), "q-3"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("the refused task was stored: %v", err)
		}
		e.do("POST", "/v1/tasks", ciTok, `{"workflow":"external","id":"q-0"}`).must(t, 200)
		e.do("POST", "/v1/tasks", submitTok, `{"workflow":"external","id":"other"}`).must(t, 201)
		task, err := e.drv.Reader().TaskGet(context.Background(), &store.TaskGetParams{ID: "q-0"})
		if err != nil || task.Submitter != "http:ci" {
			t.Fatalf("q-0's submitter: %q, %v", task.Submitter, err)
		}
		e.do("POST", "/v1/tasks/q-0/cancel", operatorTok, `{}`).must(t, 200)
		e.do("POST", "/v1/tasks", ciTok, `{"workflow":"external","id":"q-3"}`).must(t, 201)
		e.do("POST", "/v1/tasks", ciTok, `{"workflow":"external","id":"q-4"}`).mustError(t, 429, "quota_exceeded")

		// Concurrent submits do not pass the quota together.
		e2 := newEnv(t, open(t), Options{Tokens: tokens, MaxInFlightPerToken: 3})
		created := concurrentSubmits(e2, 12, ciTok)
		if n, err := e2.d.ActiveTasksOf(context.Background(), "http:ci"); err != nil || created > 3 || n != created {
			t.Errorf("%d created, %d in flight (%v), want at most 3", created, n, err)
		}
	})
}

// concurrentSubmits submits n new tasks at once, with the tokens in turn,
// and returns how many were created; every other one must get 429.
func concurrentSubmits(e *testEnv, n int, toks ...string) int {
	e.t.Helper()
	codes := make(chan int, n)
	for i := range n {
		go func() {
			codes <- e.do("POST", "/v1/tasks", toks[i%len(toks)], `{"workflow":"external","id":"c-`+itoa(int64(i))+`"}`).status
		}()
	}
	created := 0
	for range n {
		switch c := <-codes; c {
		case 201:
			created++
		case 429:
		default:
			e.t.Errorf("concurrent submit: %d", c)
		}
	}
	return created
}

// TestInFlightQuotaPerNamespace: once namespace a holds
// MaxInFlightPerNamespace tasks not yet final, whichever tokens submitted
// them, a new one gets 429 quota_exceeded naming the namespace and the
// quota, from a's tokens and from a global token acting in a, in this
// handler and in another on the same store; submitting an existing ID
// again is served; namespace b and the default namespace are not
// affected; once one of a's tasks is final a submits again. The token's
// quota is checked by the same call and named when it is the one
// reached. Concurrent submits do not pass the quota together.
func TestInFlightQuotaPerNamespace(t *testing.T) {
	drivers(t, func(t *testing.T, open func(t *testing.T) store.Driver) {
		toks := append([]Token{{Secret: aSubmit2Tok, Scopes: []Scope{ScopeSubmit}, Namespace: "a"}}, nsTokens...)
		opts := Options{Tokens: toks, MaxInFlightPerNamespace: 3, MaxInFlightPerToken: 2}
		e := newEnv(t, open(t), opts)
		submit := func(tok, id string) *response {
			return e.do("POST", "/v1/tasks", tok, `{"workflow":"external","id":"`+id+`"}`)
		}
		submit(aSubmitTok, "q-0").must(t, 201)
		submit(aSubmitTok, "q-1").must(t, 201)
		r := submit(aSubmitTok, "q-2").mustError(t, 429, "quota_exceeded")
		if !strings.Contains(r.errMsg(), "this token has 2 tasks in flight") || !strings.Contains(r.errMsg(), "max-in-flight-per-token is 2") {
			t.Errorf("the token's quota is not named: %s", r.body)
		}
		submit(aSubmit2Tok, "q-2").must(t, 201)
		r = submit(aSubmit2Tok, "q-3").mustError(t, 429, "quota_exceeded")
		if msg := r.errMsg(); !strings.Contains(msg, `namespace "a" has 3 tasks in flight`) || !strings.Contains(msg, "max-in-flight-per-namespace is 3") {
			t.Errorf("the namespace's quota is not named: %s", r.body)
		}
		if _, err := e.d.Task(context.Background(), "a/q-3"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("the refused task was stored: %v", err)
		}
		e.doNS("POST", "/v1/tasks", submitTok, "a", `{"workflow":"external","id":"g"}`).mustError(t, 429, "quota_exceeded")
		// The store counts: a handler with no submits of its own refuses too.
		newEnv(t, e.drv, opts).do("POST", "/v1/tasks", aSubmit2Tok, `{"workflow":"external","id":"q-3"}`).mustError(t, 429, "quota_exceeded")
		submit(aSubmit2Tok, "q-0").must(t, 200)
		submit(bSubmitTok, "q-0").must(t, 201)
		submit(bSubmitTok, "q-1").must(t, 201)
		// The default namespace has none (its global token only its own).
		submit(submitTok, "d-0").must(t, 201)
		submit(operatorTok, "d-1").must(t, 201)
		submit(operatorTok, "d-2").must(t, 201)
		submit(submitTok, "d-3").must(t, 201)
		for _, ns := range []string{"", dt.DefaultNamespace} {
			if _, err := e.d.ActiveTasksIn(context.Background(), ns); !errors.Is(err, drover.ErrInvalidInput) {
				t.Errorf("ActiveTasksIn(%q): %v, want ErrInvalidInput", ns, err)
			}
		}

		e.do("POST", "/v1/tasks/q-2/cancel", aOperatorTok, `{}`).must(t, 200)
		submit(aSubmit2Tok, "q-3").must(t, 201)
		submit(aSubmit2Tok, "q-4").mustError(t, 429, "quota_exceeded")

		// Concurrent submits of two tokens do not pass the quota together.
		e2 := newEnv(t, open(t), Options{Tokens: toks, MaxInFlightPerNamespace: 3})
		created := concurrentSubmits(e2, 12, aSubmitTok, aSubmit2Tok)
		if n, err := e2.d.ActiveTasksIn(context.Background(), "a"); err != nil || created > 3 || n != created {
			t.Errorf("%d created, %d in flight (%v), want at most 3", created, n, err)
		}
	})
}
