package convoy_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drover-run/drover/convoy"
	"github.com/drover-run/drover/store"
)

// A HandlerTx's writes commit with the completion; a failing one is rolled
// back (its writes with it) and its message abandoned, while the other
// handlers of the round run again and commit once.
func TestProcessorTxCommitsWritesWithTheCompletion(t *testing.T) {
	t.Parallel()
	drivers(t, func(t *testing.T, d store.Driver) {
		c := newClient(t, d)
		const sessions = 10
		for i := range sessions {
			publish(t, c, "in", msgs(fmt.Sprintf("s%d", i), 3)...)
		}
		var calls atomic.Int64
		p := must[*convoy.Processor](t)(convoy.NewProcessorTx(c, "in", func(ctx context.Context, x store.Executor, m *convoy.ReceivedMessage) error {
			calls.Add(1)
			if _, err := c.PublishWith(ctx, x, "out", convoy.Message{SessionID: m.SessionID, Body: m.Body}); err != nil {
				return err
			}
			if m.SessionID == "s3" && m.Seq == 2 && m.DeliveryCount < 3 {
				return errors.New("fails after its write") // the write must roll back
			}
			m.SetSessionState(fmt.Appendf(nil, "%d", m.Seq))
			return nil
		}, convoy.ProcessorOptions{AbandonDelay: -1}))
		startProcessor(t, p)
		waitFor(t, "every message", func() bool { return p.Stats().Completed == sessions*3 })
		for i := range sessions {
			id := fmt.Sprintf("s%d", i)
			out := peek(t, c, "out", id)
			var bodies []string
			for _, m := range out {
				bodies = append(bodies, string(m.Body))
			}
			if want := fmt.Sprintf("%s:1 %s:2 %s:3", id, id, id); strings.Join(bodies, " ") != want {
				t.Errorf("out/%s: %s, want %s (each once, in order)", id, strings.Join(bodies, " "), want)
			}
			if st := session(t, c, "in", id).State; string(st) != "3" {
				t.Errorf("in/%s state %q", id, st)
			}
		}
		if st := p.Stats(); st.Abandoned != 2 {
			t.Fatalf("stats %+v: want 2 abandons", st)
		}
		if calls.Load() <= sessions*3+2 {
			t.Logf("%d handler calls", calls.Load())
		}
	})
}

type ledgerTx struct {
	ID      string          `json:"id,omitempty"`
	OrderID string          `json:"order_id,omitempty"`
	Body    json.RawMessage `json:"body,omitempty"`
}

func ledgerJSON(t *testing.T, id string, txs ...ledgerTx) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{"ledger_id": id, "transactions": txs})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The ledger processor fans ledgers out to per-order sessions in ledger
// order, each transaction once (also when a ledger is published twice);
// malformed ledgers are dead-lettered with a reason naming the problem.
func TestLedgerProcessorFansOutInLedgerOrder(t *testing.T) {
	t.Parallel()
	drivers(t, func(t *testing.T, d store.Driver) {
		c := newClient(t, d)
		ctx := ctxT(t)
		// Three ledgers of one customer (one session: processed in order),
		// orders interleaved.
		var want = map[string][]string{}
		for l := 1; l <= 3; l++ {
			var txs []ledgerTx
			for i := 1; i <= 12; i++ {
				order := fmt.Sprintf("o%d", (i*l)%5)
				body := fmt.Sprintf(`{"ledger":%d,"n":%d}`, l, i)
				txs = append(txs, ledgerTx{ID: fmt.Sprintf("t%d", i), OrderID: order, Body: json.RawMessage(body)})
				want[order] = append(want[order], body)
			}
			publish(t, c, "ledgers", convoy.Message{SessionID: "customer-1", Body: ledgerJSON(t, fmt.Sprintf("L%d", l), txs...)})
		}
		// The same ledger again, from another source: deduplicated.
		publish(t, c, "ledgers", convoy.Message{SessionID: "customer-2",
			Body: ledgerJSON(t, "L1", ledgerTx{ID: "t1", OrderID: "o1", Body: json.RawMessage(`{"ledger":1,"n":1}`)})})
		// Malformed ledgers, each in a session of its own (block policy).
		bad := map[string][]byte{
			"bad-json":    []byte(`{"ledger_id": `),
			"no-id":       []byte(`{"transactions": []}`),
			"no-order":    ledgerJSON(t, "L9", ledgerTx{ID: "t1", OrderID: "o1"}, ledgerTx{ID: "t2"}),
			"dup-tx":      ledgerJSON(t, "L8", ledgerTx{ID: "t1", OrderID: "o1"}, ledgerTx{ID: "t1", OrderID: "o2"}),
			"bad-session": ledgerJSON(t, "L7", ledgerTx{ID: "t1", OrderID: "o\x01"}),
		}
		reasons := map[string]string{
			"bad-json":    "not a JSON ledger",
			"no-id":       "ledger_id is missing",
			"no-order":    `transaction 1 (id "t2"): order_id is missing`,
			"dup-tx":      `transaction 1: id "t1" is also the id of transaction 0`,
			"bad-session": "SessionID",
		}
		for s, b := range bad {
			publish(t, c, "ledgers", convoy.Message{SessionID: s, Body: b})
		}
		lp := must[*convoy.LedgerProcessor](t)(convoy.NewLedgerProcessor(c, convoy.LedgerOptions{LedgerQueue: "ledgers", TargetQueue: "orders"}))
		startProcessor(t, lp.Processor)
		waitFor(t, "every ledger settled", func() bool { st := lp.Stats(); return st.Completed == 4 && st.DeadLettered == 5 })
		for order, bodies := range want {
			ms := peek(t, c, "orders", order)
			var got []string
			for i, m := range ms {
				got = append(got, string(m.Body))
				if m.Seq != int64(i+1) || !strings.HasPrefix(m.MessageID, "L") || !strings.Contains(m.MessageID, "/t") {
					t.Errorf("order %s message %d: seq %d message ID %q", order, i, m.Seq, m.MessageID)
				}
			}
			if strings.Join(got, " ") != strings.Join(bodies, " ") {
				t.Errorf("order %s:\n got  %s\n want %s", order, strings.Join(got, " "), strings.Join(bodies, " "))
			}
		}
		dl := must[[]*convoy.StoredMessage](t)(c.DeadLetters(ctx, "ledgers", "", convoy.DeadLetterCursor{}, 0))
		if len(dl) != len(bad) {
			t.Fatalf("%d dead letters, want %d", len(dl), len(bad))
		}
		for _, m := range dl {
			if !strings.Contains(m.DeadReason, reasons[m.SessionID]) || !strings.HasPrefix(m.DeadReason, "malformed ledger") {
				t.Errorf("%s: reason %q, want it to mention %q", m.SessionID, m.DeadReason, reasons[m.SessionID])
			}
		}
	})
}

// A failure inside the ledger's transaction publishes nothing and leaves the
// ledger message in place; once the failure is gone every transaction is
// published exactly once.
func TestLedgerProcessorFailureInTheTransaction(t *testing.T) {
	t.Parallel()
	drivers(t, func(t *testing.T, d store.Driver) {
		c := newClient(t, d)
		ctx := ctxT(t)
		if err := c.SetQueuePolicy(ctx, convoy.QueuePolicy{Name: "ledgers", MaxDeliveryCount: 1000}); err != nil {
			t.Fatal(err)
		}
		body := ledgerJSON(t, "L1", ledgerTx{ID: "a", OrderID: "o1", Body: json.RawMessage(`1`)},
			ledgerTx{ID: "b", OrderID: "o2", Body: json.RawMessage(`2`)}, ledgerTx{ID: "c", OrderID: "o1", Body: json.RawMessage(`3`)})
		publish(t, c, "ledgers", convoy.Message{SessionID: "c1", Body: body})
		var (
			fail      atomic.Bool
			mu        sync.Mutex
			published [][]convoy.Published
		)
		fail.Store(true)
		lp := must[*convoy.LedgerProcessor](t)(convoy.NewLedgerProcessor(c, convoy.LedgerOptions{
			LedgerQueue: "ledgers", TargetQueue: "orders",
			AfterPublish: func(ctx context.Context, x store.Executor, l *convoy.Ledger, pub []convoy.Published) error {
				if fail.Load() {
					return errors.New("forced failure after publishing")
				}
				mu.Lock()
				published = append(published, pub)
				mu.Unlock()
				return nil
			},
			Processor: convoy.ProcessorOptions{AbandonDelay: time.Millisecond},
		}))
		startProcessor(t, lp.Processor)
		waitFor(t, "three failed attempts", func() bool {
			ms := peek(t, c, "ledgers", "c1")
			return len(ms) == 1 && ms[0].DeliveryCount >= 3
		})
		if ss := must[[]*convoy.Session](t)(c.Sessions(ctx, "orders", "", 0)); len(ss) != 0 {
			t.Fatalf("failed attempts published to %d order sessions", len(ss))
		}
		fail.Store(false)
		waitFor(t, "the ledger completed", func() bool { return lp.Stats().Completed == 1 })
		if ms := peek(t, c, "ledgers", "c1"); len(ms) != 0 {
			t.Fatalf("ledger message still there: %v", ms)
		}
		for order, want := range map[string]string{"o1": "1 3", "o2": "2"} {
			var got []string
			for _, m := range peek(t, c, "orders", order) {
				got = append(got, string(m.Body))
			}
			if strings.Join(got, " ") != want {
				t.Errorf("order %s: %v, want %s", order, got, want)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if len(published) != 1 || len(published[0]) != 3 || published[0][0].Duplicate {
			t.Fatalf("published %+v", published)
		}
	})
}

func TestDecodeJSONLedger(t *testing.T) {
	t.Parallel()
	l, err := convoy.DecodeJSONLedger([]byte(`{"ledger_id":"L","extra":1,"transactions":[{"id":"t","order_id":"o","body":{"x":[1,2]},"end_of_sequence":true},{"id":"u","order_id":"p"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if l.ID != "L" || len(l.Transactions) != 2 || string(l.Transactions[0].Body) != `{"x":[1,2]}` || !l.Transactions[0].EndOfSequence || l.Transactions[1].Body != nil {
		t.Fatalf("%+v", l)
	}
	for in, want := range map[string]string{
		``:                                      "not a JSON ledger",
		`[]`:                                    "not a JSON ledger",
		`{"ledger_id":""}`:                      "ledger_id is missing",
		`{"ledger_id":"L"}`:                     "transactions is missing",
		`{"ledger_id":"L","transactions":[]} x`: "after the ledger",
	} {
		if _, err := convoy.DecodeJSONLedger([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want %q", in, err, want)
		}
	}
}

func TestNewLedgerProcessorValidates(t *testing.T) {
	t.Parallel()
	c := newClient(t, newTestSQLite(t))
	for _, o := range []convoy.LedgerOptions{{}, {LedgerQueue: "l"}, {LedgerQueue: "l", TargetQueue: "l"}, {LedgerQueue: "l", TargetQueue: "a b"}} {
		if _, err := convoy.NewLedgerProcessor(c, o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}
