package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/store"
	"github.com/drover-run/drover/store/internal/ordering"
)

// executor runs the primitives on a write transaction (tx), or on the read
// pool (db). prepared is set for drover's own transactions, whose connection
// is the one the cached statements live on; unprepared collects the hot
// statements they ran that were not prepared yet (InTx prepares them).
type executor struct {
	d          *Driver
	tx         *sql.Tx
	db         *sql.DB
	prepared   bool
	unprepared []string
}

var _ store.Executor = (*executor)(nil)

func (e *executor) exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if e.tx == nil {
		return nil, errors.New("sqlite: write outside a transaction")
	}
	if e.prepared {
		if s := e.d.stmt(query); s != nil {
			r, err := e.tx.StmtContext(ctx, s).ExecContext(ctx, args...)
			return r, translate(err)
		}
		e.missed(query)
	}
	r, err := e.tx.ExecContext(ctx, query, args...)
	return r, translate(err)
}

func (e *executor) query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	var (
		rows *sql.Rows
		err  error
	)
	// One load of the prepared statement: Close drops them all meanwhile.
	var s *sql.Stmt
	if e.tx != nil && e.prepared {
		s = e.d.stmt(query)
	}
	switch {
	case e.tx == nil:
		rows, err = e.db.QueryContext(ctx, query, args...)
	case s != nil:
		rows, err = e.tx.StmtContext(ctx, s).QueryContext(ctx, args...)
	default:
		if e.prepared {
			e.missed(query)
		}
		rows, err = e.tx.QueryContext(ctx, query, args...)
	}
	return rows, translate(err)
}

// missed notes a statement run unprepared, if it is a hot one.
func (e *executor) missed(query string) {
	if isHot(query) && !slices.Contains(e.unprepared, query) {
		e.unprepared = append(e.unprepared, query)
	}
}

// Time helpers: the schema stores microseconds since the epoch.

func us(t time.Time) int64 { return t.UnixMicro() }

func usPtr(t *time.Time) any {
	if t == nil {
		return nil
	}
	return t.UnixMicro()
}

func fromUS(v int64) time.Time { return time.UnixMicro(v).UTC() }

func fromNullUS(v sql.NullInt64) *time.Time {
	if !v.Valid {
		return nil
	}
	t := fromUS(v.Int64)
	return &t
}

// nullSeq stores an ordering position, NULL for a task without one.
func nullSeq(v int64) any {
	if v == 0 {
		return nil
	}
	return v
}

func nullStr(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func jsonList[T any](v []T) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func scanTasks(rows *sql.Rows) ([]*dt.Task, error) {
	defer rows.Close()
	var out []*dt.Task
	for rows.Next() {
		var (
			t                                 dt.Task
			lockedBy, orderingKey, lastErr    sql.NullString
			completeBy                        sql.NullInt64
			retryDelay, avail, created, updtd int64
			orderingSeq                       sql.NullInt64
			state, onFailure                  string
			waitDelay, waitMaxDelay           int64
			callbackEvents                    string
		)
		if err := rows.Scan(&t.ID, &t.Workflow, &t.Input, &t.InputHash, &state, &lockedBy, &completeBy,
			&t.FailureCount, &t.CurrentStep, &t.StepCount, &orderingKey, &t.Output, &lastErr,
			&t.FailureThreshold, &onFailure, &retryDelay, &avail, &created, &updtd, &orderingSeq,
			&t.WorkflowVersion, &t.CallbackURL, &t.Wait.MaxWaits, &waitDelay, &t.Wait.Multiplier, &waitMaxDelay,
			&callbackEvents, &t.Submitter, &t.TraceContext, &t.Priority); err != nil {
			return nil, translate(err)
		}
		t.Wait.Delay = time.Duration(waitDelay) * time.Microsecond
		t.Wait.MaxDelay = time.Duration(waitMaxDelay) * time.Microsecond
		t.CallbackEvents = store.CallbackEvents(callbackEvents)
		t.OrderingSeq = orderingSeq.Int64
		t.ProcessState = dt.ProcessState(state)
		t.OnFailure = dt.FailurePolicy(onFailure)
		t.LockedBy = lockedBy.String
		t.CompleteBy = fromNullUS(completeBy)
		t.OrderingKey = orderingKey.String
		t.LastError = lastErr.String
		t.RetryDelay = time.Duration(retryDelay) * time.Microsecond
		t.AvailableAt = fromUS(avail)
		t.CreatedAt = fromUS(created)
		t.UpdatedAt = fromUS(updtd)
		out = append(out, &t)
	}
	return out, translate(rows.Err())
}

func (e *executor) TaskInsertMany(ctx context.Context, params *store.TaskInsertManyParams) ([]bool, error) {
	tasks := params.Tasks
	inserted := make([]bool, len(tasks))
	if len(tasks) == 0 {
		return inserted, nil
	}
	rows := make([][]any, len(tasks))
	for i, t := range tasks {
		rows[i] = []any{t.ID, t.Workflow, t.Input, t.InputHash, string(t.ProcessState), nullStr(t.LockedBy),
			usPtr(t.CompleteBy), t.FailureCount, t.CurrentStep, t.StepCount, nullStr(t.OrderingKey), t.Output,
			nullStr(t.LastError), t.FailureThreshold, string(t.OnFailure), t.RetryDelay.Microseconds(),
			us(t.AvailableAt), us(t.CreatedAt), us(t.UpdatedAt), nullSeq(t.OrderingSeq), t.WorkflowVersion, t.CallbackURL,
			t.Wait.MaxWaits, t.Wait.Delay.Microseconds(), t.Wait.Multiplier, t.Wait.MaxDelay.Microseconds(), t.CallbackEvents.String(),
			t.Submitter, t.TraceContext, t.Priority, us(dt.ClaimAt(t.AvailableAt, t.Priority))}
	}
	got := make(map[string]bool, len(tasks))
	err := e.queryRows(ctx, "insert tasks", mTaskInsert, rows, func(r *sql.Rows) error {
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
	rows, err := e.query(ctx, qTaskGet, id)
	if err != nil {
		return nil, fmt.Errorf("sqlite: get task: %w", err)
	}
	ts, err := scanTasks(rows)
	if err != nil {
		return nil, fmt.Errorf("sqlite: get task: %w", err)
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
	rows, err := e.query(ctx, qTaskGetMany, jsonList(ids))
	if err != nil {
		return nil, fmt.Errorf("sqlite: get tasks: %w", err)
	}
	return scanTasks(rows)
}

func (e *executor) TaskList(ctx context.Context, p *store.TaskListParams) ([]*dt.Task, error) {
	var (
		where []string
		args  []any
	)
	if len(p.States) > 0 {
		where = append(where, `process_state IN (SELECT value FROM json_each(?))`)
		args = append(args, jsonList(p.States))
	}
	if p.Workflow != "" {
		where = append(where, `workflow = ?`)
		args = append(args, p.Workflow)
	}
	if p.AfterID != "" {
		where = append(where, `id > ?`)
		args = append(args, p.AfterID)
	}
	if p.OrderingKey != "" {
		where = append(where, `ordering_key = ?`)
		args = append(args, p.OrderingKey)
	}
	if !p.UpdatedFrom.IsZero() {
		where = append(where, `updated_at >= ?`)
		args = append(args, us(p.UpdatedFrom))
	}
	if !p.UpdatedBefore.IsZero() {
		where = append(where, `updated_at < ?`)
		args = append(args, us(p.UpdatedBefore))
	}
	if ns, ok := store.ListNamespace(p.Namespace); ok {
		if ns == "" {
			where = append(where, `instr(id, '/') = 0`)
		} else {
			lo, hi := store.NamespaceRange(ns)
			where = append(where, `id >= ? AND id < ?`)
			args = append(args, lo, hi)
		}
	}
	var all []any
	list := func(extra ...string) string {
		q := `SELECT ` + taskCols + ` FROM tasks`
		if w := append(extra, where...); len(w) > 0 {
			q += ` WHERE ` + strings.Join(w, ` AND `)
		}
		all = append(all, args...)
		return q + limit(&all, p.Limit)
	}
	var q string
	// A time range alone reads the final and the unfinished tasks through
	// the partial index by update time of each (the conditions repeat the
	// indexes' own), then keeps the first page of the two in ID order;
	// otherwise SQLite walks the table in ID order. With a key, tasks_key
	// serves.
	if (!p.UpdatedFrom.IsZero() || !p.UpdatedBefore.IsZero()) && p.OrderingKey == "" {
		q = `SELECT * FROM (SELECT * FROM (` + list(finalStates) + `) UNION ALL SELECT * FROM (` + list(activeStates) + `))`
		q += limit(&all, p.Limit)
	} else {
		q = list()
	}
	rows, err := e.query(ctx, q, all...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list tasks: %w", err)
	}
	return scanTasks(rows)
}

// finalStates is the condition of tasks_finished, the partial index of
// final tasks by update time; activeStates is its complement, whose tasks
// have no such index (it would cost every write of them).
const (
	finalStates  = `process_state IN ('Processed','Error','Compensated','Cancelled')`
	activeStates = `process_state IN ('Pending','Processing','Compensating')`
)

// limit is the ORDER BY and LIMIT of a task listing (no LIMIT for n <= 0),
// its argument appended to args.
func limit(args *[]any, n int) string {
	if n <= 0 {
		return ` ORDER BY id`
	}
	*args = append(*args, n)
	return ` ORDER BY id LIMIT ?`
}

func (e *executor) TaskFinishedSince(ctx context.Context, params *store.TaskFinishedSinceParams) ([]store.FinishedTask, error) {
	since, limit := params.Since, params.Limit
	rows, err := e.query(ctx, qTaskFinishedSince, us(since), limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list finished tasks: %w", err)
	}
	defer rows.Close()
	var out []store.FinishedTask
	for rows.Next() {
		var (
			f                store.FinishedTask
			created, updated int64
		)
		if err := rows.Scan(&f.State, &created, &updated); err != nil {
			return nil, fmt.Errorf("sqlite: list finished tasks: %w", err)
		}
		f.CreatedAt, f.UpdatedAt = fromUS(created), fromUS(updated)
		out = append(out, f)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: list finished tasks: %w", err)
	}
	return out, nil
}

func (e *executor) TaskCountByState(ctx context.Context, _ *store.TaskCountByStateParams) (map[dt.ProcessState]int, error) {
	rows, err := e.query(ctx, qTaskCountByState)
	if err != nil {
		return nil, fmt.Errorf("sqlite: count tasks: %w", err)
	}
	defer rows.Close()
	out := map[dt.ProcessState]int{}
	for rows.Next() {
		var s string
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			return nil, translate(err)
		}
		out[dt.ProcessState(s)] = n
	}
	return out, translate(rows.Err())
}

func (e *executor) TaskCountLockedBy(ctx context.Context, params *store.TaskCountLockedByParams) (int, error) {
	instance := params.Instance
	rows, err := e.query(ctx, qTaskCountLockedBy, instance)
	if err != nil {
		return 0, fmt.Errorf("sqlite: count held tasks: %w", err)
	}
	defer rows.Close()
	var n int
	if rows.Next() {
		if err := rows.Scan(&n); err != nil {
			return 0, translate(err)
		}
	}
	return n, translate(rows.Err())
}

func (e *executor) TaskCountActive(ctx context.Context, params *store.TaskCountActiveParams) (int, error) {
	ns, err := store.CountNamespace(params.Namespace)
	if err != nil {
		return 0, fmt.Errorf("sqlite: count active tasks: %w", err)
	}
	if ns != "" {
		lo, hi := store.NamespaceRange(ns)
		return e.countActive(ctx, qTaskCountActiveIn, lo, hi)
	}
	return e.countActive(ctx, qTaskCountActive)
}

func (e *executor) TaskCountActiveBySubmitter(ctx context.Context, params *store.TaskCountActiveBySubmitterParams) (int, error) {
	return e.countActive(ctx, qTaskCountActiveBySubmitter, params.Submitter)
}

func (e *executor) countActive(ctx context.Context, query string, args ...any) (int, error) {
	rows, err := e.query(ctx, query, args...)
	if err != nil {
		return 0, fmt.Errorf("sqlite: count active tasks: %w", err)
	}
	defer rows.Close()
	var n int
	if rows.Next() {
		if err := rows.Scan(&n); err != nil {
			return 0, translate(err)
		}
	}
	return n, translate(rows.Err())
}

func (e *executor) TaskDeleteFinished(ctx context.Context, params *store.TaskDeleteFinishedParams) (int, error) {
	before, limit := params.Before, params.Limit
	rows, err := e.query(ctx, qTaskPickFinished, us(before), limit)
	if err != nil {
		return 0, fmt.Errorf("sqlite: retention: %w", err)
	}
	var ids, keys []string
	for rows.Next() {
		var (
			id  string
			key sql.NullString
		)
		if err := rows.Scan(&id, &key); err != nil {
			rows.Close()
			return 0, translate(err)
		}
		ids = append(ids, id)
		if key.Valid {
			keys = append(keys, key.String)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(ids) == 0 {
		return 0, translate(err)
	}
	list := jsonList(ids)
	for _, q := range []string{qDeleteEvents, qDeleteRequests, qDeleteReplies, qDeleteSignals, qDeleteSteps, qDeleteTasks} {
		if _, err := e.exec(ctx, q, list); err != nil {
			return 0, fmt.Errorf("sqlite: retention: %w", err)
		}
	}
	// A key whose last task went starts again at position 1.
	if err := e.OrderingKeyPrune(ctx, &store.OrderingKeyPruneParams{Keys: keys}); err != nil {
		return 0, err
	}
	return len(ids), nil
}

// OrderingKeyPrune implements store.Executor.
func (e *executor) OrderingKeyPrune(ctx context.Context, params *store.OrderingKeyPruneParams) error {
	keys := params.Keys
	if len(keys) == 0 {
		return nil
	}
	if _, err := e.exec(ctx, qOrderingPrune, jsonList(keys)); err != nil {
		return fmt.Errorf("sqlite: prune ordering keys: %w", err)
	}
	return nil
}

func (e *executor) TaskClaim(ctx context.Context, p *store.TaskClaimParams) ([]*dt.Task, error) {
	afterAt, afterID := int64(math.MinInt64), ""
	if p.After != nil {
		afterAt, afterID = us(p.After.ClaimAt), p.After.ID
	}
	rows, err := e.query(ctx, qTaskClaim, p.Instance, us(p.Now), p.Limit, afterAt, afterID)
	if err != nil {
		return nil, fmt.Errorf("sqlite: claim tasks: %w", err)
	}
	return scanTasks(rows)
}

func (e *executor) TaskListLockedBy(ctx context.Context, params *store.TaskListLockedByParams) ([]*dt.Task, error) {
	instance, limit := params.Instance, params.Limit
	rows, err := e.query(ctx, qTaskListLockedBy, instance, limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list held tasks: %w", err)
	}
	return scanTasks(rows)
}

func (e *executor) TaskNextAvailable(ctx context.Context, params *store.TaskNextAvailableParams) (time.Time, error) {
	lead := time.Duration(dt.MaxPriority) * dt.PriorityAging
	var first, earliest sql.NullInt64
	var n int
	var dueNow bool
	rows, err := e.query(ctx, qTaskNextAvailable, us(params.Now), us(params.Now.Add(-lead)), lead.Microseconds(), params.Limit, params.Due)
	if err != nil {
		return time.Time{}, fmt.Errorf("sqlite: next available task: %w", err)
	}
	defer rows.Close()
	if rows.Next() {
		if err := rows.Scan(&first, &earliest, &n, &dueNow); err != nil {
			return time.Time{}, translate(err)
		}
	}
	if err := rows.Err(); err != nil {
		return time.Time{}, translate(err)
	}
	switch {
	case dueNow:
		return fromUS(us(params.Now)), nil
	case !first.Valid:
		return time.Time{}, nil
	case n >= params.Limit || !earliest.Valid:
		return fromUS(first.Int64), nil
	}
	return fromUS(earliest.Int64), nil
}

func (e *executor) TaskListExpired(ctx context.Context, params *store.TaskListExpiredParams) ([]*dt.Task, error) {
	now, limit := params.Now, params.Limit
	rows, err := e.query(ctx, qTaskListExpired, us(now), limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list expired tasks: %w", err)
	}
	return scanTasks(rows)
}

func (e *executor) TaskUpdateMany(ctx context.Context, params *store.TaskUpdateManyParams) error {
	tasks := params.Tasks
	rows := make([][]any, len(tasks))
	for i, t := range tasks {
		rows[i] = []any{t.ID, string(t.ProcessState), nullStr(t.LockedBy), usPtr(t.CompleteBy), t.FailureCount,
			t.CurrentStep, t.Output, nullStr(t.LastError), us(t.AvailableAt), us(t.UpdatedAt),
			us(dt.ClaimAt(t.AvailableAt, t.Priority))}
	}
	return e.execRows(ctx, "update tasks", mTaskUpdate, rows, nil)
}

// OrderingKeyReserve implements store.Executor. SQLite has one writer: a
// transaction holds the write lock from its first write (drover's own
// transactions from BEGIN IMMEDIATE) until it ends, and no other
// transaction, in this process or another, writes meanwhile. So the upsert
// needs no lock of its own for positions to follow commit order.
func (e *executor) OrderingKeyReserve(ctx context.Context, params *store.OrderingKeyReserveParams) ([]int64, error) {
	keys := params.Keys
	if len(keys) == 0 {
		return nil, nil
	}
	if e.tx == nil {
		return nil, errors.New("sqlite: reserve ordering positions: write outside a transaction")
	}
	distinct, counts := ordering.Count(keys)
	rows := make([][]any, len(distinct))
	for i, k := range distinct {
		rows[i] = []any{k, counts[k]}
	}
	last := make(map[string]int64, len(distinct))
	err := e.queryRows(ctx, "reserve ordering positions", mOrderingReserve, rows, func(r *sql.Rows) error {
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
		return nil, fmt.Errorf("sqlite: reserve ordering positions: %w", err)
	}
	return seqs, nil
}

func (e *executor) StepInsertMany(ctx context.Context, params *store.StepInsertManyParams) error {
	steps := params.Steps
	rows := make([][]any, len(steps))
	for i, s := range steps {
		rows[i] = []any{s.TaskID, s.Index, s.Name, s.Agent, s.Timeout.Microseconds(), s.Compensation,
			string(s.ProcessState), string(s.CompensationState), nullStr(s.LockedBy), usPtr(s.CompleteBy),
			s.FailureCount, s.Attempt, s.IdempotencyKey, s.Output, nullStr(s.LastError),
			usPtr(s.StartedAt), usPtr(s.FinishedAt), us(s.UpdatedAt), string(s.OnFailure), nil, nil, nil, nil,
			s.Signal, s.SignalDefault, s.Group, s.FinishSeq}
		if w := s.Wait; w != nil {
			rows[i][19], rows[i][20], rows[i][21], rows[i][22] = w.MaxWaits, w.Delay.Microseconds(), w.Multiplier, w.MaxDelay.Microseconds()
		}
	}
	return e.execRows(ctx, "insert steps", mStepInsert, rows, nil)
}
func (e *executor) StepListByTasks(ctx context.Context, params *store.StepListByTasksParams) ([]*dt.StepRecord, error) {
	taskIDs := params.TaskIDs
	if len(taskIDs) == 0 {
		return nil, nil
	}
	var (
		rows *sql.Rows
		err  error
	)
	if len(taskIDs) == 1 {
		rows, err = e.query(ctx, qStepListOne, taskIDs[0])
	} else {
		rows, err = e.query(ctx, qStepListMany, jsonList(taskIDs))
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: list steps: %w", err)
	}
	defer rows.Close()
	var out []*dt.StepRecord
	for rows.Next() {
		var (
			s                                 dt.StepRecord
			timeout, updated                  int64
			state, compState                  string
			lockedBy, lastErr                 sql.NullString
			completeBy, startedAt, finishedAt sql.NullInt64
			onFailure                         string
			waitMax, waitDelay, waitMaxDelay  sql.NullInt64
			waitMultiplier                    sql.NullFloat64
		)
		if err := rows.Scan(&s.TaskID, &s.Index, &s.Name, &s.Agent, &timeout, &s.Compensation, &state, &compState,
			&lockedBy, &completeBy, &s.FailureCount, &s.Attempt, &s.IdempotencyKey, &s.Output, &lastErr,
			&startedAt, &finishedAt, &updated, &onFailure, &waitMax, &waitDelay, &waitMultiplier, &waitMaxDelay,
			&s.Signal, &s.SignalDefault, &s.Group, &s.FinishSeq); err != nil {
			return nil, translate(err)
		}
		s.OnFailure = dt.FailurePolicy(onFailure)
		if waitMax.Valid {
			s.Wait = &dt.WaitPolicy{MaxWaits: int(waitMax.Int64), Delay: time.Duration(waitDelay.Int64) * time.Microsecond,
				Multiplier: waitMultiplier.Float64, MaxDelay: time.Duration(waitMaxDelay.Int64) * time.Microsecond}
		}
		s.Timeout = time.Duration(timeout) * time.Microsecond
		s.ProcessState = dt.ProcessState(state)
		s.CompensationState = dt.ProcessState(compState)
		s.LockedBy = lockedBy.String
		s.CompleteBy = fromNullUS(completeBy)
		s.LastError = lastErr.String
		s.StartedAt = fromNullUS(startedAt)
		s.FinishedAt = fromNullUS(finishedAt)
		s.UpdatedAt = fromUS(updated)
		out = append(out, &s)
	}
	return out, translate(rows.Err())
}

func (e *executor) StepUpdateMany(ctx context.Context, params *store.StepUpdateManyParams) error {
	steps := params.Steps
	rows := make([][]any, len(steps))
	for i, s := range steps {
		rows[i] = []any{s.TaskID, s.Index, string(s.ProcessState), string(s.CompensationState), nullStr(s.LockedBy),
			usPtr(s.CompleteBy), s.FailureCount, s.Attempt, s.Output, nullStr(s.LastError),
			usPtr(s.StartedAt), usPtr(s.FinishedAt), us(s.UpdatedAt), s.IdempotencyKey, s.FinishSeq}
	}
	return e.execRows(ctx, "update steps", mStepUpdate, rows, nil)
}
func (e *executor) RequestInsertMany(ctx context.Context, params *store.RequestInsertManyParams) error {
	reqs := params.Requests
	rows := make([][]any, len(reqs))
	for i, r := range reqs {
		rows[i] = []any{r.Agent, r.TaskID, r.StepIndex, r.Attempt, string(r.Kind), r.IdempotencyKey,
			us(r.CompleteBy), r.Scheduler, nullStr(r.ClaimedBy), us(r.CreatedAt), r.PreviousOwn, ownPrevious(r)}
	}
	return e.execRows(ctx, "insert requests", mRequestInsert, rows, func(res sql.Result, first, n int) error {
		// One INSERT in a write transaction: its rowids are consecutive.
		last, err := res.LastInsertId()
		for i := range n {
			reqs[first+i].ID = last - int64(n-1-i)
		}
		return err
	})
}
func (e *executor) RequestClaim(ctx context.Context, p *store.RequestClaimParams) ([]*dt.AgentRequest, error) {
	rows, err := e.query(ctx, qRequestClaim, p.ClaimedBy, p.Agent, us(p.Now), p.Limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite: claim requests: %w", err)
	}
	var (
		out  []*dt.AgentRequest
		ids  []int64
		byID = map[int64]*dt.AgentRequest{}
	)
	for rows.Next() {
		var (
			r                   dt.AgentRequest
			kind                string
			completeBy, created int64
		)
		if err := rows.Scan(&r.ID, &r.Agent, &r.TaskID, &r.StepIndex, &r.Attempt, &kind, &r.IdempotencyKey,
			&completeBy, &r.Scheduler, &created); err != nil {
			rows.Close()
			return nil, translate(err)
		}
		r.Kind = dt.RequestKind(kind)
		r.CompleteBy = fromUS(completeBy)
		r.CreatedAt = fromUS(created)
		r.ClaimedBy = p.ClaimedBy
		out = append(out, &r)
		ids = append(ids, r.ID)
		byID[r.ID] = &r
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(out) == 0 {
		return out, translate(err)
	}
	rows, err = e.query(ctx, qRequestPayload, jsonList(ids))
	if err != nil {
		return nil, fmt.Errorf("sqlite: request payload: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id                   int64
			workflow, name, tc   string
			input, own, previous []byte
		)
		if err := rows.Scan(&id, &workflow, &input, &name, &own, &previous, &tc); err != nil {
			return nil, translate(err)
		}
		if r := byID[id]; r != nil {
			r.Workflow, r.Input, r.StepName, r.PreviousOutput, r.TraceContext = workflow, input, name, previous, tc
			if r.Kind == dt.KindCompensate {
				r.StepOutput = own
			}
		}
	}
	return out, translate(rows.Err())
}

func (e *executor) RequestDeleteByStep(ctx context.Context, params *store.RequestDeleteByStepParams) error {
	refs := params.Refs
	rows := make([][]any, len(refs))
	for i, r := range refs {
		rows[i] = []any{r.TaskID, r.Index}
	}
	return e.execRows(ctx, "delete requests", mRequestDeleteByStep, rows, nil)
}
func (e *executor) StepMessagesExist(ctx context.Context, params *store.StepMessagesExistParams) ([]bool, error) {
	attempts := params.Attempts
	exists := make([]bool, len(attempts))
	if len(attempts) == 0 {
		return exists, nil
	}
	ids := make([]string, len(attempts))
	for i, a := range attempts {
		ids[i] = a.TaskID
	}
	list, err := json.Marshal(ids)
	if err != nil {
		return nil, err
	}
	rows, err := e.query(ctx, qStepRepliesOf, string(list))
	if err != nil {
		return nil, fmt.Errorf("sqlite: find step messages: %w", err)
	}
	replied := map[store.StepAttempt]bool{}
	for rows.Next() {
		var (
			a    store.StepAttempt
			kind string
		)
		if err := rows.Scan(&a.TaskID, &a.Index, &a.Attempt, &kind); err != nil {
			rows.Close()
			return nil, fmt.Errorf("sqlite: find step messages: %w", translate(err))
		}
		a.Kind = dt.RequestKind(kind)
		replied[a] = true
	}
	err = rows.Err()
	rows.Close()
	if err != nil {
		return nil, fmt.Errorf("sqlite: find step messages: %w", translate(err))
	}
	for i, a := range attempts {
		if replied[a] {
			exists[i] = true
			continue
		}
		rows, err := e.query(ctx, qStepRequestExists, a.TaskID, a.Index, a.Attempt, string(a.Kind))
		if err != nil {
			return nil, fmt.Errorf("sqlite: find step messages: %w", err)
		}
		if rows.Next() {
			err = rows.Scan(&exists[i])
		}
		if err == nil {
			err = rows.Err()
		}
		rows.Close()
		if err != nil {
			return nil, fmt.Errorf("sqlite: find step messages: %w", translate(err))
		}
	}
	return exists, nil
}

func (e *executor) RequestRelease(ctx context.Context, params *store.RequestReleaseParams) (int, error) {
	claimedBy := params.ClaimedBy
	r, err := e.exec(ctx, qRequestRelease, claimedBy)
	if err != nil {
		return 0, fmt.Errorf("sqlite: release requests: %w", err)
	}
	n, err := r.RowsAffected()
	return int(n), err
}

func (e *executor) RequestDeleteExpired(ctx context.Context, params *store.RequestDeleteExpiredParams) (int, error) {
	now, limit := params.Now, params.Limit
	r, err := e.exec(ctx, qRequestDeleteExpired, us(now), limit)
	if err != nil {
		return 0, fmt.Errorf("sqlite: delete expired requests: %w", err)
	}
	n, err := r.RowsAffected()
	return int(n), err
}

func (e *executor) ReplyInsertMany(ctx context.Context, params *store.ReplyInsertManyParams) error {
	replies := params.Replies
	rows := make([][]any, len(replies))
	for i, r := range replies {
		rows[i] = []any{r.TaskID, r.StepIndex, r.Attempt, string(r.Kind), r.Output, r.Failed, nullStr(r.Error), us(r.CreatedAt)}
	}
	return e.execRows(ctx, "insert replies", mReplyInsert, rows, func(res sql.Result, first, n int) error {
		last, err := res.LastInsertId()
		for i := range n {
			replies[first+i].ID = last - int64(n-1-i)
		}
		return err
	})
}
func (e *executor) ReplyTake(ctx context.Context, p *store.ReplyTakeParams) ([]*dt.AgentReply, error) {
	rows, err := e.query(ctx, qReplyTake, p.Scheduler, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite: take replies: %w", err)
	}
	defer rows.Close()
	var out []*dt.AgentReply
	for rows.Next() {
		var (
			r       dt.AgentReply
			kind    string
			errText sql.NullString
			created int64
		)
		if err := rows.Scan(&r.ID, &r.TaskID, &r.StepIndex, &r.Attempt, &kind, &r.Output, &r.Failed, &errText, &created); err != nil {
			return nil, translate(err)
		}
		r.Kind = dt.RequestKind(kind)
		r.Error = errText.String
		r.CreatedAt = fromUS(created)
		out = append(out, &r)
	}
	return out, translate(rows.Err())
}

// EventInsertMany stores the events as event rows (store.GroupEvents),
// with IDs it gives them: EventRowSpan apart, above the highest ID
// AUTOINCREMENT ever handed out. Write transactions take turns (BEGIN
// IMMEDIATE), so no other can take the same IDs meanwhile.
func (e *executor) EventInsertMany(ctx context.Context, params *store.EventInsertManyParams) error {
	if len(params.Events) == 0 {
		return nil
	}
	groups := store.GroupEvents(params.Events)
	var last int64
	res, err := e.query(ctx, qEventLastID)
	if err != nil {
		return fmt.Errorf("sqlite: insert events: %w", err)
	}
	for res.Next() {
		err = res.Scan(&last)
	}
	if cerr := res.Close(); err == nil {
		err = cmp.Or(res.Err(), cerr)
	}
	if err != nil {
		return fmt.Errorf("sqlite: insert events: %w", translate(err))
	}
	rows, ids := make([][]any, len(groups)), make([]int64, len(groups))
	for i, row := range groups {
		id := last + int64(i+1)*store.EventRowSpan
		ids[i] = id
		ev := row[0]
		var step any
		if ev.StepIndex >= 0 {
			step = ev.StepIndex
		}
		more, err := store.EncodeEventRow(row)
		if err != nil {
			return fmt.Errorf("sqlite: insert events: %w", err)
		}
		rows[i] = []any{id, ev.TaskID, step, string(ev.Type), nullStr(string(ev.State)), ev.Alert, nullStr(ev.Actor),
			ev.Term, ev.Attempt, nullStr(ev.Message), us(ev.CreatedAt), dt.NamespaceOf(ev.TaskID), nullStr(more)}
	}
	if err := e.execRows(ctx, "insert events", mEventInsert, rows, nil); err != nil {
		return err
	}
	for i, row := range groups {
		for k, ev := range row {
			ev.ID = ids[i] + int64(k)
		}
	}
	return nil
}

func (e *executor) EventList(ctx context.Context, p *store.EventListParams) ([]*dt.Event, error) {
	// The rows that may hold an event after AfterID (store.EventRowsFloor).
	q := `SELECT id, task_id, step_index, event_type, state, alert, actor, term, attempt, message, created_at, more FROM events
 WHERE id > ? AND (id > ? OR more IS NOT NULL)`
	args := []any{store.EventRowsFloor(p.AfterID), p.AfterID}
	if p.TaskID != "" {
		q += ` AND task_id = ?`
		args = append(args, p.TaskID)
	}
	if p.AlertsOnly {
		q += ` AND alert = 1` // an alert is a row of its own
	}
	if ns, ok := store.ListNamespace(p.Namespace); ok {
		q += ` AND namespace = ?`
		args = append(args, ns)
		if ns != "" {
			q += ` AND namespace <> ''` // the partial index events_namespace
		}
	}
	q += ` ORDER BY id`
	if p.Limit > 0 {
		q += ` LIMIT ?`
		args = append(args, p.Limit+1) // see store.EventRowsAfter
	}
	rows, err := e.query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list events: %w", err)
	}
	defer rows.Close()
	var out [][]*dt.Event
	for rows.Next() {
		var (
			ev                          = new(dt.Event)
			step, term, attempt         sql.NullInt64
			typ                         string
			state, actor, message, more sql.NullString
			created                     int64
		)
		if err := rows.Scan(&ev.ID, &ev.TaskID, &step, &typ, &state, &ev.Alert, &actor, &term, &attempt, &message, &created, &more); err != nil {
			return nil, translate(err)
		}
		ev.StepIndex = -1
		if step.Valid {
			ev.StepIndex = int(step.Int64)
		}
		ev.Type = dt.EventType(typ)
		ev.State = dt.ProcessState(state.String)
		ev.Actor = actor.String
		ev.Term = term.Int64
		ev.Attempt = int(attempt.Int64)
		ev.Message = message.String
		ev.CreatedAt = fromUS(created)
		row, err := store.DecodeEventRow(ev, more.String)
		if err != nil {
			return nil, fmt.Errorf("sqlite: list events: %w", err)
		}
		out = append(out, row)
	}
	if err := rows.Err(); err != nil {
		return nil, translate(err)
	}
	return store.EventRowsAfter(out, p.AfterID, p.Limit), nil
}

func (e *executor) LeaseAcquire(ctx context.Context, p *store.LeaseAcquireParams) (*dt.Lease, bool, error) {
	// One statement: insert a fresh lease, renew our own, or take an expired one.
	rows, err := e.query(ctx, qLeaseAcquire, p.Name, p.Holder, us(p.Now), us(p.Now.Add(p.TTL)))
	if err != nil {
		return nil, false, fmt.Errorf("sqlite: acquire lease: %w", err)
	}
	l, err := scanLease(rows)
	if err != nil {
		return nil, false, err
	}
	if l != nil {
		return l, true, nil
	}
	cur, err := e.LeaseGet(ctx, &store.LeaseGetParams{Name: p.Name})
	return cur, false, err
}

func scanLease(rows *sql.Rows) (*dt.Lease, error) {
	defer rows.Close()
	if !rows.Next() {
		return nil, translate(rows.Err())
	}
	return scanLeaseRow(rows)
}

// scanLeaseRow reads the lease of the row rows is on.
func scanLeaseRow(rows *sql.Rows) (*dt.Lease, error) {
	var (
		l   dt.Lease
		exp int64
	)
	if err := rows.Scan(&l.Name, &l.Holder, &l.Term, &exp); err != nil {
		return nil, translate(err)
	}
	l.ExpiresAt = fromUS(exp)
	return &l, nil
}

func (e *executor) LeaseList(ctx context.Context, params *store.LeaseListParams) ([]*dt.Lease, error) {
	prefix, now, limit := params.Prefix, params.Now, params.Limit
	rows, err := e.query(ctx, qLeaseList, prefix, us(now), limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list leases: %w", err)
	}
	defer rows.Close()
	var out []*dt.Lease
	for rows.Next() {
		l, err := scanLeaseRow(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite: list leases: %w", err)
		}
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: list leases: %w", err)
	}
	return out, nil
}

func (e *executor) LeaseGet(ctx context.Context, params *store.LeaseGetParams) (*dt.Lease, error) {
	name := params.Name
	rows, err := e.query(ctx, qLeaseGet, name)
	if err != nil {
		return nil, fmt.Errorf("sqlite: get lease: %w", err)
	}
	l, err := scanLease(rows)
	if err != nil {
		return nil, err
	}
	if l == nil {
		return nil, fmt.Errorf("lease %q: %w", name, store.ErrNotFound)
	}
	return l, nil
}

func (e *executor) LeaseRelease(ctx context.Context, params *store.LeaseReleaseParams) error {
	name, holder, term := params.Name, params.Holder, params.Term
	if _, err := e.exec(ctx, qLeaseRelease, name, holder, term); err != nil {
		return fmt.Errorf("sqlite: release lease: %w", err)
	}
	return nil
}

// Notify implements store.Executor. SQLite has no cross-process
// notifications: processes sharing a file find new work by polling.
func (e *executor) Notify(context.Context, string) error { return nil }

// TaskGetManyWithSteps implements store.Executor: on SQLite a round trip
// costs nothing, so it is the two reads. On the Reader they run in a read
// transaction of their own (deferred: its snapshot is taken by the first
// read), so that the steps are those of the tasks as read.
func (e *executor) TaskGetManyWithSteps(ctx context.Context, params *store.TaskGetManyWithStepsParams) (tasks []*dt.Task, steps []*dt.StepRecord, err error) {
	ids := params.IDs
	if e.tx == nil {
		tx, err := e.db.BeginTx(ctx, nil)
		if err != nil {
			return nil, nil, fmt.Errorf("sqlite: begin read: %w", translate(err))
		}
		defer func() { _ = tx.Rollback() }() // read-only: nothing to commit
		return (&executor{d: e.d, tx: tx, db: e.db}).TaskGetManyWithSteps(ctx, &store.TaskGetManyWithStepsParams{IDs: ids})
	}
	tasks, err = e.TaskGetMany(ctx, &store.TaskGetManyParams{IDs: ids})
	if err != nil {
		return nil, nil, err
	}
	steps, err = e.StepListByTasks(ctx, &store.StepListByTasksParams{TaskIDs: ids})
	if err != nil {
		return nil, nil, err
	}
	return tasks, steps, nil
}

// LeaseCheck implements store.Executor.
func (e *executor) LeaseCheck(ctx context.Context, params *store.LeaseCheckParams) error {
	name, holder, now := params.Name, params.Holder, params.Now
	l, err := e.LeaseGet(ctx, &store.LeaseGetParams{Name: name})
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("lease %q: %w", name, store.ErrLeaseNotHeld)
	}
	if err != nil {
		return err
	}
	if l.Holder != holder || !now.Before(l.ExpiresAt) {
		return fmt.Errorf("lease %q held by %q until %s: %w", name, l.Holder, l.ExpiresAt.Format(time.RFC3339Nano), store.ErrLeaseNotHeld)
	}
	return nil
}

// ownPrevious is the previous_output column of request r: the value it
// carries, NULL when it carries none.
func ownPrevious(r *dt.AgentRequest) any {
	if !r.PreviousOwn || r.PreviousOutput == nil {
		return nil
	}
	return r.PreviousOutput
}
