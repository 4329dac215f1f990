package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/drover-run/drover/internal/democmd"
	"github.com/drover-run/drover/internal/remotesim"
)

// TestDemoService serves the simulated service through Main, calls it over
// real HTTP and checks the summary printed on exit.
func TestDemoService(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- Main(ctx, []string{"demo", "service", "--listen", "127.0.0.1:0", "--reject-amount-above", "100", "--json"}, &stdout, &stderr)
	}()
	var url string
	waitFor(t, "the ready line", func() bool {
		for _, l := range strings.Split(stderr.String(), "\n") {
			if u, ok := strings.CutPrefix(l, democmd.ServiceReady); ok {
				url = u
				return true
			}
		}
		return false
	})
	c := remotesim.NewClient(url)
	if _, err := c.Call(ctx, "reserve-stock", "k1", "o-1", 50); err != nil {
		t.Fatalf("call under the limit: %v", err)
	}
	if _, err := c.Call(ctx, "reserve-stock", "k1", "o-1", 50); err != nil {
		t.Fatalf("repeated call: %v", err)
	}
	_, err := c.Call(ctx, "charge-card", "k2", "o-2", 500)
	if !remotesim.IsPermanent(err) {
		t.Fatalf("call over the limit: %v, want a permanent 422", err)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d, stderr %s", code, stderr.String())
	}
	var st remotesim.Stats
	if err := json.Unmarshal([]byte(stdout.String()), &st); err != nil {
		t.Fatalf("summary %q: %v", stdout.String(), err)
	}
	if st.Calls != 3 || st.Applied != 1 || st.DeduplicatedCalls != 1 || st.Permanent != 1 {
		t.Fatalf("summary %+v, want 3 calls, 1 applied, 1 deduplicated, 1 permanent", st)
	}
}

func TestDemoServiceFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--transient-rate", "1.5"}, "--transient-rate must be between 0 and 1"},
		{[]string{"--transient-rate", "0.6", "--hang-rate", "0.6"}, "must not exceed 1"},
		{[]string{"--reject-amount-above", "-1"}, "must not be negative"},
	} {
		r := run(t, "", append([]string{"demo", "service"}, c.args...)...)
		if r.code != ExitUsage || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want usage error containing %q", c.args, r.code, r.stderr, c.want)
		}
	}
}
