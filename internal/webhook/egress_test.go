package webhook

import (
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/drover-run/drover"
	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/egress"
	"github.com/drover-run/drover/internal/egress/egresstest"
	"github.com/drover-run/drover/internal/testutil"
	"github.com/drover-run/drover/store"
)

// TestRefusedDestinationsFailAtOnce: deliveries to a loopback listener, by
// address, by a name resolving to it, or to the metadata address, fail on
// their first attempt with "egress denied"; nothing reaches the listener;
// an opened destination is still delivered to. Both drivers.
func TestRefusedDestinationsFailAtOnce(t *testing.T) {
	for name, open := range map[string]func(t *testing.T) store.Driver{
		"sqlite":   func(t *testing.T) store.Driver { return testutil.SQLite(t) },
		"postgres": func(t *testing.T) store.Driver { return testutil.Postgres(t) },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			drv := open(t)
			dns := egresstest.StartDNS(t)
			internal := egresstest.NewSink(t, "127.0.0.1:0", nil)
			allowed := newReceiver(t)
			dns.Set("loop.test", "127.0.0.1")
			p := internal.Port()
			refused := map[string]string{ // callback URL → reason
				"http://127.0.0.1:" + p + "/cb":          "egress denied: 127.0.0.1:" + p + " is a loopback address",
				"http://loop.test:" + p + "/cb":          "egress denied: loop.test:" + p + " resolves to 127.0.0.1, a loopback address",
				"http://[::ffff:127.0.0.1]:" + p + "/cb": "is a loopback address (127.0.0.1)",
				"http://169.254.169.254/latest/x":        "the cloud metadata service",
			}
			c := startClient(t, drv)
			var ids []string
			for u := range refused {
				id := "t-" + string(rune('a'+len(ids)))
				ids = append(ids, id)
				submit(t, c, "echo", id, u)
			}
			submit(t, c, "echo", "ok-1", allowed.url("/ok"))
			for _, id := range append(ids, "ok-1") {
				wait(t, c, id, drover.Processed)
			}
			opts := fastOptions(&logBuffer{})
			opts.Egress = egress.New(egress.Options{Resolver: dns.Resolver(),
				Allow: egresstest.Rules(t, strings.TrimPrefix(allowed.srv.URL, "http://"))})
			d := newDispatcher(t, drv, opts)
			stop := run(t, d)
			waitFor(t, "every delivery to end", func() bool {
				all := deliveries(t, drv, store.WebhookDeliveryListParams{})
				for _, w := range all {
					if w.Status() == dt.WebhookPending {
						return false
					}
				}
				return len(all) == len(refused)+1
			})
			stop()
			for _, w := range deliveries(t, drv, store.WebhookDeliveryListParams{}) {
				if w.TaskID == "ok-1" {
					if w.Status() != dt.WebhookDelivered {
						t.Errorf("the opened receiver's delivery is %s (%q)", w.Status(), w.LastError)
					}
					continue
				}
				want := refused[w.URL]
				if w.Status() != dt.WebhookFailed || w.Attempts != 1 || !strings.HasPrefix(w.LastError, "egress denied: ") || !strings.Contains(w.LastError, want) {
					t.Errorf("delivery to %s: %s after %d attempts, error %q; want failed at once with %q", w.URL, w.Status(), w.Attempts, w.LastError, want)
				}
			}
			if n := internal.Conns(); n != 0 {
				t.Errorf("%d connection(s) reached the internal listener", n)
			}
			if hits := allowed.all(); len(hits) != 1 || hits[0].verify(testSecret) != nil {
				t.Errorf("the opened receiver got %d requests (want 1, verified)", len(hits))
			}
			if s := d.Stats(); s.Failed != int64(len(refused)) || s.Delivered != 1 || s.Retried != 0 {
				t.Errorf("Stats = %+v, want %d failed, 1 delivered, none retried", s, len(refused))
			}
		})
	}
}

// TestPerHostLimit: with MaxPerHost 2, a slow receiver never has more than
// two requests in flight, while another host's deliveries go through;
// deliveries postponed for a slot use no attempt.
func TestPerHostLimit(t *testing.T) {
	drv := testutil.SQLite(t)
	slow := newReceiver(t)
	release := make(chan struct{})
	var releaseOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(free) // before the receiver closes, should the test fail
	var (
		mu         sync.Mutex
		inFlight   int
		maxSeen    int
		firstBatch = make(chan struct{}, 16)
	)
	slow.hold = func(r *http.Request, _ hit) {
		mu.Lock()
		inFlight++
		maxSeen = max(maxSeen, inFlight)
		mu.Unlock()
		firstBatch <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
		mu.Lock()
		inFlight--
		mu.Unlock()
	}
	fast := newReceiver(t)
	c := startClient(t, drv)
	const n = 6
	for i := range n {
		submit(t, c, "echo", "slow-"+string(rune('a'+i)), slow.url("/s"))
		submit(t, c, "echo", "fast-"+string(rune('a'+i)), "http://localhost:"+strings.Split(fast.srv.URL, ":")[2]+"/f")
	}
	for i := range n {
		wait(t, c, "slow-"+string(rune('a'+i)), drover.Processed)
		wait(t, c, "fast-"+string(rune('a'+i)), drover.Processed)
	}
	opts := fastOptions(&logBuffer{})
	opts.MaxPerHost, opts.Concurrency = 2, 8
	opts.Egress = egresstest.Open(t, "127.0.0.1", "localhost")
	d := newDispatcher(t, drv, opts)
	stop := run(t, d)
	defer stop()
	<-firstBatch
	<-firstBatch
	// The slow host holds its two slots; the other host is served meanwhile.
	waitFor(t, "every delivery to the other host", func() bool {
		ok := 0
		for _, h := range fast.all() {
			if h.Status == http.StatusOK {
				ok++
			}
		}
		return ok == n
	})
	waitFor(t, "a postponed delivery", func() bool { return d.Stats().Postponed > 0 })
	free()
	waitFor(t, "every delivery", func() bool {
		return len(deliveries(t, drv, store.WebhookDeliveryListParams{Status: dt.WebhookDelivered})) == 2*n
	})
	stop()
	mu.Lock()
	defer mu.Unlock()
	if maxSeen > 2 {
		t.Errorf("%d requests in flight at once to the slow host, want at most 2", maxSeen)
	}
	for _, w := range deliveries(t, drv, store.WebhookDeliveryListParams{}) {
		if w.Attempts != 1 {
			t.Errorf("delivery to %s took %d attempts, want 1 (postponements are not attempts)", w.URL, w.Attempts)
		}
	}
}

// TestConnectTimeoutIsShort: a destination whose connection never
// completes (packets dropped) fails the attempt after ConnectTimeout, not
// after the whole request's Timeout.
func TestConnectTimeoutIsShort(t *testing.T) {
	drv := testutil.SQLite(t)
	hole := egresstest.Blackhole(t)
	c := startClient(t, drv)
	submit(t, c, "echo", "b-1", "http://"+hole+"/cb")
	wait(t, c, "b-1", drover.Processed)
	opts := fastOptions(&logBuffer{})
	opts.Timeout, opts.ConnectTimeout, opts.MaxAttempts = time.Minute, 300*time.Millisecond, 1
	d := newDispatcher(t, drv, opts)
	start := time.Now()
	stop := run(t, d)
	waitFor(t, "the attempt to fail", func() bool {
		return len(deliveries(t, drv, store.WebhookDeliveryListParams{Status: dt.WebhookFailed})) == 1
	})
	stop()
	if el := time.Since(start); el > 15*time.Second {
		t.Errorf("the attempt took %s, want about the connect timeout (300ms)", el)
	}
	w := deliveries(t, drv, store.WebhookDeliveryListParams{})[0]
	if w.LastError != "no connection within 300ms (gave up after 1 attempts)" {
		t.Errorf("last error %q, want a timeout", w.LastError)
	}
}

// TestSignatureBindsTheDestination: one event goes to two receivers; each
// request verifies at its own URL only, so a request collected at one
// receiver (a task's callback URL, chosen by whoever submitted it) cannot
// be replayed to the other.
func TestSignatureBindsTheDestination(t *testing.T) {
	drv := testutil.SQLite(t)
	rc := newReceiver(t)
	c := startClient(t, drv)
	submit(t, c, "echo", "r-1", rc.url("/attacker"))
	wait(t, c, "r-1", drover.Processed)
	d := newDispatcher(t, drv, fastOptions(&logBuffer{}, rc.url("/ops")))
	stop := run(t, d)
	waitFor(t, "both deliveries", func() bool { return len(rc.okCount()) == 2 })
	stop()
	byPath := map[string]hit{}
	for _, h := range rc.all() {
		byPath[h.Path] = h
	}
	collected, genuine := byPath["/attacker"], byPath["/ops"]
	if collected.EventID != genuine.EventID || string(collected.Body) != string(genuine.Body) {
		t.Fatalf("the two requests differ in event (%s, %s) or body", collected.EventID, genuine.EventID)
	}
	if err := collected.verify(testSecret); err != nil {
		t.Fatalf("the request verifies not even at its own URL: %v", err)
	}
	if err := genuine.verify(testSecret); err != nil {
		t.Fatalf("the global URL's request does not verify: %v", err)
	}
	// The attacker sends the request it collected, headers and body as
	// received, to the global URL.
	replayed := collected
	replayed.URL = genuine.URL
	if err := replayed.verify(testSecret); !errors.Is(err, ErrBadSignature) {
		t.Errorf("the collected request verifies at another URL: %v, want ErrBadSignature", err)
	}
	if collected.Signature == genuine.Signature {
		t.Error("both receivers got the same signature")
	}
}
