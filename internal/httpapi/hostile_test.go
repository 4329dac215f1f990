package httpapi

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/store"
)

// TestHostileFieldsAre400: NUL characters, invalid UTF-8 and IDs taken for
// flags, in paths and bodies, answer 400 naming the field on every driver,
// never 500, and change nothing.
func TestHostileFieldsAre400(t *testing.T) {
	drivers(t, func(t *testing.T, open func(t *testing.T) store.Driver) {
		e, _ := newAgentEnv(t, open(t), Options{})
		e.do("POST", "/v1/tasks", submitTok, `{"workflow":"remote","id":"r-1"}`).must(t, 201)
		got := e.pollOne("worker")
		e.do("POST", "/v1/tasks", submitTok, `{"workflow":"remote","id":"t-1"}`).must(t, 201)
		e.do("POST", "/v1/queues/q/messages", submitTok, `{"messages":[{"session_id":"s","body":1}]}`).must(t, 201)
		_, tok := e.accept("q", `{}`)
		m, _ := e.receive("q", "s", tok)
		seq := num(m["seq"])

		for _, c := range []struct {
			name, method, target, token, body string
			want                              string // in the error message
		}{
			{"submit: NUL in the ID", "POST", "/v1/tasks", submitTok, `{"workflow":"remote","id":"a\u0000b"}`, `field "id"`},
			{"submit: ID starting with -", "POST", "/v1/tasks", submitTok, `{"workflow":"remote","id":"-x"}`, `field "id" "-x": starts with "-"`},
			{"submit: NUL in the ordering key", "POST", "/v1/tasks", submitTok, `{"workflow":"remote","ordering_key":"k\u0000"}`, `field "ordering_key"`},
			{"submit: NUL in the workflow", "POST", "/v1/tasks", submitTok, `{"workflow":"remote\u0000"}`, "workflow"},
			{"task: NUL in the path", "GET", "/v1/tasks/a%00b", submitTok, "", "the path contains the control character U+0000"},
			{"task: invalid UTF-8 in the path", "GET", "/v1/tasks/%FF%FE", submitTok, "", `task ID "\xff\xfe": is not valid UTF-8`},
			{"cancel: NUL in the path", "POST", "/v1/tasks/a%00/cancel", operatorTok, "", "the path contains"},
			{"cancel: NUL in the reason", "POST", "/v1/tasks/t-1/cancel", operatorTok, `{"reason":"x\u0000y"}`, `field "reason" "x\x00y": contains the NUL character`},
			{"cancel: reason too long", "POST", "/v1/tasks/t-1/cancel", operatorTok, fmt.Sprintf(`{"reason":%q}`, strings.Repeat("r", 1001)), `field "reason"`},
			{"resubmit: invalid UTF-8 in the path", "POST", "/v1/tasks/%FF/resubmit", operatorTok, "", "task ID"},
			{"events: invalid UTF-8 in the path", "GET", "/v1/tasks/a%FF/events", submitTok, "", "task ID"},
			{"fail: NUL in the error", "POST", failPath(got.ID), agentTok, tokenBody(got.Token, `"error":"x\u0000y","permanent":true`), `field "error"`},
			{"fail: NUL in a transient error", "POST", failPath(got.ID), agentTok, tokenBody(got.Token, `"error":"x\u0000y"`), `field "error"`},
			{"publish: NUL in the session ID", "POST", "/v1/queues/q/messages", submitTok, `{"messages":[{"session_id":"s\u0000","body":1}]}`, `field "messages[0].session_id"`},
			{"publish: NUL in the message ID", "POST", "/v1/queues/q/messages", submitTok, `{"messages":[{"session_id":"s","message_id":"m\u0000","body":1}]}`, "MessageID"},
			{"peek: invalid UTF-8 in the session path", "GET", "/v1/queues/q/sessions/s%FF/messages", submitTok, "", "session ID"},
			{"peek: invalid UTF-8 in the queue path", "GET", "/v1/queues/q%FF/sessions/s/messages", submitTok, "", "queue"},
			{"accept: NUL in the session", "POST", "/v1/queues/q/sessions:accept", submitTok, `{"session":"s\u0000"}`, "session"},
			{"settle: NUL in the dead-letter reason", "POST", "/v1/queues/q/sessions/s/settle", submitTok,
				fmt.Sprintf(`{"lock_token":%q,"seq":%d,"outcome":"dead_letter","reason":"bad\u0000order"}`, tok, seq), `field "reason"`},
			{"resolve: invalid UTF-8 in the session path", "POST", "/v1/queues/q/sessions/s%FF/deadletters/1/resubmit", operatorTok, "", "session ID"},
		} {
			r := e.do(c.method, c.target, c.token, c.body)
			if r.status != 400 || !strings.Contains(r.errMsg(), c.want) {
				t.Errorf("%s: %d %s; want 400 naming %q", c.name, r.status, r.body, c.want)
			}
		}

		// Nothing changed: the task, the remote request and the message
		// are as they were, and take good input.
		if r := e.do("GET", "/v1/tasks/t-1", submitTok, "").must(t, 200); r.str("state") == "Cancelled" {
			t.Error("t-1 was cancelled by a refused request")
		}
		e.do("POST", "/v1/tasks/t-1/cancel", operatorTok, `{"reason":"two\nlines"}`).must(t, 200)
		e.do("POST", failPath(got.ID), agentTok, tokenBody(got.Token, `"error":"declined","permanent":true`)).must(t, 200)
		e.do("POST", "/v1/queues/q/sessions/s/settle", submitTok,
			fmt.Sprintf(`{"lock_token":%q,"seq":%d,"outcome":"dead_letter","reason":"bad order"}`, tok, seq)).must(t, 200)
	})
}

// TestBinaryOutputShown: an agent's output that is neither JSON nor UTF-8
// (with a NUL byte) is stored as it is and shown as a JSON string, on
// every driver.
func TestBinaryOutputShown(t *testing.T) {
	drivers(t, func(t *testing.T, open func(t *testing.T) store.Driver) {
		e := startEnv(t, drover.Config{Store: open(t), PollInterval: 10 * time.Millisecond,
			Workflows: []drover.Workflow{{Name: "raw", Steps: []drover.Step{{Name: "a", Agent: "raw"}}}},
			Agents: []drover.Agent{{Name: "raw", Func: func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) {
				return []byte("\xff\x00raw"), nil
			}}},
		}, Options{Tokens: testTokens})
		e.do("POST", "/v1/tasks", submitTok, `{"workflow":"raw","id":"b-1"}`).must(t, 201)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := e.d.Wait(ctx, "b-1"); err != nil {
			t.Fatal(err)
		}
		r := e.do("GET", "/v1/tasks/b-1", submitTok, "").must(t, 200)
		if out, _ := r.json["output"].(string); out != "\uFFFD\x00raw" {
			t.Errorf("output = %#v, want the bytes as a JSON string", r.json["output"])
		}
	})
}
