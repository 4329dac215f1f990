// Command riversqlite burns down N no-op River jobs on SQLite (or, for a
// version check, on PostgreSQL) and prints the result as one JSON object on
// its last stdout line. bench/compare runs it for River's side of a SQLite
// comparison; it is a module of its own because River's SQLite driver,
// riverdriver/riversqlite, is served by the Go module proxy only at v0.31.0,
// which does not build against later River releases, while bench/compare
// uses the latest River for PostgreSQL. See bench/README.md.
//
//	go run . --db sqlite:/tmp/river.db --tasks 50000
//	go run . --db 'postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable' --tasks 200000
//
// What is timed is described on riverBurnDown (riverburn.go, shared with
// bench/compare byte for byte).
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/mattn/go-sqlite3"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"
)

func main() {
	var (
		db      string
		tasks   int
		workers int
		warmup  int
		timeout time.Duration
		schema  string
		keep    bool
		verbose bool
	)
	flag.StringVar(&db, "db", "", "sqlite:PATH (file is created; should not exist) or a postgres:// URL")
	flag.IntVar(&tasks, "tasks", 10000, "jobs to burn down")
	flag.IntVar(&workers, "workers", 2000, "MaxWorkers (riverbench's value)")
	flag.IntVar(&warmup, "warmup", 1000, "jobs burned down first, not measured")
	flag.DurationVar(&timeout, "timeout", 0, "give up after this long (default 1m + 1ms per job)")
	flag.StringVar(&schema, "schema", "river_compare_sqlitemod", "PostgreSQL only: schema to drop, recreate and use")
	flag.BoolVar(&keep, "keep", false, "PostgreSQL only: keep the schema afterwards")
	flag.BoolVar(&verbose, "v", false, "log River's info-level messages")
	flag.Parse()
	if db == "" || tasks <= 0 || workers <= 0 || warmup < 0 {
		fmt.Fprintln(os.Stderr, "riversqlite: --db is required; --tasks and --workers must be positive")
		os.Exit(2)
	}
	if timeout == 0 {
		timeout = time.Minute + time.Duration(tasks)*time.Millisecond
	}
	level := slog.LevelWarn
	if verbose {
		level = slog.LevelInfo
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	cfg := riverBenchConfig{
		Jobs: tasks, Warmup: warmup, Workers: workers, Timeout: timeout, Logger: logger,
		Log: func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) },
	}
	var res riverResult
	var err error
	if strings.HasPrefix(db, "postgres://") || strings.HasPrefix(db, "postgresql://") {
		res, err = runPostgres(ctx, db, schema, keep, cfg)
	} else {
		res, err = runSQLite(ctx, strings.TrimPrefix(db, "sqlite:"), cfg)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "riversqlite:", err)
		os.Exit(1)
	}
	res.Seconds = math.Round(res.Seconds*1000) / 1000
	res.InsertSeconds = math.Round(res.InsertSeconds*1000) / 1000
	res.JobsPerSec = math.Round(res.JobsPerSec)
	res.CPUSeconds = math.Round(res.CPUSeconds*1000) / 1000
	b, _ := json.Marshal(res)
	fmt.Println(string(b))
}

// runSQLite opens the file with the settings drover's SQLite store uses
// (mattn/go-sqlite3, WAL, synchronous=FULL, busy timeout 10s, BEGIN
// IMMEDIATE, 32 MB cache) and, as River's docs and CLI do for SQLite, a pool
// of one connection: SQLite has one writer, and River's concurrent internal
// operations would otherwise fail with SQLITE_BUSY.
func runSQLite(ctx context.Context, path string, cfg riverBenchConfig) (riverResult, error) {
	if path == "" {
		return riverResult{}, fmt.Errorf("empty SQLite path")
	}
	q := url.Values{}
	q.Set("_busy_timeout", "10000")
	q.Set("_journal_mode", "WAL")
	q.Set("_synchronous", "FULL")
	q.Set("_txlock", "immediate")
	q.Set("_cache_size", "-32000")
	q.Set("mode", "rwc")
	// The DSN is a URI: escape what would end the path early.
	esc := strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(path)
	dbPool, err := sql.Open("sqlite3", "file:"+esc+"?"+q.Encode())
	if err != nil {
		return riverResult{}, err
	}
	defer dbPool.Close()
	dbPool.SetMaxOpenConns(1)
	dbPool.SetMaxIdleConns(1)
	dbPool.SetConnMaxLifetime(0)
	dbPool.SetConnMaxIdleTime(0)
	driver := riversqlite.New(dbPool)
	m, err := rivermigrate.New(driver, &rivermigrate.Config{Logger: cfg.Logger})
	if err != nil {
		return riverResult{}, err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return riverResult{}, fmt.Errorf("river migrate: %w", err)
	}
	cfg.Driver = "riversqlite (mattn/go-sqlite3)"
	cfg.CountCompleted = func(ctx context.Context) (n int64, err error) {
		err = dbPool.QueryRowContext(ctx, "SELECT count(*) FROM river_job WHERE state = 'completed'").Scan(&n)
		return n, err
	}
	return riverBurnDown(ctx, driver, cfg)
}

// runPostgres runs the same burn-down with this module's (older) River on
// PostgreSQL, to tell how much of a difference the River release makes.
func runPostgres(ctx context.Context, dbURL, schema string, keep bool, cfg riverBenchConfig) (riverResult, error) {
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return riverResult{}, err
	}
	defer pool.Close()
	ident := pgx.Identifier{schema}.Sanitize()
	if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+ident+" CASCADE; CREATE SCHEMA "+ident); err != nil {
		return riverResult{}, err
	}
	if !keep {
		defer func() { _, _ = pool.Exec(context.WithoutCancel(ctx), "DROP SCHEMA IF EXISTS "+ident+" CASCADE") }()
	}
	driver := riverpgxv5.New(pool)
	m, err := rivermigrate.New(driver, &rivermigrate.Config{Schema: schema, Logger: cfg.Logger})
	if err != nil {
		return riverResult{}, err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return riverResult{}, fmt.Errorf("river migrate: %w", err)
	}
	if _, err := pool.Exec(ctx, "CHECKPOINT"); err != nil {
		fmt.Fprintln(os.Stderr, "riversqlite: CHECKPOINT skipped:", err)
	}
	cfg.Schema, cfg.Driver = schema, "riverpgxv5"
	cfg.CountCompleted = func(ctx context.Context) (n int64, err error) {
		err = pool.QueryRow(ctx, "SELECT count(*) FROM "+ident+".river_job WHERE state = 'completed'").Scan(&n)
		return n, err
	}
	return riverBurnDown(ctx, driver, cfg)
}
