package webhook

import (
	"testing"
	"time"
)

// The dispatcher's wake-up for the retries it recorded: a retry recorded
// while an earlier one is due but not yet claimed is not lost when the
// earlier one is claimed.
func TestNextRetry(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	for _, tc := range []struct {
		name               string
		next, roundAt, due time.Time
		want               time.Time
	}{
		{"nothing recorded", time.Time{}, at(0), time.Time{}, time.Time{}},
		{"a first retry", time.Time{}, at(0), at(4), at(4)},
		{"an earlier retry than the one awaited", at(10), at(0), at(4), at(4)},
		{"a later retry than the one awaited", at(4), at(0), at(10), at(4)},
		{"the awaited one claimed, nothing new", at(4), at(5), time.Time{}, time.Time{}},
		// The case that lost a retry: the awaited one is due (the round
		// claims it) and a later one was recorded in the same round.
		{"the awaited one claimed, a later one recorded", at(4), at(5), at(9), at(9)},
		{"the awaited one due exactly at the round", at(5), at(5), at(9), at(9)},
	} {
		if got := nextRetry(tc.next, tc.roundAt, tc.due); !got.Equal(tc.want) {
			t.Errorf("%s: nextRetry = %v, want %v", tc.name, got, tc.want)
		}
	}
}
