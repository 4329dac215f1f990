package console

import "time"

// SetLiveBeat sets how often live streams beat and check their session,
// for the streams opened after it; the returned func restores it.
func SetLiveBeat(d time.Duration) (restore func()) {
	old := liveBeat.Swap(int64(d))
	return func() { liveBeat.Store(old) }
}
