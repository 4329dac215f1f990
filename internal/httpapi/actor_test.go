package httpapi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"github.com/drover-run/drover"
)

// Operator actions over HTTP are recorded with the token's name, or a
// digest of the token when it has none — never the token itself.
func TestOperatorActionsRecordTheTokensName(t *testing.T) {
	const alice, anon = "alice-operator-token-0123", "anonymous-operator-token-0123"
	sum := sha256.Sum256([]byte(anon))
	anonActor := "http:token-" + hex.EncodeToString(sum[:4])
	e := newEnv(t, testutilSQLite(t), Options{Tokens: []Token{
		{Secret: submitTok, Scopes: []Scope{ScopeSubmit}},
		{Secret: alice, Scopes: []Scope{ScopeOperator}, Name: "alice"},
		{Secret: anon, Scopes: []Scope{ScopeOperator}},
	}})
	e.do("POST", "/v1/tasks", submitTok, `{"workflow":"fail","id":"f-1"}`).must(t, 201)
	e.waitState("f-1", "Error")
	e.do("POST", "/v1/tasks/f-1/resubmit", alice, "").must(t, 200)
	e.waitState("f-1", "Error")
	e.do("POST", "/v1/tasks", submitTok, `{"workflow":"external","id":"x-1"}`).must(t, 201)
	e.do("POST", "/v1/tasks/x-1/cancel", anon, `{"reason":"test"}`).must(t, 200)
	alerts := e.do("GET", "/v1/alerts", submitTok, "").must(t, 200).json["alerts"].([]any)
	id := fmt.Sprint(int64(alerts[0].(map[string]any)["id"].(float64)))
	e.do("POST", "/v1/alerts/"+id+"/ack", alice, "").must(t, 200)

	actors := map[drover.EventType][]string{}
	for _, task := range []string{"f-1", "x-1"} {
		evs, err := e.d.Events(context.Background(), drover.EventQuery{TaskID: task})
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			actors[ev.Type] = append(actors[ev.Type], ev.Actor)
		}
	}
	for typ, want := range map[drover.EventType]string{
		drover.EventResubmitted: "http:alice",
		drover.EventCancelled:   anonActor,
		"alert_acknowledged":    "http:alice",
	} {
		if got := actors[typ]; len(got) != 1 || got[0] != want {
			t.Errorf("%s recorded by %v, want %q", typ, got, want)
		}
	}
	// Resolving a dead letter records who did it too.
	ctx := context.Background()
	e.do("POST", "/v1/queues/orders/messages", submitTok, `{"messages":[{"session_id":"o-1","body":1},{"session_id":"o-1","body":2}]}`).must(t, 201)
	for who, action := range map[string]string{alice: "resubmit", anon: "discard"} {
		seq := e.deadLetterHead(t, "orders", "o-1")
		e.do("POST", fmt.Sprintf("/v1/queues/orders/sessions/o-1/deadletters/%d/%s", seq, action), who, "").must(t, 200)
	}
	evs, err := e.q.SessionEvents(ctx, "orders", "o-1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		actors[ev.Type] = append(actors[ev.Type], ev.Actor)
	}
	for typ, want := range map[drover.EventType]string{"dead_letter_resubmitted": "http:alice", "dead_letter_discarded": anonActor} {
		if got := actors[typ]; len(got) != 1 || got[0] != want {
			t.Errorf("%s recorded by %v, want %q", typ, got, want)
		}
	}
	for _, as := range actors {
		for _, a := range as {
			if strings.Contains(a, anon) || strings.Contains(a, alice) {
				t.Fatalf("a token appears in the history: %q", a)
			}
		}
	}
}

func TestParseTokenNames(t *testing.T) {
	toks, err := ParseTokens(strings.NewReader("0123456789abcdef-one operator alice\n0123456789abcdef-two submit\n"))
	if err != nil {
		t.Fatal(err)
	}
	if toks[0].Name != "alice" || toks[1].Name != "" {
		t.Fatalf("names %q, %q; want alice and none", toks[0].Name, toks[1].Name)
	}
	for in, want := range map[string]string{
		"0123456789abcdef-one operator al/ice\n":                          "line 1: the name \"al/ice\" may hold only",
		"0123456789abcdef-one operator alice bob\n":                       "line 1: want \"TOKEN SCOPE[,SCOPE] [NAME]\"",
		"0123456789abcdef-one operator " + strings.Repeat("a", 65) + "\n": "line 1: the name is 65 bytes",
	} {
		if _, err := ParseTokens(strings.NewReader(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error containing %q", in, err, want)
		}
	}
}
