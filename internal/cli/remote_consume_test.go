package cli

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestRemoteQueuePolicy: "queue policy --server" shows and changes a
// policy as the database path does.
func TestRemoteQueuePolicy(t *testing.T) {
	e := newRemoteEnv(t)
	r := run(t, "", "queue", "policy", "--queue", "orders", "--server", e.url, "--token", remoteSubmitTok)
	wantFailure(t, r, 1, "server: 404 not_found")
	r = run(t, "", "queue", "policy", "--queue", "orders", "--max-delivery", "5", "--server", e.url, "--token", remoteSubmitTok)
	wantFailure(t, r, 1, "queue policy changes and schedule pause, resume, run and delete need an operator token")

	out := e.op(t, "queue", "policy", "--queue", "orders", "--max-delivery", "5", "--poison", "skip")
	local := e.local(t, "queue", "policy", "--queue", "orders")
	if !strings.HasPrefix(out, "created queue orders\n") || strings.TrimPrefix(out, "created queue orders\n") != local {
		t.Fatalf("create over the API:\n%s\n--db shows:\n%s", out, local)
	}
	out = e.op(t, "queue", "policy", "--queue", "orders", "--dedupe-window", "0", "--lock-duration", "1m30s", "--json")
	if out != e.local(t, "queue", "policy", "--queue", "orders", "--json") {
		t.Fatalf("change --json: %s", out)
	}
	var q QueueJSON
	if err := json.Unmarshal([]byte(out), &q); err != nil || q.MaxDeliveryCount != 5 || q.Poison != "skip" || q.DedupeWindow != "0s" || q.LockDuration != "1m30s" {
		t.Fatalf("changed policy %s (%v)", out, err)
	}
	out = e.op(t, "queue", "policy", "--queue", "orders", "--max-delivery", "7")
	if !strings.HasPrefix(out, "updated the policy of queue orders\n") || !strings.Contains(out, "0s (off)") {
		t.Fatalf("update: %s", out)
	}
	e.sameBothWays(t, []string{"queue", "policy", "--queue", "orders"})
	e.sameBothWays(t, []string{"queue", "policy", "--queue", "orders", "--json"})
	r = run(t, "", "queue", "policy", "--queue", "orders", "--lock-duration", "10500us", "--server", e.url, "--token", remoteOperatorTok)
	wantFailure(t, r, 2, "whole milliseconds")
	r = run(t, "", "queue", "policy", "--queue", "orders", "--poison", "drop", "--server", e.url, "--token", remoteOperatorTok)
	wantFailure(t, r, 2, "--poison")
}

// consumeLines drops the timing of a consume's output: the summary's
// seconds (--json) or its "in 0.1s" (text).
func consumeLines(t *testing.T, out, queue string) string {
	t.Helper()
	out = strings.ReplaceAll(out, "queue "+queue, "queue Q")
	out = strings.ReplaceAll(out, `"queue":"`+queue+`"`, `"queue":"Q"`)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	last := lines[len(lines)-1]
	if i := strings.Index(last, `,"seconds"`); i >= 0 {
		last = last[:i]
	}
	if i := strings.LastIndex(last, " in "); i >= 0 && !strings.HasPrefix(last, "{") {
		last = last[:i]
	}
	lines[len(lines)-1] = last
	return strings.Join(lines, "\n")
}

// TestRemoteQueueConsume: "queue consume --server" handles the same
// messages in the same order with the same output as the database path,
// --exec failures and the max delivery count included.
func TestRemoteQueueConsume(t *testing.T) {
	e := newRemoteEnv(t)
	for _, q := range []string{"remote", "local"} {
		e.op(t, "queue", "policy", "--queue", q, "--max-delivery", "2", "--poison", "skip")
		for _, m := range [][]string{{"a", `{"n":1}`}, {"b", `"text"`}, {"a", `{"n":2}`}, {"a/x", `[1,2]`}, {"b", `3`}} {
			e.local(t, "queue", "publish", "--queue", q, "--session", m[0], "--body", m[1])
		}
	}
	// Plain consume, --json, until idle.
	remote := e.srv(t, "queue", "consume", "--queue", "remote", "--idle", "3s", "--count", "3", "--json")
	local := e.local(t, "queue", "consume", "--queue", "local", "--idle", "3s", "--count", "3", "--json")
	if consumeLines(t, remote, "remote") != consumeLines(t, local, "local") {
		t.Fatalf("consume --json differs\n--server:\n%s\n--db:\n%s", remote, local)
	}
	if !strings.Contains(remote, `"completed":3`) || !strings.Contains(remote, `"session":"a","seq":1`) {
		t.Fatalf("consume --json: %s", remote)
	}
	// --exec: the body on stdin; a failure abandons (delivered again),
	// past the max delivery count the message is dead-lettered.
	exec := `cat; echo; test "$DROVER_SESSION" != b || exit 4`
	remote = e.srv(t, "queue", "consume", "--queue", "remote", "--idle", "2s", "--retry-delay", "0s", "--exec", exec)
	local = e.local(t, "queue", "consume", "--queue", "local", "--idle", "2s", "--retry-delay", "0s", "--exec", exec)
	if consumeLines(t, remote, "remote") != consumeLines(t, local, "local") {
		t.Fatalf("consume --exec differs\n--server:\n%s\n--db:\n%s", remote, local)
	}
	if !strings.Contains(remote, "exit status 4: abandoned") || !strings.Contains(remote, "consumed 1 messages of queue remote (2 abandoned") {
		t.Fatalf("consume --exec: %s", remote)
	}
	e.sameBothWays(t, []string{"queue", "dlq", "--queue", "remote", "--json"})
	dl := e.srv(t, "queue", "dlq", "--queue", "remote", "--json")
	if !strings.Contains(dl, `"session":"b"`) {
		t.Fatalf("dead letters: %s", dl)
	}
	// Nothing left: both stop once idle.
	remote = e.srv(t, "queue", "consume", "--queue", "remote", "--idle", "200ms")
	if !strings.HasPrefix(remote, "consumed 0 messages of queue remote (0 abandoned") {
		t.Fatalf("idle consume: %s", remote)
	}
	// A handler slower than the lock: the consumer renews the lease. The
	// lock leaves room for a renewal's round trip on a loaded machine.
	e.op(t, "queue", "policy", "--queue", "slow", "--lock-duration", "1s")
	e.local(t, "queue", "publish", "--queue", "slow", "--session", "s", "--body", "1")
	remote = e.srv(t, "queue", "consume", "--queue", "slow", "--count", "1", "--idle", "5s", "--exec", "sleep 3.2", "--json")
	if !strings.Contains(remote, `"completed":1,"abandoned":0,"sessions_accepted":1`) || !strings.Contains(remote, `"delivery_count":1`) {
		t.Fatalf("slow handler: %s", remote)
	}
}
