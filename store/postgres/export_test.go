package postgres

import "time"

// SetEventWait sets how long d's readers wait for open event writers, and a
// function called whenever one starts waiting. Call it before d is used.
func SetEventWait(d *Driver, max time.Duration, waiting func()) {
	d.eventWaitMax, d.eventWaiting = max, waiting
}
