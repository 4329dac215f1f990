package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/store"
	"github.com/drover-run/drover/store/internal/ordering"
)

// rows is what the executor needs of a result set; pgx.Rows has it, and
// sqlRows adapts *sql.Rows.
type rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

// querier runs statements on the driver's pool, a pgx transaction or a
// database/sql transaction.
type querier interface {
	exec(ctx context.Context, sql string, args ...any) (int64, error)
	query(ctx context.Context, sql string, args ...any) (rows, error)
}

// pgxConn is the part of *pgxpool.Pool and pgx.Tx the executor uses.
type pgxConn interface {
	Exec(ctx context.Context, sql string, arguments ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

type pgxQuerier struct{ c pgxConn }

func (q pgxQuerier) exec(ctx context.Context, sql string, args ...any) (int64, error) {
	tag, err := q.c.Exec(ctx, sql, args...)
	return tag.RowsAffected(), err
}

func (q pgxQuerier) query(ctx context.Context, sql string, args ...any) (rows, error) {
	return q.c.Query(ctx, sql, args...)
}

// sqlQuerier runs on a *sql.Tx of the pgx database/sql driver, which hands
// every argument (arrays included) to pgx unchanged.
type sqlQuerier struct{ tx *sql.Tx }

func (q sqlQuerier) exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := q.tx.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (q sqlQuerier) query(ctx context.Context, query string, args ...any) (rows, error) {
	r, err := q.tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return sqlRows{r}, nil
}

type sqlRows struct{ *sql.Rows }

func (r sqlRows) Close() { _ = r.Rows.Close() }

// executor runs the primitives. tx is set inside a transaction (drover's or
// the caller's): reads lock the rows they return and writes are allowed. On
// the pool (Reader) reads lock nothing and writes are refused.
type executor struct {
	d  *Driver
	q  querier
	p  *pipe // set in pipelined transactions; then q is unused
	tx bool

	// eventLocked: this transaction already holds the event-writer lock.
	eventLocked bool
}

// The executor has every optional capability of store.Executor.
var (
	_ store.TaskClaimWithStepsExecutor = (*executor)(nil)
	_ store.TaskGetAndClaimExecutor    = (*executor)(nil)
	_ store.Notifier                   = (*executor)(nil)
)

var errReadOnly = errors.New("postgres: write outside a transaction (Reader is read-only)")

func (e *executor) write(what string) error {
	if !e.tx {
		return fmt.Errorf("%s: %w", what, errReadOnly)
	}
	return nil
}

// pick returns the locking variant of a read inside a transaction.
func (e *executor) pick(plain, locking string) string {
	if e.tx {
		return locking
	}
	return plain
}

func (e *executor) exec(ctx context.Context, what, query string, args ...any) (int64, error) {
	if e.p != nil {
		return e.p.execNow(ctx, what, query, args)
	}
	n, err := e.q.exec(ctx, query, args...)
	if err != nil {
		return 0, fmt.Errorf("postgres: %s: %w", what, translate(err))
	}
	return n, nil
}

// each runs query and calls scan for every row.
func (e *executor) each(ctx context.Context, what, query string, args []any, scan func(rows) error) error {
	if e.p != nil {
		return e.p.run(ctx, what, query, args, scan)
	}
	if !e.tx && e.d.lockTimeout != "" {
		// A Reader read with Options.LockTimeout: in a short transaction
		// that sets it (and only it: the session's plan settings stay).
		return e.d.bounded(ctx, func(c Tx) error { return each(ctx, pgxQuerier{c}, what, query, args, scan) })
	}
	return each(ctx, e.q, what, query, args, scan)
}

// each runs query on q and hands every row to scan.
func each(ctx context.Context, q querier, what, query string, args []any, scan func(rows) error) error {
	r, err := q.query(ctx, query, args...)
	if err != nil {
		return fmt.Errorf("postgres: %s: %w", what, translate(err))
	}
	defer r.Close()
	for r.Next() {
		if err := scan(r); err != nil {
			return fmt.Errorf("postgres: %s: %w", what, translate(err))
		}
	}
	if err := r.Err(); err != nil {
		return fmt.Errorf("postgres: %s: %w", what, translate(err))
	}
	return nil
}

// later runs a write whose result the caller does not need before its next
// read: in a pipelined transaction it is queued (see pipe), scan reads its
// rows when it runs, then done is called. Otherwise it runs now.
func (e *executor) later(ctx context.Context, what, query string, args []any, scan func(rows) error, done func() error) error {
	return e.queue(ctx, e.p.later, what, query, args, scan, done)
}

// laterTail is later for statements that go out last, just before the
// COMMIT (see pipe.tail); without a pipeline it runs the statement at once.
func (e *executor) laterTail(ctx context.Context, what, query string, args []any, scan func(rows) error, done func() error) error {
	return e.queue(ctx, e.p.laterTail, what, query, args, scan, done)
}

// sendTail lets the next statement see the transaction's tail writes.
func (e *executor) sendTail() {
	if e.p != nil {
		e.p.sendTail()
	}
}

func (e *executor) queue(ctx context.Context, q func(what, sql string, args []any, fn func(pgx.BatchResults) error),
	what, query string, args []any, scan func(rows) error, done func() error) error {
	if e.p != nil {
		if scan == nil {
			q(what, query, args, nil)
		} else {
			q(what, query, args, scanFn(scan, done))
		}
		return nil
	}
	if scan == nil {
		_, err := e.exec(ctx, what, query, args...)
		return err
	}
	if err := e.each(ctx, what, query, args, scan); err != nil {
		return err
	}
	if done != nil {
		if err := done(); err != nil {
			return fmt.Errorf("postgres: %s: %w", what, err)
		}
	}
	return nil
}

// ---- value helpers ----

func nullStr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// nullCol is a nullable text column of a batch statement ("" is NULL): its
// pointers point into one array of copies, so a column costs two
// allocations, not one per row.
type nullCol struct {
	vals []string
	ptrs []*string
}

func newNullCol(n int) nullCol { return nullCol{make([]string, n), make([]*string, n)} }

func (c nullCol) set(i int, s string) {
	if s != "" {
		c.vals[i] = s
		c.ptrs[i] = &c.vals[i]
	}
}

func fromTS(ts pgtype.Timestamptz) *time.Time {
	if !ts.Valid {
		return nil
	}
	t := ts.Time.UTC()
	return &t
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

func sortedIDs(ids []int64, want int, what string) ([]int64, error) {
	if len(ids) != want {
		return nil, fmt.Errorf("postgres: %s: %d rows inserted, want %d", what, len(ids), want)
	}
	slices.Sort(ids)
	return ids, nil
}

// scanIDs appends each row's single column to ids.
// The scan functions below declare their scan targets once, outside the
// per-row function: each target passed to Scan escapes to the heap, so
// declaring them per row cost an allocation per column and row.

func scanIDs[T int64 | string](ids *[]T) func(rows) error {
	var id T
	return func(r rows) error {
		if err := r.Scan(&id); err != nil {
			return err
		}
		*ids = append(*ids, id)
		return nil
	}
}

// ---- tasks ----

func scanTask(out *[]*dt.Task) func(rows) error {
	var (
		lockedBy, orderingKey, lastErr pgtype.Text
		completeBy                     pgtype.Timestamptz
		retryDelay                     int64
		orderingSeq                    pgtype.Int8
		workflowVersion, waitMax       int32
		state, onFailure               string
		waitDelay, waitMaxDelay        int64
		callbackEvents                 string
		priority                       int16
	)
	return func(r rows) error {
		var t dt.Task
		if err := r.Scan(&t.ID, &t.Workflow, &t.Input, &t.InputHash, &state, &lockedBy, &completeBy,
			&t.FailureCount, &t.CurrentStep, &t.StepCount, &orderingKey, &t.Output, &lastErr,
			&t.FailureThreshold, &onFailure, &retryDelay, &t.AvailableAt, &t.CreatedAt, &t.UpdatedAt, &orderingSeq,
			&workflowVersion, &t.CallbackURL, &waitMax, &waitDelay, &t.Wait.Multiplier, &waitMaxDelay, &callbackEvents, &t.Submitter, &t.TraceContext, &priority); err != nil {
			return err
		}
		t.Priority = int(priority)
		t.Wait.MaxWaits = int(waitMax)
		t.Wait.Delay = time.Duration(waitDelay) * time.Microsecond
		t.Wait.MaxDelay = time.Duration(waitMaxDelay) * time.Microsecond
		t.CallbackEvents = store.CallbackEvents(callbackEvents)
		t.WorkflowVersion = int(workflowVersion)
		t.OrderingSeq = orderingSeq.Int64
		t.ProcessState = dt.ProcessState(state)
		t.OnFailure = dt.FailurePolicy(onFailure)
		t.LockedBy = lockedBy.String
		t.CompleteBy = fromTS(completeBy)
		t.OrderingKey = orderingKey.String
		t.LastError = lastErr.String
		t.RetryDelay = time.Duration(retryDelay) * time.Microsecond
		t.AvailableAt = t.AvailableAt.UTC()
		t.CreatedAt = t.CreatedAt.UTC()
		t.UpdatedAt = t.UpdatedAt.UTC()
		*out = append(*out, &t)
		return nil
	}
}

func (e *executor) tasks(ctx context.Context, what, query string, args ...any) ([]*dt.Task, error) {
	var out []*dt.Task
	if err := e.each(ctx, what, query, args, scanTask(&out)); err != nil {
		return nil, err
	}
	return out, nil
}

func (e *executor) TaskInsertMany(ctx context.Context, params *store.TaskInsertManyParams) ([]bool, error) {
	tasks := params.Tasks
	inserted := make([]bool, len(tasks))
	if len(tasks) == 0 {
		return inserted, nil
	}
	if err := e.write("insert tasks"); err != nil {
		return nil, err
	}
	n := len(tasks)
	var (
		ids, workflows, hashes, states, onFailure = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		inputs, outputs                           = make([][]byte, n), make([][]byte, n)
		lockedBy, orderingKeys, lastErrs          = make([]*string, n), make([]*string, n), make([]*string, n)
		completeBy                                = make([]*time.Time, n)
		failures, current, stepCount, threshold   = make([]int32, n), make([]int32, n), make([]int32, n), make([]int32, n)
		retryDelay                                = make([]int64, n)
		orderingSeqs                              = make([]*int64, n)
		avail, created, updated                   = make([]time.Time, n), make([]time.Time, n), make([]time.Time, n)
		workflowVersions                          = make([]int32, n)
		callbackURLs                              = make([]string, n)
		waitMax                                   = make([]int32, n)
		waitDelay, waitMaxDelay                   = make([]int64, n), make([]int64, n)
		waitMultiplier                            = make([]float64, n)
		callbackEvents, submitters, traces        = make([]string, n), make([]string, n), make([]string, n)
		priorities                                = make([]int16, n)
		claimAt                                   = make([]time.Time, n)
	)
	for i, t := range tasks {
		callbackEvents[i], submitters[i], traces[i] = t.CallbackEvents.String(), t.Submitter, t.TraceContext
		workflowVersions[i], callbackURLs[i] = int32(t.WorkflowVersion), t.CallbackURL
		waitMax[i], waitDelay[i], waitMultiplier[i], waitMaxDelay[i] = int32(t.Wait.MaxWaits), t.Wait.Delay.Microseconds(), t.Wait.Multiplier, t.Wait.MaxDelay.Microseconds()
		ids[i], workflows[i], inputs[i], hashes[i], states[i] = t.ID, t.Workflow, nonNil(t.Input), t.InputHash, string(t.ProcessState)
		lockedBy[i], completeBy[i], failures[i], current[i] = nullStr(t.LockedBy), t.CompleteBy, int32(t.FailureCount), int32(t.CurrentStep)
		stepCount[i], orderingKeys[i], outputs[i], lastErrs[i] = int32(t.StepCount), nullStr(t.OrderingKey), t.Output, nullStr(t.LastError)
		threshold[i], onFailure[i], retryDelay[i] = int32(t.FailureThreshold), string(t.OnFailure), t.RetryDelay.Microseconds()
		avail[i], created[i], updated[i] = t.AvailableAt, t.CreatedAt, t.UpdatedAt
		priorities[i], claimAt[i] = int16(t.Priority), dt.ClaimAt(t.AvailableAt, t.Priority)
		if t.OrderingSeq != 0 {
			orderingSeqs[i] = &t.OrderingSeq
		}
	}
	got := make(map[string]bool, n)
	err := e.each(ctx, "insert tasks", e.d.q.taskInsert, []any{ids, workflows, inputs, hashes, states, lockedBy,
		completeBy, failures, current, stepCount, orderingKeys, outputs, lastErrs, threshold, onFailure, retryDelay,
		avail, created, updated, orderingSeqs, workflowVersions, callbackURLs, waitMax, waitDelay, waitMultiplier, waitMaxDelay,
		callbackEvents, submitters, traces, priorities, claimAt}, func(r rows) error {
		var id string
		if err := r.Scan(&id); err != nil {
			return err
		}
		got[id] = true
		return nil
	})
	if err != nil {
		return nil, err
	}
	for i, t := range tasks {
		inserted[i] = got[t.ID]
	}
	return inserted, nil
}

func (e *executor) TaskGet(ctx context.Context, params *store.TaskGetParams) (*dt.Task, error) {
	id := params.ID
	ts, err := e.tasks(ctx, "get task", e.pick(e.d.q.taskGet, e.d.q.taskGetLock), id)
	if err != nil {
		return nil, err
	}
	if len(ts) == 0 {
		return nil, fmt.Errorf("task %q: %w", id, store.ErrNotFound)
	}
	return ts[0], nil
}

func (e *executor) TaskGetMany(ctx context.Context, params *store.TaskGetManyParams) ([]*dt.Task, error) {
	ids := params.IDs
	if len(ids) == 0 {
		return nil, nil
	}
	return e.tasks(ctx, "get tasks", e.pick(e.d.q.taskGetMany, e.d.q.taskGetManyLock), ids)
}

func (e *executor) TaskList(ctx context.Context, p *store.TaskListParams) ([]*dt.Task, error) {
	var (
		where []string
		args  []any
	)
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	if len(p.States) > 0 {
		states := make([]string, len(p.States))
		for i, s := range p.States {
			states[i] = string(s)
		}
		where = append(where, `process_state = ANY(`+arg(states)+`::text[])`)
	}
	if p.Workflow != "" {
		where = append(where, `workflow = `+arg(p.Workflow))
	}
	if p.AfterID != "" {
		where = append(where, `id > `+arg(p.AfterID))
	}
	if p.OrderingKey != "" {
		where = append(where, `ordering_key = `+arg(p.OrderingKey))
	}
	if !p.UpdatedFrom.IsZero() {
		where = append(where, `updated_at >= `+arg(p.UpdatedFrom))
	}
	if !p.UpdatedBefore.IsZero() {
		where = append(where, `updated_at < `+arg(p.UpdatedBefore))
	}
	if ns, ok := store.ListNamespace(p.Namespace); ok {
		if ns == "" {
			where = append(where, `strpos(id, '/') = 0`)
		} else {
			lo, hi := store.NamespaceRange(ns)
			where = append(where, `id >= `+arg(lo)+` AND id < `+arg(hi))
		}
	}
	limit := ""
	if p.Limit > 0 {
		limit = ` LIMIT ` + arg(p.Limit)
	}
	list := func(order string, extra ...string) string {
		q := e.d.q.taskList
		if w := append(extra, where...); len(w) > 0 {
			q += ` WHERE ` + strings.Join(w, ` AND `)
		}
		return q + ` ORDER BY ` + order + limit
	}
	q := list(`id`)
	// A time range alone reads the final and the unfinished tasks through
	// the partial index by update time of each (the conditions repeat the
	// indexes' own), then keeps the first page of the two in ID order: its
	// cost follows the tasks in the range. Ordering by an expression keeps
	// the planner, which without statistics guesses the range matches few
	// rows, from walking the primary key instead (0.45 s for the last hour
	// of a million tasks). With a key, tasks_key serves.
	if (!p.UpdatedFrom.IsZero() || !p.UpdatedBefore.IsZero()) && p.OrderingKey == "" {
		q = `SELECT * FROM ((` + list(`id || ''`, finalStates) + `) UNION ALL (` + list(`id || ''`, activeStates) + `)) t ORDER BY id` + limit
	}
	return e.tasks(ctx, "list tasks", q, args...)
}

// finalStates is the condition of tasks_finished, the partial index of
// final tasks by update time; activeStates is its complement, whose tasks
// have no such index (it would cost every write of them).
const (
	finalStates  = `process_state IN ('Processed','Error','Compensated','Cancelled')`
	activeStates = `process_state IN ('Pending','Processing','Compensating')`
)

func (e *executor) count(ctx context.Context, what, query string, args ...any) (int, error) {
	var n int64
	err := e.each(ctx, what, query, args, func(r rows) error { return r.Scan(&n) })
	return int(n), err
}

func (e *executor) TaskCountByState(ctx context.Context, _ *store.TaskCountByStateParams) (map[dt.ProcessState]int, error) {
	out := map[dt.ProcessState]int{}
	err := e.each(ctx, "count tasks", e.d.q.taskCountByState, nil, func(r rows) error {
		var (
			s string
			n int64
		)
		if err := r.Scan(&s, &n); err != nil {
			return err
		}
		out[dt.ProcessState(s)] = int(n)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// TaskCountLockedBy runs often (each scheduler recounts what it holds), and
// on the Reader in a short transaction of its own, so that it too runs
// with sequential scans off: without planner statistics it would otherwise
// scan every task ever run (see begin in pipeline.go).
func (e *executor) TaskCountLockedBy(ctx context.Context, params *store.TaskCountLockedByParams) (n int, err error) {
	instance := params.Instance
	err = e.indexed(ctx, func(x *executor) error {
		n, err = x.count(ctx, "count held tasks", e.d.q.taskCountLockedBy, instance)
		return err
	})
	return n, err
}

// indexed runs fn on e inside a transaction, or else in a short
// transaction of its own, which, as every drover pipelined transaction,
// begins with sequential scans off (two round trips instead of one; for
// reads that run about once a second), and also has bitmap scans off: a
// plain index scan marks the index entries of dead row versions it meets
// (every task that was held once and is no longer), so the next read
// skips them, where a bitmap scan visits them all each time. (Counting
// one scheduler's held tasks after a 100,000-task burn-down on a server
// without autovacuum: 17–23 ms each time as a bitmap scan; 12 ms once,
// then 0.06 ms, as an index scan.) In a caller's transaction
// (InExternalTx) the caller's settings stay.
func (e *executor) indexed(ctx context.Context, fn func(x *executor) error) error {
	if e.tx {
		return fn(e)
	}
	return e.d.inPipelineTx(ctx, func(p *pipe) error {
		x := &executor{d: e.d, p: p}
		if err := x.later(ctx, "bitmap scans off", `SET LOCAL enable_bitmapscan = off`, nil, nil, nil); err != nil {
			return err
		}
		return fn(x)
	})
}

// TaskFinishedSince reads as indexed does, so that the newest final
// tasks come from tasks_finished whatever the planner's statistics say.
func (e *executor) TaskFinishedSince(ctx context.Context, params *store.TaskFinishedSinceParams) (out []store.FinishedTask, err error) {
	err = e.indexed(ctx, func(x *executor) error {
		out = out[:0]
		return x.each(ctx, "list finished tasks", e.d.q.taskFinishedSince, []any{params.Since, params.Limit}, func(r rows) error {
			var (
				f store.FinishedTask
				s string
			)
			if err := r.Scan(&s, &f.CreatedAt, &f.UpdatedAt); err != nil {
				return err
			}
			f.State, f.CreatedAt, f.UpdatedAt = dt.ProcessState(s), f.CreatedAt.UTC(), f.UpdatedAt.UTC()
			out = append(out, f)
			return nil
		})
	})
	return out, err
}

// TaskCountActive reads as indexed does: without planner statistics a
// plain read scans the whole table for it (0.12 s with a million final
// tasks) instead of the partial indexes.
func (e *executor) TaskCountActive(ctx context.Context, params *store.TaskCountActiveParams) (n int, err error) {
	ns, err := store.CountNamespace(params.Namespace)
	if err != nil {
		return 0, fmt.Errorf("postgres: count active tasks: %w", err)
	}
	err = e.indexed(ctx, func(x *executor) error {
		if ns != "" {
			lo, hi := store.NamespaceRange(ns)
			n, err = x.count(ctx, "count active tasks of a namespace", e.d.q.taskCountActiveIn, lo, hi)
			return err
		}
		n, err = x.count(ctx, "count active tasks", e.d.q.taskCountActive)
		return err
	})
	return n, err
}

func (e *executor) TaskCountActiveBySubmitter(ctx context.Context, params *store.TaskCountActiveBySubmitterParams) (int, error) {
	return e.count(ctx, "count active tasks of a submitter", e.d.q.taskCountActiveBySubmitter, params.Submitter)
}

func (e *executor) TaskDeleteFinished(ctx context.Context, params *store.TaskDeleteFinishedParams) (int, error) {
	before, limit := params.Before, params.Limit
	if err := e.write("retention"); err != nil {
		return 0, err
	}
	e.sendTail()
	var ids []string
	locked := map[string]bool{} // the keys the picks locked
	busy := []string{}          // keys another transaction holds
	// A few passes, each without the busy keys found so far, so that the
	// tasks of keys being submitted do not fill the batch.
	for pass := 0; pass < retentionPasses && len(ids) < limit; pass++ {
		want, rowsN, found := limit-len(ids), 0, 0
		err := e.each(ctx, "retention", e.d.q.taskPickFinished, []any{before, want, busy}, func(r rows) error {
			var (
				id           string
				key          *string
				lock, isBusy bool
			)
			if err := r.Scan(&id, &key, &lock, &isBusy); err != nil {
				return err
			}
			rowsN++
			switch {
			case isBusy:
				if !slices.Contains(busy, *key) {
					busy = append(busy, *key)
					found++
				}
			default:
				ids = append(ids, id)
				if key != nil && lock {
					locked[*key] = true
				}
			}
			return nil
		})
		if err != nil {
			return 0, err
		}
		if rowsN < want || found == 0 {
			break // no more candidates, or none passed over
		}
	}
	if len(ids) == 0 {
		return 0, nil
	}
	n := 0
	var keys []string
	err := e.each(ctx, "retention", e.d.q.taskDeleteFinished, []any{before, ids}, func(r rows) error {
		var key *string
		if err := r.Scan(&key); err != nil {
			return err
		}
		n++
		// Only keys this transaction holds are pruned: a key without a
		// row when the pick looked may have one by now.
		if key != nil && locked[*key] {
			keys = append(keys, *key)
		}
		return nil
	})
	if err != nil {
		return n, err
	}
	return n, e.OrderingKeyPrune(ctx, &store.OrderingKeyPruneParams{Keys: keys})
}

// OrderingKeyPrune implements store.Executor.
func (e *executor) OrderingKeyPrune(ctx context.Context, params *store.OrderingKeyPruneParams) error {
	keys := params.Keys
	if len(keys) == 0 {
		return nil
	}
	if err := e.write("prune ordering keys"); err != nil {
		return err
	}
	distinct, _ := ordering.Count(keys)
	return e.later(ctx, "prune ordering keys", e.d.q.orderingPrune, []any{distinct}, nil, nil)
}

// retentionPasses caps the picks of one TaskDeleteFinished.
const retentionPasses = 4

func (e *executor) TaskClaim(ctx context.Context, p *store.TaskClaimParams) ([]*dt.Task, error) {
	if err := e.write("claim tasks"); err != nil {
		return nil, err
	}
	if !p.WriteLater {
		at, id := claimAfter(p)
		return e.tasks(ctx, "claim tasks", e.d.q.taskClaim, p.Instance, p.Now, p.Limit, at, id)
	}
	at, id := claimAfter(p)
	ts, err := e.tasks(ctx, "claim tasks", e.d.q.taskClaimLock, p.Now, p.Limit, at, id)
	claimedLater(ts, p)
	return ts, err
}

// claimedLater sets what the claiming UPDATE would have on tasks a
// WriteLater claim only locked; the caller writes them.
func claimedLater(ts []*dt.Task, p *store.TaskClaimParams) {
	for _, t := range ts {
		t.LockedBy = p.Instance
		if t.ProcessState == dt.Pending {
			t.ProcessState = dt.Processing
		}
		t.UpdatedAt = time.UnixMicro(p.Now.UnixMicro()).UTC() // as stored
	}
}

// TaskClaimWithSteps implements store.TaskClaimWithStepsExecutor. With WriteLater, in a
// transaction, it is one statement (tTaskClaimLockSteps); otherwise the two
// calls.
func (e *executor) TaskClaimWithSteps(ctx context.Context, p *store.TaskClaimParams) ([]*dt.Task, []*dt.StepRecord, error) {
	if !p.WriteLater || e.p == nil {
		return store.ClaimThenListSteps(ctx, e, p)
	}
	if err := e.write("claim tasks"); err != nil {
		return nil, nil, err
	}
	var (
		tasks []*dt.Task
		steps []*dt.StepRecord
	)
	at, id := claimAfter(p)
	if err := e.each(ctx, "claim tasks", e.d.q.taskClaimLockSteps, []any{p.Now, p.Limit, at, id}, scanClaimWithSteps(&tasks, &steps)); err != nil {
		return nil, nil, err
	}
	claimedWithSteps(tasks, steps, p)
	return tasks, steps, nil
}

// claimAfter is the claim's start as parameters: TaskClaimParams.After, or
// -infinity (before every task) without it.
func claimAfter(p *store.TaskClaimParams) (any, string) {
	if p.After == nil {
		return pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}, ""
	}
	return p.After.ClaimAt, p.After.ID
}

// TaskGetAndClaim implements store.TaskGetAndClaimExecutor: in a pipelined transaction,
// with WriteLater, the three reads (tasks of ids, their steps, the claim
// with its steps) go out in one round trip. Tasks of ids that another
// transaction holds locked are skipped (tTaskGetManySkip); only when some
// task of ids is missing from the result does a second round trip find
// out which of them exist, and so are busy.
func (e *executor) TaskGetAndClaim(ctx context.Context, params *store.TaskGetAndClaimParams) (store.GetAndClaim, error) {
	ids, p := params.IDs, &params.Claim
	var r store.GetAndClaim
	if e.p == nil || (p.Limit > 0 && !p.WriteLater) {
		return store.GetThenClaim(ctx, e, params)
	}
	if err := e.write("claim tasks"); err != nil {
		return r, err
	}
	var steps, more []*dt.StepRecord
	if len(ids) > 0 {
		// The steps are read without locking them: only the steps of the
		// tasks this read locked are kept, and every writer of steps locks
		// their task first (the engine's order), so none can change them
		// before this transaction ends. This statement starts after the
		// task locks are taken, so it sees every earlier write. (The
		// claim's steps are different: read in the claim's own statement,
		// they need FOR UPDATE to see writes committed after its snapshot.)
		e.p.later("get tasks", e.d.q.taskGetManySkip, []any{ids}, scanFn(scanTask(&r.Got), nil))
		e.p.later("list steps", e.d.q.stepList, []any{ids}, scanFn(scanStep(&steps), nil))
	}
	if p.Limit > 0 {
		at, id := claimAfter(p)
		e.p.later("claim tasks", e.d.q.taskClaimLockSteps, []any{p.Now, p.Limit, at, id}, scanFn(scanClaimWithSteps(&r.Claimed, &more), nil))
	}
	if err := e.p.flush(ctx); err != nil {
		return store.GetAndClaim{}, err
	}
	got := make(map[string]bool, len(r.Got))
	for _, t := range r.Got {
		got[t.ID] = true
	}
	for _, s := range steps {
		if got[s.TaskID] {
			r.Steps = append(r.Steps, s)
		}
	}
	if len(r.Got) < len(ids) {
		var existing []string
		if err := e.each(ctx, "find tasks", e.d.q.taskExisting, []any{ids}, scanIDs(&existing)); err != nil {
			return store.GetAndClaim{}, err
		}
		for _, id := range existing {
			if !got[id] {
				r.Busy = append(r.Busy, id)
			}
		}
	}
	claimedWithSteps(r.Claimed, more, p)
	// The claim's steps, but for the tasks got: a task skipped as busy may
	// have been claimed (its holder's lock gone by the time the claim ran),
	// and then these are its only steps.
	for _, s := range more {
		if !got[s.TaskID] {
			r.Steps = append(r.Steps, s)
		}
	}
	return r, nil
}

// scanClaimWithSteps reads the rows of tTaskClaimLockSteps: a task row, or
// a step row (its first column, the task ID, NULL).
func scanClaimWithSteps(tasks *[]*dt.Task, steps *[]*dt.StepRecord) func(rows) error {
	asTask, asStep := scanTask(tasks), scanStep(steps)
	return func(r rows) error {
		pr, ok := r.(pgx.Rows)
		if !ok {
			return fmt.Errorf("rows of type %T", r)
		}
		if pr.RawValues()[0] == nil {
			return asStep(padded{r, nTaskCols, 0})
		}
		return asTask(padded{r, 0, nStepCols})
	}
}

// claimedWithSteps puts the rows of tTaskClaimLockSteps in order (a UNION
// promises none): the tasks in claim order, the steps by task and index.
// It also sets on the tasks what the caller will write.
func claimedWithSteps(tasks []*dt.Task, steps []*dt.StepRecord, p *store.TaskClaimParams) {
	sort.Slice(tasks, func(i, j int) bool {
		a, b := dt.ClaimAt(tasks[i].AvailableAt, tasks[i].Priority), dt.ClaimAt(tasks[j].AvailableAt, tasks[j].Priority)
		if !a.Equal(b) {
			return a.Before(b)
		}
		return tasks[i].ID < tasks[j].ID
	})
	sort.Slice(steps, func(i, j int) bool {
		if steps[i].TaskID != steps[j].TaskID {
			return steps[i].TaskID < steps[j].TaskID
		}
		return steps[i].Index < steps[j].Index
	})
	claimedLater(tasks, p)
}

// padded scans a row whose first before and last after columns belong to
// another kind of row (and are NULL here) into dest. pgx skips the columns
// of nil destinations.
type padded struct {
	rows
	before, after int
}

func (p padded) Scan(dest ...any) error {
	all := make([]any, p.before+len(dest)+p.after)
	copy(all[p.before:], dest)
	return p.rows.Scan(all...)
}

func (e *executor) TaskListLockedBy(ctx context.Context, params *store.TaskListLockedByParams) (ts []*dt.Task, err error) {
	instance, limit := params.Instance, params.Limit
	err = e.indexed(ctx, func(x *executor) error {
		ts, err = x.tasks(ctx, "list held tasks", e.d.q.taskListLockedBy, instance, limit)
		return err
	})
	return ts, err
}

// TaskNextAvailable reads with bitmap scans off, as TaskCountLockedBy
// (e.indexed).
func (e *executor) TaskNextAvailable(ctx context.Context, params *store.TaskNextAvailableParams) (next time.Time, err error) {
	lead := time.Duration(dt.MaxPriority) * dt.PriorityAging
	var first, earliest *time.Time
	var n int
	var dueNow bool
	err = e.indexed(ctx, func(x *executor) error {
		return x.each(ctx, "next available task", e.d.q.taskNextAvailable,
			[]any{params.Now, params.Now.Add(-lead), lead.Microseconds(), params.Limit, params.Due},
			func(r rows) error { return r.Scan(&first, &earliest, &n, &dueNow) })
	})
	switch {
	case err != nil:
		return time.Time{}, err
	case dueNow:
		return params.Now.UTC(), nil
	case first == nil:
		return time.Time{}, nil
	case n >= params.Limit || earliest == nil:
		return first.UTC(), nil
	}
	return earliest.UTC(), nil
}

func (e *executor) TaskListExpired(ctx context.Context, params *store.TaskListExpiredParams) ([]*dt.Task, error) {
	now, limit := params.Now, params.Limit
	if !e.tx || params.Peek {
		return e.tasks(ctx, "list expired tasks", e.d.q.taskListExpired, now, limit)
	}
	// Locked in ID order; handed back oldest deadline first, as on the pool.
	ts, err := e.tasks(ctx, "list expired tasks", e.d.q.taskListExpiredLock, now, limit)
	sort.SliceStable(ts, func(i, j int) bool { return ts[i].CompleteBy.Before(*ts[j].CompleteBy) })
	return ts, err
}

func (e *executor) TaskUpdateMany(ctx context.Context, params *store.TaskUpdateManyParams) error {
	tasks := params.Tasks
	if len(tasks) == 0 {
		return nil
	}
	if err := e.write("update tasks"); err != nil {
		return err
	}
	n := len(tasks)
	var (
		ids, states        = make([]string, n), make([]string, n)
		lockedBy, lastErrs = newNullCol(n), newNullCol(n)
		completeBy         = make([]*time.Time, n)
		failures, current  = make([]int32, n), make([]int32, n)
		outputs            = make([][]byte, n)
		avail, updated     = make([]time.Time, n), make([]time.Time, n)
		claimAt            = make([]time.Time, n)
	)
	for i, t := range tasks {
		lockedBy.set(i, t.LockedBy)
		lastErrs.set(i, t.LastError)
		ids[i], states[i], completeBy[i] = t.ID, string(t.ProcessState), t.CompleteBy
		failures[i], current[i], outputs[i] = int32(t.FailureCount), int32(t.CurrentStep), t.Output
		avail[i], updated[i], claimAt[i] = t.AvailableAt, t.UpdatedAt, dt.ClaimAt(t.AvailableAt, t.Priority)
	}
	return e.later(ctx, "update tasks", e.d.q.taskUpdate, []any{ids, states, lockedBy.ptrs, completeBy, failures, current,
		outputs, lastErrs.ptrs, avail, updated, claimAt}, nil, nil)
}

// OrderingKeyReserve implements store.Executor: one upsert of the keys'
// rows in ordering_keys, in sorted key order, each row locked until the
// transaction ends (see tOrderingReserve and doc.go).
func (e *executor) OrderingKeyReserve(ctx context.Context, params *store.OrderingKeyReserveParams) ([]int64, error) {
	keys := params.Keys
	if len(keys) == 0 {
		return nil, nil
	}
	if err := e.write("reserve ordering positions"); err != nil {
		return nil, err
	}
	distinct, counts := ordering.Count(keys)
	ns := make([]int64, len(distinct))
	for i, k := range distinct {
		ns[i] = counts[k]
	}
	last := make(map[string]int64, len(distinct))
	err := e.each(ctx, "reserve ordering positions", e.d.q.orderingReserve, []any{distinct, ns}, func(r rows) error {
		var (
			k string
			n int64
		)
		if err := r.Scan(&k, &n); err != nil {
			return err
		}
		last[k] = n
		return nil
	})
	if err != nil {
		return nil, err
	}
	seqs, err := ordering.Assign(keys, counts, last)
	if err != nil {
		return nil, fmt.Errorf("postgres: reserve ordering positions: %w", err)
	}
	return seqs, nil
}

// ---- steps ----

func (e *executor) StepInsertMany(ctx context.Context, params *store.StepInsertManyParams) error {
	steps := params.Steps
	if len(steps) == 0 {
		return nil
	}
	if err := e.write("insert steps"); err != nil {
		return err
	}
	n := len(steps)
	var (
		taskIDs, names, agents, comps, states, compStates = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		keys                                              = make([]string, n)
		index, failures, attempts                         = make([]int32, n), make([]int32, n), make([]int32, n)
		timeouts                                          = make([]int64, n)
		lockedBy, lastErrs                                = make([]*string, n), make([]*string, n)
		completeBy, started, finished                     = make([]*time.Time, n), make([]*time.Time, n), make([]*time.Time, n)
		outputs                                           = make([][]byte, n)
		updated                                           = make([]time.Time, n)
		onFailure                                         = make([]string, n)
		waitMax                                           = make([]*int32, n) // NULL: the task's wait policy
		waitDelay, waitMaxDelay                           = make([]*int64, n), make([]*int64, n)
		waitMultiplier                                    = make([]*float64, n)
		signals                                           = make([]string, n)
		signalDefaults                                    = make([][]byte, n)
		groups                                            = make([]string, n)
		finishSeqs                                        = make([]int32, n)
	)
	for i, s := range steps {
		groups[i], finishSeqs[i] = s.Group, int32(s.FinishSeq)
		onFailure[i] = string(s.OnFailure)
		signals[i], signalDefaults[i] = s.Signal, s.SignalDefault
		if w := s.Wait; w != nil {
			m, d, x, f := int32(w.MaxWaits), w.Delay.Microseconds(), w.MaxDelay.Microseconds(), w.Multiplier
			waitMax[i], waitDelay[i], waitMaxDelay[i], waitMultiplier[i] = &m, &d, &x, &f
		}
		taskIDs[i], index[i], names[i], agents[i], timeouts[i] = s.TaskID, int32(s.Index), s.Name, s.Agent, s.Timeout.Microseconds()
		comps[i], states[i], compStates[i], lockedBy[i] = s.Compensation, string(s.ProcessState), string(s.CompensationState), nullStr(s.LockedBy)
		completeBy[i], failures[i], attempts[i], keys[i] = s.CompleteBy, int32(s.FailureCount), int32(s.Attempt), s.IdempotencyKey
		outputs[i], lastErrs[i], started[i], finished[i], updated[i] = s.Output, nullStr(s.LastError), s.StartedAt, s.FinishedAt, s.UpdatedAt
	}
	return e.later(ctx, "insert steps", e.d.q.stepInsert, []any{taskIDs, index, names, agents, timeouts, comps, states,
		compStates, lockedBy, completeBy, failures, attempts, keys, outputs, lastErrs, started, finished, updated,
		onFailure, waitMax, waitDelay, waitMultiplier, waitMaxDelay, signals, signalDefaults, groups, finishSeqs}, nil, nil)
}

func (e *executor) StepListByTasks(ctx context.Context, params *store.StepListByTasksParams) ([]*dt.StepRecord, error) {
	taskIDs := params.TaskIDs
	if len(taskIDs) == 0 {
		return nil, nil
	}
	var out []*dt.StepRecord
	if err := e.each(ctx, "list steps", e.pick(e.d.q.stepList, e.d.q.stepListLock), []any{taskIDs}, scanStep(&out)); err != nil {
		return nil, err
	}
	return out, nil
}

// TaskGetManyWithSteps implements store.Executor: in a transaction both
// reads go out in one pipeline, one round trip. On the Reader they run in a
// read-only REPEATABLE READ transaction of their own, so that the steps are
// those of the tasks as read (two round trips).
func (e *executor) TaskGetManyWithSteps(ctx context.Context, params *store.TaskGetManyWithStepsParams) (tasks []*dt.Task, steps []*dt.StepRecord, err error) {
	ids := params.IDs
	if len(ids) == 0 {
		return nil, nil, nil
	}
	if !e.tx && e.p == nil {
		err = e.d.inSnapshotTx(ctx, func(p *pipe) error {
			var err error
			tasks, steps, err = (&executor{d: e.d, p: p}).TaskGetManyWithSteps(ctx, &store.TaskGetManyWithStepsParams{IDs: ids})
			return err
		})
		return tasks, steps, err
	}
	if err := e.later(ctx, "get tasks", e.pick(e.d.q.taskGetMany, e.d.q.taskGetManyLock), []any{ids}, scanTask(&tasks), nil); err != nil {
		return nil, nil, err
	}
	if err := e.later(ctx, "list steps", e.pick(e.d.q.stepList, e.d.q.stepListLock), []any{ids}, scanStep(&steps), nil); err != nil {
		return nil, nil, err
	}
	if e.p != nil {
		if err := e.p.flush(ctx); err != nil {
			return nil, nil, err
		}
	}
	return tasks, steps, nil
}

// scanStep appends each row, read as stepCols, to out.
func scanStep(out *[]*dt.StepRecord) func(r rows) error {
	var (
		timeout                           int64
		state, compState                  string
		lockedBy, lastErr                 pgtype.Text
		completeBy, startedAt, finishedAt pgtype.Timestamptz
		onFailure                         string
		waitMax                           pgtype.Int4
		waitDelay, waitMaxDelay           pgtype.Int8
		waitMultiplier                    pgtype.Float8
	)
	return func(r rows) error {
		var s dt.StepRecord
		if err := r.Scan(&s.TaskID, &s.Index, &s.Name, &s.Agent, &timeout, &s.Compensation, &state, &compState,
			&lockedBy, &completeBy, &s.FailureCount, &s.Attempt, &s.IdempotencyKey, &s.Output, &lastErr,
			&startedAt, &finishedAt, &s.UpdatedAt, &onFailure, &waitMax, &waitDelay, &waitMultiplier, &waitMaxDelay,
			&s.Signal, &s.SignalDefault, &s.Group, &s.FinishSeq); err != nil {
			return err
		}
		s.OnFailure = dt.FailurePolicy(onFailure)
		if waitMax.Valid {
			s.Wait = &dt.WaitPolicy{MaxWaits: int(waitMax.Int32), Delay: time.Duration(waitDelay.Int64) * time.Microsecond,
				Multiplier: waitMultiplier.Float64, MaxDelay: time.Duration(waitMaxDelay.Int64) * time.Microsecond}
		}
		s.Timeout = time.Duration(timeout) * time.Microsecond
		s.ProcessState = dt.ProcessState(state)
		s.CompensationState = dt.ProcessState(compState)
		s.LockedBy = lockedBy.String
		s.CompleteBy = fromTS(completeBy)
		s.LastError = lastErr.String
		s.StartedAt = fromTS(startedAt)
		s.FinishedAt = fromTS(finishedAt)
		s.UpdatedAt = s.UpdatedAt.UTC()
		*out = append(*out, &s)
		return nil
	}
}

func (e *executor) StepUpdateMany(ctx context.Context, params *store.StepUpdateManyParams) error {
	steps := params.Steps
	if len(steps) == 0 {
		return nil
	}
	if err := e.write("update steps"); err != nil {
		return err
	}
	n := len(steps)
	var (
		taskIDs, states, compStates   = make([]string, n), make([]string, n), make([]string, n)
		index, failures, attempts     = make([]int32, n), make([]int32, n), make([]int32, n)
		lockedBy, lastErrs            = newNullCol(n), newNullCol(n)
		completeBy, started, finished = make([]*time.Time, n), make([]*time.Time, n), make([]*time.Time, n)
		outputs                       = make([][]byte, n)
		updated                       = make([]time.Time, n)
		keys                          = make([]string, n)
		finishSeqs                    = make([]int32, n)
	)
	for i, s := range steps {
		keys[i], finishSeqs[i] = s.IdempotencyKey, int32(s.FinishSeq)
		taskIDs[i], index[i], states[i], compStates[i] = s.TaskID, int32(s.Index), string(s.ProcessState), string(s.CompensationState)
		lockedBy.set(i, s.LockedBy)
		lastErrs.set(i, s.LastError)
		completeBy[i], failures[i], attempts[i] = s.CompleteBy, int32(s.FailureCount), int32(s.Attempt)
		outputs[i], started[i], finished[i], updated[i] = s.Output, s.StartedAt, s.FinishedAt, s.UpdatedAt
	}
	return e.later(ctx, "update steps", e.d.q.stepUpdate, []any{taskIDs, index, states, compStates, lockedBy.ptrs, completeBy,
		failures, attempts, outputs, lastErrs.ptrs, started, finished, updated, keys, finishSeqs}, nil, nil)
}

// ---- agent requests ----

func (e *executor) RequestInsertMany(ctx context.Context, params *store.RequestInsertManyParams) error {
	reqs := params.Requests
	if len(reqs) == 0 {
		return nil
	}
	if err := e.write("insert requests"); err != nil {
		return err
	}
	n := len(reqs)
	var (
		agents, taskIDs, kinds, keys, scheds = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		index, attempts                      = make([]int32, n), make([]int32, n)
		completeBy, created                  = make([]time.Time, n), make([]time.Time, n)
		claimedBy                            = make([]*string, n)
		prevOwn                              = make([]bool, n)
		prevOut                              = make([][]byte, n)
	)
	for i, r := range reqs {
		if r.PreviousOwn {
			prevOwn[i], prevOut[i] = true, r.PreviousOutput
		}
		agents[i], taskIDs[i], index[i], attempts[i], kinds[i] = r.Agent, r.TaskID, int32(r.StepIndex), int32(r.Attempt), string(r.Kind)
		keys[i], completeBy[i], scheds[i], claimedBy[i], created[i] = r.IdempotencyKey, r.CompleteBy, r.Scheduler, nullStr(r.ClaimedBy), r.CreatedAt
	}
	var ids []int64
	return e.later(ctx, "insert requests", e.d.q.requestInsert, []any{agents, taskIDs, index, attempts, kinds, keys,
		completeBy, scheds, claimedBy, created, prevOwn, prevOut}, scanIDs(&ids), func() error {
		ids, err := sortedIDs(ids, n, "insert requests")
		if err != nil {
			return err
		}
		for i, r := range reqs {
			r.ID = ids[i]
		}
		return nil
	})
}

func (e *executor) RequestClaim(ctx context.Context, p *store.RequestClaimParams) ([]*dt.AgentRequest, error) {
	if err := e.write("claim requests"); err != nil {
		return nil, err
	}
	var out []*dt.AgentRequest
	err := e.each(ctx, "claim requests", e.d.q.requestClaim, []any{p.ClaimedBy, p.Agent, p.Now, p.Limit}, func(rs rows) error {
		var (
			r              dt.AgentRequest
			kind           string
			workflow, name pgtype.Text
			own            []byte
		)
		if err := rs.Scan(&r.ID, &r.Agent, &r.TaskID, &r.StepIndex, &r.Attempt, &kind, &r.IdempotencyKey,
			&r.CompleteBy, &r.Scheduler, &r.CreatedAt, &workflow, &r.Input, &name, &own, &r.PreviousOutput, &r.TraceContext); err != nil {
			return err
		}
		r.Kind = dt.RequestKind(kind)
		r.CompleteBy = r.CompleteBy.UTC()
		r.CreatedAt = r.CreatedAt.UTC()
		r.ClaimedBy = p.ClaimedBy
		r.Workflow, r.StepName = workflow.String, name.String
		if r.Kind == dt.KindCompensate {
			r.StepOutput = own
		}
		out = append(out, &r)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (e *executor) RequestDeleteByStep(ctx context.Context, params *store.RequestDeleteByStepParams) error {
	refs := params.Refs
	if len(refs) == 0 {
		return nil
	}
	if err := e.write("delete requests"); err != nil {
		return err
	}
	taskIDs, index := make([]string, len(refs)), make([]int32, len(refs))
	for i, r := range refs {
		taskIDs[i], index[i] = r.TaskID, int32(r.Index)
	}
	return e.later(ctx, "delete requests", e.d.q.requestDeleteByStep, []any{taskIDs, index}, nil, nil)
}

func (e *executor) StepMessagesExist(ctx context.Context, params *store.StepMessagesExistParams) ([]bool, error) {
	attempts := params.Attempts
	exists := make([]bool, len(attempts))
	if len(attempts) == 0 {
		return exists, nil
	}
	n := len(attempts)
	taskIDs, index, attempt, kind := make([]string, n), make([]int32, n), make([]int32, n), make([]string, n)
	for i, a := range attempts {
		taskIDs[i], index[i], attempt[i], kind[i] = a.TaskID, int32(a.Index), int32(a.Attempt), string(a.Kind)
	}
	var found []int64
	if err := e.each(ctx, "find step messages", e.d.q.stepMessagesExist, []any{taskIDs, index, attempt, kind}, scanIDs(&found)); err != nil {
		return nil, err
	}
	for _, i := range found {
		exists[i] = true
	}
	return exists, nil
}

func (e *executor) RequestRelease(ctx context.Context, params *store.RequestReleaseParams) (int, error) {
	claimedBy := params.ClaimedBy
	if err := e.write("release requests"); err != nil {
		return 0, err
	}
	n, err := e.exec(ctx, "release requests", e.d.q.requestRelease, claimedBy)
	return int(n), err
}

func (e *executor) RequestDeleteExpired(ctx context.Context, params *store.RequestDeleteExpiredParams) (int, error) {
	now, limit := params.Now, params.Limit
	if err := e.write("delete expired requests"); err != nil {
		return 0, err
	}
	n, err := e.exec(ctx, "delete expired requests", e.d.q.requestDeleteExpired, now, limit)
	return int(n), err
}

// ---- agent replies ----

func (e *executor) ReplyInsertMany(ctx context.Context, params *store.ReplyInsertManyParams) error {
	replies := params.Replies
	if len(replies) == 0 {
		return nil
	}
	if err := e.write("insert replies"); err != nil {
		return err
	}
	n := len(replies)
	var (
		taskIDs, kinds  = make([]string, n), make([]string, n)
		index, attempts = make([]int32, n), make([]int32, n)
		outputs         = make([][]byte, n)
		failed          = make([]bool, n)
		errs            = make([]*string, n)
		created         = make([]time.Time, n)
	)
	for i, r := range replies {
		taskIDs[i], index[i], attempts[i], kinds[i] = r.TaskID, int32(r.StepIndex), int32(r.Attempt), string(r.Kind)
		outputs[i], failed[i], errs[i], created[i] = r.Output, r.Failed, nullStr(r.Error), r.CreatedAt
	}
	var ids []int64
	if err := e.each(ctx, "insert replies", e.d.q.replyInsert, []any{taskIDs, index, attempts, kinds, outputs, failed,
		errs, created}, scanIDs(&ids)); err != nil {
		return err
	}
	ids, err := sortedIDs(ids, n, "insert replies")
	if err != nil {
		return err
	}
	for i, r := range replies {
		r.ID = ids[i]
	}
	return nil
}

func (e *executor) ReplyTake(ctx context.Context, p *store.ReplyTakeParams) ([]*dt.AgentReply, error) {
	if err := e.write("take replies"); err != nil {
		return nil, err
	}
	var out []*dt.AgentReply
	err := e.each(ctx, "take replies", e.d.q.replyTake, []any{p.Scheduler, p.Limit}, func(rs rows) error {
		var (
			r       dt.AgentReply
			kind    string
			errText pgtype.Text
		)
		if err := rs.Scan(&r.ID, &r.TaskID, &r.StepIndex, &r.Attempt, &kind, &r.Output, &r.Failed, &errText, &r.CreatedAt); err != nil {
			return err
		}
		r.Kind = dt.RequestKind(kind)
		r.Error = errText.String
		r.CreatedAt = r.CreatedAt.UTC()
		out = append(out, &r)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ---- events ----

// EventInsertMany takes the schema's event-writer lock, shared, once per
// transaction before it takes any event ID, and holds it until the
// transaction ends, so a reader tailing by ID can tell which transactions
// may still commit events (EventList). See doc.go. In a pipelined
// transaction both go out last, just before the COMMIT.
func (e *executor) EventInsertMany(ctx context.Context, params *store.EventInsertManyParams) error {
	events := params.Events
	if len(events) == 0 {
		return nil
	}
	if err := e.write("insert events"); err != nil {
		return err
	}
	if !e.eventLocked {
		if err := e.laterTail(ctx, "lock as event writer", e.d.q.eventLock, []any{e.d.eventLockKey}, nil, nil); err != nil {
			return err
		}
		e.eventLocked = true
	}
	rows := store.GroupEvents(events)
	n := len(rows)
	var (
		taskIDs, types           = make([]string, n), make([]string, n)
		steps, stepVals          = make([]*int32, n), make([]int32, n)
		attempts                 = make([]int32, n)
		states, actors, messages = newNullCol(n), newNullCol(n), newNullCol(n)
		more                     = newNullCol(n)
		alerts                   = make([]bool, n)
		terms                    = make([]int64, n)
		created                  = make([]time.Time, n)
		namespaces               = make([]string, n)
	)
	for i, row := range rows {
		ev := row[0]
		namespaces[i] = dt.NamespaceOf(ev.TaskID)
		if ev.StepIndex >= 0 {
			stepVals[i] = int32(ev.StepIndex)
			steps[i] = &stepVals[i]
		}
		states.set(i, string(ev.State))
		actors.set(i, ev.Actor)
		messages.set(i, ev.Message)
		rest, err := store.EncodeEventRow(row)
		if err != nil {
			return fmt.Errorf("postgres: insert events: %w", err)
		}
		more.set(i, rest)
		taskIDs[i], types[i], alerts[i] = ev.TaskID, string(ev.Type), ev.Alert
		terms[i], attempts[i], created[i] = ev.Term, int32(ev.Attempt), ev.CreatedAt
	}
	var ids []int64
	return e.laterTail(ctx, "insert events", e.d.q.eventInsert, []any{taskIDs, steps, types, states.ptrs, alerts, actors.ptrs,
		terms, attempts, messages.ptrs, created, namespaces, more.ptrs}, scanIDs(&ids), func() error {
		ids, err := sortedIDs(ids, n, "insert events")
		if err != nil {
			return err
		}
		for i, row := range rows {
			for k, ev := range row {
				ev.ID = ids[i] + int64(k)
			}
		}
		return nil
	})
}

// EventList returns events up to an ID below which none can still appear
// (eventsFinal), so that a reader tailing by AfterID never skips an event
// committed after it read higher ones; in a transaction that has written
// events, up to the last ID handed out; with Lookup, every one committed.
func (e *executor) EventList(ctx context.Context, p *store.EventListParams) ([]*dt.Event, error) {
	e.sendTail()
	upTo := int64(math.MaxInt64)
	var err error
	if !p.Lookup {
		if upTo, _, err = e.eventsFinal(ctx, p.AfterID); err != nil {
			return nil, err
		}
		if upTo+store.EventRowSpan-1 <= p.AfterID { // the row upTo holds nothing after AfterID either
			return nil, nil
		}
	}
	q := e.d.q.eventList
	args := []any{store.EventRowsFloor(p.AfterID), p.AfterID, upTo}
	if p.TaskID != "" {
		args = append(args, p.TaskID)
		q += fmt.Sprintf(` AND task_id = $%d`, len(args))
	}
	if p.AlertsOnly {
		q += ` AND alert` // an alert is a row of its own
	}
	if ns, ok := store.ListNamespace(p.Namespace); ok {
		args = append(args, ns)
		q += fmt.Sprintf(` AND namespace = $%d`, len(args))
		if ns != "" {
			q += ` AND namespace <> ''` // the partial index events_namespace
		}
	}
	q += ` ORDER BY id`
	if p.Limit > 0 {
		args = append(args, p.Limit+1) // see store.EventRowsAfter
		q += fmt.Sprintf(` LIMIT $%d`, len(args))
	}
	var (
		evRows                      [][]*dt.Event
		step, attempt               pgtype.Int4
		term                        pgtype.Int8
		typ                         string
		state, actor, message, more pgtype.Text
	)
	err = e.each(ctx, "list events", q, args, func(r rows) error {
		ev := new(dt.Event)
		if err := r.Scan(&ev.ID, &ev.TaskID, &step, &typ, &state, &ev.Alert, &actor, &term, &attempt, &message, &ev.CreatedAt, &more); err != nil {
			return err
		}
		ev.StepIndex = -1
		if step.Valid {
			ev.StepIndex = int(step.Int32)
		}
		ev.Type = dt.EventType(typ)
		ev.State = dt.ProcessState(state.String)
		ev.Actor = actor.String
		ev.Term = term.Int64
		ev.Attempt = int(attempt.Int32)
		ev.Message = message.String
		ev.CreatedAt = ev.CreatedAt.UTC()
		row, err := store.DecodeEventRow(ev, more.String)
		if err != nil {
			return err
		}
		evRows = append(evRows, row)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return store.EventRowsAfter(evRows, p.AfterID, p.Limit), nil
}

// eventsFinal returns an event ID upTo at or below which every event is
// final, committed or rolled back, and current true when upTo is as of this
// call, false when it is only the best the call could do (see below).
//
// Event IDs come from a sequence, so they are taken in one order and
// committed in another, and writers do not wait for each other (they hold
// the event-writer lock shared from before they take an ID until they
// end). So: read the last ID handed out, then the writers holding the lock;
// any ID up to the first was taken by one of those, or by a transaction
// already over. Once those writers are gone, every ID up to it is final. A
// reader past everything (after ≥ last ID) does not wait.
//
// One reader at a time per driver lists the writers; one on the pool (not
// in a transaction) that finds a proof under way waits for it and takes
// the highest ID proven then if that covers its last ID, and otherwise
// proves up to the last ID handed out by then itself, unless that proof
// gave up on a writer. Not current: a reader that waited
// eventWaitMax for a writer that stays open (an application's long
// transaction holding SubmitTx's events) settles for the highest ID proven
// final before. A reader whose own transaction has written events does not
// wait at all (two such would wait for each other): it gets the last ID, so
// it sees its own events and what has committed, but is no gap-free tail.
//
// Proven IDs are kept per sequence (its OID), so a schema dropped and made
// again under a running driver starts from nothing.
func (e *executor) eventsFinal(ctx context.Context, after int64) (upTo int64, current bool, err error) {
	var (
		seq  uint32
		last int64
	)
	readSeq := func() error {
		var called bool
		if err := e.each(ctx, "read the event sequence", e.d.q.eventSeq, nil, func(r rows) error {
			return r.Scan(&seq, &last, &called)
		}); err != nil {
			return err
		}
		if !called {
			last = 0
		}
		return nil
	}
	if err := readSeq(); err != nil {
		return 0, false, err
	}
	final := e.d.eventsProven(seq)
	if last <= after || last <= final {
		return last, true, nil
	}
	if e.eventLocked {
		return last, false, nil // see above: its own events, no tail
	}
	if !e.tx {
		// One proof at a time per driver. A reader that finds one under
		// way waits for it and takes what is proven then, often all it
		// needs; a writer that stays open makes one reader at a time
		// wait, not each in turn. (Readers in a transaction prove for
		// themselves: theirs may hold the writer lock already, through an
		// earlier executor of a caller's transaction.)
		select {
		case e.d.eventProving <- struct{}{}:
		default:
			if e.d.eventJoined != nil {
				e.d.eventJoined()
			}
			select {
			case e.d.eventProving <- struct{}{}:
			case <-ctx.Done():
				return 0, false, fmt.Errorf("postgres: wait for event writers: %w", ctx.Err())
			}
			// The proof waited for has ended. If it gave up on a writer
			// that stays open, settle for what is proven. If it proved IDs
			// handed out before this reader's last, prove the rest now: a
			// reader woken by a notification of a newer event (the webhook
			// dispatcher) would otherwise see nothing new and sleep. It
			// proves up to the last ID handed out now, so that one proof
			// serves every reader queued behind it too.
			now := e.d.eventsProven(seq)
			if now >= last || e.d.eventStalled.Load() {
				<-e.d.eventProving
				return min(now, last), now >= last, nil
			}
			if err := readSeq(); err != nil {
				<-e.d.eventProving
				return 0, false, err
			}
		}
		defer func() { <-e.d.eventProving }()
		// Set again only if this proof gives up on a writer: one that
		// ends otherwise (an error) leaves no stall for the next reader.
		e.d.eventStalled.Store(false)
	}
	key := uint64(e.d.eventLockKey)
	hi, lo := int64(key>>32), int64(uint32(key))
	var own bool
	writers := func(among []string) ([]string, error) {
		var out []string
		var arg any // NULL: all writers
		if among != nil {
			arg = among
		}
		err := e.each(ctx, "list event writers", e.d.q.eventWriters, []any{hi, lo, arg}, func(r rows) error {
			var (
				vx   string
				mine bool
			)
			if err := r.Scan(&vx, &mine); err != nil {
				return err
			}
			if mine {
				own = true
			} else {
				out = append(out, vx)
			}
			return nil
		})
		return out, err
	}
	open, err := writers(nil)
	if err != nil {
		return 0, false, err
	}
	if own {
		return last, false, nil
	}
	if len(open) > 0 && e.d.eventWaiting != nil {
		e.d.eventWaiting()
	}
	deadline := time.Now().Add(e.d.eventWaitMax)
	for pause := 200 * time.Microsecond; len(open) > 0; pause = min(2*pause, 20*time.Millisecond) {
		if !time.Now().Before(deadline) {
			if !e.tx {
				e.d.eventStalled.Store(true)
			}
			return e.d.eventsProven(seq), false, nil
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, false, fmt.Errorf("postgres: wait for event writers: %w", ctx.Err())
		case <-t.C:
		}
		if open, err = writers(open); err != nil {
			return 0, false, err
		}
	}
	e.d.proveEvents(seq, last)
	return last, true, nil
}

// eventMark is the highest event ID proven final, and the event sequence it
// was read from.
type eventMark struct {
	seq uint32
	id  int64
}

// eventsProven returns the highest event ID proven final on sequence seq.
func (d *Driver) eventsProven(seq uint32) int64 {
	if m := d.eventFinal.Load(); m != nil && m.seq == seq {
		return m.id
	}
	return 0
}

// proveEvents records that every event ID up to id of sequence seq is
// final; a mark of another sequence (a schema made again) is replaced.
func (d *Driver) proveEvents(seq uint32, id int64) {
	next := &eventMark{seq: seq, id: id}
	for {
		m := d.eventFinal.Load()
		if m != nil && m.seq == seq && m.id >= id {
			return
		}
		if d.eventFinal.CompareAndSwap(m, next) {
			return
		}
	}
}

// ---- leases ----

func scanLease(out **dt.Lease) func(rows) error {
	return func(r rows) error {
		var l dt.Lease
		if err := r.Scan(&l.Name, &l.Holder, &l.Term, &l.ExpiresAt); err != nil {
			return err
		}
		l.ExpiresAt = l.ExpiresAt.UTC()
		*out = &l
		return nil
	}
}

func (e *executor) LeaseList(ctx context.Context, params *store.LeaseListParams) ([]*dt.Lease, error) {
	prefix, now, limit := params.Prefix, params.Now, params.Limit
	var out []*dt.Lease
	err := e.each(ctx, "list leases", e.d.q.leaseList, []any{prefix, now, limit}, func(r rows) error {
		var l *dt.Lease
		if err := scanLease(&l)(r); err != nil {
			return err
		}
		out = append(out, l)
		return nil
	})
	return out, err
}

func (e *executor) LeaseAcquire(ctx context.Context, p *store.LeaseAcquireParams) (*dt.Lease, bool, error) {
	if err := e.write("acquire lease"); err != nil {
		return nil, false, err
	}
	if err := e.lockLease(ctx, p.Name, tLeaseLock); err != nil {
		return nil, false, err
	}
	var l *dt.Lease
	if err := e.each(ctx, "acquire lease", e.d.q.leaseAcquire, []any{p.Name, p.Holder, p.Now, p.Now.Add(p.TTL)}, scanLease(&l)); err != nil {
		return nil, false, err
	}
	if l != nil {
		return l, true, nil
	}
	cur, err := e.LeaseGet(ctx, &store.LeaseGetParams{Name: p.Name})
	return cur, false, err
}

func (e *executor) LeaseGet(ctx context.Context, params *store.LeaseGetParams) (*dt.Lease, error) {
	name := params.Name
	var l *dt.Lease
	if err := e.each(ctx, "get lease", e.pick(e.d.q.leaseGet, e.d.q.leaseGetLock), []any{name}, scanLease(&l)); err != nil {
		return nil, err
	}
	if l == nil {
		return nil, fmt.Errorf("lease %q: %w", name, store.ErrNotFound)
	}
	return l, nil
}

// LeaseCheck implements store.Executor. Inside a transaction it holds the
// lease's advisory lock shared (see tLeaseLock) instead of locking the row:
// the transactions of one holder check the same lease at once, and must not
// queue behind each other. In a pipelined transaction the read goes out with
// the next statement (its result is checked when that one's is read), and
// the COMMIT is never sent before the check has been read: see
// pipe.unchecked.
func (e *executor) LeaseCheck(ctx context.Context, params *store.LeaseCheckParams) error {
	name, holder, now := params.Name, params.Holder, params.Now
	if e.tx {
		if err := e.lockLease(ctx, name, tLeaseLockShared); err != nil {
			return err
		}
	}
	var l *dt.Lease
	err := e.later(ctx, "check lease", e.d.q.leaseGet, []any{name}, scanLease(&l), func() error {
		switch {
		case l == nil:
			return fmt.Errorf("lease %q: %w", name, store.ErrLeaseNotHeld)
		case l.Holder != holder || !now.Before(l.ExpiresAt):
			return fmt.Errorf("lease %q held by %q until %s: %w", name, l.Holder, l.ExpiresAt.Format(time.RFC3339Nano), store.ErrLeaseNotHeld)
		}
		return nil
	})
	if e.p != nil {
		e.p.unchecked = true
	}
	return err
}

func (e *executor) LeaseRelease(ctx context.Context, params *store.LeaseReleaseParams) error {
	name, holder, term := params.Name, params.Holder, params.Term
	if err := e.write("release lease"); err != nil {
		return err
	}
	if err := e.lockLease(ctx, name, tLeaseLock); err != nil {
		return err
	}
	_, err := e.exec(ctx, "release lease", e.d.q.leaseRelease, name, holder, term)
	return err
}

// lockLease takes the named lease's advisory lock (tLeaseLock or
// tLeaseLockShared) until the transaction ends. It goes out with the next
// statement, which runs after it: a read then sees every write of a
// transaction that held the lock exclusive.
func (e *executor) lockLease(ctx context.Context, name, query string) error {
	return e.later(ctx, "lock lease", query, []any{lockKey("drover.lease."+name, e.d.Schema())}, nil, nil)
}

// Notify implements store.Notifier with pg_notify on the schema's channel,
// delivered only if the transaction commits. In drover's own transactions it
// is sent just after the COMMIT (see pipe.notes); in a caller's transaction
// it is part of it, and PostgreSQL delivers it at commit.
func (e *executor) Notify(ctx context.Context, params *store.NotifyParams) error {
	topic := params.Topic
	if err := e.write("notify"); err != nil {
		return err
	}
	if e.p != nil && e.p.own {
		e.p.note(topic)
		return nil
	}
	return e.later(ctx, "notify", `SELECT pg_notify($1, $2)`, []any{e.d.channel, topic}, nil, nil)
}
