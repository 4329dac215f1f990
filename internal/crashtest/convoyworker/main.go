package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/drover-run/drover/convoy"
	"github.com/drover-run/drover/store"
	"github.com/drover-run/drover/store/postgres"
)

// Queue names shared with the test.
const (
	LedgerQueue = "ledgers"
	OrderQueue  = "orders"
)

func main() {
	db := flag.String("db", "", "PostgreSQL URL")
	schema := flag.String("schema", "drover", "schema")
	id := flag.String("id", "", "instance ID")
	sessions := flag.Int("sessions", 16, "order sessions held at once")
	flag.Parse()
	if err := run(*db, *schema, *id, *sessions); err != nil {
		fmt.Fprintln(os.Stderr, "convoyworker:", err)
		os.Exit(1)
	}
}

func run(db, schema, id string, sessions int) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	drv, err := postgres.Open(ctx, db, postgres.Options{Schema: schema})
	if err != nil {
		return err
	}
	defer drv.Close()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c, err := convoy.New(convoy.Config{Store: drv, InstanceID: id, Logger: log, PollInterval: 50 * time.Millisecond})
	if err != nil {
		return err
	}
	fast := convoy.ProcessorOptions{IdleTimeout: 200 * time.Millisecond, AbandonDelay: 10 * time.Millisecond,
		MaxAbandonDelay: 50 * time.Millisecond,
		OnError:         func(err error) { log.Warn("processor", "err", err) }}
	lopts := fast
	lopts.MaxSessions = 1
	lp, err := convoy.NewLedgerProcessor(c, convoy.LedgerOptions{LedgerQueue: LedgerQueue, TargetQueue: OrderQueue, Processor: lopts})
	if err != nil {
		return err
	}

	effects := pgx.Identifier{schema, "effects"}.Sanitize()
	// The handler guards its own sessions: two handlers of one session at
	// once in this process is a violation it reports by exiting.
	var mu sync.Mutex
	busy := map[string]bool{}
	popts := fast
	popts.MaxSessions = sessions
	p, err := convoy.NewProcessorTx(c, OrderQueue, func(ctx context.Context, x store.Executor, m *convoy.ReceivedMessage) error {
		mu.Lock()
		if busy[m.SessionID] {
			mu.Unlock()
			fmt.Fprintf(os.Stderr, "VIOLATION: session %s handled twice at once in %s\n", m.SessionID, id)
			os.Exit(3)
		}
		busy[m.SessionID] = true
		mu.Unlock()
		defer func() { mu.Lock(); delete(busy, m.SessionID); mu.Unlock() }()
		// Some work, so kills land mid-round; now and then a failure, so
		// messages are abandoned and delivered again.
		time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
		if rand.IntN(20) == 0 {
			return fmt.Errorf("injected failure")
		}
		tx, err := postgres.TxOf(x)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO `+effects+` (order_id, body, worker) VALUES ($1, $2, $3)`, m.SessionID, m.Body, id)
		return err
	}, popts)
	if err != nil {
		return err
	}
	if err := lp.Start(ctx); err != nil {
		return err
	}
	if err := p.Start(ctx); err != nil {
		return err
	}
	fmt.Println("ready")
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = p.Stop(sctx)
	return lp.Stop(sctx)
}
