package crashtest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/drover-run/drover/convoy"
	"github.com/drover-run/drover/store/postgres"
)

// Queue names of internal/crashtest/convoyworker.
const (
	cwLedgers = "ledgers"
	cwOrders  = "orders"
)

// TestConvoySurvivesKills runs three convoyworker processes — each a ledger
// processor and a transactional consumer of the per-order sessions — on one
// PostgreSQL schema, publishes ledgers whose transactions interleave many
// orders, and SIGKILLs random workers throughout, restarting them under new
// instance IDs. Then it checks, from the effects each consumer committed
// with its completions, that every order's transactions were consumed once
// each, in ledger order: nothing lost, nothing twice, no order violated —
// whichever process died at whichever step (mid-ledger fan-out, mid-round,
// between receive and settle).
func TestConvoySurvivesKills(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test builds and kills real processes; skipped with -short")
	}
	url := os.Getenv(pgURLEnv)
	if url == "" {
		t.Fatalf("%s is not set: this test needs PostgreSQL (scripts/test sets it)", pgURLEnv)
	}
	nLedgers, perLedger, nOrders, kills := 100, 50, 200, 10
	if *long {
		nLedgers, perLedger, nOrders, kills = 400, 100, 1000, 40
	}
	seed := *crashSeed
	if seed == 0 {
		seed = rand.Uint64() >> 1
	}
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed^0xc0ffee))
	ctx := context.Background()
	schema := "crash_convoy_" + randomHex(6)
	t.Cleanup(func() {
		if err := dropSchema(url, schema); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	drv, err := postgres.Open(ctx, url, postgres.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer drv.Close()
	if err := drv.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := convoy.New(convoy.Config{Store: drv, InstanceID: "test"})
	if err != nil {
		t.Fatal(err)
	}
	// Kills make deliveries count up; nothing may be dead-lettered for it.
	// A short lock lets survivors take a killed worker's sessions quickly.
	for _, q := range []string{cwLedgers, cwOrders} {
		if err := c.SetQueuePolicy(ctx, convoy.QueuePolicy{Name: q, MaxDeliveryCount: 10000, Poison: convoy.PoisonBlock,
			DedupeWindow: time.Hour, LockDuration: 500 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
	}

	// The consumers' application table: one row per message consumed,
	// written in the transaction that completes it.
	effects := pgx.Identifier{schema, "effects"}.Sanitize()
	if err := execSQL(url, `CREATE TABLE `+effects+` (id bigserial PRIMARY KEY, order_id text NOT NULL, body jsonb NOT NULL, worker text NOT NULL)`); err != nil {
		t.Fatal(err)
	}

	bin := filepath.Join(t.TempDir(), "convoyworker")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/drover-run/drover/internal/crashtest/convoyworker").CombinedOutput(); err != nil {
		t.Fatalf("build convoyworker: %v\n%s", err, out)
	}
	logPath := filepath.Join(t.TempDir(), "workers.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	var logMu sync.Mutex
	var bad []string
	logw := writerFunc(func(p []byte) (int, error) {
		logMu.Lock()
		defer logMu.Unlock()
		if s := string(p); strings.Contains(s, "VIOLATION") || strings.Contains(s, "panic:") || strings.Contains(s, "DATA RACE") {
			bad = append(bad, s)
		}
		return logf.Write(p)
	})

	type worker struct {
		cmd *exec.Cmd
		id  string // its instance ID: the holder of the sessions it accepts
	}
	var nextID int
	start := func() worker {
		nextID++
		id := fmt.Sprintf("w%d", nextID)
		cmd := exec.Command(bin, "--db", url, "--schema", schema, "--id", id, "--sessions", "16")
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = logw
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		ready := make(chan struct{})
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				if sc.Text() == "ready" {
					close(ready)
				}
			}
			_, _ = io.Copy(io.Discard, out)
		}()
		select {
		case <-ready:
		case <-time.After(60 * time.Second):
			t.Fatal("convoyworker did not start within 60s")
		}
		return worker{cmd, id}
	}
	workers := []worker{start(), start(), start()}
	t.Cleanup(func() {
		for _, w := range workers {
			_ = w.cmd.Process.Kill()
			_ = w.cmd.Wait()
		}
	})

	// Ledgers: each transaction carries its order and the order's running
	// number, so the consumed order can be checked against the ledgers.
	type tx struct {
		Order string `json:"order"`
		N     int    `json:"n"`
	}
	counter := map[string]int{}
	want, published := 0, 0
	publish := func(n int) {
		type ltx struct {
			ID      string `json:"id"`
			OrderID string `json:"order_id"`
			Body    tx     `json:"body"`
		}
		for range n {
			var txs []ltx
			for i := range perLedger {
				o := fmt.Sprintf("o-%d", rng.IntN(nOrders))
				counter[o]++
				txs = append(txs, ltx{ID: fmt.Sprint(i), OrderID: o, Body: tx{Order: o, N: counter[o]}})
				want++
			}
			id := fmt.Sprintf("L-%d", published)
			published++
			body, _ := json.Marshal(map[string]any{"ledger_id": id, "transactions": txs})
			if _, err := c.Publish(ctx, cwLedgers, convoy.Message{SessionID: "ledger-stream", Body: body, MessageID: id}); err != nil {
				t.Fatal(err)
			}
		}
	}
	publish(nLedgers)

	// Chaos: kill a random worker every 100–400 ms and start a new one.
	sessions := func(each func(s *convoy.Session)) {
		for _, q := range []string{cwLedgers, cwOrders} {
			after := ""
			for {
				ss, err := c.Sessions(ctx, q, after, 1000)
				if err != nil {
					t.Fatal(err)
				}
				for _, s := range ss {
					each(s)
				}
				if len(ss) < 1000 {
					break
				}
				after = ss[len(ss)-1].ID
			}
		}
	}
	pending := func() int {
		n := 0
		sessions(func(s *convoy.Session) { n += s.Pending })
		return n
	}
	// held counts the sessions (ledger or order) a worker holds under an
	// unexpired lock.
	held := func(id string) int {
		n, now := 0, time.Now()
		sessions(func(s *convoy.Session) {
			if s.LockHolder == id && s.LockedUntil != nil && s.LockedUntil.After(now) {
				n++
			}
		})
		return n
	}
	// The work is topped up while kills remain, so that a fast machine
	// cannot finish it before every kill has landed.
	killed, killedBusy := 0, 0
	for killed < kills {
		if pending() < nLedgers*perLedger/4 {
			publish(nLedgers / 4)
		}
		time.Sleep(time.Duration(100+rng.IntN(300)) * time.Millisecond)
		i := rng.IntN(len(workers))
		if held(workers[i].id) > 0 {
			killedBusy++
		}
		_ = workers[i].cmd.Process.Kill()
		_ = workers[i].cmd.Wait()
		killed++
		workers[i] = start()
	}
	t.Logf("%d kills (%d of a worker holding sessions); %d messages pending after the last", killed, killedBusy, pending())
	if killedBusy < (killed+1)/2 {
		t.Fatalf("only %d of %d kills hit a worker holding sessions; the test is not exercising crashes", killedBusy, killed)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for pending() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d messages still pending 2 minutes after the last kill", pending())
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Every order's effects: its transactions once each, in ledger order.
	got, lost, dup, violations := 0, 0, 0, 0
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT order_id, body FROM `+effects+` ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	byOrder := map[string][]tx{}
	for rows.Next() {
		var o string
		var b tx
		if err := rows.Scan(&o, &b); err != nil {
			t.Fatal(err)
		}
		byOrder[o] = append(byOrder[o], b)
		got++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for o, n := range counter {
		seen := map[int]bool{}
		prev := 0
		for _, b := range byOrder[o] {
			if seen[b.N] {
				dup++
				continue
			}
			seen[b.N] = true
			if b.N != prev+1 {
				violations++
				if violations <= 5 {
					t.Errorf("order %s: effect %d after %d", o, b.N, prev)
				}
			}
			prev = b.N
		}
		lost += n - len(seen)
	}
	for _, q := range []string{cwLedgers, cwOrders} {
		dl, err := c.DeadLetters(ctx, q, "", convoy.DeadLetterCursor{}, 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range dl {
			t.Errorf("dead letter in %s: session %s seq %d: %s", q, m.SessionID, m.Seq, m.DeadReason)
		}
	}
	t.Logf("%d ledgers, %d transactions over %d orders, %d effects; lost %d, duplicated %d, order violations %d",
		published, want, len(counter), got, lost, dup, violations)
	if lost != 0 || dup != 0 || violations != 0 {
		t.Errorf("lost %d, duplicated %d, order violations %d; want 0 each (worker logs: %s)", lost, dup, violations, logPath)
	}
	logMu.Lock()
	defer logMu.Unlock()
	for _, b := range bad {
		t.Errorf("worker log: %s", b)
	}
}
