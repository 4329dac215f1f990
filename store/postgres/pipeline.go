package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/drover-run/drover/store"
)

// Round trips, not rows, are what a transaction of the engine mostly waits
// for: a scheduler tick is two or three reads and five to eight writes whose
// results nobody reads. So inside a transaction the executor queues those
// writes (later) and sends them in one pipeline (a pgx.Batch) together with
// the next read, or with the COMMIT. A statement that fails aborts the
// transaction, and every queued write runs before any later read, so callers
// see exactly what they would with one round trip per statement; the error of
// a queued write surfaces from the next read or from the commit.

// batchSender is what pgx.Tx and *pgxpool.Conn offer to send a pipeline.
type batchSender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// pipe queues statements on one connection. For drover's own transactions
// (InTx) it also opens the transaction lazily: BEGIN goes out with the first
// pipeline and COMMIT with the last, so a transaction of one read and some
// writes is two round trips.
type pipe struct {
	c   batchSender
	own bool // pipe owns the transaction: it sends BEGIN, COMMIT, ROLLBACK
	// snapshot: the owned transaction is read-only at REPEATABLE READ, so
	// that all its reads see one snapshot (see Driver.inSnapshotTx).
	snapshot bool
	// lockTimeout is set as the owned transaction's lock_timeout (ms) when
	// not empty (Options.LockTimeout). BEGIN and the settings then go out
	// as a pipeline of their own (preamble) before the first statements:
	// pgx prepares a batch's statements before it runs any of them, and
	// preparing takes the tables' locks, so a lock held on a whole table
	// would otherwise be waited for before lock_timeout was set.
	lockTimeout string
	preamble    pgx.Batch
	// channel is the schema's LISTEN/NOTIFY channel.
	channel string
	begun   bool // BEGIN has been queued
	open    bool // BEGIN has been sent: the server has a transaction
	queued  pgx.Batch
	// tail holds the statements that go out last, just before COMMIT (or
	// the final flush of a caller's transaction), after every read: the
	// event inserts, whose event-writer lock readers of the history wait
	// for, so it is held only for the INSERT and the COMMIT rather than
	// across the transaction's later reads (see doc.go). Reads that look
	// at events send it first (sendTail).
	tail pgx.Batch
	// unchecked: a queued statement checks a condition in its result
	// callback (LeaseCheck), so the COMMIT must not go out in the same
	// pipeline, before that callback has run.
	unchecked bool
	// notes are the topics to notify once the transaction has committed
	// (see commit), in a transaction of their own.
	notes []string
}

// note adds a topic to notify after the commit.
func (p *pipe) note(topic string) {
	for _, t := range p.notes {
		if t == topic {
			return
		}
	}
	p.notes = append(p.notes, topic)
}

// tNotifyAfterCommit sends the notifications of a committed transaction in
// an implicit transaction of their own (the rest of the pipeline, up to its
// Sync), committed without waiting for its WAL flush: NOTIFY takes a lock
// that serializes every notifying transaction of the server from its commit
// until its commit is durable, and a notification needs no durability (it
// is a hint; a lost one costs a poll interval). The transaction's own
// commit, before it, still waits for its flush.
const tNotifyAfterCommit = `SELECT pg_notify($1, t)
 FROM set_config('synchronous_commit', 'off', true) AS s, unnest($2::text[]) AS t`

func (p *pipe) later(what, sql string, args []any, fn func(pgx.BatchResults) error) {
	p.queue(&p.queued, what, sql, args, fn)
}

// laterTail queues a write to go out last (see pipe.tail).
func (p *pipe) laterTail(what, sql string, args []any, fn func(pgx.BatchResults) error) {
	p.queue(&p.tail, what, sql, args, fn)
}

// setLocalPlanSettings is the statement after BEGIN in drover's own
// transactions (see begin): one statement for the three settings.
const setLocalPlanSettings = `SELECT set_config('enable_seqscan', 'off', true), set_config('jit', 'off', true),
 set_config('max_parallel_workers_per_gather', '0', true)`

// setLocalLockTimeout sets Options.LockTimeout ($1, in ms) for the
// transaction; after setLocalPlanSettings it is one more column.
const setLocalLockTimeout = `set_config('lock_timeout', $1, true)`

// begin queues BEGIN if the pipe owns the transaction and has not begun it.
//
// drover's own transactions also turn sequential scans off. Every statement
// they run is built around an index, but a table without planner statistics
// (a new schema, or a server whose autovacuum is off or has not reached it
// yet) makes the planner guess, and it guesses a whole-table scan for
// lookups such as "the steps of these tasks", which grows with every task
// ever run. With the setting off the planner takes the index whenever there
// is one; a statement without one still runs. They also run without JIT
// compilation and parallel workers, which the same guesses bring on (rows
// estimated by the ten thousand): 30–60 ms of compiling or starting
// workers for a 0.5 ms look-up. Local to the transaction, so the
// session's own settings (a role's, a pooler's) stay as they are. The
// caller's transactions (InExternalTx) are left as they are.
func (p *pipe) begin() {
	if p.own && !p.begun {
		p.begun = true
		begin := "BEGIN"
		if p.snapshot {
			begin = "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY"
		}
		if p.lockTimeout != "" {
			p.preamble.Queue(begin).Fn = execFn("begin")
			p.preamble.Queue(setLocalPlanSettings+", "+setLocalLockTimeout, p.lockTimeout).Fn = execFn("begin")
			return
		}
		p.queued.Queue(begin).Fn = execFn("begin")
		p.queued.Queue(setLocalPlanSettings).Fn = execFn("begin")
	}
}

func (p *pipe) queue(b *pgx.Batch, what, sql string, args []any, fn func(pgx.BatchResults) error) {
	p.begin()
	q := b.Queue(sql, args...)
	if fn == nil {
		q.Fn = execFn(what)
		return
	}
	q.Fn = func(br pgx.BatchResults) error {
		if err := fn(br); err != nil {
			return fmt.Errorf("postgres: %s: %w", what, translate(err))
		}
		return nil
	}
}

// sendTail moves the tail to the end of the queue, so it goes out with the
// next read: for reads of the events table, which must see the
// transaction's own events.
func (p *pipe) sendTail() {
	if p.tail.Len() > 0 {
		p.queued.QueuedQueries = append(p.queued.QueuedQueries, p.tail.QueuedQueries...)
		p.tail = pgx.Batch{}
	}
}

func execFn(what string) func(pgx.BatchResults) error {
	return func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("postgres: %s: %w", what, translate(err))
		}
		return nil
	}
}

func (p *pipe) flush(ctx context.Context) error {
	if p.preamble.Len() > 0 {
		b := p.preamble
		p.preamble = pgx.Batch{}
		p.open = true
		if err := p.c.SendBatch(ctx, &b).Close(); err != nil {
			return batchErr(err)
		}
	}
	if p.queued.Len() == 0 {
		return nil
	}
	b := p.queued
	p.queued = pgx.Batch{}
	p.open = p.begun
	p.unchecked = false
	return batchErr(p.c.SendBatch(ctx, &b).Close())
}

// batchErr translates an error of a pipeline that no statement's callback
// translated: one from pgx's step that prepares the statements before it
// sends them (a lock_timeout or a missing table there).
func batchErr(err error) error {
	var pre pgx.ErrPreprocessingBatch
	if !errors.As(err, &pre) {
		return err // nil, or a statement's callback made it, with its own context
	}
	return fmt.Errorf("postgres: %w", translate(err))
}

// execNow queues a statement, sends the pipeline and returns the
// statement's row count.
func (p *pipe) execNow(ctx context.Context, what, sql string, args []any) (int64, error) {
	var n int64
	p.later(what, sql, args, func(br pgx.BatchResults) error {
		tag, err := br.Exec()
		n = tag.RowsAffected()
		return err
	})
	return n, p.flush(ctx)
}

// scanFn reads a statement's rows with scan, then calls done (if set).
func scanFn(scan func(rows) error, done func() error) func(pgx.BatchResults) error {
	return func(br pgx.BatchResults) error {
		r, err := br.Query()
		if err != nil {
			return err
		}
		defer r.Close()
		for r.Next() {
			if err := scan(r); err != nil {
				return err
			}
		}
		if err := r.Err(); err != nil {
			return err
		}
		r.Close()
		if done != nil {
			return done()
		}
		return nil
	}
}

// run queues a read, sends the pipeline and calls scan for each of the
// read's rows.
func (p *pipe) run(ctx context.Context, what, sql string, args []any, scan func(rows) error) error {
	p.later(what, sql, args, scanFn(scan, nil))
	return p.flush(ctx)
}

// commit sends what is queued with COMMIT.
func (p *pipe) commit(ctx context.Context) error {
	if !p.begun { // nothing ran: no transaction to end
		p.queueNotes()
		return p.flush(ctx)
	}
	if p.unchecked {
		if err := p.flush(ctx); err != nil {
			return err
		}
	}
	p.sendTail()
	var tag string
	p.queued.Queue("COMMIT").Fn = func(br pgx.BatchResults) error {
		ct, err := br.Exec()
		tag = ct.String()
		if err != nil {
			return fmt.Errorf("postgres: commit: %w", translate(err))
		}
		return nil
	}
	p.queueNotes()
	if err := p.flush(ctx); err != nil && tag != "COMMIT" {
		// An error after COMMIT is the notification's: the transaction
		// committed, and listeners fall back to polling.
		return err
	}
	if tag != "COMMIT" { // PostgreSQL answers ROLLBACK to COMMIT in a failed transaction
		return fmt.Errorf("postgres: commit: %w", pgx.ErrTxCommitRollback)
	}
	p.begun, p.open = false, false
	return nil
}

// queueNotes queues the notifications (see tNotifyAfterCommit).
func (p *pipe) queueNotes() {
	if len(p.notes) > 0 {
		p.queued.Queue(tNotifyAfterCommit, p.channel, p.notes).Fn = execFn("notify")
		p.notes = nil
	}
}

// rollback ends the transaction if one was begun, dropping what is queued.
func (p *pipe) rollback(ctx context.Context) error {
	p.queued, p.tail, p.preamble, p.notes = pgx.Batch{}, pgx.Batch{}, pgx.Batch{}, nil
	if !p.open {
		p.begun = false
		return nil
	}
	p.begun = false
	p.queued.Queue("ROLLBACK").Fn = execFn("rollback")
	return p.flush(ctx)
}

// inPipelineTx runs fn in a transaction on a connection of the pool, with
// writes pipelined (see pipe).
func (d *Driver) inPipelineTx(ctx context.Context, fn func(*pipe) error) error {
	return d.runPipelineTx(ctx, false, fn)
}

// inSnapshotTx runs fn in a read-only REPEATABLE READ transaction: its
// reads all see the database as of the first one, where each statement of
// a READ COMMITTED transaction (and each read through Reader) sees the
// commits made before it started.
func (d *Driver) inSnapshotTx(ctx context.Context, fn func(*pipe) error) error {
	return d.runPipelineTx(ctx, true, fn)
}

func (d *Driver) runPipelineTx(ctx context.Context, snapshot bool, fn func(*pipe) error) (err error) {
	conn, err := d.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("postgres: begin: %w", translate(err))
	}
	p := &pipe{c: conn, own: true, snapshot: snapshot, channel: d.channel, lockTimeout: d.lockTimeout}
	committed := false
	defer func() {
		if !committed {
			// fn failed or panicked, or the commit failed. A connection
			// that cannot roll back is in an unknown state: close it so
			// the pool does not hand it out again.
			if rerr := p.rollback(context.WithoutCancel(ctx)); rerr != nil {
				_ = conn.Conn().Close(context.WithoutCancel(ctx))
			}
		}
		conn.Release()
	}()
	if err := fn(p); err != nil {
		return err
	}
	if err := p.commit(ctx); err != nil {
		return err
	}
	committed = true
	return nil
}

var _ batchSender = (*pgxpool.Conn)(nil)

// Tx is the application's access to the transaction of an Executor: its
// statements run in drover's transaction and commit or roll back with it.
type Tx interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// pgxTxConn is what pipe.c offers: *pgxpool.Conn and pgx.Tx both have it.
type pgxTxConn interface {
	batchSender
	Tx
}

// pipeTx runs the application's statements after drover's queued writes.
type pipeTx struct {
	p *pipe
	c Tx
}

func (t pipeTx) ready(ctx context.Context) error {
	t.p.begin()
	t.p.sendTail() // the application's statement may read events
	return t.p.flush(ctx)
}

func (t pipeTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := t.ready(ctx); err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := t.c.Exec(ctx, sql, args...)
	return tag, conflict(err)
}

func (t pipeTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := t.ready(ctx); err != nil {
		return nil, err
	}
	r, err := t.c.Query(ctx, sql, args...)
	if err != nil {
		return nil, conflict(err)
	}
	return conflictRows{r}, nil
}

func (t pipeTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if err := t.ready(ctx); err != nil {
		return errRow{err}
	}
	return conflictRow{t.c.QueryRow(ctx, sql, args...)}
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// conflictRows and conflictRow report a conflict the server aborted the
// transaction for as store.ErrConflict (see conflict).
type conflictRows struct{ pgx.Rows }

func (r conflictRows) Err() error { return conflict(r.Rows.Err()) }

type conflictRow struct{ pgx.Row }

func (r conflictRow) Scan(dest ...any) error { return conflict(r.Row.Scan(dest...)) }

// TxOf returns the transaction of an Executor that InTx or InExternalTx (with
// a pgx.Tx) handed out, so the application can run its own statements in
// drover's transaction: a convoy HandlerTx recording its effect in an
// application table, committed together with the message's completion, or a
// ledger processor's AfterPublish. drover's queued writes are sent before
// each of the application's statements. A statement that fails aborts the
// whole transaction; if the server aborted it for a deadlock or a
// serialization failure, its error wraps store.ErrConflict (the pgx error
// stays in the chain), as the driver's own errors do. Executors of a Reader, of another driver, or of a
// *sql.Tx (use that *sql.Tx directly) are refused with store.ErrUnsupportedTx.
func TxOf(x store.Executor) (Tx, error) {
	e, ok := x.(*executor)
	if !ok || !e.tx || e.p == nil {
		return nil, fmt.Errorf("postgres: TxOf(%T): not an Executor of a pipelined transaction of this driver: %w", x, store.ErrUnsupportedTx)
	}
	c, ok := e.p.c.(pgxTxConn)
	if !ok {
		return nil, fmt.Errorf("postgres: TxOf: connection %T cannot run statements: %w", e.p.c, store.ErrUnsupportedTx)
	}
	return pipeTx{p: e.p, c: c}, nil
}
