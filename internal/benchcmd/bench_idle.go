package benchcmd

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/drover-run/drover/internal/clicore"
	"github.com/drover-run/drover/store/postgres"
)

// BenchIdleResult is what "drover bench idle" reports; with --json it is
// the last line on stdout.
type BenchIdleResult struct {
	Mode      string  `json:"mode"` // "idle"
	Processes int     `json:"processes"`
	Roles     string  `json:"roles"`
	Seconds   float64 `json:"seconds"`
	// Transactions is the database's committed and rolled-back
	// transactions over Seconds (pg_stat_database), less the benchmark's
	// own reads.
	Transactions        int64   `json:"transactions"`
	TxPerSec            float64 `json:"tx_per_sec"`
	TxPerSecPerProcess  float64 `json:"tx_per_sec_per_process"`
	WarmupSeconds       float64 `json:"warmup_seconds"`
	MeasurementFootnote string  `json:"note"`
}

type benchIdleFlags struct {
	processes int
	roles     string
	duration  time.Duration
	warmup    time.Duration
}

func (e *env) benchIdleCmd() *cobra.Command {
	var f benchIdleFlags
	cmd := &cobra.Command{
		Use:   "idle",
		Short: "Measure what idle drover servers cost PostgreSQL: transactions per second with nothing to do",
		Long: `bench idle measures the cost of idle processes to the database.

It starts --processes "drover server" processes (this binary) with --roles on
one PostgreSQL schema with no work in it, waits --warmup, and counts the
database's transactions (pg_stat_database: committed and rolled back) over
--for. tx_per_sec_per_process is the figure to compare: while notifications
arrive (LISTEN/NOTIFY), an idle process's roles poll only as a slow fallback,
sleep until their next due time, and renew their leases every third of the
lease's TTL.

pg_stat_database counts every session of the database, so run it against a
database nothing else uses (createdb drover_idle, say). The statistics of an
idle session reach pg_stat_database up to a few seconds late: the longer
--for, the less that matters.

--db must be a PostgreSQL URL. Without --schema a temporary schema
drover_bench_<random> is used and dropped afterwards.`,
		Example: `  createdb drover_idle
  drover bench idle --db postgres://postgres@127.0.0.1:5432/drover_idle --processes 10 --for 60s --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case f.processes <= 0 || f.processes > 200:
				return clicore.Usagef("--processes must be 1-200, got %d", f.processes)
			case f.duration < time.Second:
				return clicore.Usagef("--for must be at least 1s, got %s", f.duration)
			case f.warmup < 0:
				return clicore.Usagef("--warmup must not be negative, got %s", f.warmup)
			case !cmd.Flags().Changed("db"):
				return clicore.Usagef("--db is required: a PostgreSQL URL (bench idle measures PostgreSQL's transactions)")
			}
			synchronous := ""
			explicit, tempSchema, err := e.benchTarget(cmd, &synchronous)
			if err != nil {
				return err
			}
			if !explicit.Postgres {
				return clicore.Usagef("--db must be a PostgreSQL URL: bench idle counts PostgreSQL's transactions")
			}
			return e.runBenchIdle(cmd.Context(), f, explicit, tempSchema)
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&f.processes, "processes", 1, "idle drover server processes to start")
	fl.StringVar(&f.roles, "roles", "all", "the servers' --roles")
	fl.DurationVar(&f.duration, "for", 60*time.Second, "how long to count transactions")
	fl.DurationVar(&f.warmup, "warmup", 15*time.Second, "how long to wait after the servers are ready")
	return cmd
}

func (e *env) runBenchIdle(ctx context.Context, f benchIdleFlags, explicit *clicore.DBTarget, tempSchema bool) error {
	drv, cleanup, err := e.OpenScratch(ctx, explicit, tempSchema, "", "bench")
	if err != nil {
		return err
	}
	defer cleanup()
	pg, ok := drv.Driver.(*postgres.Driver)
	if !ok {
		return fmt.Errorf("bench idle: the store is not PostgreSQL")
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("bench idle: find this binary: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	prefix := "idle-" + clicore.RandomHex(3) + "-"
	for i := range f.processes {
		c := exec.CommandContext(ctx, self, "server", "--db", drv.Target.URL, "--schema", drv.Target.Schema,
			"--roles", f.roles, "--instance-id", fmt.Sprintf("%s%d", prefix, i), "--log-level", "warn")
		c.Env = append(os.Environ(), "DROVER_API_TOKENS=")
		c.Cancel = func() error { return c.Process.Signal(os.Interrupt) }
		c.WaitDelay = 30 * time.Second
		stderr, err := c.StderrPipe()
		if err != nil {
			return err
		}
		if err := c.Start(); err != nil {
			return fmt.Errorf("bench idle: start drover server: %w", err)
		}
		wg.Add(1)
		go func() { defer wg.Done(); _ = c.Wait() }()
		ready := make(chan error, 1)
		go func() {
			sc := bufio.NewScanner(stderr)
			var last string
			for sc.Scan() {
				if strings.HasPrefix(sc.Text(), "drover server ready") {
					ready <- nil
					_, _ = io.Copy(io.Discard, stderr)
					return
				}
				last = sc.Text()
			}
			ready <- fmt.Errorf("bench idle: a drover server exited before it was ready: %s", last)
		}()
		select {
		case err := <-ready:
			if err != nil {
				return err
			}
		case <-time.After(time.Minute):
			return fmt.Errorf("bench idle: a drover server was not ready within a minute")
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if !e.JSON {
		fmt.Fprintf(e.Stderr, "%d idle servers ready; waiting %s, then counting for %s\n", f.processes, f.warmup, f.duration)
	}
	select {
	case <-time.After(f.warmup):
	case <-ctx.Done():
		return ctx.Err()
	}
	// Each read is a transaction of the database's too: subtracted below.
	count := func() (int64, error) {
		var n int64
		err := pg.Pool().QueryRow(ctx, `SELECT pg_stat_clear_snapshot(), xact_commit + xact_rollback
 FROM pg_stat_database WHERE datname = current_database()`).Scan(nil, &n)
		return n, err
	}
	before, err := count()
	if err != nil {
		return fmt.Errorf("bench idle: read pg_stat_database: %w", err)
	}
	start := time.Now()
	select {
	case <-time.After(f.duration):
	case <-ctx.Done():
		return ctx.Err()
	}
	after, err := count()
	if err != nil {
		return fmt.Errorf("bench idle: read pg_stat_database: %w", err)
	}
	secs := time.Since(start).Seconds()
	tx := max(0, after-before-1)
	r := BenchIdleResult{Mode: "idle", Processes: f.processes, Roles: f.roles, Seconds: secs, Transactions: tx,
		TxPerSec: float64(tx) / secs, TxPerSecPerProcess: float64(tx) / secs / float64(f.processes),
		WarmupSeconds:       f.warmup.Seconds(),
		MeasurementFootnote: "pg_stat_database counts every session of the database: run it on a database of its own"}
	if e.JSON {
		return clicore.WriteJSON(e.Stdout, r)
	}
	fmt.Fprintf(e.Stdout, "%d idle processes (roles %s): %d transactions in %.1fs: %.2f tx/s, %.2f tx/s per process\n",
		r.Processes, r.Roles, r.Transactions, r.Seconds, r.TxPerSec, r.TxPerSecPerProcess)
	return nil
}
