package store_test

import (
	"strings"
	"testing"
	"time"

	"github.com/drover-run/drover/store"
)

func TestRedeliveryValidate(t *testing.T) {
	for _, c := range []struct {
		r    store.Redelivery
		want string // "" for valid
	}{
		{store.Redelivery{}, ""},
		{store.Redelivery{First: time.Second, Max: 30 * time.Second}, ""},
		{store.Redelivery{First: time.Microsecond, Max: store.MaxRedelivery}, ""},
		{store.Redelivery{First: -time.Second, Max: time.Second}, "redelivery delay -1s is negative"},
		{store.Redelivery{First: 500 * time.Nanosecond, Max: time.Second}, "below 1µs"},
		{store.Redelivery{First: time.Second, Max: 25 * time.Hour}, "max delay 25h0m0s is above 24h0m0s"},
		{store.Redelivery{First: 2 * time.Second, Max: time.Second}, "max delay 1s is below the first delay 2s"},
	} {
		err := c.r.Validate()
		if (c.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate(%+v) = %v, want %q", c.r, err, c.want)
		}
	}
}

// Doublings is where the drivers stop doubling: First doubled that many
// times is at least Max, and one time fewer is below it.
func TestRedeliveryDoublings(t *testing.T) {
	for _, c := range []struct {
		r    store.Redelivery
		want int
	}{
		{store.Redelivery{}, 0},
		{store.Redelivery{First: time.Second, Max: time.Second}, 0},
		{store.Redelivery{First: time.Second, Max: 1500 * time.Millisecond}, 1},
		{store.Redelivery{First: time.Second, Max: 2 * time.Second}, 1},
		{store.Redelivery{First: time.Second, Max: 4 * time.Second}, 2},
		{store.Redelivery{First: time.Second, Max: 30 * time.Second}, 5},
		{store.Redelivery{First: time.Microsecond, Max: time.Hour}, 32},
	} {
		got := c.r.Doublings()
		if got != c.want {
			t.Errorf("Doublings(%+v) = %d, want %d", c.r, got, c.want)
		}
		if c.r.First > 0 && got > 0 && (c.r.First<<got < c.r.Max || c.r.First<<(got-1) >= c.r.Max) {
			t.Errorf("Doublings(%+v) = %d does not stop where the delay passes Max", c.r, got)
		}
	}
}
