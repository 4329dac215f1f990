package postgres

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	migs "github.com/drover-run/drover/store/internal/migrations"
	"hash/fnv"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/drover-run/drover/store"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// DefaultSchema is the schema drover uses when Options.Schema is empty.
const DefaultSchema = "drover"

// Options configure Open and New.
type Options struct {
	// Schema is the PostgreSQL schema holding every drover table, created by
	// Migrate, so drover can share a database with the application. It must
	// match [a-z_][a-z0-9_]* (at most 63 bytes). Default "drover".
	Schema string
	// LockTimeout, when positive, bounds how long drover's own
	// transactions, its migrations and the reads of Reader and
	// SchemaVersion wait for a lock another session holds (lock_timeout,
	// set inside each transaction, so the session's setting and a
	// transaction pooler are left alone; reads then run in a short
	// transaction, and BEGIN with the settings goes out in a round trip
	// of its own, before pgx prepares the statements, which takes table
	// locks too). Past it the call fails with store.ErrLocked. Zero: the
	// session's setting (by default, wait). For short-lived callers such
	// as a CLI: it costs every transaction a round trip, and a read
	// outside one three more (BEGIN, the setting and ROLLBACK around it).
	LockTimeout time.Duration
}

// Driver is a store.Driver on one schema of a PostgreSQL database. Any number
// of drivers, in any number of processes, may share the schema.
type Driver struct {
	pool     *pgxpool.Pool
	channel  string // LISTEN/NOTIFY channel of the schema
	ownsPool bool
	schema   string
	// lockTimeout is Options.LockTimeout in milliseconds, "" for none.
	lockTimeout string
	q           *queries

	eventLockKey   int64 // advisory lock marking event writers of this schema (shared)
	migrateLockKey int64 // advisory lock serializing migrators of this schema

	// eventFinal: every event ID up to it is committed or rolled back
	// (proven by some reader earlier; only grows, per event sequence).
	// eventWaitMax bounds how long a reader waits for the writers it saw;
	// eventWaiting, for tests, is called when a reader starts waiting.
	eventFinal   atomic.Pointer[eventMark]
	eventWaitMax time.Duration
	eventWaiting func()
	// eventProving lets one reader at a time list the event writers (a
	// pg_locks read takes every lock-table partition); readers that waited
	// behind it use what it proved. eventJoined, for tests, is called when
	// a reader starts waiting behind another.
	eventProving chan struct{}
	eventJoined  func()
	// eventStalled is set while the last proof on the pool gave up on a
	// writer that stayed open: readers behind it do not try again.
	eventStalled atomic.Bool

	closeOnce sync.Once
}

var _ store.Driver = (*Driver)(nil)

// pingAfterIdle is how long a pooled connection may sit idle before the
// pool pings it before use.
const pingAfterIdle = 30 * time.Second

var schemaName = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// Open connects to the PostgreSQL database at url (a postgres:// URL or a
// key=value connection string, as pgxpool.ParseConfig takes; pool settings
// such as pool_max_conns go in it too) and checks that the server answers.
// Close closes the pool Open made.
func Open(ctx context.Context, url string, opts Options) (*Driver, error) {
	if err := normalize(&opts); err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("postgres: parse connection string: %w", err)
	}
	if _, ok := cfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		cfg.ConnConfig.RuntimeParams["application_name"] = "drover"
	}
	cfg.AfterConnect = func(_ context.Context, c *pgx.Conn) error {
		RegisterArrayEncoders(c.TypeMap())
		return nil
	}
	// pgxpool pings a connection idle for over a second before handing it
	// out: an idle process's every transaction would cost a ping too. A
	// connection that died meanwhile fails its transaction instead, which
	// drover's roles retry.
	cfg.ShouldPing = func(_ context.Context, p pgxpool.ShouldPingParams) bool { return p.IdleDuration > pingAfterIdle }
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: open pool: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: connect to %s:%d: %w", cfg.ConnConfig.Host, cfg.ConnConfig.Port, translate(err))
	}
	d := newDriver(pool, opts)
	d.ownsPool = true
	return d, nil
}

// New returns a driver on a pool the caller made and keeps owning: Close
// leaves it open. The pool may use any search_path; drover qualifies every
// name with its schema. Calling RegisterArrayEncoders from the pool's
// AfterConnect makes drover's batch statements cheaper to encode, as on the
// pool Open makes.
func New(pool *pgxpool.Pool, opts Options) (*Driver, error) {
	if pool == nil {
		return nil, errors.New("postgres: nil pool")
	}
	if err := normalize(&opts); err != nil {
		return nil, err
	}
	return newDriver(pool, opts), nil
}

func normalize(opts *Options) error {
	if opts.Schema == "" {
		opts.Schema = DefaultSchema
	}
	if !schemaName.MatchString(opts.Schema) || len(opts.Schema) > 63 {
		return fmt.Errorf("postgres: schema name %q: want [a-z_][a-z0-9_]*, at most 63 bytes", opts.Schema)
	}
	if opts.LockTimeout < 0 {
		return fmt.Errorf("postgres: lock timeout %s is negative", opts.LockTimeout)
	}
	return nil
}

func newDriver(pool *pgxpool.Pool, opts Options) *Driver {
	var lockTimeout string
	if opts.LockTimeout > 0 {
		lockTimeout = strconv.FormatInt(max(1, opts.LockTimeout.Milliseconds()), 10) // lock_timeout's unit: ms
	}
	return &Driver{
		pool:           pool,
		schema:         opts.Schema,
		lockTimeout:    lockTimeout,
		q:              newQueries(pgx.Identifier{opts.Schema}.Sanitize()),
		channel:        "drover_" + opts.Schema,
		eventLockKey:   lockKey("drover.events", opts.Schema),
		eventWaitMax:   time.Second,
		eventProving:   make(chan struct{}, 1),
		migrateLockKey: lockKey("drover.migrate", opts.Schema),
	}
}

// lockKey derives a stable advisory-lock key from a purpose and a schema, so
// stores in different schemas of one database never contend.
func lockKey(purpose, schema string) int64 {
	h := fnv.New64a()
	h.Write([]byte(purpose))
	h.Write([]byte{0})
	h.Write([]byte(schema))
	return int64(h.Sum64())
}

// Name implements store.Driver.
func (d *Driver) Name() string { return "postgres" }

// Schema returns the schema the store lives in.
func (d *Driver) Schema() string { return d.schema }

// Pool returns the connection pool, for applications that submit inside
// their own transaction: Begin on it (or on any pool to the same database)
// and pass the pgx.Tx to SubmitTx.
func (d *Driver) Pool() *pgxpool.Pool { return d.pool }

// Close implements store.Driver. It closes the pool if Open made it; a pool
// passed to New stays open.
func (d *Driver) Close() error {
	d.closeOnce.Do(func() {
		if d.ownsPool {
			d.pool.Close()
		}
	})
	return nil
}

// InTx implements store.Driver. The transaction is READ COMMITTED; reads
// through its Executor lock the rows they return (FOR UPDATE). It is not
// retried: a deadlock or serialization error is returned to the caller,
// wrapping store.ErrConflict.
// Writes are pipelined (see the package documentation, "Round trips").
func (d *Driver) InTx(ctx context.Context, fn func(context.Context, store.Executor) error) error {
	return d.inPipelineTx(ctx, func(p *pipe) error {
		return fn(ctx, &executor{d: d, p: p, tx: true})
	})
}

// InExternalTx implements store.Driver. tx is the caller's transaction on the
// same database: a pgx.Tx (from pgx or pgxpool) or a *sql.Tx opened through
// the pgx database/sql driver (github.com/jackc/pgx/v5/stdlib). The caller
// commits or rolls back. Statements name drover's schema explicitly, so the
// transaction's search_path does not matter and is not changed.
//
// If fn writes events, subscribers of the history see no event with a higher
// ID until the transaction ends (see the package documentation): commit
// promptly.
//
// A *sql.DB keeps 2 idle connections unless told otherwise
// (SetMaxIdleConns): with more concurrent transactions than that, each
// further one opens a connection and prepares drover's statements anew.
// Raise it to the concurrency you run, or build the *sql.DB on a pool with
// stdlib.OpenDBFromPool.
func (d *Driver) InExternalTx(ctx context.Context, tx any, fn func(context.Context, store.Executor) error) error {
	var q querier
	switch t := tx.(type) {
	case *sql.Tx:
		if t != nil {
			q = sqlQuerier{t}
		}
	case pgx.Tx:
		if v := reflect.ValueOf(t); v.Kind() != reflect.Pointer || !v.IsNil() {
			// Writes are pipelined on the caller's transaction too, and
			// sent before fn's work is handed back.
			p := &pipe{c: t}
			if err := fn(ctx, &executor{d: d, p: p, tx: true}); err != nil {
				return err
			}
			p.sendTail()
			return p.flush(ctx)
		}
	}
	if q == nil {
		return fmt.Errorf("postgres: got %T, want pgx.Tx or *sql.Tx: %w", tx, store.ErrUnsupportedTx)
	}
	return fn(ctx, &executor{d: d, q: q, tx: true})
}

// Reader implements store.Driver. Its reads run on the pool, each in its own
// implicit transaction (TaskGetManyWithSteps, TaskCountLockedBy and
// TaskListLockedBy in a short transaction of their own, and every read, with
// Options.LockTimeout, in one that sets lock_timeout), and lock nothing; it
// refuses writes.
func (d *Driver) Reader() store.Executor { return &executor{d: d, q: pgxQuerier{d.pool}} }

// translate maps PostgreSQL errors to the store's sentinels, keeping the
// original error (and its pgconn details) in the chain.
func translate(err error) error {
	if err == nil {
		return nil
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "42P01", "3F000": // undefined_table, invalid_schema_name
			return fmt.Errorf("%w: %w", store.ErrNotMigrated, err)
		case "55P03": // lock_not_available (lock_timeout)
			return fmt.Errorf("%w: %w", store.ErrLocked, err)
		}
	}
	return conflict(err)
}

// conflict wraps the errors of a transaction the server aborted because it
// conflicted with another one, deadlock_detected (40P01) and
// serialization_failure (40001), with store.ErrConflict, and those of a
// value it refused, data exceptions (class 22) and program_limit_exceeded
// (54000, an index row too large), with store.ErrBadData; it returns any
// other error unchanged.
func conflict(err error) error {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return err
	}
	switch {
	case (pe.Code == "40P01" || pe.Code == "40001") && !errors.Is(err, store.ErrConflict):
		return fmt.Errorf("%w: %w", store.ErrConflict, err)
	case (strings.HasPrefix(pe.Code, "22") || pe.Code == "54000") && !errors.Is(err, store.ErrBadData):
		return fmt.Errorf("%w: %w", store.ErrBadData, err)
	}
	return err
}

func migrations() ([]migs.Migration, error) {
	ms, err := migs.Load(migrationFS, "migrations")
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	return ms, nil
}

// migrateTx runs fn in a transaction holding the schema's migration lock, so
// concurrent migrators (several processes starting at once) take turns.
func (d *Driver) migrateTx(ctx context.Context, fn func(tx pgx.Tx) error) (err error) {
	tx, err := d.pool.Begin(ctx)
	if err != nil {
		return translate(err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	if d.lockTimeout != "" {
		if _, err := tx.Exec(ctx, "SELECT "+setLocalLockTimeout, d.lockTimeout); err != nil {
			return translate(err)
		}
	}
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, d.migrateLockKey); err != nil {
		return translate(err)
	}
	if err := fn(tx); err != nil {
		return err
	}
	return translate(tx.Commit(ctx))
}

// Migrate implements store.Driver. It creates the schema if it is missing,
// then applies each embedded migration not yet applied, each in its own
// transaction under a per-schema advisory lock. A schema migrated by a newer
// drover fails with store.ErrSchemaTooNew.
func (d *Driver) Migrate(ctx context.Context) error {
	ms, err := migrations()
	if err != nil {
		return err
	}
	latest := ms[len(ms)-1].Version
	var applied int
	err = d.migrateTx(ctx, func(tx pgx.Tx) error {
		// CREATE SCHEMA IF NOT EXISTS would demand the CREATE privilege on
		// the database even when the schema exists; look first, so a schema
		// a DBA made beforehand is enough.
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, d.schema).Scan(&exists); err != nil {
			return translate(err)
		}
		if !exists {
			if _, err := tx.Exec(ctx, d.q.createSchema); err != nil {
				return translate(err)
			}
		}
		if _, err := tx.Exec(ctx, d.q.migrationsTable); err != nil {
			return translate(err)
		}
		return translate(tx.QueryRow(ctx, d.q.migrationMax).Scan(&applied))
	})
	if err != nil {
		return fmt.Errorf("postgres: migrate schema %s: %w", d.schema, err)
	}
	if applied > latest {
		return fmt.Errorf("postgres: schema %s is at version %d, this drover knows %d: %w", d.schema, applied, latest, store.ErrSchemaTooNew)
	}
	for _, m := range ms {
		err := d.migrateTx(ctx, func(tx pgx.Tx) error {
			var done bool
			if err := tx.QueryRow(ctx, d.q.migrationApplied, m.Version).Scan(&done); err != nil {
				return translate(err)
			}
			if done {
				return nil
			}
			// Our own transaction: SET LOCAL ends with it.
			if _, err := tx.Exec(ctx, d.q.searchPath); err != nil {
				return translate(err)
			}
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return translate(err)
			}
			_, err := tx.Exec(ctx, d.q.migrationRecord, m.Version, m.Name)
			return translate(err)
		})
		if err != nil {
			return fmt.Errorf("postgres: migration %s in schema %s: %w", m.Name, d.schema, err)
		}
	}
	return nil
}

// SchemaVersion implements store.Driver. A schema that does not exist yet is
// at version 0.
func (d *Driver) SchemaVersion(ctx context.Context) (applied, latest int, err error) {
	ms, err := migrations()
	if err != nil {
		return 0, 0, err
	}
	latest = ms[len(ms)-1].Version
	err = d.bounded(ctx, func(c Tx) error {
		var exists bool
		if err := c.QueryRow(ctx, d.q.migrationsExist).Scan(&exists); err != nil || !exists {
			return err
		}
		return c.QueryRow(ctx, d.q.migrationMax).Scan(&applied)
	})
	if err != nil {
		return 0, latest, fmt.Errorf("postgres: schema version: %w", translate(err))
	}
	return applied, latest, nil
}

// bounded runs reads outside drover's transactions: on the pool, or, with
// Options.LockTimeout, in a short transaction that sets it first, so that
// they too wait at most that long for a lock (one held on a whole table,
// say by a migration).
func (d *Driver) bounded(ctx context.Context, fn func(c Tx) error) (err error) {
	if d.lockTimeout == "" {
		return fn(d.pool)
	}
	tx, err := d.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("postgres: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }() // reads only: nothing to commit
	if _, err := tx.Exec(ctx, "SELECT "+setLocalLockTimeout, d.lockTimeout); err != nil {
		return fmt.Errorf("postgres: set lock_timeout: %w", err)
	}
	return fn(tx)
}
