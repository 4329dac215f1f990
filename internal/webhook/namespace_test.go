package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/store"
)

// submitIn submits a task of workflow echo in namespace ns with a callback.
func submitIn(t *testing.T, c *drover.Client, ns, id, callback string) {
	t.Helper()
	if _, err := c.Submit(context.Background(), "echo", []byte(`{"order":"`+id+`"}`),
		&drover.SubmitOptions{ID: id, CallbackURL: callback, Namespace: ns}); err != nil {
		t.Fatalf("submit %s/%s: %v", ns, id, err)
	}
}

// TestNamespacesSubscriptionsAndFairSlots: a subscription receives only its
// namespace's events (the default one's without a namespace), with the
// IDs its namespace knows; and namespace a's receivers that never answer
// hold at most MaxPerNamespace of the slots, so namespace b's callback is
// delivered while they hang (all on one host: MaxPerHost counts per
// namespace and host).
func TestNamespacesSubscriptionsAndFairSlots(t *testing.T) {
	drivers(t, func(t *testing.T, open func(t *testing.T) store.Driver) {
		t.Parallel()
		drv := open(t)
		rc := newReceiver(t)
		release := make(chan struct{})
		var once sync.Once
		unblock := func() { once.Do(func() { close(release) }) }
		t.Cleanup(unblock) // before the receiver closes (cleanups run last first)
		rc.hold = func(r *http.Request, h hit) {
			if h.Path == "/slow" {
				select { // never answers within the test
				case <-release:
				case <-r.Context().Done():
				}
			}
		}
		c := startClient(t, drv)
		for i := range 8 {
			submitIn(t, c, "a", fmt.Sprintf("slow-%d", i), rc.url("/slow"))
		}
		opts := fastOptions(&logBuffer{}, rc.url("/default"))
		opts.Subscriptions = []Subscription{{URL: rc.url("/only-b"), Namespace: "b"}}
		opts.Concurrency, opts.MaxPerHost, opts.Timeout = 4, 4, time.Minute
		d := newDispatcher(t, drv, opts)
		stop := run(t, d)
		defer stop()
		defer unblock() // before stop, which waits for the requests in flight
		waitFor(t, "namespace a's receivers hold their slots", func() bool { return d.Stats().InFlight >= 3 })
		submitIn(t, c, "b", "fast", rc.url("/fast"))
		submitIn(t, c, "", "plain", "")
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			ok := rc.okCount()
			if len(okPaths(ok, "/fast")) == 1 && len(okPaths(ok, "/default")) == 1 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		ok := rc.okCount()
		if len(okPaths(ok, "/fast")) != 1 {
			t.Fatalf("namespace b's callback not delivered while a's receivers hang: %v (in flight %d)", ok, d.Stats().InFlight)
		}
		rc.mu.Lock()
		slow := 0
		for k, n := range rc.active {
			if strings.HasPrefix(k, "/slow ") {
				slow += n
			}
		}
		rc.mu.Unlock()
		if slow != 3 {
			t.Errorf("%d of a's requests held by its receiver, want MaxPerNamespace 3", slow)
		}
		if got := okPaths(ok, "/default"); len(got) != 1 {
			t.Errorf("the default namespace's subscription got %v, want the one default task", got)
		}
		waitFor(t, "b's subscription gets b's event", func() bool { return len(okPaths(rc.okCount(), "/only-b")) == 1 })
		for _, h := range rc.all() {
			var p Payload
			if err := json.Unmarshal(h.Body, &p); err != nil {
				t.Fatal(err)
			}
			switch h.Path {
			case "/slow":
				if p.Namespace != "a" || p.TaskID != p.Task.ID || len(p.TaskID) < 5 || p.TaskID[:5] != "slow-" {
					t.Errorf("%s: payload %s", h.Path, h.Body)
				}
			case "/fast", "/only-b":
				if p.Namespace != "b" || p.TaskID != "fast" || p.Subject != "fast" {
					t.Errorf("%s: payload %s", h.Path, h.Body)
				}
			case "/default":
				if p.Namespace != "" || p.TaskID != "plain" {
					t.Errorf("%s: payload %s", h.Path, h.Body)
				}
			}
		}
	})
}

// okPaths lists the (path, event) keys of ok on path.
func okPaths(ok map[string]int, path string) []string {
	var out []string
	for k := range ok {
		if len(k) > len(path) && k[:len(path)+1] == path+" " {
			out = append(out, k)
		}
	}
	return out
}
