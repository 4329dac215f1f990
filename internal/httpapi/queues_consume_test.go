package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/drover-run/drover/convoy"
	"github.com/drover-run/drover/internal/clock"
	"github.com/drover-run/drover/store"
)

// newConsumeEnv is newEnv whose queue client (and so the lock expiries)
// reads clk.
func newConsumeEnv(t *testing.T, drv store.Driver, clk *clock.Fake) *testEnv {
	t.Helper()
	e := newEnv(t, drv, Options{})
	q, err := convoy.New(convoy.Config{Store: drv, PollInterval: 10 * time.Millisecond, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(e.d, q, Options{Tokens: testTokens, Rate: -1})
	if err != nil {
		t.Fatal(err)
	}
	e.h, e.q = h, q
	return e
}

// call is e.do for goroutines: it reports instead of failing the test.
func (e *testEnv) call(method, target, token, body string) (int, map[string]any, error) {
	req := newReq(method, target, body)
	req.Header.Set("Authorization", "Bearer "+token)
	rec := httptest.NewRecorder()
	e.h.ServeHTTP(rec, req)
	var out map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		return rec.Code, nil, fmt.Errorf("%s %s: answer %d is not JSON: %q", method, target, rec.Code, rec.Body.String())
	}
	return rec.Code, out, nil
}

func num(v any) int64 { f, _ := v.(float64); return int64(f) }

// lockTokenPattern is the form of the lock tokens the accept hands out.
var lockTokenPattern = regexp.MustCompile(`^[1-9][0-9]*\.[0-9a-f]{32}$`)

// tokNum returns the sequential part of a lock token ("<n>.<nonce>").
func tokNum(tok string) int64 {
	n, _, _ := strings.Cut(tok, ".")
	v, _ := strconv.ParseInt(n, 10, 64)
	return v
}

// retoken returns tok with its sequential part replaced by n: a token the
// accept never handed out, though its nonce is genuine.
func retoken(tok string, n int64) string {
	_, nonce, _ := strings.Cut(tok, ".")
	return strconv.FormatInt(n, 10) + "." + nonce
}

// accept accepts a session over the API and returns it and its lock token.
func (e *testEnv) accept(queue, body string) (string, string) {
	e.t.Helper()
	r := e.do("POST", "/v1/queues/"+queue+"/sessions:accept", submitTok, body).must(e.t, 200)
	s, _ := r.json["session"].(string)
	return s, r.str("lock_token")
}

// receive receives over the API; it returns the message (nil if none).
func (e *testEnv) receive(queue, session, tok string) (map[string]any, *response) {
	e.t.Helper()
	r := e.do("POST", "/v1/queues/"+queue+"/sessions/"+session+"/receive", submitTok, fmt.Sprintf(`{"lock_token":%q,"wait_ms":0}`, tok)).must(e.t, 200)
	m, _ := r.json["message"].(map[string]any)
	return m, r
}

func (e *testEnv) settle(queue, session, tok string, seq int64, outcome string) *response {
	e.t.Helper()
	return e.do("POST", "/v1/queues/"+queue+"/sessions/"+session+"/settle", submitTok,
		fmt.Sprintf(`{"lock_token":%q,"seq":%d,"outcome":%q}`, tok, seq, outcome))
}

func TestQueuePolicyAPI(t *testing.T) {
	drivers(t, func(t *testing.T, open func(t *testing.T) store.Driver) {
		e := newEnv(t, open(t), Options{})
		e.do("GET", "/v1/queues/orders/policy", submitTok, "").mustError(t, 404, "not_found")
		// A submit token may read, not change.
		e.do("PUT", "/v1/queues/orders/policy", submitTok, `{"max_delivery_count":5}`).mustError(t, 403, "forbidden")
		r := e.do("PUT", "/v1/queues/orders/policy", operatorTok, `{"max_delivery_count":5,"poison_policy":"skip"}`).must(t, 201)
		if num(r.json["max_delivery_count"]) != 5 || r.str("poison_policy") != "skip" || num(r.json["lock_duration_ms"]) != 30000 || num(r.json["dedupe_window_ms"]) != 600000 {
			t.Fatalf("created: %s", r.body)
		}
		// Only the parts given change.
		r = e.do("PUT", "/v1/queues/orders/policy", operatorTok, `{"dedupe_window_ms":0,"lock_duration_ms":1500}`).must(t, 200)
		if num(r.json["max_delivery_count"]) != 5 || r.str("poison_policy") != "skip" || num(r.json["lock_duration_ms"]) != 1500 || num(r.json["dedupe_window_ms"]) != 0 {
			t.Fatalf("changed: %s", r.body)
		}
		g := e.do("GET", "/v1/queues/orders/policy", submitTok, "").must(t, 200)
		if string(g.body) != string(r.body) {
			t.Fatalf("GET %s after PUT %s", g.body, r.body)
		}
		p, err := e.q.QueuePolicy(t.Context(), "orders")
		if err != nil || p.MaxDeliveryCount != 5 || p.Poison != convoy.PoisonSkip || p.DedupeWindow != convoy.NoDedupe || p.LockDuration != 1500*time.Millisecond {
			t.Fatalf("stored policy %+v, %v", p, err)
		}
		before := e.snapshot()
		for _, c := range []struct{ body, field string }{
			{`{"max_delivery_count":0}`, "max_delivery_count"},
			{`{"max_delivery_count":"5"}`, "max_delivery_count"},
			{`{"max_delivery_count":1.5}`, "max_delivery_count"},
			{`{"poison_policy":"drop"}`, "poison_policy"},
			{`{"poison_policy":null,"dedupe_window_ms":-1}`, "dedupe_window_ms"},
			{`{"dedupe_window_ms":1e30}`, "dedupe_window_ms"},
			{`{"lock_duration_ms":9}`, "lock_duration_ms"},
			{`{"lock_duration_ms":86400001}`, "lock_duration_ms"},
			{`{"max_delivery_count":3,"lock_duration_ms":5}`, "lock_duration_ms"},
			{`{"max_delivery":3}`, "max_delivery"},
			{`{"Max_Delivery_Count":3}`, "Max_Delivery_Count"},
			{`{}`, "nothing to change"},
			{``, "empty"},
		} {
			r := e.do("PUT", "/v1/queues/orders/policy", operatorTok, c.body).mustError(t, 400, "")
			if !strings.Contains(r.errMsg(), c.field) {
				t.Errorf("%s: message %q does not name %s", c.body, r.errMsg(), c.field)
			}
		}
		e.do("PUT", "/v1/queues/a%20b/policy", operatorTok, `{"max_delivery_count":3}`).mustError(t, 400, "invalid_request")
		e.do("GET", "/v1/queues/orders/policy?x=1", submitTok, "").mustError(t, 400, "unknown_parameter")
		if after := e.snapshot(); after != before {
			t.Fatalf("refused policy changes changed the store:\n%s\n---\n%s", before, after)
		}
	})
}

// TestRemoteConsumersFIFO runs two remote consumers over one queue: per
// session, message n+1 is never handed out before n is settled, and no
// message is completed twice.
func TestRemoteConsumersFIFO(t *testing.T) {
	drivers(t, func(t *testing.T, open func(t *testing.T) store.Driver) {
		e := newEnv(t, open(t), Options{})
		const sessions, perSession = 4, 6
		var msgs []string
		for i := 1; i <= perSession; i++ {
			for s := range sessions {
				msgs = append(msgs, fmt.Sprintf(`{"session_id":"s/%d","body":{"n":%d}}`, s, i))
			}
		}
		e.do("POST", "/v1/queues/q/messages", submitTok, `{"messages":[`+strings.Join(msgs, ",")+`]}`).must(t, 201)

		// One session held: nobody else gets it, and a receive again
		// without a settle delivers the same head again.
		sess, tok := e.accept("q", `{"session":"s/0"}`)
		if sess != "s/0" || tokNum(tok) < 1 || !lockTokenPattern.MatchString(tok) {
			t.Fatalf("accept s/0: %q %q", sess, tok)
		}
		e.do("POST", "/v1/queues/q/sessions:accept", submitTok, `{"session":"s/0"}`).mustError(t, 409, "session_locked")
		e.do("POST", "/v1/queues/q/sessions:accept", submitTok, `{"session":"nope"}`).mustError(t, 404, "not_found")
		m, _ := e.receive("q", "s%2F0", tok)
		if num(m["seq"]) != 1 || num(m["delivery_count"]) != 1 || m["body"].(map[string]any)["n"] != float64(1) || m["session_id"] != "s/0" {
			t.Fatalf("first receive: %v", m)
		}
		m, _ = e.receive("q", "s%2F0", tok)
		if num(m["seq"]) != 1 || num(m["delivery_count"]) != 2 {
			t.Fatalf("receive again before the settle: %v", m)
		}
		e.settle("q", "s%2F0", tok, 2, "complete").mustError(t, 409, "not_head")
		e.do("POST", "/v1/queues/q/sessions/s%2F0/release", submitTok, fmt.Sprintf(`{"lock_token":%q}`, tok)).must(t, 200)
		e.settle("q", "s%2F0", tok, 1, "complete").mustError(t, 409, "lock_lost")

		var (
			mu        sync.Mutex
			settled   = map[string]int64{} // session: last seq completed
			completed int
			errs      []error
		)
		report := func(err error) {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
		total := sessions * perSession
		done := func() bool { mu.Lock(); defer mu.Unlock(); return completed >= total || len(errs) > 0 }
		deadline := time.Now().Add(60 * time.Second)
		var wg sync.WaitGroup
		for c := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !done() && time.Now().Before(deadline) {
					st, a, err := e.call("POST", "/v1/queues/q/sessions:accept", submitTok, `{"wait_ms":200}`)
					if err != nil || st != 200 {
						report(fmt.Errorf("consumer %d: accept %d %v %v", c, st, a, err))
						return
					}
					sid, ok := a["session"].(string)
					if !ok {
						continue
					}
					path := "/v1/queues/q/sessions/" + strings.ReplaceAll(sid, "/", "%2F")
					tok, _ := a["lock_token"].(string)
					for {
						st, r, err := e.call("POST", path+"/receive", submitTok, fmt.Sprintf(`{"lock_token":%q,"wait_ms":0}`, tok))
						if err != nil || st != 200 {
							report(fmt.Errorf("consumer %d: receive %d %v %v", c, st, r, err))
							return
						}
						m, _ := r["message"].(map[string]any)
						if m == nil {
							break
						}
						seq := num(m["seq"])
						mu.Lock()
						if want := settled[sid] + 1; seq != want {
							errs = append(errs, fmt.Errorf("consumer %d got %s seq %d while %d is the next unsettled", c, sid, seq, want))
						}
						mu.Unlock()
						st, r, err = e.call("POST", path+"/settle", submitTok, fmt.Sprintf(`{"lock_token":%q,"seq":%d,"outcome":"complete"}`, tok, seq))
						if err != nil || st != 200 {
							report(fmt.Errorf("consumer %d: settle %d %v %v", c, st, r, err))
							return
						}
						mu.Lock()
						if settled[sid] >= seq {
							errs = append(errs, fmt.Errorf("%s seq %d completed twice", sid, seq))
						}
						settled[sid] = seq
						completed++
						mu.Unlock()
					}
					if st, r, err := e.call("POST", path+"/release", submitTok, fmt.Sprintf(`{"lock_token":%q}`, tok)); err != nil || st != 200 {
						report(fmt.Errorf("consumer %d: release %d %v %v", c, st, r, err))
						return
					}
				}
			}()
		}
		wg.Wait()
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		if completed != total {
			t.Fatalf("completed %d of %d: %v", completed, total, settled)
		}
		for s := range sessions {
			r := e.do("GET", fmt.Sprintf("/v1/queues/q/sessions/s%%2F%d/messages", s), submitTok, "").must(t, 200)
			if n := len(r.json["messages"].([]any)); n != 0 {
				t.Fatalf("session s/%d keeps %d messages", s, n)
			}
		}
	})
}

// TestRemoteConsumerLockExpiry: a token whose lock expired is refused
// (409 lock_lost) and changes nothing; the message is delivered again.
func TestRemoteConsumerLockExpiry(t *testing.T) {
	drivers(t, func(t *testing.T, open func(t *testing.T) store.Driver) {
		clk := clock.NewFake(time.Now())
		e := newConsumeEnv(t, open(t), clk)
		e.do("PUT", "/v1/queues/q/policy", operatorTok, `{"lock_duration_ms":1000}`).must(t, 201)
		e.do("POST", "/v1/queues/q/messages", submitTok, `{"session_id":"s","body":"hello"}`).must(t, 201)
		r := e.do("POST", "/v1/queues/q/sessions:accept", submitTok, `{}`).must(t, 200)
		tok := r.str("lock_token")
		if r.str("session") != "s" || num(r.json["lock_duration_ms"]) != 1000 || r.str("locked_until") == "" {
			t.Fatalf("accept: %s", r.body)
		}
		m, _ := e.receive("q", "s", tok)
		if num(m["delivery_count"]) != 1 || m["body"] != "hello" {
			t.Fatalf("receive: %v", m)
		}
		// A renewal moves the expiry.
		clk.Advance(600 * time.Millisecond)
		r = e.do("POST", "/v1/queues/q/sessions/s/renew", submitTok, fmt.Sprintf(`{"lock_token":%q}`, tok)).must(t, 200)
		until, err := time.Parse(time.RFC3339Nano, r.str("locked_until"))
		if err != nil || !until.After(clk.Now().Add(900*time.Millisecond)) {
			t.Fatalf("renew: %s (%v)", r.body, err)
		}
		clk.Advance(1500 * time.Millisecond) // past the renewed lock
		before := e.snapshot()
		e.settle("q", "s", tok, 1, "complete").mustError(t, 409, "lock_lost")
		e.settle("q", "s", tok, 1, "dead_letter").mustError(t, 409, "lock_lost")
		e.do("POST", "/v1/queues/q/sessions/s/receive", submitTok, fmt.Sprintf(`{"lock_token":%q}`, tok)).mustError(t, 409, "lock_lost")
		e.do("POST", "/v1/queues/q/sessions/s/renew", submitTok, fmt.Sprintf(`{"lock_token":%q}`, tok)).mustError(t, 409, "lock_lost")
		e.do("POST", "/v1/queues/q/sessions/s/release", submitTok, fmt.Sprintf(`{"lock_token":%q}`, tok)).mustError(t, 409, "lock_lost")
		// A token never handed out is refused the same way.
		e.settle("q", "s", retoken(tok, tokNum(tok)+7), 1, "complete").mustError(t, 409, "lock_lost")
		if after := e.snapshot(); after != before {
			t.Fatalf("a stale token changed the store:\n%s\n---\n%s", before, after)
		}
		// Another consumer takes the session over: the message again.
		_, tok2 := e.accept("q", `{"wait_ms":0}`)
		if tokNum(tok2) <= tokNum(tok) {
			t.Fatalf("token %q after %q", tok2, tok)
		}
		m, _ = e.receive("q", "s", tok2)
		if num(m["seq"]) != 1 || num(m["delivery_count"]) != 2 {
			t.Fatalf("redelivery: %v", m)
		}
		e.settle("q", "s", tok, 1, "complete").mustError(t, 409, "lock_lost")
		e.settle("q", "s", tok2, 1, "complete").must(t, 200)
		e.settle("q", "s", tok2, 1, "complete").mustError(t, 409, "not_head")
		if m, _ := e.receive("q", "s", tok2); m != nil {
			t.Fatalf("after the completion: %v", m)
		}
		// Nothing left: an accept's wait ends with no session.
		e.do("POST", "/v1/queues/q/sessions/s/release", submitTok, fmt.Sprintf(`{"lock_token":%q}`, tok2)).must(t, 200)
		r = e.do("POST", "/v1/queues/q/sessions:accept", submitTok, `{"wait_ms":50}`).must(t, 200)
		if string(r.body) != "{\"session\":null}\n" {
			t.Fatalf("empty accept: %s", r.body)
		}
	})
}

// TestRemoteConsumerDeadLetter: abandons past max_delivery_count
// dead-letter the message as for in-process consumers (block: the session
// halts with an alert; skip: it goes on), and dead_letter settles.
func TestRemoteConsumerDeadLetter(t *testing.T) {
	drivers(t, func(t *testing.T, open func(t *testing.T) store.Driver) {
		e := newEnv(t, open(t), Options{})
		for _, poison := range []string{"block", "skip"} {
			q := "q-" + poison
			e.do("PUT", "/v1/queues/"+q+"/policy", operatorTok, `{"max_delivery_count":2,"poison_policy":"`+poison+`"}`).must(t, 201)
			e.do("POST", "/v1/queues/"+q+"/messages", submitTok, `{"messages":[{"session_id":"s","body":1},{"session_id":"s","body":2},{"session_id":"s","body":3}]}`).must(t, 201)
			_, tok := e.accept(q, `{}`)
			for d := 1; d <= 2; d++ {
				m, _ := e.receive(q, "s", tok)
				if num(m["seq"]) != 1 || num(m["delivery_count"]) != int64(d) {
					t.Fatalf("%s: delivery %d: %v", poison, d, m)
				}
				e.settle(q, "s", tok, 1, "abandon").must(t, 200)
			}
			m, r := e.receive(q, "s", tok)
			dl := e.do("GET", "/v1/queues/"+q+"/deadletters", submitTok, "").must(t, 200).json["dead_letters"].([]any)
			if len(dl) != 1 || num(dl[0].(map[string]any)["seq"]) != 1 || !strings.Contains(dl[0].(map[string]any)["dead_reason"].(string), "delivery") {
				t.Fatalf("%s: dead letters %v", poison, dl)
			}
			if poison == "block" {
				if m != nil || r.json["blocked"] != true {
					t.Fatalf("block: %s", r.body)
				}
				alerts := e.do("GET", "/v1/alerts", submitTok, "").must(t, 200).json["alerts"].([]any)
				if len(alerts) == 0 {
					t.Fatal("block: no alert")
				}
				continue
			}
			if num(m["seq"]) != 2 || num(m["delivery_count"]) != 1 {
				t.Fatalf("skip: next message %s", r.body)
			}
			// The consumer dead-letters seq 2 itself, with a reason.
			e.do("POST", "/v1/queues/"+q+"/sessions/s/settle", submitTok, fmt.Sprintf(`{"lock_token":%q,"seq":2,"outcome":"dead_letter","reason":"bad order"}`, tok)).must(t, 200)
			dl = e.do("GET", "/v1/queues/"+q+"/deadletters", submitTok, "").must(t, 200).json["dead_letters"].([]any)
			if len(dl) != 2 || dl[1].(map[string]any)["dead_reason"] != "bad order" {
				t.Fatalf("skip: dead letters %v", dl)
			}
			if m, _ := e.receive(q, "s", tok); num(m["seq"]) != 3 {
				t.Fatalf("skip: after the dead letter %v", m)
			}
		}
	})
}

func TestRemoteConsumerBadInput(t *testing.T) {
	drivers(t, func(t *testing.T, open func(t *testing.T) store.Driver) {
		e := newEnv(t, open(t), Options{})
		seedState(t, e)
		e.do("POST", "/v1/queues/q/messages", submitTok, `{"session_id":"t","body":1}`).must(t, 201)
		_, tok := e.accept("q", `{"session":"t"}`)
		before := e.snapshot()
		routes := []struct{ method, path, wrongType, wrongCase string }{
			{"PUT", "/v1/queues/q/policy", `{"max_delivery_count":"x"}`, `{"Poison_Policy":"skip"}`},
			{"POST", "/v1/queues/q/sessions:accept", `{"wait_ms":"1"}`, `{"Session":"t"}`},
			{"POST", "/v1/queues/q/sessions/t/receive", `{"lock_token":1}`, `{"Lock_Token":"1.x"}`},
			{"POST", "/v1/queues/q/sessions/t/settle", `{"lock_token":"1.x","seq":1,"outcome":1}`, `{"lock_token":"1.x","SEQ":1,"outcome":"complete"}`},
			{"POST", "/v1/queues/q/sessions/t/renew", `{"lock_token":true}`, `{"LOCK_TOKEN":"1.x"}`},
			{"POST", "/v1/queues/q/sessions/t/release", `{"lock_token":[1]}`, `{"lock_Token":"1.x"}`},
		}
		for _, rt := range routes {
			for _, bi := range badInputs {
				t.Run(rt.path+"/"+bi.name, func(t *testing.T) {
					e.do(rt.method, rt.path, operatorTok, bi.body).mustError(t, bi.status, bi.code)
				})
			}
			t.Run(rt.path+"/wrong-type", func(t *testing.T) {
				e.do(rt.method, rt.path, operatorTok, rt.wrongType).mustError(t, 400, "invalid_field")
			})
			t.Run(rt.path+"/wrong-case", func(t *testing.T) {
				e.do(rt.method, rt.path, operatorTok, rt.wrongCase).mustError(t, 400, "unknown_field")
			})
			t.Run(rt.path+"/unknown-query", func(t *testing.T) {
				e.do(rt.method, rt.path+"?x=1", operatorTok, `{}`).mustError(t, 400, "unknown_parameter")
			})
			t.Run(rt.path+"/no-token", func(t *testing.T) {
				e.do(rt.method, rt.path, "", `{}`).mustError(t, 401, "unauthorized")
			})
			t.Run(rt.path+"/content-type", func(t *testing.T) {
				req := newReq(rt.method, rt.path, `{}`)
				req.Header.Set("Content-Type", "text/plain")
				req.Header.Set("Authorization", "Bearer "+operatorTok)
				e.serve(req).mustError(t, 415, "unsupported_media_type")
			})
		}
		for _, c := range []struct{ path, body, code string }{
			{"/v1/queues/q/sessions:accept", `{"wait_ms":-1}`, "invalid_field"},
			{"/v1/queues/q/sessions:accept", `{"wait_ms":60001}`, "invalid_field"},
			{"/v1/queues/q/sessions:accept", `{"session":""}`, "invalid_field"},
			{"/v1/queues/q/sessions:accept", `{"session":"a\u0000"}`, "invalid_field"},
			{"/v1/queues/q%20x/sessions:accept", `{}`, "invalid_request"},
			{"/v1/queues/q/sessions/t/receive", `{}`, "invalid_field"},
			{"/v1/queues/q/sessions/t/receive", `{"lock_token":0}`, "invalid_field"},
			{"/v1/queues/q/sessions/t/receive", `{"lock_token":1.5}`, "invalid_field"},
			{"/v1/queues/q/sessions/t/receive", fmt.Sprintf(`{"lock_token":%q,"wait_ms":60001}`, tok), "invalid_field"},
			{"/v1/queues/q/sessions/t/receive", fmt.Sprintf(`{"lock_token":%q,"max":2}`, tok), "unknown_field"},
			{"/v1/queues/q/sessions/t/settle", fmt.Sprintf(`{"lock_token":%q,"outcome":"complete"}`, tok), "invalid_field"},
			{"/v1/queues/q/sessions/t/settle", fmt.Sprintf(`{"lock_token":%q,"seq":0,"outcome":"complete"}`, tok), "invalid_field"},
			{"/v1/queues/q/sessions/t/settle", fmt.Sprintf(`{"lock_token":%q,"seq":1}`, tok), "invalid_field"},
			{"/v1/queues/q/sessions/t/settle", fmt.Sprintf(`{"lock_token":%q,"seq":1,"outcome":"done"}`, tok), "invalid_field"},
			{"/v1/queues/q/sessions/t/settle", fmt.Sprintf(`{"lock_token":%q,"seq":1,"outcome":"complete","reason":"x"}`, tok), "invalid_field"},
			{"/v1/queues/q/sessions/t/settle", fmt.Sprintf(`{"lock_token":%q,"seq":1,"outcome":"complete","delay_ms":5}`, tok), "invalid_field"},
			{"/v1/queues/q/sessions/t/settle", fmt.Sprintf(`{"lock_token":%q,"seq":1,"outcome":"abandon","delay_ms":-5}`, tok), "invalid_field"},
			{"/v1/queues/q/sessions/t/settle", fmt.Sprintf(`{"lock_token":%q,"seq":1,"outcome":"dead_letter","reason":"%s"}`, tok, strings.Repeat("r", 4097)), "invalid_field"},
			{"/v1/queues/q/sessions/t/renew", `{}`, "invalid_field"},
			{"/v1/queues/q/sessions/t/renew", `{"lock_token":1}`, "invalid_field"},
			{"/v1/queues/q/sessions/t/release", `{"lock_token":-3}`, "invalid_field"},
			// A foreign token: another session's, or one never handed out.
			{"/v1/queues/q/sessions/s/settle", fmt.Sprintf(`{"lock_token":%q,"seq":2,"outcome":"complete"}`, tok), "lock_lost"},
			{"/v1/queues/q/sessions/t/settle", fmt.Sprintf(`{"lock_token":%q,"seq":1,"outcome":"complete"}`, retoken(tok, tokNum(tok)+1)), "lock_lost"},
			// A session or queue that does not exist (in the caller's
			// namespace: another's answers alike).
			{"/v1/queues/q/sessions/nope/release", fmt.Sprintf(`{"lock_token":%q}`, tok), "not_found"},
			{"/v1/queues/other/sessions/t/renew", fmt.Sprintf(`{"lock_token":%q}`, tok), "not_found"},
		} {
			t.Run(c.path+" "+c.body[:min(len(c.body), 50)], func(t *testing.T) {
				r := e.do("POST", c.path, submitTok, c.body)
				if r.status < 400 || r.status >= 500 {
					t.Fatalf("status %d, want 4xx: %s", r.status, r.body)
				}
				r.mustError(t, r.status, c.code)
			})
		}
		for _, c := range []struct {
			target string
			status int
		}{
			{"/v1/queues/q/sessions/t%00/receive", 400},
			{"/v1/queues/q/sessions/" + strings.Repeat("s", 257) + "/settle", 400},
			{"/v1/queues/q%2Fx/sessions:accept", 400},
			{"/v1/queues/q/sessions/t/../s/settle", 400},
			{"/v1/queues/q/sessions/t/settle/x", 404},
			{"/v1/queues/q/sessions:accept/x", 404},
			{"/v1/queues/q/sessions%3Aaccept", 200},
		} {
			t.Run(c.target[:min(len(c.target), 60)], func(t *testing.T) {
				r := e.do("POST", c.target, submitTok, `{"session":"zz"}`)
				if c.status == 200 {
					// An escaped ":" is the same path; the named session does not exist.
					if r.mustError(t, 404, "not_found"); !strings.Contains(r.errMsg(), `session "zz"`) {
						t.Fatalf("not the accept route: %s", r.body)
					}
					return
				}
				r.mustError(t, c.status, "")
			})
		}
		e.do("GET", "/v1/queues/q/sessions/t/receive", submitTok, "").mustError(t, 405, "method_not_allowed")
		if after := e.snapshot(); after != before {
			t.Fatalf("refused requests changed the store:\n%s\n---\n%s", before, after)
		}
	})
}

// TestRemoteConsumerForgedToken: a lock token with the right sequential
// part but another nonce (another consumer's, or made up) is refused with
// 409 lock_lost on every route and changes nothing; a malformed one is
// refused with 400 naming lock_token. The genuine token still works.
func TestRemoteConsumerForgedToken(t *testing.T) {
	drivers(t, func(t *testing.T, open func(t *testing.T) store.Driver) {
		e := newEnv(t, open(t), Options{})
		e.do("POST", "/v1/queues/q/messages", submitTok, `{"messages":[{"session_id":"a","body":1},{"session_id":"b","body":2}]}`).must(t, 201)
		_, tokA := e.accept("q", `{"session":"a"}`)
		_, tokB := e.accept("q", `{"session":"b"}`)
		if tokNum(tokA) != tokNum(tokB) || tokA == tokB {
			t.Fatalf("tokens %q and %q: want the same sequential part, different nonces", tokA, tokB)
		}
		if m, _ := e.receive("q", "a", tokA); num(m["seq"]) != 1 {
			t.Fatalf("receive a: %v", m)
		}
		// The session listing shows a's holder, but not its nonce.
		_, nonceA, _ := strings.Cut(tokA, ".")
		_, nonceB, _ := strings.Cut(tokB, ".")
		holder := ""
		for _, s := range e.do("GET", "/v1/queues/q/sessions", submitTok, "").must(t, 200).json["sessions"].([]any) {
			if s := s.(map[string]any); s["id"] == "a" {
				holder, _ = s["lock_holder"].(string)
			}
		}
		if !strings.HasPrefix(holder, "remote:") || strings.Contains(holder, nonceA) {
			t.Fatalf("listed lock holder %q (nonce %s)", holder, nonceA)
		}
		before := e.snapshot()
		forged := []string{
			fmt.Sprintf("%d.%s", tokNum(tokA), strings.TrimPrefix(holder, "remote:")), // the listed holder
			fmt.Sprintf("%d.%s", tokNum(tokA), nonceB),                                // consumer b's nonce on a's number
			fmt.Sprintf("%d.%s", tokNum(tokA), strings.Repeat("0", 32)),               // a made-up nonce
		}
		for _, tok := range forged {
			e.settle("q", "a", tok, 1, "complete").mustError(t, 409, "lock_lost")
			e.settle("q", "a", tok, 1, "abandon").mustError(t, 409, "lock_lost")
			e.settle("q", "a", tok, 1, "dead_letter").mustError(t, 409, "lock_lost")
			for _, action := range []string{"receive", "renew", "release"} {
				e.do("POST", "/v1/queues/q/sessions/a/"+action, submitTok, fmt.Sprintf(`{"lock_token":%q}`, tok)).mustError(t, 409, "lock_lost")
			}
		}
		nonce := nonceA
		for _, tok := range []string{
			"", "1", strconv.FormatInt(tokNum(tokA), 10), "." + nonce, "0." + nonce, "-1." + nonce, "01." + nonce, "+1." + nonce,
			"9223372036854775808." + nonce, tokA + "0", tokA[:len(tokA)-1], strings.ToUpper(tokA), " " + tokA, tokA + "\n",
			strconv.FormatInt(tokNum(tokA), 10) + ":" + nonce, tokA + ".1",
		} {
			for _, action := range []string{"receive", "renew", "release"} {
				r := e.do("POST", "/v1/queues/q/sessions/a/"+action, submitTok, fmt.Sprintf(`{"lock_token":%q}`, tok))
				if r.mustError(t, 400, "invalid_field"); !strings.Contains(r.errMsg(), "lock_token") {
					t.Fatalf("%s with %q: %s", action, tok, r.body)
				}
			}
			r := e.settle("q", "a", tok, 1, "complete")
			if r.mustError(t, 400, "invalid_field"); !strings.Contains(r.errMsg(), "lock_token") {
				t.Fatalf("settle with %q: %s", tok, r.body)
			}
		}
		if after := e.snapshot(); after != before {
			t.Fatalf("forged or malformed tokens changed the store:\n%s\n---\n%s", before, after)
		}
		// The genuine tokens still hold their sessions.
		e.do("POST", "/v1/queues/q/sessions/a/renew", submitTok, fmt.Sprintf(`{"lock_token":%q}`, tokA)).must(t, 200)
		e.settle("q", "a", tokA, 1, "complete").must(t, 200)
		if m, _ := e.receive("q", "b", tokB); num(m["seq"]) != 1 || num(m["delivery_count"]) != 1 {
			t.Fatalf("receive b: %v", m)
		}
		e.do("POST", "/v1/queues/q/sessions/a/release", submitTok, fmt.Sprintf(`{"lock_token":%q}`, tokA)).must(t, 200)
	})
}
