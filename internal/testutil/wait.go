package testutil

import (
	"testing"
	"time"
)

// WaitFor checks cond every few milliseconds until it holds, failing the
// test after 30 seconds: tests wait on a condition, not a sleep.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
