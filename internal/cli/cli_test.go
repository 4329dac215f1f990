package cli

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/drover-run/drover/internal/benchcmd"
	"github.com/drover-run/drover/internal/clicore"
	"github.com/drover-run/drover/internal/democmd"
	"github.com/drover-run/drover/internal/testutil"
	"github.com/drover-run/drover/store"
	"github.com/drover-run/drover/store/sqlite"
)

// guard bounds every wait so a bug fails a test instead of hanging it.
const guard = 30 * time.Second

type result struct {
	code           int
	stdout, stderr string
}

// run calls the CLI with args and optional stdin.
func run(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*guard)
	defer cancel()
	var out, errb bytes.Buffer
	code := MainIO(ctx, args, strings.NewReader(stdin), &out, &errb)
	return result{code, out.String(), errb.String()}
}

// mustRun runs the CLI and fails the test unless it exits 0.
func mustRun(t *testing.T, args ...string) string {
	t.Helper()
	r := run(t, "", args...)
	if r.code != 0 {
		t.Fatalf("drover %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

// wantFailure checks a failed run: the exit code, and exactly one line on
// stderr, "drover: ...", containing want.
func wantFailure(t *testing.T, r result, code int, want string) {
	t.Helper()
	if r.code != code {
		t.Errorf("exit %d, want %d; stderr: %q", r.code, code, r.stderr)
	}
	if !strings.HasPrefix(r.stderr, "drover: ") || strings.Count(r.stderr, "\n") != 1 || !strings.HasSuffix(r.stderr, "\n") {
		t.Errorf("stderr is not one 'drover: ' line: %q", r.stderr)
	}
	if !strings.Contains(strings.ToLower(r.stderr), strings.ToLower(want)) {
		t.Errorf("stderr %q does not mention %q", r.stderr, want)
	}
	if strings.Contains(r.stderr, "panic") || strings.Contains(r.stderr, "goroutine ") {
		t.Errorf("stderr shows a panic: %q", r.stderr)
	}
	if r.stdout != "" {
		t.Errorf("stdout not empty on failure: %q", r.stdout)
	}
}

// migratedDB returns the sqlite: URL of a fresh migrated database.
func migratedDB(t *testing.T) (url, path string) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "drover.db")
	url = "sqlite:" + path
	out := mustRun(t, "migrate", "--db", url, "--json")
	var m struct {
		DB     string `json:"db"`
		From   int    `json:"from_version"`
		To     int    `json:"to_version"`
		Latest int    `json:"latest_version"`
	}
	if err := json.Unmarshal([]byte(out), &m); err != nil || m.From != 0 || m.To < 1 || m.To != m.Latest || m.DB != path {
		t.Fatalf("migrate --json = %q (%v)", out, err)
	}
	return url, path
}

// taskCount counts the tasks in the database at path, read directly.
func taskCount(t *testing.T, path string) int {
	t.Helper()
	drv, err := sqlite.Open(t.Context(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer drv.Close()
	counts, err := drv.Reader().TaskCountByState(t.Context(), &store.TaskCountByStateParams{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, c := range counts {
		n += c
	}
	return n
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}

const order1 = `{"order_id":"o-1","amount":1234}`

func TestSubmitStatusListCancelResubmit(t *testing.T) {
	t.Parallel()
	db, path := migratedDB(t)

	// Migrate again: a no-op.
	if out := mustRun(t, "migrate", "--db", db); !strings.Contains(out, "up to date") {
		t.Errorf("second migrate: %q", out)
	}

	id := strings.TrimSpace(mustRun(t, "submit", "orders", order1, "--db", db))
	if id == "" || strings.Contains(id, " ") {
		t.Fatalf("submit printed %q, want a task ID", id)
	}

	// Idempotent submission with --id; from stdin too.
	a := strings.TrimSpace(mustRun(t, "submit", "orders", `{"order_id":"o-2","amount":5}`, "--id", "order-o-2", "--db", db))
	r := run(t, "  {\"order_id\":\"o-2\",\"amount\":5}\n", "submit", "orders", "-", "--id", "order-o-2", "--db", db)
	if a != "order-o-2" || r.code != 0 || strings.TrimSpace(r.stdout) != "order-o-2" {
		t.Fatalf("idempotent submit: %q then %+v", a, r)
	}
	before := taskCount(t, path)
	if before != 2 {
		t.Fatalf("%d tasks, want 2", before)
	}
	wantFailure(t, run(t, "", "submit", "orders", `{"order_id":"o-2","amount":6}`, "--id", "order-o-2", "--db", db), 1, "different")
	if n := taskCount(t, path); n != before {
		t.Fatalf("conflicting submit changed the task count: %d → %d", before, n)
	}

	// status --json: the task with all its steps.
	var st TaskJSON
	if err := json.Unmarshal([]byte(mustRun(t, "status", "order-o-2", "--db", db, "--json")), &st); err != nil {
		t.Fatal(err)
	}
	if st.ID != "order-o-2" || st.Workflow != "orders" || st.State != "Pending" || len(st.Steps) != 3 || st.LockedBy != nil || st.FailureCount != 0 {
		t.Fatalf("status = %+v", st)
	}
	for i, name := range []string{"reserve", "charge", "ship"} {
		s := st.Steps[i]
		if s.Name != name || s.State != "Pending" || s.IdempotencyKey == "" || s.Attempt != 0 || s.LockedBy != nil || s.CompleteBy != nil {
			t.Errorf("step %d = %+v", i, s)
		}
	}
	if string(st.Input) != `{"order_id":"o-2","amount":5}` {
		t.Errorf("input = %s", st.Input)
	}
	// The human form names every column.
	human := mustRun(t, "status", "order-o-2", "--db", db, "--events")
	for _, w := range []string{"LOCKED_BY", "COMPLETE_BY", "FAILURES", "ATTEMPT", "IDEMPOTENCY_KEY", "LAST_ERROR", "submitted"} {
		if !strings.Contains(human, w) {
			t.Errorf("status output lacks %q:\n%s", w, human)
		}
	}
	var withEvents TaskJSON
	if err := json.Unmarshal([]byte(mustRun(t, "status", "order-o-2", "--db", db, "--json", "--events")), &withEvents); err != nil {
		t.Fatal(err)
	}
	if len(withEvents.Events) != 1 || withEvents.Events[0].Type != "submitted" {
		t.Errorf("events = %+v", withEvents.Events)
	}

	// list --json, with filters and paging.
	var l struct {
		Tasks     []TaskJSON `json:"tasks"`
		NextAfter string     `json:"next_after"`
	}
	if err := json.Unmarshal([]byte(mustRun(t, "list", "--db", db, "--json")), &l); err != nil {
		t.Fatal(err)
	}
	if len(l.Tasks) != 2 || l.NextAfter != "" {
		t.Fatalf("list = %+v", l)
	}
	l.Tasks = nil
	if err := json.Unmarshal([]byte(mustRun(t, "list", "--db", db, "--json", "--limit", "1")), &l); err != nil {
		t.Fatal(err)
	}
	if len(l.Tasks) != 1 || l.NextAfter != l.Tasks[0].ID {
		t.Fatalf("list --limit 1 = %+v", l)
	}
	first := l.Tasks[0].ID
	l.Tasks = nil
	if err := json.Unmarshal([]byte(mustRun(t, "list", "--db", db, "--json", "--after", first)), &l); err != nil {
		t.Fatal(err)
	}
	if len(l.Tasks) != 1 || l.Tasks[0].ID == first {
		t.Fatalf("list --after = %+v", l)
	}
	l.Tasks = nil
	if err := json.Unmarshal([]byte(mustRun(t, "list", "--db", db, "--json", "--state", "error,cancelled", "--workflow", "orders")), &l); err != nil {
		t.Fatal(err)
	}
	if len(l.Tasks) != 0 {
		t.Fatalf("list --state error = %+v", l)
	}
	if out := mustRun(t, "list", "--db", db); !strings.Contains(out, "order-o-2") || !strings.Contains(out, id) {
		t.Errorf("list:\n%s", out)
	}

	// Resubmitting a Pending task fails; cancel, then resubmit.
	wantFailure(t, run(t, "", "resubmit", "order-o-2", "--db", db), 1, "not in Error or Cancelled")
	var c TaskJSON
	if err := json.Unmarshal([]byte(mustRun(t, "cancel", "order-o-2", "--reason", "test", "--db", db, "--json")), &c); err != nil {
		t.Fatal(err)
	}
	if c.State != "Cancelled" {
		t.Fatalf("cancel = %+v", c)
	}
	wantFailure(t, run(t, "", "cancel", "order-o-2", "--db", db), 1, "already final")
	if out := mustRun(t, "resubmit", "order-o-2", "--from-step", "0", "--db", db); !strings.Contains(out, "Pending") {
		t.Fatalf("resubmit: %q", out)
	}
	wantFailure(t, run(t, "", "status", "no-such-task", "--db", db), 1, "not found")

	// events: JSON lines, alerts filter.
	out := mustRun(t, "events", "--db", db, "--json", "--task", "order-o-2")
	var types []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var ev EventJSON
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("events line %q: %v", line, err)
		}
		types = append(types, ev.Type)
	}
	if strings.Join(types, ",") != "submitted,cancelled,resubmitted" {
		t.Errorf("event types = %v", types)
	}
	if out := mustRun(t, "events", "--db", db, "--alerts", "--json"); out != "" {
		t.Errorf("alerts: %q", out)
	}
}

func TestSubmitWithOrderingKey(t *testing.T) {
	t.Parallel()
	db, _ := migratedDB(t)
	for i, id := range []string{"k-1", "k-2"} {
		mustRun(t, "submit", "orders", fmt.Sprintf(`{"order_id":"o-%d","amount":5}`, i), "--id", id, "--ordering-key", "customer 42", "--db", db)
	}
	mustRun(t, "submit", "orders", order1, "--id", "free", "--db", db)
	for id, want := range map[string]int64{"k-1": 1, "k-2": 2} {
		var st TaskJSON
		if err := json.Unmarshal([]byte(mustRun(t, "status", id, "--db", db, "--json")), &st); err != nil {
			t.Fatal(err)
		}
		if st.OrderingKey == nil || *st.OrderingKey != "customer 42" || st.OrderingSeq == nil || *st.OrderingSeq != want {
			t.Errorf("status %s: ordering_key %v ordering_seq %v, want \"customer 42\" and %d", id, st.OrderingKey, st.OrderingSeq, want)
		}
	}
	var free TaskJSON
	if err := json.Unmarshal([]byte(mustRun(t, "status", "free", "--db", db, "--json")), &free); err != nil {
		t.Fatal(err)
	}
	if free.OrderingKey != nil || free.OrderingSeq != nil {
		t.Errorf("status of a task without a key: ordering_key %v ordering_seq %v, want null", free.OrderingKey, free.OrderingSeq)
	}
	if out := mustRun(t, "status", "k-2", "--db", db); !strings.Contains(out, `Ordering key:  "customer 42" #2`) {
		t.Errorf("status lacks the ordering key and position:\n%s", out)
	}
	if out := mustRun(t, "status", "free", "--db", db); strings.Contains(out, "Ordering key:") {
		t.Errorf("status of a task without a key shows one:\n%s", out)
	}
	out := mustRun(t, "list", "--db", db)
	for _, w := range []string{"ORDERING", `"customer 42" #1`, `"customer 42" #2`} {
		if !strings.Contains(out, w) {
			t.Errorf("list lacks %q:\n%s", w, out)
		}
	}
	wantFailure(t, run(t, "", "submit", "orders", order1, "--ordering-key", "", "--db", db), 2, "--ordering-key must not be empty")
	wantFailure(t, run(t, "", "submit", "orders", order1, "--ordering-key", "a\nb", "--db", db), 2, `--ordering-key: ordering key "a\nb": contains the control character`)
	wantFailure(t, run(t, "", "submit", "orders", order1, "--ordering-key", strings.Repeat("k", 257), "--db", db), 2, "the limit is 256")
	// The same ID again: the same input in another key order and spacing
	// is the same submission; another ordering key is a conflict.
	if out := mustRun(t, "submit", "orders", `{ "amount": 5, "order_id": "o-1" }`, "--id", "k-2", "--ordering-key", "customer 42", "--db", db); out != "k-2\n" {
		t.Errorf("the same submission in other bytes: %q", out)
	}
	wantFailure(t, run(t, "", "submit", "orders", `{"order_id":"o-1","amount":5}`, "--id", "k-2", "--ordering-key", "customer 7", "--db", db), 1,
		`it differs in the ordering key: "customer 42" is stored, this submission has "customer 7"`)
	wantFailure(t, run(t, "", "submit", "orders", `{"order_id":"o-1","amount":5}`, "--id", "k-2", "--db", db), 1,
		`it differs in the ordering key: "customer 42" is stored, this submission has none`)
}

func TestEventsFollow(t *testing.T) {
	t.Parallel()
	db, _ := migratedDB(t)
	mustRun(t, "submit", "orders", order1, "--id", "f-1", "--db", db)

	ctx, cancel := context.WithCancel(t.Context())
	out := &syncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- MainIO(ctx, []string{"events", "--follow", "--json", "--db", db}, strings.NewReader(""), out, io.Discard)
	}()
	waitFor(t, "the first event", func() bool { return strings.Contains(out.String(), `"task_id":"f-1"`) })
	mustRun(t, "cancel", "f-1", "--db", db)
	waitFor(t, "the cancel event", func() bool { return strings.Contains(out.String(), `"type":"cancelled"`) })
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("events --follow exit %d", code)
		}
	case <-time.After(guard):
		t.Fatal("events --follow did not stop")
	}
	// With --task it ends by itself once the task is final.
	mustRun(t, "submit", "orders", order1, "--id", "f-2", "--db", db)
	done2 := make(chan result, 1)
	go func() { done2 <- run(t, "", "events", "--follow", "--task", "f-2", "--json", "--db", db) }()
	mustRun(t, "cancel", "f-2", "--db", db)
	select {
	case r := <-done2:
		if r.code != 0 || !strings.Contains(r.stdout, `"type":"submitted"`) || !strings.Contains(lastLine(r.stdout), `"type":"cancelled"`) {
			t.Fatalf("events --follow --task: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
	case <-time.After(guard):
		t.Fatal("events --follow --task did not end when the task was final")
	}
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	db, path := migratedDB(t)
	mustRun(t, "submit", "orders", order1, "--id", "keep", "--db", db)
	before := taskCount(t, path)
	dir := t.TempDir()

	missing := filepath.Join(dir, "missing.db")
	corrupt := filepath.Join(dir, "corrupt.db")
	junk := make([]byte, 8192)
	_, _ = rand.Read(junk)
	if err := os.WriteFile(corrupt, junk, 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.db")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	huge := `{"order_id":"o-1","amount":1,"pad":"` + strings.Repeat("x", 1<<20) + `"}`

	cases := []struct {
		name  string
		stdin string
		args  []string
		code  int
		want  string
	}{
		{"unknown workflow", "", []string{"submit", "nope", order1, "--db", db}, 1, "unknown workflow"},
		{"malformed JSON", "", []string{"submit", "orders", `{"order_id":`, "--db", db}, 1, "invalid input"},
		{"malformed JSON on stdin", "{oops", []string{"submit", "orders", "-", "--db", db}, 1, "invalid input"},
		{"unknown field", "", []string{"submit", "orders", `{"order_id":"o","amount":1,"x":2}`, "--db", db}, 1, "unknown field"},
		{"missing field", "", []string{"submit", "orders", `{"order_id":"o"}`, "--db", db}, 1, "missing amount"},
		{"no input", "", []string{"submit", "orders", "--db", db}, 1, "missing order_id"},
		{"oversized input", "", []string{"submit", "orders", huge, "--db", db}, 1, "too large"},
		{"oversized stdin", huge, []string{"submit", "orders", "-", "--db", db}, 1, "too large"},
		{"over --max-input-bytes", "", []string{"submit", "orders", order1, "--max-input-bytes", "10", "--db", db}, 1, "too large"},
		{"bad task ID", "", []string{"submit", "orders", order1, "--id", "has space", "--db", db}, 2, `--id: task ID "has space": contains a space`},
		{"missing db", "", []string{"submit", "orders", order1, "--db", "sqlite:" + missing}, 1, "does not exist"},
		{"missing db status", "", []string{"status", "x", "--db", missing}, 1, "does not exist"},
		{"missing db list", "", []string{"list", "--db", "file:" + missing}, 1, "does not exist"},
		{"corrupt db", "", []string{"submit", "orders", order1, "--db", "sqlite://" + corrupt}, 1, "corrupt"},
		{"corrupt db migrate", "", []string{"migrate", "--db", corrupt}, 1, "corrupt"},
		{"corrupt db server", "", []string{"server", "--db", corrupt}, 1, "corrupt"},
		{"not migrated", "", []string{"list", "--db", empty}, 1, "drover migrate"},
		{"postgres without //", "", []string{"list", "--db", "postgres:u@localhost/drover"}, 2, "postgres://"},
		{"bad schema", "", []string{"list", "--schema", "Bad-Name", "--db", db}, 2, "--schema"},
		{"synchronous on postgres", "", []string{"server", "--synchronous", "normal", "--db", "postgres://u@127.0.0.1:1/x"}, 2, "SQLite only"},
		{"unknown scheme", "", []string{"list", "--db", "mysql://x"}, 2, "unknown scheme"},
		{"unknown task", "", []string{"status", "nope", "--db", db}, 1, "not found"},
		{"unknown command", "", []string{"frobnicate"}, 2, "unknown command"},
		{"unknown flag", "", []string{"list", "--frob", "--db", db}, 2, "unknown flag"},
		{"too many args", "", []string{"submit", "orders", order1, "extra", "--db", db}, 2, "accepts between 1 and 2"},
		{"no args", "", []string{"status", "--db", db}, 2, "accepts 1 arg"},
		{"bad state", "", []string{"list", "--state", "Done", "--db", db}, 2, "--state"},
		{"bad duration", "", []string{"server", "--lease-ttl", "soon", "--db", db}, 2, "invalid argument"},
		{"bad roles", "", []string{"server", "--roles", "scheduler,janitor", "--db", db}, 2, "unknown role"},
		{"bad synchronous", "", []string{"server", "--synchronous", "sometimes", "--db", db}, 2, "synchronous"},
		{"bad rates", "", []string{"demo", "orders", "--transient-rate", "0.9", "--hang-rate", "0.5"}, 2, "at most 1"},
		{"demo without subcommand", "", []string{"demo"}, 2, "subcommand"},
		{"bad log level", "", []string{"list", "--log-level", "loud", "--db", db}, 2, "log-level"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wantFailure(t, run(t, tc.stdin, tc.args...), tc.code, tc.want)
		})
	}
	if n := taskCount(t, path); n != before {
		t.Errorf("bad input changed the task count: %d → %d", before, n)
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Errorf("a command created the missing database file: %v", err)
	}
	if b, err := os.ReadFile(corrupt); err != nil || !bytes.Equal(b, junk) {
		t.Errorf("the corrupt file was changed (%v)", err)
	}
}

func TestLockedDB(t *testing.T) {
	t.Parallel()
	db, path := migratedDB(t)
	before := taskCount(t, path)

	// Another process holds the write lock.
	other, err := sql.Open(sqlite.DriverName, path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	conn, err := other.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(t.Context(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	wantFailure(t, run(t, "", "submit", "orders", order1, "--lock-timeout", "200ms", "--db", db), 1, "locked")
	wantFailure(t, run(t, "", "migrate", "--lock-timeout", "200ms", "--db", db), 1, "locked")
	if _, err := conn.ExecContext(t.Context(), "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	if n := taskCount(t, path); n != before {
		t.Errorf("task count %d → %d", before, n)
	}
	// Once released, the same submission works.
	mustRun(t, "submit", "orders", order1, "--lock-timeout", "200ms", "--db", db)
}

func TestDBFromEnv(t *testing.T) {
	t.Parallel()
	db, _ := migratedDB(t)
	var out, errb bytes.Buffer
	e := &env{Env: &clicore.Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb, Getenv: func(k string) string {
		if k == EnvDatabaseURL {
			return db
		}
		return ""
	}}}
	root := e.rootCmd()
	root.SetArgs([]string{"list", "--json"})
	if err := root.ExecuteContext(t.Context()); err != nil {
		t.Fatalf("list with %s: %v", EnvDatabaseURL, err)
	}
	if !strings.Contains(out.String(), `"tasks":[]`) {
		t.Fatalf("list = %q", out.String())
	}
}

func TestHelp(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--help"}, {"migrate", "--help"}, {"server", "--help"}, {"submit", "--help"}, {"status", "--help"},
		{"list", "--help"}, {"resubmit", "--help"}, {"cancel", "--help"}, {"events", "--help"},
		{"demo", "orders", "--help"}, {"bench", "--help"},
	} {
		r := run(t, "", args...)
		if r.code != 0 || !strings.Contains(r.stdout, "Usage:") || !strings.Contains(r.stdout, "Examples:") || r.stderr != "" {
			t.Errorf("drover %s: exit %d, stdout %q, stderr %q", strings.Join(args, " "), r.code, r.stdout, r.stderr)
		}
	}
}

// demoSummaryOK checks the invariants the demo must defend.
func TestDemoOrders(t *testing.T) {
	t.Parallel()
	r := run(t, "", "demo", "orders", "--orders", "60", "--transient-rate", "0.2", "--hang-rate", "0.05",
		"--permanent-rate", "0.05", "--json", "--seed", "7")
	if r.code != 0 {
		t.Fatalf("demo: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	var s democmd.DemoSummary
	if err := json.Unmarshal([]byte(lastLine(r.stdout)), &s); err != nil {
		t.Fatalf("last line %q: %v", lastLine(r.stdout), err)
	}
	t.Logf("demo: %+v", s)
	if s.Orders != 60 || s.Processed+s.Error+s.Compensated != 60 {
		t.Errorf("outcome does not add up: %+v", s)
	}
	if s.DuplicateEffects != 0 {
		t.Errorf("duplicate effects: %d", s.DuplicateEffects)
	}
	if s.SupervisorRecoveries == 0 {
		t.Errorf("no supervisor recoveries with hangs injected")
	}
	if s.Error+s.Compensated == 0 {
		t.Errorf("no failed orders with permanent faults injected")
	}
	if s.ErrorTasksWithoutAlert != 0 || s.Alerts < s.Error {
		t.Errorf("alerts: %d, error tasks without alert: %d", s.Alerts, s.ErrorTasksWithoutAlert)
	}
	if s.AgentCalls == 0 || s.Seconds <= 0 {
		t.Errorf("summary incomplete: %+v", s)
	}
	if !strings.Contains(r.stderr, "demo: submitted 60 orders") {
		t.Errorf("no progress on stderr: %q", r.stderr)
	}
	if !strings.Contains(r.stderr, "again with --console 127.0.0.1:8080") {
		t.Errorf("no pointer to the console for the failed orders: %q", r.stderr)
	}
	if regexp.MustCompile(`demo: +\d+\.\ds  final`).MatchString(r.stderr) {
		t.Errorf("progress lines with --json: %q", r.stderr)
	}
}

func TestDemoKeepsExplicitDB(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "demo.db")
	out := mustRun(t, "demo", "orders", "--orders", "5", "--transient-rate", "0", "--hang-rate", "0", "--permanent-rate", "0", "--db", "sqlite:"+path)
	if !strings.Contains(out, "processed 5") {
		t.Fatalf("demo: %q", out)
	}
	if n := taskCount(t, path); n != 5 {
		t.Fatalf("%d tasks in the demo database, want 5", n)
	}
}

// A bench that runs a while prints its progress on stderr every half
// second, as the demo does; with --json none (stdout is the result).
func TestBenchProgress(t *testing.T) {
	t.Parallel()
	// Latency mode is paced: 1.3s of submissions, so at least two lines.
	args := []string{"bench", "--rate", "40", "--duration", "1300ms", "--synchronous", "normal"}
	r := run(t, "", args...)
	if r.code != 0 {
		t.Fatalf("bench: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	lines := regexp.MustCompile(`(?m)^bench: +\d+\.\ds  submitted \d+/52  final \d+$`).FindAllString(r.stderr, -1)
	if len(lines) < 2 {
		t.Fatalf("%d progress lines on stderr, want 2 or more:\n%s", len(lines), r.stderr)
	}
	r = run(t, "", append(args, "--json")...)
	if r.code != 0 || strings.Contains(r.stderr, "bench:") || strings.Count(r.stdout, "\n") != 1 {
		t.Fatalf("bench --json: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
}

// cpuProfiler is held by the tests that run a command with --cpuprofile:
// a process has one CPU profiler, so they take turns.
var cpuProfiler sync.Mutex

func TestBench(t *testing.T) {
	t.Parallel()
	cpuProfiler.Lock()
	defer cpuProfiler.Unlock()
	prof := filepath.Join(t.TempDir(), "cpu.out")
	r := run(t, "", "bench", "--tasks", "2000", "--json", "--cpuprofile", prof, "--synchronous", "normal")
	if r.code != 0 {
		t.Fatalf("bench: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	var b benchcmd.BenchResult
	if err := json.Unmarshal([]byte(lastLine(r.stdout)), &b); err != nil {
		t.Fatalf("bench output %q: %v", r.stdout, err)
	}
	if b.Tasks != 2000 || b.Steps != 1 || b.Seconds <= 0 || b.TasksPerSec <= 0 || b.InsertSeconds <= 0 || b.EndToEndPerSec <= 0 {
		t.Fatalf("bench = %+v", b)
	}
	if st, err := os.Stat(prof); err != nil || st.Size() == 0 {
		t.Fatalf("no CPU profile: %v", err)
	}
}

// With --json the server's logs are JSON objects whose durations are
// strings ("30s") and whose final stats are fields, not a Go struct dump.
func TestServerJSONLogs(t *testing.T) {
	t.Parallel()
	db, _ := migratedDB(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	errb := &syncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- MainIO(ctx, []string{"server", "--db", db, "--poll-interval", "20ms", "--shutdown-timeout", "1m30s",
			"--json", "--log-level", "info"}, strings.NewReader(""), io.Discard, errb)
	}()
	waitFor(t, "the server started", func() bool { return strings.Contains(errb.String(), `"msg":"server started"`) })
	stopServer(t, cancel, done, errb)
	logs := map[string]map[string]any{}
	for _, line := range strings.Split(strings.TrimSpace(errb.String()), "\n") {
		if strings.HasPrefix(line, ReadyPrefix) {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("not a JSON log line: %q", line)
		}
		msg, _ := m["msg"].(string)
		logs[msg] = m
	}
	if got := logs["shutting down: waiting for calls in flight"]["timeout"]; got != "1m30s" {
		t.Errorf("shutdown timeout logged as %#v, want \"1m30s\"", got)
	}
	stats, ok := logs["server stopped"]["stats"].(map[string]any)
	if !ok {
		t.Fatalf("server stopped: stats %#v, want an object", logs["server stopped"]["stats"])
	}
	if _, ok := stats["dispatched"].(float64); !ok || len(stats) < 5 {
		t.Errorf("stats fields %v", stats)
	}
}

func TestServer(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "server.db")
	db := "sqlite:" + path
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	errb := &syncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- MainIO(ctx, []string{"server", "--demo", "--db", db, "--instance-id", "srv-1", "--supervisor-interval", "100ms",
			"--poll-interval", "20ms", "--synchronous", "normal", "--log-level", "warn"}, strings.NewReader(""), io.Discard, errb)
	}()
	waitFor(t, "the ready line", func() bool {
		select {
		case code := <-done:
			t.Fatalf("server exited %d: %s", code, errb.String())
		default:
		}
		return strings.Contains(errb.String(), ReadyPrefix+"instance=srv-1 db="+path)
	})

	mustRun(t, "submit", "orders", order1, "--id", "s-1", "--db", db)
	waitFor(t, "the order to be processed", func() bool {
		var st TaskJSON
		return json.Unmarshal([]byte(mustRun(t, "status", "s-1", "--db", db, "--json")), &st) == nil && st.State == "Processed"
	})
	var st TaskJSON
	if err := json.Unmarshal([]byte(mustRun(t, "status", "s-1", "--db", db, "--json")), &st); err != nil {
		t.Fatal(err)
	}
	for _, s := range st.Steps {
		if s.State != "Processed" || s.Attempt != 1 || !strings.Contains(string(s.Output), `"confirmation"`) {
			t.Errorf("step %+v", s)
		}
	}

	stopServer(t, cancel, done, errb)
}

// stopServer ends a "drover server" run by MainIO (cancel its context) and
// waits for it to exit 0 (its code arrives on done).
func stopServer(t *testing.T, cancel context.CancelFunc, done <-chan int, stderr *syncBuffer) {
	t.Helper()
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("server exit %d: %s", code, stderr.String())
		}
	case <-time.After(guard):
		t.Fatal("server did not stop")
	}
}

// TestServerSplitRoles runs the roles in two "processes" on one database.
func TestServerSplitRoles(t *testing.T) {
	t.Parallel()
	db, _ := migratedDB(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var wg sync.WaitGroup
	start := func(id string, roles string) *syncBuffer {
		b := &syncBuffer{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if code := MainIO(ctx, []string{"server", "--demo", "--db", db, "--instance-id", id, "--roles", roles, "--poll-interval", "20ms",
				"--supervisor-interval", "100ms", "--log-level", "error"}, strings.NewReader(""), io.Discard, b); code != 0 {
				t.Errorf("server %s exit %d: %s", id, code, b.String())
			}
		}()
		waitFor(t, "server "+id, func() bool { return strings.Contains(b.String(), ReadyPrefix) })
		return b
	}
	start("sched", "scheduler,supervisor")
	start("agents", "agent")
	for i := range 3 {
		mustRun(t, "submit", "orders", fmt.Sprintf(`{"order_id":"x-%d","amount":1}`, i), "--id", fmt.Sprintf("x-%d", i), "--db", db)
	}
	waitFor(t, "three processed orders", func() bool {
		var l struct{ Tasks []TaskJSON }
		return json.Unmarshal([]byte(mustRun(t, "list", "--state", "Processed", "--db", db, "--json")), &l) == nil && len(l.Tasks) == 3
	})
	cancel()
	wg.Wait()
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader goroutine.
type syncBuffer = testutil.Buffer

// waitFor polls cond until it holds, failing the test after guard.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(guard)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

// ---- PostgreSQL ----

// pgTestURL is the PostgreSQL server of the tests. scripts/test provides
// one; without it the tests fail rather than skip.
func pgTestURL(t *testing.T) string {
	t.Helper()
	url := os.Getenv("DROVER_TEST_DATABASE_URL")
	if url == "" {
		t.Fatal("DROVER_TEST_DATABASE_URL is not set: the PostgreSQL tests need a server, " +
			"e.g. DROVER_TEST_DATABASE_URL='postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable' (scripts/test sets it)")
	}
	return url
}

// pgSchema returns the server's URL and a fresh schema name, dropped with
// everything in it when the test ends.
func pgSchema(t *testing.T) (url, schema string) {
	t.Helper()
	url = pgTestURL(t)
	schema = "drover_cli_" + clicore.RandomHex(6)
	t.Cleanup(func() {
		pgExec(t, url, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
	})
	return url, schema
}

func pgExec(t *testing.T, url, sql string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Errorf("connect: %v", err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		t.Errorf("%s: %v", sql, err)
	}
}

func pgSchemaExists(t *testing.T, url, schema string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, schema).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	return exists
}

func TestBadSchemaName(t *testing.T) {
	t.Parallel()
	url := pgTestURL(t)
	for _, name := range []string{"Bad-Name", "1abc", "drover;drop", strings.Repeat("s", 64)} {
		for _, args := range [][]string{
			{"migrate", "--db", url, "--schema", name},
			{"list", "--db", url, "--schema", name},
			{"server", "--db", url, "--schema", name},
		} {
			wantFailure(t, run(t, "", args...), 2, "--schema")
		}
		if pgSchemaExists(t, url, name) {
			t.Errorf("schema %q was created", name)
		}
	}
	// From the environment too.
	var out, errb bytes.Buffer
	e := &env{Env: &clicore.Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb, Getenv: func(k string) string {
		return map[string]string{EnvDatabaseURL: url, clicore.EnvSchema: "No Good"}[k]
	}}}
	root := e.rootCmd()
	root.SetArgs([]string{"list"})
	if err := root.ExecuteContext(t.Context()); err == nil || !strings.Contains(err.Error(), "--schema") {
		t.Fatalf("list with %s=%q: %v", clicore.EnvSchema, "No Good", err)
	}
}

func TestPostgresSubmitStatusListCancelResubmit(t *testing.T) {
	t.Parallel()
	url, schema := pgSchema(t)
	db := []string{"--db", url, "--schema", schema}
	with := func(args ...string) []string { return append(args, db...) }

	var m struct {
		DB     string `json:"db"`
		Driver string `json:"driver"`
		Schema string `json:"schema"`
		From   int    `json:"from_version"`
		To     int    `json:"to_version"`
		Latest int    `json:"latest_version"`
	}
	if err := json.Unmarshal([]byte(mustRun(t, with("migrate", "--json")...)), &m); err != nil {
		t.Fatal(err)
	}
	if m.Driver != "postgres" || m.Schema != schema || m.From != 0 || m.To < 1 || m.To != m.Latest || strings.Contains(m.DB, "sslmode") {
		t.Fatalf("migrate --json = %+v", m)
	}
	if out := mustRun(t, with("migrate")...); !strings.Contains(out, "up to date") || !strings.Contains(out, "schema "+schema) {
		t.Errorf("second migrate: %q", out)
	}

	id := strings.TrimSpace(mustRun(t, with("submit", "orders", order1)...))
	if id == "" || strings.Contains(id, " ") {
		t.Fatalf("submit printed %q", id)
	}
	a := strings.TrimSpace(mustRun(t, with("submit", "orders", `{"order_id":"o-2","amount":5}`, "--id", "order-o-2")...))
	r := run(t, `{"order_id":"o-2","amount":5}`, with("submit", "orders", "-", "--id", "order-o-2")...)
	if a != "order-o-2" || r.code != 0 || strings.TrimSpace(r.stdout) != "order-o-2" {
		t.Fatalf("idempotent submit: %q then %+v", a, r)
	}
	wantFailure(t, run(t, "", with("submit", "orders", `{"order_id":"o-2","amount":6}`, "--id", "order-o-2")...), 1, "different")

	var st TaskJSON
	if err := json.Unmarshal([]byte(mustRun(t, with("status", "order-o-2", "--json", "--events")...)), &st); err != nil {
		t.Fatal(err)
	}
	if st.ID != "order-o-2" || st.State != "Pending" || len(st.Steps) != 3 || len(st.Events) != 1 || st.Events[0].Type != "submitted" {
		t.Fatalf("status = %+v", st)
	}
	if string(st.Input) != `{"order_id":"o-2","amount":5}` {
		t.Errorf("input = %s", st.Input)
	}

	var l struct {
		Tasks     []TaskJSON `json:"tasks"`
		NextAfter string     `json:"next_after"`
	}
	if err := json.Unmarshal([]byte(mustRun(t, with("list", "--json")...)), &l); err != nil {
		t.Fatal(err)
	}
	if len(l.Tasks) != 2 || l.NextAfter != "" {
		t.Fatalf("list = %+v", l)
	}
	l.Tasks = nil
	if err := json.Unmarshal([]byte(mustRun(t, with("list", "--json", "--limit", "1")...)), &l); err != nil {
		t.Fatal(err)
	}
	if len(l.Tasks) != 1 || l.NextAfter != l.Tasks[0].ID {
		t.Fatalf("list --limit 1 = %+v", l)
	}

	wantFailure(t, run(t, "", with("resubmit", "order-o-2")...), 1, "not in Error or Cancelled")
	var c TaskJSON
	if err := json.Unmarshal([]byte(mustRun(t, with("cancel", "order-o-2", "--reason", "test", "--json")...)), &c); err != nil {
		t.Fatal(err)
	}
	if c.State != "Cancelled" {
		t.Fatalf("cancel = %+v", c)
	}
	wantFailure(t, run(t, "", with("cancel", "order-o-2")...), 1, "already final")
	if out := mustRun(t, with("resubmit", "order-o-2", "--from-step", "0")...); !strings.Contains(out, "Pending") {
		t.Fatalf("resubmit: %q", out)
	}
	wantFailure(t, run(t, "", with("status", "no-such-task")...), 1, "not found")

	var types []string
	for _, line := range strings.Split(strings.TrimSpace(mustRun(t, with("events", "--json", "--task", "order-o-2")...)), "\n") {
		var ev EventJSON
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("events line %q: %v", line, err)
		}
		types = append(types, ev.Type)
	}
	if strings.Join(types, ",") != "submitted,cancelled,resubmitted" {
		t.Errorf("event types = %v", types)
	}

	// The environment names the same store.
	var out, errb bytes.Buffer
	e := &env{Env: &clicore.Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb, Getenv: func(k string) string {
		return map[string]string{EnvDatabaseURL: url, clicore.EnvSchema: schema}[k]
	}}}
	root := e.rootCmd()
	root.SetArgs([]string{"list", "--json", "--state", "pending"})
	if err := root.ExecuteContext(t.Context()); err != nil {
		t.Fatalf("list from the environment: %v (%s)", err, errb.String())
	}
	if strings.Count(out.String(), `"id":`) != 2 {
		t.Errorf("list from the environment = %s", out.String())
	}
}

// TestPostgresNotMigrated: commands other than migrate, server, demo and
// bench never create the schema.
func TestPostgresNotMigrated(t *testing.T) {
	t.Parallel()
	url, schema := pgSchema(t)
	for _, args := range [][]string{
		{"submit", "orders", order1}, {"status", "x"}, {"list"}, {"resubmit", "x"}, {"cancel", "x"}, {"events"},
		{"events", "--follow"},
	} {
		r := run(t, "", append(args, "--db", url, "--schema", schema)...)
		wantFailure(t, r, 1, "drover migrate --schema "+schema)
		if !strings.Contains(r.stderr, "not migrated") || strings.Contains(r.stderr, "sslmode") {
			t.Errorf("%v: %q", args, r.stderr)
		}
	}
	if pgSchemaExists(t, url, schema) {
		t.Fatalf("a command created schema %s", schema)
	}
	// A schema made by someone else, without drover's tables, is no better.
	pgExec(t, url, `CREATE SCHEMA `+pgx.Identifier{schema}.Sanitize())
	wantFailure(t, run(t, "", "list", "--db", url, "--schema", schema), 1, "not migrated")
}

func TestPostgresUnreachable(t *testing.T) {
	t.Parallel()
	port := freePort(t)
	url := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&password=hush", port)
	r := run(t, "", "list", "--db", url)
	wantFailure(t, r, 1, "connect")
	if strings.Contains(r.stderr, "hush") {
		t.Errorf("the password leaked: %q", r.stderr)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// tcpProxy forwards 127.0.0.1:port to target once started, and can break
// every connection it carries, like a database restart does.
type tcpProxy struct {
	t      *testing.T
	target string
	mu     sync.Mutex
	l      net.Listener
	conns  []net.Conn
}

func (p *tcpProxy) start(port int) {
	p.t.Helper()
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		p.t.Fatalf("proxy listen: %v", err)
	}
	p.mu.Lock()
	p.l = l
	p.mu.Unlock()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(u, c); u.Close() }()
			go func() { _, _ = io.Copy(c, u); c.Close() }()
		}
	}()
	p.t.Cleanup(p.stop)
}

// breakAll closes every connection carried so far.
func (p *tcpProxy) breakAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func (p *tcpProxy) stop() {
	p.mu.Lock()
	l := p.l
	p.mu.Unlock()
	if l != nil {
		l.Close()
	}
	p.breakAll()
}

// TestPostgresServerWaitsAndReconnects: a server started before its
// database is reachable waits for it, runs once it is, and survives every
// connection breaking.
func TestPostgresServerWaitsAndReconnects(t *testing.T) {
	t.Parallel()
	realURL, schema := pgSchema(t)
	cfg, err := pgx.ParseConfig(realURL)
	if err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	// The server's URL names the proxy, with the user, password (from the
	// URL, PGPASSWORD or a passfile) and database of the real one.
	user := url.User(cfg.User)
	if cfg.Password != "" {
		user = url.UserPassword(cfg.User, cfg.Password)
	}
	pu := &url.URL{Scheme: "postgres", User: user, Host: fmt.Sprintf("127.0.0.1:%d", port),
		Path: "/" + cfg.Database, RawQuery: "sslmode=disable"}
	proxied := pu.String()
	if pc, err := pgx.ParseConfig(proxied); err != nil || pc.User != cfg.User || pc.Password != cfg.Password || pc.Database != cfg.Database {
		t.Fatalf("proxied URL %s does not carry the test server's credentials and database (%v)", pu.Redacted(), err)
	}
	proxy := &tcpProxy{t: t, target: net.JoinHostPort(cfg.Host, fmt.Sprint(cfg.Port))}

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	errb := &syncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- MainIO(ctx, []string{"server", "--demo", "--db", proxied, "--schema", schema, "--instance-id", "pg-1",
			"--supervisor-interval", "100ms", "--poll-interval", "20ms", "--log-level", "warn"}, strings.NewReader(""), io.Discard, errb)
	}()
	waitFor(t, "two retries", func() bool { return strings.Count(errb.String(), "waiting for the database") >= 2 })
	if strings.Contains(errb.String(), ReadyPrefix) {
		t.Fatalf("ready without a database: %s", errb.String())
	}
	proxy.start(port)
	waitFor(t, "the ready line", func() bool {
		select {
		case code := <-done:
			t.Fatalf("server exited %d: %s", code, errb.String())
		default:
		}
		return strings.Contains(errb.String(), ReadyPrefix+"instance=pg-1 db=postgres://") && strings.Contains(errb.String(), "schema="+schema)
	})
	// The server listens for other processes' notifications (drover
	// submit's below wake it): one LISTEN connection on the schema's channel.
	admin, err := pgx.Connect(ctx, realURL)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.WithoutCancel(ctx))
	listening := func() bool {
		var n int
		err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE query = $1`,
			"LISTEN "+pgx.Identifier{"drover_" + schema}.Sanitize()).Scan(&n)
		return err == nil && n == 1
	}
	waitFor(t, "the server's LISTEN connection", listening)
	db := []string{"--db", realURL, "--schema", schema}
	processed := func(id string) func() bool {
		return func() bool {
			var st TaskJSON
			return json.Unmarshal([]byte(mustRun(t, append([]string{"status", id, "--json"}, db...)...)), &st) == nil && st.State == "Processed"
		}
	}
	mustRun(t, append([]string{"submit", "orders", order1, "--id", "pg-1"}, db...)...)
	waitFor(t, "the first order", processed("pg-1"))

	proxy.breakAll() // as a database restart does
	mustRun(t, append([]string{"submit", "orders", `{"order_id":"o-2","amount":2}`, "--id", "pg-2"}, db...)...)
	waitFor(t, "the order after the break", processed("pg-2"))
	waitFor(t, "the LISTEN connection again after the break", listening)

	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("server exit %d: %s", code, errb.String())
		}
	case <-time.After(guard):
		t.Fatal("server did not stop")
	}
}

// TestServerGivesUpWaitingOnSignal: interrupted while waiting for the
// database, the server exits with one line.
func TestServerGivesUpWaitingOnSignal(t *testing.T) {
	t.Parallel()
	url := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", freePort(t))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	errb := &syncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- MainIO(ctx, []string{"server", "--db", url, "--log-level", "error"}, strings.NewReader(""), io.Discard, errb)
	}()
	time.Sleep(300 * time.Millisecond)
	select {
	case code := <-done:
		t.Fatalf("server exited %d before the signal: %s", code, errb.String())
	default:
	}
	cancel()
	select {
	case code := <-done:
		if code != 1 || !strings.Contains(errb.String(), "drover: gave up waiting for the database on signal") {
			t.Fatalf("exit %d: %q", code, errb.String())
		}
	case <-time.After(guard):
		t.Fatal("server did not stop")
	}
}

func TestPostgresBench(t *testing.T) {
	t.Parallel()
	url, schema := pgSchema(t)
	r := run(t, "", "bench", "--tasks", "2000", "--json", "--db", url, "--schema", schema)
	if r.code != 0 {
		t.Fatalf("bench: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	var b benchcmd.BenchResult
	if err := json.Unmarshal([]byte(lastLine(r.stdout)), &b); err != nil {
		t.Fatalf("bench output %q: %v", r.stdout, err)
	}
	t.Logf("bench: %+v", b)
	if b.Mode != "throughput" || b.Tasks != 2000 || b.Driver != "postgres" || b.Schema != schema || b.Synchronous != "" ||
		b.Seconds <= 0 || b.TasksPerSec <= 0 || b.InsertSeconds <= 0 || strings.Contains(b.DB, "sslmode") {
		t.Fatalf("bench = %+v", b)
	}
	if !pgSchemaExists(t, url, schema) {
		t.Errorf("an explicit --schema was dropped")
	}
}

func TestPostgresBenchTemporarySchema(t *testing.T) {
	t.Parallel()
	url := pgTestURL(t)
	r := run(t, "", "bench", "--tasks", "50", "--json", "--db", url)
	if r.code != 0 {
		t.Fatalf("bench: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	var b benchcmd.BenchResult
	if err := json.Unmarshal([]byte(lastLine(r.stdout)), &b); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(b.Schema, "drover_bench_") {
		t.Fatalf("schema %q", b.Schema)
	}
	if pgSchemaExists(t, url, b.Schema) {
		t.Errorf("the temporary schema %s was not dropped", b.Schema)
		pgExec(t, url, `DROP SCHEMA IF EXISTS `+pgx.Identifier{b.Schema}.Sanitize()+` CASCADE`)
	}
}

// benchLatency runs the latency mode at 200 tasks/s for 2s.
func benchLatency(t *testing.T, args ...string) benchcmd.LatencyResult {
	t.Helper()
	r := run(t, "", append([]string{"bench", "--rate", "200", "--duration", "2s", "--json"}, args...)...)
	if r.code != 0 {
		t.Fatalf("bench: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	var b benchcmd.LatencyResult
	if err := json.Unmarshal([]byte(lastLine(r.stdout)), &b); err != nil {
		t.Fatalf("bench output %q: %v", r.stdout, err)
	}
	t.Logf("bench: %+v", b)
	if b.Mode != "latency" || b.Rate != 200 || b.DurationS != 2 || b.Tasks != 400 ||
		b.P50Ms <= 0 || b.P50Ms > b.P90Ms || b.P90Ms > b.P99Ms || b.P99Ms > b.MaxMs || b.AchievedRate <= 0 || b.AchievedRate > 200.5 {
		t.Fatalf("bench = %+v", b)
	}
	return b
}

func TestBenchLatency(t *testing.T) {
	t.Parallel()
	if b := benchLatency(t); b.Driver != "sqlite" || b.Synchronous != "full" || b.Submitters != 1 || !b.EagerStart {
		t.Errorf("bench = %+v", b)
	}
	if b := benchLatency(t, "--no-eager-start"); b.EagerStart {
		t.Errorf("bench --no-eager-start = %+v, want eager_start false", b)
	}
	// Several submitters share the schedule.
	r := run(t, "", "bench", "--rate", "300", "--duration", "1s", "--submitters", "3", "--synchronous", "normal", "--json")
	var b benchcmd.LatencyResult
	if err := json.Unmarshal([]byte(lastLine(r.stdout)), &b); r.code != 0 || err != nil || b.Tasks != 300 || b.Submitters != 3 || b.P50Ms <= 0 {
		t.Fatalf("bench --submitters 3: exit %d, %+v (%v); stderr %s", r.code, b, err, r.stderr)
	}
	wantFailure(t, run(t, "", "bench", "--tasks", "10", "--submitters", "2"), 2, "--submitters")
	wantFailure(t, run(t, "", "bench", "--rate", "100"), 2, "--duration")
	wantFailure(t, run(t, "", "bench", "--rate", "100", "--duration", "1s", "--tasks", "5"), 2, "--tasks")
	wantFailure(t, run(t, "", "bench", "--rate", "-1", "--duration", "1s"), 2, "positive")
}

func TestPostgresBenchLatency(t *testing.T) {
	t.Parallel()
	url, schema := pgSchema(t)
	if b := benchLatency(t, "--db", url, "--schema", schema); b.Driver != "postgres" || b.Schema != schema || b.Synchronous != "" {
		t.Errorf("bench = %+v", b)
	}
}

func TestPostgresDemo(t *testing.T) {
	t.Parallel()
	url, schema := pgSchema(t)
	r := run(t, "", "demo", "orders", "--orders", "40", "--json", "--db", url, "--schema", schema)
	if r.code != 0 {
		t.Fatalf("demo: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	var s democmd.DemoSummary
	if err := json.Unmarshal([]byte(lastLine(r.stdout)), &s); err != nil {
		t.Fatalf("last line %q: %v", lastLine(r.stdout), err)
	}
	t.Logf("demo: %+v", s)
	if s.Orders != 40 || s.Processed+s.Error+s.Compensated != 40 || s.Unfinished != 0 || s.Cancelled != 0 {
		t.Errorf("outcome does not add up: %+v", s)
	}
	if s.DuplicateEffects != 0 || s.ErrorTasksWithoutAlert != 0 || s.AgentCalls == 0 {
		t.Errorf("summary: %+v", s)
	}
	if s.Schema != schema || !strings.HasPrefix(s.DB, "postgres://") {
		t.Errorf("db %q schema %q", s.DB, s.Schema)
	}
	// The store is kept: the orders are there to inspect.
	var l struct{ Tasks []TaskJSON }
	if err := json.Unmarshal([]byte(mustRun(t, "list", "--db", url, "--schema", schema, "--json")), &l); err != nil || len(l.Tasks) != 40 {
		t.Fatalf("list after the demo: %d tasks, %v", len(l.Tasks), err)
	}
}

// TestPostgresLockTimeout: --lock-timeout bounds the wait for a row another
// session holds.
func TestPostgresLockTimeout(t *testing.T) {
	t.Parallel()
	url, schema := pgSchema(t)
	db := []string{"--db", url, "--schema", schema}
	mustRun(t, append([]string{"migrate"}, db...)...)
	mustRun(t, append([]string{"submit", "orders", order1, "--id", "held"}, db...)...)

	ctx := t.Context()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, `SELECT 1 FROM `+pgx.Identifier{schema, "tasks"}.Sanitize()+` WHERE id = 'held' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	wantFailure(t, run(t, "", append([]string{"cancel", "held", "--lock-timeout", "200ms"}, db...)...), 1, "--lock-timeout")
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("cancel waited %s", d)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	// A lock on the whole table (a migration's, say) bounds reads and
	// writes alike, also before pgx has prepared their statements.
	tx, err = conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE `+pgx.Identifier{schema, "tasks"}.Sanitize()+` IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range [][]string{{"status", "held"}, {"list"}, {"cancel", "held"}} {
		start = time.Now()
		wantFailure(t, run(t, "", append(append(cmd, "--lock-timeout", "200ms"), db...)...), 1, "--lock-timeout")
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("%v waited %s", cmd, d)
		}
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	mustRun(t, append([]string{"cancel", "held", "--lock-timeout", "200ms"}, db...)...)
}

// drover submit --priority stores the task's priority and status shows
// it; one out of range is a usage error that stores nothing.
func TestSubmitPriority(t *testing.T) {
	t.Parallel()
	db, _ := migratedDB(t)
	in := `{"order_id":"o-1","amount":5}`
	mustRun(t, "submit", "orders", in, "--id", "urgent", "--priority", "9", "--in", "1h", "--db", db)
	if out := mustRun(t, "status", "urgent", "--db", db); !strings.Contains(out, "Priority:") || !strings.Contains(out, " 9\n") {
		t.Errorf("status does not show the priority:\n%s", out)
	}
	if out := mustRun(t, "status", "urgent", "--json", "--db", db); !strings.Contains(out, `"priority":9`) {
		t.Errorf("status --json: %s", out)
	}
	wantFailure(t, run(t, "", "submit", "orders", in, "--priority", "11", "--db", db), 2, "--priority 11: want an integer from 0 (lowest) to 10")
	wantFailure(t, run(t, "", "submit", "orders", in, "--priority", "-1", "--db", db), 2, "--priority -1: want")
	if out := mustRun(t, "list", "--db", db); strings.Count(out, "\n") != 2 {
		t.Errorf("want the one task only:\n%s", out)
	}
}

// drover submit --at/--in delays a task: it is stored Pending until then,
// status says so, and bad times are usage errors that store nothing.
func TestSubmitDelayed(t *testing.T) {
	t.Parallel()
	db, _ := migratedDB(t)
	in := `{"order_id":"o-1","amount":5}`
	if out := mustRun(t, "submit", "orders", in, "--id", "later", "--in", "2h", "--db", db); out != "later\n" {
		t.Fatalf("submit --in: %q", out)
	}
	at := time.Now().Add(3 * time.Hour).UTC().Truncate(time.Second)
	mustRun(t, "submit", "orders", in, "--id", "at", "--at", at.Format(time.RFC3339), "--db", db)
	if out := mustRun(t, "status", "later", "--db", db); !strings.Contains(out, "Pending until ") {
		t.Errorf("status of a delayed task does not say when it starts:\n%s", out)
	}
	var st struct {
		AvailableAt time.Time `json:"available_at"`
	}
	if err := json.Unmarshal([]byte(mustRun(t, "status", "at", "--json", "--db", db)), &st); err != nil || !st.AvailableAt.Equal(at) {
		t.Errorf("--at %s stored available_at %s (%v)", at, st.AvailableAt, err)
	}
	wantFailure(t, run(t, "", "submit", "orders", in, "--at", "tomorrow", "--db", db), 2, `--at "tomorrow": want a time like`)
	wantFailure(t, run(t, "", "submit", "orders", in, "--at", at.Format(time.RFC3339), "--in", "1h", "--db", db), 2, "--at and --in are both given")
	wantFailure(t, run(t, "", "submit", "orders", in, "--in", "-1s", "--db", db), 2, "--in -1s: want a duration from 0 to 10 years")
	if out := mustRun(t, "list", "--db", db); strings.Count(out, "\n") != 3 {
		t.Errorf("want the two delayed tasks only:\n%s", out)
	}
}
