package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/drover-run/drover"
	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/clock"
	"github.com/drover-run/drover/internal/egress/egresstest"
	"github.com/drover-run/drover/internal/notifier"
	"github.com/drover-run/drover/internal/testutil"
	"github.com/drover-run/drover/internal/testutil/clienttest"
	"github.com/drover-run/drover/store"
	"github.com/drover-run/drover/store/postgres"
)

const testSecret = "webhook-test-secret-0123456789"

// drivers runs fn once per store driver.
func drivers(t *testing.T, fn func(t *testing.T, open func(t *testing.T) store.Driver)) {
	t.Run("sqlite", func(t *testing.T) { fn(t, func(t *testing.T) store.Driver { return testutil.SQLite(t) }) })
	t.Run("postgres", func(t *testing.T) { fn(t, func(t *testing.T) store.Driver { return testutil.Postgres(t) }) })
}

// waitFor polls cond until it holds or 30s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutil.WaitFor(t, what, cond)
}

// ---- a receiver ----

type hit struct {
	Path, EventID, EventType, Attempt, Timestamp, Signature, ContentType string
	Body                                                                 []byte
	At                                                                   time.Time
	Status                                                               int
	URL                                                                  string // the URL called
	Header                                                               http.Header
}

// verify checks the hit's signature as a receiver at its URL does.
func (h hit) verify(secret string) error {
	return Verify([]byte(secret), h.URL, h.Header, h.Body, time.Now(), 0)
}

func (h hit) key() string { return h.Path + " " + h.EventID }

// receiver is an httptest server recording every request once answered
// (Status 0: the sender gave up before the answer). respond picks
// the status of a request from the hit and how many requests for the same
// (path, event) came before it; nil answers 200. It also notes any two
// requests for the same (path, event) in flight at once.
type receiver struct {
	srv *httptest.Server

	mu      sync.Mutex
	hits    []hit
	active  map[string]int // requests in flight per (path, event)
	seen    map[string]int // requests received per (path, event)
	overlap []string
	respond func(h hit, before int) int
	// hold, when set, is called in the handler before answering (to keep
	// a request in flight).
	hold func(r *http.Request, h hit)
}

func newReceiver(t *testing.T) *receiver {
	rc := &receiver{active: map[string]int{}, seen: map[string]int{}}
	rc.srv = httptest.NewServer(http.HandlerFunc(rc.serve))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) url(path string) string { return rc.srv.URL + path }

func (rc *receiver) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	h := hit{Path: r.URL.Path, EventID: r.Header.Get(HeaderID), EventType: r.Header.Get(HeaderEventType),
		Attempt: r.Header.Get(HeaderAttempt), Timestamp: r.Header.Get(HeaderTimestamp), Signature: r.Header.Get(HeaderSignature),
		ContentType: r.Header.Get("Content-Type"), Body: body, At: time.Now(), URL: rc.srv.URL + r.RequestURI, Header: r.Header.Clone()}
	if r.Method != http.MethodPost {
		h.Path = r.Method + " " + h.Path
	}
	rc.mu.Lock()
	before := rc.seen[h.key()]
	rc.seen[h.key()]++
	if rc.active[h.key()] > 0 {
		rc.overlap = append(rc.overlap, h.key())
	}
	rc.active[h.key()]++
	respond, hold := rc.respond, rc.hold
	rc.mu.Unlock()
	h.Status = http.StatusOK
	if respond != nil {
		h.Status = respond(h, before)
	}
	if hold != nil {
		hold(r, h)
	}
	if r.Context().Err() != nil {
		h.Status = 0 // the sender gave up: no answer reached it
	}
	rc.mu.Lock()
	rc.active[h.key()]--
	rc.hits = append(rc.hits, h)
	rc.mu.Unlock()
	if h.Status == 0 {
		return // nobody reads this answer
	}
	w.WriteHeader(h.Status)
	fmt.Fprintf(w, "answer %d", h.Status)
}

func (rc *receiver) all() []hit {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]hit(nil), rc.hits...)
}

// okCount counts the 2xx answers per (path, event).
func (rc *receiver) okCount() map[string]int {
	out := map[string]int{}
	for _, h := range rc.all() {
		if h.Status/100 == 2 {
			out[h.key()]++
		}
	}
	return out
}

// ---- a drover client running tasks to every final state ----

// startClient starts a client with workflows that end Processed (echo),
// Error (fail), Compensated (comp) and never (external: its agent runs
// nowhere, so the test cancels it).
func startClient(t *testing.T, drv store.Driver) *drover.Client {
	t.Helper()
	return startWorkflows(t, drv, 50*time.Millisecond,
		drover.Workflow{Name: "echo", Steps: []drover.Step{{Name: "a", Agent: "echo"}}},
		drover.Workflow{Name: "fail", Steps: []drover.Step{{Name: "a", Agent: "fail"}}},
		drover.Workflow{Name: "comp", OnFailure: drover.PolicyCompensate, Steps: []drover.Step{
			{Name: "a", Agent: "echo", Compensation: "echo"}, {Name: "b", Agent: "fail"}}},
		drover.Workflow{Name: "external", Steps: []drover.Step{{Name: "a", Agent: "remote"}}},
	)
}

// startWorkflows starts a client running workflows with the agents echo
// (returns its input), fail (fails permanently) and remote (runs nowhere),
// its supervisor every sweep.
func startWorkflows(t *testing.T, drv store.Driver, sweep time.Duration, workflows ...drover.Workflow) *drover.Client {
	t.Helper()
	echo := func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) { return r.Input, nil }
	return clienttest.Start(t, drover.Config{
		Store: drv, PollInterval: 10 * time.Millisecond, SupervisorInterval: sweep,
		Workflows: workflows,
		Agents: []drover.Agent{
			{Name: "echo", Func: echo},
			{Name: "fail", Func: func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) {
				return nil, drover.Permanent(errors.New("card declined"))
			}},
		},
		ExternalAgents: []string{"remote"},
	})
}

func submit(t *testing.T, c *drover.Client, workflow, id, callback string) {
	t.Helper()
	input := []byte(`{"order":"` + id + `"}`)
	if _, err := c.Submit(context.Background(), workflow, input, &drover.SubmitOptions{ID: id, CallbackURL: callback}); err != nil {
		t.Fatalf("submit %s: %v", id, err)
	}
}

func wait(t *testing.T, c *drover.Client, id string, want drover.ProcessState) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	task, err := c.Wait(ctx, id)
	if err != nil {
		t.Fatalf("wait %s: %v", id, err)
	}
	if task.ProcessState != want {
		t.Fatalf("task %s is %s, want %s", id, task.ProcessState, want)
	}
}

// waitDelivered waits until the 2xx answers are exactly the (path, event)
// keys of want; on time-out it names the keys missing and unexpected and
// shows the end of the dispatcher's log.
func waitDelivered[V any](t *testing.T, rc *receiver, want map[string]V, logs *logBuffer) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := rc.okCount()
		var missing, extra []string
		for k := range want {
			if got[k] == 0 {
				missing = append(missing, k)
			}
		}
		for k := range got {
			if _, ok := want[k]; !ok {
				extra = append(extra, k)
			}
		}
		if len(missing) == 0 && len(extra) == 0 {
			return
		}
		if time.Now().After(deadline) {
			slices.Sort(missing)
			slices.Sort(extra)
			log := logs.String()
			log = log[max(0, len(log)-8000):]
			t.Fatalf("timed out waiting for every webhook delivered: missing %v, unexpected %v; %d requests answered\nend of the dispatcher's log:\n%s",
				missing, extra, len(rc.all()), log)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// ---- running a dispatcher ----

// logBuffer collects log output, to check what is (not) logged.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// fastOptions are options for tests: quick polls and back-off.
func fastOptions(logs *logBuffer, urls ...string) Options {
	return Options{
		Secret: []byte(testSecret), URLs: urls, PollInterval: 5 * time.Millisecond,
		BackoffBase: time.Millisecond, BackoffMax: 4 * time.Millisecond, Timeout: 5 * time.Second,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
}

func newDispatcher(t *testing.T, drv store.Driver, opts Options) *Dispatcher {
	t.Helper()
	if opts.Egress == nil {
		opts.Egress = egresstest.Open(t, "127.0.0.1") // where the test receivers listen
	}
	d, err := New(drv, opts)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// run starts d.Run; the returned stop cancels it and waits for it to
// return (failing the test if it does not within 30s).
func run(t *testing.T, d *Dispatcher) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run = %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Errorf("Run did not return within 30s of its context ending")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func deliveries(t *testing.T, drv store.Driver, p store.WebhookDeliveryListParams) []*dt.WebhookDelivery {
	t.Helper()
	ds, err := drv.Reader().WebhookDeliveryList(context.Background(), &p)
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

// finalEvents returns the final-state events of the store, by ID.
func finalEvents(t *testing.T, drv store.Driver) map[int64]*dt.Event {
	t.Helper()
	evs, err := drv.Reader().EventList(context.Background(), &store.EventListParams{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[int64]*dt.Event{}
	for _, ev := range evs {
		if dt.IsWebhookEvent(ev.Type) {
			out[ev.ID] = ev
		}
	}
	return out
}

// brief describes deliveries without their payloads, for failure messages.
func brief(ds ...*dt.WebhookDelivery) string {
	var b strings.Builder
	for _, w := range ds {
		fmt.Fprintf(&b, "\n  delivery %d event %d %s: %s attempts %d claimed by %q status %d error %q next %s",
			w.ID, w.EventID, w.URL, w.Status(), w.Attempts, w.ClaimedBy, w.LastStatus, w.LastError, w.NextAttemptAt.Format(time.RFC3339Nano))
	}
	return b.String()
}

func briefHits(hs []hit) string {
	var b strings.Builder
	for _, h := range hs {
		fmt.Fprintf(&b, "\n  %s event %s attempt %s → %d", h.Path, h.EventID, h.Attempt, h.Status)
	}
	return b.String()
}

// ---- tests ----

func TestNewValidatesOptions(t *testing.T) {
	drv := testutil.SQLite(t)
	good := Options{Secret: []byte(testSecret)}
	cases := []struct {
		name string
		mod  func(o *Options)
		want string
	}{
		{"no secret", func(o *Options) { o.Secret = nil }, "Secret is 0 bytes"},
		{"short secret", func(o *Options) { o.Secret = []byte("short") }, "at least 16"},
		{"relative URL", func(o *Options) { o.URLs = []string{"/hook"} }, "URLs[0]"},
		{"ftp URL", func(o *Options) { o.URLs = []string{"http://ok.example/", "ftp://x.example/"} }, "URLs[1]"},
		{"negative timeout", func(o *Options) { o.Timeout = -time.Second }, "Timeout"},
		{"negative attempts", func(o *Options) { o.MaxAttempts = -1 }, "MaxAttempts"},
		{"max below base", func(o *Options) { o.BackoffBase, o.BackoffMax = time.Minute, time.Second }, "BackoffMax"},
		{"subscription URL", func(o *Options) { o.Subscriptions = []Subscription{{URL: "ftp://x.example/"}} }, "Subscriptions[0]"},
		{"subscription events", func(o *Options) {
			o.Subscriptions = []Subscription{{URL: "https://x.example/", Events: dt.WebhookEventSet{"alerts", "step_retry"}}}
		}, `Subscriptions[0] (https://x.example/): unknown event selector "step_retry"`},
	}
	for _, c := range cases {
		o := good
		c.mod(&o)
		_, err := New(drv, o)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: New = %v, want an error mentioning %q", c.name, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), testSecret) {
			t.Errorf("%s: error shows the secret: %v", c.name, err)
		}
	}
	d, err := New(drv, Options{Secret: []byte(testSecret), URLs: []string{"https://a.example/x", "https://a.example/x"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(d.opts.Subscriptions) != 1 || d.opts.Timeout != DefaultTimeout || d.opts.MaxAttempts != DefaultMaxAttempts || d.Instance() == "" {
		t.Errorf("defaults not applied: %+v", d.opts)
	}
}

// Every final state of a task (Processed, Error, Compensated, Cancelled)
// reaches the task's callback URL and the global URL exactly once, signed;
// events that are not final and tasks without a callback send nothing to
// a callback URL.
func TestFinalStatesDelivered(t *testing.T) {
	drivers(t, func(t *testing.T, open func(t *testing.T) store.Driver) {
		t.Parallel()
		drv := open(t)
		rc := newReceiver(t)
		logs := &logBuffer{}
		c := startClient(t, drv)
		// The dispatcher starts after the tasks: the store's cursor starts
		// at its migration, so nothing is missed.
		submit(t, c, "echo", "ok-1", rc.url("/cb/ok-1"))
		submit(t, c, "fail", "fail-1", rc.url("/cb/fail-1"))
		submit(t, c, "comp", "comp-1", rc.url("/cb/comp-1"))
		submit(t, c, "external", "cancel-1", rc.url("/cb/cancel-1"))
		submit(t, c, "echo", "nocb-1", "")
		wait(t, c, "ok-1", drover.Processed)
		wait(t, c, "fail-1", drover.Error)
		wait(t, c, "comp-1", drover.Compensated)
		wait(t, c, "nocb-1", drover.Processed)
		if _, err := c.Cancel(context.Background(), "cancel-1", "customer asked"); err != nil {
			t.Fatal(err)
		}

		d := newDispatcher(t, drv, fastOptions(logs, rc.url("/all")))
		stop := run(t, d)
		finals := finalEvents(t, drv)
		if len(finals) != 5 {
			t.Fatalf("%d final events, want 5", len(finals))
		}
		want := map[string]*dt.Event{} // "path eventID" → event
		for _, ev := range finals {
			want[fmt.Sprintf("/all %d", ev.ID)] = ev
			if ev.TaskID != "nocb-1" {
				want[fmt.Sprintf("/cb/%s %d", ev.TaskID, ev.ID)] = ev
			}
		}
		waitDelivered(t, rc, want, logs)
		stop()

		for k, n := range rc.okCount() {
			if want[k] == nil {
				t.Errorf("unexpected webhook %s", k)
			} else if n != 1 {
				t.Errorf("webhook %s delivered %d times, want once", k, n)
			}
		}
		wantType := map[string]string{"ok-1": "processed", "nocb-1": "processed", "fail-1": "error", "comp-1": "compensated", "cancel-1": "cancelled"}
		wantState := map[string]string{"ok-1": "Processed", "nocb-1": "Processed", "fail-1": "Error", "comp-1": "Compensated", "cancel-1": "Cancelled"}
		for _, h := range rc.all() {
			ev := want[h.key()]
			if ev == nil {
				continue
			}
			if err := h.verify(testSecret); err != nil {
				t.Errorf("%s: signature %q does not verify: %v", h.key(), h.Signature, err)
			}
			if err := h.verify("another-secret-0123456"); !errors.Is(err, ErrBadSignature) {
				t.Errorf("%s: verifies with another secret: %v", h.key(), err)
			}
			if h.ContentType != "application/json" || h.Attempt != "1" || h.EventID != strconv.FormatInt(ev.ID, 10) || h.EventType != string(ev.Type) {
				t.Errorf("%s: headers Content-Type %q, attempt %q, event %q %q", h.key(), h.ContentType, h.Attempt, h.EventID, h.EventType)
			}
			if ts, err := strconv.ParseInt(h.Timestamp, 10, 64); err != nil || h.At.Unix()-ts < 0 || h.At.Unix()-ts > 5 {
				t.Errorf("%s: webhook-timestamp %q, received at %d", h.key(), h.Timestamp, h.At.Unix())
			}
			if old := h.Header.Get("Drover-Signature") + h.Header.Get("Drover-Event-Id"); old != "" {
				t.Errorf("%s: the old Drover-Signature or Drover-Event-Id header is still sent: %q", h.key(), old)
			}
			var p Payload
			if err := json.Unmarshal(h.Body, &p); err != nil {
				t.Fatalf("%s: body is not JSON: %v\n%s", h.key(), err, h.Body)
			}
			if p.ID != h.EventID || p.TaskID != ev.TaskID || p.Type != wantType[ev.TaskID] || p.State != wantState[ev.TaskID] ||
				p.Task.ID != ev.TaskID || p.Task.State != wantState[ev.TaskID] || !p.OccurredAt.Equal(ev.CreatedAt) {
				t.Errorf("%s: payload %s", h.key(), h.Body)
			}
			if want := `{"order":"` + ev.TaskID + `"}`; string(p.Task.Input) != want {
				t.Errorf("%s: task input %s, want %s", h.key(), p.Task.Input, want)
			}
			switch ev.TaskID {
			case "ok-1":
				if string(p.Output) != `{"order":"ok-1"}` || p.Workflow != "echo" {
					t.Errorf("%s: output %s workflow %q", h.key(), p.Output, p.Workflow)
				}
			case "fail-1":
				if !strings.Contains(p.LastError, "card declined") || string(p.Output) != "null" {
					t.Errorf("%s: last_error %q output %s", h.key(), p.LastError, p.Output)
				}
			case "cancel-1":
				if p.Message != "customer asked" {
					t.Errorf("%s: message %q, want the cancel reason", h.key(), p.Message)
				}
			}
			if bytes.Contains(h.Body, []byte("/cb/")) {
				t.Errorf("%s: the payload shows the callback URL: %s", h.key(), h.Body)
			}
		}
		// The store: one delivered delivery per (final event, URL), nothing else.
		ds := deliveries(t, drv, store.WebhookDeliveryListParams{})
		if len(ds) != len(want) {
			t.Errorf("%d deliveries stored, want %d", len(ds), len(want))
		}
		for _, w := range ds {
			if w.Status() != dt.WebhookDelivered || w.Attempts != 1 || w.LastStatus != 200 || w.ClaimedBy != "" {
				t.Errorf("delivery %d (%s): %s, attempts %d, status %d, claimed by %q", w.ID, w.URL, w.Status(), w.Attempts, w.LastStatus, w.ClaimedBy)
			}
		}
		if s := d.Stats(); s.Delivered != int64(len(want)) || s.Enqueued != int64(len(want)) || s.InFlight != 0 || s.Failed != 0 {
			t.Errorf("Stats = %+v, want %d enqueued and delivered", s, len(want))
		}
		if strings.Contains(logs.String(), testSecret) {
			t.Error("the secret appears in the logs")
		}
	})
}

// failFirst is a receiver's answer: 503 to the first n deliveries, 204 after.
func failFirst(n int) func(hit, int) int {
	return func(_ hit, before int) int {
		if before < n {
			return http.StatusServiceUnavailable
		}
		return http.StatusNoContent
	}
}

// A receiver failing the first tries gets retries of the same event, with
// increasing attempt numbers and the same body, until it answers 2xx.
func TestRetriesUntilDelivered(t *testing.T) {
	drivers(t, func(t *testing.T, open func(t *testing.T) store.Driver) {
		t.Parallel()
		drv := open(t)
		rc := newReceiver(t)
		rc.respond = failFirst(3)
		c := startClient(t, drv)
		submit(t, c, "echo", "r-1", rc.url("/cb"))
		wait(t, c, "r-1", drover.Processed)
		d := newDispatcher(t, drv, fastOptions(&logBuffer{}))
		stop := run(t, d)
		waitFor(t, "the delivery to succeed", func() bool { return len(rc.okCount()) == 1 })
		stop()

		hits := rc.all()
		if len(hits) != 4 {
			t.Fatalf("%d requests, want 4 (3 failures, then success)", len(hits))
		}
		for i, h := range hits {
			if h.EventID != hits[0].EventID || h.Attempt != strconv.Itoa(i+1) || !bytes.Equal(h.Body, hits[0].Body) {
				t.Errorf("request %d: event %s attempt %s; want event %s attempt %d and the same body", i, h.EventID, h.Attempt, hits[0].EventID, i+1)
			}
			if err := h.verify(testSecret); err != nil {
				t.Errorf("request %d: %v", i, err)
			}
		}
		ds := deliveries(t, drv, store.WebhookDeliveryListParams{})
		if len(ds) != 1 || ds[0].Status() != dt.WebhookDelivered || ds[0].Attempts != 4 || ds[0].LastStatus != 204 {
			t.Fatalf("deliveries: %s", brief(ds...))
		}
		if s := d.Stats(); s.Retried != 3 || s.Delivered != 1 || s.Attempts != 4 {
			t.Errorf("Stats = %+v, want 3 retried, 1 delivered, 4 attempts", s)
		}
		// The same counters as Prometheus metrics.
		want := `
# HELP drover_webhook_attempts_total Webhook requests sent (or tried).
# TYPE drover_webhook_attempts_total counter
drover_webhook_attempts_total 4
# HELP drover_webhook_delivered_total Webhook attempts answered with a 2xx status.
# TYPE drover_webhook_delivered_total counter
drover_webhook_delivered_total 1
# HELP drover_webhook_in_flight Webhook requests in flight now.
# TYPE drover_webhook_in_flight gauge
drover_webhook_in_flight 0
# HELP drover_webhook_retried_total Failed webhook attempts to be tried again.
# TYPE drover_webhook_retried_total counter
drover_webhook_retried_total 3
`
		if err := promtest.CollectAndCompare(d.Collector(), strings.NewReader(want), "drover_webhook_attempts_total",
			"drover_webhook_delivered_total", "drover_webhook_in_flight", "drover_webhook_retried_total"); err != nil {
			t.Error(err)
		}
	})
}

// A stored callback URL outside AllowCallbacks is not sent: its delivery
// fails at once. The global URLs are sent whatever the list says.
func TestCallbackOutsideTheAllowListIsNotSent(t *testing.T) {
	drv := testutil.SQLite(t)
	rc := newReceiver(t)
	c := startClient(t, drv)
	submit(t, c, "echo", "ok-1", rc.url("/allowed/cb"))
	submit(t, c, "echo", "no-1", rc.url("/elsewhere/cb"))
	wait(t, c, "ok-1", drover.Processed)
	wait(t, c, "no-1", drover.Processed)
	opts := fastOptions(&logBuffer{}, rc.url("/global"))
	allow, err := ParseAllow([]string{rc.url("/allowed/")})
	if err != nil {
		t.Fatal(err)
	}
	opts.AllowCallbacks = allow
	d := newDispatcher(t, drv, opts)
	stop := run(t, d)
	waitFor(t, "every delivery to end", func() bool {
		return len(deliveries(t, drv, store.WebhookDeliveryListParams{Status: dt.WebhookDelivered})) == 3 &&
			len(deliveries(t, drv, store.WebhookDeliveryListParams{Status: dt.WebhookFailed})) == 1
	})
	stop()
	paths := map[string]int{}
	for _, h := range rc.all() {
		paths[h.Path]++
	}
	if paths["/allowed/cb"] != 1 || paths["/global"] != 2 || paths["/elsewhere/cb"] != 0 {
		t.Errorf("requests by path %v, want /allowed/cb once, /global twice, /elsewhere/cb never", paths)
	}
	failed := deliveries(t, drv, store.WebhookDeliveryListParams{Status: dt.WebhookFailed})[0]
	if failed.TaskID != "no-1" || failed.LastStatus != 0 || !strings.Contains(failed.LastError, "is not allowed") {
		t.Errorf("failed delivery: task %s status %d error %q", failed.TaskID, failed.LastStatus, failed.LastError)
	}
}

// A receiver that always fails gets MaxAttempts requests; then the
// delivery is failed, with the last error, and a warning is logged.
func TestGivesUpAfterMaxAttempts(t *testing.T) {
	drv := testutil.SQLite(t)
	rc := newReceiver(t)
	rc.respond = func(hit, int) int { return http.StatusInternalServerError }
	c := startClient(t, drv)
	submit(t, c, "fail", "f-1", rc.url("/cb?token=receiver-credential"))
	wait(t, c, "f-1", drover.Error)
	logs := &logBuffer{}
	opts := fastOptions(logs)
	opts.MaxAttempts = 3
	d := newDispatcher(t, drv, opts)
	stop := run(t, d)
	waitFor(t, "the delivery to fail", func() bool {
		ds := deliveries(t, drv, store.WebhookDeliveryListParams{Status: dt.WebhookFailed})
		return len(ds) == 1
	})
	stop()
	if n := len(rc.all()); n != 3 {
		t.Errorf("%d requests, want MaxAttempts = 3", n)
	}
	w := deliveries(t, drv, store.WebhookDeliveryListParams{})[0]
	if w.Attempts != 3 || w.LastStatus != 500 || !strings.Contains(w.LastError, "HTTP 500: answer 500") ||
		!strings.Contains(w.LastError, "gave up after 3 attempts") || w.FailedAt == nil {
		t.Errorf("failed delivery: attempts %d status %d error %q", w.Attempts, w.LastStatus, w.LastError)
	}
	out := logs.String()
	if !strings.Contains(out, "level=WARN") || !strings.Contains(out, "webhook delivery failed for good") {
		t.Errorf("no warning logged:\n%s", out)
	}
	if strings.Contains(out, "receiver-credential") || strings.Contains(out, testSecret) {
		t.Errorf("the logs show a credential:\n%s", out)
	}
	if s := d.Stats(); s.Failed != 1 || s.Retried != 2 {
		t.Errorf("Stats = %+v, want 1 failed, 2 retried", s)
	}
}

// With an injected clock: a delivery still failing MaxAge after it was
// queued is given up at its next attempt, and final-state events found
// when already older than MaxAge are not queued at all.
func TestGivesUpAfterMaxAge(t *testing.T) {
	drv := testutil.SQLite(t)
	rc := newReceiver(t)
	rc.respond = func(hit, int) int { return http.StatusBadGateway }
	c := startClient(t, drv)
	submit(t, c, "echo", "a-1", rc.url("/cb"))
	wait(t, c, "a-1", drover.Processed)
	fake := clock.NewFake(time.Now())
	opts := fastOptions(&logBuffer{})
	opts.Clock = fake
	opts.BackoffBase, opts.BackoffMax = time.Hour, time.Hour // the retry waits for the clock
	d := newDispatcher(t, drv, opts)
	stop := run(t, d)
	waitFor(t, "the first attempt", func() bool {
		ds := deliveries(t, drv, store.WebhookDeliveryListParams{})
		return len(ds) == 1 && ds[0].Attempts == 1 && ds[0].ClaimedBy == ""
	})
	first := deliveries(t, drv, store.WebhookDeliveryListParams{})[0]
	if first.Status() != dt.WebhookPending || first.NextAttemptAt.Before(fake.Now().Add(30*time.Minute)) {
		t.Fatalf("after one failure: %s, next attempt %s (now %s); want pending, about an hour later", first.Status(), first.NextAttemptAt, fake.Now())
	}
	stop()
	// A task that ends now, seen by a dispatcher a day later.
	submit(t, c, "echo", "a-2", rc.url("/cb"))
	wait(t, c, "a-2", drover.Processed)
	fake.Advance(DefaultMaxAge + time.Hour)
	d = newDispatcher(t, drv, opts)
	stop = run(t, d)
	waitFor(t, "the delivery to be given up", func() bool {
		return len(deliveries(t, drv, store.WebhookDeliveryListParams{Status: dt.WebhookFailed})) == 1
	})
	waitFor(t, "the late event to be skipped", func() bool { return d.Stats().TooOld == 1 })
	stop()
	ds := deliveries(t, drv, store.WebhookDeliveryListParams{})
	if len(ds) != 1 || ds[0].Attempts != 2 || !strings.Contains(ds[0].LastError, "older than 24h0m0s") {
		t.Fatalf("deliveries = %d, first: attempts %d error %q; want the first only, failed at attempt 2 for its age",
			len(ds), ds[0].Attempts, ds[0].LastError)
	}
	if n := len(rc.all()); n != 2 {
		t.Errorf("%d requests, want 2", n)
	}
}

// Stopping a dispatcher while a request is in flight lets the request run
// to its timeout and records the attempt; after a restart the event is
// sent again with the same event ID and body and the next attempt number.
func TestStopMidDeliveryThenRestart(t *testing.T) {
	drivers(t, func(t *testing.T, open func(t *testing.T) store.Driver) {
		t.Parallel()
		drv := open(t)
		rc := newReceiver(t)
		inFlight := make(chan struct{}, 1)
		rc.hold = func(r *http.Request, h hit) {
			if h.Attempt == "1" {
				inFlight <- struct{}{}
				<-r.Context().Done() // never answers: the dispatcher's timeout ends it
			}
		}
		c := startClient(t, drv)
		submit(t, c, "echo", "s-1", rc.url("/cb"))
		wait(t, c, "s-1", drover.Processed)
		opts := fastOptions(&logBuffer{})
		opts.Instance = "disp-1"
		opts.Timeout = 300 * time.Millisecond
		d := newDispatcher(t, drv, opts)
		stop := run(t, d)
		select {
		case <-inFlight:
		case <-time.After(30 * time.Second):
			t.Fatal("no request arrived")
		}
		stop() // returns once the request timed out and its result is recorded
		ds := deliveries(t, drv, store.WebhookDeliveryListParams{})
		if len(ds) != 1 || ds[0].Status() != dt.WebhookPending || ds[0].Attempts != 1 || ds[0].ClaimedBy != "" ||
			!strings.Contains(ds[0].LastError, "no answer within 300ms") {
			t.Fatalf("after stop: %s", brief(ds...))
		}
		d2 := newDispatcher(t, drv, opts)
		stop2 := run(t, d2)
		waitFor(t, "the redelivery", func() bool { return len(rc.okCount()) == 1 })
		stop2()
		hits := rc.all()
		if len(hits) != 2 || hits[1].EventID != hits[0].EventID || hits[1].Attempt != "2" || !bytes.Equal(hits[0].Body, hits[1].Body) {
			t.Fatalf("requests: %s", briefHits(hits))
		}
		if w := deliveries(t, drv, store.WebhookDeliveryListParams{})[0]; w.Status() != dt.WebhookDelivered || w.Attempts != 2 {
			t.Errorf("after restart: %s, attempts %d", w.Status(), w.Attempts)
		}
	})
}

// A dispatcher that died with a claim in flight (what a crash leaves in the
// store: the claim, no result): restarted with the same instance name it
// releases the claim and sends at once; another instance takes it over
// once the claim's lease has passed. At least once, same event ID.
func TestCrashedClaimIsSentAgain(t *testing.T) {
	drivers(t, func(t *testing.T, open func(t *testing.T) store.Driver) {
		t.Parallel()
		drv := open(t)
		rc := newReceiver(t)
		c := startClient(t, drv)
		submit(t, c, "echo", "c-1", rc.url("/cb/1"))
		submit(t, c, "echo", "c-2", rc.url("/cb/2"))
		wait(t, c, "c-1", drover.Processed)
		wait(t, c, "c-2", drover.Processed)
		fake := clock.NewFake(time.Now())
		opts := fastOptions(&logBuffer{})
		opts.Clock = fake
		ctx := context.Background()

		// The "crashed" dispatcher: it queued both and claimed them.
		dead := newDispatcher(t, drv, Options{Secret: opts.Secret, Instance: "dead", Clock: fake})
		dead.enqueueAll(ctx, false)
		var claimed []*dt.WebhookDelivery
		if err := drv.InTx(ctx, func(ctx context.Context, x store.Executor) error {
			var err error
			claimed, err = x.WebhookDeliveryClaim(ctx, &store.WebhookDeliveryClaimParams{ClaimedBy: "dead", Now: fake.Now(), Lease: dead.lease, Limit: 1})
			return err
		}); err != nil || len(claimed) != 1 {
			t.Fatalf("claim: %v, %d claimed", err, len(claimed))
		}
		// Another instance sends the unclaimed one, not the claimed one
		// while its lease lasts.
		opts.Instance = "other"
		other := newDispatcher(t, drv, opts)
		stopOther := run(t, other)
		waitFor(t, "the unclaimed delivery", func() bool {
			return len(deliveries(t, drv, store.WebhookDeliveryListParams{Status: dt.WebhookDelivered})) == 1
		})
		if ok := rc.okCount(); ok[fmt.Sprintf("%s %d", claimed[0].URL[len(rc.srv.URL):], claimed[0].EventID)] != 0 {
			t.Fatalf("the claimed delivery was sent while its claim was live: %v", ok)
		}
		// Past the lease, it is taken over.
		fake.Advance(dead.lease + time.Second)
		waitFor(t, "the taken-over delivery", func() bool { return len(rc.okCount()) == 2 })
		stopOther()
		hits := rc.all()
		last := hits[len(hits)-1]
		if last.EventID != strconv.FormatInt(claimed[0].EventID, 10) || last.Attempt != "2" {
			t.Errorf("taken-over request: event %s attempt %s; want event %d attempt 2", last.EventID, last.Attempt, claimed[0].EventID)
		}

		// The same again with a restart of the dead instance itself: no
		// waiting for the lease.
		submit(t, c, "echo", "c-3", rc.url("/cb/3"))
		wait(t, c, "c-3", drover.Processed)
		dead.enqueueAll(ctx, false)
		if err := drv.InTx(ctx, func(ctx context.Context, x store.Executor) error {
			var err error
			claimed, err = x.WebhookDeliveryClaim(ctx, &store.WebhookDeliveryClaimParams{ClaimedBy: "dead", Now: fake.Now(), Lease: time.Hour, Limit: 10})
			return err
		}); err != nil || len(claimed) != 1 {
			t.Fatalf("claim: %v, %d claimed", err, len(claimed))
		}
		opts.Instance = "dead"
		restarted := newDispatcher(t, drv, opts)
		stopRestarted := run(t, restarted)
		waitFor(t, "the released delivery", func() bool { return len(rc.okCount()) == 3 })
		stopRestarted()
		hits = rc.all()
		if last := hits[len(hits)-1]; last.Path != "/cb/3" || last.Attempt != "2" {
			t.Errorf("released request: %s attempt %s; want /cb/3 attempt 2", last.Path, last.Attempt)
		}
	})
}

// Two dispatchers (two processes: two pools) on one PostgreSQL schema
// share the work: no (event, URL) is ever sent by both at once, none is
// lost, and each is delivered exactly once when nothing crashes — with a
// receiver that fails some first attempts, so retries race too.
func TestTwoDispatchersShareOneSchema(t *testing.T) {
	drv := testutil.Postgres(t)
	drv2, err := postgres.Open(context.Background(), testutil.PostgresURL(t), postgres.Options{Schema: drv.Schema()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { drv2.Close() })
	rc := newReceiver(t)
	rc.respond = func(h hit, before int) int {
		if before == 0 && len(h.EventID) > 0 && h.EventID[len(h.EventID)-1]%3 == 0 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	}
	rc.hold = func(*http.Request, hit) { time.Sleep(time.Millisecond) } // widen the window for overlaps
	c := startClient(t, drv)
	const tasks = 40
	logs := &logBuffer{}
	opts := fastOptions(logs, rc.url("/all"))
	opts.Concurrency = 4
	opts.Instance = "a"
	a := newDispatcher(t, drv, opts)
	opts.Instance = "b"
	b := newDispatcher(t, drv2, opts)
	stopA, stopB := run(t, a), run(t, b)
	for i := range tasks {
		submit(t, c, "echo", fmt.Sprintf("t-%02d", i), rc.url(fmt.Sprintf("/cb/%02d", i)))
	}
	waitFor(t, "every webhook delivered", func() bool { return len(rc.okCount()) == 2*tasks })
	stopA()
	stopB()

	rc.mu.Lock()
	overlap := rc.overlap
	rc.mu.Unlock()
	if len(overlap) > 0 {
		t.Errorf("sent by two dispatchers at once: %v", overlap)
	}
	for k, n := range rc.okCount() {
		if n != 1 {
			t.Errorf("%s delivered %d times, want once", k, n)
		}
	}
	ds := deliveries(t, drv, store.WebhookDeliveryListParams{})
	if len(ds) != 2*tasks {
		t.Errorf("%d deliveries, want %d", len(ds), 2*tasks)
	}
	for _, w := range ds {
		if w.Status() != dt.WebhookDelivered {
			t.Errorf("delivery %d: %s", w.ID, w.Status())
		}
	}
	sa, sb := a.Stats(), b.Stats()
	if sa.Delivered+sb.Delivered != 2*tasks || sa.Enqueued+sb.Enqueued != 2*tasks {
		t.Errorf("Stats a %+v, b %+v: want %d delivered and enqueued in all", sa, sb, 2*tasks)
	}
	t.Logf("a: %+v; b: %+v", sa, sb)
	if t.Failed() {
		t.Logf("logs:\n%s", logs)
	}
}

// Finished deliveries are pruned once last updated more than Retention ago;
// younger ones stay, and so do pending ones however old.
func TestPrunesOldDeliveries(t *testing.T) {
	drivers(t, func(t *testing.T, open func(t *testing.T) store.Driver) {
		drv := open(t)
		rc := newReceiver(t)
		rc.respond = func(h hit, _ int) int {
			if h.Path == "/pending" {
				return http.StatusServiceUnavailable
			}
			return http.StatusOK
		}
		c := startClient(t, drv)
		submit(t, c, "echo", "old", rc.url("/ok"))
		submit(t, c, "echo", "pending", rc.url("/pending"))
		wait(t, c, "old", drover.Processed)
		wait(t, c, "pending", drover.Processed)
		fake := clock.NewFake(time.Now())
		lb := &logBuffer{}
		defer func() {
			if t.Failed() {
				t.Log(lb.String())
			}
		}()
		opts := fastOptions(lb)
		opts.Clock = fake
		opts.Retention = time.Hour
		opts.BackoffBase, opts.BackoffMax = 10*time.Hour, 10*time.Hour // the pending one is not tried again
		d := newDispatcher(t, drv, opts)
		stop := run(t, d)
		defer stop()
		byTask := func() map[string]*dt.WebhookDelivery {
			m := map[string]*dt.WebhookDelivery{}
			for _, w := range deliveries(t, drv, store.WebhookDeliveryListParams{}) {
				m[w.TaskID] = w
			}
			return m
		}
		show := func(w *dt.WebhookDelivery) string {
			if w == nil {
				return "missing"
			}
			return brief(w)
		}
		settled := func(m map[string]*dt.WebhookDelivery, id string, want dt.WebhookStatus) bool {
			w := m[id]
			return w != nil && w.Status() == want && w.ClaimedBy == ""
		}
		waitFor(t, "one delivery delivered, one failed once", func() bool {
			m := byTask()
			return settled(m, "old", dt.WebhookDelivered) && settled(m, "pending", dt.WebhookPending) && m["pending"].Attempts == 1
		})
		// 50 minutes on (a prune runs: nothing is old enough), a task ends
		// and its delivery is delivered.
		fake.Advance(50 * time.Minute)
		submit(t, c, "echo", "young", rc.url("/ok"))
		wait(t, c, "young", drover.Processed)
		waitFor(t, "the young delivery", func() bool { return settled(byTask(), "young", dt.WebhookDelivered) })
		// A prune the advance triggered (the retention service runs beside
		// the sends, every pruneEvery) had to leave the first one, 50
		// minutes old.
		if m := byTask(); !settled(m, "old", dt.WebhookDelivered) {
			t.Fatalf("the delivery delivered 50 minutes ago is gone or changed (Retention 1h): %s", show(m["old"]))
		}
		// 21 minutes more: the first delivery is 71 minutes old, the young
		// one 21, the pending one (last updated at the start) 71.
		fake.Advance(pruneEvery + 11*time.Minute)
		waitFor(t, "the old delivery to be pruned", func() bool { return byTask()["old"] == nil })
		m := byTask()
		if !settled(m, "young", dt.WebhookDelivered) {
			t.Errorf("the delivery delivered 21 minutes ago is gone or changed (Retention 1h): %s", show(m["young"]))
		}
		if w := m["pending"]; !settled(m, "pending", dt.WebhookPending) || w.Attempts != 1 {
			t.Errorf("the pending delivery, last updated 71 minutes ago, is gone or changed: %s", show(w))
		}
	})
}

// A final state notified by another transaction wakes the dispatcher: with
// an hour's poll the webhook still goes out at once. (SQLite has no
// notifications: its dispatchers find work at the poll.)
func TestNotifiedFinalStateWakesDispatcher(t *testing.T) {
	t.Parallel()
	drv := testutil.Postgres(t)
	rc := newReceiver(t)
	c := startClient(t, drv)
	opts := fastOptions(&logBuffer{})
	opts.PollInterval = time.Hour
	stop := run(t, newDispatcher(t, drv, opts))
	defer stop()
	// A notification sent before the LISTEN is up would be lost.
	waitFor(t, "the LISTEN connection", func() bool {
		var n int
		err := drv.Pool().QueryRow(context.Background(),
			`SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN %' AND query LIKE '%' || $1 || '%'`, "drover_"+drv.Schema()).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n > 0
	})
	submit(t, c, "echo", "woken-1", rc.url("/cb/woken-1"))
	wait(t, c, "woken-1", drover.Processed)
	waitFor(t, "the webhook, long before the hour's poll", func() bool { return len(rc.okCount()) == 1 })
}

// While notifications arrive a dispatcher polls only as a slow fallback:
// with an hour's poll, the retries of a failing receiver still go out when
// their back-off ends (the dispatcher wakes for the retries it recorded).
func TestNotifiedDispatcherRetriesWhenDue(t *testing.T) {
	t.Parallel()
	drv := testutil.Postgres(t)
	rc := newReceiver(t)
	rc.respond = failFirst(2)
	c := startClient(t, drv)
	opts := fastOptions(&logBuffer{})
	opts.PollInterval = time.Hour
	opts.BackoffBase, opts.BackoffMax = 200*time.Millisecond, 400*time.Millisecond
	stop := run(t, newDispatcher(t, drv, opts))
	defer stop()
	waitFor(t, "notifications", notifier.For(drv).Live)
	submit(t, c, "echo", "retried-1", rc.url("/cb/retried-1"))
	wait(t, c, "retried-1", drover.Processed)
	waitFor(t, "the webhook after two retries, long before the hour's poll", func() bool { return len(rc.okCount()) == 1 })
	if n := len(rc.all()); n != 3 {
		t.Errorf("%d requests, want 3 (two failures, then success)", n)
	}
}

// notifiedDispatcher starts, on a fresh PostgreSQL store, a client, a
// receiver, and a dispatcher polling every 20 ms that relies on
// notifications (IdlePoll), and waits for them to arrive.
func notifiedDispatcher(t *testing.T) (*postgres.Driver, *receiver, *drover.Client, *logBuffer) {
	t.Helper()
	drv := testutil.Postgres(t)
	rc := newReceiver(t)
	c := startClient(t, drv)
	logs := &logBuffer{}
	opts := fastOptions(logs)
	opts.PollInterval = 20 * time.Millisecond
	run(t, newDispatcher(t, drv, opts))
	waitFor(t, "notifications", notifier.For(drv).Live)
	return drv, rc, c, logs
}

// While notifications arrive, a scan that fails, or a claim of the due
// deliveries that fails, is tried again a PollInterval later, not only at
// the next notification or the slow fallback. The failures are real:
// a trigger refuses the deliveries' inserts (the scan), then their
// updates (the claim).
func TestNotifiedDispatcherRetriesFailedScan(t *testing.T) {
	t.Parallel()
	drv, rc, c, logs := notifiedDispatcher(t)
	ctx := context.Background()
	exec := func(sql string) {
		t.Helper()
		if _, err := drv.Pool().Exec(ctx, strings.ReplaceAll(sql, "{s}", drv.Schema())); err != nil {
			t.Fatal(err)
		}
	}
	// refuseWhile makes a trigger refuse op on the deliveries with message
	// while task id runs to the end, waits for the dispatcher to log the
	// refusal, drops the trigger, and expects n webhooks soon after.
	refuseWhile := func(op, message, id string, n int) {
		t.Helper()
		exec(`CREATE OR REPLACE FUNCTION {s}.refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION '` + message + `'; END $$`)
		exec(`CREATE TRIGGER refuse BEFORE ` + op + ` ON {s}.webhook_deliveries FOR EACH ROW EXECUTE FUNCTION {s}.refuse()`)
		submit(t, c, "echo", id, rc.url("/cb/"+id))
		wait(t, c, id, drover.Processed)
		waitFor(t, "the dispatcher to fail: "+message, func() bool { return strings.Contains(logs.String(), message) })
		exec(`DROP TRIGGER refuse ON {s}.webhook_deliveries`)
		deadline := time.Now().Add(IdlePoll / 3)
		for len(rc.okCount()) != n {
			if time.Now().After(deadline) {
				t.Fatalf("%d webhooks %v after %s stopped, want %d: not tried again before the %v fallback", len(rc.okCount()), IdlePoll/3, message, n, IdlePoll)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	// The woken scan fails to queue the delivery.
	refuseWhile("INSERT", "deliveries refused", "later-1", 1)
	// The scan queues the delivery, but claiming it fails.
	waitFor(t, "the first delivery recorded", func() bool {
		var n int
		err := drv.Pool().QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s.webhook_deliveries WHERE delivered_at IS NOT NULL`, drv.Schema())).Scan(&n)
		return err == nil && n == 1
	})
	refuseWhile("UPDATE", "claims refused", "later-2", 2)
}

// A dispatcher woken while an older event writer stays open (here an
// application's transaction holding SubmitTx's event, open longer than a
// reader waits for it) reads nothing it may resume after. It looks again
// a PollInterval later, not at the slow fallback, so the webhook goes out
// soon after that writer ends, even by a rollback, which notifies no one.
func TestDispatcherHeldBackByOpenWriterLooksAgain(t *testing.T) {
	t.Parallel()
	drv, rc, c, logs := notifiedDispatcher(t)
	ctx := context.Background()

	tx, err := drv.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := c.SubmitTx(ctx, tx, "echo", []byte(`{}`), &drover.SubmitOptions{ID: "held"}); err != nil {
		t.Fatalf("SubmitTx: %v", err)
	}
	submit(t, c, "echo", "after", rc.url("/cb/after"))
	wait(t, c, "after", drover.Processed)
	// Longer than a reader waits for an open writer, so the woken scan
	// has given up on it.
	time.Sleep(1500 * time.Millisecond)
	if n := len(rc.okCount()); n != 0 {
		t.Fatalf("%d webhooks while the older writer is open, want 0", n)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(IdlePoll / 3)
	for len(rc.okCount()) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("no webhook %v after the older writer ended: not looked for again before the %v fallback\n%s", IdlePoll/3, IdlePoll, logs.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}
