package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/drover-run/drover/store/postgres"
	"github.com/drover-run/drover/store/sqlite"
)

// postgresSystems puts drover and River in their own schemas of the one
// database, each dropped and recreated (then migrated) at the start of its
// run, so repeated runs start from empty tables. Each system has its own
// pgxpool with pgx's default size (max(4, CPUs) connections), which is what
// both postgres.Open and River's CLI use.
func postgresSystems(ctx context.Context, o options, logger *slog.Logger) (systems, error) {
	for _, s := range []string{o.droverSchema, o.riverSchema, o.dbosSchema} {
		if !validSchema(s) {
			return systems{}, fmt.Errorf("schema name %q: want [a-z_][a-z0-9_]*", s)
		}
	}
	if o.droverSchema == o.riverSchema || o.droverSchema == o.dbosSchema || o.riverSchema == o.dbosSchema {
		return systems{}, fmt.Errorf("drover, River and DBOS need different schemas")
	}
	admin, err := pgxpool.New(ctx, o.db)
	if err != nil {
		return systems{}, fmt.Errorf("postgres: %w", err)
	}
	if err := admin.Ping(ctx); err != nil {
		admin.Close()
		return systems{}, fmt.Errorf("postgres: %w", err)
	}
	exec := func(ctx context.Context, sql string) error {
		_, err := admin.Exec(ctx, sql)
		return err
	}
	dropSchema := func(ctx context.Context, s string) error {
		return exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{s}.Sanitize()+" CASCADE")
	}
	// A checkpoint before each measured run, so neither system pays for
	// flushing the other's (or its own insertion's) dirty pages. Needs
	// superuser or pg_checkpoint; skipped with a note otherwise.
	checkpoint := func(ctx context.Context) {
		if err := exec(ctx, "CHECKPOINT"); err != nil {
			logf("compare: CHECKPOINT skipped: %v", err)
		}
	}
	sys := systems{cleanup: admin.Close}
	// The WAL position, for each system's WAL bytes: the whole server's,
	// so it counts only this run's writes on an otherwise quiet server.
	walPos := func(ctx context.Context) (n int64, err error) {
		err = admin.QueryRow(ctx, "SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").Scan(&n)
		return n, err
	}
	analyze := func(schema string) func(context.Context) error {
		if !o.analyze {
			return nil
		}
		return func(ctx context.Context) error {
			rows, err := admin.Query(ctx, "SELECT format('%I.%I', schemaname, relname) FROM pg_stat_user_tables WHERE schemaname = $1", schema)
			if err != nil {
				return err
			}
			tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				return err
			}
			for _, t := range tables {
				if err := exec(ctx, "ANALYZE "+t); err != nil {
					return fmt.Errorf("analyze %s: %w", t, err)
				}
			}
			logf("compare: analyzed %d tables of %s", len(tables), schema)
			return nil
		}
	}

	sys.drover = func(ctx context.Context) (droverResult, error) {
		if err := dropSchema(ctx, o.droverSchema); err != nil {
			return droverResult{}, fmt.Errorf("drop schema %s: %w", o.droverSchema, err)
		}
		drv, err := postgres.Open(ctx, withAppName(o.db, "drover-compare"), postgres.Options{Schema: o.droverSchema})
		if err != nil {
			return droverResult{}, err
		}
		defer drv.Close()
		if err := drv.Migrate(ctx); err != nil {
			return droverResult{}, fmt.Errorf("drover migrate: %w", err)
		}
		checkpoint(ctx)
		res, err := droverBurnDown(ctx, drv, droverBenchConfig{
			Tasks: o.tasks, Steps: o.steps, Warmup: o.warmup, Timeout: o.timeout, CPUProfile: o.cpuprofile, Logger: logger, Log: logf,
			BeforeStart: analyze(o.droverSchema), WALPosition: walPos,
		})
		if err == nil && !o.keep {
			drv.Close()
			err = dropSchema(ctx, o.droverSchema)
		}
		return res, err
	}

	sys.river = func(ctx context.Context) (riverResult, error) {
		schema := pgx.Identifier{o.riverSchema}.Sanitize()
		if err := dropSchema(ctx, o.riverSchema); err != nil {
			return riverResult{}, fmt.Errorf("drop schema %s: %w", o.riverSchema, err)
		}
		if err := exec(ctx, "CREATE SCHEMA "+schema); err != nil {
			return riverResult{}, err
		}
		cfg, err := pgxpool.ParseConfig(o.db)
		if err != nil {
			return riverResult{}, err
		}
		if _, ok := cfg.ConnConfig.RuntimeParams["application_name"]; !ok {
			cfg.ConnConfig.RuntimeParams["application_name"] = "river-compare"
		}
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			return riverResult{}, err
		}
		defer pool.Close()
		driver := riverpgxv5.New(pool)
		m, err := rivermigrate.New(driver, &rivermigrate.Config{Schema: o.riverSchema, Logger: logger})
		if err != nil {
			return riverResult{}, err
		}
		if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
			return riverResult{}, fmt.Errorf("river migrate: %w", err)
		}
		checkpoint(ctx)
		res, err := riverBurnDown(ctx, driver, riverBenchConfig{
			Jobs: o.tasks, Warmup: o.warmup, Workers: o.workers, Schema: o.riverSchema, Driver: "riverpgxv5",
			Timeout: o.timeout, Logger: logger, Log: logf, BeforeStart: analyze(o.riverSchema), WALPosition: walPos,
			CountCompleted: func(ctx context.Context) (n int64, err error) {
				err = pool.QueryRow(ctx, "SELECT count(*) FROM "+schema+".river_job WHERE state = 'completed'").Scan(&n)
				return n, err
			},
		})
		if err == nil && !o.keep {
			pool.Close()
			err = dropSchema(ctx, o.riverSchema)
		}
		return res, err
	}
	sys.dbos = func(ctx context.Context) (dbosResult, error) {
		if err := dropSchema(ctx, o.dbosSchema); err != nil {
			return dbosResult{}, fmt.Errorf("drop schema %s: %w", o.dbosSchema, err)
		}
		checkpoint(ctx)
		res, err := dbosBurnDown(ctx, dbosBenchConfig{
			URL: o.db, Schema: o.dbosSchema, Workflows: o.tasks, Steps: o.steps, Warmup: o.warmup,
			WorkerConcurrency: o.dbosConcurrency, Polling: o.dbosPolling, Timeout: o.timeout,
			Logger: logger, Log: logf, BeforeStart: analyze(o.dbosSchema), WALPosition: walPos,
		})
		if err == nil && !o.keep {
			err = dropSchema(ctx, o.dbosSchema)
		}
		return res, err
	}
	return sys, nil
}

// sqliteSystems gives drover and River their own files (see sqlitePaths),
// deleted first so every run starts empty. Both use mattn/go-sqlite3 with the
// same settings: WAL, synchronous=FULL (drover's default: a commit survives
// power loss), one write connection. River on SQLite runs in a child process
// built from bench/riversqlite (see README.md).
func sqliteSystems(ctx context.Context, o options, logger *slog.Logger) (systems, error) {
	droverPath, riverPath, where, cleanup, err := sqlitePaths(o.db)
	if err != nil {
		return systems{}, err
	}
	sys := systems{where: where, cleanup: cleanup}
	sys.drover = func(ctx context.Context) (droverResult, error) {
		removeSQLite(droverPath)
		drv, err := sqlite.Open(ctx, droverPath, sqlite.Options{Create: true})
		if err != nil {
			return droverResult{}, err
		}
		defer drv.Close()
		if err := drv.Migrate(ctx); err != nil {
			return droverResult{}, fmt.Errorf("drover migrate: %w", err)
		}
		res, err := droverBurnDown(ctx, drv, droverBenchConfig{
			Tasks: o.tasks, Steps: o.steps, Warmup: o.warmup, Timeout: o.timeout, CPUProfile: o.cpuprofile, Logger: logger, Log: logf,
		})
		if err == nil && !o.keep {
			drv.Close()
			removeSQLite(droverPath)
		}
		return res, err
	}
	sys.river = func(ctx context.Context) (riverResult, error) {
		removeSQLite(riverPath)
		res, err := runRiverSQLite(ctx, o, riverPath)
		if err == nil && !o.keep {
			removeSQLite(riverPath)
		}
		return res, err
	}
	return sys, nil
}

// withAppName sets application_name in a postgres:// URL unless it is set,
// so each system's sessions can be told apart in pg_stat_activity.
func withAppName(db, name string) string {
	u, err := url.Parse(db)
	if err != nil || u.Scheme == "" {
		return db
	}
	q := u.Query()
	if q.Get("application_name") == "" {
		q.Set("application_name", name)
		u.RawQuery = q.Encode()
	}
	return u.String()
}

func validSchema(s string) bool {
	if s == "" || len(s) > 63 {
		return false
	}
	for i, c := range s {
		if !(c == '_' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}
