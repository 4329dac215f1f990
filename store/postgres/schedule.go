package postgres

import (
	"context"
	"time"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/store"
)

const schedCols = `name, workflow, input, cron, time_zone, every_us, catch_up, paused, next_due, last_due, last_task, created_at, updated_at`

// The schedule statements. Reads in a transaction lock the rows they
// return (FOR UPDATE): the leader's advance of a schedule and an
// operator's pause or run now take turns, none overwriting the other.
const (
	tSchedulePut = `INSERT INTO {s}.schedules (` + schedCols + `) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
 ON CONFLICT (name) DO UPDATE SET workflow = excluded.workflow, input = excluded.input, cron = excluded.cron,
 time_zone = excluded.time_zone, every_us = excluded.every_us, catch_up = excluded.catch_up, paused = excluded.paused,
 next_due = excluded.next_due, last_due = excluded.last_due, last_task = excluded.last_task,
 created_at = excluded.created_at, updated_at = excluded.updated_at`
	tScheduleListAll   = `SELECT ` + schedCols + ` FROM {s}.schedules ORDER BY name`
	tScheduleListNames = `SELECT ` + schedCols + ` FROM {s}.schedules WHERE name = ANY($1::text[]) ORDER BY name`
	tScheduleDue       = `SELECT ` + schedCols + ` FROM {s}.schedules
 WHERE NOT paused AND next_due <= $1 AND name = ANY($2::text[]) ORDER BY next_due, name LIMIT $3`
	tScheduleDelete = `DELETE FROM {s}.schedules WHERE name = ANY($1::text[])`
	lockRows        = ` FOR UPDATE`
)

// scheduleQueries holds the schedule statements.
type scheduleQueries struct{ put, listAll, listNames, due, del string }

// SchedulePut implements store.ScheduleExecutor.
func (e *executor) SchedulePut(ctx context.Context, params *store.SchedulePutParams) error {
	const what = "put schedule"
	if err := e.write(what); err != nil {
		return err
	}
	for _, s := range params.Schedules {
		if _, err := e.exec(ctx, what, e.d.q.schedule.put, s.Name, s.Workflow, nonNil(s.Input), s.Cron, s.TimeZone,
			int64(s.Every/time.Microsecond), s.CatchUp, s.Paused, s.NextDue, s.LastDue, s.LastTask, s.CreatedAt, s.UpdatedAt); err != nil {
			return err
		}
	}
	return nil
}

// ScheduleList implements store.ScheduleExecutor.
func (e *executor) ScheduleList(ctx context.Context, params *store.ScheduleListParams) ([]*dt.Schedule, error) {
	q := e.d.q.schedule
	if params.Names == nil {
		return e.schedules(ctx, "list schedules", e.pick(q.listAll, q.listAll+lockRows))
	}
	return e.schedules(ctx, "list schedules", e.pick(q.listNames, q.listNames+lockRows), params.Names)
}

// ScheduleDue implements store.ScheduleExecutor.
func (e *executor) ScheduleDue(ctx context.Context, params *store.ScheduleDueParams) ([]*dt.Schedule, error) {
	if len(params.Names) == 0 || params.Limit <= 0 {
		return nil, nil
	}
	q := e.d.q.schedule
	return e.schedules(ctx, "list due schedules", e.pick(q.due, q.due+lockRows), params.Before, params.Names, params.Limit)
}

// ScheduleDelete implements store.ScheduleExecutor.
func (e *executor) ScheduleDelete(ctx context.Context, params *store.ScheduleDeleteParams) (int, error) {
	const what = "delete schedules"
	if err := e.write(what); err != nil {
		return 0, err
	}
	if len(params.Names) == 0 {
		return 0, nil
	}
	n, err := e.exec(ctx, what, e.d.q.schedule.del, params.Names)
	return int(n), err
}

func (e *executor) schedules(ctx context.Context, what, query string, args ...any) ([]*dt.Schedule, error) {
	var out []*dt.Schedule
	err := e.each(ctx, what, query, args, func(r rows) error {
		var (
			s     dt.Schedule
			every int64
		)
		if err := r.Scan(&s.Name, &s.Workflow, &s.Input, &s.Cron, &s.TimeZone, &every, &s.CatchUp, &s.Paused,
			&s.NextDue, &s.LastDue, &s.LastTask, &s.CreatedAt, &s.UpdatedAt); err != nil {
			return err
		}
		s.Every = time.Duration(every) * time.Microsecond
		s.NextDue, s.CreatedAt, s.UpdatedAt = s.NextDue.UTC(), s.CreatedAt.UTC(), s.UpdatedAt.UTC()
		if s.LastDue != nil {
			t := s.LastDue.UTC()
			s.LastDue = &t
		}
		out = append(out, &s)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
