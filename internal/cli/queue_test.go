package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/drover-run/drover/internal/benchcmd"
	"github.com/drover-run/drover/internal/democmd"
)

// The "drover queue", "drover demo ledger" and "drover bench convoy"
// commands, on SQLite and on PostgreSQL.

// qrun runs a queue command against db and decodes its last line of JSON
// into v.
func qrun(t *testing.T, v any, stdin string, db []string, args ...string) {
	t.Helper()
	args = append(append(args, db...), "--json")
	r := run(t, stdin, args...)
	if r.code != 0 {
		t.Fatalf("drover %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	if err := json.Unmarshal([]byte(lastLine(r.stdout)), v); err != nil {
		t.Fatalf("drover %s: last line %q: %v", strings.Join(args, " "), lastLine(r.stdout), err)
	}
}

type sessionsOut struct {
	Queue     string        `json:"queue"`
	Sessions  []SessionJSON `json:"sessions"`
	NextAfter string        `json:"next_after"`
}

type peekOut struct {
	Session  SessionJSON   `json:"session"`
	Messages []MessageJSON `json:"messages"`
	NextFrom int64         `json:"next_from"`
}

type dlqOut struct {
	Queue       string        `json:"queue"`
	DeadLetters []MessageJSON `json:"dead_letters"`
	NextAfter   *struct {
		Session string `json:"session"`
		Seq     int64  `json:"seq"`
	} `json:"next_after"`
}

func sessionsByID(t *testing.T, db []string, queue string) map[string]SessionJSON {
	t.Helper()
	var out sessionsOut
	qrun(t, &out, "", db, "queue", "sessions", "--queue", queue)
	m := map[string]SessionJSON{}
	for _, s := range out.Sessions {
		m[s.Session] = s
	}
	return m
}

func body(m MessageJSON) string {
	if m.Body == nil {
		return ""
	}
	return *m.Body
}

// queueScenario runs every queue subcommand against the migrated store db.
func queueScenario(t *testing.T, db []string) {
	var list struct {
		Queues []QueueJSON `json:"queues"`
	}
	qrun(t, &list, "", db, "queue", "list")
	if len(list.Queues) != 0 {
		t.Fatalf("queues in a fresh store: %+v", list.Queues)
	}

	// publish: --body, --body-file, stdin, de-duplication, end of sequence,
	// not-before.
	var p PublishedJSON
	qrun(t, &p, "", db, "queue", "publish", "--queue", "orders", "--session", "o-1", "--body", `{"op":"create"}`)
	if p.Queue != "orders" || p.Session != "o-1" || p.Seq != 1 || p.Duplicate {
		t.Fatalf("publish = %+v", p)
	}
	file := filepath.Join(t.TempDir(), "body.json")
	if err := os.WriteFile(file, []byte(`{"op":"pay"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	qrun(t, &p, "", db, "queue", "publish", "--queue", "orders", "--session", "o-1", "--body-file", file)
	if p.Seq != 2 || p.Duplicate {
		t.Fatalf("publish --body-file = %+v", p)
	}
	qrun(t, &p, `{"op":"ship"}`, db, "queue", "publish", "--queue", "orders", "--session", "o-1", "--body-file", "-", "--message-id", "ship-o-1")
	if p.Seq != 3 || p.Duplicate || p.MessageID != "ship-o-1" {
		t.Fatalf("publish from stdin = %+v", p)
	}
	qrun(t, &p, "", db, "queue", "publish", "--queue", "orders", "--session", "o-1", "--body", "again", "--message-id", "ship-o-1")
	if p.Seq != 3 || !p.Duplicate {
		t.Fatalf("duplicate publish = %+v", p)
	}
	if out := mustRun(t, append([]string{"queue", "publish", "--queue", "orders", "--session", "o-2", "--body", "only", "--end-of-sequence"}, db...)...); !strings.Contains(out, "published message 1 to session o-2") {
		t.Fatalf("publish (human) = %q", out)
	}
	wantFailure(t, run(t, "", append([]string{"queue", "publish", "--queue", "orders", "--session", "o-2", "--body", "late"}, db...)...), 1, "closed")
	qrun(t, &p, "", db, "queue", "publish", "--queue", "orders", "--session", "o-3", "--body", "later", "--not-before", "1h")
	if p.Seq != 1 {
		t.Fatalf("publish --not-before = %+v", p)
	}

	// sessions
	ss := sessionsByID(t, db, "orders")
	if len(ss) != 3 {
		t.Fatalf("sessions = %+v", ss)
	}
	if s := ss["o-1"]; s.Pending != 3 || s.LastSeq != 3 || s.NextSeq != 4 || s.Closed || s.Blocked || s.Locked || s.ReadyAt == nil {
		t.Errorf("o-1 = %+v", s)
	}
	if s := ss["o-2"]; !s.Closed || s.Pending != 1 {
		t.Errorf("o-2 = %+v", s)
	}
	if s := ss["o-3"]; s.ReadyAt == nil || time.Until(*s.ReadyAt) < 50*time.Minute {
		t.Errorf("o-3 = %+v, want ready in an hour", s)
	}
	var page sessionsOut
	qrun(t, &page, "", db, "queue", "sessions", "--queue", "orders", "--limit", "1")
	if len(page.Sessions) != 1 || page.NextAfter != "o-1" {
		t.Fatalf("sessions --limit 1 = %+v", page)
	}
	qrun(t, &page, "", db, "queue", "sessions", "--queue", "orders", "--after", "o-1")
	if len(page.Sessions) != 2 || page.Sessions[0].Session != "o-2" {
		t.Fatalf("sessions --after o-1 = %+v", page)
	}
	if out := mustRun(t, append([]string{"queue", "sessions", "--queue", "orders"}, db...)...); !strings.Contains(out, "PENDING") || !strings.Contains(out, "o-3") {
		t.Errorf("sessions (human) = %q", out)
	}

	// peek
	var pk peekOut
	qrun(t, &pk, "", db, "queue", "peek", "--queue", "orders", "--session", "o-1")
	if len(pk.Messages) != 3 || body(pk.Messages[0]) != `{"op":"create"}` || body(pk.Messages[1]) != `{"op":"pay"}` ||
		body(pk.Messages[2]) != `{"op":"ship"}` || pk.Messages[2].MessageID != "ship-o-1" || pk.Messages[0].DeliveryCount != 0 || pk.NextFrom != 0 {
		t.Fatalf("peek = %+v", pk)
	}
	qrun(t, &pk, "", db, "queue", "peek", "--queue", "orders", "--session", "o-1", "--from", "2", "--limit", "1")
	if len(pk.Messages) != 1 || pk.Messages[0].Seq != 2 || pk.NextFrom != 3 {
		t.Fatalf("peek --from 2 --limit 1 = %+v", pk)
	}
	if out := mustRun(t, append([]string{"queue", "peek", "--queue", "orders", "--session", "o-2"}, db...)...); !strings.Contains(out, "EOS") || !strings.Contains(out, "head") {
		t.Errorf("peek (human) = %q", out)
	}

	// policy: show, change; list
	var q QueueJSON
	qrun(t, &q, "", db, "queue", "policy", "--queue", "orders")
	if q.Name != "orders" || q.MaxDeliveryCount != 10 || q.Poison != "block" || q.DedupeWindow != "10m0s" || q.LockDuration != "30s" {
		t.Fatalf("policy = %+v", q)
	}
	qrun(t, &q, "", db, "queue", "policy", "--queue", "orders", "--max-delivery", "2", "--lock-duration", "5s")
	if q.MaxDeliveryCount != 2 || q.Poison != "block" || q.LockDuration != "5s" || q.LockDurationSeconds != 5 {
		t.Fatalf("policy changed = %+v", q)
	}
	qrun(t, &q, "", db, "queue", "policy", "--queue", "audit", "--poison", "skip", "--dedupe-window", "0")
	if q.Name != "audit" || q.Poison != "skip" || q.DedupeWindow != "0s" || q.MaxDeliveryCount != 10 {
		t.Fatalf("policy of a new queue = %+v", q)
	}
	qrun(t, &list, "", db, "queue", "list")
	if len(list.Queues) != 2 || list.Queues[0].Name != "audit" || list.Queues[1].Name != "orders" || list.Queues[1].MaxDeliveryCount != 2 {
		t.Fatalf("list = %+v", list.Queues)
	}

	// consume --count: exactly that many, in order.
	var sum ConsumeSummary
	qrun(t, &sum, "", db, "queue", "consume", "--queue", "orders", "--count", "1")
	if sum.Completed != 1 || sum.Abandoned != 0 {
		t.Fatalf("consume --count 1 = %+v", sum)
	}
	ss = sessionsByID(t, db, "orders")
	if ss["o-1"].Pending+ss["o-2"].Pending != 3 {
		t.Fatalf("after consuming one: o-1 %+v, o-2 %+v", ss["o-1"], ss["o-2"])
	}

	// A failing --exec: every head available is delivered 3 times and
	// dead-lettered (max delivery 2); under block their sessions halt.
	r := run(t, "", append([]string{"queue", "consume", "--queue", "orders", "--sessions", "2", "--exec", "cat >/dev/null; exit 3",
		"--retry-delay", "10ms", "--idle", "1500ms", "--json"}, db...)...)
	if r.code != 0 {
		t.Fatalf("consume --exec: exit %d, stderr %s", r.code, r.stderr)
	}
	if err := json.Unmarshal([]byte(lastLine(r.stdout)), &sum); err != nil || sum.Completed != 0 || sum.Abandoned < 2 {
		t.Fatalf("consume --exec summary = %+v (%v)\n%s", sum, err, r.stdout)
	}
	var dl dlqOut
	qrun(t, &dl, "", db, "queue", "dlq", "--queue", "orders")
	if len(dl.DeadLetters) == 0 {
		t.Fatalf("no dead letters after a failing consumer")
	}
	for _, m := range dl.DeadLetters {
		if !m.Dead || m.DeadReason != "max delivery count exceeded" || m.DeadAt == nil || m.DeliveryCount != 3 {
			t.Errorf("dead letter %+v", m)
		}
	}
	ss = sessionsByID(t, db, "orders")
	o1 := ss["o-1"]
	var o1dead *MessageJSON
	for _, m := range dl.DeadLetters {
		if m.Session == "o-1" {
			o1dead = &m
		}
	}
	if o1dead == nil || !o1.Blocked {
		t.Fatalf("o-1 = %+v, dead letters %+v", o1, dl.DeadLetters)
	}
	qrun(t, &dl, "", db, "queue", "dlq", "--queue", "orders", "--session", "o-1")
	if len(dl.DeadLetters) != 1 || dl.DeadLetters[0].Seq != o1dead.Seq {
		t.Fatalf("dlq --session o-1 = %+v", dl)
	}
	if out := mustRun(t, append([]string{"queue", "dlq", "--queue", "orders"}, db...)...); !strings.Contains(out, "max delivery count exceeded") {
		t.Errorf("dlq (human) = %q", out)
	}
	// The block raised an operator alert.
	if out := mustRun(t, append([]string{"events", "--alerts"}, db...)...); !strings.Contains(out, "session_blocked") || !strings.Contains(out, "session:orders/o-1") {
		t.Errorf("alerts = %q", out)
	}

	// resolve --resubmit: back at the head, unblocked, delivered next.
	var res struct {
		Queue   string      `json:"queue"`
		Seq     int64       `json:"seq"`
		Action  string      `json:"action"`
		Session SessionJSON `json:"session"`
	}
	qrun(t, &res, "", db, "queue", "resolve", "--queue", "orders", "--session", "o-1", "--seq", itoa64(o1dead.Seq), "--resubmit")
	if res.Action != "resubmitted" || res.Session.Blocked || res.Session.Pending != o1.Pending+1 {
		t.Fatalf("resolve --resubmit = %+v (before: %+v)", res, o1)
	}
	var pk2 peekOut
	qrun(t, &pk2, "", db, "queue", "peek", "--queue", "orders", "--session", "o-1")
	if len(pk2.Messages) == 0 || pk2.Messages[0].Seq != o1dead.Seq || pk2.Messages[0].Dead || pk2.Messages[0].DeliveryCount != 0 {
		t.Fatalf("after resubmit, peek = %+v", pk2.Messages)
	}
	// Resolving it again: it is not dead any more.
	wantFailure(t, run(t, "", append([]string{"queue", "resolve", "--queue", "orders", "--session", "o-1", "--seq", itoa64(o1dead.Seq), "--discard"}, db...)...), 1, "no dead-lettered message")
	// The rest of the dead letters: discard.
	qrun(t, &dl, "", db, "queue", "dlq", "--queue", "orders")
	for _, m := range dl.DeadLetters {
		qrun(t, &res, "", db, "queue", "resolve", "--queue", "orders", "--session", m.Session, "--seq", itoa64(m.Seq), "--discard")
		if res.Action != "discarded" || res.Session.Blocked {
			t.Fatalf("resolve --discard = %+v", res)
		}
	}
	qrun(t, &dl, "", db, "queue", "dlq", "--queue", "orders")
	if len(dl.DeadLetters) != 0 {
		t.Fatalf("dead letters left: %+v", dl.DeadLetters)
	}

	// consume the resubmitted message and the rest of o-1, printed in order.
	r = run(t, "", append([]string{"queue", "consume", "--queue", "orders", "--count", "2", "--json"}, db...)...)
	if r.code != 0 {
		t.Fatalf("consume: exit %d: %s", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 3 {
		t.Fatalf("consume --count 2 printed %q", r.stdout)
	}
	var first ConsumedJSON
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil || first.Session != "o-1" || first.Seq != o1dead.Seq || first.Outcome != "completed" {
		t.Fatalf("first consumed = %+v (%v)", first, err)
	}
	ss = sessionsByID(t, db, "orders")
	if ss["o-1"].Pending != 0 || ss["o-3"].Pending != 1 {
		t.Fatalf("after consuming o-1: %+v", ss)
	}
}

func itoa64(n int64) string { return strconv.FormatInt(n, 10) }

func TestQueueCommands(t *testing.T) {
	t.Parallel()
	db, _ := migratedDB(t)
	queueScenario(t, []string{"--db", db})
}

// A handler that runs longer than --idle is not idleness: the consumer
// stops only once nothing is held and nothing was available for --idle.
func TestConsumeIdleWaitsForARunningHandler(t *testing.T) {
	t.Parallel()
	path, _ := migratedDB(t)
	db := []string{"--db", path}
	mustRun(t, append([]string{"queue", "publish", "--queue", "slow", "--session", "s", "--body", "1"}, db...)...)
	var sum ConsumeSummary
	qrun(t, &sum, "", db, "queue", "consume", "--queue", "slow", "--sessions", "2", "--idle", "1500ms", "--exec", "sleep 3.5")
	if sum.Completed != 1 || sum.Abandoned != 0 {
		t.Fatalf("consume = %+v, want the slow message completed", sum)
	}
}

func TestPostgresQueueCommands(t *testing.T) {
	t.Parallel()
	url, schema := pgSchema(t)
	db := []string{"--db", url, "--schema", schema}
	mustRun(t, append([]string{"migrate"}, db...)...)
	queueScenario(t, db)
}

// queueBadInput: every bad input fails with a clear message naming the flag
// or field, and changes nothing.
func queueBadInput(t *testing.T, db []string) {
	mustRun(t, append([]string{"queue", "publish", "--queue", "orders", "--session", "o-1", "--body", "keep"}, db...)...)
	snapshot := func() string {
		return mustRun(t, append([]string{"queue", "list", "--json"}, db...)...) +
			mustRun(t, append([]string{"queue", "sessions", "--queue", "orders", "--json"}, db...)...) +
			mustRun(t, append([]string{"queue", "peek", "--queue", "orders", "--session", "o-1", "--json"}, db...)...)
	}
	before := snapshot()
	missing := filepath.Join(t.TempDir(), "missing.json")
	cases := []struct {
		name  string
		stdin string
		args  []string
		code  int
		want  string
	}{
		{"no subcommand", "", []string{"queue"}, 2, "subcommand"},
		{"unknown subcommand", "", []string{"queue", "frob"}, 2, "unknown command"},
		{"publish without queue", "", []string{"queue", "publish", "--session", "o-1"}, 2, "--queue is required"},
		{"publish bad queue", "", []string{"queue", "publish", "--queue", "a b", "--session", "o-1"}, 2, "--queue"},
		{"publish queue with slash", "", []string{"queue", "publish", "--queue", "a/b", "--session", "o-1"}, 2, "--queue"},
		{"publish without session", "", []string{"queue", "publish", "--queue", "orders"}, 2, "--session is required"},
		{"publish control session", "", []string{"queue", "publish", "--queue", "orders", "--session", "o\x01"}, 2, "--session"},
		{"publish long session", "", []string{"queue", "publish", "--queue", "orders", "--session", strings.Repeat("s", 300)}, 2, "--session"},
		{"publish long message ID", "", []string{"queue", "publish", "--queue", "orders", "--session", "o-1", "--message-id", strings.Repeat("m", 300)}, 2, "--message-id"},
		{"publish empty message ID", "", []string{"queue", "publish", "--queue", "orders", "--session", "o-1", "--message-id", ""}, 2, "--message-id"},
		{"publish two bodies", "", []string{"queue", "publish", "--queue", "orders", "--session", "o-1", "--body", "a", "--body-file", "-"}, 2, "exclusive"},
		{"publish missing body file", "", []string{"queue", "publish", "--queue", "orders", "--session", "o-1", "--body-file", missing}, 2, "--body-file"},
		{"publish bad not-before", "", []string{"queue", "publish", "--queue", "orders", "--session", "o-1", "--not-before", "tomorrow"}, 2, "--not-before"},
		{"publish negative not-before", "", []string{"queue", "publish", "--queue", "orders", "--session", "o-1", "--not-before", "-5m"}, 2, "--not-before"},
		{"publish body too large", "", []string{"queue", "publish", "--queue", "orders", "--session", "o-1", "--body", "123456", "--max-body-bytes", "5"}, 1, "--max-body-bytes"},
		{"publish stdin too large", "123456", []string{"queue", "publish", "--queue", "orders", "--session", "o-1", "--body-file", "-", "--max-body-bytes", "5"}, 1, "--max-body-bytes"},
		{"publish bad max body", "", []string{"queue", "publish", "--queue", "orders", "--session", "o-1", "--max-body-bytes", "0"}, 2, "--max-body-bytes"},
		{"peek without session", "", []string{"queue", "peek", "--queue", "orders"}, 2, "--session is required"},
		{"peek bad limit", "", []string{"queue", "peek", "--queue", "orders", "--session", "o-1", "--limit", "0"}, 2, "--limit"},
		{"peek bad from", "", []string{"queue", "peek", "--queue", "orders", "--session", "o-1", "--from", "-1"}, 2, "--from"},
		{"peek unknown session", "", []string{"queue", "peek", "--queue", "orders", "--session", "nope"}, 1, "not found"},
		{"peek unknown queue", "", []string{"queue", "peek", "--queue", "nope", "--session", "o-1"}, 1, "queue \"nope\" not found"},
		{"sessions unknown queue", "", []string{"queue", "sessions", "--queue", "nope"}, 1, "not found"},
		{"sessions bad limit", "", []string{"queue", "sessions", "--queue", "orders", "--limit", "-3"}, 2, "--limit"},
		{"policy unknown queue", "", []string{"queue", "policy", "--queue", "nope"}, 1, "not found"},
		{"policy bad poison", "", []string{"queue", "policy", "--queue", "orders", "--poison", "maybe"}, 2, "--poison"},
		{"policy bad max delivery", "", []string{"queue", "policy", "--queue", "orders", "--max-delivery", "0"}, 2, "--max-delivery"},
		{"policy short lock", "", []string{"queue", "policy", "--queue", "orders", "--lock-duration", "1ms"}, 2, "--lock-duration"},
		{"policy negative dedupe", "", []string{"queue", "policy", "--queue", "orders", "--dedupe-window", "-1s"}, 2, "--dedupe-window"},
		{"policy bad duration", "", []string{"queue", "policy", "--queue", "orders", "--lock-duration", "soon"}, 2, "invalid argument"},
		{"dlq bad limit", "", []string{"queue", "dlq", "--queue", "orders", "--limit", "0"}, 2, "--limit"},
		{"dlq after-seq alone", "", []string{"queue", "dlq", "--queue", "orders", "--after-seq", "3"}, 2, "--after-seq"},
		{"dlq unknown session", "", []string{"queue", "dlq", "--queue", "orders", "--session", "nope"}, 1, "not found"},
		{"resolve without seq", "", []string{"queue", "resolve", "--queue", "orders", "--session", "o-1", "--resubmit"}, 2, "--seq is required"},
		{"resolve bad seq", "", []string{"queue", "resolve", "--queue", "orders", "--session", "o-1", "--seq", "0", "--resubmit"}, 2, "--seq"},
		{"resolve both", "", []string{"queue", "resolve", "--queue", "orders", "--session", "o-1", "--seq", "1", "--resubmit", "--discard"}, 2, "exactly one"},
		{"resolve neither", "", []string{"queue", "resolve", "--queue", "orders", "--session", "o-1", "--seq", "1"}, 2, "exactly one"},
		{"resolve not dead", "", []string{"queue", "resolve", "--queue", "orders", "--session", "o-1", "--seq", "1", "--discard"}, 1, "no dead-lettered message 1"},
		{"resolve unknown session", "", []string{"queue", "resolve", "--queue", "orders", "--session", "nope", "--seq", "1", "--discard"}, 1, "not found"},
		{"consume bad sessions", "", []string{"queue", "consume", "--queue", "orders", "--sessions", "0"}, 2, "--sessions"},
		{"consume bad count", "", []string{"queue", "consume", "--queue", "orders", "--count", "-1"}, 2, "--count"},
		{"consume empty exec", "", []string{"queue", "consume", "--queue", "orders", "--exec", " "}, 2, "--exec"},
		{"consume without queue", "", []string{"queue", "consume"}, 2, "--queue is required"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wantFailure(t, run(t, tc.stdin, append(tc.args, db...)...), tc.code, tc.want)
		})
	}
	if after := snapshot(); after != before {
		t.Errorf("bad input changed the store:\nbefore %s\nafter  %s", before, after)
	}
}

func TestQueueBadInput(t *testing.T) {
	t.Parallel()
	db, _ := migratedDB(t)
	queueBadInput(t, []string{"--db", db})
	// A store that is not migrated, or missing: nothing is created.
	empty := filepath.Join(t.TempDir(), "empty.db")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	wantFailure(t, run(t, "", "queue", "publish", "--queue", "q", "--session", "s", "--db", empty), 1, "drover migrate")
	missing := filepath.Join(t.TempDir(), "missing.db")
	wantFailure(t, run(t, "", "queue", "list", "--db", missing), 1, "does not exist")
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Errorf("queue list created the database: %v", err)
	}
}

func TestPostgresQueueBadInput(t *testing.T) {
	t.Parallel()
	url, schema := pgSchema(t)
	db := []string{"--db", url, "--schema", schema}
	wantFailure(t, run(t, "", append([]string{"queue", "list"}, db...)...), 1, "drover migrate")
	mustRun(t, append([]string{"migrate"}, db...)...)
	queueBadInput(t, db)
}

func TestQueueHelp(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"queue", "--help"}, {"queue", "publish", "--help"}, {"queue", "peek", "--help"}, {"queue", "sessions", "--help"},
		{"queue", "list", "--help"}, {"queue", "policy", "--help"}, {"queue", "dlq", "--help"}, {"queue", "resolve", "--help"},
		{"queue", "consume", "--help"}, {"demo", "ledger", "--help"}, {"bench", "convoy", "--help"},
	} {
		r := run(t, "", args...)
		if r.code != 0 || !strings.Contains(r.stdout, "Usage:") || !strings.Contains(r.stdout, "Examples:") || r.stderr != "" {
			t.Errorf("drover %s: exit %d, stdout %q, stderr %q", strings.Join(args, " "), r.code, r.stdout, r.stderr)
		}
	}
}

func demoLedger(t *testing.T, args ...string) democmd.DemoLedgerSummary {
	t.Helper()
	r := run(t, "", append([]string{"demo", "ledger", "--json"}, args...)...)
	if r.code != 0 {
		t.Fatalf("demo ledger: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	var s democmd.DemoLedgerSummary
	if err := json.Unmarshal([]byte(lastLine(r.stdout)), &s); err != nil {
		t.Fatalf("last line %q: %v", lastLine(r.stdout), err)
	}
	t.Logf("demo ledger: %+v", s)
	if s.OrderViolations != 0 || s.Duplicates != 0 || s.Lost != 0 || s.DeadLettered != 0 {
		t.Errorf("invariants broken: %+v", s)
	}
	if s.Messages != s.Ledgers*s.TransactionsPerLedger || s.Consumed != int64(s.Messages) || s.HandlerCalls < int64(s.Messages) {
		t.Errorf("counts do not add up: %+v", s)
	}
	if s.Seconds <= 0 || s.MsgsPerSec <= 0 {
		t.Errorf("no timing: %+v", s)
	}
	return s
}

func TestDemoLedger(t *testing.T) {
	t.Parallel()
	s := demoLedger(t, "--ledgers", "10", "--orders", "50", "--consumers", "4", "--failure-rate", "0.1", "--stalls", "2", "--lock-duration", "300ms")
	if s.Ledgers != 10 || s.Orders != 50 || s.Sessions != 50 || s.Consumers != 4 || s.Messages != 500 {
		t.Errorf("summary = %+v", s)
	}
	// The faults were really injected, and the lock losses really
	// happened: a stalled consumer's settles were rejected.
	if s.InjectedFailures == 0 || s.Abandoned == 0 || s.InjectedStalls != 2 || s.LockLosses == 0 || s.RejectedSettles == 0 {
		t.Errorf("faults not injected: %+v", s)
	}
	wantFailure(t, run(t, "", "demo", "ledger", "--ledgers", "0"), 2, "--ledgers")
	wantFailure(t, run(t, "", "demo", "ledger", "--ledgers", "1", "--orders", "10", "--transactions", "5"), 2, "--orders")
	wantFailure(t, run(t, "", "demo", "ledger", "--failure-rate", "0.9"), 2, "--failure-rate")
	wantFailure(t, run(t, "", "demo", "ledger", "--consumers", "1", "--stalls", "1"), 2, "--stalls")
}

func TestPostgresDemoLedger(t *testing.T) {
	t.Parallel()
	url, schema := pgSchema(t)
	s := demoLedger(t, "--ledgers", "5", "--orders", "40", "--consumers", "3", "--stalls", "1", "--lock-duration", "300ms",
		"--db", url, "--schema", schema)
	if s.Schema != schema || !strings.HasPrefix(s.OrderQueue, "demo-") || s.InjectedStalls != 1 || s.LockLosses == 0 {
		t.Errorf("summary = %+v", s)
	}
	// The store is kept: the order sessions are there to inspect, ended.
	ss := sessionsByID(t, []string{"--db", url, "--schema", schema}, s.OrderQueue)
	if len(ss) != 40 {
		t.Fatalf("%d order sessions, want 40", len(ss))
	}
	for id, x := range ss {
		if x.Pending != 0 || !x.Closed {
			t.Errorf("session %s = %+v", id, x)
		}
	}
}

func benchConvoy(t *testing.T, args ...string) benchcmd.BenchConvoyResult {
	t.Helper()
	r := run(t, "", append([]string{"bench", "convoy", "--json"}, args...)...)
	if r.code != 0 {
		t.Fatalf("bench convoy: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	var b benchcmd.BenchConvoyResult
	if err := json.Unmarshal([]byte(lastLine(r.stdout)), &b); err != nil {
		t.Fatalf("bench output %q: %v", r.stdout, err)
	}
	t.Logf("bench convoy: %+v", b)
	if b.Mode != "convoy" || b.OrderViolations != 0 || b.Lost != 0 || b.Consumed != int64(b.Messages) ||
		b.Seconds <= 0 || b.MsgsPerSec <= 0 || b.PublishMsgsPerSec <= 0 || b.Rounds <= 0 {
		t.Fatalf("bench convoy = %+v", b)
	}
	return b
}

func TestBenchConvoy(t *testing.T) {
	t.Parallel()
	cpuProfiler.Lock()
	defer cpuProfiler.Unlock()
	prof := filepath.Join(t.TempDir(), "cpu.out")
	b := benchConvoy(t, "--sessions", "20", "--messages", "2000", "--synchronous", "normal", "--cpuprofile", prof)
	if b.Driver != "sqlite" || b.Sessions != 20 || b.Messages != 2000 || b.Consumers != 1 || b.MaxSessions != 20 || b.Handler != "go" {
		t.Errorf("bench convoy = %+v", b)
	}
	if st, err := os.Stat(prof); err != nil || st.Size() == 0 {
		t.Errorf("no CPU profile: %v", err)
	}
	b = benchConvoy(t, "--sessions", "7", "--messages", "500", "--consumers", "3", "--handler", "tx", "--batch", "64")
	if b.Consumers != 3 || b.MaxSessions != 3 || b.Handler != "tx" {
		t.Errorf("bench convoy = %+v", b)
	}
	wantFailure(t, run(t, "", "bench", "convoy", "--sessions", "0"), 2, "--sessions")
	wantFailure(t, run(t, "", "bench", "convoy", "--handler", "rust"), 2, "--handler")
	wantFailure(t, run(t, "", "bench", "convoy", "--messages", "-1"), 2, "--messages")
}

func TestPostgresBenchConvoy(t *testing.T) {
	t.Parallel()
	url, schema := pgSchema(t)
	b := benchConvoy(t, "--sessions", "20", "--messages", "2000", "--consumers", "2", "--db", url, "--schema", schema)
	if b.Driver != "postgres" || b.Schema != schema || b.Synchronous != "" {
		t.Errorf("bench convoy = %+v", b)
	}
	wantFailure(t, run(t, "", "bench", "convoy", "--synchronous", "normal", "--db", url), 2, "SQLite only")
}
