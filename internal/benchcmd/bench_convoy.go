package benchcmd

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime/pprof"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/drover-run/drover/convoy"
	"github.com/drover-run/drover/internal/clicore"
	"github.com/drover-run/drover/store"
)

// BenchConvoyResult is what "drover bench convoy" reports; with --json it is
// the last line on stdout.
//
// Seconds and MsgsPerSec measure the consume burn-down: the messages are
// published first, then the processors start and consume them all.
type BenchConvoyResult struct {
	Mode              string  `json:"mode"` // "convoy"
	Driver            string  `json:"driver"`
	Synchronous       string  `json:"synchronous,omitempty"` // SQLite only
	Sessions          int     `json:"sessions"`
	Messages          int     `json:"messages"`
	Consumers         int     `json:"consumers"`
	MaxSessions       int     `json:"max_sessions"` // per consumer
	Handler           string  `json:"handler"`      // "go" or "tx"
	Seconds           float64 `json:"seconds"`
	MsgsPerSec        float64 `json:"msgs_per_sec"`
	PublishSeconds    float64 `json:"publish_seconds"`
	PublishMsgsPerSec float64 `json:"publish_msgs_per_sec"`
	EndToEndPerSec    float64 `json:"end_to_end_msgs_per_sec"`
	Consumed          int64   `json:"consumed"`
	OrderViolations   int64   `json:"order_violations"`
	Lost              int64   `json:"lost"`
	Rounds            int64   `json:"rounds"`
	DB                string  `json:"db,omitempty"`
	Schema            string  `json:"schema,omitempty"`
}

type benchConvoyFlags struct {
	sessions    int
	messages    int
	consumers   int
	maxSessions int
	batch       int
	bodyBytes   int
	handler     string
	synchronous string
	cpuprofile  string
	timeout     time.Duration
}

// benchQueue is the queue "drover bench convoy" publishes to.
const benchQueue = "bench-convoy"

// defaultBenchMaxSessions caps the sessions one benchmark consumer holds.
const defaultBenchMaxSessions = 256

func (e *env) benchConvoyCmd() *cobra.Command {
	var f benchConvoyFlags
	cmd := &cobra.Command{
		Use:   "convoy",
		Short: "Measure session-queue throughput: M messages over S sessions, burned down by processors",
		Long: `bench convoy measures the Sequential Convoy session queues (package convoy).

It publishes --messages messages in total, spread round-robin over --sessions
sessions (message i goes to session i mod S), --batch messages per publish
transaction; then it starts --consumers processors (convoy.Processor, each
holding up to --max-sessions sessions at once) and measures the time until
every message is consumed. The handler does nothing but check that each
session's messages arrive in sequence order, exactly once (order_violations
must be 0). Afterwards the store is checked: no message may be left pending
(lost must be 0).

msgs_per_sec is the consume burn-down rate; publish_msgs_per_sec the
publishing before it; end_to_end_msgs_per_sec both together. Progress goes
to stderr every half second (not with --json): messages published, then
consumed.

--handler go (the default) runs each message's handler on its own goroutine
(convoy.NewProcessor); --handler tx runs it inside the processor's store
transaction that completes it (convoy.NewProcessorTx).

Within one session messages are processed one at a time, so the throughput
comes from the number of sessions: with few sessions it is bounded by
sessions × (one store round trip per message).

The database is a fresh temporary SQLite file, deleted afterwards, unless --db
is given explicitly (the DROVER_DATABASE_URL variable is not used here). On
PostgreSQL (--db postgres://…) the store is the schema --schema, migrated if
needed and kept; without --schema a temporary schema drover_bench_<random> is
used and dropped afterwards. Each run publishes to the queue "bench-convoy"
under sessions named after the run, so runs on a kept store do not mix.`,
		Example: `  drover bench convoy --sessions 1000 --messages 100000 --json
  drover bench convoy --sessions 10 --messages 10000 --handler tx
  drover bench convoy --db postgres://postgres@127.0.0.1:5432/postgres --schema bench_convoy --sessions 1000 --messages 100000 --json
  drover bench convoy --messages 100000 --cpuprofile cpu.out && go tool pprof -top cpu.out`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case f.sessions <= 0:
				return clicore.Usagef("--sessions must be positive, got %d", f.sessions)
			case f.messages <= 0:
				return clicore.Usagef("--messages must be positive, got %d", f.messages)
			case f.messages > 100_000_000:
				return clicore.Usagef("--messages must be at most 100000000, got %d", f.messages)
			case f.consumers <= 0:
				return clicore.Usagef("--consumers must be positive, got %d", f.consumers)
			case f.maxSessions < 0 || f.maxSessions > 100000:
				return clicore.Usagef("--max-sessions must be 1-100000 (0: the default, 256 or --sessions / --consumers if fewer), got %d", f.maxSessions)
			case f.batch <= 0 || f.batch > 10000:
				return clicore.Usagef("--batch must be 1-10000, got %d", f.batch)
			case f.bodyBytes < 0 || f.bodyBytes > convoy.DefaultMaxBodyBytes:
				return clicore.Usagef("--body-bytes must be 0-%d, got %d", convoy.DefaultMaxBodyBytes, f.bodyBytes)
			case f.handler != "go" && f.handler != "tx":
				return clicore.Usagef("--handler %q: want go or tx", f.handler)
			case f.timeout < 0:
				return clicore.Usagef("--timeout must not be negative, got %s", f.timeout)
			}
			if f.maxSessions == 0 {
				// 256 at most: rounds over more sessions write more pages
				// per commit and cost more per message (see
				// docs/benchmarks.md); more sessions are served in turn.
				f.maxSessions = min(defaultBenchMaxSessions, (f.sessions+f.consumers-1)/f.consumers)
			}
			if f.timeout == 0 {
				f.timeout = time.Minute + time.Duration(f.messages)*time.Millisecond
			}
			explicit, tempSchema, err := e.benchTarget(cmd, &f.synchronous)
			if err != nil {
				return err
			}
			return e.runBenchConvoy(cmd.Context(), f, explicit, tempSchema)
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&f.sessions, "sessions", 1000, "number of sessions")
	fl.IntVar(&f.messages, "messages", 100000, "number of messages in total, round-robin over the sessions")
	fl.IntVar(&f.consumers, "consumers", 1, "concurrent consumers (processors, each with its own client and instance ID)")
	fl.IntVar(&f.maxSessions, "max-sessions", 0, "sessions one consumer holds at once (default: 256, or --sessions / --consumers if fewer)")
	fl.IntVar(&f.batch, "batch", 1000, "messages per publish transaction")
	fl.IntVar(&f.bodyBytes, "body-bytes", 16, "size of each message body")
	fl.StringVar(&f.handler, "handler", "go", "go: handler on its own goroutine (NewProcessor); tx: inside the completing transaction (NewProcessorTx)")
	fl.StringVar(&f.synchronous, "synchronous", "full", "SQLite synchronous mode: full or normal; SQLite only")
	fl.StringVar(&f.cpuprofile, "cpuprofile", "", "write a CPU profile of the run to this file")
	fl.DurationVar(&f.timeout, "timeout", 0, "give up after this long (default: 1m + 1ms per message)")
	return cmd
}

func (e *env) runBenchConvoy(ctx context.Context, f benchConvoyFlags, explicit *clicore.DBTarget, tempSchema bool) error {
	drv, cleanup, err := e.OpenScratch(ctx, explicit, tempSchema, f.synchronous, "bench")
	if err != nil {
		return err
	}
	defer cleanup()
	log := e.Logger(slog.LevelWarn)

	pub, err := convoy.New(convoy.Config{Store: drv.Driver, InstanceID: "bench-publisher", Logger: log})
	if err != nil {
		return err
	}
	// Sessions are named after the run, so runs on a kept store do not mix.
	prefix := "b" + clicore.RandomHex(3) + "-"
	sessionID := func(i int) string { return prefix + strconv.Itoa(i) }
	body := make([]byte, f.bodyBytes)
	for i := range body {
		body[i] = 'x'
	}

	start := time.Now()
	var pubCount, consumed atomic.Int64
	var consuming atomic.Bool
	stopProgress := e.Progress("bench convoy", start, func() string {
		if !consuming.Load() {
			return fmt.Sprintf("published %d/%d", pubCount.Load(), f.messages)
		}
		return fmt.Sprintf("consumed %d/%d", consumed.Load(), f.messages)
	})
	defer stopProgress()
	msgs := make([]convoy.Message, 0, f.batch)
	for i := 0; i < f.messages; i += f.batch {
		msgs = msgs[:0]
		for j := i; j < min(i+f.batch, f.messages); j++ {
			msgs = append(msgs, convoy.Message{SessionID: sessionID(j % f.sessions), Body: body})
		}
		if _, err := pub.Publish(ctx, benchQueue, msgs...); err != nil {
			return drv.StoreErr(fmt.Errorf("publish: %w", err))
		}
		pubCount.Add(int64(len(msgs)))
	}
	published := time.Now()
	consuming.Store(true)

	// The handler checks each session's order: its messages must arrive
	// with seq 1, 2, 3 … exactly once. One session is never handled by two
	// handlers at once, so per-session slots need no lock beyond atomics.
	nSess := min(f.sessions, f.messages)
	last := make([]atomic.Int64, nSess)
	var violations atomic.Int64
	check := func(m *convoy.ReceivedMessage) {
		i, err := strconv.Atoi(m.SessionID[len(prefix):])
		if err != nil || i < 0 || i >= nSess {
			violations.Add(1)
			return
		}
		if prev := last[i].Swap(m.Seq); m.Seq != prev+1 {
			violations.Add(1)
		}
		consumed.Add(1)
	}
	done := make(chan struct{})
	var closed atomic.Bool
	finish := func() {
		if consumed.Load() >= int64(f.messages) && closed.CompareAndSwap(false, true) {
			close(done)
		}
	}

	if f.cpuprofile != "" {
		pf, err := os.Create(f.cpuprofile)
		if err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer pf.Close()
		if err := pprof.StartCPUProfile(pf); err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}

	opts := convoy.ProcessorOptions{MaxSessions: f.maxSessions}
	procs := make([]*convoy.Processor, f.consumers)
	for i := range procs {
		c, err := convoy.New(convoy.Config{Store: drv.Driver, InstanceID: fmt.Sprintf("bench-consumer-%d", i+1), Logger: log})
		if err != nil {
			return err
		}
		if f.handler == "tx" {
			procs[i], err = convoy.NewProcessorTx(c, benchQueue, func(ctx context.Context, x store.Executor, m *convoy.ReceivedMessage) error {
				check(m)
				finish()
				return nil
			}, opts)
		} else {
			procs[i], err = convoy.NewProcessor(c, benchQueue, func(ctx context.Context, m *convoy.ReceivedMessage) error {
				check(m)
				finish()
				return nil
			}, opts)
		}
		if err != nil {
			return err
		}
	}
	runStart := time.Now()
	for _, p := range procs {
		if err := p.Start(ctx); err != nil {
			return err
		}
	}
	stopAll := func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		for _, p := range procs {
			_ = p.Stop(sctx)
		}
	}
	deadline := time.NewTimer(f.timeout)
	defer deadline.Stop()
	select {
	case <-done:
	case <-ctx.Done():
		stopAll()
		return fmt.Errorf("bench interrupted: %d of %d messages consumed", consumed.Load(), f.messages)
	case <-deadline.C:
		stopAll()
		return fmt.Errorf("bench timed out after %s (--timeout): %d of %d messages consumed", f.timeout, consumed.Load(), f.messages)
	}
	end := time.Now()
	stopProgress()
	stopAll()
	pprof.StopCPUProfile()

	// What the store says: nothing of this run may be left pending.
	var rounds int64
	for _, p := range procs {
		rounds += p.Stats().Rounds
	}
	pending, total, err := sessionTotals(ctx, drv.Reader(), benchQueue, prefix)
	if err != nil {
		return drv.StoreErr(err)
	}

	round := func(x float64) float64 { return math.Round(x*1000) / 1000 }
	run := end.Sub(runStart).Seconds()
	pubS := published.Sub(start).Seconds()
	r := BenchConvoyResult{
		Mode: "convoy", Driver: drv.DriverName(), Synchronous: f.synchronous,
		Sessions: f.sessions, Messages: f.messages, Consumers: f.consumers, MaxSessions: f.maxSessions, Handler: f.handler,
		Seconds: round(run), MsgsPerSec: math.Round(float64(f.messages) / run),
		PublishSeconds: round(pubS), PublishMsgsPerSec: math.Round(float64(f.messages) / pubS),
		EndToEndPerSec: math.Round(float64(f.messages) / (run + pubS)),
		Consumed:       consumed.Load(), OrderViolations: violations.Load(), Lost: pending + max(0, int64(f.messages)-total),
		Rounds: rounds,
	}
	if explicit != nil {
		r.DB = drv.Label
	}
	if drv.Target.Postgres {
		r.Schema = drv.Target.Schema
	}
	if e.JSON {
		if err := clicore.WriteJSON(e.Stdout, r); err != nil {
			return err
		}
	} else {
		where := "sqlite synchronous=" + f.synchronous
		if drv.Target.Postgres {
			where = "postgres schema " + drv.Target.Schema
		}
		fmt.Fprintf(e.Stdout, "drover bench convoy: %d messages over %d sessions consumed in %.3fs: %.0f msgs/s "+
			"(published in %.3fs: %.0f/s; end to end %.0f msgs/s; %d consumers × %d sessions, handler %s, %d rounds; %s); "+
			"order violations %d, lost %d\n",
			r.Messages, r.Sessions, r.Seconds, r.MsgsPerSec, r.PublishSeconds, r.PublishMsgsPerSec, r.EndToEndPerSec,
			r.Consumers, r.MaxSessions, r.Handler, r.Rounds, where, r.OrderViolations, r.Lost)
	}
	if r.OrderViolations > 0 || r.Lost > 0 || r.Consumed != int64(f.messages) {
		return &clicore.ExitError{Code: clicore.ExitFailure, Msg: fmt.Sprintf("bench convoy failed: %d order violations, %d messages lost, %d consumed of %d",
			r.OrderViolations, r.Lost, r.Consumed, f.messages)}
	}
	return nil
}

// sessionTotals sums, over the sessions of queue whose ID starts with
// prefix, the messages still pending and the sequence numbers assigned.
func sessionTotals(ctx context.Context, x store.Executor, queue, prefix string) (pending, published int64, err error) {
	after := prefix
	for {
		ss, err := x.SessionList(ctx, &store.SessionListParams{Queue: queue, AfterID: after, Limit: 1000})
		if err != nil {
			return 0, 0, err
		}
		for _, s := range ss {
			if len(s.ID) < len(prefix) || s.ID[:len(prefix)] != prefix {
				return pending, published, nil
			}
			pending += int64(s.Pending)
			published += s.NextSeq
		}
		if len(ss) < 1000 {
			return pending, published, nil
		}
		after = ss[len(ss)-1].ID
	}
}
