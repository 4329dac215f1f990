package drovertype

import "time"

// Schedule is the stored definition and state of a recurring schedule:
// what it submits, when (Cron in TimeZone, or Every), what happens to due
// times missed during downtime (CatchUp), and where it stands.
type Schedule struct {
	Name     string
	Workflow string
	Input    []byte
	// Cron is a cron expression, evaluated in TimeZone (IANA; "" is UTC);
	// "" when the schedule runs Every.
	Cron     string
	TimeZone string
	// Every is the fixed interval between due times; 0 with Cron.
	Every time.Duration
	// CatchUp is the catch-up policy: "skip", "last" or "all".
	CatchUp string
	// Paused schedules fire nothing until resumed.
	Paused bool
	// NextDue is the next due time not fired yet.
	NextDue time.Time
	// LastDue is the last due time fired (nil: none yet).
	LastDue *time.Time
	// LastTask is the ID of the last task the schedule submitted, by a due
	// time or by a run now ("": none yet).
	LastTask  string
	CreatedAt time.Time
	UpdatedAt time.Time
}
