package httpapi

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/droverapi"
	"github.com/drover-run/drover/store"
)

const (
	paymentsTok = "payments-agent-token-0123456789"
	workerTok   = "worker-agent-token-0123456789"
	anyAgentTok = "any-agent-token-0123456789"
)

// newBindingEnv builds a client that runs no agent (scheduler and
// supervisor only), so the requests of every agent wait in the store:
// "payments" and "worker" are remote agents, "refunds" runs in a server's
// process (Config.Agents). Tokens: payments-only, worker-only, every
// remote agent (the plain agent scope), submit and operator.
func newBindingEnv(t *testing.T, drv store.Driver) *testEnv {
	t.Helper()
	cfg := drover.Config{
		Store: drv, PollInterval: 10 * time.Millisecond, SupervisorInterval: 20 * time.Millisecond,
		Roles: drover.Roles{Scheduler: true, Supervisor: true},
		Workflows: []drover.Workflow{
			{Name: "pay", Steps: []drover.Step{{Name: "charge", Agent: "payments"}}},
			{Name: "refund", Steps: []drover.Step{{Name: "refund", Agent: "refunds"}}},
		},
		Agents: []drover.Agent{{Name: "refunds", Func: func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) {
			return []byte(`"refunded"`), nil
		}}},
		ExternalAgents: []string{"payments", "worker"},
	}
	opts := Options{Tokens: append(append([]Token(nil), testTokens...),
		Token{Secret: paymentsTok, Scopes: []Scope{ScopeAgent}, Agents: []string{"payments"}},
		Token{Secret: workerTok, Scopes: []Scope{ScopeAgent}, Agents: []string{"worker"}},
		Token{Secret: anyAgentTok, Scopes: []Scope{ScopeAgent}})}
	return startEnv(t, cfg, opts)
}

// pollAs polls for agent with token and returns the answer.
func (e *testEnv) pollAs(token, agent, body string) *response {
	e.t.Helper()
	return e.do("POST", "/v1/agents/"+agent+"/poll", token, body)
}

// requestWaits reports whether agent has an unclaimed request.
func (e *testEnv) requestWaits(agent string) bool {
	e.t.Helper()
	ok, err := e.drv.Reader().RequestAvailable(context.Background(), &store.RequestAvailableParams{Agent: agent, Now: time.Now()})
	if err != nil {
		e.t.Fatal(err)
	}
	return ok
}

// waitRequest waits until agent has an unclaimed request.
func (e *testEnv) waitRequest(agent string) {
	e.t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !e.requestWaits(agent); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			e.t.Fatalf("no request for %s within 20s", agent)
		}
	}
}

// An agent token serves only the remote agents it is bound to; no token
// (not even an operator's or an unbound agent token) is handed the
// requests of an agent that runs in a server's process, and a completion
// or failure of another agent's request is refused in its transaction.
func TestAgentTokenBinding(t *testing.T) {
	drivers(t, func(t *testing.T, open func(t *testing.T) store.Driver) {
		e := newBindingEnv(t, open(t))
		e.do("POST", "/v1/tasks", submitTok, `{"workflow":"refund","id":"rf-1","input":{"card":"4111111111111111"}}`).must(t, 201)
		e.do("POST", "/v1/tasks", submitTok, `{"workflow":"pay","id":"pay-1","input":{"amount":42}}`).must(t, 201)
		e.waitRequest("refunds")
		e.waitRequest("payments")

		// The in-process agent's request is never handed out.
		for _, tok := range []string{paymentsTok, workerTok} {
			r := e.pollAs(tok, "refunds", `{"wait_ms":0}`).mustError(t, 403, "forbidden")
			if !strings.Contains(r.errMsg(), `may not serve the agent "refunds"`) {
				t.Fatalf("message: %s", r.errMsg())
			}
		}
		for _, tok := range []string{anyAgentTok, operatorTok} {
			r := e.pollAs(tok, "refunds", `{"wait_ms":0}`).mustError(t, 404, "not_found")
			if !strings.Contains(r.errMsg(), `agent "refunds" is not a remote agent`) {
				t.Fatalf("message: %s", r.errMsg())
			}
		}
		if !e.requestWaits("refunds") {
			t.Fatal("a poll claimed the in-process agent's request")
		}

		// A token bound to worker does not get payments' request.
		e.pollAs(workerTok, "payments", `{"wait_ms":0}`).mustError(t, 403, "forbidden")
		if !e.requestWaits("payments") {
			t.Fatal("a refused poll claimed the request")
		}
		r := e.pollAs(paymentsTok, "payments", `{"wait_ms":20000}`).must(t, 200)
		var got struct {
			Requests []droverapi.AgentRequest `json:"requests"`
		}
		if err := json.Unmarshal(r.body, &got); err != nil || len(got.Requests) != 1 || got.Requests[0].TaskID != "pay-1" {
			t.Fatalf("payments poll: %s", r.body)
		}
		req := got.Requests[0]

		// Another agent's token cannot act on the request, even with its
		// request token: nothing changes, and the holder still can.
		before := e.snapshot()
		e.do("POST", completePath(req.ID), workerTok, tokenBody(req.Token, `"output":"forged"`)).mustError(t, 403, "forbidden")
		e.do("POST", failPath(req.ID), workerTok, tokenBody(req.Token, `"error":"x","permanent":true`)).mustError(t, 403, "forbidden")
		e.do("POST", failPath(req.ID), workerTok, tokenBody(req.Token, `"error":"x"`)).mustError(t, 403, "forbidden")
		if after := e.snapshot(); after != before {
			t.Fatalf("refused completions changed the store:\n%s\n---\n%s", before, after)
		}
		e.do("POST", completePath(req.ID), paymentsTok, tokenBody(req.Token, `"output":"charged"`)).must(t, 200)
		e.waitState("pay-1", "Processed")
	})
}

func TestParseAgentScopes(t *testing.T) {
	toks, err := ParseTokens(strings.NewReader("abcdefghijklmnop1 agent:payments,agent:refunds pay\nabcdefghijklmnop2 agent\nabcdefghijklmnop3 submit,agent:x\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !toks[0].serves("payments") || !toks[0].serves("refunds") || toks[0].serves("http") || toks[0].has(ScopeSubmit) || !toks[0].has(ScopeAgent) {
		t.Fatalf("bound token: %+v", toks[0])
	}
	if !toks[1].serves("anything") || !toks[1].unboundAgent() {
		t.Fatalf("plain agent token: %+v", toks[1])
	}
	if !toks[2].has(ScopeSubmit) || !toks[2].serves("x") || toks[2].serves("y") {
		t.Fatalf("submit and agent:x: %+v", toks[2])
	}
	for bad, want := range map[string]string{
		"abcdefghijklmnop1 agent:":                            "agent name",
		"abcdefghijklmnop1 agent:a/b":                         `contains "/"`,
		"abcdefghijklmnop1 agent,agent:x":                     "exclude each other",
		"abcdefghijklmnop1 agents:x":                          "unknown scope",
		"abcdefghijklmnop1 agent:" + strings.Repeat("a", 201): "agent name",
	} {
		_, err := ParseTokens(strings.NewReader(bad))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error containing %q", bad, err, want)
		}
	}
	// A token listing agents needs the agent scope; a scope must be known.
	if _, err := newAuthenticator([]Token{{Secret: "abcdefghijklmnop1", Scopes: []Scope{ScopeSubmit}, Agents: []string{"x"}}}); err == nil {
		t.Fatal("agents without the agent scope accepted")
	}
	if _, err := newAuthenticator([]Token{{Secret: "abcdefghijklmnop1", Scopes: []Scope{"admin"}}}); err == nil || !strings.Contains(err.Error(), `unknown scope "admin"`) {
		t.Fatalf("unknown scope: %v", err)
	}
}
