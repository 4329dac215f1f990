package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// dbosResult is one DBOS Transact burn-down.
type dbosResult struct {
	Workflows         int     `json:"workflows"`
	Steps             int     `json:"steps"`
	Seconds           float64 `json:"seconds"`            // Launch .. N workflows SUCCESS in the database
	WorkflowsPerSec   float64 `json:"workflows_per_sec"`  // Workflows / Seconds
	InsertSeconds     float64 `json:"insert_seconds"`     // enqueueing the N workflows, before Launch
	CPUSeconds        float64 `json:"cpu_seconds"`        // this process's CPU during Seconds
	Version           string  `json:"version"`            // the dbos-transact-golang module version
	WorkerConcurrency int     `json:"worker_concurrency"` // the queue's per-process concurrency
	PollingMS         float64 `json:"polling_ms"`         // the queue's base polling interval
	WALBytes          int64   `json:"wal_bytes"`          // WAL from the enqueueing to the end of the burn-down
}

type dbosBenchConfig struct {
	URL, Schema       string
	Workflows, Steps  int
	Warmup            int
	WorkerConcurrency int
	Polling           time.Duration
	Timeout           time.Duration
	Logger            *slog.Logger
	Log               func(format string, args ...any)
	BeforeStart       func(context.Context) error
	WALPosition       func(context.Context) (int64, error) // see riverBenchConfig
}

const (
	dbosQueue        = "compare"
	dbosWorkflowName = "compare-noop"
	dbosEnqueuers    = 32 // concurrent enqueues: DBOS enqueues one workflow per transaction
)

func dbosVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			if m.Path == "github.com/dbos-inc/dbos-transact-golang" {
				return m.Version
			}
		}
	}
	return "unknown"
}

// dbosBurnDown enqueues the N workflows of K no-op steps on a DBOS queue
// with the runtime not launched (untimed), then launches it and times
// until N workflows are SUCCESS in DBOS's workflow_status table, polled
// every millisecond with one indexed count. A warm-up burns down
// cfg.Warmup workflows first with its own DBOS context on the same schema.
func dbosBurnDown(ctx context.Context, cfg dbosBenchConfig) (dbosResult, error) {
	res := dbosResult{Workflows: cfg.Workflows, Steps: cfg.Steps, Version: dbosVersion(),
		WorkerConcurrency: cfg.WorkerConcurrency, PollingMS: float64(cfg.Polling) / float64(time.Millisecond)}
	noop := func(context.Context) (int, error) { return 0, nil }
	workflow := func(ctx dbos.Context, _ int) (int, error) {
		for range cfg.Steps {
			if _, err := dbos.RunAsStep(ctx, noop); err != nil {
				return 0, err
			}
		}
		return 0, nil
	}
	newContext := func() (dbos.Context, error) {
		c, err := dbos.NewContext(ctx, dbos.Config{DatabaseURL: withAppName(cfg.URL, "dbos-compare"), AppName: "compare",
			DatabaseSchema: cfg.Schema, Logger: cfg.Logger})
		if err != nil {
			return nil, fmt.Errorf("dbos: %w", err)
		}
		dbos.RegisterWorkflow(c, workflow, dbos.WithWorkflowName(dbosWorkflowName))
		if _, err := dbos.RegisterQueue(c, dbosQueue, dbos.WithWorkerConcurrency(cfg.WorkerConcurrency),
			dbos.WithQueueBasePollingInterval(cfg.Polling)); err != nil {
			return nil, fmt.Errorf("dbos queue: %w", err)
		}
		return c, nil
	}
	enqueue := func(c dbos.Context, n int) error {
		var (
			next atomic.Int64
			wg   sync.WaitGroup
			mu   sync.Mutex
			errs []error
		)
		for range dbosEnqueuers {
			wg.Go(func() {
				for next.Add(1) <= int64(n) {
					if _, err := dbos.Enqueue[int](c, dbosQueue, dbosWorkflowName, 0); err != nil {
						mu.Lock()
						errs = append(errs, err)
						mu.Unlock()
						return
					}
				}
			})
		}
		wg.Wait()
		return errors.Join(errs...)
	}
	pool, err := pgxpool.New(ctx, cfg.URL)
	if err != nil {
		return res, err
	}
	defer pool.Close()
	succeeded := func(ctx context.Context) (n int64, err error) {
		err = pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{cfg.Schema}.Sanitize()+".workflow_status WHERE status = 'SUCCESS'").Scan(&n)
		return n, err
	}
	run := func(c dbos.Context, want int64) (time.Duration, float64, error) {
		deadline := time.NewTimer(cfg.Timeout)
		defer deadline.Stop()
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		cpu0 := processCPU()
		start := time.Now()
		if err := dbos.Launch(c); err != nil {
			return 0, 0, fmt.Errorf("dbos launch: %w", err)
		}
		var err error
		for {
			n, qerr := succeeded(ctx)
			if qerr != nil {
				err = qerr
				break
			}
			if n >= want {
				break
			}
			select {
			case <-ctx.Done():
				err = ctx.Err()
			case <-deadline.C:
				err = fmt.Errorf("dbos: timed out after %s: %d of %d workflows succeeded", cfg.Timeout, n, want)
			case <-tick.C:
				continue
			}
			break
		}
		d := time.Since(start)
		cpu := processCPU() - cpu0
		if serr := dbos.Shutdown(c, 30*time.Second); serr != nil && err == nil {
			err = fmt.Errorf("dbos shutdown: %w", serr)
		}
		return d, cpu, err
	}

	var done int64
	if cfg.Warmup > 0 {
		c, err := newContext()
		if err != nil {
			return res, err
		}
		if err := enqueue(c, cfg.Warmup); err != nil {
			return res, fmt.Errorf("dbos warm-up enqueue: %w", err)
		}
		if _, _, err := run(c, int64(cfg.Warmup)); err != nil {
			return res, fmt.Errorf("warm-up: %w", err)
		}
		done = int64(cfg.Warmup)
		cfg.Log("dbos: warm-up of %d workflows done", cfg.Warmup)
	}
	c, err := newContext()
	if err != nil {
		return res, err
	}
	wal0, err := walPosition(ctx, cfg.WALPosition)
	if err != nil {
		return res, err
	}
	t0 := time.Now()
	if err := enqueue(c, cfg.Workflows); err != nil {
		return res, fmt.Errorf("dbos enqueue: %w", err)
	}
	res.InsertSeconds = time.Since(t0).Seconds()
	if cfg.BeforeStart != nil {
		if err := cfg.BeforeStart(ctx); err != nil {
			return res, err
		}
	}
	cfg.Log("dbos: enqueued %d workflows in %.3fs", cfg.Workflows, res.InsertSeconds)
	d, cpu, err := run(c, done+int64(cfg.Workflows))
	if err != nil {
		return res, err
	}
	res.Seconds, res.CPUSeconds = d.Seconds(), cpu
	res.WorkflowsPerSec = float64(cfg.Workflows) / d.Seconds()
	wal1, err := walPosition(ctx, cfg.WALPosition)
	res.WALBytes = wal1 - wal0
	return res, err
}
