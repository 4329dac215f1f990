package store

import (
	"context"
	"time"

	"github.com/drover-run/drover/drovertype"
)

// ScheduleExecutor holds the primitives of recurring schedules: their
// definitions and the next due time of each, which the leader advances in
// the transaction that submits the due time's task.
type ScheduleExecutor interface {
	// SchedulePut inserts each of Schedules, or replaces every column of
	// the stored schedule of the same name. Write transactions only.
	SchedulePut(ctx context.Context, params *SchedulePutParams) error
	// ScheduleList returns the schedules named in Names (nil: every
	// schedule), in name order. Inside a write transaction the rows
	// returned stay locked until it ends.
	ScheduleList(ctx context.Context, params *ScheduleListParams) ([]*drovertype.Schedule, error)
	// ScheduleDue returns the schedules named in Names that are not paused
	// and whose NextDue is at or before Before, earliest NextDue first
	// (then by name), at most Limit. Inside a write transaction the rows
	// returned stay locked until it ends.
	ScheduleDue(ctx context.Context, params *ScheduleDueParams) ([]*drovertype.Schedule, error)
	// ScheduleDelete deletes the schedules named in Names and returns how
	// many it deleted (a name not stored is no error). The tasks they
	// submitted stay. Write transactions only.
	ScheduleDelete(ctx context.Context, params *ScheduleDeleteParams) (int, error)
}

// SchedulePutParams are the arguments of SchedulePut.
type SchedulePutParams struct {
	Schedules []*drovertype.Schedule
}

// ScheduleListParams are the arguments of ScheduleList.
type ScheduleListParams struct {
	Names []string
}

// ScheduleDeleteParams are the arguments of ScheduleDelete.
type ScheduleDeleteParams struct {
	Names []string
}

// ScheduleDueParams are the arguments of ScheduleDue.
type ScheduleDueParams struct {
	Names  []string
	Before time.Time
	Limit  int
}
