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
			if got, want := bodies(t, c, "out", id), fmt.Sprintf("%s:1 %s:2 %s:3", id, id, id); got != want {
				t.Errorf("out/%s: %s, want %s (each once, in order)", id, got, want)
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

// bodies is the bodies of a session's messages, in order, space-separated.
func bodies(t *testing.T, c *convoy.Client, queue, session string) string {
	t.Helper()
	var out []string
	for _, m := range peek(t, c, queue, session) {
		out = append(out, string(m.Body))
	}
	return strings.Join(out, " ")
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
			if got := bodies(t, c, "orders", order); got != want {
				t.Errorf("order %s: %s, want %s", order, got, want)
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

// conflictCounter is a store that counts the transactions the database
// aborted for a deadlock or a serialization failure (store.ErrConflict),
// which a processor otherwise redoes without a trace.
type conflictCounter struct {
	store.Driver
	conflicts *atomic.Int64
}

func (d conflictCounter) InTx(ctx context.Context, fn func(ctx context.Context, x store.Executor) error) error {
	err := d.Driver.InTx(ctx, fn)
	if errors.Is(err, store.ErrConflict) {
		d.conflicts.Add(1)
	}
	return err
}

// conflictCounterListener is a conflictCounter of a store that notifies.
type conflictCounterListener struct {
	conflictCounter
	l store.Listener
}

func (d conflictCounterListener) Listen(ctx context.Context, wake func(string)) error {
	return d.l.Listen(ctx, wake)
}

func countConflicts(d store.Driver) (store.Driver, *atomic.Int64) {
	n := new(atomic.Int64)
	c := conflictCounter{d, n}
	if l, ok := d.(store.Listener); ok {
		return conflictCounterListener{c, l}, n
	}
	return c, n
}

// Ledger processors in several processes race over ledgers whose
// transactions go to the same orders, new ones all the time, each round
// fanning several ledgers out in one transaction. No round is ever aborted
// for a deadlock, and every order gets each of its transactions once, in
// ledger order.
func TestLedgerProcessorsRaceOverNewOrders(t *testing.T) {
	t.Parallel()
	drivers(t, func(t *testing.T, d store.Driver) {
		const (
			processors = 4
			customers  = 16 // ledger sessions
			ledgers    = 30 // per customer
			orders     = 6  // orders per wave: the l-th ledgers of all customers
		)
		c := newClient(t, d)
		// want[order][customer]: the bodies of the customer's transactions
		// to the order, in ledger order (the only order defined: customers'
		// ledgers are processed in parallel).
		want := map[string]map[string][]string{}
		for l := range ledgers {
			for cu := range customers {
				var txs []ledgerTx
				for i := range 3 {
					order := fmt.Sprintf("w%d-o%d", l, (cu*5+i*(1+cu%3))%orders)
					body := fmt.Sprintf(`"c%02d-l%d-t%d"`, cu, l, i)
					txs = append(txs, ledgerTx{ID: fmt.Sprintf("t%d", i), OrderID: order, Body: json.RawMessage(body)})
					if want[order] == nil {
						want[order] = map[string][]string{}
					}
					cid := fmt.Sprintf("c%02d", cu)
					want[order][cid] = append(want[order][cid], body)
				}
				publish(t, c, "ledgers", convoy.Message{SessionID: fmt.Sprintf("c%02d", cu),
					Body: ledgerJSON(t, fmt.Sprintf("c%02d-L%d", cu, l), txs...)})
			}
		}
		var (
			lps       []*convoy.LedgerProcessor
			conflicts []*atomic.Int64
			errs      errorLog
		)
		for i := range processors {
			di, n := countConflicts(secondDriver(t, d))
			conflicts = append(conflicts, n)
			ci := newClient(t, di, withID(fmt.Sprintf("p%d", i)))
			lp := must[*convoy.LedgerProcessor](t)(convoy.NewLedgerProcessor(ci, convoy.LedgerOptions{
				LedgerQueue: "ledgers", TargetQueue: "orders",
				Processor: convoy.ProcessorOptions{MaxSessions: customers / processors, OnError: errs.add},
			}))
			lps = append(lps, lp)
		}
		for _, lp := range lps {
			startProcessor(t, lp.Processor)
		}
		waitForWithin(t, "every ledger completed", time.Minute, func() bool {
			var n int64
			for _, lp := range lps {
				n += lp.Stats().Completed
			}
			return n == customers*ledgers
		})
		var total int64
		for _, n := range conflicts {
			total += n.Load()
		}
		if total > 0 {
			t.Errorf("%d rounds aborted for a deadlock or a serialization failure", total)
		}
		if e := errs.all(); len(e) > 0 {
			t.Errorf("%d processor errors, the first: %v", len(e), e[0])
		}
		for order, byCustomer := range want {
			got := map[string][]string{}
			for _, m := range peek(t, c, "orders", order) {
				got[string(m.Body)[1:4]] = append(got[string(m.Body)[1:4]], string(m.Body))
			}
			for cu, bodies := range byCustomer {
				if strings.Join(got[cu], " ") != strings.Join(bodies, " ") {
					t.Errorf("order %s, customer %s:\n got  %s\n want %s", order, cu, strings.Join(got[cu], " "), strings.Join(bodies, " "))
				}
			}
		}
	})
}

// Ledgers of one round are published together; when one of them targets a
// closed order, the round is redone ledger by ledger: that ledger alone is
// dead-lettered, the others are published once, and AfterPublish sees each
// ledger's own results.
func TestLedgerProcessorClosedOrderInARound(t *testing.T) {
	t.Parallel()
	drivers(t, func(t *testing.T, d store.Driver) {
		c := newClient(t, d)
		ctx := ctxT(t)
		publish(t, c, "orders", convoy.Message{SessionID: "o1", Body: []byte(`"end"`), EndOfSequence: true})
		ledgers := map[string][]ledgerTx{
			"c1": {{ID: "t1", OrderID: "o2"}, {ID: "t2", OrderID: "o3"}},
			"c2": {{ID: "t1", OrderID: "o4"}, {ID: "t2", OrderID: "o1"}}, // o1 is closed
			"c3": {{ID: "t1", OrderID: "o5"}},
		}
		for cu, txs := range ledgers {
			for i := range txs {
				txs[i].Body = json.RawMessage(fmt.Sprintf(`"%s-%s"`, cu, txs[i].ID))
			}
			publish(t, c, "ledgers", convoy.Message{SessionID: cu, Body: ledgerJSON(t, "L-"+cu, txs...)})
		}
		var (
			mu    sync.Mutex
			after = map[string]string{} // ledger ID: the sessions and seqs AfterPublish saw, last call
		)
		// All three sessions are accepted, and their ledgers handled, in
		// the processor's first round (MaxSessions is larger).
		lp := must[*convoy.LedgerProcessor](t)(convoy.NewLedgerProcessor(c, convoy.LedgerOptions{
			LedgerQueue: "ledgers", TargetQueue: "orders",
			AfterPublish: func(ctx context.Context, x store.Executor, l *convoy.Ledger, pub []convoy.Published) error {
				var s []string
				for _, p := range pub {
					s = append(s, fmt.Sprintf("%s:%d", p.SessionID, p.Seq))
				}
				mu.Lock()
				after[l.ID] = strings.Join(s, " ")
				mu.Unlock()
				return nil
			},
			Processor: convoy.ProcessorOptions{AbandonDelay: -1},
		}))
		startProcessor(t, lp.Processor)
		waitFor(t, "every ledger settled", func() bool { st := lp.Stats(); return st.Completed+st.DeadLettered == 3 })
		if st := lp.Stats(); st.Completed != 2 || st.DeadLettered != 1 {
			t.Errorf("stats %+v: want 2 ledgers completed, 1 dead-lettered", st)
		}
		dl := must[[]*convoy.StoredMessage](t)(c.DeadLetters(ctx, "ledgers", "", convoy.DeadLetterCursor{}, 0))
		if len(dl) != 1 || dl[0].SessionID != "c2" || !strings.Contains(dl[0].DeadReason, `ledger "L-c2"`) ||
			!strings.Contains(dl[0].DeadReason, convoy.ErrSessionClosed.Error()) {
			t.Fatalf("dead letters %+v: want the ledger of c2, for the closed session", dl)
		}
		for order, want := range map[string]string{"o1": `"end"`, "o2": `"c1-t1"`, "o3": `"c1-t2"`, "o4": "", "o5": `"c3-t1"`} {
			if got := bodies(t, c, "orders", order); got != want {
				t.Errorf("order %s: %s, want %s", order, got, want)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if after["L-c1"] != "o2:1 o3:1" || after["L-c3"] != "o5:1" {
			t.Errorf("AfterPublish saw %v", after)
		}
	})
}

// A Decode that panics on one ledger of a round: the round is redone ledger
// by ledger, so only that ledger fails (and is dead-lettered once its
// deliveries run out); the others are published.
func TestLedgerProcessorPanicInARound(t *testing.T) {
	t.Parallel()
	drivers(t, func(t *testing.T, d store.Driver) {
		c := newClient(t, d)
		ctx := ctxT(t)
		if err := c.SetQueuePolicy(ctx, convoy.QueuePolicy{Name: "ledgers", MaxDeliveryCount: 2}); err != nil {
			t.Fatal(err)
		}
		for _, cu := range []string{"c1", "c2", "c3"} {
			publish(t, c, "ledgers", convoy.Message{SessionID: cu,
				Body: ledgerJSON(t, "L-"+cu, ledgerTx{ID: "t1", OrderID: "o-" + cu, Body: json.RawMessage(`1`)})})
		}
		lp := must[*convoy.LedgerProcessor](t)(convoy.NewLedgerProcessor(c, convoy.LedgerOptions{
			LedgerQueue: "ledgers", TargetQueue: "orders",
			Decode: func(body []byte) (*convoy.Ledger, error) {
				if strings.Contains(string(body), "L-c2") {
					panic("cannot decode this one")
				}
				return convoy.DecodeJSONLedger(body)
			},
			Processor: convoy.ProcessorOptions{AbandonDelay: -1},
		}))
		startProcessor(t, lp.Processor)
		waitFor(t, "every ledger settled", func() bool { st := lp.Stats(); return st.Completed+st.DeadLettered == 3 })
		dl := must[[]*convoy.StoredMessage](t)(c.DeadLetters(ctx, "ledgers", "", convoy.DeadLetterCursor{}, 0))
		if len(dl) != 1 || dl[0].SessionID != "c2" || !strings.Contains(dl[0].DeadReason, "max delivery count") {
			var got []string
			for _, m := range dl {
				got = append(got, m.SessionID+": "+m.DeadReason)
			}
			t.Fatalf("dead letters %q: want only the ledger of c2, whose Decode panicked", got)
		}
		for order, want := range map[string]int{"o-c1": 1, "o-c2": 0, "o-c3": 1} {
			if n := len(peek(t, c, "orders", order)); n != want {
				t.Errorf("order %s: %d messages, want %d", order, n, want)
			}
		}
	})
}
