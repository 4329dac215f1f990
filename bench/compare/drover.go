package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime/pprof"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/store"
)

// droverResult is one measured drover burn-down.
type droverResult struct {
	Tasks         int     `json:"tasks"`
	Seconds       float64 `json:"seconds"`        // client.Start .. N tasks Processed
	TasksPerSec   float64 `json:"tasks_per_sec"`  // Tasks / Seconds
	InsertSeconds float64 `json:"insert_seconds"` // SubmitMany of the N tasks, before Start (not in Seconds)
	CPUSeconds    float64 `json:"cpu_seconds"`    // this process's user+system CPU during Seconds
	WALBytes      int64   `json:"wal_bytes"`      // WAL from the insertion to the end of the burn-down; 0: not measured
}

type droverBenchConfig struct {
	Tasks      int
	Warmup     int
	Timeout    time.Duration
	CPUProfile string // profile the measured burn-down only
	Logger     *slog.Logger
	Log        func(format string, args ...any)
	// BeforeStart, if set, runs after the N tasks are inserted and before
	// the clock starts (--analyze).
	BeforeStart func(context.Context) error
	Steps       int                                  // no-op steps per task (default 1)
	WALPosition func(context.Context) (int64, error) // see riverBenchConfig
}

const (
	droverWorkflow    = "compare"
	droverSubmitChunk = 1000 // tasks per SubmitMany transaction, as `drover bench`
)

// droverBurnDown does what `drover bench` does (internal/benchcmd/bench.go) with
// one no-op step per task: it submits the tasks first with SubmitMany in
// chunks of 1000, then starts a client with all roles in this process
// (scheduler, agents, supervisor) and a no-op agent with a call slot for
// every task the schedulers can hold (droverNoopConcurrency), and
// waits until Stats().TasksFinished reaches N. That counter changes only
// after the transaction that made a task Processed has committed, so, like
// River's completion events, it counts durable completions.
//
// Timed: from just before client.Start until TasksFinished reaches N
// (polled every millisecond, so the end is late by at most 1ms). Insertion,
// migration, the warm-up and client.Stop are not timed. The store is
// checked at the end: exactly N more tasks must be Processed.
func droverBurnDown(ctx context.Context, drv store.Driver, cfg droverBenchConfig) (droverResult, error) {
	res := droverResult{Tasks: cfg.Tasks}
	noop := func(context.Context, *drover.AgentRequest) ([]byte, error) { return []byte("null"), nil }
	steps := make([]drover.Step, max(cfg.Steps, 1))
	for i := range steps {
		steps[i] = drover.Step{Name: fmt.Sprintf("s%d", i+1), Agent: "noop", Timeout: time.Minute}
	}
	newClient := func() (*drover.Client, error) {
		return drover.New(drover.Config{
			Store:     drv,
			Workflows: []drover.Workflow{{Name: droverWorkflow, Steps: steps}},
			Agents:    []drover.Agent{{Name: "noop", Func: noop, Concurrency: droverNoopConcurrency(drv)}},
			Logger:    cfg.Logger,
		})
	}
	submit := func(c *drover.Client, n int) error {
		ps := make([]drover.SubmitParams, droverSubmitChunk)
		for i := range ps {
			ps[i] = drover.SubmitParams{Workflow: droverWorkflow}
		}
		for i := 0; i < n; i += droverSubmitChunk {
			k := min(droverSubmitChunk, n-i)
			if _, err := c.SubmitMany(ctx, ps[:k]); err != nil {
				return fmt.Errorf("drover submit: %w", err)
			}
		}
		return nil
	}
	// run starts c and returns the time from just before Start until n
	// tasks are finished, then stops c (untimed).
	run := func(c *drover.Client, n int, profile string) (time.Duration, float64, error) {
		if profile != "" {
			f, err := os.Create(profile)
			if err != nil {
				return 0, 0, fmt.Errorf("--cpuprofile: %w", err)
			}
			defer f.Close()
			if err := pprof.StartCPUProfile(f); err != nil {
				return 0, 0, fmt.Errorf("--cpuprofile: %w", err)
			}
		}
		deadline := time.NewTimer(cfg.Timeout)
		defer deadline.Stop()
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		cpu0 := processCPU()
		start := time.Now()
		if err := c.Start(ctx); err != nil {
			if profile != "" {
				pprof.StopCPUProfile()
			}
			return 0, 0, fmt.Errorf("drover start: %w", err)
		}
		var err error
	wait:
		for c.Stats().TasksFinished < int64(n) {
			select {
			case <-ctx.Done():
				err = ctx.Err()
				break wait
			case <-deadline.C:
				err = fmt.Errorf("drover: timed out after %s: %d of %d tasks finished", cfg.Timeout, c.Stats().TasksFinished, n)
				break wait
			case <-tick.C:
			}
		}
		d := time.Since(start)
		cpu := processCPU() - cpu0
		if profile != "" {
			pprof.StopCPUProfile()
		}
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if serr := c.Stop(sctx); serr != nil && err == nil {
			err = fmt.Errorf("drover stop: %w", serr)
		}
		return d, cpu, err
	}

	if cfg.Warmup > 0 {
		c, err := newClient()
		if err != nil {
			return res, err
		}
		if err := submit(c, cfg.Warmup); err != nil {
			return res, err
		}
		if _, _, err := run(c, cfg.Warmup, ""); err != nil {
			return res, fmt.Errorf("warm-up: %w", err)
		}
		cfg.Log("drover: warm-up of %d tasks done", cfg.Warmup)
	}

	c, err := newClient()
	if err != nil {
		return res, err
	}
	base, err := c.Counts(ctx)
	if err != nil {
		return res, err
	}
	wal0, err := walPosition(ctx, cfg.WALPosition)
	if err != nil {
		return res, err
	}
	t0 := time.Now()
	if err := submit(c, cfg.Tasks); err != nil {
		return res, err
	}
	res.InsertSeconds = time.Since(t0).Seconds()
	if cfg.BeforeStart != nil {
		if err := cfg.BeforeStart(ctx); err != nil {
			return res, err
		}
	}
	cfg.Log("drover: inserted %d tasks in %.3fs", cfg.Tasks, res.InsertSeconds)
	d, cpu, err := run(c, cfg.Tasks, cfg.CPUProfile)
	if err != nil {
		return res, err
	}
	counts, err := c.Counts(ctx)
	if err != nil {
		return res, err
	}
	if got := counts[drover.Processed] - base[drover.Processed]; got != cfg.Tasks {
		return res, fmt.Errorf("drover: %d of %d tasks Processed (%v)", got, cfg.Tasks, counts)
	}
	res.Seconds, res.CPUSeconds = d.Seconds(), cpu
	res.TasksPerSec = float64(cfg.Tasks) / res.Seconds
	wal1, err := walPosition(ctx, cfg.WALPosition)
	res.WALBytes = wal1 - wal0
	return res, err
}

// droverNoopConcurrency is the no-op agent's call slots, as `drover bench`
// sets them: one for every task the default schedulers can hold, so that
// no dispatch finds the slots taken and goes through the request table (a
// no-op agent stands for no remote service whose capacity would cap it).
func droverNoopConcurrency(d store.Driver) int {
	return drover.DefaultSchedulers(d) * drover.DefaultMaxInFlight
}
