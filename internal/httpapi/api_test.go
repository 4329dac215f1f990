package httpapi

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/internal/clock"
	"github.com/drover-run/drover/internal/testutil"
	"github.com/drover-run/drover/store"
)

func TestTasks(t *testing.T) {
	drivers(t, func(t *testing.T, open func(t *testing.T) store.Driver) {
		e := newEnv(t, open(t), Options{})

		// Submit with a caller-chosen ID: 201, then 200 for the same input,
		// 409 for another.
		r := e.do("POST", "/v1/tasks", submitTok, `{"workflow":"echo","input":{"n":1},"id":"t-1","ordering_key":"k"}`).must(t, 201)
		if r.str("id") != "t-1" || r.str("workflow") != "echo" || r.header.Get("Location") != "/v1/tasks/t-1" {
			t.Fatalf("submit: %s (Location %q)", r.body, r.header.Get("Location"))
		}
		if steps, _ := r.json["steps"].([]any); len(steps) != 2 {
			t.Fatalf("submit returned %d steps: %s", len(steps), r.body)
		}
		if r.json["ordering_seq"].(float64) != 1 || r.str("ordering_key") != "k" {
			t.Fatalf("ordering: %s", r.body)
		}
		e.do("POST", "/v1/tasks", submitTok, `{"workflow":"echo","input":{"n":1},"id":"t-1","ordering_key":"k"}`).must(t, 200)
		e.do("POST", "/v1/tasks", submitTok, `{"workflow":"echo","input":{"n":2},"id":"t-1"}`).mustError(t, 409, "conflict")

		// Without an ID: a generated one.
		r = e.do("POST", "/v1/tasks", submitTok, `{"workflow":"echo","input":"x"}`).must(t, 201)
		gen := r.str("id")
		if gen == "" {
			t.Fatalf("no generated id: %s", r.body)
		}

		// It runs to Processed; the output is the input.
		r = e.waitState("t-1", "Processed")
		if out, _ := r.json["output"].(map[string]any); out["n"] != float64(1) {
			t.Fatalf("output: %s", r.body)
		}
		e.waitState(gen, "Processed")
		e.do("GET", "/v1/tasks/nope", submitTok, "").mustError(t, 404, "not_found")

		// A permanent failure: Error and an alert.
		e.do("POST", "/v1/tasks", submitTok, `{"workflow":"fail","id":"f-1"}`).must(t, 201)
		e.waitState("f-1", "Error")

		// Lists, filters and pages.
		for i := range 3 {
			e.do("POST", "/v1/tasks", submitTok, fmt.Sprintf(`{"workflow":"echo","id":"p-%d"}`, i)).must(t, 201)
		}
		r = e.do("GET", "/v1/tasks?workflow=echo&limit=2", submitTok, "").must(t, 200)
		if tasks := r.json["tasks"].([]any); len(tasks) != 2 || r.str("next_after") == "" {
			t.Fatalf("page 1: %s", r.body)
		}
		seen := 0
		for after := ""; ; {
			r = e.do("GET", "/v1/tasks?workflow=echo&limit=2&after="+after, submitTok, "").must(t, 200)
			seen += len(r.json["tasks"].([]any))
			if after = r.str("next_after"); after == "" {
				break
			}
		}
		if seen != 5 {
			t.Fatalf("pages held %d echo tasks, want 5", seen)
		}
		r = e.do("GET", "/v1/tasks?state=Error", submitTok, "").must(t, 200)
		if tasks := r.json["tasks"].([]any); len(tasks) != 1 || tasks[0].(map[string]any)["id"] != "f-1" {
			t.Fatalf("state=Error: %s", r.body)
		}
		r = e.do("GET", "/v1/tasks?state=Error,Processed&state=Cancelled", submitTok, "").must(t, 200)
		if n := len(r.json["tasks"].([]any)); n < 3 {
			t.Fatalf("several states: %d tasks: %s", n, r.body)
		}
		// By ordering key and by time of last update.
		e.do("POST", "/v1/tasks", submitTok, `{"workflow":"echo","id":"k-1","ordering_key":"acct-1"}`).must(t, 201)
		k1 := e.waitState("k-1", "Processed")
		ids := func(target string) string {
			t.Helper()
			r := e.do("GET", target, submitTok, "").must(t, 200)
			var got []string
			for _, x := range r.json["tasks"].([]any) {
				got = append(got, x.(map[string]any)["id"].(string))
			}
			return fmt.Sprint(got)
		}
		updated, err := time.Parse(time.RFC3339Nano, k1.str("updated_at"))
		if err != nil {
			t.Fatalf("updated_at of k-1: %s", k1.body)
		}
		at := func(d time.Duration) string { return url.QueryEscape(updated.Add(d).Format(time.RFC3339Nano)) }
		for target, want := range map[string]string{
			"/v1/tasks?ordering_key=acct-1":                                      "[k-1]",
			"/v1/tasks?ordering_key=acct":                                        "[]",
			"/v1/tasks?ordering_key=acct-1&updated_from=" + at(0):                "[k-1]",
			"/v1/tasks?ordering_key=acct-1&updated_from=" + at(time.Microsecond): "[]",
		} {
			if got := ids(target); got != want {
				t.Errorf("%s: %s, want %s", target, got, want)
			}
		}
		// The microsecond of k-1's last update: k-1, and any other task one
		// scheduler transaction finished with it, none other.
		r = e.do("GET", "/v1/tasks?updated_from="+at(0)+"&updated_before="+at(time.Microsecond), submitTok, "").must(t, 200)
		var inRange []string
		for _, x := range r.json["tasks"].([]any) {
			task := x.(map[string]any)
			if u, _ := time.Parse(time.RFC3339Nano, task["updated_at"].(string)); !u.Equal(updated) {
				t.Errorf("the microsecond of k-1's update lists %s, updated at %s", task["id"], task["updated_at"])
			}
			inRange = append(inRange, task["id"].(string))
		}
		if !slices.Contains(inRange, "k-1") {
			t.Errorf("the microsecond of k-1's update lists %v, without k-1", inRange)
		}

		// Alerts: listed, acknowledged once, filtered.
		r = e.do("GET", "/v1/alerts", submitTok, "").must(t, 200)
		alerts := r.json["alerts"].([]any)
		if len(alerts) == 0 {
			t.Fatalf("no alerts: %s", r.body)
		}
		a := alerts[0].(map[string]any)
		if a["subject"] != "f-1" || a["acknowledged"] != nil {
			t.Fatalf("alert: %v", a)
		}
		id := fmt.Sprint(int64(a["id"].(float64)))
		e.do("POST", "/v1/alerts/"+id+"/ack", submitTok, "").mustError(t, 403, "forbidden")
		r = e.do("POST", "/v1/alerts/"+id+"/ack", operatorTok, "").must(t, 200)
		ack := r.json["acknowledged"].(map[string]any)
		r2 := e.do("POST", "/v1/alerts/"+id+"/ack", operatorTok, `{}`).must(t, 200)
		if r2.json["acknowledged"].(map[string]any)["event_id"] != ack["event_id"] {
			t.Fatalf("second ack changed the acknowledgement: %s vs %v", r2.body, ack)
		}
		r = e.do("GET", "/v1/alerts", submitTok, "").must(t, 200)
		if r.json["alerts"].([]any)[0].(map[string]any)["acknowledged"] == nil {
			t.Fatalf("ack not listed: %s", r.body)
		}
		r = e.do("GET", "/v1/alerts?unacknowledged=true", submitTok, "").must(t, 200)
		for _, x := range r.json["alerts"].([]any) {
			if fmt.Sprint(int64(x.(map[string]any)["id"].(float64))) == id {
				t.Fatalf("acknowledged alert listed as unacknowledged: %s", r.body)
			}
		}
		e.do("POST", "/v1/alerts/999999/ack", operatorTok, "").mustError(t, 404, "not_found")

		// Resubmit: operator only; a bad step is 400; a Processed task 409.
		e.do("POST", "/v1/tasks/f-1/resubmit", submitTok, "").mustError(t, 403, "forbidden")
		e.do("POST", "/v1/tasks/f-1/resubmit", operatorTok, `{"from_step":7}`).mustError(t, 400, "")
		e.do("POST", "/v1/tasks/t-1/resubmit", operatorTok, "").mustError(t, 409, "wrong_state")
		e.do("POST", "/v1/tasks/none/resubmit", operatorTok, "").mustError(t, 404, "not_found")
		r = e.do("POST", "/v1/tasks/f-1/resubmit", operatorTok, `{"from_step":0}`).must(t, 200)
		if r.str("id") != "f-1" {
			t.Fatalf("resubmit answered %s", r.body)
		}
		// The answer is the task as read after the resubmit: its failing
		// step may already have failed again, so the history tells.
		evs, err := e.d.Events(context.Background(), drover.EventQuery{TaskID: "f-1"})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(evs, func(ev *drover.Event) bool { return ev.Type == drover.EventResubmitted }) {
			t.Fatalf("no resubmitted event in f-1's history after the resubmit")
		}
		e.waitState("f-1", "Error")

		// Cancel a task no agent runs; again: 409.
		e.do("POST", "/v1/tasks", submitTok, `{"workflow":"external","id":"x-1"}`).must(t, 201)
		e.do("POST", "/v1/tasks/x-1/cancel", submitTok, "").mustError(t, 403, "forbidden")
		r = e.do("POST", "/v1/tasks/x-1/cancel", operatorTok, `{"reason":"test"}`).must(t, 200)
		if r.str("state") != "Cancelled" {
			t.Fatalf("cancel: %s", r.body)
		}
		e.do("POST", "/v1/tasks/x-1/cancel", operatorTok, "").mustError(t, 409, "wrong_state")
		e.do("POST", "/v1/tasks/none/cancel", operatorTok, "").mustError(t, 404, "not_found")
	})
}

func TestQueues(t *testing.T) {
	drivers(t, func(t *testing.T, open func(t *testing.T) store.Driver) {
		e := newEnv(t, open(t), Options{})

		r := e.do("POST", "/v1/queues/orders/messages", submitTok, `{"session_id":"o-1","body":{"a":1},"message_id":"m1"}`).must(t, 201)
		p := r.json["published"].([]any)[0].(map[string]any)
		if p["seq"] != float64(1) || p["duplicate"] != false || p["session_id"] != "o-1" {
			t.Fatalf("publish: %s", r.body)
		}
		// The same message ID again: stored once, 200.
		r = e.do("POST", "/v1/queues/orders/messages", submitTok, `{"session_id":"o-1","body":{"a":1},"message_id":"m1"}`).must(t, 200)
		if r.json["published"].([]any)[0].(map[string]any)["duplicate"] != true {
			t.Fatalf("duplicate: %s", r.body)
		}
		nb := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
		r = e.do("POST", "/v1/queues/orders/messages", submitTok, `{"messages":[
			{"session_id":"o-1","body":"two"},
			{"session_id":"o-2","body":[1,2,3],"not_before":"`+nb+`"},
			{"session_id":"a/b","body":null,"end_of_sequence":true}]}`).must(t, 201)
		pub := r.json["published"].([]any)
		if len(pub) != 3 || pub[0].(map[string]any)["seq"] != float64(2) || pub[1].(map[string]any)["seq"] != float64(1) {
			t.Fatalf("batch: %s", r.body)
		}
		// A closed session refuses more.
		e.do("POST", "/v1/queues/orders/messages", submitTok, `{"session_id":"a/b","body":1}`).mustError(t, 409, "wrong_state")

		r = e.do("GET", "/v1/queues", submitTok, "").must(t, 200)
		qs := r.json["queues"].([]any)
		if len(qs) != 1 || qs[0].(map[string]any)["name"] != "orders" || qs[0].(map[string]any)["poison_policy"] != "block" {
			t.Fatalf("queues: %s", r.body)
		}
		r = e.do("GET", "/v1/queues/orders/sessions?limit=2", submitTok, "").must(t, 200)
		if ss := r.json["sessions"].([]any); len(ss) != 2 || r.str("next_after") == "" {
			t.Fatalf("sessions: %s", r.body)
		}
		r = e.do("GET", "/v1/queues/orders/sessions?after="+r.str("next_after"), submitTok, "").must(t, 200)
		if ss := r.json["sessions"].([]any); len(ss) != 1 {
			t.Fatalf("sessions page 2: %s", r.body)
		}
		r = e.do("GET", "/v1/queues/orders/sessions/o-1/messages", submitTok, "").must(t, 200)
		ms := r.json["messages"].([]any)
		if len(ms) != 2 || ms[0].(map[string]any)["body"].(map[string]any)["a"] != float64(1) || ms[1].(map[string]any)["body"] != "two" {
			t.Fatalf("peek: %s", r.body)
		}
		r = e.do("GET", "/v1/queues/orders/sessions/o-1/messages?from_seq=2", submitTok, "").must(t, 200)
		if ms := r.json["messages"].([]any); len(ms) != 1 {
			t.Fatalf("peek from 2: %s", r.body)
		}
		// A session ID holding "/" is addressed with %2F.
		r = e.do("GET", "/v1/queues/orders/sessions/a%2Fb/messages", submitTok, "").must(t, 200)
		if ms := r.json["messages"].([]any); len(ms) != 1 || ms[0].(map[string]any)["end_of_sequence"] != true {
			t.Fatalf("peek a/b: %s", r.body)
		}
		e.do("GET", "/v1/queues/orders/sessions/zz/messages", submitTok, "").mustError(t, 404, "not_found")
		e.do("GET", "/v1/queues/nope/sessions", submitTok, "").mustError(t, 404, "not_found")
		e.do("GET", "/v1/queues/nope/deadletters", submitTok, "").mustError(t, 404, "not_found")

		// Dead letters: o-1's head is dead-lettered by a receiver.
		r = e.do("GET", "/v1/queues/orders/deadletters", submitTok, "").must(t, 200)
		if dl := r.json["dead_letters"].([]any); len(dl) != 0 {
			t.Fatalf("dead letters before: %s", r.body)
		}
		for round := range 2 {
			if seq := e.deadLetterHead(t, "orders", "o-1"); seq != 1 {
				t.Fatalf("received seq %d", seq)
			}
			r = e.do("GET", "/v1/queues/orders/deadletters?session=o-1", submitTok, "").must(t, 200)
			dl := r.json["dead_letters"].([]any)
			if len(dl) != 1 || dl[0].(map[string]any)["dead_reason"] != "bad" {
				t.Fatalf("dead letters: %s", r.body)
			}
			// The block policy raised an alert for the session.
			r = e.do("GET", "/v1/alerts?unacknowledged=true", submitTok, "").must(t, 200)
			if len(r.json["alerts"].([]any)) == 0 {
				t.Fatalf("no session alert: %s", r.body)
			}
			if round == 0 {
				// First round: resubmit (back to the head); second: discard.
				e.do("POST", "/v1/queues/orders/sessions/o-1/deadletters/1/resubmit", submitTok, "").mustError(t, 403, "forbidden")
				r = e.do("POST", "/v1/queues/orders/sessions/o-1/deadletters/1/resubmit", operatorTok, "").must(t, 200)
				if r.str("action") != "resubmitted" {
					t.Fatalf("resubmit: %s", r.body)
				}
				e.do("POST", "/v1/queues/orders/sessions/o-1/deadletters/1/resubmit", operatorTok, "").mustError(t, 404, "not_found")
			}
		}
		e.do("POST", "/v1/queues/orders/sessions/o-1/deadletters/1/discard", operatorTok, `{}`).must(t, 200)
		e.do("POST", "/v1/queues/orders/sessions/o-1/deadletters/1/discard", operatorTok, "").mustError(t, 404, "not_found")
		r = e.do("GET", "/v1/queues/orders/sessions/o-1/messages", submitTok, "").must(t, 200)
		if ms := r.json["messages"].([]any); len(ms) != 1 || ms[0].(map[string]any)["seq"] != float64(2) {
			t.Fatalf("after discard: %s", r.body)
		}
	})
}

func TestHealth(t *testing.T) {
	drivers(t, func(t *testing.T, open func(t *testing.T) store.Driver) {
		drv := open(t)
		e := newEnv(t, drv, Options{ReadyTimeout: time.Second})
		e.do("GET", "/healthz", "", "").must(t, 200)
		e.do("GET", "/readyz", "", "").must(t, 200)
		r := e.do("GET", "/openapi.json", "", "").must(t, 200)
		if r.str("openapi") != "3.1.0" {
			t.Fatalf("openapi: %.100s", r.body)
		}
		e.h.SetDraining()
		e.do("GET", "/readyz", "", "").mustError(t, 503, "not_ready")
		e.do("GET", "/healthz", "", "").must(t, 200)

		var logs testutil.Buffer
		e2 := newEnv(t, drv, Options{ReadyTimeout: time.Second, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		e2.do("GET", "/readyz", "", "").must(t, 200)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = e.d.Stop(ctx)
		_ = e2.d.Stop(ctx)
		if err := drv.Close(); err != nil {
			t.Fatal(err)
		}
		// The anonymous caller learns which check failed, not the store's
		// error: that is in the log.
		r = e2.do("GET", "/readyz", "", "").mustError(t, 503, "not_ready")
		if r.errMsg() != "the store is not reachable (the reason is in the server's log)" {
			t.Fatalf("reason: %s", r.body)
		}
		if !strings.Contains(logs.String(), "readiness: store read failed") || !strings.Contains(logs.String(), "closed") {
			t.Fatalf("the store's error is not logged:\n%s", logs.String())
		}
		e2.do("GET", "/healthz", "", "").must(t, 200)
	})
}

func TestAuth(t *testing.T) {
	e := newEnv(t, testutilSQLite(t), Options{})
	before := e.snapshot()
	for _, rt := range e.h.routes {
		if rt.scope == "" {
			continue
		}
		path := strings.NewReplacer("{id}", "x", "{queue}", "q", "{session}", "s", "{seq}", "1").Replace(rt.pattern)
		if strings.HasPrefix(rt.pattern, "/v1/alerts/{id}") {
			path = strings.Replace(path, "/x/", "/1/", 1)
		}
		body := ""
		if rt.method == "POST" {
			body = `{"workflow":"echo","session_id":"s","body":1}`
		}
		t.Run(rt.method+" "+rt.pattern, func(t *testing.T) {
			for _, h := range []string{"", "Bearer", "Bearer ", "Basic " + submitTok, "bearer wrong-token-0123456789", "Bearer " + submitTok + "x"} {
				req := newReq(rt.method, path, body)
				if h != "" {
					req.Header.Set("Authorization", h)
				}
				r := e.serve(req)
				r.mustError(t, 401, "unauthorized")
				if r.header.Get("WWW-Authenticate") == "" {
					t.Fatalf("401 without WWW-Authenticate")
				}
				if strings.Contains(string(r.body), "token-0123") {
					t.Fatalf("the answer echoes the token: %s", r.body)
				}
			}
			if rt.scope == ScopeOperator {
				e.do(rt.method, path, submitTok, body).mustError(t, 403, "forbidden")
			}
		})
	}
	if after := e.snapshot(); after != before {
		t.Fatalf("rejected requests changed the store:\n%s\n%s", before, after)
	}
	// Unknown /v1 paths need a token too; with one: 404 or 405.
	e.do("GET", "/v1/secret", "", "").mustError(t, 401, "unauthorized")
	e.do("GET", "/v1/secret", submitTok, "").mustError(t, 404, "not_found")
	r := e.do("DELETE", "/v1/tasks/x", submitTok, "").mustError(t, 405, "method_not_allowed")
	if r.header.Get("Allow") == "" {
		t.Fatal("405 without Allow")
	}
	e.do("GET", "/nothing", "", "").mustError(t, 404, "not_found")
}

func TestNoAuth(t *testing.T) {
	e := newEnv(t, testutilSQLite(t), Options{NoAuth: true})
	e.do("POST", "/v1/tasks", "", `{"workflow":"echo"}`).must(t, 201)
	e.do("GET", "/v1/queues", "", "").must(t, 200)
	if _, err := New(e.d, e.q, Options{}); err == nil {
		t.Fatal("New without tokens and without NoAuth succeeded")
	}
}

// Without auth, a browser page cannot drive the server: a Host that is
// not a loopback name or address (DNS rebinding) and a cross-origin
// Origin are refused, and nothing changes.
func TestNoAuthBrowserDefences(t *testing.T) {
	e := newEnv(t, testutilSQLite(t), Options{NoAuth: true})
	send := func(method, target, host, origin, body string) *response {
		req := newReq(method, target, body)
		req.Host = host
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		return e.serve(req)
	}
	before := e.snapshot()
	for _, host := range []string{"evil.example", "evil.example:8080", "127.0.0.1.nip.io:8080", "localhost.evil.example", "10.0.0.1:8080", "[2001:db8::1]:8080", ""} {
		for _, c := range []struct{ method, target, body string }{
			{"POST", "/v1/tasks", `{"workflow":"echo"}`},
			{"GET", "/v1/tasks", ""},
			{"POST", "/v1/queues/q/messages", `{"session_id":"s","body":1}`},
		} {
			r := send(c.method, c.target, host, "", c.body).mustError(t, 403, "forbidden")
			if !strings.Contains(r.errMsg(), "not a loopback name or address") {
				t.Fatalf("Host %q: %s", host, r.errMsg())
			}
		}
	}
	for _, c := range []struct{ host, origin string }{
		{"127.0.0.1:8080", "http://evil.example"},
		{"127.0.0.1:8080", "http://localhost:8080"},
		{"127.0.0.1:8080", "http://127.0.0.1:9999"},
		{"127.0.0.1:8080", "null"},
		{"localhost:8080", "file://"},
	} {
		r := send("POST", "/v1/tasks", c.host, c.origin, `{"workflow":"echo"}`).mustError(t, 403, "forbidden")
		if !strings.Contains(r.errMsg(), "cross-origin request refused") {
			t.Fatalf("Origin %q: %s", c.origin, r.errMsg())
		}
	}
	if e.snapshot() != before {
		t.Fatal("a refused request changed the store")
	}
	for _, c := range []struct{ host, origin string }{
		{"127.0.0.1:8080", ""},
		{"127.0.0.1:8080", "http://127.0.0.1:8080"},
		{"localhost:8080", "http://localhost:8080"},
		{"LOCALHOST", ""},
		{"[::1]:8080", "http://[::1]:8080"},
		{"127.0.0.2:8080", ""},
	} {
		send("POST", "/v1/tasks", c.host, c.origin, `{"workflow":"echo"}`).must(t, 201)
	}
	// With auth the Host is the proxy's business: any is served.
	a := newEnv(t, testutilSQLite(t), Options{})
	req := newReq("GET", "/v1/tasks", "")
	req.Host = "drover.example.com"
	req.Header.Set("Origin", "https://console.example.com")
	req.Header.Set("Authorization", "Bearer "+submitTok)
	a.serve(req).must(t, 200)
}

func TestRateLimit(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	e := newEnv(t, testutilSQLite(t), Options{Rate: 1, Burst: 2, Clock: clk})
	e.do("GET", "/v1/queues", submitTok, "").must(t, 200)
	e.do("GET", "/v1/queues", submitTok, "").must(t, 200)
	r := e.do("GET", "/v1/queues", submitTok, "").mustError(t, 429, "rate_limited")
	if r.header.Get("Retry-After") != "1" {
		t.Fatalf("Retry-After %q", r.header.Get("Retry-After"))
	}
	// Another token has its own budget; rejected submits store nothing.
	e.do("GET", "/v1/queues", operatorTok, "").must(t, 200)
	before := e.snapshot()
	e.do("POST", "/v1/tasks", submitTok, `{"workflow":"echo"}`).mustError(t, 429, "rate_limited")
	if e.snapshot() != before {
		t.Fatal("a rate-limited submit changed the store")
	}
	// Health endpoints are not limited.
	e.do("GET", "/healthz", "", "").must(t, 200)
	clk.Advance(time.Second)
	e.do("GET", "/v1/queues", submitTok, "").must(t, 200)
	e.do("GET", "/v1/queues", submitTok, "").mustError(t, 429, "rate_limited")
}

func TestHTTP2OverTLS(t *testing.T) {
	e := newEnv(t, testutilSQLite(t), Options{})
	srv := newTLSServer(t, e.h)
	req, _ := http.NewRequest("POST", srv.URL+"/v1/tasks", strings.NewReader(`{"workflow":"echo","id":"h2"}`))
	req.Header.Set("Authorization", "Bearer "+submitTok)
	req.Header.Set("Content-Type", "application/json")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 201 || resp.ProtoMajor != 2 {
		t.Fatalf("status %d over %s, want 201 over HTTP/2", resp.StatusCode, resp.Proto)
	}
}

// deadLetterHead receives the head of a session as a consumer would and
// dead-letters it with the reason "bad"; it returns its sequence number.
func (e *testEnv) deadLetterHead(t *testing.T, queue, session string) int64 {
	t.Helper()
	ctx := context.Background()
	rc, err := e.q.AcceptSession(ctx, queue, session)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rc.Close(ctx) }()
	m, err := rc.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.DeadLetter(ctx, m, "bad"); err != nil {
		t.Fatal(err)
	}
	return m.Seq
}

// A submit with priority stores it and the task shows it; absent, the
// workflow's (0); out of range is refused naming the field.
func TestSubmitPriority(t *testing.T) {
	e := newEnv(t, testutilSQLite(t), Options{})
	r := e.do("POST", "/v1/tasks", submitTok, `{"workflow":"echo","id":"p-1","priority":8,"delay_ms":3600000}`).must(t, 201)
	if got := r.json["priority"]; got != 8.0 {
		t.Fatalf("submitted with priority 8: %s", r.body)
	}
	if got := e.do("GET", "/v1/tasks/p-1", submitTok, "").must(t, 200).json["priority"]; got != 8.0 {
		t.Errorf("read back priority %v", got)
	}
	if got := e.do("POST", "/v1/tasks", submitTok, `{"workflow":"echo","id":"p-2","delay_ms":3600000}`).must(t, 201).json["priority"]; got != 0.0 {
		t.Errorf("default priority %v, want 0", got)
	}
	for _, body := range []string{`{"workflow":"echo","priority":11}`, `{"workflow":"echo","priority":-1}`} {
		if msg := e.do("POST", "/v1/tasks", submitTok, body).mustError(t, 400, "").errMsg(); !strings.Contains(msg, `field "priority": want an integer from 0 (lowest) to 10`) {
			t.Errorf("%s: %q", body, msg)
		}
	}
}

// A submit with run_at or delay_ms stores the task Pending until then,
// shown as available_at; bad delays are refused naming the field.
func TestSubmitDelayed(t *testing.T) {
	e := newEnv(t, testutilSQLite(t), Options{})
	before := time.Now()
	r := e.do("POST", "/v1/tasks", submitTok, `{"workflow":"echo","id":"d-1","delay_ms":3600000}`).must(t, 201)
	at, err := time.Parse(time.RFC3339Nano, r.str("available_at"))
	if err != nil || r.str("state") != "Pending" || at.Before(before.Add(time.Hour)) || at.After(time.Now().Add(time.Hour)) {
		t.Fatalf("delayed submit: %s (%v), want Pending, available in an hour", r.body, err)
	}
	e.do("POST", "/v1/tasks", submitTok, `{"workflow":"echo","id":"d-2","run_at":"2030-01-02T03:04:05Z"}`).must(t, 201)
	if got := e.do("GET", "/v1/tasks/d-2", submitTok, "").must(t, 200).str("available_at"); got != "2030-01-02T03:04:05Z" {
		t.Errorf("run_at stored as available_at %s", got)
	}
	for body, want := range map[string]string{
		`{"workflow":"echo","run_at":"2030-01-02T03:04:05Z","delay_ms":1}`: `fields "run_at" and "delay_ms" are both given`,
		`{"workflow":"echo","delay_ms":-1}`:                                `field "delay_ms": want 0 or more milliseconds`,
		`{"workflow":"echo","delay_ms":315360000001}`:                      `field "delay_ms": at most 315360000000`,
		`{"workflow":"echo","run_at":"tomorrow"}`:                          `run_at`,
		`{"workflow":"echo","run_at":"2999-01-01T00:00:00Z"}`:              `more than`,
	} {
		if msg := e.do("POST", "/v1/tasks", submitTok, body).mustError(t, 400, "").errMsg(); !strings.Contains(msg, want) {
			t.Errorf("%s: %q, want it to say %q", body, msg, want)
		}
	}
	if got := len(e.do("GET", "/v1/tasks", submitTok, "").must(t, 200).json["tasks"].([]any)); got != 2 {
		t.Errorf("%d tasks stored, want the two delayed ones", got)
	}
}
