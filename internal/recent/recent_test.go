package recent

import (
	"testing"
	"time"
)

// Counts covers the last five minutes: older calls drop out, and a
// bucket reused after a lap starts from zero.
func TestWindow(t *testing.T) {
	var w Window
	t0 := time.Date(2026, 1, 1, 12, 0, 30, 0, time.UTC)
	w.Add(t0, false)
	w.Add(t0, true)
	w.Add(t0.Add(2*time.Minute), true)
	if c, f := w.Counts(t0.Add(2 * time.Minute)); c != 3 || f != 2 {
		t.Fatalf("after 2 minutes: %d calls, %d failures; want 3, 2", c, f)
	}
	if c, f := w.Counts(t0.Add(5 * time.Minute)); c != 1 || f != 1 {
		t.Fatalf("after 5 minutes: %d calls, %d failures; want 1, 1 (the first minute dropped out)", c, f)
	}
	w.Add(t0.Add(10*time.Minute), false) // the first minute's bucket, two laps later
	if c, f := w.Counts(t0.Add(10 * time.Minute)); c != 1 || f != 0 {
		t.Fatalf("after 10 minutes: %d calls, %d failures; want 1, 0", c, f)
	}
	if c, _ := w.Counts(t0.Add(-time.Minute)); c != 0 {
		t.Fatalf("before any call: %d calls; want 0", c)
	}
}
