package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/store"
)

const schedCols = `name, workflow, input, cron, time_zone, every_us, catch_up, paused, next_due, last_due, last_task, created_at, updated_at`

const (
	qSchedulePut = `INSERT INTO schedules (` + schedCols + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
 ON CONFLICT (name) DO UPDATE SET workflow = excluded.workflow, input = excluded.input, cron = excluded.cron,
 time_zone = excluded.time_zone, every_us = excluded.every_us, catch_up = excluded.catch_up, paused = excluded.paused,
 next_due = excluded.next_due, last_due = excluded.last_due, last_task = excluded.last_task,
 created_at = excluded.created_at, updated_at = excluded.updated_at`
	qScheduleListAll   = `SELECT ` + schedCols + ` FROM schedules ORDER BY name`
	qScheduleListNames = `SELECT ` + schedCols + ` FROM schedules WHERE name IN (SELECT value FROM json_each(?)) ORDER BY name`
	qScheduleDelete    = `DELETE FROM schedules WHERE name IN (SELECT value FROM json_each(?))`
	qScheduleDue       = `SELECT ` + schedCols + ` FROM schedules
 WHERE paused = 0 AND next_due <= ? AND name IN (SELECT value FROM json_each(?)) ORDER BY next_due, name LIMIT ?`
)

// SchedulePut implements store.ScheduleExecutor.
func (e *executor) SchedulePut(ctx context.Context, params *store.SchedulePutParams) error {
	for _, s := range params.Schedules {
		input := s.Input
		if input == nil {
			input = []byte{} // the column is NOT NULL; nil would bind as NULL
		}
		if _, err := e.exec(ctx, qSchedulePut, s.Name, s.Workflow, input, s.Cron, s.TimeZone, int64(s.Every/time.Microsecond),
			s.CatchUp, s.Paused, us(s.NextDue), usPtr(s.LastDue), s.LastTask, us(s.CreatedAt), us(s.UpdatedAt)); err != nil {
			return fmt.Errorf("sqlite: put schedule %q: %w", s.Name, err)
		}
	}
	return nil
}

// ScheduleList implements store.ScheduleExecutor. SQLite has a single
// writer: a write transaction's reads need no lock.
func (e *executor) ScheduleList(ctx context.Context, params *store.ScheduleListParams) ([]*dt.Schedule, error) {
	if params.Names == nil {
		return e.schedules(ctx, "list schedules", qScheduleListAll)
	}
	names, err := json.Marshal(params.Names)
	if err != nil {
		return nil, err
	}
	return e.schedules(ctx, "list schedules", qScheduleListNames, string(names))
}

// ScheduleDue implements store.ScheduleExecutor.
func (e *executor) ScheduleDue(ctx context.Context, params *store.ScheduleDueParams) ([]*dt.Schedule, error) {
	if len(params.Names) == 0 || params.Limit <= 0 {
		return nil, nil
	}
	names, err := json.Marshal(params.Names)
	if err != nil {
		return nil, err
	}
	return e.schedules(ctx, "list due schedules", qScheduleDue, us(params.Before), string(names), params.Limit)
}

// ScheduleDelete implements store.ScheduleExecutor.
func (e *executor) ScheduleDelete(ctx context.Context, params *store.ScheduleDeleteParams) (int, error) {
	if e.tx == nil {
		return 0, errors.New("sqlite: delete schedules: write outside a transaction")
	}
	if len(params.Names) == 0 {
		return 0, nil
	}
	names, err := json.Marshal(params.Names)
	if err != nil {
		return 0, err
	}
	r, err := e.exec(ctx, qScheduleDelete, string(names))
	if err != nil {
		return 0, fmt.Errorf("sqlite: delete schedules: %w", err)
	}
	n, err := r.RowsAffected()
	return int(n), err
}

func (e *executor) schedules(ctx context.Context, what, query string, args ...any) ([]*dt.Schedule, error) {
	rows, err := e.query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: %s: %w", what, err)
	}
	defer rows.Close()
	var out []*dt.Schedule
	for rows.Next() {
		var (
			s                            dt.Schedule
			every, next, created, update int64
			last                         sql.NullInt64
		)
		if err := rows.Scan(&s.Name, &s.Workflow, &s.Input, &s.Cron, &s.TimeZone, &every, &s.CatchUp, &s.Paused,
			&next, &last, &s.LastTask, &created, &update); err != nil {
			return nil, fmt.Errorf("sqlite: %s: %w", what, translate(err))
		}
		s.Every = time.Duration(every) * time.Microsecond
		s.NextDue, s.LastDue, s.CreatedAt, s.UpdatedAt = fromUS(next), fromNullUS(last), fromUS(created), fromUS(update)
		out = append(out, &s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: %s: %w", what, translate(err))
	}
	return out, nil
}
