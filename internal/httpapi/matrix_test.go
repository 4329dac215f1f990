package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/drover-run/drover/droverapi"
	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/store"
)

// apiOp is one operation of the served OpenAPI document.
type apiOp struct {
	method, path string // "GET", "/v1/tasks/{id}"
	scope        Scope  // x-drover-scope; "" for a public route
	agent        string // x-drover-agent: "path", "request" or ""
	security     []any  // the operation's security requirement
}

func (o apiOp) String() string { return o.method + " " + o.path }

// servedOps reads the operations of the document the handler serves at
// /openapi.json.
func servedOps(t *testing.T, e *testEnv) []apiOp {
	t.Helper()
	r := e.do("GET", "/openapi.json", "", "").must(t, 200)
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(r.body, &doc); err != nil {
		t.Fatalf("/openapi.json: %v", err)
	}
	var ops []apiOp
	for p, methods := range doc.Paths {
		for m, raw := range methods {
			if m == "parameters" {
				continue
			}
			var op struct {
				Scope    *string `json:"x-drover-scope"`
				Agent    string  `json:"x-drover-agent"`
				Security []any   `json:"security"`
			}
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatalf("%s %s: %v", m, p, err)
			}
			o := apiOp{method: strings.ToUpper(m), path: p, agent: op.Agent, security: op.Security}
			if op.Scope != nil {
				o.scope = Scope(*op.Scope)
			} else if op.Security == nil || len(op.Security) > 0 {
				t.Errorf("%s: no x-drover-scope (\"\" for a public route without security)", o)
			}
			ops = append(ops, o)
		}
	}
	sort.Slice(ops, func(i, j int) bool { return ops[i].String() < ops[j].String() })
	return ops
}

// credential is one way of calling: a bearer token (or none) and which
// operations it may reach by what the document says.
type credential struct {
	name   string
	secret string
	// allowed reports whether the document lets it through op (the status
	// is then anything but 401 and 403).
	allowed func(op apiOp) bool
	// status is the refusal otherwise: 401 or 403.
	status int
}

const (
	workerAgentTok = "matrix-worker-token-0123456789"
	otherAgentTok  = "matrix-other-agent-token-0123456789"
	unboundTok     = "matrix-any-agent-token-0123456789"
)

// matrixCredentials are no token, an unknown token, one token of each
// scope, global and (but for the agent scope, which is global only) of
// namespace a, an agent token bound to the agent the routes use
// ("worker"), one bound to another agent, and an unbound one.
func matrixCredentials() ([]credential, []Token) {
	public := func(op apiOp) bool { return op.scope == "" }
	var tokens []Token
	creds := []credential{
		{name: "no token", allowed: public, status: 401},
		{name: "unknown token", secret: "unknown-token-0123456789", allowed: public, status: 401},
	}
	add := func(name string, tok Token) {
		tokens = append(tokens, tok)
		creds = append(creds, credential{name: name, secret: tok.Secret, status: 403, allowed: func(op apiOp) bool {
			if op.scope == "" {
				return true
			}
			if !tok.has(op.scope) {
				return false
			}
			return op.agent == "" || tok.serves("worker")
		}})
	}
	for _, sc := range scopes {
		switch sc {
		case ScopeAgent:
			add("agent:worker", Token{Secret: workerAgentTok, Scopes: []Scope{ScopeAgent}, Agents: []string{"worker"}})
			add("agent:other", Token{Secret: otherAgentTok, Scopes: []Scope{ScopeAgent}, Agents: []string{"other"}})
			add("agent (unbound)", Token{Secret: unboundTok, Scopes: []Scope{ScopeAgent}})
		case ScopeMetrics:
			add("metrics", Token{Secret: metricsTok, Scopes: []Scope{sc}})
			add("metrics,ns:a", Token{Secret: "matrix-a-metrics-token-0123456789", Scopes: []Scope{sc}, Namespace: "a"})
		case ScopeSubmit:
			add("submit", Token{Secret: submitTok, Scopes: []Scope{sc}})
			add("submit,ns:a", Token{Secret: "matrix-a-submit-token-0123456789", Scopes: []Scope{sc}, Namespace: "a"})
		case ScopeOperator:
			add("operator", Token{Secret: operatorTok, Scopes: []Scope{sc}})
			add("operator,ns:a", Token{Secret: "matrix-a-operator-token-0123456789", Scopes: []Scope{sc}, Namespace: "a"})
		default:
			panic("no credential for scope " + sc)
		}
	}
	return creds, tokens
}

// TestScopeMatrix calls every operation of the served OpenAPI document
// with every credential and checks the answer against what the document
// states: 401 without a known token, 403 without the scope it names (or,
// on an agent route, for a token bound to another agent), neither
// otherwise. It fails on an operation without x-drover-scope, and on a
// route served but not documented or documented but not served, so a new
// route cannot ship unchecked.
func TestScopeMatrix(t *testing.T) {
	drivers(t, func(t *testing.T, open func(t *testing.T) store.Driver) {
		creds, tokens := matrixCredentials()
		e, _ := newAgentEnv(t, open(t), Options{Tokens: tokens, Metrics: prometheus.NewRegistry()})
		ops := servedOps(t, e)

		// The document and the routes are the same set, with the same scopes.
		documented := map[string]apiOp{}
		for _, o := range ops {
			documented[o.String()] = o
		}
		for _, rt := range e.h.routes {
			o, ok := documented[rt.method+" "+rt.pattern]
			if !ok {
				t.Errorf("served but not in /openapi.json: %s %s", rt.method, rt.pattern)
				continue
			}
			if o.scope != rt.scope {
				t.Errorf("%s: /openapi.json says scope %q, the route needs %q", o, o.scope, rt.scope)
			}
			delete(documented, o.String())
			wantSec := fmt.Sprint([]any{map[string]any{"bearer": []any{string(rt.scope)}}})
			if rt.scope == "" {
				wantSec = "[]"
			}
			if got := fmt.Sprint(o.security); got != wantSec {
				t.Errorf("%s: security %s, want %s", o, got, wantSec)
			}
			if strings.HasPrefix(rt.pattern, "/v1/agents/") && o.agent != "path" && o.agent != "request" {
				t.Errorf("%s: an agent route without x-drover-agent (path or request)", o)
			}
		}
		for k := range documented {
			t.Errorf("in /openapi.json but not served: %s", k)
		}

		e.do("POST", "/v1/tasks", submitTok, `{"workflow":"remote","id":"mx-1"}`).must(t, 201)
		e.do("POST", "/v1/queues/mq/messages", submitTok, `{"session_id":"s","body":1}`).must(t, 201)
		srv := httptest.NewServer(e.h)
		t.Cleanup(srv.Close)
		for _, o := range ops {
			for _, c := range creds {
				target, body := matrixRequest(t, e, o)
				req := newReq(o.method, target, body)
				// Event routes answer a JSON page, not a stream.
				req.Header.Set("Accept", "application/json")
				if c.secret != "" {
					req.Header.Set("Authorization", "Bearer "+c.secret)
				}
				r := e.serve(req)
				refused := r.status == 401 || r.status == 403
				switch {
				case c.allowed(o) && refused:
					t.Errorf("%s with %s: %d, want it let through: %s", o, c.name, r.status, r.body)
				case !c.allowed(o) && r.status != c.status:
					t.Errorf("%s with %s: %d, want %d: %s", o, c.name, r.status, c.status, r.body)
				}
			}
		}
	})
}

var pathParam = regexp.MustCompile(`\{(\w+)\}`)

// matrixRequest makes a request target and body for op that the route
// gets past its input checks with, so that an authorization check after
// them is reached too. A completion or failure gets a request token of its
// own, freshly handed out for the agent "worker".
func matrixRequest(t *testing.T, e *testEnv, o apiOp) (string, string) {
	t.Helper()
	values := map[string]string{"id": "mx-1", "queue": "mq", "session": "s", "seq": "1", "agent": "worker", "name": "approved"}
	if strings.HasPrefix(o.path, "/v1/schedules/") {
		values["name"] = "mx-schedule"
	}
	body := ""
	if o.method != "GET" {
		body = "{}"
	}
	switch {
	case o.path == "/v1/alerts/{id}/ack":
		values["id"] = "1"
	case o.path == "/v1/agents/{agent}/poll":
		body = `{"wait_ms":0}`
	case strings.HasPrefix(o.path, "/v1/agents/requests/{id}/"):
		e.do("POST", "/v1/tasks", submitTok, `{"workflow":"remote"}`).must(t, 201)
		r := e.do("POST", "/v1/agents/worker/poll", operatorTok, `{"wait_ms":20000}`).must(t, 200)
		var got struct {
			Requests []droverapi.AgentRequest `json:"requests"`
		}
		if err := json.Unmarshal(r.body, &got); err != nil || len(got.Requests) != 1 {
			t.Fatalf("poll for a fixture request: %s", r.body)
		}
		values["id"] = fmt.Sprint(got.Requests[0].ID)
		body = tokenBody(got.Requests[0].Token, `"output":1`)
		if strings.HasSuffix(o.path, "/fail") {
			body = tokenBody(got.Requests[0].Token, `"error":"x","permanent":true`)
		}
	}
	target := pathParam.ReplaceAllStringFunc(o.path, func(m string) string {
		v, ok := values[strings.Trim(m, "{}")]
		if !ok {
			t.Fatalf("%s: no value for the path parameter %s", o, m)
		}
		return v
	})
	return target, body
}

// TestNamespaceMatrix calls every operation of the served OpenAPI document
// that acts in a namespace with tokens of namespace a (each scope, and a
// global token naming a with the Drover-Namespace header), with the path
// naming namespace b's objects (its task, queue, session and alert): a
// listing or a creation may succeed in a, every other call, b's session
// lock token included, is 404 (or 403 without the scope), and no answer
// carries b's data; b's objects are unchanged afterwards.
func TestNamespaceMatrix(t *testing.T) {
	drivers(t, func(t *testing.T, open func(t *testing.T) store.Driver) {
		_, tokens := matrixCredentials()
		tokens = append(tokens, nsTokens[:4]...)
		e, _ := newAgentEnv(t, open(t), Options{Tokens: tokens, Metrics: prometheus.NewRegistry()})
		ops := servedOps(t, e)
		const marker = "b-secret-4711"
		e.do("POST", "/v1/tasks", bSubmitTok, `{"workflow":"remote","id":"mx-1","input":{"m":"`+marker+`"}}`).must(t, 201)
		e.do("POST", "/v1/queues/mq/messages", bSubmitTok, `{"session_id":"s","body":{"m":"`+marker+`"}}`).must(t, 201)
		e.do("POST", "/v1/tasks/mx-1/cancel", bOperatorTok, `{"reason":"`+marker+`"}`).must(t, 200)
		// An alert of b's task, and b's lock of its session: a caller in a
		// that knows their IDs still cannot use them.
		var alert dt.Event
		if err := e.drv.InTx(context.Background(), func(ctx context.Context, x store.Executor) error {
			alert = dt.Event{TaskID: "b/mx-1", StepIndex: 0, Type: dt.EventStepFailed, State: dt.Cancelled, Alert: true, Message: marker, CreatedAt: time.Now()}
			return x.EventInsertMany(ctx, &store.EventInsertManyParams{Events: []*dt.Event{&alert}})
		}); err != nil {
			t.Fatal(err)
		}
		lock := e.do("POST", "/v1/queues/mq/sessions:accept", bSubmitTok, `{}`).must(t, 200).str("lock_token")
		if lock == "" {
			t.Fatal("b's accept got no session")
		}
		before := e.snapshot()
		// Routes that act in the caller's own namespace whatever the path:
		// listings, and creations there.
		own := map[string]bool{
			"GET /v1/tasks": true, "GET /v1/events": true, "GET /v1/alerts": true, "GET /v1/queues": true,
			"POST /v1/tasks": true, "POST /v1/queues/{queue}/messages": true, "PUT /v1/queues/{queue}/policy": true,
			"POST /v1/queues/{queue}/sessions:accept": true, "GET /v1/schedules": true,
		}
		type caller struct {
			name, secret, ns string
			scope            Scope
		}
		callers := []caller{
			{"a submit", aSubmitTok, "", ScopeSubmit}, {"a operator", aOperatorTok, "", ScopeOperator},
			{"global submit in a", submitTok, "a", ScopeSubmit}, {"global operator in a", operatorTok, "a", ScopeOperator},
		}
		for _, o := range ops {
			if o.scope == "" || o.scope == ScopeMetrics || o.agent != "" {
				continue // public, the server's metrics, remote agents: not in a namespace
			}
			for _, c := range callers {
				target, body := matrixRequest(t, e, o)
				switch o.String() {
				case "POST /v1/alerts/{id}/ack":
					target = "/v1/alerts/" + itoa(alert.ID) + "/ack"
				case "POST /v1/tasks":
					body = `{"workflow":"remote","id":"a-own"}`
				case "POST /v1/queues/{queue}/messages":
					body = `{"session_id":"a-own","body":1}`
				case "PUT /v1/queues/{queue}/policy":
					body = `{"max_delivery_count":7}`
				case "POST /v1/queues/{queue}/sessions/{session}/settle":
					body = `{"lock_token":"` + lock + `","seq":1,"outcome":"complete"}`
				case "POST /v1/queues/{queue}/sessions/{session}/receive", "POST /v1/queues/{queue}/sessions/{session}/renew",
					"POST /v1/queues/{queue}/sessions/{session}/release":
					body = `{"lock_token":"` + lock + `"}`
				}
				req := newReq(o.method, target, body)
				req.Header.Set("Accept", "application/json")
				req.Header.Set("Authorization", "Bearer "+c.secret)
				if c.ns != "" {
					req.Header.Set(HeaderNamespace, c.ns)
				}
				r := e.serve(req)
				if strings.Contains(string(r.body), marker) {
					t.Errorf("%s with %s: b's data in the answer: %s", o, c.name, r.body)
				}
				switch {
				case c.scope != ScopeOperator && o.scope == ScopeOperator:
					if r.status != 403 {
						t.Errorf("%s with %s: %d, want 403: %s", o, c.name, r.status, r.body)
					}
				case own[o.String()]:
					if r.status >= 400 {
						t.Errorf("%s with %s: %d, want it served in a: %s", o, c.name, r.status, r.body)
					}
				case r.status != 404:
					t.Errorf("%s with %s: %d, want 404: %s", o, c.name, r.status, r.body)
				}
			}
		}
		// b's objects: what b sees is as before, apart from a's new ones.
		for _, p := range []string{"/v1/tasks/mx-1", "/v1/queues/mq/sessions/s/messages"} {
			r := e.do("GET", p, bSubmitTok, "").must(t, 200)
			if !strings.Contains(string(r.body), marker) {
				t.Errorf("%s: b's data gone: %s", p, r.body)
			}
		}
		if r := e.do("GET", "/v1/tasks/mx-1", bSubmitTok, "").must(t, 200); r.str("state") != "Cancelled" {
			t.Errorf("b's task is %s", r.str("state"))
		}
		if r := e.do("GET", "/v1/alerts", bSubmitTok, "").must(t, 200); strings.Contains(string(r.body), `"acknowledged":{`) {
			t.Errorf("b's alert was acknowledged: %s", r.body)
		}
		after := e.snapshot()
		for _, line := range strings.Split(before, "\n") {
			if strings.Contains(line, "b/") && !strings.Contains(after, line) {
				t.Errorf("b's object changed: %s", line)
			}
		}
	})
}
