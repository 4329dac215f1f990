package httpapi

import (
	"strings"
	"testing"
)

// GET /v1/queues is a keyset-paginated listing like the others.
func TestQueueListPages(t *testing.T) {
	e := newEnv(t, testutilSQLite(t), Options{})
	for _, q := range []string{"q-c", "q-a", "q-b"} {
		e.do("POST", "/v1/queues/"+q+"/messages", submitTok, `{"session_id":"s","body":1}`).must(t, 201)
	}
	names := func(r *response) string {
		var out []string
		for _, q := range r.json["queues"].([]any) {
			out = append(out, q.(map[string]any)["name"].(string))
		}
		return strings.Join(out, ",") + " next=" + r.str("next_after")
	}
	for target, want := range map[string]string{
		"/v1/queues?limit=2":           "q-a,q-b next=q-b",
		"/v1/queues?limit=2&after=q-b": "q-c next=",
		"/v1/queues":                   "q-a,q-b,q-c next=",
		"/v1/queues?after=q-c":         " next=",
		"/v1/queues?limit=3":           "q-a,q-b,q-c next=q-c",
	} {
		if got := names(e.do("GET", target, submitTok, "").must(t, 200)); got != want {
			t.Errorf("%s: %s, want %s", target, got, want)
		}
	}
	for _, target := range []string{"/v1/queues?limit=0", "/v1/queues?limit=1001", "/v1/queues?after=a%2Fb", "/v1/queues?after=a&after=b"} {
		e.do("GET", target, submitTok, "").mustError(t, 400, "invalid_parameter")
	}
	e.do("GET", "/v1/queues?page=2", submitTok, "").mustError(t, 400, "unknown_parameter")
}

// With QueueCreateOperator only operator tokens create queues by
// publishing; other tokens publish to existing queues only.
func TestQueueCreateOperator(t *testing.T) {
	if _, err := New(nil, nil, Options{}); err == nil {
		t.Fatal("New without clients succeeded")
	}
	e := newEnv(t, testutilSQLite(t), Options{QueueCreate: QueueCreateOperator})
	before := e.snapshot()
	r := e.do("POST", "/v1/queues/new/messages", submitTok, `{"session_id":"s","body":1}`).mustError(t, 403, "forbidden")
	if !strings.Contains(r.errMsg(), `queue "new" does not exist`) || !strings.Contains(r.errMsg(), "PUT /v1/queues/new/policy") {
		t.Fatalf("message: %s", r.errMsg())
	}
	e.do("POST", "/v1/queues/new/messages", submitTok, `{"messages":[{"session_id":"s","body":1}]}`).mustError(t, 403, "forbidden")
	if e.snapshot() != before {
		t.Fatal("a refused publish changed the store")
	}
	e.do("POST", "/v1/queues/ops/messages", operatorTok, `{"session_id":"s","body":1}`).must(t, 201)
	e.do("PUT", "/v1/queues/new/policy", operatorTok, `{"max_delivery_count":3}`).must(t, 201)
	e.do("POST", "/v1/queues/new/messages", submitTok, `{"session_id":"s","body":1}`).must(t, 201)
	e.do("POST", "/v1/queues/ops/messages", submitTok, `{"session_id":"s","body":2}`).must(t, 201)

	// By default publishing creates the queue, and a bad setting is refused.
	d := newEnv(t, testutilSQLite(t), Options{})
	d.do("POST", "/v1/queues/new/messages", submitTok, `{"session_id":"s","body":1}`).must(t, 201)
	if _, err := New(d.d, d.q, Options{Tokens: testTokens, QueueCreate: "admin"}); err == nil || !strings.Contains(err.Error(), `QueueCreate "admin"`) {
		t.Fatalf("QueueCreate admin: %v", err)
	}
}
