package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/convoy"
	"github.com/drover-run/drover/droverapi"
	"github.com/drover-run/drover/internal/notifier"
	"github.com/drover-run/drover/internal/testutil"
	"github.com/drover-run/drover/store"
)

const agentTok = "agent-token-0123456789"

// offsetClock is the real clock plus an offset the test moves forward: the
// engine and the API share it, so a test can make a deadline pass at once.
// Frozen, it no longer follows the real clock: only Advance moves it, so a
// test whose steps must stay within a deadline does not depend on how fast
// the machine runs it.
type offsetClock struct {
	off    atomic.Int64
	frozen atomic.Pointer[time.Time] // the real time it was frozen at
}

func (c *offsetClock) Now() time.Time {
	base := time.Now().UTC()
	if f := c.frozen.Load(); f != nil {
		base = *f
	}
	return base.Add(time.Duration(c.off.Load()))
}
func (c *offsetClock) Advance(d time.Duration) { c.off.Add(int64(d)) }

// Freeze stops the clock at its current reading.
func (c *offsetClock) Freeze() {
	now := time.Now().UTC()
	c.frozen.Store(&now)
}

// remoteStepTimeout is the budget of the remote steps whose deadline the
// tests make pass (by moving the clock, not by waiting).
const remoteStepTimeout = 4 * time.Second

// newAgentEnv builds a started client whose workflows call the external
// agent "worker" (which only remote agents serve) and a handler accepting
// submit, operator and agent tokens (opts.Tokens, default testTokens, and
// agentTok). Workflows:
//   - "remote": one step (a) on worker, budget remoteStepTimeout;
//   - "remote-two": a on the local echo agent, then b on worker;
//   - "remote-comp": a on echo with compensation "undo", then b on worker;
//     policy compensate.
func newAgentEnv(t *testing.T, drv store.Driver, opts Options) (*testEnv, *offsetClock) {
	t.Helper()
	clk := &offsetClock{}
	cfg := drover.Config{
		Store: drv, PollInterval: 10 * time.Millisecond, SupervisorInterval: 20 * time.Millisecond, Clock: clk,
		Workflows: []drover.Workflow{
			{Name: "remote", Steps: []drover.Step{{Name: "a", Agent: "worker", Timeout: remoteStepTimeout}}, RetryDelay: time.Millisecond},
			{Name: "remote-two", Steps: []drover.Step{{Name: "a", Agent: "echo"}, {Name: "b", Agent: "worker"}}},
			{Name: "remote-comp", OnFailure: drover.PolicyCompensate,
				Steps: []drover.Step{{Name: "a", Agent: "echo", Compensation: "undo"}, {Name: "b", Agent: "worker"}}},
		},
		Agents: []drover.Agent{
			{Name: "echo", Func: func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) { return r.Input, nil }},
			{Name: "undo", Func: func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) { return []byte(`"undone"`), nil }},
		},
		ExternalAgents: []string{"worker"},
	}
	if opts.Tokens == nil {
		opts.Tokens = testTokens
	}
	opts.Tokens = append(append([]Token(nil), opts.Tokens...), Token{Secret: agentTok, Scopes: []Scope{ScopeAgent}})
	opts.Clock = clk
	return startEnv(t, cfg, opts), clk
}

// poll polls for agent with body and returns the requests handed out.
func (e *testEnv) poll(agent, body string) []droverapi.AgentRequest {
	e.t.Helper()
	r := e.do("POST", "/v1/agents/"+agent+"/poll", agentTok, body).must(e.t, 200)
	var out struct {
		Requests []droverapi.AgentRequest `json:"requests"`
	}
	if err := json.Unmarshal(r.body, &out); err != nil || out.Requests == nil {
		e.t.Fatalf("poll answer %s: %v (want a requests array)", r.body, err)
	}
	return out.Requests
}

// pollOne polls until one request for agent is handed out.
func (e *testEnv) pollOne(agent string) droverapi.AgentRequest {
	e.t.Helper()
	got := e.poll(agent, `{"wait_ms":20000}`)
	if len(got) != 1 {
		e.t.Fatalf("poll for %s: %d requests in 20s, want 1", agent, len(got))
	}
	return got[0]
}

func tokenBody(tok string, rest string) string {
	if rest != "" {
		rest = "," + rest
	}
	return fmt.Sprintf(`{"token":%q%s}`, tok, rest)
}

func completePath(id int64) string { return fmt.Sprintf("/v1/agents/requests/%d/complete", id) }
func failPath(id int64) string     { return fmt.Sprintf("/v1/agents/requests/%d/fail", id) }

// A step on an external agent is completed through poll and complete; its
// output becomes the step's and the task's; the token is good once.
func TestRemoteAgentComplete(t *testing.T) {
	drivers(t, func(t *testing.T, open func(t *testing.T) store.Driver) {
		e, clk := newAgentEnv(t, open(t), Options{})
		e.do("POST", "/v1/tasks", submitTok, `{"workflow":"remote-two","id":"r-1","input":{"n":1}}`).must(t, 201)
		got := e.pollOne("worker")

		task := e.do("GET", "/v1/tasks/r-1", submitTok, "").must(t, 200)
		steps := task.json["steps"].([]any)
		stepB := steps[1].(map[string]any)
		if got.Agent != "worker" || got.TaskID != "r-1" || got.Workflow != "remote-two" || got.StepIndex != 1 ||
			got.StepName != "b" || got.Kind != "do" || got.Attempt != 1 || got.IdempotencyKey == "" ||
			got.IdempotencyKey != stepB["idempotency_key"] || got.ID < 1 || got.Token == "" {
			t.Fatalf("polled request: %+v\nstep: %v", got, stepB)
		}
		if now := clk.Now(); !got.CompleteBy.After(now) || got.CompleteBy.After(now.Add(31*time.Second)) {
			t.Fatalf("complete_by %v, want within the step's 30s budget from now %v", got.CompleteBy, now)
		}
		if string(got.Input) != `{"n":1}` || string(got.PreviousOutput) != `{"n":1}` || string(got.StepOutput) != "null" {
			t.Fatalf("payload: input %s, previous_output %s, step_output %s", got.Input, got.PreviousOutput, got.StepOutput)
		}
		// Handed out once: nothing more for another poll.
		if more := e.poll("worker", `{"wait_ms":0,"max":100}`); len(more) != 0 {
			t.Fatalf("a second poll got %d requests", len(more))
		}

		r := e.do("POST", completePath(got.ID), agentTok, tokenBody(got.Token, `"output":{"ok":true,"by":"remote"}`)).must(t, 200)
		if r.json["accepted"] != true {
			t.Fatalf("complete: %s", r.body)
		}
		done := e.waitState("r-1", "Processed")
		out, _ := done.json["output"].(map[string]any)
		if out["ok"] != true || out["by"] != "remote" {
			t.Fatalf("task output: %s", done.body)
		}
		// The same token again, as a completion or a failure: stale, nothing changed.
		before := e.snapshot()
		e.do("POST", completePath(got.ID), agentTok, tokenBody(got.Token, `"output":2`)).mustError(t, 409, "stale_token")
		e.do("POST", failPath(got.ID), agentTok, tokenBody(got.Token, `"error":"x","permanent":true`)).mustError(t, 409, "stale_token")
		e.do("POST", failPath(got.ID), agentTok, tokenBody(got.Token, `"error":"x"`)).mustError(t, 409, "stale_token")
		// A well-formed token that was never handed out.
		forged := fmt.Sprintf("%d.%s", got.ID, strings.Repeat("ab", 16))
		e.do("POST", completePath(got.ID), agentTok, tokenBody(forged, `"output":2`)).mustError(t, 409, "stale_token")
		if after := e.snapshot(); after != before {
			t.Fatalf("stale completions changed the store:\n%s\n---\n%s", before, after)
		}
	})
}

// A completion after CompleteBy is refused; the supervisor recovers the
// step, which is handed out again as a new attempt with a new token, and the
// old token stays stale.
func TestRemoteAgentLateCompletion(t *testing.T) {
	drivers(t, func(t *testing.T, open func(t *testing.T) store.Driver) {
		e, clk := newAgentEnv(t, open(t), Options{})
		e.do("POST", "/v1/tasks", submitTok, `{"workflow":"remote","id":"late"}`).must(t, 201)
		first := e.pollOne("worker")
		if first.Attempt != 1 {
			t.Fatalf("first attempt %d", first.Attempt)
		}
		clk.Advance(remoteStepTimeout + time.Second)
		e.do("POST", completePath(first.ID), agentTok, tokenBody(first.Token, `"output":"late"`)).mustError(t, 409, "stale_token")
		e.do("POST", failPath(first.ID), agentTok, tokenBody(first.Token, `"error":"late"`)).mustError(t, 409, "stale_token")

		second := e.pollOne("worker")
		if second.Attempt != 2 || second.Token == first.Token || second.TaskID != "late" {
			t.Fatalf("after recovery: %+v (first %+v)", second, first)
		}
		e.do("POST", completePath(first.ID), agentTok, tokenBody(first.Token, `"output":"late"`)).mustError(t, 409, "stale_token")
		e.do("POST", completePath(second.ID), agentTok, tokenBody(second.Token, `"output":"on time"`)).must(t, 200)
		r := e.waitState("late", "Processed")
		step := r.json["steps"].([]any)[0].(map[string]any)
		if r.json["output"] != "on time" || step["attempt"] != float64(2) || step["failure_count"] != float64(1) {
			t.Fatalf("task: %s", r.body)
		}
	})
}

// A transient failure gives the request back: after the redelivery delay
// (1s, then 2s: the default doubles it) another poll gets it (same
// attempt, new token) before the deadline; the first token is stale. The
// clock is frozen: the 3s of delays it is moved through must be all the
// time that passes within the step's 4s budget (following the real clock,
// a loaded machine spending a second between the polls made the deadline
// pass, and the third poll got the supervisor's attempt 2). The rate limit
// is off: its tokens would not refill.
func TestRemoteAgentTransientFail(t *testing.T) {
	drivers(t, func(t *testing.T, open func(t *testing.T) store.Driver) {
		e, clk := newAgentEnv(t, open(t), Options{Rate: -1})
		clk.Freeze()
		e.do("POST", "/v1/tasks", submitTok, `{"workflow":"remote","id":"tr"}`).must(t, 201)
		first := e.pollOne("worker")
		e.do("POST", failPath(first.ID), agentTok, tokenBody(first.Token, `"error":"service busy","permanent":false`)).must(t, 200)
		if got := e.poll("worker", `{"wait_ms":0}`); len(got) != 0 {
			t.Fatalf("poll right after a transient failure got %+v; want nothing before the redelivery delay", got)
		}
		clk.Advance(DefaultRedeliveryFirst)
		second := e.pollOne("worker")
		if second.ID != first.ID || second.Attempt != first.Attempt || second.Token == first.Token {
			t.Fatalf("redelivered: %+v, first %+v", second, first)
		}
		e.do("POST", completePath(first.ID), agentTok, tokenBody(first.Token, `"output":1`)).mustError(t, 409, "stale_token")
		e.do("POST", failPath(second.ID), agentTok, tokenBody(second.Token, `"error":"still busy","permanent":false`)).must(t, 200)
		clk.Advance(DefaultRedeliveryFirst)
		if got := e.poll("worker", `{"wait_ms":0}`); len(got) != 0 {
			t.Fatalf("poll 1s after a second transient failure got %+v; want nothing before 2s", got)
		}
		clk.Advance(DefaultRedeliveryFirst)
		third := e.pollOne("worker")
		if third.ID != first.ID || third.Attempt != first.Attempt {
			t.Fatalf("second redelivery: %+v, first %+v (want the same request and attempt, before the deadline)", third, first)
		}
		e.do("POST", completePath(third.ID), agentTok, tokenBody(third.Token, `"output":2`)).must(t, 200)
		r := e.waitState("tr", "Processed")
		if r.json["output"] != float64(2) {
			t.Fatalf("task: %s", r.body)
		}
	})
}

// Options.Redelivery: a negative First redelivers at once; a Max below
// First is refused.
func TestRemoteAgentRedeliveryOptions(t *testing.T) {
	drivers(t, func(t *testing.T, open func(t *testing.T) store.Driver) {
		drv := open(t)
		e, _ := newAgentEnv(t, drv, Options{Redelivery: store.Redelivery{First: -1}})
		e.do("POST", "/v1/tasks", submitTok, `{"workflow":"remote","id":"now"}`).must(t, 201)
		first := e.pollOne("worker")
		e.do("POST", failPath(first.ID), agentTok, tokenBody(first.Token, `"error":"busy","permanent":false`)).must(t, 200)
		if got := e.poll("worker", `{"wait_ms":0}`); len(got) != 1 || got[0].ID != first.ID {
			t.Fatalf("poll right after a transient failure with First < 0 got %+v; want request %d", got, first.ID)
		}
		c, err := drover.New(drover.Config{Store: drv})
		if err != nil {
			t.Fatal(err)
		}
		q, err := convoy.New(convoy.Config{Store: drv})
		if err != nil {
			t.Fatal(err)
		}
		_, err = New(c, q, Options{NoAuth: true, Redelivery: store.Redelivery{First: 2 * time.Second, Max: time.Second}})
		if err == nil || !strings.Contains(err.Error(), "max delay 1s is below the first delay 2s") {
			t.Fatalf("New with Max below First: %v", err)
		}
	})
}

// A permanent failure is the step's answer: the task's policy applies —
// Error with an alert, or compensation of the steps done.
func TestRemoteAgentPermanentFail(t *testing.T) {
	drivers(t, func(t *testing.T, open func(t *testing.T) store.Driver) {
		e, _ := newAgentEnv(t, open(t), Options{})
		e.do("POST", "/v1/tasks", submitTok, `{"workflow":"remote","id":"pf"}`).must(t, 201)
		got := e.pollOne("worker")
		e.do("POST", failPath(got.ID), agentTok, tokenBody(got.Token, `"error":"card declined","permanent":true`)).must(t, 200)
		r := e.waitState("pf", "Error")
		if !strings.Contains(r.str("last_error"), "card declined") {
			t.Fatalf("task: %s", r.body)
		}
		alerts := e.do("GET", "/v1/alerts", submitTok, "").must(t, 200)
		if !strings.Contains(string(alerts.body), "card declined") {
			t.Fatalf("no alert with the error: %s", alerts.body)
		}

		e.do("POST", "/v1/tasks", submitTok, `{"workflow":"remote-comp","id":"pc","input":{"x":1}}`).must(t, 201)
		got = e.pollOne("worker")
		e.do("POST", failPath(got.ID), agentTok, tokenBody(got.Token, `"error":"out of stock","permanent":true`)).must(t, 200)
		r = e.waitState("pc", "Compensated")
		steps := r.json["steps"].([]any)
		if steps[0].(map[string]any)["compensation_state"] != "Compensated" || steps[1].(map[string]any)["state"] != "Error" {
			t.Fatalf("compensated task: %s", r.body)
		}
	})
}

// A waiting poll returns as soon as work arrives, an empty wait ends with
// an empty list, draining ends waiting polls and refuses new ones.
func TestRemoteAgentLongPoll(t *testing.T) {
	drivers(t, func(t *testing.T, open func(t *testing.T) store.Driver) {
		e, _ := newAgentEnv(t, open(t), Options{})
		srv := httptest.NewServer(e.h)
		t.Cleanup(srv.Close)

		// Nothing to do: wait_ms 0 answers at once, a short wait after it.
		if got := e.poll("worker", `{"wait_ms":0}`); len(got) != 0 {
			t.Fatalf("got %v", got)
		}
		start := time.Now()
		if got := e.poll("worker", `{"wait_ms":150}`); len(got) != 0 {
			t.Fatalf("got %v", got)
		}
		if el := time.Since(start); el < 150*time.Millisecond {
			t.Fatalf("a 150ms poll returned after %v", el)
		}

		// Work arriving during a long wait is handed out promptly.
		type result struct {
			status int
			body   string
			took   time.Duration
		}
		post := func(ctx context.Context, path, body string) result {
			start := time.Now()
			req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+path, strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+agentTok)
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return result{status: -1, body: err.Error()}
			}
			defer resp.Body.Close()
			return result{resp.StatusCode, readAll(resp), time.Since(start)}
		}
		done := make(chan result, 1)
		go func() { done <- post(context.Background(), "/v1/agents/worker/poll", `{"wait_ms":60000}`) }()
		e.do("POST", "/v1/tasks", submitTok, `{"workflow":"remote","id":"lp"}`).must(t, 201)
		select {
		case r := <-done:
			if r.status != 200 || !strings.Contains(r.body, `"task_id":"lp"`) {
				t.Fatalf("long poll: %d %s", r.status, r.body)
			}
		case <-time.After(15 * time.Second):
			t.Fatal("a waiting poll did not return within 15s of the task's submission")
		}

		// Draining ends a waiting poll with an empty list; new polls get 503.
		go func() { done <- post(context.Background(), "/v1/agents/worker/poll", `{"wait_ms":60000}`) }()
		deadline := time.Now().Add(10 * time.Second)
		for e.h.streamCtx.Err() == nil && time.Now().Before(deadline) {
			// The poll must be waiting before the drain for this to test
			// anything: wait until its request has reached the handler.
			if pollWaiting(e.h) {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		e.h.SetDraining()
		select {
		case r := <-done:
			if r.status != 200 || strings.TrimSpace(r.body) != `{"requests":[]}` {
				t.Fatalf("poll at drain: %d %s", r.status, r.body)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a waiting poll did not end within 10s of the drain")
		}
		r := e.do("POST", "/v1/agents/worker/poll", agentTok, `{"wait_ms":0}`).mustError(t, 503, "shutting_down")
		if r.header.Get("Retry-After") == "" {
			t.Fatal("503 without Retry-After")
		}
	})
}

// pollWaiting reports whether a poll is waiting in the handler.
func pollWaiting(h *Handler) bool { return h.pollsWaiting.Load() > 0 }

func readAll(resp *http.Response) string {
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			return b.String()
		}
	}
}

// The agent scope reaches only the agent routes; submit does not reach
// them; operator reaches everything.
func TestRemoteAgentScopes(t *testing.T) {
	e, _ := newAgentEnv(t, testutilSQLite(t), Options{})
	e.do("POST", "/v1/tasks", submitTok, `{"workflow":"remote","id":"sc"}`).must(t, 201)
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/v1/agents/worker/poll", `{"wait_ms":0}`},
		{"POST", "/v1/agents/requests/1/complete", `{"token":"1.` + strings.Repeat("0", 32) + `"}`},
		{"POST", "/v1/agents/requests/1/fail", `{"token":"1.` + strings.Repeat("0", 32) + `","error":"x"}`},
	} {
		e.do(c.method, c.path, submitTok, c.body).mustError(t, 403, "forbidden")
		e.do(c.method, c.path, "", c.body).mustError(t, 401, "unauthorized")
		e.do(c.method, c.path, "wrong-token-0123456789", c.body).mustError(t, 401, "unauthorized")
	}
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/v1/tasks", `{"workflow":"remote"}`},
		{"GET", "/v1/tasks/sc", ""},
		{"GET", "/v1/tasks", ""},
		{"GET", "/v1/alerts", ""},
		{"POST", "/v1/tasks/sc/cancel", `{}`},
		{"GET", "/v1/queues", ""},
	} {
		e.do(c.method, c.path, agentTok, c.body).mustError(t, 403, "forbidden")
	}
	// Operator may poll too.
	r := e.do("POST", "/v1/agents/worker/poll", operatorTok, `{"wait_ms":20000}`).must(t, 200)
	if !strings.Contains(string(r.body), `"task_id":"sc"`) {
		t.Fatalf("operator poll: %s", r.body)
	}
}

// Bad requests to the agent routes: a clear 4xx JSON error and nothing
// changed — no task, step or event, and the waiting request stays unclaimed.
func TestRemoteAgentBadInput(t *testing.T) {
	drivers(t, func(t *testing.T, open func(t *testing.T) store.Driver) {
		e, _ := newAgentEnv(t, open(t), Options{})
		e.do("POST", "/v1/tasks", submitTok, `{"workflow":"remote","id":"claimed"}`).must(t, 201)
		held := e.pollOne("worker")
		e.do("POST", "/v1/tasks", submitTok, `{"workflow":"remote","id":"waiting"}`).must(t, 201)
		waitingID := waitRequest(t, e, "worker", held.ID+1)
		before := e.snapshot()

		good := tokenBody(held.Token, `"output":1`)
		routes := []struct{ path, wrongType, wrongCase string }{
			{"/v1/agents/worker/poll", `{"max":"1"}`, `{"Max":1}`},
			{completePath(held.ID), `{"token":5}`, `{"Token":"` + held.Token + `"}`},
			{failPath(held.ID), `{"token":"` + held.Token + `","error":"x","permanent":"yes"}`, `{"token":"` + held.Token + `","Error":"x"}`},
		}
		for _, rt := range routes {
			for _, bi := range badInputs {
				if bi.name == "unknown field" || bi.name == "oversized" {
					continue // below, with a valid token
				}
				t.Run(rt.path+"/"+bi.name, func(t *testing.T) {
					e.do("POST", rt.path, agentTok, bi.body).mustError(t, bi.status, bi.code)
				})
			}
			t.Run(rt.path+"/wrong-type", func(t *testing.T) {
				e.do("POST", rt.path, agentTok, rt.wrongType).mustError(t, 400, "invalid_field")
			})
			t.Run(rt.path+"/wrong-case", func(t *testing.T) {
				e.do("POST", rt.path, agentTok, rt.wrongCase).mustError(t, 400, "unknown_field")
			})
			t.Run(rt.path+"/unknown-field", func(t *testing.T) {
				e.do("POST", rt.path, agentTok, tokenBody(held.Token, `"output":1,"error":"x","extra":1`)).mustError(t, 400, "unknown_field")
			})
			t.Run(rt.path+"/oversized", func(t *testing.T) {
				e.do("POST", rt.path, agentTok, tokenBody(held.Token, `"output":"`+strings.Repeat("a", 2<<20)+`"`)).mustError(t, 413, "body_too_large")
			})
			t.Run(rt.path+"/content-type", func(t *testing.T) {
				req := newReq("POST", rt.path, good)
				req.Header.Set("Content-Type", "text/plain")
				req.Header.Set("Authorization", "Bearer "+agentTok)
				e.serve(req).mustError(t, 415, "unsupported_media_type")
			})
			t.Run(rt.path+"/unknown-query", func(t *testing.T) {
				e.do("POST", rt.path+"?x=1", agentTok, good).mustError(t, 400, "unknown_parameter")
			})
			t.Run(rt.path+"/method", func(t *testing.T) {
				r := e.do("GET", rt.path, agentTok, "").mustError(t, 405, "method_not_allowed")
				if r.header.Get("Allow") != "POST" {
					t.Fatalf("Allow %q", r.header.Get("Allow"))
				}
			})
		}
		other := strings.Repeat("cd", 16)
		for _, c := range []struct{ name, method, path, body, code string }{
			{"poll max 0", "POST", "/v1/agents/worker/poll", `{"max":0}`, "invalid_field"},
			{"poll max 101", "POST", "/v1/agents/worker/poll", `{"max":101}`, "invalid_field"},
			{"poll max fraction", "POST", "/v1/agents/worker/poll", `{"max":1.5}`, "invalid_field"},
			{"poll wait negative", "POST", "/v1/agents/worker/poll", `{"wait_ms":-1}`, "invalid_field"},
			{"poll wait too long", "POST", "/v1/agents/worker/poll", `{"wait_ms":60001}`, "invalid_field"},
			{"poll agent with slash", "POST", "/v1/agents/wor%2Fker/poll", `{}`, "invalid_request"},
			{"poll agent with space", "POST", "/v1/agents/wor%20ker/poll", `{}`, "invalid_request"},
			{"poll agent too long", "POST", "/v1/agents/" + strings.Repeat("w", 201) + "/poll", `{}`, "invalid_request"},
			{"poll dot-dot", "POST", "/v1/agents/../tasks", `{}`, "invalid_path"},
			{"poll encoded dot-dot", "POST", "/v1/agents/%2e%2e/poll", `{}`, "invalid_path"},
			{"empty body", "POST", completePath(held.ID), ``, "invalid_request"},
			{"no token", "POST", completePath(held.ID), `{"output":1}`, "invalid_field"},
			{"empty token", "POST", completePath(held.ID), `{"token":"","output":1}`, "invalid_field"},
			{"token without nonce", "POST", completePath(held.ID), tokenBody(fmt.Sprint(held.ID), ""), "invalid_field"},
			{"token nonce short", "POST", completePath(held.ID), tokenBody(fmt.Sprintf("%d.abc", held.ID), ""), "invalid_field"},
			{"token nonce upper case", "POST", completePath(held.ID), tokenBody(strings.ToUpper(held.Token), ""), "invalid_field"},
			{"token with spaces", "POST", completePath(held.ID), tokenBody(" "+held.Token, ""), "invalid_field"},
			{"token of another request", "POST", completePath(waitingID), tokenBody(held.Token, ""), "invalid_field"},
			{"token id leading zero", "POST", completePath(held.ID), tokenBody("0"+held.Token, ""), "invalid_field"},
			{"other nonce", "POST", completePath(held.ID), tokenBody(fmt.Sprintf("%d.%s", held.ID, other), ""), "stale_token"},
			{"unclaimed request", "POST", completePath(waitingID), tokenBody(fmt.Sprintf("%d.%s", waitingID, other), ""), "stale_token"},
			{"unknown request", "POST", completePath(999999), tokenBody("999999."+other, ""), "stale_token"},
			{"id not a number", "POST", "/v1/agents/requests/abc/complete", good, "invalid_request"},
			{"id zero", "POST", "/v1/agents/requests/0/complete", good, "invalid_request"},
			{"id negative", "POST", "/v1/agents/requests/-1/complete", good, "invalid_request"},
			{"id plus", "POST", "/v1/agents/requests/+1/complete", good, "invalid_request"},
			{"id leading zero", "POST", fmt.Sprintf("/v1/agents/requests/0%d/complete", held.ID), good, "invalid_request"},
			{"id too big", "POST", "/v1/agents/requests/99999999999999999999/complete", good, "invalid_request"},
			{"id fraction", "POST", "/v1/agents/requests/1.5/complete", good, "invalid_request"},
			{"id with slash", "POST", "/v1/agents/requests/1%2F2/complete", good, "invalid_request"},
			{"fail without error", "POST", failPath(held.ID), tokenBody(held.Token, `"permanent":true`), "invalid_field"},
			{"fail error too long", "POST", failPath(held.ID), tokenBody(held.Token, `"error":"`+strings.Repeat("e", 4097)+`"`), "invalid_field"},
			{"fail error null", "POST", failPath(held.ID), tokenBody(held.Token, `"error":null`), "invalid_field"},
			{"complete malformed output", "POST", completePath(held.ID), `{"token":"` + held.Token + `","output":}`, "malformed_json"},
		} {
			t.Run(c.name, func(t *testing.T) {
				r := e.do(c.method, c.path, agentTok, c.body)
				if r.status < 400 || r.status >= 500 {
					t.Fatalf("status %d: %s", r.status, r.body)
				}
				r.mustError(t, r.status, c.code)
			})
		}
		if after := e.snapshot(); after != before {
			t.Fatalf("bad requests changed the store:\n%s\n---\n%s", before, after)
		}
		ctx := context.Background()
		if q, err := e.drv.Reader().RequestGet(ctx, &store.RequestGetParams{ID: waitingID}); err != nil || q.ClaimedBy != "" {
			t.Fatalf("the waiting request: %+v, %v; want it unclaimed", q, err)
		}
		if q, err := e.drv.Reader().RequestGet(ctx, &store.RequestGetParams{ID: held.ID}); err != nil || q.ClaimedBy == "" {
			t.Fatalf("the held request: %+v, %v; want it still claimed", q, err)
		}
		// The held token still works after all that.
		e.do("POST", completePath(held.ID), agentTok, good).must(t, 200)
		e.waitState("claimed", "Processed")
	})
}

// waitRequest waits until agent has an unclaimed request with an ID from
// from on (IDs of a fresh store are small and increasing) and returns its
// ID, read from the store without claiming it.
func waitRequest(t *testing.T, e *testEnv, agent string, from int64) int64 {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		for id := from; id < from+100; id++ {
			q, err := e.drv.Reader().RequestGet(context.Background(), &store.RequestGetParams{ID: id})
			if errors.Is(err, store.ErrNotFound) {
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			if q.Agent == agent && q.ClaimedBy == "" {
				return q.ID
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no unclaimed request for %s within 20s", agent)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Options.RemoteInput computes the input handed out; its error fails the
// request permanently (the task ends in Error with the message).
func TestRemoteInput(t *testing.T) {
	var storeDown atomic.Bool
	e, _ := newAgentEnv(t, testutilSQLite(t), Options{RemoteInput: func(ctx context.Context, req *drover.AgentRequest) ([]byte, error) {
		if req.TaskID == "bad-input" {
			return nil, drover.Permanent(errors.New(`field "amount" is missing`))
		}
		if storeDown.Load() {
			return nil, errors.New("store unavailable")
		}
		return []byte(fmt.Sprintf(`{"mapped":%s,"step":%q}`, req.Input, req.StepName)), nil
	}})
	e.do("POST", "/v1/tasks", submitTok, `{"workflow":"remote","id":"bad-input","input":{}}`).must(t, 201)
	waitRequest(t, e, "worker", 1)
	if got := e.poll("worker", `{"wait_ms":0}`); len(got) != 0 {
		t.Fatalf("a request whose input failed was handed out: %+v", got)
	}
	r := e.waitState("bad-input", "Error")
	if !strings.Contains(r.str("last_error"), `input: field "amount" is missing`) {
		t.Fatalf("task: %s", r.body)
	}
	// A passing failure gives the request back instead of failing the step.
	storeDown.Store(true)
	e.do("POST", "/v1/tasks", submitTok, `{"workflow":"remote","id":"mapped","input":{"n":7}}`).must(t, 201)
	waitRequest(t, e, "worker", 1)
	if got := e.poll("worker", `{"wait_ms":0}`); len(got) != 0 {
		t.Fatalf("a request whose input is not available yet was handed out: %+v", got)
	}
	if r := e.do("GET", "/v1/tasks/mapped", submitTok, ""); r.str("state") != "Processing" {
		t.Fatalf("after a passing input failure the task is %s, want Processing: %s", r.str("state"), r.body)
	}
	storeDown.Store(false)
	got := e.pollOne("worker")
	if got.TaskID != "mapped" || string(got.Input) != `{"mapped":{"n":7},"step":"a"}` {
		t.Fatalf("polled: %+v (input %s)", got, got.Input)
	}
}

// The Python example agent (standard library only) serves a real server
// over loopback HTTP: it completes one task's step with its output and
// fails another's permanently, which is then compensated.
func TestPythonRemoteAgent(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3 is needed to test examples/remote-agent-python (not skipped): %v", err)
	}
	script, err := filepath.Abs(filepath.Join("..", "..", "examples", "remote-agent-python", "agent.py"))
	if err != nil {
		t.Fatal(err)
	}
	e, _ := newAgentEnv(t, testutilSQLite(t), Options{})
	srv := httptest.NewServer(e.h)
	t.Cleanup(srv.Close)

	e.do("POST", "/v1/tasks", submitTok, `{"workflow":"remote-two","id":"py-ok","input":{"amount":42}}`).must(t, 201)
	e.do("POST", "/v1/tasks", submitTok, `{"workflow":"remote-comp","id":"py-bad","input":{"amount":-1}}`).must(t, 201)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, script, "--max-requests", "2", "--wait-ms", "20000")
	cmd.Env = append(os.Environ(), "DROVER_URL="+srv.URL, "DROVER_TOKEN="+agentTok, "DROVER_AGENT=worker")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("agent.py: %v\n%s", err, out)
	}
	r := e.waitState("py-ok", "Processed")
	var task struct {
		Output struct {
			HandledBy      string          `json:"handled_by"`
			Charged        float64         `json:"charged"`
			Receipt        string          `json:"receipt"`
			Input          json.RawMessage `json:"input"`
			PreviousOutput json.RawMessage `json:"previous_output"`
		} `json:"output"`
	}
	if err := json.Unmarshal(r.body, &task); err != nil {
		t.Fatal(err)
	}
	o := task.Output
	if o.HandledBy != "python" || o.Charged != 42 || o.Receipt != "rcpt-py-ok/1/b" ||
		string(o.Input) != `{"amount":42}` || string(o.PreviousOutput) != `{"amount":42}` {
		t.Fatalf("task output: %s\nagent log:\n%s", r.body, out)
	}
	r = e.waitState("py-bad", "Compensated")
	if !strings.Contains(string(r.body), "invalid amount -1") {
		t.Fatalf("compensated task: %s\nagent log:\n%s", r.body, out)
	}
}

// FuzzDecodeAgent fuzzes the decoders of the agent routes (poll, complete,
// fail) and the token parser: errors are 4xx API errors; what is accepted
// is within the limits.
func FuzzDecodeAgent(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"max":5,"wait_ms":1000}`, `{"max":0}`, `{"wait_ms":-1}`, `{"Max":1}`,
		`{"token":"12.0123456789abcdef0123456789abcdef","output":{"ok":true}}`,
		`{"token":"12.0123456789abcdef0123456789abcdef","error":"busy","permanent":false}`,
		`{"token":5}`, `{"token":"x","output":}`, `{} {}`, `[]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if n, wait, err := DecodePoll(b); err != nil {
			checkDecodeErr(t, err)
		} else if n < 1 || n > MaxPollRequests || wait < 0 || wait > MaxPollWait {
			t.Fatalf("poll accepted max %d, wait %v", n, wait)
		}
		if req, err := DecodeComplete(b); err != nil {
			checkDecodeErr(t, err)
		} else {
			if req.Token == "" || !json.Valid(req.Output) {
				t.Fatalf("complete accepted %+v", req)
			}
			if claim, err := parseToken(req.Token, 12); err != nil {
				checkDecodeErr(t, err)
			} else if !strings.HasPrefix(claim, claimPrefix) || len(claim) != len(claimPrefix)+32 {
				t.Fatalf("token %q gave claim %q", req.Token, claim)
			}
		}
		if req, err := DecodeFail(b); err != nil {
			checkDecodeErr(t, err)
		} else if req.Token == "" || req.Error == "" || len(req.Error) > maxAgentError {
			t.Fatalf("fail accepted %+v", req)
		}
	})
}

// The waker routes a notification to the polls of its agent only, and
// TopicAll to every poll.
func TestAgentWakerRouting(t *testing.T) {
	e, _ := newAgentEnv(t, testutilSQLite(t), Options{})
	a := &e.h.agentWake
	w1, un1 := a.subscribe(e.h, "one")
	defer un1()
	w2, un2 := a.subscribe(e.h, "two")
	fired := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	a.wake(notifier.Parse(store.TopicRequests("one")))
	if !fired(w1) || fired(w2) {
		t.Fatal("requests:one did not wake exactly the poll of one")
	}
	a.wake(notifier.Parse(store.TopicReplies("x")))
	a.wake(notifier.Parse(store.TopicTasks))
	if fired(w1) || fired(w2) {
		t.Fatal("other topics woke a poll")
	}
	a.wake(notifier.Parse(store.TopicAll))
	if !fired(w1) || !fired(w2) {
		t.Fatal("TopicAll did not wake every poll")
	}
	un2()
	a.wake(notifier.Parse(store.TopicRequests("two")))
	if fired(w2) || a.waiters["two"] != nil {
		t.Fatal("an unsubscribed poll was woken or kept")
	}
	if a.listening() {
		t.Fatal("SQLite has no listener, yet the waker says it listens")
	}
}

// On PostgreSQL a waiting poll is woken by the notification of the
// dispatch (LISTEN/NOTIFY), not by polling: with a poll interval of an
// hour it still returns as soon as the task's request is dispatched, and,
// with no redelivery delay, as soon as a transient failure gives it back.
func TestRemoteAgentNotifyWakesPoll(t *testing.T) {
	e, _ := newAgentEnv(t, testutil.Postgres(t), Options{AgentPollInterval: time.Hour, Redelivery: store.Redelivery{First: -1}})
	// Make sure the handler's listener is up: notify a probe topic until a
	// subscriber of it is woken.
	probe, unsubscribe := e.h.agentWake.subscribe(e.h, "probe")
	defer unsubscribe()
	if !e.h.agentWake.listening() {
		t.Fatal("PostgreSQL store, yet the waker does not listen")
	}
	deadline := time.Now().Add(20 * time.Second)
	for woken := false; !woken; {
		if err := e.drv.InTx(context.Background(), func(ctx context.Context, x store.Executor) error {
			return store.Notify(ctx, x, &store.NotifyParams{Topic: store.TopicRequests("probe")})
		}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-probe:
			woken = true
		case <-time.After(50 * time.Millisecond):
			if time.Now().After(deadline) {
				t.Fatal("the listener did not deliver a notification within 20s")
			}
		}
	}
	waitingPoll := func() chan []droverapi.AgentRequest {
		done := make(chan []droverapi.AgentRequest, 1)
		go func() {
			rec := httptest.NewRecorder()
			req := newReq("POST", "/v1/agents/worker/poll", `{"wait_ms":60000}`)
			req.Header.Set("Authorization", "Bearer "+agentTok)
			e.h.ServeHTTP(rec, req)
			var out struct {
				Requests []droverapi.AgentRequest `json:"requests"`
			}
			_ = json.Unmarshal(rec.Body.Bytes(), &out)
			done <- out.Requests
		}()
		for !pollWaiting(e.h) {
			time.Sleep(5 * time.Millisecond)
		}
		return done
	}
	done := waitingPoll()
	e.do("POST", "/v1/tasks", submitTok, `{"workflow":"remote","id":"nt"}`).must(t, 201)
	var first droverapi.AgentRequest
	select {
	case got := <-done:
		if len(got) != 1 || got[0].TaskID != "nt" {
			t.Fatalf("woken poll got %+v", got)
		}
		first = got[0]
	case <-time.After(15 * time.Second):
		t.Fatal("the waiting poll was not woken by the dispatch's notification within 15s")
	}
	done = waitingPoll()
	e.do("POST", failPath(first.ID), agentTok, tokenBody(first.Token, `"error":"busy","permanent":false`)).must(t, 200)
	select {
	case got := <-done:
		if len(got) != 1 || got[0].ID != first.ID {
			t.Fatalf("poll woken by the transient failure got %+v, want request %d", got, first.ID)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the waiting poll was not woken by the transient failure's notification within 15s")
	}
}

// A poll that fails after its claim committed gives the requests back, so
// they are not left to the supervisor until CompleteBy.
func TestRemotePollErrorReleasesClaim(t *testing.T) {
	var slow atomic.Bool
	slow.Store(true)
	e, _ := newAgentEnv(t, testutilSQLite(t), Options{RequestTimeout: 300 * time.Millisecond,
		RemoteInput: func(ctx context.Context, req *drover.AgentRequest) ([]byte, error) {
			if slow.Load() {
				// A store read that outlives the request timeout: the
				// hand-back in the same context fails too.
				<-ctx.Done()
				return nil, ctx.Err()
			}
			return req.Input, nil
		}})
	e.do("POST", "/v1/tasks", submitTok, `{"workflow":"remote","id":"t-1","input":{"n":1}}`).must(t, 201)
	id := waitRequest(t, e, "worker", 1)
	if r := e.do("POST", "/v1/agents/worker/poll", agentTok, `{"wait_ms":0}`); r.status < 500 {
		t.Fatalf("poll with a failing input mapping: %d %s, want a 5xx", r.status, r.body)
	}
	q, err := e.drv.Reader().RequestGet(context.Background(), &store.RequestGetParams{ID: id})
	if err != nil {
		t.Fatal(err)
	}
	if q.ClaimedBy != "" {
		t.Fatalf("request %d still claimed by %q after the failed poll", id, q.ClaimedBy)
	}
	slow.Store(false)
	if got := e.pollOne("worker"); got.TaskID != "t-1" {
		t.Fatalf("polled %+v, want t-1's request again", got)
	}
}
