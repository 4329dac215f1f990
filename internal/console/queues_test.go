package console_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/drover-run/drover/convoy"
	"github.com/drover-run/drover/internal/testutil"
	"github.com/drover-run/drover/server"
	"github.com/drover-run/drover/store"
)

// ledger publishes three messages to session acct-1 of queue "ledger" and
// one to acct-2, then dead-letters acct-1's first message ("bad amount"),
// which blocks the session (the default policy). It returns the convoy
// client it consumed with.
func (e *env) ledger() *convoy.Client {
	e.t.Helper()
	e.api("POST", "/v1/queues/ledger/messages", `{"messages":[{"session_id":"acct-1","body":{"n":1}},{"session_id":"acct-1","body":{"n":2}},{"session_id":"acct-1","body":{"n":3}},{"session_id":"acct-2","body":{"n":1}}]}`, nil)
	q, err := convoy.New(convoy.Config{Store: e.drv, InstanceID: "test-consumer"})
	if err != nil {
		e.t.Fatal(err)
	}
	ctx := context.Background()
	r, err := q.AcceptSession(ctx, "ledger", "acct-1")
	if err != nil {
		e.t.Fatal(err)
	}
	m, err := r.Receive(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := r.DeadLetter(ctx, m, "bad amount"); err != nil {
		e.t.Fatal(err)
	}
	if err := r.Close(ctx); err != nil {
		e.t.Fatal(err)
	}
	return q
}

// drain receives acct-1's messages in order until none is left and
// returns their bodies.
func drain(t *testing.T, q *convoy.Client) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := q.AcceptSession(ctx, "ledger", "acct-1")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	var got []string
	for {
		s, err := q.Session(ctx, "ledger", "acct-1")
		if err != nil {
			t.Fatal(err)
		}
		if s.Pending == 0 {
			return got
		}
		m, err := r.Receive(ctx)
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		got = append(got, string(m.Body))
		if err := r.Complete(ctx, m, nil); err != nil {
			t.Fatal(err)
		}
	}
}

// The session queue pages show the queues, a blocked session with its
// pending messages and its dead letter's reason; a reader sees no action,
// an operator resolves the dead letter only with a valid CSRF token, and
// the session then drains in order.
func TestQueuePages(t *testing.T) {
	stores(t, func(t *testing.T, d store.Driver) {
		e := startServer(t, d, false)
		q := e.ledger()

		reader := browser(t)
		e.signIn(reader, readToken)
		wantIn(t, e.get(reader, "/"), `href="/queues"`)
		wantIn(t, e.get(reader, "/queues"), `href="/queues/ledger">ledger</a>`, "<td>block</td>")
		qp := e.get(reader, "/queues/ledger")
		wantIn(t, qp, `href="/queues/ledger/sessions/acct-1">acct-1</a>`, `<span class="state st-error">blocked</span>`, "bad amount",
			`<td>2</td>`, "Poison policy <strong>block</strong>")
		wantOut(t, qp, "Resubmit…", "Discard…")
		// The session's alert links to the session's page.
		wantIn(t, e.get(reader, "/alerts?kind=session_blocked"), `<a href="/queues/ledger/sessions/acct-1">session:ledger/acct-1</a>`)
		sp := e.get(reader, "/queues/ledger/sessions/acct-1")
		wantIn(t, sp, "Blocked: message 1 was dead-lettered at", "(bad amount). The 2 messages behind it wait for an operator")
		if p := e.get(reader, "/queues/nope"); p.status != http.StatusNotFound {
			t.Errorf("unknown queue: %d, want 404", p.status)
		}
		if p := e.get(reader, "/queues/ledger/sessions/nope"); p.status != http.StatusNotFound {
			t.Errorf("unknown session: %d, want 404", p.status)
		}
		if p := e.get(reader, "/queues/other%2Fledger"); p.status != http.StatusBadRequest {
			t.Errorf("a queue name with /: %d, want 400", p.status)
		}

		op := browser(t)
		e.signIn(op, opToken)
		wantIn(t, e.get(op, "/queues/ledger"), `href="/queues/ledger/sessions/acct-1/deadletters/1/resubmit">Resubmit…</a>`)
		const path = "/queues/ledger/sessions/acct-1/deadletters/1/"
		conf := e.get(op, path+"resubmit")
		wantIn(t, conf, "goes back to the head of session “acct-1”", "before the session&#39;s 2 pending messages", "bad amount")
		wantIn(t, e.get(op, path+"discard"), "is deleted for good")
		if p := e.get(op, "/queues/ledger/sessions/acct-1/deadletters/2/resubmit"); p.status != http.StatusNotFound {
			t.Errorf("confirmation of a message that is not dead: %d, want 404", p.status)
		}
		if p := e.get(op, path+"move"); p.status != http.StatusNotFound {
			t.Errorf("unknown action: %d, want 404", p.status)
		}
		token := csrf(t, conf)
		for _, tc := range []struct {
			name   string
			c      *http.Client
			form   url.Values
			status int
		}{
			{"reader", reader, url.Values{"csrf": {csrf(t, e.get(reader, "/"))}}, 403},
			{"no csrf", op, url.Values{}, 403},
			{"no cookie", browser(t), url.Values{"csrf": {token}}, 401},
		} {
			for _, a := range []string{"resubmit", "discard"} {
				if p := e.do(tc.c, "POST", path+a, tc.form); p.status != tc.status {
					t.Errorf("%s: POST %s: %d, want %d", tc.name, a, p.status, tc.status)
				}
			}
		}
		if s, err := q.Session(context.Background(), "ledger", "acct-1"); err != nil || !s.Blocked {
			t.Fatalf("after refused actions the session: %+v %v, want it still blocked", s, err)
		}
		p := e.do(op, "POST", path+"resubmit", url.Values{"csrf": {token}})
		if p.status != http.StatusSeeOther || !strings.HasPrefix(p.loc, "/queues/ledger/sessions/acct-1?done=") {
			t.Fatalf("resubmit: %d %q %s", p.status, p.loc, p.body)
		}
		wantIn(t, e.get(op, p.loc), "Message 1 resubmitted", "dead_letter_resubmitted</td><td>http:oncall</td>") // who did it
		if p := e.do(op, "POST", path+"resubmit", url.Values{"csrf": {token}}); p.status != http.StatusNotFound {
			t.Errorf("resubmitting it again: %d, want 404", p.status)
		}
		if got, want := strings.Join(drain(t, q), " "), `{"n":1} {"n":2} {"n":3}`; got != want {
			t.Errorf("the session drained %s, want %s", got, want)
		}
		wantIn(t, e.get(op, "/queues/ledger/sessions/acct-1"), "Idle: every message published so far was settled.")
	})
}

// A namespace's token sees and resolves its namespace's queues only.
func TestQueuesNamespace(t *testing.T) {
	const acmeToken = "acme-operator-0123456789"
	e := startServerTokens(t, testutil.SQLite(t), false, []server.Token{
		{Secret: opToken, Scopes: []server.Scope{server.ScopeOperator}, Name: "oncall"},
		{Secret: acmeToken, Scopes: []server.Scope{server.ScopeOperator}, Namespace: "acme", Name: "acme-oncall"}})
	e.ledger() // in the default namespace
	e.apiAs(acmeToken, "POST", "/v1/queues/orders/messages", `{"session_id":"s-1","body":1}`, nil)
	c := browser(t)
	e.signIn(c, acmeToken)
	list := e.get(c, "/queues")
	wantIn(t, list, `href="/queues/orders">orders</a>`)
	wantOut(t, list, "ledger", "acme/")
	ov := e.get(c, "/")
	wantIn(t, ov, `<td><a href="/queues/orders">orders</a></td><td>1</td><td>1</td>`)
	wantOut(t, ov, "ledger")
	if p := e.get(c, "/queues/ledger"); p.status != http.StatusNotFound {
		t.Errorf("another namespace's queue: %d, want 404", p.status)
	}
	wantIn(t, e.get(c, "/queues/orders/sessions/s-1"), "Waiting for a consumer: 1 message pending")
	conf := e.get(c, "/queues/orders")
	if p := e.do(c, "POST", "/queues/ledger/sessions/acct-1/deadletters/1/discard", url.Values{"csrf": {csrf(t, conf)}}); p.status != http.StatusNotFound {
		t.Errorf("discarding another namespace's dead letter: %d, want 404", p.status)
	}
	op := browser(t)
	e.signIn(op, opToken)
	wantIn(t, e.get(op, "/queues/ledger"), "bad amount") // still there
	wantOut(t, e.get(op, "/queues"), "orders")
}
