package democmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/drover-run/drover/convoy"
	"github.com/drover-run/drover/internal/clicore"
	"github.com/drover-run/drover/store"
)

// DemoLedgerSummary is what "drover demo ledger" reports; with --json it is
// the last line on stdout.
type DemoLedgerSummary struct {
	Ledgers               int `json:"ledgers"`
	Orders                int `json:"orders"`
	TransactionsPerLedger int `json:"transactions_per_ledger"`
	Consumers             int `json:"consumers"`

	// Messages is the number of transactions fanned out (one message each);
	// Sessions the number of order sessions they went to.
	Messages int `json:"messages"`
	Sessions int `json:"sessions"`
	// Consumed is the number of transactions whose completion committed
	// (read back from the store: each order's durable counter).
	Consumed int64 `json:"consumed"`
	// HandlerCalls counts every handler call: first deliveries,
	// redeliveries after injected failures, and calls whose settle was
	// rejected after a lock loss.
	HandlerCalls int64 `json:"handler_calls"`

	// The invariants: all must be 0.
	OrderViolations int64 `json:"order_violations"` // a transaction out of its order's sequence
	Duplicates      int64 `json:"duplicates"`       // a transaction delivered again after its completion committed
	Lost            int64 `json:"lost"`             // transactions never completed
	DeadLettered    int   `json:"dead_lettered"`

	// What was injected, and what it caused.
	InjectedFailures int64 `json:"injected_failures"` // handler errors: the message is abandoned and redelivered
	Abandoned        int64 `json:"abandoned"`
	InjectedStalls   int64 `json:"injected_stalls"` // a consumer froze past its lock duration
	LockLosses       int64 `json:"lock_losses"`     // sessions a consumer lost, the stalled ones' included
	RejectedSettles  int64 `json:"rejected_settles"`

	Seconds       float64 `json:"seconds"`
	MsgsPerSec    float64 `json:"msgs_per_sec"`
	FanOutSeconds float64 `json:"fan_out_seconds"` // until the last ledger was fanned out
	Seed          int64   `json:"seed"`
	LedgerQueue   string  `json:"ledger_queue"`
	OrderQueue    string  `json:"order_queue"`
	DB            string  `json:"db,omitempty"`
	Schema        string  `json:"schema,omitempty"`
}

type demoLedgerFlags struct {
	ledgers, orders, txPerLedger, consumers, maxSessions int
	failureRate                                          float64
	stalls                                               int
	lockDuration, timeout                                time.Duration
	seed                                                 int64
}

func (e *env) demoLedgerCmd() *cobra.Command {
	var f demoLedgerFlags
	cmd := &cobra.Command{
		Use:   "ledger",
		Short: "Fan ledgers out into per-order sessions and consume them in order, with failures and lock losses",
		Long: `demo ledger runs the Sequential Convoy pattern's ledger example end to end.

It publishes --ledgers ledger messages, in order, to one session of a ledger
queue. Each ledger holds --transactions transactions whose order IDs are
interleaved at random among --orders orders (o-1 … o-M; every order gets at
least one); every transaction carries its order ID and a per-order counter
n = 1, 2, 3 …, and each order's last transaction is its end of sequence.

A ledger processor (convoy.LedgerProcessor) walks each ledger one transaction
at a time and publishes it to the order queue with session ID = its order ID,
in the same store transaction that completes the ledger message. --consumers
competing consumers (processors, each with its own instance ID, holding up to
--max-sessions order sessions at once) consume the order sessions, while the
demo injects faults:

  * failures: a handler call fails with probability --failure-rate; the
    message is abandoned and delivered again after a short back-off;
  * lock losses: --stalls times during the run, a consumer freezes (its
    handler and its store connection stop, as in a long GC pause or a
    network partition) for three times the lock duration (--lock-duration),
    so its session locks expire and other consumers take the sessions over;
    when it wakes, its settles must be rejected.

Each handler verifies its transaction against the session state, which it
updates in the same transaction that completes the message: the counter must
be exactly one more than the last completed one (order_violations counts
those that are not; duplicates those delivered again after their completion
committed). At the end every order's durable counter must equal its number of
transactions (lost counts the difference). The exit code is 1 unless
order_violations, duplicates, lost and dead_lettered are all 0.

The database is a fresh temporary SQLite file, deleted afterwards, unless --db
is given explicitly (the DROVER_DATABASE_URL variable is not used here). With
an explicit --db (SQLite or PostgreSQL, in the schema --schema) the store is
migrated if needed and kept, and the queues get a random prefix, which the
summary names so "drover queue" can inspect them.`,
		Example: `  drover demo ledger
  drover demo ledger --ledgers 50 --orders 500 --consumers 8 --json
  drover demo ledger --ledgers 20 --orders 100 --failure-rate 0.2 --stalls 5
  drover demo ledger --db postgres://postgres@127.0.0.1:5432/postgres --schema drover_demo --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case f.ledgers <= 0:
				return clicore.Usagef("--ledgers must be positive, got %d", f.ledgers)
			case f.orders <= 0:
				return clicore.Usagef("--orders must be positive, got %d", f.orders)
			case f.consumers <= 0 || f.consumers > 256:
				return clicore.Usagef("--consumers must be 1-256, got %d", f.consumers)
			case f.txPerLedger < 0:
				return clicore.Usagef("--transactions must not be negative (0: as many as --orders), got %d", f.txPerLedger)
			case f.maxSessions < 0 || f.maxSessions > 100000:
				return clicore.Usagef("--max-sessions must be 1-100000 (0: 2 × orders / consumers), got %d", f.maxSessions)
			case math.IsNaN(f.failureRate) || f.failureRate < 0 || f.failureRate > 0.5:
				return clicore.Usagef("--failure-rate must be between 0 and 0.5, got %v", f.failureRate)
			case f.stalls < 0:
				return clicore.Usagef("--stalls must not be negative, got %d", f.stalls)
			case f.stalls > 0 && f.consumers < 2:
				return clicore.Usagef("--stalls needs at least 2 consumers: another one takes the stalled one's sessions over")
			case f.lockDuration < 50*time.Millisecond || f.lockDuration > time.Minute:
				return clicore.Usagef("--lock-duration must be between 50ms and 1m, got %s", f.lockDuration)
			case f.timeout < 0:
				return clicore.Usagef("--timeout must not be negative, got %s", f.timeout)
			}
			if f.txPerLedger == 0 {
				f.txPerLedger = f.orders
			}
			if total := f.ledgers * f.txPerLedger; total < f.orders {
				return clicore.Usagef("--ledgers × --transactions is %d: at least --orders (%d), so every order gets a transaction", total, f.orders)
			} else if total > 10_000_000 {
				return clicore.Usagef("--ledgers × --transactions is %d: at most 10000000", total)
			}
			if f.txPerLedger > 100000 {
				return clicore.Usagef("--transactions must be at most 100000 per ledger, got %d", f.txPerLedger)
			}
			if f.maxSessions == 0 {
				f.maxSessions = max(1, (2*f.orders+f.consumers-1)/f.consumers)
			}
			if f.timeout == 0 {
				f.timeout = time.Minute + time.Duration(f.ledgers*f.txPerLedger)*time.Millisecond + time.Duration(f.stalls)*4*f.lockDuration
			}
			var explicit *clicore.DBTarget
			if cmd.Flags().Changed("db") {
				t, err := e.Target()
				if err != nil {
					return err
				}
				explicit = &t
			}
			return e.runDemoLedger(cmd.Context(), f, explicit)
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&f.ledgers, "ledgers", 50, "number of ledger messages")
	fl.IntVar(&f.orders, "orders", 500, "number of orders (order sessions)")
	fl.IntVar(&f.txPerLedger, "transactions", 0, "transactions per ledger (default: --orders)")
	fl.IntVar(&f.consumers, "consumers", 8, "competing consumers of the order sessions")
	fl.IntVar(&f.maxSessions, "max-sessions", 0, "order sessions one consumer holds at once (default: 2 × orders / consumers)")
	fl.Float64Var(&f.failureRate, "failure-rate", 0.05, "probability that a handler call fails (the message is redelivered)")
	fl.IntVar(&f.stalls, "stalls", 3, "times a consumer freezes past its lock duration, losing its sessions")
	fl.DurationVar(&f.lockDuration, "lock-duration", 500*time.Millisecond, "session lock duration of the order queue")
	fl.Int64Var(&f.seed, "seed", 1, "seed of the ledgers' contents and of the injected failures")
	fl.DurationVar(&f.timeout, "timeout", 0, "give up if the run is not done by then (default: 1m + 1ms per transaction)")
	return cmd
}

// ledgerTxBody is the body of one transaction (one order message).
type ledgerTxBody struct {
	Order  string `json:"order_id"`
	N      int    `json:"n"` // the order's counter: 1, 2, 3 …
	Ledger string `json:"ledger"`
	Amount int    `json:"amount"`
}

// stallDriver is a store driver whose transactions can be frozen for a
// while: a consumer that stops reaching the store (a long GC pause, a
// network partition) while its locks run out.
type stallDriver struct {
	store.Driver
	mu    sync.Mutex
	until time.Time
}

func (d *stallDriver) stalled() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return time.Now().Before(d.until)
}

func (d *stallDriver) stall(dur time.Duration) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if time.Now().Before(d.until) {
		return false // already stalled
	}
	d.until = time.Now().Add(dur)
	return true
}

func (d *stallDriver) InTx(ctx context.Context, fn func(context.Context, store.Executor) error) error {
	for {
		d.mu.Lock()
		w := time.Until(d.until)
		d.mu.Unlock()
		if w <= 0 {
			break
		}
		t := time.NewTimer(w)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
	return d.Driver.InTx(ctx, fn)
}

// stallListenDriver is a stallDriver over a driver with notifications.
type stallListenDriver struct{ *stallDriver }

func (d stallListenDriver) Listen(ctx context.Context, wake func(string)) error {
	return d.Driver.(store.Listener).Listen(ctx, wake)
}

func wrapStall(d store.Driver) (*stallDriver, store.Driver) {
	s := &stallDriver{Driver: d}
	if _, ok := d.(store.Listener); ok {
		return s, stallListenDriver{s}
	}
	return s, s
}

// chance maps (seed, session, seq, delivery) to [0, 1): the injected
// failures do not depend on which consumer gets a message.
func chance(seed int64, session string, seq int64, delivery int) float64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%s/%d/%d", seed, session, seq, delivery)
	// FNV alone mixes its high bits poorly; finish with splitmix64's mixer.
	x := h.Sum64()
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	x ^= x >> 31
	return float64(x>>11) / (1 << 53)
}

var errInjected = errors.New("injected failure")

func (e *env) runDemoLedger(ctx context.Context, f demoLedgerFlags, explicit *clicore.DBTarget) error {
	start := time.Now()
	log := e.Logger(slog.LevelError)
	sync := "normal" // a temporary file, thrown away afterwards
	if explicit != nil {
		sync = ""
	}
	drv, cleanup, err := e.OpenScratch(ctx, explicit, false, sync, "demo")
	if err != nil {
		return err
	}
	defer cleanup()

	prefix := "demo-"
	if explicit != nil {
		prefix = "demo-" + clicore.RandomHex(4) + "-"
	}
	ledgerQ, orderQ := prefix+"ledgers", prefix+"orders"

	// The ledgers: every order at least once, the rest at random, shuffled,
	// cut into ledgers; each order's counter follows ledger order.
	total := f.ledgers * f.txPerLedger
	rng := rand.New(rand.NewPCG(uint64(f.seed), 0x1ed6e7))
	seq := make([]int, total)
	for i := range seq {
		if i < f.orders {
			seq[i] = i
		} else {
			seq[i] = rng.IntN(f.orders)
		}
	}
	rng.Shuffle(total, func(i, j int) { seq[i], seq[j] = seq[j], seq[i] })
	perOrder := make([]int, f.orders)
	for _, o := range seq {
		perOrder[o]++
	}
	orderID := func(o int) string { return "o-" + strconv.Itoa(o+1) }
	counter := make([]int, f.orders)
	type jtx struct {
		ID            string       `json:"id"`
		OrderID       string       `json:"order_id"`
		Body          ledgerTxBody `json:"body"`
		EndOfSequence bool         `json:"end_of_sequence,omitempty"`
	}
	ledgers := make([]convoy.Message, f.ledgers)
	for l := range f.ledgers {
		id := "L-" + strconv.Itoa(l+1)
		txs := make([]jtx, f.txPerLedger)
		for t := range txs {
			o := seq[l*f.txPerLedger+t]
			counter[o]++
			txs[t] = jtx{ID: "t-" + strconv.Itoa(t+1), OrderID: orderID(o),
				Body:          ledgerTxBody{Order: orderID(o), N: counter[o], Ledger: id, Amount: 1 + rng.IntN(10000)},
				EndOfSequence: counter[o] == perOrder[o]}
		}
		body, err := json.Marshal(struct {
			LedgerID     string `json:"ledger_id"`
			Transactions []jtx  `json:"transactions"`
		}{id, txs})
		if err != nil {
			return err
		}
		ledgers[l] = convoy.Message{SessionID: "ledger", Body: body, MessageID: id}
	}

	// The queues: a short lock on the order queue, so stalls lose locks
	// quickly; enough deliveries that injected failures never exhaust them.
	admin, err := convoy.New(convoy.Config{Store: drv.Driver, InstanceID: "demo-admin", Logger: log})
	if err != nil {
		return err
	}
	if err := admin.SetQueuePolicy(ctx, convoy.QueuePolicy{Name: orderQ, LockDuration: f.lockDuration, MaxDeliveryCount: 100}); err != nil {
		return drv.StoreErr(err)
	}
	if err := admin.SetQueuePolicy(ctx, convoy.QueuePolicy{Name: ledgerQ}); err != nil {
		return drv.StoreErr(err)
	}

	// The consumers of the order sessions.
	var (
		calls, violations, duplicates, failures, stalls, rejected atomic.Int64
		nextStall                                                 atomic.Int64
	)
	stallDur := 3 * f.lockDuration
	stallAt := func(k int64) int64 { return int64(total) * (k + 1) / int64(f.stalls+1) }
	procs := make([]*convoy.Processor, f.consumers)
	for i := range procs {
		sd, wd := wrapStall(drv.Driver)
		c, err := convoy.New(convoy.Config{Store: wd, InstanceID: fmt.Sprintf("%sconsumer-%d", prefix, i+1), PollInterval: 50 * time.Millisecond, Logger: log})
		if err != nil {
			return err
		}
		h := func(ctx context.Context, m *convoy.ReceivedMessage) error {
			n := calls.Add(1)
			var tx ledgerTxBody
			if err := json.Unmarshal(m.Body, &tx); err != nil {
				violations.Add(1)
				return convoy.DeadLetterError(fmt.Errorf("not a transaction: %w", err))
			}
			prev := 0
			if st := m.SessionState(); st != nil {
				prev, _ = strconv.Atoi(string(st))
			}
			switch {
			case tx.N <= prev:
				duplicates.Add(1)
			case tx.N != prev+1 || int64(tx.N) != m.Seq || tx.Order != m.SessionID:
				violations.Add(1)
			}
			m.SetSessionState([]byte(strconv.Itoa(tx.N)))
			// A stall: this consumer freezes past its lock duration.
			if k := nextStall.Load(); k < int64(f.stalls) && n >= stallAt(k) && !sd.stalled() && nextStall.CompareAndSwap(k, k+1) && sd.stall(stallDur) {
				stalls.Add(1)
				t := time.NewTimer(stallDur)
				defer t.Stop()
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-t.C:
				}
				return nil // its settle is rejected: the session has moved on
			}
			if f.failureRate > 0 && chance(f.seed, m.SessionID, m.Seq, m.DeliveryCount) < f.failureRate {
				failures.Add(1)
				return errInjected
			}
			return nil
		}
		procs[i], err = convoy.NewProcessor(c, orderQ, h, convoy.ProcessorOptions{
			MaxSessions: f.maxSessions, AbandonDelay: 20 * time.Millisecond, MaxAbandonDelay: 200 * time.Millisecond,
			IdleTimeout: 200 * time.Millisecond,
			OnError: func(err error) {
				if errors.Is(err, convoy.ErrLockLost) && strings.HasPrefix(err.Error(), "settle ") {
					rejected.Add(1)
				}
			},
		})
		if err != nil {
			return err
		}
	}

	// The ledger processor.
	lc, err := convoy.New(convoy.Config{Store: drv.Driver, InstanceID: prefix + "ledger-processor", PollInterval: 50 * time.Millisecond, Logger: log})
	if err != nil {
		return err
	}
	lp, err := convoy.NewLedgerProcessor(lc, convoy.LedgerOptions{LedgerQueue: ledgerQ, TargetQueue: orderQ})
	if err != nil {
		return err
	}

	all := append([]*convoy.Processor{lp.Processor}, procs...)
	started := 0
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second+stallDur)
		defer cancel()
		for _, p := range all[:started] {
			_ = p.Stop(sctx)
		}
	}()
	for _, p := range all {
		if err := p.Start(ctx); err != nil {
			return err
		}
		started++
	}
	for i := 0; i < len(ledgers); i += 10 {
		if _, err := admin.Publish(ctx, ledgerQ, ledgers[i:min(i+10, len(ledgers))]...); err != nil {
			return drv.StoreErr(fmt.Errorf("publish ledgers: %w", err))
		}
	}
	fmt.Fprintf(e.Stderr, "demo: published %d ledgers (%d transactions for %d orders) to queue %s\n", f.ledgers, total, f.orders, ledgerQ)

	// Wait until every order's durable counter is complete.
	deadline := time.NewTimer(f.timeout)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var fanOut time.Duration
	lastReport := time.Now()
	for {
		completed := int64(0)
		for _, p := range procs {
			completed += p.Stats().Completed
		}
		if fanOut == 0 && lp.Stats().Completed+lp.Stats().DeadLettered >= int64(f.ledgers) {
			fanOut = time.Since(start)
		}
		if completed >= int64(total) {
			// Confirm with the store.
			st, err := e.orderStates(ctx, admin, orderQ, f.orders)
			if err != nil {
				return drv.StoreErr(err)
			}
			ok := true
			for o, n := range st {
				ok = ok && n >= perOrder[o]
			}
			if ok {
				break
			}
		}
		if time.Since(lastReport) >= time.Second {
			lastReport = time.Now()
			fmt.Fprintf(e.Stderr, "demo: %5.1fs  completed %d/%d  handler calls %d, failures %d, stalls %d, rejected settles %d\n",
				time.Since(start).Seconds(), completed, total, calls.Load(), failures.Load(), stalls.Load(), rejected.Load())
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("demo interrupted: %d of %d transactions completed", completed, total)
		case <-deadline.C:
			return fmt.Errorf("demo timed out after %s (--timeout): %d of %d transactions completed", f.timeout, completed, total)
		case <-tick.C:
		}
	}
	elapsed := time.Since(start)
	if fanOut == 0 {
		fanOut = elapsed
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second+stallDur)
	for _, p := range all {
		_ = p.Stop(sctx)
	}
	cancel()
	started = 0

	// The outcome, from the store.
	st, err := e.orderStates(ctx, admin, orderQ, f.orders)
	if err != nil {
		return drv.StoreErr(err)
	}
	s := &DemoLedgerSummary{
		Ledgers: f.ledgers, Orders: f.orders, TransactionsPerLedger: f.txPerLedger, Consumers: f.consumers,
		Messages: total, Sessions: f.orders, HandlerCalls: calls.Load(),
		OrderViolations: violations.Load(), Duplicates: duplicates.Load(),
		InjectedFailures: failures.Load(), InjectedStalls: stalls.Load(), RejectedSettles: rejected.Load(),
		Seed: f.seed, LedgerQueue: ledgerQ, OrderQueue: orderQ,
	}
	for o, n := range st {
		s.Consumed += int64(min(n, perOrder[o]))
		if n > perOrder[o] {
			s.OrderViolations++
		}
		s.Lost += int64(max(0, perOrder[o]-n))
	}
	for _, p := range procs {
		ps := p.Stats()
		s.LockLosses += ps.LockLost
		s.Abandoned += ps.Abandoned
	}
	for _, q := range []string{ledgerQ, orderQ} {
		dl, err := admin.DeadLetters(ctx, q, "", convoy.DeadLetterCursor{}, 10000)
		if err != nil {
			return drv.StoreErr(err)
		}
		s.DeadLettered += len(dl)
	}
	s.Seconds = math.Round(elapsed.Seconds()*1000) / 1000
	s.FanOutSeconds = math.Round(fanOut.Seconds()*1000) / 1000
	s.MsgsPerSec = math.Round(float64(s.Consumed) / elapsed.Seconds())
	if explicit != nil {
		s.DB = drv.Label
		if explicit.Postgres {
			s.Schema = explicit.Schema
		}
	}
	if e.JSON {
		if err := clicore.WriteJSON(e.Stdout, s); err != nil {
			return err
		}
	} else {
		printDemoLedger(e, s)
	}
	var problems []string
	if s.OrderViolations > 0 {
		problems = append(problems, fmt.Sprintf("%d order violations", s.OrderViolations))
	}
	if s.Duplicates > 0 {
		problems = append(problems, fmt.Sprintf("%d transactions delivered again after their completion", s.Duplicates))
	}
	if s.Lost > 0 {
		problems = append(problems, fmt.Sprintf("%d transactions lost", s.Lost))
	}
	if s.DeadLettered > 0 {
		problems = append(problems, fmt.Sprintf("%d messages dead-lettered", s.DeadLettered))
	}
	if len(problems) > 0 {
		return &clicore.ExitError{Code: clicore.ExitFailure, Msg: "demo failed: " + strings.Join(problems, "; ")}
	}
	return nil
}

// orderStates reads every order session's durable counter (its state: the
// counter of the last completed transaction).
func (e *env) orderStates(ctx context.Context, c *convoy.Client, queue string, orders int) ([]int, error) {
	out := make([]int, orders)
	after := ""
	for {
		ss, err := c.Sessions(ctx, queue, after, 1000)
		if err != nil {
			return nil, err
		}
		for _, s := range ss {
			o, err := strconv.Atoi(strings.TrimPrefix(s.ID, "o-"))
			if err != nil || o < 1 || o > orders {
				continue
			}
			if s.State != nil {
				out[o-1], _ = strconv.Atoi(string(s.State))
			}
		}
		if len(ss) < 1000 {
			return out, nil
		}
		after = ss[len(ss)-1].ID
	}
}

func printDemoLedger(e *env, s *DemoLedgerSummary) {
	w := e.Stdout
	fmt.Fprintf(w, "drover demo ledger: %d ledgers × %d transactions for %d orders, %d consumers, in %.1fs (%.0f msgs/s; fanned out in %.1fs)\n",
		s.Ledgers, s.TransactionsPerLedger, s.Orders, s.Consumers, s.Seconds, s.MsgsPerSec, s.FanOutSeconds)
	fmt.Fprintf(w, "  consumed:      %d of %d transactions in %d order sessions (%d handler calls)\n", s.Consumed, s.Messages, s.Sessions, s.HandlerCalls)
	fmt.Fprintf(w, "  injected:      %d handler failures (%d abandoned and redelivered), %d consumer stalls\n", s.InjectedFailures, s.Abandoned, s.InjectedStalls)
	fmt.Fprintf(w, "  lock losses:   %d sessions lost by a consumer, %d settles rejected\n", s.LockLosses, s.RejectedSettles)
	fmt.Fprintf(w, "  verified:      %d order violations, %d duplicates after completion, %d lost, %d dead-lettered\n",
		s.OrderViolations, s.Duplicates, s.Lost, s.DeadLettered)
	if s.DB != "" {
		db := "--db " + s.DB
		if s.Schema != "" {
			db = fmt.Sprintf("--db '%s' --schema %s", s.DB, s.Schema)
		}
		fmt.Fprintf(w, "  inspect:       drover queue sessions %s --queue %s; drover queue dlq %s --queue %s\n", db, s.OrderQueue, db, s.OrderQueue)
	}
}
