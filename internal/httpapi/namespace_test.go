package httpapi

import (
	"context"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/store"
)

const (
	aSubmitTok   = "ns-a-submit-token-0123456789"
	aOperatorTok = "ns-a-operator-token-0123456789"
	bSubmitTok   = "ns-b-submit-token-0123456789"
	bOperatorTok = "ns-b-operator-token-0123456789"
)

// nsTokens: the global tokens of testTokens, and a submit and an operator
// token in each of the namespaces a and b.
var nsTokens = append([]Token{
	{Secret: aSubmitTok, Scopes: []Scope{ScopeSubmit}, Namespace: "a"},
	{Secret: aOperatorTok, Scopes: []Scope{ScopeOperator}, Namespace: "a"},
	{Secret: bSubmitTok, Scopes: []Scope{ScopeSubmit}, Namespace: "b"},
	{Secret: bOperatorTok, Scopes: []Scope{ScopeOperator}, Namespace: "b"},
}, testTokens...)

// doNS is do with the Drover-Namespace header.
func (e *testEnv) doNS(method, target, token, ns, body string) *response {
	e.t.Helper()
	req := newReq(method, target, body)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set(HeaderNamespace, ns)
	return e.serve(req)
}

// TestNamespaceIsolation: tokens of namespaces a and b use the same task
// ID, ordering key and queue name without meeting: each sees only its own
// tasks, events, alerts and queues, gets 404 for the other's objects (never
// their data) and cannot act on them; a global token reaches a namespace
// by the header and the default namespace without it.
func TestNamespaceIsolation(t *testing.T) {
	drivers(t, func(t *testing.T, open func(t *testing.T) store.Driver) {
		e := newEnv(t, open(t), Options{Tokens: nsTokens})
		// The same ID in a, b and the default namespace: three tasks.
		a := e.do("POST", "/v1/tasks", aSubmitTok, `{"workflow":"external","id":"order-1","input":{"secret":"a"},"ordering_key":"k"}`).must(t, 201)
		b := e.do("POST", "/v1/tasks", bSubmitTok, `{"workflow":"fail","id":"order-1","input":{"secret":"b"},"ordering_key":"k"}`).must(t, 201)
		d := e.do("POST", "/v1/tasks", submitTok, `{"workflow":"echo","id":"order-1","input":{"secret":"default"}}`).must(t, 201)
		for _, r := range []*response{a, b, d} {
			if r.str("id") != "order-1" || r.header.Get("Location") != "/v1/tasks/order-1" {
				t.Fatalf("id %q, Location %q: want the caller's ID", r.str("id"), r.header.Get("Location"))
			}
		}
		if a.str("ordering_key") != "k" {
			t.Fatalf("ordering_key %q, want k", a.str("ordering_key"))
		}
		// b's task does not wait behind a's (same key "k", never finishing).
		e.waitStateAs(bSubmitTok, "order-1", "Error")
		e.waitState("order-1", "Processed")

		secret := func(tok string) string {
			r := e.do("GET", "/v1/tasks/order-1", tok, "").must(t, 200)
			return string(r.body)
		}
		if s := secret(aSubmitTok); !strings.Contains(s, `"secret":"a"`) || strings.Contains(s, `"secret":"b"`) {
			t.Fatalf("a reads %s", s)
		}
		if s := secret(bSubmitTok); !strings.Contains(s, `"secret":"b"`) {
			t.Fatalf("b reads %s", s)
		}
		if s := secret(submitTok); !strings.Contains(s, `"secret":"default"`) {
			t.Fatalf("the default namespace reads %s", s)
		}
		// A global token reaches a's task with the header.
		if r := e.doNS("GET", "/v1/tasks/order-1", submitTok, "a", "").must(t, 200); !strings.Contains(string(r.body), `"secret":"a"`) {
			t.Fatalf("global token in a reads %s", r.body)
		}
		// A namespaced token cannot name another namespace.
		e.doNS("GET", "/v1/tasks/order-1", aSubmitTok, "b", "").mustError(t, 403, "forbidden")
		e.doNS("GET", "/v1/tasks/order-1", aSubmitTok, "default", "").mustError(t, 403, "forbidden")
		e.doNS("GET", "/v1/tasks/order-1", submitTok, "no/such", "").mustError(t, 400, "")

		// Only b's task exists in b: a's token gets 404 for an ID only b has.
		e.do("POST", "/v1/tasks", bSubmitTok, `{"workflow":"echo","id":"only-b"}`).must(t, 201)
		for _, tok := range []string{aSubmitTok, submitTok} {
			e.do("GET", "/v1/tasks/only-b", tok, "").mustError(t, 404, "not_found")
			e.do("GET", "/v1/tasks/only-b/events", tok, "").mustError(t, 404, "not_found")
		}
		for _, tok := range []string{aOperatorTok, operatorTok} {
			e.do("POST", "/v1/tasks/only-b/cancel", tok, `{}`).mustError(t, 404, "not_found")
			e.do("POST", "/v1/tasks/only-b/resubmit", tok, `{}`).mustError(t, 404, "not_found")
		}

		// A namespace's ordering key is its own: a and b both use "k".
		for tok, want := range map[string]string{aSubmitTok: `"secret":"a"`, bSubmitTok: `"secret":"b"`} {
			r := e.do("GET", "/v1/tasks?ordering_key=k", tok, "").must(t, 200)
			if tasks, _ := r.json["tasks"].([]any); len(tasks) != 1 || !strings.Contains(string(r.body), want) {
				t.Fatalf("ordering_key=k: %s, want the one task with %s", r.body, want)
			}
		}
		if r := e.do("GET", "/v1/tasks?ordering_key=k", submitTok, "").must(t, 200); len(r.json["tasks"].([]any)) != 0 {
			t.Fatalf("ordering_key=k in the default namespace: %s", r.body)
		}

		// Listings: each namespace its own.
		ids := func(tok string) []string {
			r := e.do("GET", "/v1/tasks", tok, "").must(t, 200)
			var out []string
			for _, x := range r.json["tasks"].([]any) {
				out = append(out, x.(map[string]any)["id"].(string))
			}
			return out
		}
		if got := ids(aSubmitTok); strings.Join(got, ",") != "order-1" {
			t.Fatalf("a lists %v", got)
		}
		if got := ids(bSubmitTok); strings.Join(got, ",") != "only-b,order-1" {
			t.Fatalf("b lists %v", got)
		}
		if got := ids(submitTok); strings.Join(got, ",") != "order-1" {
			t.Fatalf("the default namespace lists %v", got)
		}
		// Events and alerts: b's error alert is b's only.
		alerts := func(tok string) int {
			r := e.do("GET", "/v1/alerts", tok, "").must(t, 200)
			return len(r.json["alerts"].([]any))
		}
		if n := alerts(bSubmitTok); n == 0 {
			t.Fatal("b sees no alert of its failed task")
		}
		if n := alerts(aSubmitTok) + alerts(submitTok); n != 0 {
			t.Fatalf("a and the default namespace see %d alerts of b", n)
		}
		r := e.do("GET", "/v1/alerts", bSubmitTok, "").must(t, 200)
		alert := r.json["alerts"].([]any)[0].(map[string]any)
		if alert["subject"] != "order-1" {
			t.Fatalf("alert subject %v, want order-1", alert["subject"])
		}
		alertID := int64(alert["id"].(float64))
		for _, tok := range []string{aOperatorTok, operatorTok} {
			e.do("POST", "/v1/alerts/"+itoa(alertID)+"/ack", tok, `{}`).mustError(t, 404, "not_found")
		}
		e.do("POST", "/v1/alerts/"+itoa(alertID)+"/ack", bOperatorTok, `{}`).must(t, 200)
		for _, tok := range []string{aSubmitTok, submitTok} {
			req := newReq("GET", "/v1/events", "")
			req.Header.Set("Authorization", "Bearer "+tok)
			req.Header.Set("Accept", "application/json")
			for _, ev := range e.serve(req).must(t, 200).json["events"].([]any) {
				if ev.(map[string]any)["type"] == "error" || ev.(map[string]any)["subject"] == "only-b" {
					t.Fatalf("a foreign event: %v", ev)
				}
			}
		}

		// Queues: the same name in a and b, separate.
		e.do("POST", "/v1/queues/q/messages", aSubmitTok, `{"messages":[{"session_id":"s","body":{"n":"a"}}]}`).must(t, 201)
		e.do("GET", "/v1/queues/q/sessions", bSubmitTok, "").mustError(t, 404, "not_found")
		e.do("GET", "/v1/queues/q/sessions/s/messages", bSubmitTok, "").mustError(t, 404, "not_found")
		e.do("GET", "/v1/queues/q/sessions/s/messages", submitTok, "").mustError(t, 404, "not_found")
		e.do("POST", "/v1/queues/q/sessions:accept", bSubmitTok, `{}`).must(t, 200)
		if r := e.do("GET", "/v1/queues", bSubmitTok, "").must(t, 200); len(r.json["queues"].([]any)) != 0 {
			t.Fatalf("b lists a's queue: %s", r.body)
		}
		if r := e.do("GET", "/v1/queues", aSubmitTok, "").must(t, 200); !strings.Contains(string(r.body), `"name":"q"`) {
			t.Fatalf("a lists %s", r.body)
		}
		if r := e.do("GET", "/v1/queues/q/sessions/s/messages", aSubmitTok, "").must(t, 200); !strings.Contains(string(r.body), `"queue":"q"`) {
			t.Fatalf("a peeks %s", r.body)
		}
		// Stored under qualified names, visible to the library's caller.
		if _, err := e.d.Task(context.Background(), "a/order-1"); err != nil {
			t.Fatal(err)
		}
		if ts, err := e.d.Tasks(context.Background(), drover.ListParams{Namespace: "b"}); err != nil || len(ts) != 2 {
			t.Fatalf("b's tasks from the library: %d, %v", len(ts), err)
		}
	})
}

// waitStateAs is waitState with another token.
func (e *testEnv) waitStateAs(tok, id, state string) {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		r := e.do("GET", "/v1/tasks/"+id, tok, "").must(e.t, 200)
		if r.str("state") == state {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("task %s is %s, want %s: %s", id, r.str("state"), state, r.body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestRedactURL: the userinfo and query of a URL are hidden, the rest
// kept; an unparsable one is hidden whole.
func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"https://h.example/cb?token=s3cret&x=1": "https://h.example/cb?REDACTED",
		"https://user:pw@h.example/cb":          "https://REDACTED@h.example/cb",
		"https://h.example/cb":                  "https://h.example/cb",
		"https://h.example/cb#frag":             "https://h.example/cb",
		"http://h.example:8080/a%2Fb?q":         "http://h.example:8080/a%2Fb?REDACTED",
		"::not a url":                           "REDACTED",
	} {
		if got := redactURL(in); got != want {
			t.Errorf("redactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

const aSubmit2Tok = "ns-a-second-submit-token-0123456789"

// TestNamespaceFairWaitingAndStreams: namespace a's tokens, each within its
// own cap, together stop at the namespace's share of the waiting calls and
// of the event streams (429), so namespace b's long-polls and streams are
// still admitted while a's hold theirs; a's held calls see only a.
func TestNamespaceFairWaitingAndStreams(t *testing.T) {
	drivers(t, func(t *testing.T, open func(t *testing.T) store.Driver) {
		toks := append([]Token{{Secret: aSubmit2Tok, Scopes: []Scope{ScopeSubmit}, Namespace: "a"}}, nsTokens...)
		e := newEnv(t, open(t), Options{Tokens: toks, MaxWaiting: 4, MaxWaitingPerToken: 2, MaxStreams: 4, MaxStreamsPerToken: 2})
		srv := httptest.NewServer(e.h)
		t.Cleanup(srv.Close)
		const accept = "/v1/queues/q/sessions:accept"
		for _, tok := range []string{aSubmitTok, bSubmitTok} {
			e.do("POST", "/v1/queues/q/messages", tok, `{"session_id":"s","body":1,"not_before":"2100-01-01T00:00:00Z"}`).must(t, 201)
		}
		// a fills its share (3 of 4) with two tokens, streams and polls.
		var held []*waiter
		for _, tok := range []string{aSubmitTok, aSubmitTok, aSubmit2Tok} {
			held = append(held, startWait(t, srv, accept, tok, `{"wait_ms":60000}`))
			openStream(t, srv, "/v1/events", tok, "")
		}
		waitCount(t, "waiting calls", e.h.Waiting, 3)
		waitCount(t, "streams", e.h.OpenStreams, 3)
		r := e.do("POST", accept, aSubmit2Tok, `{"wait_ms":1000}`).mustError(t, 429, "too_many_waiting")
		if !strings.Contains(r.errMsg(), "in this namespace (limit 3)") || r.header.Get("Retry-After") == "" {
			t.Fatalf("a's fourth waiting call: %s %v", r.body, r.header)
		}
		_, sr := tryStream(t, srv, "/v1/events", aSubmit2Tok, "")
		if sr == nil {
			t.Fatal("a's fourth stream was served")
		}
		sr.mustError(t, 429, "too_many_streams")
		// b is admitted: a waiting accept and a stream.
		b := startWait(t, srv, accept, bSubmitTok, `{"wait_ms":60000}`)
		waitCount(t, "waiting calls", e.h.Waiting, 4)
		openStream(t, srv, "/v1/events", bSubmitTok, "")
		waitCount(t, "streams", e.h.OpenStreams, 4)
		if w, s := e.h.NamespaceWaiting(), e.h.NamespaceStreams(); w["a"] != 3 || w["b"] != 1 || s["a"] != 3 || s["b"] != 1 {
			t.Fatalf("per namespace: waiting %v, streams %v; want a 3 and b 1 of each", w, s)
		}
		// A message for b's session ends b's wait; a's keep waiting.
		e.do("POST", "/v1/queues/q/messages", bSubmitTok, `{"session_id":"now","body":2}`).must(t, 201)
		select {
		case st := <-b.done:
			if st != 200 {
				t.Fatalf("b's accept: %d", st)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("b's waiting accept did not get b's session")
		}
		for _, w := range held {
			select {
			case st := <-w.done:
				t.Fatalf("a's accept answered %d: it took b's session", st)
			default:
			}
			w.cancel()
			<-w.done
		}
		waitCount(t, "waiting calls", e.h.Waiting, 0)
	})
}
