package workflowdef

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/internal/egress/egresstest"
	"github.com/drover-run/drover/internal/httpagent"
	"github.com/drover-run/drover/internal/testutil"
	"github.com/drover-run/drover/store"
)

// TestNamespaceCannotTakeEveryHTTPSlot is the starvation: namespace
// a points many tasks at hosts that never answer (listeners whose
// connections never complete), more than the http agent's slots; namespace
// b's task, on another host, still runs within its deadline, because a
// holds at most HTTPMaxPerNamespace of the slots.
func TestNamespaceCannotTakeEveryHTTPSlot(t *testing.T) {
	for name, open := range map[string]func(t *testing.T) store.Driver{
		"sqlite":   func(t *testing.T) store.Driver { return testutil.SQLite(t) },
		"postgres": func(t *testing.T) store.Driver { return testutil.Postgres(t) },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			holes := []string{egresstest.Blackhole(t), egresstest.Blackhole(t)}
			partner := egresstest.NewSink(t, "127.0.0.1:0", nil)
			dir := t.TempDir()
			writeFile(t, filepath.Join(dir, "call.yaml"), `name: call
egress: {allow: ["127.0.0.1"]}
steps:
  - name: call
    timeout: 30s
    retry: {max_tries: 1}
    http: {method: GET, url: "http://127.0.0.1:${input.port}/x"}
`)
			ctx := context.Background()
			f := startOpts(t, dir, true, Options{Store: open(t), HTTPConcurrency: 8,
				HTTP: httpagent.Options{Egress: egresstest.Open(t), MaxConcurrentPerHost: 16}})
			c, reg := f.client, f.reg
			port := func(addr string) string { return addr[strings.LastIndex(addr, ":")+1:] }
			for i := range 20 {
				in := fmt.Sprintf(`{"port":%q}`, port(holes[i%2]))
				if _, err := c.Submit(ctx, "call", []byte(in), &drover.SubmitOptions{ID: fmt.Sprintf("slow-%d", i), Namespace: "a"}); err != nil {
					t.Fatal(err)
				}
			}
			// a's calls hold their share of the slots.
			waitUntil(t, func() bool { return reg.caller.InFlight("a") == 6 })
			start := time.Now()
			if _, err := c.Submit(ctx, "call", []byte(fmt.Sprintf(`{"port":%q}`, partner.Port())), &drover.SubmitOptions{ID: "fast", Namespace: "b"}); err != nil {
				t.Fatal(err)
			}
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			task, err := c.Wait(wctx, "b/fast")
			if err != nil || task.ProcessState != drover.Processed {
				tk, _ := c.Task(ctx, "b/fast")
				t.Fatalf("b's task while a's calls hang: %v %+v %+v (a in flight: %d)", err, tk, tk.Steps, reg.caller.InFlight("a"))
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("b's task took %s", d)
			}
			if n := reg.caller.InFlight("a"); n > 6 {
				t.Errorf("a holds %d calls, want at most 6", n)
			}
			if got := reg.HTTPCalls(); got["a"] != 6 {
				t.Errorf("HTTPCalls = %v, want a's 6", got)
			}
		})
	}
}

// waitUntil waits for cond with a deadline.
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 15s")
		}
	}
}
