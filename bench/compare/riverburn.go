// This file is byte-for-byte identical in bench/compare and bench/riversqlite
// (two modules pinned to different River releases; see bench/README.md).
// Edit both or neither: `diff compare/riverburn.go riversqlite/riverburn.go`.

package main

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
)

// riverResult is one measured River burn-down.
type riverResult struct {
	Jobs          int     `json:"jobs"`
	Seconds       float64 `json:"seconds"`        // client.Start .. Nth JobCompleted event
	JobsPerSec    float64 `json:"jobs_per_sec"`   // Jobs / Seconds
	InsertSeconds float64 `json:"insert_seconds"` // InsertMany of the N jobs, before Start (not in Seconds)
	CPUSeconds    float64 `json:"cpu_seconds"`    // this process's user+system CPU during Seconds
	Workers       int     `json:"workers"`
	Version       string  `json:"river_version"`
	Driver        string  `json:"river_driver"`
	// WALBytes is the write-ahead log written from the insertion of the N
	// jobs to the end of their burn-down (WALPosition); 0: not measured.
	WALBytes int64 `json:"wal_bytes,omitempty"`
}

type riverBenchConfig struct {
	Jobs    int
	Warmup  int // jobs burned down first with a separate client, not measured
	Workers int // MaxWorkers of the default queue
	Schema  string
	Driver  string // name of the River driver, for the report
	Timeout time.Duration
	Logger  *slog.Logger
	Log     func(format string, args ...any) // human-readable progress
	// CountCompleted returns how many rows of river_job are completed; the
	// run is checked against it at the end (the timing never polls it).
	CountCompleted func(context.Context) (int64, error)
	// BeforeStart, if set, runs after the N jobs are inserted and before the
	// clock starts (compare's --analyze).
	BeforeStart func(context.Context) error
	// WALPosition, if set, returns the database's write-ahead log position
	// in bytes (PostgreSQL's pg_current_wal_lsn), read before the insertion
	// and after the burn-down.
	WALPosition func(context.Context) (int64, error)
}

// riverInsertChunk is the jobs per InsertMany call: the same 1000 as
// drover's SubmitMany chunks, so both insert in the same number of
// transactions (River's own riverbench uses InsertMany with 5000). InsertMany
// rather than InsertManyFast, as riverbench does, and because River v0.31.0's
// InsertManyFast dereferences a nil job on drivers without LISTEN (SQLite).
const riverInsertChunk = 1000

type compareNoopArgs struct{}

func (compareNoopArgs) Kind() string { return "compare_noop" }

type compareNoopWorker struct {
	river.WorkerDefaults[compareNoopArgs]
}

func (compareNoopWorker) Work(context.Context, *river.Job[compareNoopArgs]) error { return nil }

// riverBurnDown mirrors River's own benchmark (cmd/river/riverbench) in its
// burn-down mode (--num-total-jobs): the jobs are inserted first, then a
// client with riverbench's settings (FetchCooldown 2ms, FetchPollInterval
// 20ms, one queue) starts and works them with a no-op worker. Completion is
// counted from a subscription to JobCompleted/JobFailed/JobCancelled events,
// as riverbench does, because those events are sent only after River's
// completer has written the jobs' completed state to the database (a count in
// the worker would stop the clock before the completion is durable).
//
// Timed: from just before client.Start until the Nth JobCompleted event
// arrives. riverbench starts its clock just after Start returns; starting it
// before Start matches what drover's side (and `drover bench`) times.
// Insertion, migration, the warm-up and client.Stop are not timed.
func riverBurnDown[TTx any](ctx context.Context, driver riverdriver.Driver[TTx], cfg riverBenchConfig) (riverResult, error) {
	res := riverResult{Jobs: cfg.Jobs, Workers: cfg.Workers, Version: riverVersion(), Driver: cfg.Driver}
	workers := river.NewWorkers()
	river.AddWorker(workers, &compareNoopWorker{})
	newClient := func() (*river.Client[TTx], error) {
		return river.NewClient(driver, &river.Config{
			FetchCooldown:     2 * time.Millisecond,
			FetchPollInterval: 20 * time.Millisecond,
			Logger:            cfg.Logger,
			Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: cfg.Workers}},
			Schema:            cfg.Schema,
			Workers:           workers,
		})
	}
	insert := func(c *river.Client[TTx], n int) error {
		params := make([]river.InsertManyParams, riverInsertChunk)
		for i := range params {
			params[i] = river.InsertManyParams{Args: compareNoopArgs{}}
		}
		for i := 0; i < n; i += riverInsertChunk {
			k := min(riverInsertChunk, n-i)
			if _, err := c.InsertMany(ctx, params[:k]); err != nil {
				return fmt.Errorf("river insert: %w", err)
			}
		}
		return nil
	}
	// run starts c and returns the time from just before Start until the
	// n-th completion event, then stops c (untimed).
	run := func(c *river.Client[TTx], n int) (time.Duration, float64, error) {
		events, cancelSub := c.SubscribeConfig(&river.SubscribeConfig{
			// Events that overflow the buffer are dropped, and a dropped
			// completion would hang the count: room for every job.
			ChanSize: n + 1000,
			Kinds:    []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled},
		})
		defer cancelSub()
		var failed atomic.Int64
		done := make(chan time.Time, 1)
		go func() {
			count := 0
			for ev := range events {
				if ev.Kind != river.EventKindJobCompleted {
					failed.Add(1)
				}
				if count++; count == n {
					done <- time.Now()
					return
				}
			}
		}()
		timer := time.NewTimer(cfg.Timeout)
		defer timer.Stop()
		cpu0 := processCPU()
		start := time.Now()
		if err := c.Start(ctx); err != nil {
			return 0, 0, fmt.Errorf("river start: %w", err)
		}
		var end time.Time
		var cpu float64
		var err error
		select {
		case end = <-done:
			cpu = processCPU() - cpu0
		case <-timer.C:
			err = fmt.Errorf("river: timed out after %s", cfg.Timeout)
		case <-ctx.Done():
			err = ctx.Err()
		}
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if serr := c.Stop(sctx); serr != nil && err == nil {
			err = fmt.Errorf("river stop: %w", serr)
		}
		if err != nil {
			return 0, 0, err
		}
		if f := failed.Load(); f > 0 {
			return 0, 0, fmt.Errorf("river: %d jobs failed or were cancelled", f)
		}
		return end.Sub(start), cpu, nil
	}

	if cfg.Warmup > 0 {
		c, err := newClient()
		if err != nil {
			return res, err
		}
		if err := insert(c, cfg.Warmup); err != nil {
			return res, err
		}
		if _, _, err := run(c, cfg.Warmup); err != nil {
			return res, fmt.Errorf("warm-up: %w", err)
		}
		cfg.Log("river: warm-up of %d jobs done", cfg.Warmup)
	}

	base, err := cfg.CountCompleted(ctx)
	if err != nil {
		return res, err
	}
	c, err := newClient()
	if err != nil {
		return res, err
	}
	wal0, err := walPosition(ctx, cfg.WALPosition)
	if err != nil {
		return res, err
	}
	t0 := time.Now()
	if err := insert(c, cfg.Jobs); err != nil {
		return res, err
	}
	res.InsertSeconds = time.Since(t0).Seconds()
	if cfg.BeforeStart != nil {
		if err := cfg.BeforeStart(ctx); err != nil {
			return res, err
		}
	}
	cfg.Log("river: inserted %d jobs in %.3fs", cfg.Jobs, res.InsertSeconds)
	d, cpu, err := run(c, cfg.Jobs)
	if err != nil {
		return res, err
	}
	after, err := cfg.CountCompleted(ctx)
	if err != nil {
		return res, err
	}
	if got := after - base; got != int64(cfg.Jobs) {
		return res, fmt.Errorf("river: %d of %d jobs completed in the database", got, cfg.Jobs)
	}
	res.Seconds, res.CPUSeconds = d.Seconds(), cpu
	res.JobsPerSec = float64(cfg.Jobs) / res.Seconds
	wal1, err := walPosition(ctx, cfg.WALPosition)
	res.WALBytes = wal1 - wal0
	return res, err
}

// walPosition calls pos if it is set (0 otherwise).
func walPosition(ctx context.Context, pos func(context.Context) (int64, error)) (int64, error) {
	if pos == nil {
		return 0, nil
	}
	n, err := pos(ctx)
	if err != nil {
		return 0, fmt.Errorf("read the WAL position: %w", err)
	}
	return n, nil
}

// processCPU is this process's user plus system CPU time so far, in seconds.
func processCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// riverVersion is the River release this binary was built with.
func riverVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			if m.Path == "github.com/riverqueue/river" {
				if m.Replace != nil {
					return m.Replace.Version
				}
				return m.Version
			}
		}
	}
	return "unknown"
}
