package benchcmd

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/internal/clicore"
	"github.com/drover-run/drover/store"
)

// BenchResult is what "drover bench" reports in throughput mode (without
// --rate).
//
// Seconds and TasksPerSec measure the burn-down: the tasks are inserted
// first, then the roles start and run them all to Processed. That is what
// job-queue benchmarks such as River's report. Insertion and the end-to-end
// rate (insert plus run) are reported beside it.
type BenchResult struct {
	Mode           string  `json:"mode"` // "throughput"
	Tasks          int     `json:"tasks"`
	Steps          int     `json:"steps"`
	Schedulers     int     `json:"schedulers"`
	Driver         string  `json:"driver"`
	Synchronous    string  `json:"synchronous,omitempty"` // SQLite only
	Seconds        float64 `json:"seconds"`
	TasksPerSec    float64 `json:"tasks_per_sec"`
	StepsPerSec    float64 `json:"steps_per_sec"`
	InsertSeconds  float64 `json:"insert_seconds"`
	InsertPerSec   float64 `json:"insert_per_sec"`
	EndToEndPerSec float64 `json:"end_to_end_tasks_per_sec"`
	DB             string  `json:"db,omitempty"`
	Schema         string  `json:"schema,omitempty"`
}

// LatencyResult is what "drover bench --rate R --duration D" reports: the
// latency from each task's submission to its Processed event, both read from
// the engine's clock (the task's CreatedAt as Submit returns it, and the
// CreatedAt of its "processed" event in the durable history).
type LatencyResult struct {
	Mode         string  `json:"mode"` // "latency"
	Rate         float64 `json:"rate"`
	DurationS    float64 `json:"duration_s"`
	Tasks        int     `json:"tasks"`
	P50Ms        float64 `json:"p50_ms"`
	P90Ms        float64 `json:"p90_ms"`
	P99Ms        float64 `json:"p99_ms"`
	MaxMs        float64 `json:"max_ms"`
	MeanMs       float64 `json:"mean_ms"`
	AchievedRate float64 `json:"achieved_rate"`
	Submitters   int     `json:"submitters"`
	EagerStart   bool    `json:"eager_start"`
	Steps        int     `json:"steps"`
	Schedulers   int     `json:"schedulers"`
	Driver       string  `json:"driver"`
	Synchronous  string  `json:"synchronous,omitempty"` // SQLite only
	DB           string  `json:"db,omitempty"`
	Schema       string  `json:"schema,omitempty"`
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
	rate        float64
	duration    time.Duration
	maxInFlight int
	claimBatch  int
	submitters  int
	noEager     bool
}

func (e *env) benchCmd() *cobra.Command {
	var f benchFlags
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure throughput (N tasks burned down) or latency (tasks submitted at a rate)",
		Long: `bench measures drover's own overhead with a workflow of --steps steps whose
agent does nothing, running all roles in this process. The agent has a call
slot for every task the schedulers can hold (--schedulers × --max-inflight),
so no step waits for a slot.

Throughput (the default): it inserts --tasks tasks (SubmitMany, 1000 per
transaction), then starts the roles and reports the time from the start of
the run until every task is Processed, and the insertion rate beside it.

Latency (--rate R --duration D): with the roles running, it submits R × D
single tasks one at a time from one goroutine (Submit, a durable commit
each; --submitters N shares the same schedule among N goroutines, for rates
one committer cannot reach), evenly paced at R per second, then waits until
every one is final. It
reports the percentiles of each task's latency from its submission to its
Processed event, both times taken from the engine's clock (the task's
creation time, and the "processed" event's time read from the durable
history, so no task is polled), and the achieved rate: tasks divided by the
time submitting took, or by D if shorter. A submitter that cannot keep up
with R submits back to back, takes longer than D, and reports an achieved
rate below R. Each Submit starts its task in its own transaction when a
scheduler has room (eager start, reported as eager_start);
--no-eager-start leaves every task Pending for a scheduler's claim.

Progress goes to stderr every half second (not with --json): tasks
inserted, then finished (throughput), or submitted and final (latency).

The database is a fresh temporary SQLite file, deleted afterwards, unless --db
is given explicitly (the DROVER_DATABASE_URL variable is not used here).
--synchronous full (the default) makes every SQLite commit durable against
power loss; normal is durable against a process crash only, and faster. On
PostgreSQL (--db postgres://…) the store is the schema --schema, migrated if
needed and kept; without --schema on the command line a temporary schema
drover_bench_<random> is used and dropped afterwards. --synchronous is an
error there (the server's synchronous_commit decides).`,
		Example: `  drover bench --tasks 20000 --json
  drover bench --tasks 50000 --steps 5 --schedulers 4 --synchronous normal
  drover bench --rate 1000 --duration 10s --json
  drover bench --db postgres://postgres@127.0.0.1:5432/postgres --rate 1000 --duration 10s --submitters 8
  drover bench --db postgres://postgres@127.0.0.1:5432/postgres --tasks 20000 --claim-batch 512
  drover bench --tasks 20000 --cpuprofile cpu.out && go tool pprof -top cpu.out`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			fl := cmd.Flags()
			latency := fl.Changed("rate") || fl.Changed("duration")
			if latency && !(fl.Changed("rate") && fl.Changed("duration")) {
				return clicore.Usagef("--rate and --duration go together (latency mode)")
			}
			if latency && fl.Changed("tasks") {
				return clicore.Usagef("--tasks is for throughput mode; with --rate the count is rate × duration")
			}
			if f.tasks <= 0 || f.steps <= 0 || f.schedulers < 0 {
				return clicore.Usagef("--tasks and --steps must be positive, --schedulers not negative")
			}
			if latency && (math.IsNaN(f.rate) || math.IsInf(f.rate, 0) || f.rate <= 0 || f.duration <= 0) {
				return clicore.Usagef("--rate and --duration must be positive, got %v and %s", f.rate, f.duration)
			}
			if latency && f.rate*f.duration.Seconds() > 10_000_000 {
				return clicore.Usagef("--rate × --duration is %.0f tasks; at most 10000000", f.rate*f.duration.Seconds())
			}
			if fl.Changed("submitters") && !latency {
				return clicore.Usagef("--submitters is for latency mode (--rate and --duration)")
			}
			if f.submitters <= 0 {
				return clicore.Usagef("--submitters must be positive, got %d", f.submitters)
			}
			if f.maxInFlight < 0 || f.claimBatch < 0 {
				return clicore.Usagef("--max-inflight and --claim-batch must not be negative (0: the default)")
			}
			if f.timeout < 0 {
				return clicore.Usagef("--timeout must not be negative, got %s", f.timeout)
			}
			if f.timeout == 0 {
				if latency {
					f.timeout = 2*time.Minute + f.duration
				} else {
					f.timeout = time.Minute + time.Duration(f.tasks*f.steps)*time.Millisecond
				}
			}
			explicit, tempSchema, err := e.benchTarget(cmd, &f.synchronous)
			if err != nil {
				return err
			}
			return e.runBench(cmd.Context(), f, explicit, tempSchema, latency)
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&f.tasks, "tasks", 10000, "number of tasks (throughput mode)")
	fl.IntVar(&f.steps, "steps", 1, "no-op steps per task")
	fl.IntVar(&f.schedulers, "schedulers", 0, "scheduler instances (0: the store's default, 1 on SQLite, 2 on PostgreSQL)")
	fl.StringVar(&f.synchronous, "synchronous", "full", "SQLite synchronous mode: full or normal; SQLite only")
	fl.StringVar(&f.cpuprofile, "cpuprofile", "", "write a CPU profile of the run to this file")
	fl.DurationVar(&f.timeout, "timeout", 0, "give up after this long (default: 1m + 1ms per step; latency mode 2m + --duration)")
	fl.Float64Var(&f.rate, "rate", 0, "latency mode: submit this many tasks per second, one at a time")
	fl.DurationVar(&f.duration, "duration", 0, "latency mode: submit rate × duration tasks")
	fl.IntVar(&f.submitters, "submitters", 1, "latency mode: goroutines sharing the paced submissions, each calling Submit one at a time")
	fl.IntVar(&f.maxInFlight, "max-inflight", 0, "tasks one scheduler holds at once (default: drover's, 1024)")
	fl.IntVar(&f.claimBatch, "claim-batch", 0, "tasks claimed per transaction (default: drover's, 256)")
	fl.BoolVar(&f.noEager, "no-eager-start", false, "latency mode: leave each submitted task Pending for a claim instead of starting it in Submit's transaction")
	cmd.AddCommand(e.benchConvoyCmd())
	cmd.AddCommand(e.benchIdleCmd())
	return cmd
}

func derefTarget(t *clicore.DBTarget) clicore.DBTarget {
	if t == nil {
		return clicore.DBTarget{}
	}
	return *t
}

func (e *env) runBench(ctx context.Context, f benchFlags, explicit *clicore.DBTarget, tempSchema, latency bool) error {
	o := clicore.OpenOpts{Create: true, Migrate: true, Target: explicit, Synchronous: f.synchronous}
	if explicit == nil {
		dir, err := os.MkdirTemp("", "drover-bench-")
		if err != nil {
			return fmt.Errorf("create a temporary database: %w", err)
		}
		defer os.RemoveAll(dir)
		o.Target = &clicore.DBTarget{Path: filepath.Join(dir, "bench.db")}
	} else if tempSchema {
		t := *explicit
		t.Schema = "drover_bench_" + clicore.RandomHex(6)
		o.Target = &t
	}
	drv, err := e.OpenStore(ctx, o)
	if err != nil {
		return err
	}
	defer drv.Close()
	if f.schedulers == 0 {
		f.schedulers = drover.DefaultSchedulers(drv.Driver) // so the report says how many ran
	}
	if tempSchema {
		defer func() {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			if err := clicore.DropSchema(dctx, drv); err != nil {
				fmt.Fprintf(e.Stderr, "drover: warning: drop the temporary schema %s: %v\n", drv.Target.Schema, err)
			}
		}()
	}

	w := drover.Workflow{Name: BenchWorkflow}
	for i := range f.steps {
		w.Steps = append(w.Steps, drover.Step{Name: fmt.Sprintf("s%d", i+1), Agent: "noop", Timeout: time.Minute})
	}
	noop := func(ctx context.Context, req *drover.AgentRequest) ([]byte, error) { return []byte("null"), nil }
	c, err := drover.New(drover.Config{
		Store: drv.Driver, Workflows: []drover.Workflow{w},
		Agents:     []drover.Agent{{Name: "noop", Func: noop, Concurrency: noopConcurrency(drv.Driver, f.schedulers, f.maxInFlight)}},
		Schedulers: f.schedulers, MaxInFlight: f.maxInFlight, ClaimBatch: f.claimBatch,
		NoEagerStart: f.noEager, Logger: e.Logger(slog.LevelWarn),
	})
	if err != nil {
		return err
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
	if latency {
		return e.runLatency(ctx, f, drv, c, explicit != nil)
	}
	return e.runThroughput(ctx, f, drv, c, explicit != nil)
}

// runThroughput inserts the tasks, then burns them down.
func (e *env) runThroughput(ctx context.Context, f benchFlags, drv *clicore.Database, c *drover.Client, explicit bool) error {
	base, err := c.Counts(ctx)
	if err != nil {
		return drv.StoreErr(err)
	}
	start := time.Now()
	var inserted atomic.Int64
	running := atomic.Bool{}
	stopProgress := e.Progress("bench", start, func() string {
		if !running.Load() {
			return fmt.Sprintf("inserted %d/%d", inserted.Load(), f.tasks)
		}
		st := c.Stats()
		return fmt.Sprintf("final %d/%d  dispatched=%d", st.TasksFinished, f.tasks, st.Dispatched)
	})
	defer stopProgress()
	const chunk = 1000
	for i := 0; i < f.tasks; i += chunk {
		n := min(chunk, f.tasks-i)
		ps := make([]drover.SubmitParams, n)
		for j := range ps {
			ps[j] = drover.SubmitParams{Workflow: BenchWorkflow}
		}
		if _, err := c.SubmitMany(ctx, ps); err != nil {
			return drv.StoreErr(fmt.Errorf("submit: %w", err))
		}
		inserted.Add(int64(n))
	}
	insertEnd := time.Now()
	running.Store(true)

	if err := c.Start(ctx); err != nil {
		return drv.StoreErr(err)
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
	stopProgress()
	counts, err := c.Counts(ctx)
	if err != nil {
		return drv.StoreErr(err)
	}
	if done := counts[drover.Processed] - base[drover.Processed]; done != f.tasks {
		return fmt.Errorf("bench: %d of %d tasks Processed (%v)", done, f.tasks, counts)
	}

	round := func(x float64) float64 { return math.Round(x*1000) / 1000 }
	run := end.Sub(insertEnd).Seconds()
	ins := insertEnd.Sub(start).Seconds()
	r := BenchResult{
		Mode:  "throughput",
		Tasks: f.tasks, Steps: f.steps, Schedulers: f.schedulers, Driver: drv.DriverName(), Synchronous: f.synchronous,
		Seconds: round(run), TasksPerSec: math.Round(float64(f.tasks) / run), StepsPerSec: math.Round(float64(f.tasks*f.steps) / run),
		InsertSeconds: round(ins), InsertPerSec: math.Round(float64(f.tasks) / ins),
		EndToEndPerSec: math.Round(float64(f.tasks) / (run + ins)),
	}
	if explicit {
		r.DB = drv.Label
	}
	if drv.Target.Postgres {
		r.Schema = drv.Target.Schema
	}
	if e.JSON {
		return clicore.WriteJSON(e.Stdout, r)
	}
	fmt.Fprintf(e.Stdout, "drover bench: %d tasks × %d steps burned down in %.3fs: %.0f tasks/s, %.0f steps/s (inserted in %.3fs: %.0f/s; end to end %.0f tasks/s; %s, %d schedulers)\n",
		r.Tasks, r.Steps, r.Seconds, r.TasksPerSec, r.StepsPerSec, r.InsertSeconds, r.InsertPerSec, r.EndToEndPerSec, benchStoreDesc(drv, f), r.Schedulers)
	return nil
}

// benchTarget reads the store a bench run names: the --db target (nil: a
// fresh temporary SQLite file), whether the run uses a temporary PostgreSQL
// schema (--db on PostgreSQL without --schema), and checks --synchronous,
// which it clears on PostgreSQL.
func (e *env) benchTarget(cmd *cobra.Command, synchronous *string) (explicit *clicore.DBTarget, tempSchema bool, err error) {
	fl := cmd.Flags()
	if fl.Changed("db") {
		t, err := e.Target()
		if err != nil {
			return nil, false, err
		}
		explicit = &t
		tempSchema = t.Postgres && !fl.Changed("schema")
	}
	if err := clicore.CheckSynchronous(cmd, derefTarget(explicit), *synchronous); err != nil {
		return nil, false, err
	}
	if explicit != nil && explicit.Postgres {
		*synchronous = ""
	}
	return explicit, tempSchema, nil
}

// noopConcurrency is the call slots of the benchmarks' no-op agent: one for
// every task the schedulers can hold (each holds at most MaxInFlight, and
// the benchmark's steps run one after another, so a task has one call in
// flight), so that no dispatch finds the slots taken and goes through the
// request table. A no-op agent stands for no remote service whose
// capacity would cap it.
func noopConcurrency(d store.Driver, schedulers, maxInFlight int) int {
	if schedulers <= 0 {
		schedulers = drover.DefaultSchedulers(d)
	}
	if maxInFlight <= 0 {
		maxInFlight = drover.DefaultMaxInFlight
	}
	return schedulers * maxInFlight
}
