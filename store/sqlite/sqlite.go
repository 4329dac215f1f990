package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	migs "github.com/drover-run/drover/store/internal/migrations"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/drover-run/drover/store"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// Options configure Open.
type Options struct {
	// Create makes the file if it does not exist. Without it a missing file is
	// an error, so a mistyped path never yields an empty store.
	Create bool
	// BusyTimeout is how long a write waits for another process's lock
	// before failing with store.ErrLocked. Default 10s.
	BusyTimeout time.Duration
	// Synchronous is SQLite's synchronous setting: "full" (default: a
	// committed transaction survives power loss) or "normal" (survives a
	// process crash; faster).
	Synchronous string
	// ReadConns is the size of the read pool. Default 4.
	ReadConns int
}

// Driver is a store.Driver on one SQLite file.
type Driver struct {
	path  string
	write *sql.DB
	read  *sql.DB

	prepMu sync.Mutex                           // serializes prepare and Close
	stmts  atomic.Pointer[map[string]*sql.Stmt] // hot statements prepared so far (copy on write)
	closed bool
}

var _ store.Driver = (*Driver)(nil)

// Open opens (and with Options.Create, creates) the SQLite store at path.
// It checks the file really is a SQLite database before returning.
func Open(ctx context.Context, path string, opts Options) (*Driver, error) {
	if path == "" {
		return nil, errors.New("sqlite: empty database path")
	}
	if opts.BusyTimeout <= 0 {
		opts.BusyTimeout = 10 * time.Second
	}
	switch strings.ToLower(opts.Synchronous) {
	case "":
		opts.Synchronous = "FULL"
	case "full", "normal":
		opts.Synchronous = strings.ToUpper(opts.Synchronous)
	default:
		return nil, fmt.Errorf("sqlite: synchronous must be full or normal, got %q", opts.Synchronous)
	}
	if opts.ReadConns <= 0 {
		opts.ReadConns = 4
	}
	if !opts.Create {
		fi, err := os.Stat(path)
		if err != nil {
			return nil, fmt.Errorf("sqlite: database file %s: %w", path, err)
		}
		if fi.Size() == 0 {
			// SQLite would happily turn it into a database; a reader must
			// not change the file it was pointed at.
			return nil, fmt.Errorf("sqlite: database file %s is empty: %w (run `drover migrate` to create the schema)", path, store.ErrNotMigrated)
		}
	} else if dir := filepath.Dir(path); dir != "" {
		if _, err := os.Stat(dir); err != nil {
			return nil, fmt.Errorf("sqlite: directory of database file %s: %w", path, err)
		}
	}

	cfg := connConfig{busyTimeout: opts.BusyTimeout, synchronous: opts.Synchronous, create: opts.Create, write: true}
	write, err := sql.Open(DriverName, dsn(path, cfg))
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	write.SetMaxOpenConns(1)
	write.SetMaxIdleConns(1)
	write.SetConnMaxLifetime(0)
	write.SetConnMaxIdleTime(0)

	d := &Driver{path: path, write: write}
	// Touch the file: fails fast on a non-database or locked file.
	if _, err := write.ExecContext(ctx, "SELECT count(*) FROM sqlite_master"); err != nil {
		write.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, translate(err))
	}

	read, err := sql.Open(DriverName, dsn(path, connConfig{busyTimeout: opts.BusyTimeout}))
	if err != nil {
		write.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	read.SetMaxOpenConns(opts.ReadConns)
	read.SetMaxIdleConns(opts.ReadConns)
	d.read = read
	return d, nil
}

// Name implements store.Driver.
func (d *Driver) Name() string { return "sqlite" }

// Path returns the database file path.
func (d *Driver) Path() string { return d.path }

// DB returns the write database handle, for applications that submit inside
// their own transaction (BeginTx on it and pass the *sql.Tx to SubmitTx).
func (d *Driver) DB() *sql.DB { return d.write }

// Close implements store.Driver.
func (d *Driver) Close() error {
	d.prepMu.Lock()
	d.closed = true
	if m := d.stmts.Swap(nil); m != nil {
		for _, s := range *m {
			s.Close()
		}
	}
	d.prepMu.Unlock()
	return errors.Join(d.read.Close(), d.write.Close())
}

// InTx implements store.Driver.
func (d *Driver) InTx(ctx context.Context, fn func(context.Context, store.Executor) error) error {
	tx, err := d.write.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlite: begin: %w", translate(err))
	}
	x := &executor{d: d, tx: tx, prepared: true}
	err = d.runTx(ctx, tx, x, fn)
	// The hot statements the transaction ran unprepared are prepared now
	// that it ended and the connection is free again.
	d.prepare(context.WithoutCancel(ctx), x.unprepared)
	return err
}

// runTx runs fn on x, then commits tx or, if fn failed, rolls it back.
func (d *Driver) runTx(ctx context.Context, tx *sql.Tx, x *executor, fn func(context.Context, store.Executor) error) error {
	if err := fn(ctx, x); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		if errors.Is(err, sql.ErrTxDone) && ctx.Err() != nil {
			// ctx ended before the commit and database/sql rolled the
			// transaction back: say why.
			return fmt.Errorf("sqlite: commit: rolled back: %w", context.Cause(ctx))
		}
		return fmt.Errorf("sqlite: commit: %w", translate(err))
	}
	return nil
}

// InExternalTx implements store.Driver. tx must be a *sql.Tx opened on the same
// SQLite file (for instance from DB()).
func (d *Driver) InExternalTx(ctx context.Context, tx any, fn func(context.Context, store.Executor) error) error {
	sqlTx, ok := tx.(*sql.Tx)
	if !ok || sqlTx == nil {
		return fmt.Errorf("sqlite: got %T, want *sql.Tx: %w", tx, store.ErrUnsupportedTx)
	}
	return fn(ctx, &executor{d: d, tx: sqlTx})
}

// Reader implements store.Driver.
func (d *Driver) Reader() store.Executor { return &executor{d: d, db: d.read} }

// prepare prepares hot statements (of hotQueries) that a transaction ran
// unprepared, so that later transactions run them prepared. Each is
// prepared the first time a transaction needs it, not all of them at once
// (there are hundreds, counting each row count of the multi-row
// statements: some 200ms), and after that transaction, not in it: the
// write pool has one connection, and preparing on the pool from inside a
// transaction would wait for it forever. ctx carries no deadline of the
// caller's, which has had its transaction. A statement that fails to
// prepare (the schema is not migrated yet) stays unprepared until the
// next try.
func (d *Driver) prepare(ctx context.Context, queries []string) {
	if len(queries) == 0 {
		return
	}
	d.prepMu.Lock()
	defer d.prepMu.Unlock()
	if d.closed {
		return
	}
	old := d.stmts.Load()
	stmts := make(map[string]*sql.Stmt, len(queries))
	if old != nil {
		stmts = make(map[string]*sql.Stmt, len(*old)+len(queries))
		for q, s := range *old {
			stmts[q] = s
		}
	}
	added := false
	for _, q := range queries {
		if stmts[q] != nil {
			continue
		}
		s, err := d.write.PrepareContext(ctx, q)
		if err != nil {
			continue
		}
		stmts[q], added = s, true
	}
	if added {
		d.stmts.Store(&stmts)
	}
}

// stmt returns the prepared statement for a hot query, or nil.
func (d *Driver) stmt(query string) *sql.Stmt {
	if m := d.stmts.Load(); m != nil {
		return (*m)[query]
	}
	return nil
}

// isHot reports whether query is one of hotQueries.
func isHot(query string) bool {
	hotOnce.Do(func() {
		hotSet = make(map[string]bool, len(hotQueries))
		for _, q := range hotQueries {
			hotSet[q] = true
		}
	})
	return hotSet[query]
}

var (
	hotOnce sync.Once
	hotSet  map[string]bool
)

func migrations() ([]migs.Migration, error) {
	ms, err := migs.Load(migrationFS, "migrations")
	if err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	return ms, nil
}

const createMigrationsTable = `CREATE TABLE IF NOT EXISTS drover_migrations (
    version    INTEGER NOT NULL PRIMARY KEY,
    name       TEXT    NOT NULL,
    applied_at INTEGER NOT NULL
)`

// Migrate implements store.Driver. Each migration runs in its own
// transaction; concurrent migrators serialize on the write lock.
func (d *Driver) Migrate(ctx context.Context) error {
	ms, err := migrations()
	if err != nil {
		return err
	}
	if _, err := d.write.ExecContext(ctx, createMigrationsTable); err != nil {
		return fmt.Errorf("sqlite: migrate: %w", translate(err))
	}
	for _, m := range ms {
		tx, err := d.write.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("sqlite: migrate: %w", translate(err))
		}
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM drover_migrations WHERE version = ?`, m.Version).Scan(&n); err != nil {
			_ = tx.Rollback() // the error above is the one to report
			return fmt.Errorf("sqlite: migrate: %w", translate(err))
		}
		if n > 0 {
			_ = tx.Rollback() // the error above is the one to report
			continue
		}
		if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
			_ = tx.Rollback() // the error above is the one to report
			return fmt.Errorf("sqlite: migration %s: %w", m.Name, translate(err))
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO drover_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
			m.Version, m.Name, time.Now().UnixMicro()); err != nil {
			_ = tx.Rollback() // the error above is the one to report
			return fmt.Errorf("sqlite: migration %s: %w", m.Name, translate(err))
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("sqlite: migration %s: %w", m.Name, translate(err))
		}
	}
	return nil
}

// SchemaVersion implements store.Driver.
func (d *Driver) SchemaVersion(ctx context.Context) (applied, latest int, err error) {
	ms, err := migrations()
	if err != nil {
		return 0, 0, err
	}
	latest = ms[len(ms)-1].Version
	var exists int
	if err := d.read.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type='table' AND name='drover_migrations'`).Scan(&exists); err != nil {
		return 0, latest, fmt.Errorf("sqlite: schema version: %w", translate(err))
	}
	if exists == 0 {
		return 0, latest, nil
	}
	var v sql.NullInt64
	if err := d.read.QueryRowContext(ctx, `SELECT max(version) FROM drover_migrations`).Scan(&v); err != nil {
		return 0, latest, fmt.Errorf("sqlite: schema version: %w", translate(err))
	}
	return int(v.Int64), latest, nil
}

// TxOf returns the *sql.Tx of an Executor that InTx or InExternalTx handed
// out, so the application can run its own statements in drover's
// transaction: a convoy HandlerTx recording its effect in an application
// table, committed together with the message's completion, or a ledger
// processor's AfterPublish. A statement that fails should make the caller
// return its error, which rolls the whole transaction back. A Reader's or
// another driver's Executor is refused with store.ErrUnsupportedTx.
func TxOf(x store.Executor) (*sql.Tx, error) {
	e, ok := x.(*executor)
	if !ok || e.tx == nil {
		return nil, fmt.Errorf("sqlite: TxOf(%T): not an Executor of a transaction of this driver: %w", x, store.ErrUnsupportedTx)
	}
	return e.tx, nil
}
