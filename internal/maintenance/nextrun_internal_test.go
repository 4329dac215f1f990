package maintenance

import (
	"errors"
	"testing"
	"time"
)

// While notifications arrive, a service that found nothing runs again an
// Interval after its Next time, at most IdleInterval later; otherwise,
// every Interval.
func TestNextRun(t *testing.T) {
	r := &Runner{Interval: time.Second, LeaseTTL: 9 * time.Second, IdleInterval: 30 * time.Second}
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		live bool
		n    int
		next time.Time
		err  error
		want time.Duration
	}{
		{"polling", false, 0, time.Time{}, nil, time.Second},
		{"handled items", true, 3, time.Time{}, nil, time.Second},
		{"failed", true, 0, time.Time{}, errors.New("x"), time.Second},
		{"nothing known", true, 0, time.Time{}, nil, 30 * time.Second},
		{"work now", true, 0, now, nil, time.Second},
		{"work in 5s", true, 0, now.Add(5 * time.Second), nil, 6 * time.Second},
		{"work in an hour", true, 0, now.Add(time.Hour), nil, 30 * time.Second},
		{"work overdue", true, 0, now.Add(-time.Hour), nil, time.Second},
	} {
		if got := r.nextRun(now, tc.live, tc.n, tc.next, tc.err).Sub(now); got != tc.want {
			t.Errorf("%s: next run in %s, want %s", tc.name, got, tc.want)
		}
	}
}
