package droverapi

import (
	"encoding/json"
	"time"
)

// Schedule is a recurring schedule as the API returns it (GET
// /v1/schedules and /v1/schedules/{name}, and the answer of pause and
// resume).
type Schedule struct {
	Name     string          `json:"name"`
	Workflow string          `json:"workflow"`
	Input    json.RawMessage `json:"input"`
	// Cron and TimeZone, or EverySeconds, are its due times.
	Cron         string `json:"cron,omitempty"`
	TimeZone     string `json:"time_zone,omitempty"`
	EverySeconds int64  `json:"every_seconds,omitempty"`
	// CatchUp is skip, last or all.
	CatchUp string `json:"catch_up"`
	Paused  bool   `json:"paused"`
	// NextDue are the next due times (none while paused).
	NextDue []time.Time `json:"next_due"`
	// LastDue is the last due time fired; LastTask the ID of the last task
	// the schedule submitted (a due time or a run now).
	LastDue   *time.Time `json:"last_due"`
	LastTask  string     `json:"last_task"`
	CreatedAt time.Time  `json:"created_at"`
	UpdatedAt time.Time  `json:"updated_at"`
}

// ScheduleList is the answer of GET /v1/schedules.
type ScheduleList struct {
	Schedules []Schedule `json:"schedules"`
}

// RunScheduleRequest is the body of POST /v1/schedules/{name}/run.
type RunScheduleRequest struct {
	// ID is the task's ID, so that a retried call submits once; absent:
	// a new ID, schedule:<name>:run:<UUID>.
	ID string `json:"id,omitempty"`
}
