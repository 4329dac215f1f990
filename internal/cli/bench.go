package cli

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime/pprof"
	"time"

	"github.com/spf13/cobra"

	"github.com/drover-run/drover"
)

// BenchResult is what "drover bench" reports.
//
// Seconds and TasksPerSec measure the burn-down: the tasks are inserted
// first, then the roles start and run them all to Processed. That is what
// job-queue benchmarks such as River's report. Insertion and the end-to-end
// rate (insert plus run) are reported beside it.
type BenchResult struct {
	Tasks          int     `json:"tasks"`
	Steps          int     `json:"steps"`
	Schedulers     int     `json:"schedulers"`
	Synchronous    string  `json:"synchronous"`
	Seconds        float64 `json:"seconds"`
	TasksPerSec    float64 `json:"tasks_per_sec"`
	StepsPerSec    float64 `json:"steps_per_sec"`
	InsertSeconds  float64 `json:"insert_seconds"`
	InsertPerSec   float64 `json:"insert_per_sec"`
	EndToEndPerSec float64 `json:"end_to_end_tasks_per_sec"`
	DB             string  `json:"db,omitempty"`
}

// BenchWorkflow is the name of the benchmark's workflow.
const BenchWorkflow = "bench"

type benchFlags struct {
	tasks       int
	steps       int
	schedulers  int
	synchronous string
	cpuprofile  string
	timeout     time.Duration
}

func (e *env) benchCmd() *cobra.Command {
	var f benchFlags
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure throughput: run N tasks of K no-op steps to completion",
		Long: `bench measures drover's own overhead: it inserts --tasks tasks of a workflow
of --steps steps whose agent does nothing (SubmitMany, 1000 per transaction),
then runs them to completion in this process with all roles, and reports the
time from the start of insertion until every task is Processed.

The database is a fresh temporary SQLite file, deleted afterwards, unless --db
is given explicitly (the DROVER_DATABASE_URL variable is not used here).
--synchronous full (the default) makes every commit durable against power
loss; normal is durable against a process crash only, and faster.`,
		Example: `  drover bench --tasks 20000 --json
  drover bench --tasks 50000 --steps 5 --schedulers 4 --synchronous normal
  drover bench --tasks 20000 --cpuprofile cpu.out && go tool pprof -top cpu.out`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.tasks <= 0 || f.steps <= 0 || f.schedulers <= 0 {
				return usagef("--tasks, --steps and --schedulers must be positive")
			}
			if err := validSynchronous(f.synchronous); err != nil {
				return err
			}
			if f.timeout < 0 {
				return usagef("--timeout must not be negative, got %s", f.timeout)
			}
			if f.timeout == 0 {
				f.timeout = time.Minute + time.Duration(f.tasks*f.steps)*time.Millisecond
			}
			explicitDB := ""
			if cmd.Flags().Changed("db") {
				p, err := dbPath(e.dbURL)
				if err != nil {
					return err
				}
				explicitDB = p
			}
			return e.runBench(cmd.Context(), f, explicitDB)
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&f.tasks, "tasks", 10000, "number of tasks")
	fl.IntVar(&f.steps, "steps", 1, "no-op steps per task")
	fl.IntVar(&f.schedulers, "schedulers", 1, "scheduler instances")
	fl.StringVar(&f.synchronous, "synchronous", "full", "SQLite synchronous mode: full or normal")
	fl.StringVar(&f.cpuprofile, "cpuprofile", "", "write a CPU profile of the run to this file")
	fl.DurationVar(&f.timeout, "timeout", 0, "give up after this long (default: 1m + 1ms per step)")
	return cmd
}

func (e *env) runBench(ctx context.Context, f benchFlags, explicitDB string) error {
	o := openOpts{create: true, migrate: true, path: explicitDB, synchronous: f.synchronous}
	if explicitDB == "" {
		dir, err := os.MkdirTemp("", "drover-bench-")
		if err != nil {
			return fmt.Errorf("create a temporary database: %w", err)
		}
		defer os.RemoveAll(dir)
		o.path = filepath.Join(dir, "bench.db")
	}
	drv, path, err := e.openStore(ctx, o)
	if err != nil {
		return err
	}
	defer drv.Close()

	w := drover.Workflow{Name: BenchWorkflow}
	for i := range f.steps {
		w.Steps = append(w.Steps, drover.Step{Name: fmt.Sprintf("s%d", i+1), Agent: "noop", Timeout: time.Minute})
	}
	noop := func(ctx context.Context, req *drover.AgentRequest) ([]byte, error) { return []byte("null"), nil }
	c, err := drover.New(drover.Config{
		Store: drv, Workflows: []drover.Workflow{w},
		Agents:     []drover.Agent{{Name: "noop", Func: noop, Concurrency: 1024}},
		Schedulers: f.schedulers, Logger: e.logger(slog.LevelWarn),
	})
	if err != nil {
		return err
	}
	base, err := c.Counts(ctx)
	if err != nil {
		return storeErr(path, err)
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

	start := time.Now()
	const chunk = 1000
	for i := 0; i < f.tasks; i += chunk {
		n := min(chunk, f.tasks-i)
		ps := make([]drover.SubmitParams, n)
		for j := range ps {
			ps[j] = drover.SubmitParams{Workflow: BenchWorkflow}
		}
		if _, err := c.SubmitMany(ctx, ps); err != nil {
			return storeErr(path, fmt.Errorf("submit: %w", err))
		}
	}
	inserted := time.Now()

	if err := c.Start(ctx); err != nil {
		return storeErr(path, err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = c.Stop(sctx)
	}()
	deadline := time.NewTimer(f.timeout)
	defer deadline.Stop()
	// The client counts the tasks it finishes: waiting on that costs nothing,
	// where polling the store would compete with the work measured. The
	// store is checked once at the end.
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for c.Stats().TasksFinished < int64(f.tasks) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("bench interrupted: %d of %d tasks finished", c.Stats().TasksFinished, f.tasks)
		case <-deadline.C:
			return fmt.Errorf("bench timed out after %s (--timeout): %d of %d tasks finished", f.timeout, c.Stats().TasksFinished, f.tasks)
		case <-tick.C:
		}
	}
	end := time.Now()
	counts, err := c.Counts(ctx)
	if err != nil {
		return storeErr(path, err)
	}
	if done := counts[drover.Processed] - base[drover.Processed]; done != f.tasks {
		return fmt.Errorf("bench: %d of %d tasks Processed (%v)", done, f.tasks, counts)
	}

	round := func(x float64) float64 { return math.Round(x*1000) / 1000 }
	run := end.Sub(inserted).Seconds()
	ins := inserted.Sub(start).Seconds()
	r := BenchResult{
		Tasks: f.tasks, Steps: f.steps, Schedulers: f.schedulers, Synchronous: f.synchronous,
		Seconds: round(run), TasksPerSec: math.Round(float64(f.tasks) / run), StepsPerSec: math.Round(float64(f.tasks*f.steps) / run),
		InsertSeconds: round(ins), InsertPerSec: math.Round(float64(f.tasks) / ins),
		EndToEndPerSec: math.Round(float64(f.tasks) / (run + ins)),
	}
	if explicitDB != "" {
		r.DB = path
	}
	if e.jsonOut {
		return writeJSON(e.stdout, r)
	}
	fmt.Fprintf(e.stdout, "drover bench: %d tasks × %d steps burned down in %.3fs: %.0f tasks/s, %.0f steps/s (inserted in %.3fs: %.0f/s; end to end %.0f tasks/s; synchronous=%s, %d schedulers)\n",
		r.Tasks, r.Steps, r.Seconds, r.TasksPerSec, r.StepsPerSec, r.InsertSeconds, r.InsertPerSec, r.EndToEndPerSec, r.Synchronous, r.Schedulers)
	return nil
}
