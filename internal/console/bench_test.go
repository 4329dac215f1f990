package console_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/flow"
	"github.com/drover-run/drover/internal/testutil"
	"github.com/drover-run/drover/store"
)

// benchFinal is how many final tasks BenchmarkPages seeds.
const benchFinal = 1_000_000

// seedFinal inserts n final tasks of the "pay" workflow straight into
// the store, 5,000 a transaction: IDs m-0000000…, finished every 180 ms
// up to now (the last hour holds 20,000 of them, more than the charts
// read), 1% each Error, Compensated and Cancelled, the rest Processed,
// one in ten with an ordering key of 10,000.
func seedFinal(b *testing.B, d store.Driver, n int) {
	b.Helper()
	ctx := context.Background()
	input := []byte(`{"amount":1}`)
	hash := flow.InputHash("pay", input)
	now := time.Now().UTC()
	const batch = 5000
	for first := 0; first < n; first += batch {
		tasks := make([]*dt.Task, 0, batch)
		var keys []string
		for i := first; i < min(first+batch, n); i++ {
			updated := now.Add(-time.Duration(n-i) * 180 * time.Millisecond)
			t := &dt.Task{ID: fmt.Sprintf("m-%07d", i), Workflow: "pay", Input: input, InputHash: hash,
				ProcessState: dt.Processed, StepCount: 1, CurrentStep: 1, FailureThreshold: 3, OnFailure: dt.PolicyError,
				AvailableAt: updated, CreatedAt: updated.Add(-time.Duration(i%1000) * time.Millisecond), UpdatedAt: updated}
			switch i % 100 {
			case 0:
				t.ProcessState, t.CurrentStep, t.LastError = dt.Error, 0, "card declined"
			case 1:
				t.ProcessState, t.CurrentStep = dt.Compensated, 0
			case 2:
				t.ProcessState, t.CurrentStep = dt.Cancelled, 0
			}
			if i%10 == 3 {
				t.OrderingKey = fmt.Sprintf("acct-%04d", i/10%10000)
				keys = append(keys, t.OrderingKey)
			}
			tasks = append(tasks, t)
		}
		err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
			seqs, err := x.OrderingKeyReserve(ctx, &store.OrderingKeyReserveParams{Keys: keys})
			if err != nil {
				return err
			}
			k := 0
			for _, t := range tasks {
				if t.OrderingKey != "" {
					t.OrderingSeq = seqs[k]
					k++
				}
			}
			_, err = x.TaskInsertMany(ctx, &store.TaskInsertManyParams{Tasks: tasks})
			return err
		})
		if err != nil {
			b.Fatalf("seeding tasks %d…: %v", first, err)
		}
	}
}

// BenchmarkPages renders each console page against a store holding a
// million final tasks, seeded directly: the time of one GET, through a
// real server on loopback, signed in as the operator. Run it with
//
//	DROVER_TEST_DATABASE_URL=... go test -run '^$' -bench Pages -benchtime 20x ./internal/console/
func BenchmarkPages(b *testing.B) {
	for _, drv := range []string{"sqlite", "postgres"} {
		b.Run(drv, func(b *testing.B) {
			var d store.Driver
			if drv == "sqlite" {
				d = testutil.SQLite(b)
			} else {
				d = testutil.Postgres(b)
			}
			start := time.Now()
			seedFinal(b, d, benchFinal)
			b.Logf("%s: seeded %d final tasks in %v", drv, benchFinal, time.Since(start).Round(time.Second))
			e := startServer(b, d, false)
			e.submit("bad-1", true)
			e.waitState("bad-1", "Error")
			e.api("POST", "/v1/queues/ledger/messages", `{"messages":[{"session_id":"acct-1","body":"x"}]}`, nil)
			c := browser(b)
			e.signIn(c, opToken)
			from := time.Now().UTC().Add(-30 * time.Hour).Format("2006-01-02T15:04")
			before := time.Now().UTC().Add(-29 * time.Hour).Format("2006-01-02T15:04")
			// The overview's store reads, one by one (in map order).
			r := d.Reader()
			for name, read := range map[string]func(context.Context) error{
				"read-counts": func(ctx context.Context) error {
					_, err := r.TaskCountByState(ctx, &store.TaskCountByStateParams{})
					return err
				},
				"read-active": func(ctx context.Context) error {
					_, err := r.TaskCountActive(ctx, &store.TaskCountActiveParams{})
					return err
				},
				"read-finished": func(ctx context.Context) error {
					_, err := r.TaskFinishedSince(ctx, &store.TaskFinishedSinceParams{Since: time.Now().Add(-time.Hour), Limit: 10000})
					return err
				},
				// The Workflows and Agents pages' (and the overview's remote
				// agents') counts, once per 10 s: the running and Error tasks.
				"read-running": func(ctx context.Context) error {
					_, err := r.TaskList(ctx, &store.TaskListParams{States: []dt.ProcessState{dt.Pending, dt.Processing, dt.Compensating}, Limit: 1001})
					return err
				},
				"read-error": func(ctx context.Context) error {
					_, err := r.TaskList(ctx, &store.TaskListParams{States: []dt.ProcessState{dt.Error}, Limit: 1001})
					return err
				},
			} {
				b.Run(name, func(b *testing.B) {
					for range b.N {
						if err := read(context.Background()); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
			for _, pg := range []struct{ name, path, want string }{
				{"overview", "/", `id="throughput"`},
				{"tasks", "/tasks", "m-0000048"},
				{"tasks-page-500000", "/tasks?after=m-0500000", "m-0500050"},
				{"tasks-error", "/tasks?state=Error", "m-0004800"},
				{"tasks-workflow-error-after", "/tasks?workflow=pay&state=Error&after=m-0900000", "m-0905000"},
				{"tasks-key", "/tasks?key=acct-0042", "m-0000423"},
				{"tasks-range", "/tasks?from=" + from + "&before=" + before, "Next page"},
				{"tasks-id-prefix", "/tasks?id=m-09999", "m-0999949"},
				{"task", "/tasks/bad-1", "card declined"},
				{"alerts", "/alerts", "bad-1"},
				{"workflows", "/workflows", "wf-pay"},
				{"agents", "/agents", "payments"},
				{"queues", "/queues", "ledger"},
			} {
				if p := e.get(c, pg.path); p.status != http.StatusOK || !strings.Contains(p.body, pg.want) {
					b.Fatalf("%s: %d, want %q in:\n%s", pg.path, p.status, pg.want, p.body)
				}
				b.Run(pg.name, func(b *testing.B) {
					for range b.N {
						if p := e.get(c, pg.path); p.status != http.StatusOK {
							b.Fatalf("%s: %d", pg.path, p.status)
						}
					}
				})
			}
		})
	}
}
