package maintenance_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/drover-run/drover"
	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/clock"
	"github.com/drover-run/drover/internal/flow"
	"github.com/drover-run/drover/internal/maintenance"
	"github.com/drover-run/drover/internal/testutil"
	"github.com/drover-run/drover/store"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func drivers(t *testing.T) map[string]func(*testing.T) store.Driver {
	return map[string]func(*testing.T) store.Driver{
		"sqlite":   func(t *testing.T) store.Driver { return testutil.SQLite(t) },
		"postgres": func(t *testing.T) store.Driver { return testutil.Postgres(t) },
	}
}

// Dedupe expiry: only the leader of DedupeLease deletes, only entries
// past their window, all of them across batches.
func TestDedupeExpiry(t *testing.T) {
	for name, open := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			d := open(t)
			ctx := context.Background()
			clk := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
			if err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
				if err := x.QueuePut(ctx, &store.QueuePutParams{Queue: &dt.Queue{Name: "q", MaxDeliveryCount: 10, PoisonPolicy: dt.PoisonBlock,
					DedupeWindow: time.Minute, LockDuration: time.Minute, CreatedAt: clk.Now(), UpdatedAt: clk.Now()}}); err != nil {
					return err
				}
				var msgs []store.PublishMessage
				for i := range 40 {
					msgs = append(msgs, store.PublishMessage{Queue: "q", SessionID: "s", MessageID: fmt.Sprintf("m%d", i), Body: []byte("x")})
				}
				_, err := x.MessagePublishMany(ctx, &store.MessagePublishManyParams{Messages: msgs, Now: clk.Now()})
				return err
			}); err != nil {
				t.Fatal(err)
			}
			r := &maintenance.Runner{Driver: d, Clock: clk, Log: quiet, Lease: maintenance.DedupeLease, Instance: "m",
				LeaseTTL: time.Hour, Batch: 16}
			expire := maintenance.DedupeExpiry()
			if n, err := r.RunService(ctx, expire); err != nil || n != 0 {
				t.Fatalf("dedupe expiry without leading = %d, %v; want 0", n, err)
			}
			if _, err := r.Elector().TryAcquire(ctx); err != nil {
				t.Fatal(err)
			}
			if n, err := r.RunService(ctx, expire); err != nil || n != 0 {
				t.Fatalf("dedupe expiry within the window = %d, %v; want 0", n, err)
			}
			clk.Advance(time.Minute + time.Second)
			if n, err := r.RunService(ctx, expire); err != nil || n != 40 {
				t.Fatalf("dedupe expiry after the window = %d, %v; want 40 (in batches of %d)", n, err, r.Batch)
			}
		})
	}
}

// Request expiry: a request nobody answered is deleted once its
// CompleteBy is more than flow.RequestGrace past, by the leader only.
func TestRequestExpiry(t *testing.T) {
	d := testutil.SQLite(t)
	ctx := context.Background()
	clk := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	wf := []drover.Workflow{{Name: "w", Steps: []drover.Step{{Name: "a", Agent: "elsewhere", Timeout: time.Minute}}}}
	c, err := drover.New(drover.Config{Store: d, Clock: clk, Workflows: wf, ExternalAgents: []string{"elsewhere"},
		Roles: drover.Roles{Scheduler: true}, PollInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Submit(ctx, "w", []byte(`{}`), nil); err != nil {
		t.Fatal(err)
	}
	requests := func() int {
		var n int
		if err := d.DB().QueryRow(`SELECT count(*) FROM agent_requests`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	deadline := time.Now().Add(20 * time.Second)
	for requests() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the step's request was never stored")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	r := &maintenance.Runner{Driver: d, Clock: clk, Log: quiet, Lease: "supervisor", Instance: "m", LeaseTTL: time.Hour}
	expire := maintenance.RequestExpiry()
	clk.Advance(time.Minute + flow.RequestGrace + time.Second)
	if n, err := r.RunService(ctx, expire); err != nil || n != 0 || requests() != 1 {
		t.Fatalf("request expiry without leading = %d, %v (%d left); want 0", n, err, requests())
	}
	if _, err := r.Elector().TryAcquire(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := r.RunService(ctx, expire); err != nil || n != 1 || requests() != 0 {
		t.Fatalf("request expiry = %d, %v (%d left); want 1", n, err, requests())
	}
}
