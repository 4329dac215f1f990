package recent

import (
	"sync"
	"time"
)

// Span is how far back a Window counts.
const Span = 5 * time.Minute

// buckets is the number of one-minute buckets covering Span.
const buckets = int(Span / time.Minute)

// Window counts calls and failures over the last Span. The zero value is
// ready to use; it is safe for concurrent use.
type Window struct {
	mu sync.Mutex
	b  [buckets]bucket
}

type bucket struct {
	minute          int64 // Unix minute the counts belong to
	calls, failures int
}

// Add counts one call made at now, failed or not.
func (w *Window) Add(now time.Time, failed bool) {
	m := now.Unix() / 60
	w.mu.Lock()
	defer w.mu.Unlock()
	b := &w.b[m%int64(buckets)]
	if b.minute != m {
		*b = bucket{minute: m}
	}
	b.calls++
	if failed {
		b.failures++
	}
}

// Counts returns the calls and failures counted in the Span before now.
func (w *Window) Counts(now time.Time) (calls, failures int) {
	m := now.Unix() / 60
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, b := range w.b {
		if b.minute > m-int64(buckets) && b.minute <= m {
			calls += b.calls
			failures += b.failures
		}
	}
	return calls, failures
}
