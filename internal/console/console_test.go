package console_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/internal/console"
	"github.com/drover-run/drover/internal/testutil"
	"github.com/drover-run/drover/server"
	"github.com/drover-run/drover/store"
	"github.com/drover-run/drover/store/postgres"
)

const (
	readToken  = "read-token-0123456789"
	opToken    = "operator-token-0123456789"
	agentToken = "agent-token-0123456789"
)

// env is a running drover server with the console, and the agent switch
// that makes the "pay" workflow's failing tasks succeed.
type env struct {
	t     testing.TB
	base  string
	fixed *atomic.Bool
	drv   store.Driver
	ready server.Ready
}

// startServer runs server.Run on d with a "pay" workflow whose charge
// fails permanently for inputs {"bad":true} until fixed is set.
func startServer(t testing.TB, d store.Driver, noAuth bool) *env {
	t.Helper()
	return startServerTokens(t, d, noAuth, nil)
}

// startServerTokens is startServer with the given tokens (nil: the
// reader, operator and agent tokens above).
func startServerTokens(t testing.TB, d store.Driver, noAuth bool, tokens []server.Token) *env {
	t.Helper()
	return startServerWith(t, d, noAuth, tokens, nil)
}

// startServerWith is startServerTokens with edit applied to the server's
// configuration (nil: none).
func startServerWith(t testing.TB, d store.Driver, noAuth bool, tokens []server.Token, edit func(*server.Config)) *env {
	t.Helper()
	fixed := &atomic.Bool{}
	hold := make(chan struct{})
	charge := func(ctx context.Context, req *drover.AgentRequest) ([]byte, error) {
		var in struct{ Bad, Hold bool }
		_ = json.Unmarshal(req.Input, &in)
		if in.Hold {
			select {
			case <-hold:
			case <-ctx.Done():
			}
			return nil, ctx.Err()
		}
		if in.Bad && !fixed.Load() {
			return nil, drover.Permanent(errors.New("card declined"))
		}
		return []byte(`{"charged":true}`), nil
	}
	h := &server.HTTPConfig{Listen: "127.0.0.1:0", Rate: -1, NoAuth: noAuth}
	if !noAuth && tokens != nil {
		h.Tokens = tokens
	} else if !noAuth {
		h.Tokens = []server.Token{
			{Secret: readToken, Scopes: []server.Scope{server.ScopeSubmit}, Name: "reader"},
			{Secret: opToken, Scopes: []server.Scope{server.ScopeOperator}, Name: "oncall"},
			{Secret: agentToken, Scopes: []server.Scope{server.ScopeAgent}, Agents: []string{"elsewhere"}},
		}
	}
	ready := make(chan server.Ready, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	cfg := server.Config{Store: d, HTTP: h, SupervisorInterval: 50 * time.Millisecond, PollInterval: 20 * time.Millisecond,
		Workflows: []drover.Workflow{{Name: "pay", Steps: []drover.Step{{Name: "charge", Agent: "payments", Timeout: 5 * time.Second}}}},
		Agents:    []drover.Agent{{Name: "payments", Func: charge}},
		OnReady:   func(r server.Ready) { ready <- r }}
	if edit != nil {
		edit(&cfg)
	}
	go func() { done <- server.Run(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server.Run: %v", err)
		}
	})
	select {
	case r := <-ready:
		t.Cleanup(func() { close(hold) }) // runs before the server stops
		return &env{t: t, base: r.URL, fixed: fixed, drv: d, ready: r}
	case err := <-done:
		t.Fatalf("server.Run: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("server not ready within 30s")
	}
	return nil
}

// browser is an HTTP client with a cookie jar that does not follow
// redirects (the tests look at them).
func browser(t testing.TB) *http.Client {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

type page struct {
	status int
	body   string
	loc    string
}

func (e *env) do(c *http.Client, method, path string, form url.Values) page {
	e.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, e.base+path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := c.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return page{resp.StatusCode, string(b), resp.Header.Get("Location")}
}

func (e *env) get(c *http.Client, path string) page { return e.do(c, "GET", path, nil) }

// counted waits up to 30s for the overview to show the counts by state
// (counted in the background after a first load) and returns it.
func (e *env) counted(c *http.Client) page {
	e.t.Helper()
	return e.getUntil(c, "/", func(p page) bool { return strings.Contains(p.body, `id="counts"`) })
}

// countedPage loads path until its tasks are counted (the Workflows and
// Agents pages count them in the background).
func (e *env) countedPage(c *http.Client, path string) page {
	e.t.Helper()
	return e.getUntil(c, path, func(p page) bool { return p.status == http.StatusOK && !strings.Contains(p.body, "being counted") })
}

// getUntil loads path until ok says the page is the one wanted.
func (e *env) getUntil(c *http.Client, path string, ok func(page) bool) page {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		p := e.get(c, path)
		if ok(p) {
			return p
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%s not as wanted after 30s: %d %s", path, p.status, p.body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// signIn signs c in with token and checks it lands on the overview.
func (e *env) signIn(c *http.Client, token string) {
	e.t.Helper()
	p := e.do(c, "POST", "/signin", url.Values{"token": {token}})
	if p.status != http.StatusSeeOther || p.loc != "/" {
		e.t.Fatalf("sign in: %d %q, want 303 to /: %s", p.status, p.loc, p.body)
	}
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf reads the CSRF token of a page's form.
func csrf(t *testing.T, p page) string {
	t.Helper()
	m := csrfRE.FindStringSubmatch(p.body)
	if m == nil {
		t.Fatalf("no CSRF field on the page: %s", p.body)
	}
	return m[1]
}

// api calls the HTTP API with the operator token and decodes the answer.
func (e *env) api(method, path, body string, out any) {
	e.t.Helper()
	e.apiAs(opToken, method, path, body, out)
}

// apiAs calls the HTTP API with token and decodes the answer; an answer
// of 300 or more fails the test.
func (e *env) apiAs(token, method, path, body string, out any) {
	e.t.Helper()
	req, _ := http.NewRequest(method, e.base+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		b, _ := io.ReadAll(resp.Body)
		e.t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			e.t.Fatal(err)
		}
	}
}

func (e *env) submit(id string, bad bool) {
	e.t.Helper()
	e.api("POST", "/v1/tasks", fmt.Sprintf(`{"workflow":"pay","id":%q,"input":{"bad":%v}}`, id, bad), nil)
}

func (e *env) state(id string) string {
	e.t.Helper()
	var t struct{ State string }
	e.api("GET", "/v1/tasks/"+id, "", &t)
	return t.State
}

// waitState waits up to 30s for task id to reach want.
func (e *env) waitState(id, want string) {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := e.state(id)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("task %s is %s after 30s, want %s", id, got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func stores(t *testing.T, fn func(t *testing.T, d store.Driver)) {
	t.Run("sqlite", func(t *testing.T) { t.Parallel(); fn(t, testutil.SQLite(t)) })
	t.Run("postgres", func(t *testing.T) { t.Parallel(); fn(t, testutil.Postgres(t)) })
}

// browserStore runs a browser test on one store, kind "sqlite" or
// "postgres". What the pages show comes through drover.Client, which the
// page tests check on both stores; a browser test checks what a person sees
// and does, and one browser runs at a time, so most run on one store (each
// store has its share; the incident drill runs on both).
func browserStore(t *testing.T, kind string, fn func(t *testing.T, d store.Driver)) {
	t.Run(kind, func(t *testing.T) {
		t.Parallel()
		switch kind {
		case "sqlite":
			fn(t, testutil.SQLite(t))
		case "postgres":
			fn(t, testutil.Postgres(t))
		default:
			t.Fatalf("browserStore: unknown store %q", kind)
		}
	})
}

func wantIn(t *testing.T, p page, subs ...string) {
	t.Helper()
	for _, s := range subs {
		if !strings.Contains(p.body, s) {
			t.Errorf("page (status %d) lacks %q:\n%s", p.status, s, p.body)
		}
	}
}

func wantOut(t *testing.T, p page, subs ...string) {
	t.Helper()
	for _, s := range subs {
		if strings.Contains(p.body, s) {
			t.Errorf("page has %q, it should not", s)
		}
	}
}

// The pages render for a signed-in reader, the filters and the keyset
// pagination of the task list work, and the task page explains a failure.
func TestPages(t *testing.T) {
	stores(t, func(t *testing.T, d store.Driver) {
		e := startServer(t, d, false)
		for i := range 52 {
			e.submit(fmt.Sprintf("ok-%03d", i), false)
		}
		e.submit("bad-1", true)
		e.waitState("bad-1", "Error")
		e.waitState("ok-051", "Processed")

		c := browser(t)
		if p := e.get(c, "/"); p.status != http.StatusSeeOther || p.loc != "/signin" {
			t.Fatalf("GET / without a session: %d %q, want 303 to /signin", p.status, p.loc)
		}
		e.signIn(c, readToken)
		e.api("POST", "/v1/queues/ledger/messages", `{"messages":[{"session_id":"acct-1","body":"x"}]}`, nil)
		ov := e.counted(c)
		wantIn(t, ov, "Overview", "reader · read-only", `href="/tasks?state=Error">Error</a></td><td>1</td>`, "open alerts",
			`<span class="num">1</span> session queues`)

		errs := e.get(c, "/tasks?state=Error")
		wantIn(t, errs, "bad-1", "card declined")
		wantOut(t, errs, "ok-000")

		first := e.get(c, "/tasks?workflow=pay")
		wantIn(t, first, "bad-1", "ok-048", `rel="next" href="/tasks?after=ok-048&amp;workflow=pay"`)
		wantOut(t, first, "ok-049")
		next := e.get(c, "/tasks?after=ok-048&workflow=pay")
		wantIn(t, next, "ok-049", "ok-051")
		wantOut(t, next, "ok-048<", "rel=\"next\"")

		byID := e.get(c, "/tasks?id=ok-05")
		wantIn(t, byID, "ok-050", "ok-051")
		wantOut(t, byID, "ok-049", "bad-1")
		if p := e.get(c, "/tasks?workflow=nope"); p.status != 200 || !strings.Contains(p.body, "No task matches") {
			t.Errorf("unknown workflow: %d %s", p.status, p.body)
		}
		if p := e.get(c, "/tasks?state=Bogus"); p.status != http.StatusBadRequest {
			t.Errorf("unknown state: %d, want 400", p.status)
		}

		tp := e.get(c, "/tasks/bad-1")
		wantIn(t, tp, `Step 0 “charge” failed at`, "card declined. It waits for an operator", "bad-1/0/charge", "<td>payments</td>", "step_failed", "&#34;bad&#34;: true")
		wantIn(t, tp, `<h2 id="attempts">Attempts</h2>`, `<text class="tl-label" x="4" y="38.0">0 charge #1</text>`, `class="tl-bar tl-failed"`,
			`<span class="outcome tl-failed">failed</span></td><td class="err">permanent error: card declined</td>`)
		wantOut(t, tp, "Resubmit…", "Resubmit from here") // read-only
		if p := e.get(c, "/tasks/nope"); p.status != http.StatusNotFound {
			t.Errorf("unknown task: %d, want 404", p.status)
		}
		al := e.get(c, "/alerts")
		wantIn(t, al, `href="/tasks/bad-1"`, "card declined")
		wantOut(t, al, `action="/alerts/`, `name="id"`)
	})
}

// Sign-in checks the token as the API does: unknown tokens and tokens
// that may not read are refused and get no session.
func TestSignIn(t *testing.T) {
	e := startServer(t, testutil.SQLite(t), false)
	for _, tc := range []struct {
		token  string
		status int
	}{{"not-a-token-0123456789", 401}, {"", 401}, {agentToken, 403}} {
		c := browser(t)
		p := e.do(c, "POST", "/signin", url.Values{"token": {tc.token}})
		if p.status != tc.status {
			t.Errorf("sign in with %q: %d, want %d", tc.token, p.status, tc.status)
		}
		if p := e.get(c, "/tasks"); p.status != http.StatusSeeOther {
			t.Errorf("after a refused sign-in GET /tasks: %d, want a redirect to sign in", p.status)
		}
	}
	c := browser(t)
	e.signIn(c, opToken)
	u, _ := url.Parse(e.base)
	for _, ck := range c.Jar.Cookies(u) {
		if strings.Contains(ck.Value, opToken) {
			t.Errorf("the cookie holds the token in clear")
		}
	}
	ov := e.get(c, "/")
	wantIn(t, ov, "oncall · operator")
	so := e.do(c, "POST", "/signout", url.Values{"csrf": {csrf(t, ov)}})
	if so.status != http.StatusSeeOther {
		t.Fatalf("sign out: %d", so.status)
	}
	if p := e.get(c, "/"); p.status != http.StatusSeeOther {
		t.Errorf("after sign-out GET /: %d, want a redirect", p.status)
	}
	// The API is still the API.
	var none struct{ Tasks []any }
	e.api("GET", "/v1/tasks", "", &none)
}

// Signing out ends the session on every server of the store: a copy of
// its cookie taken before is refused (sent to sign in again, the copy
// deleted), while another session of the same token goes on. A store
// that cannot be read answers an error, not a sign-in.
func TestSignOutEndsCopiesOfTheSession(t *testing.T) {
	d := testutil.Postgres(t)
	other, err := postgres.Open(context.Background(), testutil.PostgresURL(t), postgres.Options{Schema: d.Schema()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })
	a, b := startServer(t, d, false), startServer(t, other, false)
	c, thief, second := browser(t), browser(t), browser(t)
	a.signIn(c, opToken)
	a.signIn(second, opToken)
	ua, _ := url.Parse(a.base)
	stolen := c.Jar.Cookies(ua)
	thief.Jar.SetCookies(ua, stolen)
	for _, e := range []*env{a, b} {
		if p := e.get(thief, "/"); p.status != http.StatusOK {
			t.Fatalf("the copied cookie before the sign-out: %d", p.status)
		}
	}
	ov := a.get(c, "/")
	if so := a.do(c, "POST", "/signout", url.Values{"csrf": {csrf(t, ov)}}); so.status != http.StatusSeeOther || so.loc != "/signin" {
		t.Fatalf("sign out: %d %q", so.status, so.loc)
	}
	for _, e := range []*env{a, b} {
		// Cookies are the host's, whatever the port: each refusal
		// deletes the thief's copy for both servers, so set it again.
		u, _ := url.Parse(e.base)
		thief.Jar.SetCookies(u, stolen)
		p := e.get(thief, "/tasks")
		if p.status != http.StatusSeeOther || !strings.Contains(p.loc, "/signin?why=") || !strings.Contains(p.loc, "signed+out") {
			t.Errorf("%s: the copied cookie after the sign-out: %d %q, want sent to sign in, saying why", e.base, p.status, p.loc)
		}
		thief.Jar.SetCookies(u, stolen)
		if got := e.do(thief, "POST", "/tasks/x/cancel", url.Values{"csrf": {csrf(t, ov)}}); got.status != http.StatusUnauthorized || !strings.Contains(got.body, "signed out") {
			t.Errorf("%s: an action with the copied cookie after the sign-out: %d, want 401 saying it was signed out", e.base, got.status)
		}
	}
	if p := b.get(second, "/"); p.status != http.StatusOK || !strings.Contains(p.body, "oncall · operator") {
		t.Errorf("another session of the same token after the sign-out: %d", p.status)
	}
	// The sign-in page says why.
	if p := a.get(thief, "/signin?why="+url.QueryEscape("This session was signed out. Sign in again.")); !strings.Contains(p.body, "This session was signed out") {
		t.Errorf("sign-in page: %s", p.body)
	}

	// A store that cannot answer: an error page, not a sign-in; a
	// sign-out says it did not happen and keeps the cookie.
	ov2 := b.get(second, "/")
	other.Close()
	if p := b.get(second, "/"); p.status < 500 || strings.Contains(p.loc, "/signin") {
		t.Errorf("with the store closed: %d %q, want a 5xx error page", p.status, p.loc)
	}
	ub, _ := url.Parse(b.base)
	if p := b.do(second, "POST", "/signout", url.Values{"csrf": {csrf(t, ov2)}}); p.status != http.StatusServiceUnavailable ||
		!strings.Contains(p.body, "Not signed out") || len(second.Jar.Cookies(ub)) == 0 {
		t.Errorf("sign-out with the store closed: %d, cookies left %d: %s", p.status, len(second.Jar.Cookies(ub)), p.body)
	}
}

// A sign-out is recorded over the token's rate limit too (a copy of the
// cookie is refused after it); signing the copy out again still ends in
// the sign-in page.
func TestSignOutOverTheRateLimit(t *testing.T) {
	d := testutil.SQLite(t)
	e := startServerWith(t, d, false, nil, func(cfg *server.Config) { cfg.HTTP.Rate, cfg.HTTP.Burst = 0.001, 2 })
	c, thief := browser(t), browser(t)
	e.signIn(c, opToken)
	u, _ := url.Parse(e.base)
	stolen := c.Jar.Cookies(u)
	ov := e.get(c, "/") // the token's burst: 2 requests
	e.get(c, "/")
	if p := e.get(c, "/"); p.status != http.StatusTooManyRequests {
		t.Fatalf("over the rate limit: %d, want 429", p.status)
	}
	if so := e.do(c, "POST", "/signout", url.Values{"csrf": {csrf(t, ov)}}); so.status != http.StatusSeeOther || so.loc != "/signin" {
		t.Fatalf("sign out over the rate limit: %d %q", so.status, so.loc)
	}
	thief.Jar.SetCookies(u, stolen)
	if p := e.get(thief, "/"); p.status != http.StatusSeeOther || !strings.Contains(p.loc, "signed+out") {
		t.Errorf("the copy after a sign-out over the rate limit: %d %q, want sent to sign in as signed out", p.status, p.loc)
	}
	thief.Jar.SetCookies(u, stolen)
	if so := e.do(thief, "POST", "/signout", url.Values{"csrf": {csrf(t, ov)}}); so.status != http.StatusSeeOther || so.loc != "/signin" {
		t.Errorf("signing out the copy again: %d %q", so.status, so.loc)
	}
}

// A session opens on every server configured with the same tokens (many
// processes behind one address), and on none whose token list differs.
func TestSessionAcrossServers(t *testing.T) {
	a := startServer(t, testutil.SQLite(t), false)
	same := startServer(t, testutil.SQLite(t), false)
	changed := startServerTokens(t, testutil.SQLite(t), false, []server.Token{
		{Secret: opToken, Scopes: []server.Scope{server.ScopeOperator}, Name: "oncall"}})
	c := browser(t)
	a.signIn(c, opToken)
	u, _ := url.Parse(a.base)
	cookies := c.Jar.Cookies(u)
	for _, e := range []*env{same, changed} {
		v, _ := url.Parse(e.base)
		c.Jar.SetCookies(v, cookies)
	}
	if p := same.get(c, "/"); p.status != 200 || !strings.Contains(p.body, "oncall · operator") {
		t.Errorf("another server with the same tokens: %d", p.status)
	}
	if p := changed.get(c, "/"); p.status != http.StatusSeeOther || p.loc != "/signin" {
		t.Errorf("a server with other tokens: %d %q, want 303 to /signin", p.status, p.loc)
	}
}

// Actions need a valid session cookie, the operator scope and the
// session's CSRF token; without any of them nothing changes.
func TestActionsRefused(t *testing.T) {
	stores(t, func(t *testing.T, d store.Driver) {
		e := startServer(t, d, false)
		e.submit("bad-1", true)
		e.waitState("bad-1", "Error")

		op := browser(t)
		e.signIn(op, opToken)
		conf := e.get(op, "/tasks/bad-1/resubmit")
		wantIn(t, conf, `runs again from step 0 &#34;charge&#34;, with the same idempotency key (bad-1/0/charge)`)
		token := csrf(t, conf)

		reader := browser(t)
		e.signIn(reader, readToken)
		readerCSRF := csrf(t, e.get(reader, "/"))

		forged := browser(t)
		u, _ := url.Parse(e.base)
		forged.Jar.SetCookies(u, []*http.Cookie{{Name: "drover_session", Value: "AAAA" + strings.Repeat("x", 80)}})

		other := browser(t)
		e.signIn(other, opToken)
		otherCSRF := csrf(t, e.get(other, "/"))

		for _, tc := range []struct {
			name   string
			c      *http.Client
			form   url.Values
			status int
		}{
			{"reader", reader, url.Values{"csrf": {readerCSRF}}, 403},
			{"no csrf", op, url.Values{}, 403},
			{"wrong csrf", op, url.Values{"csrf": {token + "x"}}, 403},
			{"another session's csrf", op, url.Values{"csrf": {otherCSRF}}, 403},
			{"forged cookie", forged, url.Values{"csrf": {token}}, 401},
			{"no cookie", browser(t), url.Values{"csrf": {token}}, 401},
		} {
			for _, path := range []string{"/tasks/bad-1/resubmit", "/tasks/bad-1/cancel"} {
				form := url.Values{"reason": {"test"}}
				for k, v := range tc.form {
					form[k] = v
				}
				if p := e.do(tc.c, "POST", path, form); p.status != tc.status {
					t.Errorf("%s: POST %s: %d, want %d", tc.name, path, p.status, tc.status)
				}
			}
			if got := e.state("bad-1"); got != "Error" {
				t.Fatalf("%s: the task is %s, want it unchanged (Error)", tc.name, got)
			}
		}
		// A cross-origin form is refused even with the right token.
		req, _ := http.NewRequest("POST", e.base+"/tasks/bad-1/resubmit", strings.NewReader(url.Values{"csrf": {token}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", "https://evil.example")
		resp, err := op.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 403 || e.state("bad-1") != "Error" {
			t.Errorf("cross-origin POST: %d, task %s", resp.StatusCode, e.state("bad-1"))
		}

		// The operator with the token acts: the failed task is resubmitted
		// and, its cause fixed, completes.
		e.fixed.Store(true)
		p := e.do(op, "POST", "/tasks/bad-1/resubmit", url.Values{"csrf": {token}})
		if p.status != http.StatusSeeOther || !strings.HasPrefix(p.loc, "/tasks/bad-1?done=") {
			t.Fatalf("resubmit: %d %q: %s", p.status, p.loc, p.body)
		}
		e.waitState("bad-1", "Processed")
		tp := e.get(op, p.loc)
		wantIn(t, tp, "Resubmitted", "Done: all 1 steps completed", "http:oncall")
	})
}

// Cancel records the reason and the token's actor; acknowledging an
// alert removes it from the open ones.
func TestCancelAndAcknowledge(t *testing.T) {
	e := startServer(t, testutil.SQLite(t), false)
	e.submit("bad-1", true)
	e.waitState("bad-1", "Error")
	op := browser(t)
	e.signIn(op, opToken)

	al := e.get(op, "/alerts")
	wantIn(t, al, "card declined", "Acknowledge")
	m := regexp.MustCompile(`action="/alerts/(\d+)/ack"`).FindStringSubmatch(al.body)
	if m == nil {
		t.Fatalf("no acknowledge form: %s", al.body)
	}
	p := e.do(op, "POST", "/alerts/"+m[1]+"/ack", url.Values{"csrf": {csrf(t, al)}})
	if p.status != http.StatusSeeOther {
		t.Fatalf("ack: %d %s", p.status, p.body)
	}
	after := e.get(op, p.loc)
	wantIn(t, after, "Alert "+m[1]+" acknowledged")
	wantOut(t, after, `action="/alerts/`+m[1]+`/ack"`)

	// Resubmit from a step: the confirmation names it, a step that does
	// not exist is refused and changes nothing.
	tp := e.get(op, "/tasks/bad-1")
	wantIn(t, tp, `href="/tasks/bad-1/resubmit?from=0">Resubmit from here…`)
	from := e.get(op, "/tasks/bad-1/resubmit?from=0")
	wantIn(t, from, "runs again from step 0 &#34;charge&#34;: that step and every later one", `name="from_step" value="0"`)
	if p := e.get(op, "/tasks/bad-1/resubmit?from=3"); p.status != http.StatusBadRequest || !strings.Contains(p.body, "has no step 3") {
		t.Errorf("confirmation from step 3 of a one-step task: %d %s", p.status, p.body)
	}
	for _, bad := range []string{"3", "-1", "x"} {
		if p := e.do(op, "POST", "/tasks/bad-1/resubmit", url.Values{"csrf": {csrf(t, from)}, "from_step": {bad}}); p.status != http.StatusBadRequest {
			t.Errorf("resubmit from step %q: %d, want 400", bad, p.status)
		}
	}
	if got := e.state("bad-1"); got != "Error" {
		t.Fatalf("after refused resubmits the task is %s", got)
	}
	if p := e.do(op, "POST", "/tasks/bad-1/resubmit", url.Values{"csrf": {csrf(t, from)}, "from_step": {"0"}}); p.status != http.StatusSeeOther {
		t.Fatalf("resubmit from step 0: %d %s", p.status, p.body)
	}
	e.waitState("bad-1", "Error") // still declined

	// A final task cannot be cancelled, nor a running one resubmitted.
	if p := e.get(op, "/tasks/bad-1/cancel"); p.status != http.StatusConflict {
		t.Errorf("cancel page of an Error task: %d, want 409", p.status)
	}
	e.api("POST", "/v1/tasks", `{"workflow":"pay","id":"held-1","input":{"hold":true}}`, nil)
	e.waitState("held-1", "Processing")
	if p := e.get(op, "/tasks/held-1/resubmit"); p.status != http.StatusConflict {
		t.Errorf("resubmit page of a Processing task: %d, want 409", p.status)
	}
	conf := e.get(op, "/tasks/held-1/cancel")
	wantIn(t, conf, "becomes Cancelled", "The call in flight is not interrupted")
	if p := e.do(op, "POST", "/tasks/held-1/cancel", url.Values{"csrf": {csrf(t, conf)}, "reason": {""}}); p.status != http.StatusBadRequest {
		t.Errorf("cancel without a reason: %d, want 400", p.status)
	}
	if got := e.state("held-1"); got != "Processing" {
		t.Fatalf("after a refused cancel the task is %s", got)
	}
	p = e.do(op, "POST", "/tasks/held-1/cancel", url.Values{"csrf": {csrf(t, conf)}, "reason": {"customer called"}})
	if p.status != http.StatusSeeOther {
		t.Fatalf("cancel: %d %s", p.status, p.body)
	}
	if got := e.state("held-1"); got != "Cancelled" {
		t.Fatalf("after cancel the task is %s", got)
	}
	wantIn(t, e.get(op, p.loc), "Cancelled at", "customer called", "http:oncall")
}

// A token of a namespace sees that namespace only, and no counts that
// cover the others; task IDs show without the namespace.
func TestNamespaceToken(t *testing.T) {
	const acmeToken = "acme-operator-0123456789"
	e := startServerTokens(t, testutil.SQLite(t), false, []server.Token{
		{Secret: opToken, Scopes: []server.Scope{server.ScopeOperator}, Name: "oncall"},
		{Secret: acmeToken, Scopes: []server.Scope{server.ScopeOperator}, Namespace: "acme", Name: "acme-oncall"}})
	e.submit("bad-1", true) // the default namespace
	e.waitState("bad-1", "Error")
	e.apiAs(acmeToken, "POST", "/v1/tasks", `{"workflow":"pay","id":"o-1","input":{"bad":true}}`, nil)
	c := browser(t)
	e.signIn(c, acmeToken)
	ov := e.get(c, "/")
	wantIn(t, ov, `id="no-counts"`, `id="leader"`)
	wantOut(t, ov, "tasks not final", `id="throughput"`) // the charts cover every namespace
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(e.get(c, "/tasks?state=Error").body, `href="/tasks/o-1">o-1</a>`) {
		if time.Now().After(deadline) {
			t.Fatal("o-1 not listed in Error within 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	list := e.get(c, "/tasks")
	wantOut(t, list, "bad-1", "acme/")
	// The key filter reads the namespace's key as submitted.
	e.apiAs(acmeToken, "POST", "/v1/tasks", `{"workflow":"pay","id":"o-2","ordering_key":"acct-9","input":{"bad":true}}`, nil)
	wantIn(t, e.get(c, "/tasks?key=acct-9"), `href="/tasks/o-2"`)
	if p := e.get(c, "/tasks/bad-1"); p.status != http.StatusNotFound {
		t.Errorf("another namespace's task: %d, want 404", p.status)
	}
	tp := e.get(c, "/tasks/o-1")
	wantIn(t, tp, "<code>o-1</code>", "card declined")
	al := e.get(c, "/alerts")
	wantIn(t, al, `href="/tasks/o-1"`)
	wantOut(t, al, "bad-1")
	conf := e.get(c, "/tasks/o-1/resubmit")
	if p := e.do(c, "POST", "/tasks/bad-1/resubmit", url.Values{"csrf": {csrf(t, conf)}}); p.status != http.StatusNotFound || e.state("bad-1") != "Error" {
		t.Errorf("resubmit of another namespace's task: %d", p.status)
	}
}

// A global token chooses the namespace its pages show with the header's
// picker (as the API's Drover-Namespace header does), acts on that
// namespace's tasks, and goes back to the default one; a namespace's
// token cannot leave its own, and a bad name is refused with the reason.
func TestNamespacePicker(t *testing.T) {
	const acmeToken = "acme-operator-0123456789"
	e := startServerTokens(t, testutil.SQLite(t), false, []server.Token{
		{Secret: opToken, Scopes: []server.Scope{server.ScopeOperator}, Name: "oncall"},
		{Secret: readToken, Scopes: []server.Scope{server.ScopeSubmit}, Name: "reader"},
		{Secret: acmeToken, Scopes: []server.Scope{server.ScopeOperator}, Namespace: "acme", Name: "acme-oncall"}})
	e.submit("bad-1", true) // the default namespace
	e.apiAs(acmeToken, "POST", "/v1/tasks", `{"workflow":"pay","id":"o-1","input":{"bad":true}}`, nil)
	e.waitState("bad-1", "Error")
	c := browser(t)
	e.signIn(c, opToken)
	ov := e.get(c, "/")
	wantIn(t, ov, `action="/namespace"`, `value="default" list="ns-list"`, `<option value="acme">`)
	if p := e.do(c, "POST", "/namespace", url.Values{"ns": {"acme"}}); p.status != http.StatusForbidden {
		t.Errorf("switch without the CSRF token: %d, want 403", p.status)
	}
	tok := csrf(t, ov)
	if p := e.do(c, "POST", "/namespace", url.Values{"csrf": {tok}, "ns": {"no/such"}}); p.status != http.StatusBadRequest || !strings.Contains(p.body, "namespace") {
		t.Errorf("switch to a bad name: %d %s, want 400 naming the namespace", p.status, p.body)
	}
	if p := e.do(c, "POST", "/namespace", url.Values{"csrf": {tok}, "ns": {"acme"}}); p.status != http.StatusSeeOther {
		t.Fatalf("switch to acme: %d %s", p.status, p.body)
	}
	wantIn(t, e.get(c, "/"), `value="acme" list="ns-list"`)
	list := e.getUntil(c, "/tasks?state=Error", func(p page) bool { return strings.Contains(p.body, `href="/tasks/o-1">o-1</a>`) })
	wantOut(t, list, "bad-1")
	if p := e.get(c, "/tasks/bad-1"); p.status != http.StatusNotFound {
		t.Errorf("the default namespace's task from acme: %d, want 404", p.status)
	}
	// Acting there acts on acme's task.
	e.fixed.Store(true)
	if p := e.do(c, "POST", "/tasks/o-1/resubmit", url.Values{"csrf": {tok}}); p.status != http.StatusSeeOther {
		t.Fatalf("resubmit o-1 in acme: %d %s", p.status, p.body)
	}
	var o1 struct{ State string }
	deadline := time.Now().Add(30 * time.Second)
	for e.apiAs(acmeToken, "GET", "/v1/tasks/o-1", "", &o1); o1.State != "Processed"; e.apiAs(acmeToken, "GET", "/v1/tasks/o-1", "", &o1) {
		if time.Now().After(deadline) {
			t.Fatalf("acme's o-1 is %s 30s after the resubmit", o1.State)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := e.state("bad-1"); got != "Error" {
		t.Errorf("the default namespace's bad-1 is %s: the resubmit went to the wrong namespace", got)
	}
	// An empty name is the default namespace again.
	if p := e.do(c, "POST", "/namespace", url.Values{"csrf": {tok}, "ns": {""}}); p.status != http.StatusSeeOther {
		t.Fatalf("switch back: %d", p.status)
	}
	wantIn(t, e.get(c, "/tasks?state=Error"), `href="/tasks/bad-1"`)

	// A read-only global token may switch too (it changes nothing stored).
	r := browser(t)
	e.signIn(r, readToken)
	if p := e.do(r, "POST", "/namespace", url.Values{"csrf": {csrf(t, e.get(r, "/"))}, "ns": {"acme"}}); p.status != http.StatusSeeOther {
		t.Errorf("read-only switch: %d", p.status)
	}
	// A namespace's token has no picker and cannot leave its namespace.
	a := browser(t)
	e.signIn(a, acmeToken)
	aov := e.get(a, "/")
	wantIn(t, aov, "namespace <strong>acme</strong>")
	wantOut(t, aov, `action="/namespace"`)
	if p := e.do(a, "POST", "/namespace", url.Values{"csrf": {csrf(t, aov)}, "ns": {"default"}}); p.status != http.StatusBadRequest || !strings.Contains(p.body, "belongs to the namespace") {
		t.Errorf("a namespace's token switching out: %d %s", p.status, p.body)
	}
	wantOut(t, e.get(a, "/tasks?state=Error"), "bad-1")
}

// The console's requests count against their token's rate limit, shared
// with its API requests: over it, a page, an action and the live stream
// answer 429 with Retry-After, and do nothing.
func TestConsoleRateLimit(t *testing.T) {
	e := startServerWith(t, testutil.SQLite(t), false, nil, func(c *server.Config) {
		c.HTTP.Rate, c.HTTP.Burst = 0.001, 2 // two requests, then one every 1000s
	})
	// The task is submitted with the reader's token and watched in the
	// store: the operator's token is left whole for the console.
	e.apiAs(readToken, "POST", "/v1/tasks", `{"workflow":"pay","id":"bad-1","input":{"bad":true}}`, nil)
	stored := func() string {
		tk, err := e.drv.Reader().TaskGet(context.Background(), &store.TaskGetParams{ID: "bad-1"})
		if err != nil {
			t.Fatal(err)
		}
		return string(tk.ProcessState)
	}
	testutil.WaitFor(t, "bad-1 in Error", func() bool { return stored() == "Error" })
	c := browser(t)
	e.signIn(c, opToken)                      // sign-in itself is not counted
	conf := e.get(c, "/tasks/bad-1/resubmit") // the first
	e.get(c, "/")                             // the second
	if conf.status != http.StatusOK {
		t.Fatalf("the second request: %d", conf.status)
	}
	for _, p := range []page{
		e.get(c, "/tasks"),
		e.do(c, "POST", "/tasks/bad-1/resubmit", url.Values{"csrf": {csrf(t, conf)}}),
		e.get(c, "/tasks/bad-1/live"),
	} {
		if p.status != http.StatusTooManyRequests || !strings.Contains(p.body, "too many requests for this token") {
			t.Errorf("over the limit: %d %s, want 429 naming the token's limit", p.status, p.body)
		}
	}
	if got := stored(); got != "Error" {
		t.Errorf("the refused resubmit ran: bad-1 is %s", got)
	}
	// Another token has its own limit (the reader's second request).
	r := browser(t)
	e.signIn(r, readToken)
	if p := e.get(r, "/"); p.status != http.StatusOK {
		t.Errorf("another token: %d", p.status)
	}
}

// Without auth on loopback the console needs no sign-in, still checks
// the CSRF token, and answers only a loopback Host.
func TestNoAuth(t *testing.T) {
	e := startServer(t, testutil.SQLite(t), true)
	e.submit("bad-1", true)
	e.waitState("bad-1", "Error")
	c := browser(t)
	ov := e.get(c, "/")
	if ov.status != 200 {
		t.Fatalf("GET /: %d %s", ov.status, ov.body)
	}
	wantIn(t, ov, "no auth (loopback) · operator")
	wantOut(t, ov, "Sign out")
	conf := e.get(c, "/tasks/bad-1/resubmit")
	if p := e.do(c, "POST", "/tasks/bad-1/resubmit", url.Values{}); p.status != 403 || e.state("bad-1") != "Error" {
		t.Errorf("POST without CSRF: %d", p.status)
	}
	req, _ := http.NewRequest("GET", e.base+"/", nil)
	req.Host = "rebound.example:80"
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 {
		t.Errorf("GET / for Host rebound.example: %d, want 403", resp.StatusCode)
	}
	e.fixed.Store(true)
	p := e.do(c, "POST", "/tasks/bad-1/resubmit", url.Values{"csrf": {csrf(t, conf)}})
	if p.status != http.StatusSeeOther {
		t.Fatalf("resubmit: %d %s", p.status, p.body)
	}
	e.waitState("bad-1", "Processed")
}

// An open live stream ends at its next beat once its session is signed
// out (here through another copy of its cookie).
func TestLiveStreamEndsAtSignOut(t *testing.T) {
	defer console.SetLiveBeat(20 * time.Millisecond)()
	e := startServer(t, testutil.SQLite(t), false)
	e.submit("bad-1", true)
	e.waitState("bad-1", "Error")
	c, thief := browser(t), browser(t)
	e.signIn(c, readToken)
	u, _ := url.Parse(e.base)
	thief.Jar.SetCookies(u, c.Jar.Cookies(u))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", e.base+"/tasks/bad-1/live", nil)
	resp, err := thief.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	for l := ""; l != ": still here\n"; { // the stream is open: a beat came
		if l, err = r.ReadString('\n'); resp.StatusCode != 200 || err != nil {
			t.Fatalf("live: %d, %v", resp.StatusCode, err)
		}
	}
	ov := e.get(c, "/")
	if so := e.do(c, "POST", "/signout", url.Values{"csrf": {csrf(t, ov)}}); so.status != http.StatusSeeOther {
		t.Fatalf("sign out: %d", so.status)
	}
	for {
		if _, err := r.ReadString('\n'); err != nil {
			if ctx.Err() != nil {
				t.Fatal("the stream went on after the sign-out")
			}
			return // ended by the server
		}
	}
}

// The live stream of a task page needs a session, answers 404 for
// another's task, and sends a change when the task's history grows.
func TestLiveStream(t *testing.T) {
	e := startServer(t, testutil.SQLite(t), false)
	e.submit("bad-1", true)
	e.waitState("bad-1", "Error")
	if p := e.get(browser(t), "/tasks/bad-1/live"); p.status != http.StatusUnauthorized {
		t.Errorf("live without a session: %d, want 401", p.status)
	}
	c := browser(t)
	e.signIn(c, readToken)
	tp := e.get(c, "/tasks/bad-1")
	m := regexp.MustCompile(`data-live="(/tasks/bad-1/live\?after=\d+)"`).FindStringSubmatch(tp.body)
	if m == nil {
		t.Fatalf("no live stream on the task page: %s", tp.body)
	}
	wantIn(t, tp, `<script src="/static/live.js" defer></script>`)
	if p := e.get(c, "/tasks/nope/live"); p.status != http.StatusNotFound {
		t.Errorf("live of an unknown task: %d, want 404", p.status)
	}
	req, _ := http.NewRequest("GET", e.base+m[1], nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := c.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("live: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	e.fixed.Store(true)
	e.api("POST", "/v1/tasks/bad-1/resubmit", `{}`, nil)
	r := bufio.NewReader(resp.Body)
	for {
		l, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("the stream ended before a change: %v", err)
		}
		if l == "event: change\n" {
			break
		}
	}
}

// The Alerts page filters by kind, shows the acknowledged ones on demand,
// and acknowledges several at once (an operator with the CSRF token only).
func TestAlertsFilterAndAckMany(t *testing.T) {
	e := startServer(t, testutil.SQLite(t), false)
	e.submit("bad-1", true)
	e.submit("bad-2", true)
	e.waitState("bad-1", "Error")
	e.waitState("bad-2", "Error")
	op := browser(t)
	e.signIn(op, opToken)
	all := e.get(op, "/alerts")
	ids := regexp.MustCompile(`name="id" value="(\d+)"`).FindAllStringSubmatch(all.body, -1)
	if len(ids) != 4 {
		t.Fatalf("%d alerts to select, want 4 (step_failed and error of each task): %s", len(ids), all.body)
	}
	errorsOnly := e.get(op, "/alerts?kind=error")
	wantIn(t, errorsOnly, "<td>error</td>", `<option value="error" selected>`)
	wantOut(t, errorsOnly, "<td>step_failed</td>")
	if p := e.get(op, "/alerts?kind=bogus"); p.status != http.StatusBadRequest {
		t.Errorf("unknown kind: %d, want 400", p.status)
	}
	form := url.Values{"id": {ids[0][1], ids[1][1]}}
	reader := browser(t)
	e.signIn(reader, readToken)
	if p := e.do(reader, "POST", "/alerts/ack", url.Values{"id": form["id"], "csrf": {csrf(t, e.get(reader, "/"))}}); p.status != http.StatusForbidden {
		t.Errorf("reader acknowledges: %d, want 403", p.status)
	}
	if p := e.do(op, "POST", "/alerts/ack", form); p.status != http.StatusForbidden {
		t.Errorf("no CSRF: %d, want 403", p.status)
	}
	wantIn(t, e.get(op, "/alerts"), `value="`+ids[0][1]+`"`) // unchanged
	form.Set("csrf", csrf(t, all))
	p := e.do(op, "POST", "/alerts/ack", form)
	if p.status != http.StatusSeeOther {
		t.Fatalf("acknowledge two: %d %s", p.status, p.body)
	}
	after := e.get(op, p.loc)
	wantIn(t, after, "2 alerts acknowledged.", `value="`+ids[2][1]+`"`)
	wantOut(t, after, `value="`+ids[0][1]+`"`, `value="`+ids[1][1]+`"`)
	wantIn(t, e.get(op, "/alerts?all=1"), "by http:oncall at")
}
