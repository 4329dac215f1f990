package flow

import "testing"

func TestNextRunKey(t *testing.T) {
	for in, want := range map[string]string{
		"t/0/a":        "t/0/a/run-2",
		"t/0/a/run-2":  "t/0/a/run-3",
		"t/3/b/run-10": "t/3/b/run-11",
	} {
		if got, _ := NextRunKey(in); got != want {
			t.Errorf("NextRunKey(%q) = %q, want %q", in, got, want)
		}
	}
}
