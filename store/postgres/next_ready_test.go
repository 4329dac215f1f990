package postgres_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/store"
	"github.com/drover-run/drover/store/postgres"
)

// An idle consumer's SessionNextReady reads the held sessions and the
// first one no lock holds back, not every session waiting for a later
// time: a queue of many delayed messages costs each idle wake-up nothing.
func TestSessionNextReadyReadsOnlyTheHeldAndTheFirstFree(t *testing.T) {
	ctx := context.Background()
	d := open(t)
	now := time.Now().UTC().Truncate(time.Microsecond)
	const delayed = 2000
	var msgs []store.PublishMessage
	for i := range delayed {
		msgs = append(msgs, store.PublishMessage{Queue: "q", SessionID: fmt.Sprintf("later-%04d", i), Body: []byte("x"),
			AvailableAt: now.Add(time.Hour)}) // all due at once: ties cost nothing either
	}
	for i := range 3 {
		msgs = append(msgs, store.PublishMessage{Queue: "q", SessionID: fmt.Sprintf("now-%d", i), Body: []byte("x")})
	}
	if err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		_, err := x.MessagePublishMany(ctx, &store.MessagePublishManyParams{Messages: msgs, Now: now})
		return err
	}); err != nil {
		t.Fatal(err)
	}

	check := func(what string, want time.Time, maxRows int) {
		t.Helper()
		got, err := d.Reader().SessionNextReady(ctx, &store.SessionNextReadyParams{Queue: "q"})
		if err != nil {
			t.Fatal(err)
		}
		if !got.Equal(want) {
			t.Errorf("%s: SessionNextReady = %v, want %v", what, got, want)
		}
		if rows := sessionRowsRead(t, d, "q"); rows > maxRows {
			t.Errorf("%s: SessionNextReady read %d rows of queue_sessions (%d sessions wait for later), want at most %d", what, rows, delayed, maxRows)
		}
	}
	check("three sessions ready now", now, 2)

	// Held, the three now stand in front of the delayed ones: the answer is
	// the first lock end, and the read costs the held sessions.
	if err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		got, err := x.SessionAccept(ctx, &store.SessionAcceptParams{Queue: "q", Holder: "h", Now: now, Limit: 3})
		if err == nil && len(got) != 3 {
			err = fmt.Errorf("accepted %d sessions, want 3", len(got))
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	check("three held sessions", now.Add(dt.DefaultLockDuration), 8)
}

// sessionRowsRead runs SessionNextReady's statement under EXPLAIN ANALYZE
// and returns the rows its scans of queue_sessions read: those they
// returned and those their filters removed.
func sessionRowsRead(t *testing.T, d *postgres.Driver, queue string) int {
	t.Helper()
	var plan []struct {
		Plan json.RawMessage `json:"Plan"`
	}
	// With the plan settings of the driver's read (pipelined transactions'
	// and indexed's; no statistics here: autovacuum has not analyzed the
	// new table).
	ctx := context.Background()
	tx, err := d.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a read
	var raw []byte
	if _, err := tx.Exec(ctx, postgres.SetLocalPlanSettings); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SET LOCAL enable_bitmapscan = off"); err != nil {
		t.Fatal(err)
	}
	if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+postgres.SessionNextReadyQuery(d), queue).Scan(&raw); err != nil {
		t.Fatalf("EXPLAIN: %v", err)
	}
	if err := json.Unmarshal(raw, &plan); err != nil || len(plan) != 1 {
		t.Fatalf("EXPLAIN output %s: %v", raw, err)
	}
	type node struct {
		Relation string  `json:"Relation Name"`
		Rows     float64 `json:"Actual Rows"`
		Loops    float64 `json:"Actual Loops"`
		Removed  float64 `json:"Rows Removed by Filter"`
		Plans    []json.RawMessage
	}
	var walk func(json.RawMessage) int
	walk = func(m json.RawMessage) int {
		var n node
		if err := json.Unmarshal(m, &n); err != nil {
			t.Fatalf("plan node %s: %v", m, err)
		}
		total := 0
		if n.Relation == "queue_sessions" {
			total += int((n.Rows + n.Removed) * n.Loops)
		}
		for _, c := range n.Plans {
			total += walk(c)
		}
		return total
	}
	return walk(plan[0].Plan)
}
