// Command compare burns down the same number of no-op tasks with drover,
// no-op jobs with River and no-op durable workflows with DBOS Transact,
// one after the other on the same database, and reports the rates and
// drover's ratio to each.
//
//	cd bench && go run ./compare --db 'postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable' --tasks 200000
//	cd bench && go run ./compare --db 'postgres://…' --tasks 50000 --steps 3
//	cd bench && go run ./compare --db sqlite: --tasks 50000
//
// What is timed, for each system: the N tasks/jobs are inserted first (not
// timed), then a client with every role in this process starts, and the
// clock runs from just before its Start until the N-th task/job is durably
// finished (drover: Stats().TasksFinished, counted after commit; River: the
// N-th JobCompleted event, sent after River's completer has written the
// state). Before the measured run each system burns down --warmup tasks with
// a separate client on the same database (not timed), and each run ends with
// a check in the database that exactly N more tasks/jobs finished.
//
// Human-readable lines go to stderr; the last stdout line is one JSON object.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// Result is the JSON object printed as the last stdout line.
type Result struct {
	DB                  string  `json:"db"` // "postgres" or "sqlite"
	Database            string  `json:"database"`
	Tasks               int     `json:"tasks"`
	Warmup              int     `json:"warmup"`
	Order               string  `json:"order"`
	Analyze             bool    `json:"analyze,omitempty"`
	DroverSeconds       float64 `json:"drover_seconds,omitempty"`
	DroverTasksPerSec   float64 `json:"drover_tasks_per_sec,omitempty"`
	DroverInsertSeconds float64 `json:"drover_insert_seconds,omitempty"`
	DroverCPUSeconds    float64 `json:"drover_cpu_seconds,omitempty"` // client process CPU during drover_seconds
	RiverSeconds        float64 `json:"river_seconds,omitempty"`
	RiverJobsPerSec     float64 `json:"river_jobs_per_sec,omitempty"`
	RiverInsertSeconds  float64 `json:"river_insert_seconds,omitempty"`
	RiverCPUSeconds     float64 `json:"river_cpu_seconds,omitempty"` // client process CPU during river_seconds
	RiverVersion        string  `json:"river_version,omitempty"`
	RiverDriver         string  `json:"river_driver,omitempty"`
	RiverWorkers        int     `json:"river_workers,omitempty"`
	DBOSSeconds         float64 `json:"dbos_seconds,omitempty"`
	DBOSWorkflowsPerSec float64 `json:"dbos_workflows_per_sec,omitempty"`
	DBOSInsertSeconds   float64 `json:"dbos_insert_seconds,omitempty"`
	DBOSCPUSeconds      float64 `json:"dbos_cpu_seconds,omitempty"` // client process CPU during dbos_seconds
	DBOSVersion         string  `json:"dbos_version,omitempty"`
	DBOSConcurrency     int     `json:"dbos_worker_concurrency,omitempty"`
	DBOSPollingMS       float64 `json:"dbos_polling_ms,omitempty"`
	Steps               int     `json:"steps"`                          // no-op steps per drover task and DBOS workflow
	DroverStepsPerSec   float64 `json:"drover_steps_per_sec,omitempty"` // drover_tasks_per_sec × steps
	Ratio               float64 `json:"ratio,omitempty"`                // drover_tasks_per_sec / river_jobs_per_sec (= ratio_river)
	RatioRiver          float64 `json:"ratio_river,omitempty"`          // drover_tasks_per_sec / river_jobs_per_sec
	RatioDBOS           float64 `json:"ratio_dbos,omitempty"`           // drover_tasks_per_sec / dbos_workflows_per_sec
	// WAL bytes per task, job or workflow (PostgreSQL): the server's WAL
	// from the insertion of the N to the end of their burn-down, over N.
	DroverWALPerTask   float64 `json:"drover_wal_bytes_per_task,omitempty"`
	RiverWALPerJob     float64 `json:"river_wal_bytes_per_job,omitempty"`
	DBOSWALPerWorkflow float64 `json:"dbos_wal_bytes_per_workflow,omitempty"`
	NumCPU             int     `json:"num_cpu"`
	GoVersion          string  `json:"go_version"`
}

type options struct {
	db              string
	tasks           int
	workers         int
	warmup          int
	cpuprofile      string
	only            string
	order           string
	keep            bool
	timeout         time.Duration
	riverSQLiteDir  string
	droverSchema    string
	riverSchema     string
	verbose         bool
	analyze         bool
	steps           int
	dbosSchema      string
	dbosConcurrency int
	dbosPolling     time.Duration
}

func main() {
	var o options
	fl := flag.NewFlagSet("compare", flag.ContinueOnError)
	fl.StringVar(&o.db, "db", "sqlite:", "postgres://… URL, or sqlite:PATH / a bare PATH (each system gets its own file derived from PATH; sqlite: alone = temporary files)")
	fl.IntVar(&o.tasks, "tasks", 10000, "tasks (drover) and jobs (River) to burn down")
	fl.IntVar(&o.workers, "workers", 2000, "River MaxWorkers (2000 is what River's own riverbench uses)")
	fl.IntVar(&o.warmup, "warmup", 1000, "tasks/jobs each system burns down first, not measured")
	fl.StringVar(&o.cpuprofile, "cpuprofile", "", "write a CPU profile of drover's measured burn-down (only) to this file")
	fl.StringVar(&o.only, "only", "", "run only this system: drover, river or dbos (no ratio)")
	fl.StringVar(&o.order, "order", "drover,river,dbos", "the order the systems run in, comma-separated (each at most once)")
	fl.IntVar(&o.steps, "steps", 1, "no-op steps per drover task and DBOS workflow (River, which has no steps, runs only with 1)")
	fl.StringVar(&o.dbosSchema, "dbos-schema", "dbos_compare", "PostgreSQL schema for DBOS (dropped and recreated)")
	fl.IntVar(&o.dbosConcurrency, "dbos-concurrency", 1000, "DBOS queue's worker concurrency (workflows at once in this process)")
	fl.DurationVar(&o.dbosPolling, "dbos-polling", 10*time.Millisecond, "DBOS queue's base polling interval")
	fl.BoolVar(&o.keep, "keep", false, "keep each system's schema or file after its run (default: drop it, so one system's dead rows and autovacuum never weigh on the other)")
	fl.DurationVar(&o.timeout, "timeout", 0, "give up on one burn-down after this long (default 1m + 1ms per task)")
	fl.StringVar(&o.riverSQLiteDir, "river-sqlite-dir", "", "directory of the bench/riversqlite module (default: found next to this source)")
	fl.StringVar(&o.droverSchema, "drover-schema", "drover_compare", "PostgreSQL schema for drover (dropped and recreated)")
	fl.StringVar(&o.riverSchema, "river-schema", "river_compare", "PostgreSQL schema for River (dropped and recreated)")
	fl.BoolVar(&o.verbose, "v", false, "log both systems' info-level messages")
	fl.BoolVar(&o.analyze, "analyze", false, "PostgreSQL: ANALYZE each system's tables after inserting the N tasks/jobs, before the clock starts (default: no statistics on the fresh tables, as after a burst insert)")
	if err := fl.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	if fl.NArg() > 0 || o.tasks <= 0 || o.workers <= 0 || o.warmup < 0 || o.steps <= 0 || o.dbosConcurrency <= 0 || o.dbosPolling <= 0 {
		fmt.Fprintln(os.Stderr, "compare: --tasks, --workers, --steps, --dbos-concurrency and --dbos-polling must be positive, --warmup not negative, and no arguments")
		os.Exit(2)
	}
	switch o.only {
	case "", "drover", "river", "dbos":
	default:
		fmt.Fprintln(os.Stderr, "compare: --only must be drover, river or dbos")
		os.Exit(2)
	}
	seen := map[string]bool{}
	for _, s := range strings.Split(o.order, ",") {
		if (s != "drover" && s != "river" && s != "dbos") || seen[s] {
			fmt.Fprintln(os.Stderr, "compare: --order lists drover, river and dbos, each at most once, comma-separated")
			os.Exit(2)
		}
		seen[s] = true
	}
	if o.timeout == 0 {
		o.timeout = time.Minute + time.Duration(o.tasks)*time.Millisecond
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	r, err := run(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		os.Exit(1)
	}
	b, _ := json.Marshal(r)
	fmt.Println(string(b))
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
}

func isPostgres(db string) bool {
	return strings.HasPrefix(db, "postgres://") || strings.HasPrefix(db, "postgresql://") ||
		strings.Contains(db, "host=") || strings.Contains(db, "dbname=")
}

func run(ctx context.Context, o options) (*Result, error) {
	r := &Result{Steps: o.steps, Tasks: o.tasks, Warmup: o.warmup, Order: o.order, Analyze: o.analyze, NumCPU: runtime.NumCPU(), GoVersion: runtime.Version()}
	level := slog.LevelWarn
	if o.verbose {
		level = slog.LevelInfo
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	var sys systems
	var err error
	if isPostgres(o.db) {
		r.DB, r.Database = "postgres", redact(o.db)
		sys, err = postgresSystems(ctx, o, logger)
	} else {
		r.DB = "sqlite"
		sys, err = sqliteSystems(ctx, o, logger)
		r.Database = sys.where
	}
	if err != nil {
		return nil, err
	}
	defer sys.cleanup()
	logf("compare: %d tasks on %s (%s), warm-up %d, %d CPUs, %s", o.tasks, r.DB, r.Database, o.warmup, r.NumCPU, r.GoVersion)

	order := strings.Split(o.order, ",")
	for _, name := range order {
		if o.only != "" && o.only != name {
			continue
		}
		if name == "river" && o.steps > 1 {
			logf("river: skipped: a River job has no steps (--steps %d)", o.steps)
			continue
		}
		if name == "dbos" && sys.dbos == nil {
			logf("dbos: skipped: this comparison runs DBOS on PostgreSQL only")
			continue
		}
		switch name {
		case "drover":
			logf("drover: starting (no-op agent, Concurrency 1024, all roles in-process)")
			d, err := sys.drover(ctx)
			if err != nil {
				return nil, err
			}
			r.DroverSeconds, r.DroverTasksPerSec, r.DroverInsertSeconds = round3(d.Seconds), math.Round(d.TasksPerSec), round3(d.InsertSeconds)
			r.DroverCPUSeconds = round3(d.CPUSeconds)
			r.DroverStepsPerSec = math.Round(d.TasksPerSec * float64(o.steps))
			r.DroverWALPerTask = math.Round(float64(d.WALBytes) / float64(d.Tasks))
			logf("drover: %d tasks of %d steps burned down in %.3fs: %.0f tasks/s, %.0f steps/s, client CPU %.1fs (inserted in %.3fs)", d.Tasks, o.steps, d.Seconds, d.TasksPerSec, d.TasksPerSec*float64(o.steps), d.CPUSeconds, d.InsertSeconds)
		case "river":
			logf("river: starting (no-op worker, MaxWorkers %d, riverbench's fetch settings)", o.workers)
			rv, err := sys.river(ctx)
			if err != nil {
				return nil, err
			}
			r.RiverSeconds, r.RiverJobsPerSec, r.RiverInsertSeconds = round3(rv.Seconds), math.Round(rv.JobsPerSec), round3(rv.InsertSeconds)
			r.RiverVersion, r.RiverDriver, r.RiverWorkers = rv.Version, rv.Driver, rv.Workers
			r.RiverCPUSeconds = round3(rv.CPUSeconds)
			r.RiverWALPerJob = math.Round(float64(rv.WALBytes) / float64(rv.Jobs))
			logf("river %s (%s): %d jobs burned down in %.3fs: %.0f jobs/s, client CPU %.1fs (inserted in %.3fs)", rv.Version, rv.Driver, rv.Jobs, rv.Seconds, rv.JobsPerSec, rv.CPUSeconds, rv.InsertSeconds)
		case "dbos":
			logf("dbos: starting (no-op workflows of %d steps on a queue, worker concurrency %d, polling %s)", o.steps, o.dbosConcurrency, o.dbosPolling)
			db, err := sys.dbos(ctx)
			if err != nil {
				return nil, err
			}
			r.DBOSSeconds, r.DBOSWorkflowsPerSec, r.DBOSInsertSeconds = round3(db.Seconds), math.Round(db.WorkflowsPerSec), round3(db.InsertSeconds)
			r.DBOSCPUSeconds, r.DBOSVersion = round3(db.CPUSeconds), db.Version
			r.DBOSConcurrency, r.DBOSPollingMS = db.WorkerConcurrency, db.PollingMS
			r.DBOSWALPerWorkflow = math.Round(float64(db.WALBytes) / float64(db.Workflows))
			logf("dbos %s: %d workflows burned down in %.3fs: %.0f workflows/s, client CPU %.1fs (enqueued in %.3fs)", db.Version, db.Workflows, db.Seconds, db.WorkflowsPerSec, db.CPUSeconds, db.InsertSeconds)
		}
	}
	if r.DroverTasksPerSec > 0 && r.RiverJobsPerSec > 0 {
		r.Ratio = math.Round(r.DroverTasksPerSec/r.RiverJobsPerSec*1000) / 1000
		r.RatioRiver = r.Ratio
		logf("compare: drover/river = %.3f", r.Ratio)
	}
	if r.DroverTasksPerSec > 0 && r.DBOSWorkflowsPerSec > 0 {
		r.RatioDBOS = math.Round(r.DroverTasksPerSec/r.DBOSWorkflowsPerSec*1000) / 1000
		logf("compare: drover/dbos = %.3f", r.RatioDBOS)
	}
	return r, nil
}

// systems runs each side on its own part of the database.
type systems struct {
	where   string
	drover  func(context.Context) (droverResult, error)
	river   func(context.Context) (riverResult, error)
	dbos    func(context.Context) (dbosResult, error) // nil: not on this database
	cleanup func()
}

func round3(x float64) float64 { return math.Round(x*1000) / 1000 }

func redact(db string) string {
	u, err := url.Parse(db)
	if err != nil || u.User == nil {
		return db
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxx")
	}
	return u.String()
}

// sqlitePaths gives drover and River their own files. SQLite has a single
// writer per file: sharing one file would make each system's writes wait for
// the other's (and for its leftover WAL), which is no part of either's cost.
func sqlitePaths(db string) (droverPath, riverPath, where string, cleanup func(), err error) {
	p := strings.TrimPrefix(db, "sqlite:")
	p = strings.TrimPrefix(p, "//")
	if p == "" {
		dir, err := os.MkdirTemp("", "drover-compare-")
		if err != nil {
			return "", "", "", nil, err
		}
		return filepath.Join(dir, "drover.db"), filepath.Join(dir, "river.db"), dir + "/{drover,river}.db (temporary)",
			func() { os.RemoveAll(dir) }, nil
	}
	ext := filepath.Ext(p)
	base := strings.TrimSuffix(p, ext)
	if ext == "" {
		ext = ".db"
	}
	droverPath, riverPath = base+"-drover"+ext, base+"-river"+ext
	return droverPath, riverPath, droverPath + " and " + riverPath, func() {}, nil
}

func removeSQLite(path string) {
	for _, suffix := range []string{"", "-wal", "-shm", "-journal"} {
		_ = os.Remove(path + suffix)
	}
}

// riverSQLiteDir finds the bench/riversqlite module: the flag, else next to
// this source file (go run keeps its path), else ./riversqlite.
func riverSQLiteDir(flagDir string) (string, error) {
	var cands []string
	if flagDir != "" {
		cands = append(cands, flagDir)
	} else {
		if _, file, _, ok := runtime.Caller(0); ok {
			cands = append(cands, filepath.Join(filepath.Dir(file), "..", "riversqlite"))
		}
		cands = append(cands, "riversqlite", filepath.Join("bench", "riversqlite"))
	}
	for _, d := range cands {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
	}
	return "", fmt.Errorf("cannot find the bench/riversqlite module (tried %s); pass --river-sqlite-dir", strings.Join(cands, ", "))
}

// runRiverSQLite builds the riversqlite module (a separate module: River's
// SQLite driver is published only for an older River release, see
// README.md) and runs it; the child times its own burn-down exactly like
// riverBurnDown here and prints its result as its last stdout line.
func runRiverSQLite(ctx context.Context, o options, path string) (riverResult, error) {
	var res riverResult
	dir, err := riverSQLiteDir(o.riverSQLiteDir)
	if err != nil {
		return res, err
	}
	tmp, err := os.MkdirTemp("", "drover-compare-bin-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "riversqlite")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, ".")
	build.Dir, build.Stdout, build.Stderr = dir, os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return res, fmt.Errorf("build %s: %w", dir, err)
	}
	args := []string{"--db", "sqlite:" + path, "--tasks", fmt.Sprint(o.tasks), "--workers", fmt.Sprint(o.workers),
		"--warmup", fmt.Sprint(o.warmup), "--timeout", o.timeout.String()}
	if o.verbose {
		args = append(args, "-v")
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	if err := cmd.Run(); err != nil {
		return res, fmt.Errorf("riversqlite: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil {
		return res, fmt.Errorf("riversqlite: last output line %q: %w", lines[len(lines)-1], err)
	}
	if res.Jobs != o.tasks {
		return res, errors.New("riversqlite: reported a different job count")
	}
	return res, nil
}
