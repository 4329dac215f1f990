package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/drover-run/drover/store"
)

// seedState gives the store something of everything: a final task, an
// Error task with an alert, a queue with sessions and a dead letter.
func seedState(t *testing.T, e *testEnv) {
	t.Helper()
	e.do("POST", "/v1/tasks", submitTok, `{"workflow":"echo","id":"done","input":{"x":1}}`).must(t, 201)
	e.do("POST", "/v1/tasks", submitTok, `{"workflow":"fail","id":"bad"}`).must(t, 201)
	e.waitState("done", "Processed")
	e.waitState("bad", "Error")
	e.do("POST", "/v1/queues/q/messages", submitTok, `{"messages":[{"session_id":"s","body":1},{"session_id":"s","body":2}]}`).must(t, 201)
	ctx := context.Background()
	rc, err := e.q.AcceptSession(ctx, "q", "s")
	if err != nil {
		t.Fatal(err)
	}
	m, err := rc.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.DeadLetter(ctx, m, "poison"); err != nil {
		t.Fatal(err)
	}
	_ = rc.Close(ctx)
}

// badInputs are request bodies every JSON-taking endpoint must refuse, and
// the error code expected ("" for any 4xx).
var badInputs = []struct {
	name, body, code string
	status           int
}{
	{"malformed", `{"workflow":`, "malformed_json", 400},
	{"not json", `hello`, "malformed_json", 400},
	{"array", `[1,2]`, "", 400},
	{"string", `"x"`, "", 400},
	{"trailing data", `{} {}`, "malformed_json", 400},
	{"trailing garbage", `{}x`, "malformed_json", 400},
	{"unknown field", `{"nope":1}`, "unknown_field", 400},
	{"invalid utf8", "{\"workflow\":\"\xff\"}", "", 400},
	{"oversized", `{"input":"` + strings.Repeat("a", 2<<20) + `"}`, "body_too_large", 413},
}

// bodyRoutes are requests of every endpoint that takes a body, against the
// seeded state; with a valid body each would change the store.
// wrongType has a field of the wrong type, wrongCase a field spelt in
// another case (encoding/json would accept it).
var bodyRoutes = []struct{ method, path, wrongType, wrongCase string }{
	{"POST", "/v1/tasks", `{"workflow":5}`, `{"Workflow":"echo","id":"new"}`},
	{"POST", "/v1/tasks/bad/resubmit", `{"from_step":"1"}`, `{"From_Step":0}`},
	{"POST", "/v1/tasks/done/cancel", `{"reason":false}`, `{"REASON":"x"}`},
	{"POST", "/v1/alerts/1/ack", `{"note":1}`, `{"Note":"x"}`},
	{"POST", "/v1/queues/q/messages", `{"session_id":5,"body":1}`, `{"Session_ID":"s","body":1}`},
	{"POST", "/v1/queues/q/sessions/s/deadletters/1/resubmit", `{"x":[]}`, `{"X":1}`},
	{"POST", "/v1/queues/q/sessions/s/deadletters/1/discard", `{"x":[]}`, `{"X":1}`},
}

func TestBadInput(t *testing.T) {
	drivers(t, func(t *testing.T, open func(t *testing.T) store.Driver) {
		e := newEnv(t, open(t), Options{})
		seedState(t, e)
		before := e.snapshot()
		for _, rt := range bodyRoutes {
			for _, bi := range badInputs {
				t.Run(rt.path+"/"+bi.name, func(t *testing.T) {
					r := e.do(rt.method, rt.path, operatorTok, bi.body)
					r.mustError(t, bi.status, bi.code)
				})
			}
			t.Run(rt.path+"/wrong-type", func(t *testing.T) {
				r := e.do(rt.method, rt.path, operatorTok, rt.wrongType).mustError(t, 400, "")
				if c := r.errCode(); c != "invalid_field" && c != "unknown_field" {
					t.Fatalf("code %q: %s", c, r.body)
				}
			})
			t.Run(rt.path+"/wrong-case", func(t *testing.T) {
				e.do(rt.method, rt.path, operatorTok, rt.wrongCase).mustError(t, 400, "unknown_field")
			})
			t.Run(rt.path+"/chunked-oversized", func(t *testing.T) {
				req := newReq(rt.method, rt.path, `{"x":"`+strings.Repeat("a", 2<<20)+`"}`)
				req.ContentLength = -1
				req.Header.Set("Authorization", "Bearer "+operatorTok)
				e.serve(req).mustError(t, 413, "body_too_large")
			})
			t.Run(rt.path+"/content-type", func(t *testing.T) {
				req := newReq(rt.method, rt.path, `{}`)
				req.Header.Set("Content-Type", "text/plain")
				req.Header.Set("Authorization", "Bearer "+operatorTok)
				e.serve(req).mustError(t, 415, "unsupported_media_type")
			})
			t.Run(rt.path+"/declared-length", func(t *testing.T) {
				req := newReq(rt.method, rt.path, `{}`)
				req.ContentLength = 10 << 20
				req.Header.Set("Authorization", "Bearer "+operatorTok)
				e.serve(req).mustError(t, 413, "body_too_large")
			})
			t.Run(rt.path+"/unknown-query", func(t *testing.T) {
				e.do(rt.method, rt.path+"?x=1", operatorTok, "").mustError(t, 400, "unknown_parameter")
			})
		}
		// Endpoint-specific validation.
		for _, c := range []struct{ method, path, body, code string }{
			{"POST", "/v1/tasks", `{}`, "invalid_field"},
			{"POST", "/v1/tasks", `{"workflow":"nope"}`, "invalid_request"},
			{"POST", "/v1/tasks", `{"workflow":"echo","id":"a/b"}`, "invalid_request"},
			{"POST", "/v1/tasks", `{"workflow":"echo","id":"a b"}`, "invalid_request"},
			{"POST", "/v1/tasks", `{"workflow":"echo","id":"` + strings.Repeat("x", 201) + `"}`, "invalid_request"},
			{"POST", "/v1/tasks", `{"workflow":"echo","ordering_key":"` + strings.Repeat("x", 300) + `"}`, "invalid_request"},
			{"POST", "/v1/tasks", `{"workflow":"echo","ordering_key":"a\u0001"}`, "invalid_request"},
			{"POST", "/v1/tasks", `{"workflow":"echo","input":1,"input":2,"id":"bad"}`, "conflict"},
			{"POST", "/v1/tasks/bad/resubmit", `{"from_step":-1}`, "invalid_field"},
			{"POST", "/v1/tasks/bad/resubmit", `{"from_step":1.5}`, "invalid_field"},
			{"POST", "/v1/tasks/done/cancel", `{"reason":"` + strings.Repeat("r", 1001) + `"}`, "invalid_field"},
			{"POST", "/v1/queues/q/messages", `{}`, "invalid_field"},
			{"POST", "/v1/queues/q/messages", `{"session_id":"s"}`, "invalid_field"},
			{"POST", "/v1/queues/q/messages", `{"body":1}`, "invalid_field"},
			{"POST", "/v1/queues/q/messages", `{"session_id":"","body":1}`, "invalid_field"},
			{"POST", "/v1/queues/q/messages", `{"session_id":"s\u0000","body":1}`, "invalid_field"},
			{"POST", "/v1/queues/q/messages", `{"session_id":"s","body":1,"not_before":"tomorrow"}`, "invalid_field"},
			{"POST", "/v1/queues/q/messages", `{"session_id":"s","body":1,"not_before":5}`, "invalid_field"},
			{"POST", "/v1/queues/q/messages", `{"session_id":"s","body":1,"end_of_sequence":"yes"}`, "invalid_field"},
			{"POST", "/v1/queues/q/messages", `{"messages":[]}`, "invalid_field"},
			{"POST", "/v1/queues/q/messages", `{"messages":{}}`, "invalid_field"},
			{"POST", "/v1/queues/q/messages", `{"messages":[{"session_id":"s","body":1,"extra":1}]}`, "unknown_field"},
			{"POST", "/v1/queues/q/messages", `{"messages":[{"SESSION_ID":"s","body":1}]}`, "unknown_field"},
			{"POST", "/v1/queues/q/messages", `{"messages":[{"session_id":"s","body":1},{"body":1}]}`, "invalid_field"},
			{"POST", "/v1/queues/q/messages", `{"session_id":"s","body":1,"messages":[{"session_id":"s","body":1}]}`, "invalid_request"},
			{"POST", "/v1/queues/q/messages", `{"session_id":"s","body":1,"message_id":"` + strings.Repeat("m", 257) + `"}`, "invalid_field"},
			{"POST", "/v1/queues/q/messages", `{"messages":[` + strings.TrimSuffix(strings.Repeat(`{"session_id":"s","body":1},`, 1001), ",") + `]}`, "invalid_field"},
			{"POST", "/v1/queues/q%20x/messages", `{"session_id":"s","body":1}`, "invalid_request"},
			{"POST", "/v1/queues/q/sessions/s/deadletters/0/resubmit", ``, "invalid_request"},
			{"POST", "/v1/queues/q/sessions/s/deadletters/-1/discard", ``, "invalid_request"},
			{"POST", "/v1/queues/q/sessions/s/deadletters/abc/discard", ``, "invalid_request"},
			{"POST", "/v1/queues/q/sessions/s/deadletters/99999999999999999999/discard", ``, "invalid_request"},
			{"POST", "/v1/alerts/0/ack", ``, "invalid_request"},
			{"POST", "/v1/alerts/x/ack", ``, "invalid_request"},
			{"GET", "/v1/tasks?limit=0", ``, "invalid_parameter"},
			{"GET", "/v1/tasks?limit=1001", ``, "invalid_parameter"},
			{"GET", "/v1/tasks?limit=x", ``, "invalid_parameter"},
			{"GET", "/v1/tasks?state=Done", ``, "invalid_parameter"},
			{"GET", "/v1/tasks?limit=1&limit=2", ``, "invalid_parameter"},
			{"GET", "/v1/tasks?after=a%2Fb", ``, "invalid_parameter"},
			{"GET", "/v1/tasks?bogus=1", ``, "unknown_parameter"},
			{"GET", "/v1/alerts?after=-1", ``, "invalid_parameter"},
			{"GET", "/v1/alerts?unacknowledged=maybe", ``, "invalid_parameter"},
			{"GET", "/v1/queues/q/sessions/s/messages?from_seq=x", ``, "invalid_parameter"},
			{"GET", "/v1/queues/q/deadletters?after_seq=x", ``, "invalid_parameter"},
			{"GET", "/v1/queues/q/deadletters?session=%00", ``, "invalid_parameter"},
		} {
			t.Run(c.method+" "+c.path+" "+c.body[:min(len(c.body), 40)], func(t *testing.T) {
				r := e.do(c.method, c.path, operatorTok, c.body)
				if c.code == "conflict" {
					r.mustError(t, 409, c.code)
					return
				}
				if r.status < 400 || r.status >= 500 {
					t.Fatalf("status %d, want 4xx: %s", r.status, r.body)
				}
				r.mustError(t, r.status, c.code)
			})
		}
		if after := e.snapshot(); after != before {
			t.Fatalf("refused requests changed the store:\n%s\n---\n%s", before, after)
		}
	})
}

func TestPathTricks(t *testing.T) {
	drivers(t, func(t *testing.T, open func(t *testing.T) store.Driver) {
		e := newEnv(t, open(t), Options{})
		seedState(t, e)
		before := e.snapshot()
		for _, c := range []struct {
			method, target string
			status         int
		}{
			{"GET", "/v1/tasks/../queues", 400},
			{"GET", "/v1/tasks/%2e%2e/queues", 400},
			{"GET", "/v1/tasks/./done", 400},
			{"GET", "/v1//tasks", 400},
			{"GET", "/v1/tasks/", 404},
			{"GET", "/v1/tasks/done/", 404},
			{"POST", "/v1/tasks/bad%2F..%2F..%2Fqueues/resubmit", 400},
			{"POST", "/v1/tasks/bad%2Fx/cancel", 400},
			{"GET", "/v1/tasks/a%00b", 400},
			{"GET", "/v1/tasks/a%0Ab", 400},
			{"GET", "/v1/tasks/a%7Fb", 400},
			{"GET", "/v1/tasks/" + strings.Repeat("x", 201), 400},
			{"GET", "/v1/tasks/" + strings.Repeat("x", 5000), 400},
			{"GET", "/v1/tasks/%ZZ", 400},
			{"POST", "/v1/queues/q%2Fx/messages", 400},
			{"POST", "/v1/queues/" + strings.Repeat("q", 201) + "/messages", 400},
			{"GET", "/v1/queues/q/sessions/" + strings.Repeat("s", 257) + "/messages", 400},
			{"POST", "/v1/queues/q/sessions/s%00/deadletters/1/discard", 400},
			{"POST", "/v1/queues/q/sessions/s/deadletters/1%2F2/discard", 400},
			{"POST", "/v1/queues/q/sessions/s/deadletters/1/discard/x", 404},
			{"POST", "/V1/tasks", 404},
			{"POST", "/v1/tasks/done/resubmit/again", 404},
		} {
			t.Run(c.target[:min(len(c.target), 60)], func(t *testing.T) {
				var r *response
				if strings.Contains(c.target, "%ZZ") {
					// An invalid escape cannot be parsed into a request;
					// a real server answers 400 before the handler.
					req, err := http.NewRequest(c.method, "http://x/", nil)
					if err != nil {
						t.Fatal(err)
					}
					req.URL.Path, req.URL.RawPath, req.RequestURI = "/v1/tasks/%ZZ", "", "/v1/tasks/%ZZ"
					req.Header.Set("Authorization", "Bearer "+operatorTok)
					r = e.serve(req)
					if r.status != 404 && r.status != 400 {
						t.Fatalf("status %d: %s", r.status, r.body)
					}
					return
				}
				body := ""
				if c.method == "POST" {
					body = `{}`
				}
				r = e.do(c.method, c.target, operatorTok, body)
				r.mustError(t, c.status, "")
			})
		}
		if after := e.snapshot(); after != before {
			t.Fatalf("path tricks changed the store:\n%s\n---\n%s", before, after)
		}
	})
}

// TestOpenAPICoverage fails on a route the mux does not reach, an
// operation without responses, an undocumented path parameter, a broken
// $ref and a served document other than openapi.json. (TestScopeMatrix
// checks that served and documented routes are the same, with the same
// scopes.)
func TestOpenAPICoverage(t *testing.T) {
	var doc struct {
		OpenAPI string                               `json:"openapi"`
		Paths   map[string]map[string]map[string]any `json:"paths"`
	}
	raw, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	if doc.OpenAPI != "3.1.0" {
		t.Fatalf("openapi %q", doc.OpenAPI)
	}
	e := newEnv(t, testutilSQLite(t), Options{})
	served := map[string]route{}
	for _, rt := range e.h.routes {
		key := strings.ToLower(rt.method) + " " + rt.pattern
		served[key] = rt
		// The mux really serves it: a request of this shape reaches a
		// registered pattern, not the catch-all.
		path := strings.NewReplacer("{id}", "1", "{queue}", "q", "{session}", "s", "{seq}", "1").Replace(rt.pattern)
		if _, pat := e.h.mux.Handler(newReq(rt.method, path, "")); pat != rt.method+" "+rt.pattern {
			t.Errorf("%s %s is routed to %q", rt.method, path, pat)
		}
	}
	for p, ops := range doc.Paths {
		for m, op := range ops {
			if m == "parameters" {
				continue
			}
			key := m + " " + p
			if _, ok := served[key]; !ok {
				continue // TestScopeMatrix reports it
			}
			if _, ok := op["responses"]; !ok {
				t.Errorf("%s: no responses", key)
			}
			// Every path parameter is documented.
			for _, name := range regexp.MustCompile(`\{(\w+)\}`).FindAllStringSubmatch(p, -1) {
				params, _ := op["parameters"].([]any)
				found := false
				for _, x := range params {
					pm, _ := x.(map[string]any)
					found = found || (pm["name"] == name[1] && pm["in"] == "path")
				}
				if !found {
					t.Errorf("%s: path parameter %s not documented", key, name[1])
				}
			}
		}
	}
	// Every $ref resolves.
	var all map[string]any
	_ = json.Unmarshal(raw, &all)
	for _, ref := range regexp.MustCompile(`"\$ref":\s*"([^"]+)"`).FindAllStringSubmatch(string(raw), -1) {
		var cur any = all
		for _, part := range strings.Split(strings.TrimPrefix(ref[1], "#/"), "/") {
			m, ok := cur.(map[string]any)
			if !ok {
				cur = nil
				break
			}
			cur = m[part]
		}
		if cur == nil {
			t.Errorf("unresolved $ref %s", ref[1])
		}
	}
	// The served document is the checked-in one.
	r := e.do("GET", "/openapi.json", "", "").must(t, 200)
	if string(r.body) != string(raw) {
		t.Error("/openapi.json differs from openapi.json")
	}
}

func TestParseTokens(t *testing.T) {
	toks, err := ParseTokens(strings.NewReader("# comment\n\nabcdefghijklmnop1 submit\n  abcdefghijklmnop2 operator,submit  \n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(toks) != 2 || !toks[1].has(ScopeOperator) || toks[0].has(ScopeOperator) || !toks[0].has(ScopeSubmit) {
		t.Fatalf("tokens: %+v", toks)
	}
	toks, err = ParseTokensEnv("abcdefghijklmnop1 submit;abcdefghijklmnop2 operator; ")
	if err != nil || len(toks) != 2 {
		t.Fatalf("env tokens: %v %+v", err, toks)
	}
	for _, bad := range []string{
		"short submit",
		"abcdefghijklmnop1",
		"abcdefghijklmnop1 admin",
		"abcdefghijklmnop1 submit name extra",
		"abcdefghijklmnop1 submit bad/name",
		"abcdefghijklmnop1 submit\nabcdefghijklmnop1 operator",
		"abcdefghijklmnop\x01 submit",
		"abcdefghijklmnop1 submit,ns:a/b",
		"abcdefghijklmnop1 submit,ns:a,ns:b",
		"abcdefghijklmnop1 ns:a,agent:payments",
	} {
		_, err := ParseTokens(strings.NewReader(bad))
		if err == nil {
			t.Errorf("%q: accepted", bad)
			continue
		}
		if strings.Contains(err.Error(), "abcdefghijklmnop") {
			t.Errorf("%q: the error shows the token: %v", bad, err)
		}
	}
	toks, err = ParseTokens(strings.NewReader("abcdefghijklmnop1 submit,ns:tenant-a\nabcdefghijklmnop2 operator,ns:default\nabcdefghijklmnop3 metrics,ns:tenant-a\n"))
	if err != nil || toks[0].Namespace != "tenant-a" || !toks[0].has(ScopeSubmit) || toks[1].Namespace != "default" || !toks[2].has(ScopeMetrics) {
		t.Fatalf("namespaced tokens: %v %+v", err, toks)
	}
	a, _ := newAuthenticator(testTokens)
	if a.find(submitTok) != 0 || a.find(operatorTok) != 1 || a.find("nope") != -1 || a.find("") != -1 {
		t.Fatal("find")
	}
}

func TestMethodsAndContentTypes(t *testing.T) {
	e := newEnv(t, testutilSQLite(t), Options{})
	// JSON with a charset or a +json type is fine.
	req := newReq("POST", "/v1/tasks", `{"workflow":"echo","id":"ct-1"}`)
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set("Authorization", "Bearer "+submitTok)
	e.serve(req).must(t, 201)
	e.waitState("ct-1", "Processed") // nothing changes the store any more
	// Every write needs a JSON Content-Type, with a body or without one:
	// a browser sends forms and bodiless requests to other sites without
	// asking first. Nothing is changed.
	before := e.snapshot()
	for _, c := range []struct{ method, target, body, ct string }{
		{"POST", "/v1/tasks", `{"workflow":"echo"}`, ""},
		{"POST", "/v1/tasks", `{"workflow":"echo"}`, "text/plain"},
		{"POST", "/v1/tasks", `{"workflow":"echo"}`, "application/x-www-form-urlencoded"},
		{"POST", "/v1/tasks", `{"workflow":"echo"}`, "multipart/form-data; boundary=x"},
		{"POST", "/v1/tasks/x/cancel", "", ""},
		{"POST", "/v1/alerts/1/ack", "", ""},
		{"POST", "/v1/queues/q/sessions/s/deadletters/1/discard", "", "text/plain"},
		{"PUT", "/v1/queues/q/policy", `{"max_delivery_count":3}`, ""},
		{"DELETE", "/v1/schedules/s", "", ""},
		{"POST", "/v1/queues/q/messages", `{"session_id":"s","body":1}`, "application/jsonx"},
	} {
		req = newReq(c.method, c.target, c.body)
		req.Header.Del("Content-Type")
		if c.ct != "" {
			req.Header.Set("Content-Type", c.ct)
		}
		req.Header.Set("Authorization", "Bearer "+operatorTok)
		r := e.serve(req).mustError(t, 415, "unsupported_media_type")
		if c.ct == "" && !strings.Contains(r.errMsg(), "Content-Type: application/json") {
			t.Errorf("%s %s: %s", c.method, c.target, r.errMsg())
		}
	}
	if e.snapshot() != before {
		t.Fatal("a refused write changed the store")
	}
	// Reads need none.
	req = newReq("GET", "/v1/tasks", "")
	req.Header.Set("Authorization", "Bearer "+submitTok)
	e.serve(req).must(t, 200)
	for _, m := range []string{"PUT", "DELETE", "PATCH"} {
		e.do(m, "/v1/tasks", submitTok, "").mustError(t, 405, "method_not_allowed")
	}
	e.do("POST", "/healthz", "", "").mustError(t, 405, "method_not_allowed")
	// A small body limit applies to every endpoint.
	e2 := newEnv(t, testutilSQLite(t), Options{MaxBodyBytes: 64})
	e2.do("POST", "/v1/tasks", submitTok, fmt.Sprintf(`{"workflow":"echo","input":"%s"}`, strings.Repeat("a", 64))).mustError(t, 413, "body_too_large")
	e2.do("POST", "/v1/tasks", submitTok, `{"workflow":"echo"}`).must(t, 201)
	if slices.ContainsFunc(e.h.routes, func(r route) bool {
		return r.method != "GET" && r.method != "POST" && r.method != "PUT" && r.method != "DELETE"
	}) {
		t.Fatal("unexpected method")
	}
}
