package postgres

import "time"

// SetEventWait sets how long d's readers wait for open event writers, and a
// function called whenever one starts waiting. Call it while none of d's
// readers runs.
func SetEventWait(d *Driver, max time.Duration, waiting func()) {
	d.eventWaitMax, d.eventWaiting = max, waiting
}

// SetEventJoined sets a function called whenever one of d's readers waits
// behind another's wait for event writers. Call it while none of d's
// readers runs.
func SetEventJoined(d *Driver, joined func()) { d.eventJoined = joined }

// MigrateLockKey is the advisory lock key d's migrators take.
func MigrateLockKey(d *Driver) int64 { return d.migrateLockKey }

// Channel is d's LISTEN/NOTIFY channel.
func Channel(d *Driver) string { return d.channel }

// SetLocalPlanSettings is the statement every pipelined transaction of
// the driver begins with.
const SetLocalPlanSettings = setLocalPlanSettings

// SessionNextReadyQuery is the statement d's SessionNextReady runs.
func SessionNextReadyQuery(d *Driver) string { return d.q.sessionNextReady }
