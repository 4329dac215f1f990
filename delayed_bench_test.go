package drover_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/drover-run/drover"
	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/flow"
	"github.com/drover-run/drover/internal/testutil"
	"github.com/drover-run/drover/store"
)

// benchDelayed is how many delayed tasks BenchmarkDelayedTasks leaves
// waiting.
const benchDelayed = 1_000_000

// BenchmarkDelayedTasks measures what a million delayed tasks cost while
// they wait, and how late the due ones start, beside a store with none
// waiting. It seeds a million tasks due in an hour straight into a fresh
// store (5,000 a transaction; waiting=0: none), starts a
// client with the default poll interval, submits 1,000 tasks due 10
// seconds later, and reports: the client process's CPU over the idle
// seconds before they are due (at least 3, after the submits) (cpu-ms/s: milliseconds of CPU per second of wall
// time, user + system), the store time of one claim with the million
// waiting (claim-ms, the median of 21), and how late after its due time each of the 1,000
// reached its agent (late-p50-ms, late-p99-ms, late-max-ms). Run it with
//
//	DROVER_TEST_DATABASE_URL=... go test -run '^$' -bench DelayedTasks -benchtime 1x .
func BenchmarkDelayedTasks(b *testing.B) {
	for _, name := range []string{"sqlite", "postgres"} {
		for _, waiting := range []int{0, benchDelayed} {
			b.Run(fmt.Sprintf("%s/waiting=%d", name, waiting), func(b *testing.B) {
				for range b.N {
					var d store.Driver
					if name == "sqlite" {
						d = testutil.SQLite(b)
					} else {
						d = testutil.Postgres(b)
					}
					benchDelayedTasks(b, d, waiting)
				}
			})
		}
	}
}

func benchDelayedTasks(b *testing.B, d store.Driver, waiting int) {
	ctx := context.Background()
	start := time.Now()
	seedDelayed(b, d, waiting, time.Now().Add(time.Hour))
	b.Logf("seeded %d delayed tasks in %v", waiting, time.Since(start).Round(time.Second))

	// Claims with the million waiting, as a scheduler's poll makes them:
	// the median of 21.
	var claims []time.Duration
	for range 21 {
		t0 := time.Now()
		err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
			got, err := x.TaskClaim(ctx, &store.TaskClaimParams{Instance: "bench", Now: time.Now(), Limit: 256})
			if len(got) > 0 {
				return fmt.Errorf("claimed %d tasks not due yet", len(got))
			}
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
		claims = append(claims, time.Since(t0))
	}
	slices.Sort(claims)
	claimTime := claims[len(claims)/2]

	var (
		mu   sync.Mutex
		late []time.Duration
		due  = map[string]time.Time{}
		all  = make(chan struct{})
	)
	const n = 1000
	c, err := drover.New(drover.Config{Store: d,
		Workflows: []drover.Workflow{{Name: "remind", Steps: []drover.Step{{Name: "send", Agent: "mailer"}}}},
		Agents: []drover.Agent{{Name: "mailer", Concurrency: n, Func: func(_ context.Context, r *drover.AgentRequest) ([]byte, error) {
			now := time.Now()
			mu.Lock()
			defer mu.Unlock()
			late = append(late, now.Sub(due[r.TaskID]))
			if len(late) == n {
				close(all)
			}
			return nil, nil
		}}},
	})
	if err != nil {
		b.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = c.Stop(context.Background()) }()
	at := time.Now().Add(10 * time.Second)
	mu.Lock()
	for i := range n {
		id := fmt.Sprintf("due-%04d", i)
		due[id] = at
		if _, err := c.Submit(ctx, "remind", nil, &drover.SubmitOptions{ID: id, RunAt: at}); err != nil {
			b.Fatal(err)
		}
	}
	mu.Unlock()
	// The idle window: after the submits' work and the seeding's garbage,
	// and before the due time.
	runtime.GC()
	time.Sleep(500 * time.Millisecond)
	cpu0, wall0 := cpuTime(b), time.Now()
	time.Sleep(time.Until(at.Add(-500 * time.Millisecond)))
	cpu, wall := cpuTime(b)-cpu0, time.Since(wall0)
	if wall < 3*time.Second {
		b.Fatalf("the submits took until %s before the due time: no idle window to measure", time.Until(at))
	}
	select {
	case <-all:
	case <-time.After(time.Minute):
		b.Fatalf("a minute after their time %d of %d due tasks had started", len(late), n)
	}
	slices.Sort(late)
	b.ReportMetric(float64(cpu.Microseconds())/1000/wall.Seconds(), "cpu-ms/s")
	b.ReportMetric(float64(claimTime.Microseconds())/1000, "claim-ms")
	b.ReportMetric(float64(late[n/2].Microseconds())/1000, "late-p50-ms")
	b.ReportMetric(float64(late[n*99/100].Microseconds())/1000, "late-p99-ms")
	b.ReportMetric(float64(late[n-1].Microseconds())/1000, "late-max-ms")
}

// cpuTime is the CPU time this process used so far, user and system.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// seedDelayed inserts n Pending tasks of the "remind" workflow due at at,
// 5,000 a transaction, without steps: they stay waiting for the whole
// benchmark, which only needs them in the claimable index.
func seedDelayed(b *testing.B, d store.Driver, n int, at time.Time) {
	b.Helper()
	ctx := context.Background()
	input := []byte(`null`)
	hash := flow.InputHash("remind", input)
	now := time.Now().UTC()
	at = at.UTC().Truncate(time.Microsecond)
	const batch = 5000
	for first := 0; first < n; first += batch {
		tasks := make([]*dt.Task, 0, batch)
		for i := first; i < min(first+batch, n); i++ {
			tasks = append(tasks, &dt.Task{ID: fmt.Sprintf("w-%07d", i), Workflow: "remind", Input: input, InputHash: hash,
				ProcessState: dt.Pending, StepCount: 1, FailureThreshold: 3, OnFailure: dt.PolicyError,
				AvailableAt: at.Add(time.Duration(i) * time.Microsecond), CreatedAt: now, UpdatedAt: now})
		}
		err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
			_, err := x.TaskInsertMany(ctx, &store.TaskInsertManyParams{Tasks: tasks})
			return err
		})
		if err != nil {
			b.Fatalf("seeding tasks %d…: %v", first, err)
		}
	}
}
