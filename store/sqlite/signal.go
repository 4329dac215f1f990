package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/store"
)

const signalCols = `task_id, name, signal_id, payload, sender, received_at, consumed_at, consumed_step, consumed_attempt`

const (
	qSignalInsert = `INSERT INTO signals (` + signalCols + `) VALUES (?,?,?,?,?,?,?,?,?)
 ON CONFLICT (task_id, name, signal_id) DO NOTHING`
	// qSignalTake consumes the oldest waiting signal of a task and name
	// (?5: or the one of that ID), through signals_waiting.
	qSignalTake = `UPDATE signals SET consumed_at = ?1, consumed_step = ?2, consumed_attempt = ?3
 WHERE seq = (SELECT seq FROM signals WHERE task_id = ?4 AND name = ?5 AND consumed_at IS NULL
   AND (?6 = '' OR signal_id = ?6) ORDER BY seq LIMIT 1)
 RETURNING ` + signalCols
	qSignalList = `SELECT ` + signalCols + ` FROM signals WHERE task_id = ? ORDER BY seq`
)

func (e *executor) SignalInsert(ctx context.Context, params *store.SignalInsertParams) (bool, error) {
	s := params.Signal
	var step, attempt any
	if s.ConsumedAt != nil {
		step, attempt = s.ConsumedStep, s.ConsumedAttempt
	}
	res, err := e.exec(ctx, qSignalInsert, s.TaskID, s.Name, s.ID, s.Payload, s.Sender, us(s.ReceivedAt),
		usPtr(s.ConsumedAt), step, attempt)
	if err != nil {
		return false, fmt.Errorf("sqlite: insert signal: %w", err)
	}
	n, err := res.RowsAffected()
	return n == 1, translate(err)
}

func (e *executor) SignalTake(ctx context.Context, params *store.SignalTakeParams) ([]*dt.Signal, error) {
	out := make([]*dt.Signal, len(params.Takes))
	for i, t := range params.Takes {
		var got []*dt.Signal
		rows, err := e.query(ctx, qSignalTake, us(params.At), t.StepIndex, t.Attempt, t.TaskID, t.Name, t.ID)
		if err != nil {
			return nil, fmt.Errorf("sqlite: take signal: %w", err)
		}
		err = scanSignals(rows, &got)
		if err != nil {
			return nil, fmt.Errorf("sqlite: take signal: %w", err)
		}
		if len(got) == 1 {
			out[i] = got[0]
		}
	}
	return out, nil
}

func (e *executor) SignalList(ctx context.Context, params *store.SignalListParams) ([]*dt.Signal, error) {
	rows, err := e.query(ctx, qSignalList, params.TaskID)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list signals: %w", err)
	}
	var out []*dt.Signal
	if err := scanSignals(rows, &out); err != nil {
		return nil, fmt.Errorf("sqlite: list signals: %w", err)
	}
	return out, nil
}

// scanSignals appends the rows, read as signalCols, to out, and closes them.
func scanSignals(rows *sql.Rows, out *[]*dt.Signal) error {
	defer rows.Close()
	for rows.Next() {
		var (
			s                     dt.Signal
			received              int64
			consumed              sql.NullInt64
			consumedStep, attempt sql.NullInt64
		)
		if err := rows.Scan(&s.TaskID, &s.Name, &s.ID, &s.Payload, &s.Sender, &received, &consumed, &consumedStep, &attempt); err != nil {
			return translate(err)
		}
		s.ReceivedAt = fromUS(received)
		s.ConsumedAt = fromNullUS(consumed)
		s.ConsumedStep, s.ConsumedAttempt = int(consumedStep.Int64), int(attempt.Int64)
		*out = append(*out, &s)
	}
	if err := rows.Err(); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return translate(err)
	}
	return nil
}
