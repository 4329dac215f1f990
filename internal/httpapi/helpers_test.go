package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/convoy"
	"github.com/drover-run/drover/internal/testutil"
	"github.com/drover-run/drover/internal/testutil/clienttest"
	"github.com/drover-run/drover/store"
)

const (
	submitTok   = "submit-token-0123456789"
	operatorTok = "operator-token-0123456789"
)

var testTokens = []Token{
	{Secret: submitTok, Scopes: []Scope{ScopeSubmit}},
	{Secret: operatorTok, Scopes: []Scope{ScopeOperator}},
}

type testEnv struct {
	t   *testing.T
	h   *Handler
	d   *drover.Client
	q   *convoy.Client
	drv store.Driver
}

// drivers runs fn once per store driver.
func drivers(t *testing.T, fn func(t *testing.T, open func(t *testing.T) store.Driver)) {
	t.Run("sqlite", func(t *testing.T) { fn(t, func(t *testing.T) store.Driver { return testutil.SQLite(t) }) })
	t.Run("postgres", func(t *testing.T) { fn(t, func(t *testing.T) store.Driver { return testutil.Postgres(t) }) })
}

// newEnv builds a started client with the test workflows and a handler.
// Workflows: "echo" returns its input; "fail" fails permanently (Error and
// an alert); "external" calls an agent no process runs (stays unfinished).
func newEnv(t *testing.T, drv store.Driver, opts Options) *testEnv {
	t.Helper()
	cfg := drover.Config{
		Store: drv, PollInterval: 10 * time.Millisecond, SupervisorInterval: 50 * time.Millisecond,
		Workflows: []drover.Workflow{
			{Name: "echo", Steps: []drover.Step{{Name: "a", Agent: "echo"}, {Name: "b", Agent: "echo"}}},
			{Name: "fail", Steps: []drover.Step{{Name: "a", Agent: "fail"}}},
			{Name: "external", Steps: []drover.Step{{Name: "a", Agent: "remote"}}},
		},
		Agents: []drover.Agent{
			{Name: "echo", Func: func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) { return r.Input, nil }},
			{Name: "fail", Func: func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) {
				return nil, drover.Permanent(errors.New("card declined"))
			}},
		},
		ExternalAgents: []string{"remote"},
	}
	if opts.Tokens == nil && !opts.NoAuth {
		opts.Tokens = testTokens
	}
	return startEnv(t, cfg, opts)
}

// startEnv starts a drover client from cfg, a convoy client on cfg.Store
// and a handler with opts (no rate limit unless opts sets one). The
// drover client is stopped when the test ends. (apitest does the same for
// other packages; it cannot be used here without an import cycle.)
func startEnv(t *testing.T, cfg drover.Config, opts Options) *testEnv {
	t.Helper()
	d := clienttest.Start(t, cfg)
	q, err := convoy.New(convoy.Config{Store: cfg.Store, PollInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if opts.Rate == 0 {
		opts.Rate = -1
	}
	if opts.AuthFailRate == 0 {
		opts.AuthFailRate = -1
	}
	h, err := New(d, q, opts)
	if err != nil {
		t.Fatal(err)
	}
	return &testEnv{t: t, h: h, d: d, q: q, drv: cfg.Store}
}

type response struct {
	status int
	header http.Header
	body   []byte
	json   map[string]any
}

func (r *response) str(key string) string {
	v, _ := r.json[key].(string)
	return v
}

// errCode returns the code of a JSON error body ("" if it is none).
func (r *response) errCode() string {
	e, ok := r.json["error"].(map[string]any)
	if !ok {
		return ""
	}
	c, _ := e["code"].(string)
	return c
}

func (r *response) errMsg() string {
	e, _ := r.json["error"].(map[string]any)
	m, _ := e["message"].(string)
	return m
}

// do sends a request straight to the handler. target is the raw request
// target; body "" sends none.
func (e *testEnv) do(method, target, token, body string) *response {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, target, rd)
	req.Host = testHost
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if method != "GET" {
		req.Header.Set("Content-Type", "application/json")
	}
	rec := httptest.NewRecorder()
	e.h.ServeHTTP(rec, req)
	return decodeResponse(e.t, rec.Code, rec.Header(), rec.Body.Bytes())
}

func decodeResponse(t *testing.T, status int, h http.Header, b []byte) *response {
	t.Helper()
	r := &response{status: status, header: h, body: b}
	if len(b) > 0 {
		if err := json.Unmarshal(b, &r.json); err != nil {
			t.Fatalf("response %d is not a JSON object: %v\n%s", status, err, b)
		}
	}
	return r
}

// must checks the status and fails with the body otherwise.
func (r *response) must(t *testing.T, status int) *response {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d: %s", r.status, status, r.body)
	}
	return r
}

// mustError checks a 4xx/5xx status with a JSON error body.
func (r *response) mustError(t *testing.T, status int, code string) *response {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d: %s", r.status, status, r.body)
	}
	if r.errCode() == "" || r.errMsg() == "" {
		t.Fatalf("status %d without a JSON error body: %s", r.status, r.body)
	}
	if code != "" && r.errCode() != code {
		t.Fatalf("error code %q, want %q: %s", r.errCode(), code, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("error Content-Type %q", ct)
	}
	return r
}

// snapshot captures everything the API can change: tasks with steps,
// the event history and every queue's sessions and messages.
func (e *testEnv) snapshot() string {
	e.t.Helper()
	ctx := context.Background()
	var b bytes.Buffer
	ts, err := e.d.Tasks(ctx, drover.ListParams{Limit: 100000})
	if err != nil {
		e.t.Fatal(err)
	}
	for _, t := range ts {
		full, err := e.d.Task(ctx, t.ID)
		if err != nil {
			e.t.Fatal(err)
		}
		j, _ := json.Marshal(full)
		b.Write(j)
	}
	evs, err := e.d.Events(ctx, drover.EventQuery{Limit: 1 << 30})
	if err != nil {
		e.t.Fatal(err)
	}
	fmt.Fprintf(&b, "\nevents=%d\n", len(evs))
	qs, err := e.q.Queues(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, q := range qs {
		j, _ := json.Marshal(q)
		b.Write(j)
		ss, err := e.q.Sessions(ctx, q.Name, "", 100000)
		if err != nil {
			e.t.Fatal(err)
		}
		for _, s := range ss {
			j, _ := json.Marshal(s)
			b.Write(j)
			ms, err := e.q.Peek(ctx, q.Name, s.ID, 0, 100000)
			if err != nil {
				e.t.Fatal(err)
			}
			j, _ = json.Marshal(ms)
			b.Write(j)
		}
	}
	return b.String()
}

// waitState polls the task until it is in state.
func (e *testEnv) waitState(id, state string) *response {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		r := e.do("GET", "/v1/tasks/"+id, submitTok, "").must(e.t, 200)
		if r.str("state") == state {
			return r
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("task %s is %s, want %s: %s", id, r.str("state"), state, r.body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func testutilSQLite(t *testing.T) store.Driver { return testutil.SQLite(t) }

func newReq(method, target, body string) *http.Request {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, target, rd)
	req.Host = testHost
	if method != "GET" {
		req.Header.Set("Content-Type", "application/json")
	}
	return req
}

// testHost is the Host of the tests' requests: a loopback one, as a
// server without auth requires.
const testHost = "127.0.0.1:8080"

func (e *testEnv) serve(req *http.Request) *response {
	e.t.Helper()
	rec := httptest.NewRecorder()
	e.h.ServeHTTP(rec, req)
	return decodeResponse(e.t, rec.Code, rec.Header(), rec.Body.Bytes())
}

func newTLSServer(t *testing.T, h http.Handler) *httptest.Server {
	srv := httptest.NewUnstartedServer(h)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}
