package httpagent

import (
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/internal/egress"
	"github.com/drover-run/drover/internal/egress/egresstest"
)

// wantDenied checks that err is a permanent "egress denied" failure naming
// want, and that no connection reached the sinks.
func wantDenied(t *testing.T, err error, want string, sinks ...*egresstest.Sink) {
	t.Helper()
	egresstest.WantDenied(t, err, want, sinks...)
	if !drover.IsPermanent(err) || !strings.HasPrefix(err.Error(), "egress denied: ") {
		t.Errorf("err = %v, want it permanent, starting with \"egress denied: \"", err)
	}
}

// TestSSRFRefusedByTheDefaultPolicy is the HTTP agent's SSRF suite: every
// way to name a loopback, private or metadata address is refused at once,
// permanently, and nothing reaches the listeners.
func TestSSRFRefusedByTheDefaultPolicy(t *testing.T) {
	t.Parallel()
	dns := egresstest.StartDNS(t)
	v4 := egresstest.NewSink(t, "127.0.0.1:0", nil)
	v6 := egresstest.NewSink(t, "[::1]:0", nil)
	p4, p6 := v4.Port(), v6.Port()
	dns.Set("loop.test", "127.0.0.1")
	dns.Set("loop6.test", "::1")
	dns.Set("private.test", "10.0.0.1", "fd00::1")
	dns.Set("meta.test", "169.254.169.254")
	dns.Sequence("rebind.test", []string{"93.184.215.14"}, []string{"127.0.0.1"})
	c := newCaller(t, Options{Egress: egress.New(egress.Options{Resolver: dns.Resolver()})})
	// What a check before the call would have seen: a public address.
	if first, err := dns.Resolver().LookupNetIP(t.Context(), "ip4", "rebind.test"); err != nil || first[0].String() != "93.184.215.14" {
		t.Fatalf("first lookup of rebind.test = %v, %v", first, err)
	}

	for u, want := range map[string]string{
		"http://127.0.0.1:" + p4 + "/latest/meta-data/iam/security-credentials/role": "127.0.0.1:" + p4 + " is a loopback address",
		"http://[::1]:" + p6 + "/":                "[::1]:" + p6 + " is a loopback address",
		"http://[::ffff:127.0.0.1]:" + p4 + "/":   "is a loopback address (127.0.0.1)",
		"http://0.0.0.0:" + p4 + "/":              "is an unspecified address",
		"http://[::]:" + p6 + "/":                 "is an unspecified address",
		"http://2130706433:" + p4 + "/":           "not a standard IP address",
		"http://0177.0.0.1:" + p4 + "/":           "not a standard IP address",
		"http://0x7f.0.0.1:" + p4 + "/":           "not a standard IP address",
		"http://localhost:" + p4 + "/":            "resolves to 127.0.0.1, a loopback address",
		"http://169.254.169.254/latest/meta-data": "the cloud metadata service",
		"http://loop.test:" + p4 + "/":            "loop.test:" + p4 + " resolves to 127.0.0.1, a loopback address",
		"http://loop6.test:" + p6 + "/":           "resolves to ::1, a loopback address",
		"http://private.test/":                    "a private address",
		"http://meta.test/latest/meta-data":       "resolves to 169.254.169.254",
		"http://rebind.test:" + p4 + "/":          "rebind.test:" + p4 + " resolves to 127.0.0.1",
	} {
		start := time.Now()
		_, err := c.Do(deadline(t, 20*time.Second), &Request{Method: http.MethodGet, URL: u, Retry: fast})
		wantDenied(t, err, want, v4, v6)
		if el := time.Since(start); el > 5*time.Second {
			t.Errorf("%s: refused after %s, want at once (no retries)", u, el)
		}
	}
	if c.hosts.len() > 9 {
		t.Errorf("%d hosts kept after refusals", c.hosts.len())
	}
}

// TestAllowedHostIsReached: a rule opens one loopback port; the caller
// reaches it, and not the port next to it.
func TestAllowedHostIsReached(t *testing.T) {
	t.Parallel()
	open := egresstest.NewSink(t, "127.0.0.1:0", nil)
	closed := egresstest.NewSink(t, "127.0.0.1:0", nil)
	c := newCaller(t, Options{Egress: egress.New(egress.Options{Allow: egresstest.Rules(t, "127.0.0.1:"+open.Port())})})
	out, err := c.Do(deadline(t, 10*time.Second), &Request{Method: http.MethodGet, URL: open.URL + "/x", Retry: fast})
	if err != nil || string(out) != `"reached"` {
		t.Fatalf("Do(opened) = %s, %v; want reached", out, err)
	}
	_, err = c.Do(deadline(t, 10*time.Second), &Request{Method: http.MethodGet, URL: closed.URL + "/x", Retry: fast})
	wantDenied(t, err, "127.0.0.1:"+closed.Port()+" is a loopback address", closed)
}

// TestRedirectToARefusedHostIsNotFollowed: an allowed host answering with a redirect to
// a refused one is a permanent failure; the target sees nothing.
func TestRedirectToARefusedHostIsNotFollowed(t *testing.T) {
	t.Parallel()
	target := egresstest.NewSink(t, "127.0.0.1:0", nil)
	first := egresstest.NewSink(t, "127.0.0.1:0", http.RedirectHandler(target.URL+"/secret", http.StatusTemporaryRedirect))
	c := newCaller(t, Options{Egress: egress.New(egress.Options{Allow: egresstest.Rules(t, "127.0.0.1:"+first.Port())})})
	_, err := c.Do(deadline(t, 10*time.Second), &Request{Method: http.MethodPost, URL: first.URL, Body: []byte(`{}`), Retry: fast})
	wantStatus(t, err, http.StatusTemporaryRedirect)
	if !drover.IsPermanent(err) || target.Conns() != 0 || first.Requests() != 1 {
		t.Fatalf("err = %v (permanent %v); target connections %d, first requests %d; want permanent, 0, 1",
			err, drover.IsPermanent(err), target.Conns(), first.Requests())
	}
}

// TestRequestPolicyHasItsOwnConnections: a call under a policy that opens
// a name leaves an idle connection; a call under the default policy to the
// same URL must not reuse it.
func TestRequestPolicyHasItsOwnConnections(t *testing.T) {
	t.Parallel()
	dns := egresstest.StartDNS(t)
	sink := egresstest.NewSink(t, "127.0.0.1:0", nil)
	dns.Set("svc.test", "127.0.0.1")
	server := egress.New(egress.Options{Resolver: dns.Resolver()})
	c := newCaller(t, Options{Egress: server})
	u := "http://svc.test:" + sink.Port() + "/"
	wf := server.Restrict(egresstest.Rules(t, "svc.test"), `workflow "w"'s egress.allow`)
	if out, err := c.Do(deadline(t, 10*time.Second), &Request{Method: http.MethodGet, URL: u, Retry: fast, Egress: wf}); err != nil || string(out) != `"reached"` {
		t.Fatalf("Do under the workflow's policy = %s, %v; want reached", out, err)
	}
	_, err := c.Do(deadline(t, 10*time.Second), &Request{Method: http.MethodGet, URL: u, Retry: fast})
	wantDenied(t, err, "svc.test:"+sink.Port()+" resolves to 127.0.0.1")
	if sink.Conns() != 1 || sink.Requests() != 1 {
		t.Errorf("sink saw %d connections and %d requests, want 1 and 1", sink.Conns(), sink.Requests())
	}
	// The workflow's list also restricts: another host is refused by name.
	_, err = c.Do(deadline(t, 10*time.Second), &Request{Method: http.MethodGet, URL: "https://example.com/", Retry: fast, Egress: wf})
	wantDenied(t, err, `example.com:443: not in workflow "w"'s egress.allow (svc.test)`)
}

// TestHostTableIsBounded calls more hosts than MaxHosts: the table keeps
// at most MaxHosts, and never drops a host with a call in flight (its
// concurrency limit still holds).
func TestHostTableIsBounded(t *testing.T) {
	t.Parallel()
	const maxHosts = 4
	var entered atomic.Int64
	busy := newServer(t, func(w http.ResponseWriter, r *http.Request, _ int64) {
		entered.Add(1)
		<-r.Context().Done()
	})
	c := newCaller(t, Options{MaxHosts: maxHosts, MaxConcurrentPerHost: 1, Egress: egress.New(egress.Options{Allow: egresstest.Rules(t, "127.0.0.0/8")})})
	busyKey := hostKey(mustParse(t, busy.URL))
	held := make(chan error, 1)
	ctx := deadline(t, 30*time.Second)
	go func() {
		_, err := c.Do(ctx, &Request{Method: http.MethodGet, URL: busy.URL, Retry: RetryPolicy{MaxTries: 1}})
		held <- err
	}()
	eventually(t, "the first call to reach the busy host", func() bool { return entered.Load() == 1 })
	first := c.hosts.get(busyKey)

	// Other hosts: nothing listens on them, so each call fails at once.
	for i := range 3 * maxHosts {
		u := fmt.Sprintf("http://127.0.0.%d:9/", i+2)
		if _, err := c.Do(deadline(t, 10*time.Second), &Request{Method: http.MethodGet, URL: u, Retry: RetryPolicy{MaxTries: 1}}); err == nil {
			t.Fatalf("%s answered", u)
		}
		if n := c.hosts.len(); n > maxHosts {
			t.Fatalf("after %d hosts the table holds %d, want at most %d", i+2, n, maxHosts)
		}
	}
	if c.hosts.get(busyKey) != first {
		t.Fatal("the host with a call in flight was dropped")
	}
	// Its limit of one call in flight still holds: a second call waits.
	second := make(chan error, 1)
	sctx := deadline(t, 30*time.Second)
	go func() {
		_, err := c.Do(sctx, &Request{Method: http.MethodGet, URL: busy.URL, Retry: RetryPolicy{MaxTries: 1}})
		second <- err
	}()
	eventually(t, "the second call to wait for a slot", func() bool { return c.waiting.Load() == 1 })
	if entered.Load() != 1 {
		t.Fatalf("the busy host got %d calls, want 1 (limit 1)", entered.Load())
	}
	busy.CloseClientConnections()
	if err := <-held; err != nil {
		t.Logf("the first call: %v", err) // cut off with its connection: expected
	}
	eventually(t, "the second call to reach the busy host", func() bool { return entered.Load() == 2 })
	busy.CloseClientConnections()
	if err := <-second; err != nil {
		t.Logf("the second call: %v", err)
	}
	// Once no call holds it, the busy host can be dropped like any other.
	for i := range 2 * maxHosts {
		_, _ = c.Do(deadline(t, 10*time.Second), &Request{Method: http.MethodGet, URL: fmt.Sprintf("http://127.1.0.%d:9/", i+2), Retry: RetryPolicy{MaxTries: 1}})
	}
	if c.hosts.get(busyKey) != nil || c.hosts.len() > maxHosts {
		t.Fatalf("table holds %d hosts, busy host kept: %v", c.hosts.len(), c.hosts.get(busyKey) != nil)
	}
}
