package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/convoy"
	"github.com/drover-run/drover/internal/httpapi"
	"github.com/drover-run/drover/internal/httpapi/apitest"
	"github.com/drover-run/drover/internal/orders"
	"github.com/drover-run/drover/store/sqlite"
)

const (
	remoteSubmitTok   = "cli-remote-submit-token-0123456789"
	remoteOperatorTok = "cli-remote-operator-token-0123456789"
	remoteTeamATok    = "cli-remote-team-a-token-0123456789"
)

// remoteEnv is a real API server over a started drover client on a
// migrated SQLite file, which the CLI can also open with --db: the same
// command run both ways must print the same.
type remoteEnv struct {
	db  string // --db value
	url string // --server value
	q   *convoy.Client
}

// newRemoteEnv starts the server. Workflows: orders (its agents run
// nowhere, so an orders task stays Processing), "echo" (two steps
// returning the input) and "fail" (fails permanently: Error and an alert).
func newRemoteEnv(t *testing.T) *remoteEnv {
	t.Helper()
	db, path := migratedDB(t)
	drv, err := sqlite.Open(context.Background(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { drv.Close() })
	cfg := drover.Config{
		Store: drv, PollInterval: 10 * time.Millisecond, SupervisorInterval: 50 * time.Millisecond,
		Workflows: []drover.Workflow{
			orders.Workflow(orders.Options{StepTimeout: time.Hour}), // never times out during a test
			{Name: "echo", Steps: []drover.Step{{Name: "a", Agent: "echo"}, {Name: "b", Agent: "echo"}}},
			{Name: "fail", Steps: []drover.Step{{Name: "a", Agent: "fail"}}},
		},
		Agents: []drover.Agent{
			{Name: "echo", Func: func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) { return r.Input, nil }},
			{Name: "fail", Func: func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) {
				return nil, drover.Permanent(errors.New("card declined"))
			}},
		},
		ExternalAgents: orders.AgentNames(),
		Schedules: []drover.Schedule{{Name: "nightly-order", Workflow: orders.WorkflowName, Input: []byte(`{"order_id":"o-nightly","amount":5}`),
			Cron: "0 2 * * *", TimeZone: "Europe/Berlin"}},
	}
	s := apitest.Start(t, cfg, httpapi.Options{Rate: -1, EventPollInterval: 10 * time.Millisecond, Tokens: []httpapi.Token{
		{Secret: remoteSubmitTok, Scopes: []httpapi.Scope{httpapi.ScopeSubmit}},
		{Secret: remoteOperatorTok, Scopes: []httpapi.Scope{httpapi.ScopeOperator}, Name: "oncall"},
		{Secret: remoteTeamATok, Scopes: []httpapi.Scope{httpapi.ScopeSubmit}, Namespace: "team-a"},
	}}, nil)
	return &remoteEnv{db: db, url: s.URL, q: s.Convoy}
}

// srv runs a command against the server with the submit token.
func (r *remoteEnv) srv(t *testing.T, args ...string) string {
	t.Helper()
	return mustRun(t, append(args, "--server", r.url, "--token", remoteSubmitTok)...)
}

// op runs a command against the server with the operator token.
func (r *remoteEnv) op(t *testing.T, args ...string) string {
	t.Helper()
	return mustRun(t, append(args, "--server", r.url, "--token", remoteOperatorTok)...)
}

// local runs a command against the database.
func (r *remoteEnv) local(t *testing.T, args ...string) string {
	t.Helper()
	return mustRun(t, append(args, "--db", r.db)...)
}

// sameBothWays runs args against the server and the database and checks
// the outputs are equal (JSON compared without drop's keys).
func (r *remoteEnv) sameBothWays(t *testing.T, args []string, drop ...string) string {
	t.Helper()
	remote, local := r.srv(t, args...), r.local(t, args...)
	if len(drop) > 0 {
		remote, local = dropKeys(t, remote, drop), dropKeys(t, local, drop)
	}
	if remote != local {
		t.Fatalf("drover %s differs\n--server: %s\n--db:     %s", strings.Join(args, " "), remote, local)
	}
	return remote
}

// taskState reads a task's state from the database.
func (r *remoteEnv) taskState(t *testing.T, id string) string {
	t.Helper()
	var tj TaskJSON
	if err := json.Unmarshal([]byte(r.local(t, "status", id, "--json")), &tj); err != nil {
		t.Fatal(err)
	}
	return tj.State
}

// dropKeys removes keys from every object of each JSON line of s.
func dropKeys(t *testing.T, s string, keys []string) string {
	t.Helper()
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		if line == "" {
			continue
		}
		var v any
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Fatalf("not JSON: %q: %v", line, err)
		}
		var walk func(v any)
		walk = func(v any) {
			switch x := v.(type) {
			case map[string]any:
				for _, k := range keys {
					delete(x, k)
				}
				for _, c := range x {
					walk(c)
				}
			case []any:
				for _, c := range x {
					walk(c)
				}
			}
		}
		walk(v)
		b, _ := json.Marshal(v)
		out = append(out, string(b))
	}
	return strings.Join(out, "\n")
}

func TestRemoteTasks(t *testing.T) {
	e := newRemoteEnv(t)

	// Submit an orders task with every option; the database has it. The
	// answer shows the task as read after the submit: the server's
	// scheduler may have claimed it already (no agent runs its steps).
	out := e.srv(t, "submit", "orders", `{"order_id":"o-1","amount":5}`, "--id", "order-1", "--ordering-key", "cust-1",
		"--callback-url", "https://hooks.example.com/hook", "--priority", "7", "--json")
	var tj TaskJSON
	if err := json.Unmarshal([]byte(out), &tj); err != nil {
		t.Fatalf("submit --json: %q: %v", out, err)
	}
	if tj.ID != "order-1" || tj.Priority != 7 || tj.OrderingKey == nil || *tj.OrderingKey != "cust-1" || tj.CallbackURL != "https://hooks.example.com/hook" || len(tj.Steps) != 3 || (tj.State != "Pending" && tj.State != "Processing") {
		t.Fatalf("submitted: %s", out)
	}
	if local := e.local(t, "status", "order-1", "--json"); !strings.Contains(local, `"callback_url":"https://hooks.example.com/hook"`) || !strings.Contains(local, `"ordering_key":"cust-1"`) || !strings.Contains(local, `"priority":7`) {
		t.Fatalf("the database's task: %s", local)
	}
	// Idempotent: the same ID and input again prints the same ID.
	if out := e.srv(t, "submit", "orders", `{"order_id":"o-1","amount":5}`, "--id", "order-1", "--ordering-key", "cust-1",
		"--callback-url", "https://hooks.example.com/hook"); out != "order-1\n" {
		t.Fatalf("idempotent submit: %q", out)
	}
	// Another input: the server's 409.
	r := run(t, "", "submit", "orders", `{"order_id":"o-1","amount":6}`, "--id", "order-1", "--server", e.url, "--token", remoteSubmitTok)
	wantFailure(t, r, 1, "server: 409 conflict:")
	// The server checks an order's input as the CLI on the database does:
	// refused, not accepted to end Compensated.
	for _, in := range []string{`{"x":1}`, `{"order_id":"o-2","amount":1,"x":2}`, `{"order_id":"o-2"}`} {
		r = run(t, "", "submit", "orders", in, "--id", "order-bad", "--server", e.url, "--token", remoteSubmitTok)
		wantFailure(t, r, 1, "server: 400 invalid_request: invalid input for workflow \"orders\": invalid order")
		rl := run(t, "", "submit", "orders", in, "--id", "order-bad", "--db", e.db)
		wantFailure(t, rl, 1, "invalid input for workflow \"orders\": invalid order")
	}
	r = run(t, "", "status", "order-bad", "--server", e.url, "--token", remoteSubmitTok)
	wantFailure(t, r, 1, "server: 404 not_found")

	// A workflow the server knows and the CLI does not; input from stdin.
	r = run(t, `{"x":1}`, "submit", "echo", "-", "--id", "echo-1", "--server", e.url, "--token", remoteSubmitTok)
	if r.code != 0 || r.stdout != "echo-1\n" {
		t.Fatalf("submit echo: %+v", r)
	}
	waitFor(t, "echo-1 Processed", func() bool { return e.taskState(t, "echo-1") == "Processed" })
	// The step a task is at counts from 1, as the count does: a Processed
	// task of two steps is at 2 of 2 (index 1), not "1 of 2".
	if out := e.local(t, "status", "echo-1"); !strings.Contains(out, "Current step:  2 of 2 (b, index 1)\n") || !strings.Contains(out, "\nINDEX ") {
		t.Fatalf("status of a Processed task:\n%s", out)
	}
	if out := e.local(t, "list", "--workflow", "echo"); !strings.Contains(out, " Processed  2/2 ") {
		t.Fatalf("list of a Processed task:\n%s", out)
	}

	// status, list and events print the same both ways (text and JSON);
	// the API's events do not carry the leader term.
	for _, args := range [][]string{
		{"status", "echo-1"}, {"status", "echo-1", "--json"}, {"status", "order-1"},
		{"list"}, {"list", "--json"}, {"list", "--state", "processed,pending", "--workflow", "echo", "--json"},
		{"list", "--limit", "1", "--json"}, {"list", "--limit", "1", "--after", "echo-1"},
	} {
		e.sameBothWays(t, args)
	}
	for _, args := range [][]string{
		{"status", "echo-1", "--events", "--json"}, {"events", "--task", "echo-1", "--json"}, {"events", "--json"},
		{"events", "--task", "echo-1", "--after", "2", "--limit", "3", "--json"},
	} {
		e.sameBothWays(t, args, "term")
	}
	if out := e.srv(t, "status", "echo-1", "--events"); !strings.Contains(out, "step_processed") || !strings.Contains(out, "Processed") {
		t.Fatalf("status --events: %s", out)
	}
	if out := e.srv(t, "events", "--task", "echo-1"); !strings.HasPrefix(out, "ID ") || !strings.Contains(out, "echo-1") {
		t.Fatalf("events: %s", out)
	}

	// Operator commands need the operator token.
	r = run(t, "", "cancel", "order-1", "--server", e.url, "--token", remoteSubmitTok)
	wantFailure(t, r, 1, "server: 403 forbidden:")
	if !strings.Contains(r.stderr, "operator token") {
		t.Errorf("403 without a hint: %q", r.stderr)
	}
	if out := e.op(t, "cancel", "order-1", "--reason", "customer asked"); out != "cancelled order-1: now Cancelled\n" {
		t.Fatalf("cancel: %q", out)
	}
	if st := e.taskState(t, "order-1"); st != "Cancelled" {
		t.Fatalf("after cancel: %s", st)
	}
	r = run(t, "", "cancel", "order-1", "--server", e.url, "--token", remoteOperatorTok)
	wantFailure(t, r, 1, "server: 409 wrong_state:")
	out = e.op(t, "resubmit", "order-1", "--from-step", "0", "--json")
	if err := json.Unmarshal([]byte(out), &tj); err != nil || tj.State == "Cancelled" || len(tj.Steps) != 3 {
		t.Fatalf("resubmit --json: %s (%v)", out, err)
	}
	r = run(t, "", "status", "nope", "--server", e.url, "--token", remoteSubmitTok)
	wantFailure(t, r, 1, `server: 404 not_found: task "nope" not found`)
	r = run(t, "", "resubmit", "nope", "--server", e.url, "--token", remoteOperatorTok)
	wantFailure(t, r, 1, "server: 404 not_found")
}

// events --follow against a server prints the recorded events and then new
// ones until interrupted, which ends it with exit 0.
func TestRemoteEventsFollow(t *testing.T) {
	e := newRemoteEnv(t)
	e.srv(t, "submit", "echo", `1`, "--id", "f-1")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stdout := &syncBuffer{}
	stderr := &syncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- MainIO(ctx, []string{"events", "--follow", "--json", "--server", e.url, "--token", remoteSubmitTok},
			strings.NewReader(""), stdout, stderr)
	}()
	waitFor(t, "f-1's final event", func() bool { return strings.Contains(stdout.String(), `"state":"Processed"`) })
	e.srv(t, "submit", "echo", `2`, "--id", "f-2")
	waitFor(t, "f-2 Processed", func() bool { return e.taskState(t, "f-2") == "Processed" })
	// The whole history is final now: each event once, in order, as --db
	// prints them.
	want := strings.Split(dropKeys(t, e.local(t, "events", "--json"), []string{"term"}), "\n")
	waitFor(t, "every event followed", func() bool {
		return strings.Count(stdout.String(), "\n") >= len(want)
	})
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if g := dropKeys(t, stdout.String(), []string{"term"}); g != strings.Join(want, "\n") {
		t.Fatalf("followed:\n%s\nhistory:\n%s", g, strings.Join(want, "\n"))
	}
	// With --task it ends by itself (exit 0) once the task is final, its
	// events printed as --db prints them.
	e.srv(t, "submit", "echo", `3`, "--id", "f-3")
	out := e.srv(t, "events", "--follow", "--task", "f-3", "--json")
	waitFor(t, "f-3 Processed", func() bool { return e.taskState(t, "f-3") == "Processed" })
	if want := e.local(t, "events", "--task", "f-3", "--json"); dropKeys(t, out, []string{"term"}) != dropKeys(t, want, []string{"term"}) {
		t.Fatalf("events --follow --task:\n%s\nhistory:\n%s", out, want)
	}
}

func TestRemoteAlerts(t *testing.T) {
	e := newRemoteEnv(t)
	e.srv(t, "submit", "fail", "{}", "--id", "bad-1")
	e.srv(t, "submit", "fail", "{}", "--id", "bad-2")
	type alertsOut struct {
		Alerts    []AlertJSON `json:"alerts"`
		NextAfter int64       `json:"next_after"`
	}
	var a alertsOut
	waitFor(t, "two alerts", func() bool {
		if err := json.Unmarshal([]byte(e.srv(t, "alerts", "--json")), &a); err != nil {
			t.Fatal(err)
		}
		subjects := map[string]bool{}
		for _, x := range a.Alerts {
			subjects[x.Subject] = true
		}
		return subjects["bad-1"] && subjects["bad-2"]
	})
	e.sameBothWays(t, []string{"alerts", "--json"})
	e.sameBothWays(t, []string{"alerts"})
	e.sameBothWays(t, []string{"alerts", "--limit", "1", "--json"})
	e.sameBothWays(t, []string{"events", "--alerts", "--json"}, "term")

	id := a.Alerts[0].ID
	ids := func(s string) []int64 {
		var o alertsOut
		if err := json.Unmarshal([]byte(s), &o); err != nil {
			t.Fatal(err)
		}
		var out []int64
		for _, x := range o.Alerts {
			out = append(out, x.ID)
		}
		return out
	}
	all := ids(e.srv(t, "alerts", "--json"))

	// Acknowledge one over the API (operator only), another in the
	// database: each path sees both.
	r := run(t, "", "alerts", "ack", itoa(id), "--server", e.url, "--token", remoteSubmitTok)
	wantFailure(t, r, 1, "server: 403 forbidden")
	if out := e.op(t, "alerts", "ack", itoa(id)); !strings.Contains(out, "acknowledged by http:oncall") {
		t.Fatalf("ack: %q", out)
	}
	second := all[len(all)-1]
	if out := e.local(t, "alerts", "ack", itoa(second), "--json"); !strings.Contains(out, `"actor":"cli"`) {
		t.Fatalf("ack in the database: %q", out)
	}
	// Acknowledging again changes nothing.
	if out := e.op(t, "alerts", "ack", itoa(second), "--json"); !strings.Contains(out, `"actor":"cli"`) {
		t.Fatalf("second ack over the API: %q", out)
	}
	un := e.sameBothWays(t, []string{"alerts", "--unacknowledged", "--json"})
	for _, x := range ids(un) {
		if x == id || x == second {
			t.Fatalf("acknowledged alerts listed as unacknowledged: %s", un)
		}
	}
	e.sameBothWays(t, []string{"alerts"})
	r = run(t, "", "alerts", "ack", "999999", "--server", e.url, "--token", remoteOperatorTok)
	wantFailure(t, r, 1, "server: 404 not_found: alert 999999 not found")
	r = run(t, "", "alerts", "ack", "999999", "--db", e.db)
	wantFailure(t, r, 1, "alert 999999 not found")
	r = run(t, "", "alerts", "ack", "x", "--db", e.db)
	wantFailure(t, r, 2, "ALERT-ID")
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

func TestRemoteQueues(t *testing.T) {
	e := newRemoteEnv(t)
	ctx := context.Background()
	if out := e.srv(t, "queue", "publish", "--queue", "orders", "--session", "o/1", "--body", `{"op":"create"}`, "--message-id", "c-1"); out != "published message 1 to session o/1 of queue orders\n" {
		t.Fatalf("publish: %q", out)
	}
	out := e.srv(t, "queue", "publish", "--queue", "orders", "--session", "o/1", "--body", `{"op":"x"}`, "--message-id", "c-1", "--json")
	if !strings.Contains(out, `"duplicate":true`) || !strings.Contains(out, `"seq":1`) {
		t.Fatalf("duplicate: %q", out)
	}
	r := run(t, `{"op":"pay"}`, "queue", "publish", "--queue", "orders", "--session", "o/1", "--body-file", "-", "--not-before", "1h",
		"--server", e.url, "--token", remoteSubmitTok)
	if r.code != 0 || !strings.Contains(r.stdout, "published message 2") {
		t.Fatalf("publish from stdin: %+v", r)
	}
	e.srv(t, "queue", "publish", "--queue", "orders", "--session", "o-2", "--body", `"close"`, "--end-of-sequence")
	r = run(t, "", "queue", "publish", "--queue", "orders", "--session", "o-2", "--body", `1`, "--server", e.url, "--token", remoteSubmitTok)
	wantFailure(t, r, 1, "server: 409")
	// The API carries JSON bodies only.
	r = run(t, "", "queue", "publish", "--queue", "orders", "--session", "o-3", "--body", "not json", "--server", e.url, "--token", remoteSubmitTok)
	wantFailure(t, r, 2, "JSON document")

	for _, args := range [][]string{
		{"queue", "list"}, {"queue", "list", "--json"},
		{"queue", "sessions", "--queue", "orders"}, {"queue", "sessions", "--queue", "orders", "--json"},
		{"queue", "sessions", "--queue", "orders", "--limit", "1", "--json"},
		{"queue", "peek", "--queue", "orders", "--session", "o/1"}, {"queue", "peek", "--queue", "orders", "--session", "o/1", "--json"},
		{"queue", "peek", "--queue", "orders", "--session", "o/1", "--limit", "1", "--json"},
		{"queue", "dlq", "--queue", "orders", "--json"},
	} {
		e.sameBothWays(t, args)
	}
	r = run(t, "", "queue", "peek", "--queue", "orders", "--session", "none", "--server", e.url, "--token", remoteSubmitTok)
	wantFailure(t, r, 1, "server: 404 not_found")
	r = run(t, "", "queue", "sessions", "--queue", "nope", "--server", e.url, "--token", remoteSubmitTok)
	wantFailure(t, r, 1, `server: 404 not_found: queue "nope" not found`)

	// A dead letter: listed, then resolved over the API.
	rc, err := e.q.AcceptSession(ctx, "orders", "o/1")
	if err != nil {
		t.Fatal(err)
	}
	m, err := rc.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.DeadLetter(ctx, m, "bad reference"); err != nil {
		t.Fatal(err)
	}
	_ = rc.Close(ctx)
	for _, args := range [][]string{
		{"queue", "dlq", "--queue", "orders"}, {"queue", "dlq", "--queue", "orders", "--session", "o/1", "--json"},
		{"queue", "peek", "--queue", "orders", "--session", "o/1"},
	} {
		e.sameBothWays(t, args)
	}
	r = run(t, "", "queue", "resolve", "--queue", "orders", "--session", "o/1", "--seq", "1", "--resubmit", "--server", e.url, "--token", remoteSubmitTok)
	wantFailure(t, r, 1, "server: 403 forbidden")
	out = e.op(t, "queue", "resolve", "--queue", "orders", "--session", "o/1", "--seq", "1", "--resubmit", "--json")
	if !strings.Contains(out, `"action":"resubmitted"`) || !strings.Contains(out, `"blocked":false`) || !strings.Contains(out, `"pending":2`) {
		t.Fatalf("resolve --resubmit: %s", out)
	}
	r = run(t, "", "queue", "resolve", "--queue", "orders", "--session", "o/1", "--seq", "1", "--discard", "--server", e.url, "--token", remoteOperatorTok)
	wantFailure(t, r, 1, "server: 404 not_found")
	// Dead-letter it again and discard it: the text output as --db prints.
	rc, _ = e.q.AcceptSession(ctx, "orders", "o/1")
	m, _ = rc.Receive(ctx)
	if err := rc.DeadLetter(ctx, m, "bad again"); err != nil {
		t.Fatal(err)
	}
	_ = rc.Close(ctx)
	if out := e.op(t, "queue", "resolve", "--queue", "orders", "--session", "o/1", "--seq", "1", "--discard"); out != "discarded message 1 of session o/1 (queue orders); 1 pending\n" {
		t.Fatalf("discard: %q", out)
	}
	// The API does not tell the session's lock token.
	e.sameBothWays(t, []string{"queue", "peek", "--queue", "orders", "--session", "o/1", "--json"}, "lock_token")
}

func TestRemoteUsage(t *testing.T) {
	e := newRemoteEnv(t)
	// No token: a 401 that says how to give one; a wrong one.
	r := run(t, "", "list", "--server", e.url)
	wantFailure(t, r, 1, "server: 401 unauthorized")
	if !strings.Contains(r.stderr, "--token") {
		t.Errorf("401 without a hint: %q", r.stderr)
	}
	r = run(t, "", "list", "--server", e.url, "--token", "not-a-token-of-the-server")
	wantFailure(t, r, 1, "server: 401 unauthorized")
	if strings.Contains(r.stderr, "not-a-token") {
		t.Errorf("the token is printed: %q", r.stderr)
	}
	// Commands without an API refuse --server; --db with --server.
	for _, args := range [][]string{
		{"migrate"}, {"server"}, {"bench"}, {"demo", "orders"},
	} {
		r = run(t, "", append(args, "--server", e.url)...)
		wantFailure(t, r, 2, "'drover "+strings.Join(args[:min(2, len(args))], " "))
		if !strings.Contains(r.stderr, "does not work against a server") {
			t.Errorf("drover %v: %q", args, r.stderr)
		}
	}
	r = run(t, "", "list", "--server", e.url, "--db", e.db)
	wantFailure(t, r, 2, "--db/--schema and --server exclude each other")
	r = run(t, "", "list", "--token", remoteSubmitTok, "--db", e.db)
	wantFailure(t, r, 2, "--token and --token-file go with --server")
	r = run(t, "", "list", "--server", "ftp://x")
	wantFailure(t, r, 2, "--server")
	// Without a scheme: say that one is needed, not Go's parse error.
	for _, u := range []string{"127.0.0.1:8080", "localhost:8080", "example.com"} {
		r = run(t, "", "list", "--server", u)
		wantFailure(t, r, 2, `--server: server URL "`+u+`" has no scheme: want http://HOST:PORT or https://HOST:PORT, such as "http://`+u+`"`)
		if strings.Contains(r.stderr, "first path segment") {
			t.Errorf("--server %s: %q", u, r.stderr)
		}
	}
	// A parameter the server refuses: its message, naming the parameter.
	r = run(t, "", "list", "--limit", "5000", "--server", e.url, "--token", remoteSubmitTok)
	wantFailure(t, r, 1, `server: 400 invalid_parameter: query parameter "limit"`)
	r = run(t, "", "submit", "echo", "--server", e.url, "--step-timeout", "1s")
	wantFailure(t, r, 2, "--step-timeout")
	r = run(t, "", "submit", "echo", "--callback-url", "not a url", "--db", e.db)
	wantFailure(t, r, 2, "--callback-url")
	// An unreachable server.
	r = run(t, "", "list", "--server", "http://127.0.0.1:1", "--token", remoteSubmitTok)
	wantFailure(t, r, 1, "server http://127.0.0.1:1")

	// --token-file, and the environment.
	tokFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokFile, []byte(remoteOperatorTok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.srv(t, "submit", "orders", `{"order_id":"o-9","amount":1}`, "--id", "o-9")
	if r := run(t, "", "cancel", "o-9", "--server", e.url, "--token-file", tokFile); r.code != 0 || r.stdout != "cancelled o-9: now Cancelled\n" || r.stderr != "" {
		t.Fatalf("cancel with --token-file: exit %d, %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	// A token file other users may read still works, with a warning (not
	// on Windows, whose permissions are not mode bits).
	if err := os.Chmod(tokFile, 0o644); err != nil {
		t.Fatal(err)
	}
	if r := run(t, "", "status", "o-9", "--server", e.url, "--token-file", tokFile); r.code != 0 ||
		(runtime.GOOS != "windows" && !strings.Contains(r.stderr, "WARNING: --token-file "+tokFile+" is open to group or others (mode 0644)")) {
		t.Fatalf("--token-file of mode 0644: exit %d, stderr %q; want it to work, with a warning", r.code, r.stderr)
	}
	r = run(t, "", "list", "--server", e.url, "--token-file", filepath.Join(t.TempDir(), "none"))
	wantFailure(t, r, 2, "--token-file")
	t.Setenv(EnvServer, e.url)
	t.Setenv(EnvToken, remoteSubmitTok)
	if out := mustRun(t, "status", "o-9", "--json"); !strings.HasPrefix(out, `{"id":"o-9",`) || !strings.Contains(out, `"state":"Cancelled"`) {
		t.Fatalf("status with $%s: %s", EnvServer, out)
	}
	// $DROVER_SERVER does not apply to commands without an API, and an
	// explicit --db wins over it.
	if out := mustRun(t, "migrate", "--db", e.db); !strings.Contains(out, "up to date") {
		t.Fatalf("migrate with $%s: %q", EnvServer, out)
	}
	if out := mustRun(t, "list", "--db", e.db, "--json"); !strings.Contains(out, `"o-9"`) {
		t.Fatalf("list --db with $%s: %q", EnvServer, out)
	}
}

// TestRemoteNamespace: --namespace (or $DROVER_NAMESPACE) makes a global
// token act in that namespace; a namespace's token acts in its own without
// it and is refused another; the flag is checked before any request.
func TestRemoteNamespace(t *testing.T) {
	e := newRemoteEnv(t)
	mustRun(t, "submit", "echo", `{"n":1}`, "--id", "n-1", "--server", e.url, "--token", remoteSubmitTok, "--namespace", "team-a")
	// team-a's token sees it; the global token sees it in team-a only.
	if out := mustRun(t, "status", "n-1", "--json", "--server", e.url, "--token", remoteTeamATok); !strings.Contains(out, `"id":"n-1"`) {
		t.Fatalf("team-a's token: %s", out)
	}
	r := run(t, "", "status", "n-1", "--server", e.url, "--token", remoteSubmitTok)
	wantFailure(t, r, 1, "server: 404 not_found")
	if out := mustRun(t, "status", "n-1", "--json", "--server", e.url, "--token", remoteSubmitTok, "--namespace", "team-a"); !strings.Contains(out, `"id":"n-1"`) {
		t.Fatalf("global token with --namespace: %s", out)
	}
	if out := mustRun(t, "list", "--json", "--server", e.url, "--token", remoteSubmitTok, "--namespace", "default"); strings.Contains(out, `"n-1"`) {
		t.Fatalf("the default namespace lists team-a's task: %s", out)
	}
	// A namespace's token naming another: 403 with a hint.
	r = run(t, "", "list", "--server", e.url, "--token", remoteTeamATok, "--namespace", "team-b")
	wantFailure(t, r, 1, "server: 403 forbidden")
	if !strings.Contains(r.stderr, "leave out --namespace") {
		t.Errorf("403 without a hint: %q", r.stderr)
	}
	// Refused before any request.
	r = run(t, "", "list", "--server", e.url, "--token", remoteSubmitTok, "--namespace", "no spaces")
	wantFailure(t, r, 2, `--namespace "no spaces"`)
	r = run(t, "", "list", "--server", e.url, "--token", remoteSubmitTok, "--namespace", "")
	wantFailure(t, r, 2, "--namespace is empty")
	r = run(t, "", "list", "--db", e.db, "--namespace", "team-a")
	wantFailure(t, r, 2, "--namespace goes with --server")
	// The environment.
	t.Setenv(EnvNamespace, "team-a")
	if out := mustRun(t, "status", "n-1", "--json", "--server", e.url, "--token", remoteSubmitTok); !strings.Contains(out, `"id":"n-1"`) {
		t.Fatalf("global token with $%s: %s", EnvNamespace, out)
	}
}

// Every command's help mentions --server (a global flag).
func TestRemoteHelp(t *testing.T) {
	for _, args := range [][]string{
		{"--help"}, {"submit", "--help"}, {"status", "--help"}, {"list", "--help"}, {"resubmit", "--help"},
		{"cancel", "--help"}, {"events", "--help"}, {"alerts", "--help"}, {"alerts", "ack", "--help"},
		{"queue", "--help"}, {"queue", "publish", "--help"}, {"queue", "peek", "--help"}, {"queue", "sessions", "--help"},
		{"queue", "list", "--help"}, {"queue", "dlq", "--help"}, {"queue", "resolve", "--help"}, {"migrate", "--help"},
		{"schedule", "list", "--help"}, {"schedule", "run", "--help"},
	} {
		r := run(t, "", args...)
		if r.code != 0 || !strings.Contains(r.stdout, "--server") || !strings.Contains(r.stdout, "--token-file") || !strings.Contains(r.stdout, "--namespace") {
			t.Errorf("drover %s: exit %d, no --server in %q", strings.Join(args, " "), r.code, r.stdout)
		}
	}
	if r := run(t, "", "--help"); !strings.Contains(r.stdout, "$"+EnvServer) {
		t.Errorf("drover --help does not explain --server: %q", r.stdout)
	}
}

// list --ordering-key, --updated-from and --updated-before select the
// same tasks on the database and through the server.
func TestListByOrderingKeyAndTime(t *testing.T) {
	e := newRemoteEnv(t)
	for _, c := range []struct{ id, key string }{{"k-1", "cust-1"}, {"k-2", "cust-2"}, {"k-3", "cust-1"}} {
		e.srv(t, "submit", "echo", `{}`, "--id", c.id, "--ordering-key", c.key)
		waitFor(t, c.id+" Processed", func() bool { return e.taskState(t, c.id) == "Processed" })
	}
	var k2 TaskJSON
	if err := json.Unmarshal([]byte(e.local(t, "status", "k-2", "--json")), &k2); err != nil {
		t.Fatal(err)
	}
	at := func(d time.Duration) string { return k2.UpdatedAt.Add(d).Format(time.RFC3339Nano) }
	ids := func(args ...string) string {
		t.Helper()
		var l struct {
			Tasks []TaskJSON `json:"tasks"`
		}
		if err := json.Unmarshal([]byte(e.sameBothWays(t, append([]string{"list", "--json"}, args...))), &l); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, tj := range l.Tasks {
			got = append(got, tj.ID)
		}
		return fmt.Sprint(got)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--ordering-key", "cust-1"}, "[k-1 k-3]"},
		{[]string{"--ordering-key", "cust-1", "--after", "k-1"}, "[k-3]"},
		{[]string{"--ordering-key", "none"}, "[]"},
		{[]string{"--updated-from", at(0), "--updated-before", at(time.Microsecond)}, "[k-2]"},
		{[]string{"--ordering-key", "cust-2", "--updated-from", at(time.Microsecond)}, "[]"},
	} {
		if got := ids(c.args...); got != c.want {
			t.Errorf("list %s: %s, want %s", strings.Join(c.args, " "), got, c.want)
		}
	}
	for _, args := range [][]string{
		{"list", "--updated-from", "yesterday", "--db", e.db},
		{"list", "--updated-before", "2026-01-02", "--server", e.url, "--token", remoteSubmitTok},
		{"list", "--updated-from", at(0), "--updated-before", at(0), "--db", e.db},
	} {
		wantFailure(t, run(t, "", args...), 2, args[1])
	}
}
