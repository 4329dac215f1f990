package convoy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/drover-run/drover/convoy"
	"github.com/drover-run/drover/internal/testutil"
	"github.com/drover-run/drover/store"
)

// The ledger processor crashed at each of its transactions in turn — before
// the commit and after it (the commit happened, the process never learned
// it) — and then replaced by a fresh processor, as a restarted process would
// run, publishes every transaction of every ledger exactly once, in ledger
// order per order. Each crash point runs on queues of its own, from the
// start.
func TestLedgerProcessorCrashAtEveryTransaction(t *testing.T) {
	t.Parallel()
	drivers(t, func(t *testing.T, d store.Driver) {
		ctx := ctxT(t)
		setup := newClient(t, d)
		// Four ledgers of one stream, orders interleaved; the expected
		// bodies per order, in ledger order.
		want := map[string][]string{}
		var ledgers []convoy.Message
		for l := 1; l <= 4; l++ {
			var txs []ledgerTx
			for i := 1; i <= 6; i++ {
				order := fmt.Sprintf("o%d", (i+l)%3)
				body := fmt.Sprintf(`{"ledger":%d,"n":%d}`, l, i)
				txs = append(txs, ledgerTx{ID: fmt.Sprintf("t%d", i), OrderID: order, Body: json.RawMessage(body)})
				want[order] = append(want[order], body)
			}
			ledgers = append(ledgers, convoy.Message{SessionID: "stream", Body: ledgerJSON(t, fmt.Sprintf("L%d", l), txs...)})
		}
		total := 0
		for _, b := range want {
			total += len(b)
		}
		published := func(target string) int {
			n := 0
			for order := range want {
				n += len(peek(t, setup, target, order))
			}
			return n
		}
		// A short lock: a survivor takes over a crashed processor's session soon.
		opts := convoy.ProcessorOptions{MaxSessions: 1, AbandonDelay: -1, LockDuration: 200 * time.Millisecond}
		run := func(drv store.Driver, id, src, dst string, until func() bool) {
			c := newClient(t, drv, withID(id))
			lp := must[*convoy.LedgerProcessor](t)(convoy.NewLedgerProcessor(c, convoy.LedgerOptions{
				LedgerQueue: src, TargetQueue: dst, Processor: opts}))
			if err := lp.Start(ctx); err != nil {
				t.Fatal(err)
			}
			waitFor(t, id, until)
			// The process dies here: no graceful stop.
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			_ = lp.Stop(cctx)
		}

		// A clean run tells how many transactions the work takes.
		counter := &testutil.CrashPoint{Driver: d}
		publish(t, setup, "ledgers-clean", ledgers...)
		run(counter, "clean", "ledgers-clean", "orders-clean", func() bool { return published("orders-clean") == total })
		steps := counter.Calls()
		if steps < 4 {
			t.Fatalf("a clean run took %d transactions; want at least one per ledger", steps)
		}

		for k := int64(1); k <= steps; k++ {
			for _, afterCommit := range []bool{false, true} {
				src, dst := fmt.Sprintf("ledgers-%d-%v", k, afterCommit), fmt.Sprintf("orders-%d-%v", k, afterCommit)
				publish(t, setup, src, ledgers...)
				// De-duplication off: exactly-once must come from the
				// transaction alone, not from the second line of defence.
				if err := setup.SetQueuePolicy(ctx, convoy.QueuePolicy{Name: dst, DedupeWindow: convoy.NoDedupe}); err != nil {
					t.Fatal(err)
				}
				cp := &testutil.CrashPoint{Driver: d, At: k, AfterCommit: afterCommit}
				run(cp, "crashing-"+src, src, dst, func() bool { return cp.Fired() || published(dst) == total })
				run(d, "survivor-"+src, src, dst, func() bool {
					s, err := setup.Session(ctx, src, "stream")
					return err == nil && s.Pending == 0
				})
				for order, bodies := range want {
					ms := peek(t, setup, dst, order)
					if len(ms) != len(bodies) {
						t.Errorf("crash at transaction %d (after commit: %v): order %s has %d messages, want %d",
							k, afterCommit, order, len(ms), len(bodies))
					}
					for i, m := range ms {
						if i < len(bodies) && string(m.Body) != bodies[i] {
							t.Errorf("crash at transaction %d (after commit: %v): order %s message %d is %s, want %s",
								k, afterCommit, order, i+1, m.Body, bodies[i])
						}
					}
				}
				if dl := must[[]*convoy.StoredMessage](t)(setup.DeadLetters(ctx, src, "", convoy.DeadLetterCursor{}, 0)); len(dl) != 0 {
					t.Errorf("crash at transaction %d: %d ledgers dead-lettered: %s", k, len(dl), dl[0].DeadReason)
				}
			}
		}
		t.Logf("crashed at each of the %d transactions of a clean run, before and after commit", steps)
	})
}
