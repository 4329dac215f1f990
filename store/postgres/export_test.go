package postgres

import "time"

// SetEventWait sets how long d's readers wait for open event writers, and a
// function called whenever one starts waiting. Call it before d is used.
func SetEventWait(d *Driver, max time.Duration, waiting func()) {
	d.eventWaitMax, d.eventWaiting = max, waiting
}

// SetEventJoined sets a function called whenever one of d's readers waits
// behind another's wait for event writers. Call it before d is used.
func SetEventJoined(d *Driver, joined func()) { d.eventJoined = joined }
