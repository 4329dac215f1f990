package convoy_test

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/drover-run/drover/convoy"
	"github.com/drover-run/drover/internal/clock"
	"github.com/drover-run/drover/store"
	"github.com/drover-run/drover/store/postgres"
	"github.com/drover-run/drover/store/sqlite"
)

// dedupeEntries counts the stored de-duplication entries.
func dedupeEntries(t *testing.T, d store.Driver) int {
	t.Helper()
	var n int
	var err error
	switch d := d.(type) {
	case *sqlite.Driver:
		err = d.DB().QueryRow(`SELECT count(*) FROM queue_dedupe`).Scan(&n)
	case *postgres.Driver:
		err = d.Pool().QueryRow(context.Background(), `SELECT count(*) FROM `+d.Schema()+`.queue_dedupe`).Scan(&n)
	default:
		t.Fatalf("no count for %T", d)
	}
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// An application that uses only session queues (no drover.Client, so no
// supervisor) still gets its dedupe entries expired: its processors run
// the expiry while they run.
func TestProcessorExpiresDedupeEntries(t *testing.T) {
	drivers(t, func(t *testing.T, d store.Driver) {
		ctx := context.Background()
		clk := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
		c, err := convoy.New(convoy.Config{Store: d, Clock: clk, PollInterval: 10 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.SetQueuePolicy(ctx, convoy.QueuePolicy{Name: "q", DedupeWindow: time.Minute}); err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"m1", "m2", "m3"} {
			if _, err := c.Publish(ctx, "q", convoy.Message{SessionID: "s", MessageID: id, Body: []byte("x")}); err != nil {
				t.Fatal(err)
			}
		}
		if n := dedupeEntries(t, d); n != 3 {
			t.Fatalf("%d dedupe entries after publishing, want 3", n)
		}
		p, err := convoy.NewProcessor(c, "q", func(ctx context.Context, m *convoy.ReceivedMessage) error { return nil }, convoy.ProcessorOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = p.Stop(ctx) }()
		clk.Advance(2 * time.Minute)
		deadline := time.Now().Add(20 * time.Second)
		for dedupeEntries(t, d) != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%d dedupe entries left after their window", dedupeEntries(t, d))
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}
