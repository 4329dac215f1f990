package postgres

import (
	"context"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/store"
	"github.com/jackc/pgx/v5/pgtype"
)

const signalCols = `task_id, name, signal_id, payload, sender, received_at, consumed_at, consumed_step, consumed_attempt`

const (
	tSignalInsert = `INSERT INTO {s}.signals (` + signalCols + `) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
 ON CONFLICT (task_id, name, signal_id) DO NOTHING`
	// tSignalTake consumes, per entry, the oldest waiting signal of a task
	// and name (or the one of that ID), through signals_waiting. The
	// caller holds the tasks' locks, so no two transactions take for one
	// task at once.
	tSignalTake = `WITH u AS (SELECT * FROM unnest($2::text[], $3::text[], $4::text[], $5::int[], $6::int[])
   AS u(task_id, name, signal_id, step, attempt)),
 pick AS (SELECT u.step, u.attempt, (SELECT g.seq FROM {s}.signals AS g
     WHERE g.task_id = u.task_id AND g.name = u.name AND g.consumed_at IS NULL
       AND (u.signal_id = '' OR g.signal_id = u.signal_id) ORDER BY g.seq LIMIT 1) AS seq FROM u)
 UPDATE {s}.signals AS s SET consumed_at = $1, consumed_step = pick.step, consumed_attempt = pick.attempt
 FROM pick WHERE s.seq = pick.seq
 RETURNING s.task_id, s.name, s.signal_id, s.payload, s.sender, s.received_at, s.consumed_at, s.consumed_step, s.consumed_attempt`
	tSignalList = `SELECT ` + signalCols + ` FROM {s}.signals WHERE task_id = $1 ORDER BY seq`
)

// signalQueries holds the signal statements.
type signalQueries struct{ insert, take, list string }

// SignalInsert implements store.SignalExecutor.
func (e *executor) SignalInsert(ctx context.Context, params *store.SignalInsertParams) (bool, error) {
	const what = "insert signal"
	if err := e.write(what); err != nil {
		return false, err
	}
	s := params.Signal
	var step, attempt *int32
	if s.ConsumedAt != nil {
		st, at := int32(s.ConsumedStep), int32(s.ConsumedAttempt)
		step, attempt = &st, &at
	}
	n, err := e.exec(ctx, what, e.d.q.signal.insert, s.TaskID, s.Name, s.ID, s.Payload, s.Sender, s.ReceivedAt,
		s.ConsumedAt, step, attempt)
	return n == 1, err
}

// SignalTake implements store.SignalExecutor.
func (e *executor) SignalTake(ctx context.Context, params *store.SignalTakeParams) ([]*dt.Signal, error) {
	const what = "take signals"
	out := make([]*dt.Signal, len(params.Takes))
	if len(params.Takes) == 0 {
		return out, nil
	}
	if err := e.write(what); err != nil {
		return nil, err
	}
	n := len(params.Takes)
	tasks, names, ids := make([]string, n), make([]string, n), make([]string, n)
	steps, attempts := make([]int32, n), make([]int32, n)
	at := map[string]int{}
	for i, t := range params.Takes {
		tasks[i], names[i], ids[i], steps[i], attempts[i] = t.TaskID, t.Name, t.ID, int32(t.StepIndex), int32(t.Attempt)
		at[t.TaskID] = i
	}
	var got []*dt.Signal
	if err := e.each(ctx, what, e.d.q.signal.take, []any{params.At, tasks, names, ids, steps, attempts}, scanSignal(&got)); err != nil {
		return nil, err
	}
	for _, s := range got {
		out[at[s.TaskID]] = s
	}
	return out, nil
}

// SignalList implements store.SignalExecutor.
func (e *executor) SignalList(ctx context.Context, params *store.SignalListParams) ([]*dt.Signal, error) {
	var out []*dt.Signal
	if err := e.each(ctx, "list signals", e.d.q.signal.list, []any{params.TaskID}, scanSignal(&out)); err != nil {
		return nil, err
	}
	return out, nil
}

// scanSignal appends each row, read as signalCols, to out.
func scanSignal(out *[]*dt.Signal) func(r rows) error {
	return func(r rows) error {
		var (
			s             dt.Signal
			consumed      pgtype.Timestamptz
			step, attempt pgtype.Int4
		)
		if err := r.Scan(&s.TaskID, &s.Name, &s.ID, &s.Payload, &s.Sender, &s.ReceivedAt, &consumed, &step, &attempt); err != nil {
			return err
		}
		s.ReceivedAt = s.ReceivedAt.UTC()
		s.ConsumedAt = fromTS(consumed)
		s.ConsumedStep, s.ConsumedAttempt = int(step.Int32), int(attempt.Int32)
		*out = append(*out, &s)
		return nil
	}
}
