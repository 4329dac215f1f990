package workflowdef

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/internal/egress"
	"github.com/drover-run/drover/internal/egress/egresstest"
	"github.com/drover-run/drover/internal/httpagent"
	"github.com/drover-run/drover/internal/testutil"
	"github.com/drover-run/drover/store"
)

// seen is one request a test service received.
type seen struct {
	Method, Path, Key, Customer string
	Body                        string
}

// service is an httptest server that records its requests.
type service struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []seen
	// arrived gets the path of every request (buffered, never blocks).
	arrived chan string
}

func newService(t *testing.T, h func(w http.ResponseWriter, r *http.Request, body []byte)) *service {
	t.Helper()
	s := &service{arrived: make(chan string, 100)}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.reqs = append(s.reqs, seen{Method: r.Method, Path: r.URL.RequestURI(), Key: r.Header.Get("Idempotency-Key"),
			Customer: r.Header.Get("X-Customer"), Body: string(body)})
		s.mu.Unlock()
		select {
		case s.arrived <- r.URL.Path:
		default:
		}
		h(w, r, body)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *service) requests() []seen {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]seen(nil), s.reqs...)
}

// find returns the requests for which keep holds.
func (s *service) find(keep func(seen) bool) []seen {
	var out []seen
	for _, r := range s.requests() {
		if keep(r) {
			out = append(out, r)
		}
	}
	return out
}

// tripYAML is a two-step HTTP workflow: reserve at a, charge at b; the
// reservation is compensated with a DELETE of its id. version tags the
// charge URL and body so a test can tell which version a call came from.
func tripYAML(a, b string, version int) string {
	return fmt.Sprintf(`name: trip
on_failure: compensate
steps:
  - name: reserve
    timeout: 20s
    http:
      method: POST
      url: "%s/reservations"
      headers: {X-Customer: "${input.customer}"}
      body: {order: "${input.order_id}", seats: "${input.seats}"}
    retry: {initial_interval: 10ms, max_interval: 50ms}
    compensate:
      http: {method: DELETE, url: "%s/reservations/${steps.reserve.output.id}"}
  - name: charge
    timeout: 20s
    http:
      method: POST
      url: "%s/v%d/charges"
      body: {amount: "${input.amount}", reservation: "${steps.reserve.output.id}", version: %d}
`, a, a, b, version, version)
}

// tripServices: a reserves (answers {"id":"r-<order>"}) and deletes; b
// charges, with 402 (permanent) for amounts over 100.
func tripServices(t *testing.T, hold func(order string)) (a, b *service) {
	a = newService(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		if r.Method == http.MethodDelete {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		var in struct {
			Order string `json:"order"`
		}
		_ = json.Unmarshal(body, &in)
		if hold != nil {
			hold(in.Order)
		}
		fmt.Fprintf(w, `{"id":"r-%s"}`, in.Order)
	})
	b = newService(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		var in struct {
			Amount float64 `json:"amount"`
		}
		_ = json.Unmarshal(body, &in)
		if in.Amount > 100 {
			http.Error(w, `{"error":"card declined"}`, http.StatusPaymentRequired)
			return
		}
		fmt.Fprintf(w, `{"charge_id":"c-%v"}`, in.Amount)
	})
	return a, b
}

type fixture struct {
	dir    string
	store  store.Driver
	reg    *Registry
	client *drover.Client
	logs   *syncBuf
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// start builds a registry on dir and a client with the http agent, as the
// server does, and starts the client.
// The test services listen on 127.0.0.1, which the server-level policy
// opens (as drover server --egress-allow 127.0.0.1 does).
func start(t *testing.T, d store.Driver, dir string, startClient bool) *fixture {
	t.Helper()
	return startWith(t, d, dir, startClient, egresstest.Open(t, "127.0.0.1"))
}

// startWith is start with the server-level egress policy pol.
func startWith(t *testing.T, d store.Driver, dir string, startClient bool, pol *egress.Policy) *fixture {
	t.Helper()
	return startOpts(t, dir, startClient, Options{Store: d, Reserved: []string{"orders"}, HTTP: httpagent.Options{Egress: pol}})
}

// startOpts is startWith with the registry's options (their Logger is the
// fixture's).
func startOpts(t *testing.T, dir string, startClient bool, opts Options) *fixture {
	t.Helper()
	ctx := context.Background()
	d := opts.Store
	logs := &syncBuf{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	opts.Logger = log
	reg, err := NewRegistry(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.LoadDir(ctx, dir); err != nil {
		t.Fatalf("LoadDir: %v", err)
	}
	c, err := drover.New(drover.Config{
		Store: d, Workflows: reg.Workflows(), Agents: []drover.Agent{reg.HTTPAgent()}, ExternalAgents: reg.ExternalAgents(),
		PollInterval: 10 * time.Millisecond, SupervisorInterval: 50 * time.Millisecond, Logger: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	reg.Attach(c)
	if startClient {
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = c.Stop(sctx)
		})
	}
	return &fixture{dir: dir, store: d, reg: reg, client: c, logs: logs}
}

func waitFinal(t *testing.T, c *drover.Client, id string) *drover.Task {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	task, err := c.Wait(ctx, id)
	if err != nil {
		task, _ = c.Task(context.Background(), id)
		t.Logf("task: %+v", task)
		t.Fatalf("wait for %s: %v", id, err) // the log is in the fixture
	}
	return task
}

func writeFile(t *testing.T, path, src string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestHTTPWorkflowEndToEnd runs the two-step HTTP workflow: input mapping
// from the task input and the earlier output, the Idempotency-Key of each
// step, and a 4xx on step 2 compensating step 1 with the mapped DELETE.
func TestHTTPWorkflowEndToEnd(t *testing.T) {
	a, b := tripServices(t, nil)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "trip.yaml"), tripYAML(a.URL, b.URL, 1))
	f := start(t, testutil.SQLite(t), dir, true)
	ctx := context.Background()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("log:\n%s", f.logs.String())
		}
	})

	if !strings.Contains(f.logs.String(), "msg=\"workflow loaded\" workflow=trip version=1 file="+filepath.Join(dir, "trip.yaml")) {
		t.Errorf("no load line in the log:\n%s", f.logs.String())
	}

	ok, err := f.client.Submit(ctx, "trip", []byte(`{"order_id":"o-1","customer":"ann","seats":2,"amount":50}`), &drover.SubmitOptions{ID: "ok-1"})
	if err != nil {
		t.Fatal(err)
	}
	if ok.WorkflowVersion != 1 {
		t.Errorf("WorkflowVersion = %d, want 1", ok.WorkflowVersion)
	}
	task := waitFinal(t, f.client, "ok-1")
	if task.ProcessState != drover.Processed {
		t.Fatalf("task %s: %s (%s)", task.ID, task.ProcessState, task.LastError)
	}
	res := a.find(func(s seen) bool { return s.Method == "POST" && s.Key == task.Steps[0].IdempotencyKey })
	if len(res) != 1 || res[0].Body != `{"order":"o-1","seats":2}` || res[0].Customer != "ann" || res[0].Path != "/reservations" {
		t.Errorf("reservation requests with the step's key %q: %+v (all: %+v)", task.Steps[0].IdempotencyKey, res, a.requests())
	}
	ch := b.find(func(s seen) bool { return s.Key == task.Steps[1].IdempotencyKey })
	if len(ch) != 1 || ch[0].Body != `{"amount":50,"reservation":"r-o-1","version":1}` || ch[0].Path != "/v1/charges" {
		t.Errorf("charge requests with the step's key %q: %+v (all: %+v)", task.Steps[1].IdempotencyKey, ch, b.requests())
	}
	if string(task.Steps[0].Output) != `{"id":"r-o-1"}` || string(task.Output) != `{"charge_id":"c-50"}` {
		t.Errorf("outputs: step 0 %s, task %s", task.Steps[0].Output, task.Output)
	}

	// A declined charge (402, permanent) compensates the reservation.
	if _, err := f.client.Submit(ctx, "trip", []byte(`{"order_id":"o-2","customer":"bob","seats":1,"amount":500}`), &drover.SubmitOptions{ID: "declined-1"}); err != nil {
		t.Fatal(err)
	}
	task = waitFinal(t, f.client, "declined-1")
	if task.ProcessState != drover.Compensated {
		t.Fatalf("task %s: %s (%s), want Compensated", task.ID, task.ProcessState, task.LastError)
	}
	if !strings.Contains(task.Steps[1].LastError, "402") {
		t.Errorf("step 2 error = %q, want the 402", task.Steps[1].LastError)
	}
	del := a.find(func(s seen) bool { return s.Method == "DELETE" })
	if len(del) != 1 || del[0].Path != "/reservations/r-o-2" || del[0].Key != task.Steps[0].IdempotencyKey+"/compensate" {
		t.Errorf("DELETE requests: %+v, want one of /reservations/r-o-2 with key %s/compensate", del, task.Steps[0].IdempotencyKey)
	}
	if n := len(b.find(func(s seen) bool { return strings.Contains(s.Body, `"amount":500`) })); n != 1 {
		t.Errorf("declined charge sent %d times, want 1 (a 4xx is not retried)", n)
	}
}

// TestReloadMidRun: a task running when the file changes finishes with
// the version it started with; a task submitted after the reload uses the
// new version.
func TestReloadMidRun(t *testing.T) {
	release := make(chan struct{})
	a, b := tripServices(t, func(order string) {
		if order == "slow" {
			<-release
		}
	})
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	dir := t.TempDir()
	path := filepath.Join(dir, "trip.yaml")
	writeFile(t, path, tripYAML(a.URL, b.URL, 1))
	f := start(t, testutil.SQLite(t), dir, true)
	ctx := context.Background()

	if _, err := f.client.Submit(ctx, "trip", []byte(`{"order_id":"slow","customer":"c","seats":1,"amount":10}`), &drover.SubmitOptions{ID: "old"}); err != nil {
		t.Fatal(err)
	}
	// The task is in its first step when the file changes.
	select {
	case <-a.arrived:
	case <-time.After(20 * time.Second):
		t.Fatal("the reservation call did not arrive")
	}
	writeFile(t, path, tripYAML(a.URL, b.URL, 2))
	res, err := f.reg.Reload(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Loaded) != 1 || res.Loaded[0].Version != 2 || res.Invalid != nil {
		t.Fatalf("reload: %+v", res)
	}
	if _, err := f.client.Submit(ctx, "trip", []byte(`{"order_id":"new","customer":"c","seats":1,"amount":20}`), &drover.SubmitOptions{ID: "new"}); err != nil {
		t.Fatal(err)
	}
	if task := waitFinal(t, f.client, "new"); task.ProcessState != drover.Processed || task.WorkflowVersion != 2 {
		t.Fatalf("new task: %s version %d (%s)", task.ProcessState, task.WorkflowVersion, task.LastError)
	}
	close(release)
	old := waitFinal(t, f.client, "old")
	if old.ProcessState != drover.Processed || old.WorkflowVersion != 1 {
		t.Fatalf("old task: %s version %d (%s)", old.ProcessState, old.WorkflowVersion, old.LastError)
	}
	for _, c := range []struct {
		amount, path, version string
	}{{"10", "/v1/charges", "1"}, {"20", "/v2/charges", "2"}} {
		got := b.find(func(s seen) bool { return strings.Contains(s.Body, `"amount":`+c.amount+",") })
		if len(got) != 1 || got[0].Path != c.path || !strings.HasSuffix(got[0].Body, `"version":`+c.version+"}") {
			t.Errorf("charge of %s: %+v, want one to %s with version %s", c.amount, got, c.path, c.version)
		}
	}
}

// TestRestartRunsOlderVersion: a task submitted with version 1 runs with
// it in a process started after the file became version 2.
func TestRestartRunsOlderVersion(t *testing.T) {
	a, b := tripServices(t, nil)
	d := testutil.SQLite(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "trip.yaml")
	writeFile(t, path, tripYAML(a.URL, b.URL, 1))
	first := start(t, d, dir, false) // submits only
	ctx := context.Background()
	if _, err := first.client.Submit(ctx, "trip", []byte(`{"order_id":"o","customer":"c","seats":1,"amount":11}`), &drover.SubmitOptions{ID: "v1"}); err != nil {
		t.Fatal(err)
	}

	writeFile(t, path, tripYAML(a.URL, b.URL, 2))
	second := start(t, d, dir, true)
	if cur, _ := second.reg.Current("trip"); cur.Version != 2 {
		t.Fatalf("current version %d, want 2", cur.Version)
	}
	if _, err := second.client.Submit(ctx, "trip", []byte(`{"order_id":"o","customer":"c","seats":1,"amount":22}`), &drover.SubmitOptions{ID: "v2"}); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]string{"v1": "/v1/charges", "v2": "/v2/charges"} {
		task := waitFinal(t, second.client, id)
		if task.ProcessState != drover.Processed {
			t.Fatalf("%s: %s (%s)", id, task.ProcessState, task.LastError)
		}
		got := b.find(func(s seen) bool { return s.Key == task.Steps[1].IdempotencyKey })
		if len(got) != 1 || got[0].Path != want {
			t.Errorf("%s charged at %+v, want %s", id, got, want)
		}
	}
}

// TestRemoteInput: the mapped input of remote agent steps.
func TestRemoteInput(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "pay.yaml"), `name: pay
on_failure: compensate
steps:
  - name: quote
    agent: quoter
  - name: charge
    agent: payments
    input: {amount: "${input.amount}", quote: "${steps.quote.output.price}", task: "${task.id}"}
    compensate: {agent: refunds, input: {charge: "${step.output.charge_id}"}}
`)
	f := start(t, testutil.SQLite(t), dir, false)
	ctx := context.Background()
	if got := f.reg.ExternalAgents(); strings.Join(got, ",") != "payments,quoter,refunds" {
		t.Errorf("ExternalAgents = %v", got)
	}
	task, err := f.client.Submit(ctx, "pay", []byte(`{"amount":12}`), &drover.SubmitOptions{ID: "p-1"})
	if err != nil {
		t.Fatal(err)
	}
	// No mapping: the task input.
	in, err := f.reg.RemoteInput(ctx, &drover.AgentRequest{TaskID: "p-1", Workflow: "pay", StepIndex: 0, StepName: "quote", Kind: "do", Input: task.Input})
	if err != nil || string(in) != `{"amount":12}` {
		t.Errorf("quote input = %s, %v", in, err)
	}
	// The mapping needs the quote's output, which the task does not have
	// yet: a permanent error naming the expression and the task.
	_, err = f.reg.RemoteInput(ctx, &drover.AgentRequest{TaskID: "p-1", Workflow: "pay", StepIndex: 1, StepName: "charge", Kind: "do"})
	if err == nil || !drover.IsPermanent(err) || err.Error() != "task p-1: ${steps.quote.output.price}: step quote has no output yet" {
		t.Errorf("err = %v (permanent %v)", err, drover.IsPermanent(err))
	}
	// A workflow defined in code: the request's input unchanged.
	code, err := drover.New(drover.Config{Store: f.store, Workflows: []drover.Workflow{{Name: "coded", Steps: []drover.Step{{Name: "s", Agent: "payments"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := code.Submit(ctx, "coded", []byte(`{"x":1}`), &drover.SubmitOptions{ID: "c-1"}); err != nil {
		t.Fatal(err)
	}
	in, err = f.reg.RemoteInput(ctx, &drover.AgentRequest{TaskID: "c-1", Workflow: "coded", StepIndex: 0, StepName: "s", Kind: "do", Input: []byte(`{"x":1}`)})
	if err != nil || string(in) != `{"x":1}` {
		t.Errorf("coded input = %s, %v", in, err)
	}
}

// TestRemoteInputMapped runs remote agent steps through their mappings,
// as the HTTP API does for a remote agent: here the agents are local
// functions that ask the registry for their input. The last step fails, so
// the compensation's mapping (its own output, an earlier one) runs too.
func TestRemoteInputMapped(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "pay.yaml"), `name: pay
on_failure: compensate
steps:
  - name: quote
    agent: quoter
  - name: charge
    agent: payments
    input: {amount: "${input.amount}", quote: "${steps.quote.output.price}", task: "${task.id}", key: "${step.idempotency_key}"}
    compensate: {agent: refunds, input: {charge: "${step.output.charge_id}", quote: "${steps.quote.output}"}}
  - name: ship
    agent: shipper
`)
	d := testutil.SQLite(t)
	reg, err := NewRegistry(Options{Store: d})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := reg.LoadDir(ctx, dir); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	inputs := map[string]string{}
	agent := func(name, out string) drover.Agent {
		return drover.Agent{Name: name, Func: func(ctx context.Context, req *drover.AgentRequest) ([]byte, error) {
			in, err := reg.RemoteInput(ctx, req)
			if err != nil {
				return nil, err
			}
			mu.Lock()
			inputs[name] = string(in)
			mu.Unlock()
			if out == "" {
				return nil, drover.Permanent(fmt.Errorf("%s refused", name))
			}
			return []byte(out), nil
		}}
	}
	c, err := drover.New(drover.Config{
		Store: d, Workflows: reg.Workflows(), PollInterval: 10 * time.Millisecond,
		Agents: []drover.Agent{agent("quoter", `{"price":9.5}`), agent("payments", `{"charge_id":"ch-1"}`),
			agent("refunds", `{}`), agent("shipper", "")},
	})
	if err != nil {
		t.Fatal(err)
	}
	reg.Attach(c)
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Stop(context.Background()) }()
	if _, err := c.Submit(ctx, "pay", []byte(`{"amount":12}`), &drover.SubmitOptions{ID: "p-1"}); err != nil {
		t.Fatal(err)
	}
	task := waitFinal(t, c, "p-1")
	if task.ProcessState != drover.Compensated {
		t.Fatalf("%s (%s), want Compensated", task.ProcessState, task.LastError)
	}
	want := map[string]string{
		"quoter":   `{"amount":12}`,
		"payments": `{"amount":12,"quote":9.5,"task":"p-1","key":"` + task.Steps[1].IdempotencyKey + `"}`,
		"shipper":  `{"amount":12}`,
		"refunds":  `{"charge":"ch-1","quote":{"price":9.5}}`,
	}
	mu.Lock()
	defer mu.Unlock()
	for k, v := range want {
		if inputs[k] != v {
			t.Errorf("%s input = %s, want %s", k, inputs[k], v)
		}
	}
}

// TestWatch: changed files are picked up by polling and on SIGHUP; an
// invalid file is logged with every problem and the previous version
// stays; a removed file leaves its workflow registered.
func TestWatch(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "w.yaml")
	src := func(timeout string) string {
		return "name: w\nsteps:\n  - name: s\n    agent: a\n    timeout: " + timeout + "\n"
	}
	writeFile(t, path, src("1s"))
	f := start(t, testutil.SQLite(t), dir, false)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hup := make(chan os.Signal, 1)
	done := make(chan struct{})
	go func() { defer close(done); f.reg.Watch(ctx, 5*time.Millisecond, hup) }()
	defer func() { cancel(); <-done }()

	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s; log:\n%s", what, f.logs.String())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	timeout := func() time.Duration {
		for _, w := range f.client.Workflows() {
			if w.Name == "w" {
				return w.Steps[0].Timeout
			}
		}
		return 0
	}
	version := func() int { d, _ := f.reg.Current("w"); return d.Version }

	writeFile(t, path, src("2s"))
	waitFor("version 2", func() bool { return version() == 2 && timeout() == 2*time.Second })

	writeFile(t, path, src("2x")+"    bogus: 1\n")
	waitFor("the problems logged", func() bool {
		l := f.logs.String()
		return strings.Contains(l, path+`:5: steps[0].timeout: \"2x\" is not a duration`) && strings.Contains(l, path+`:6: steps[0].bogus: unknown key`)
	})
	if version() != 2 || timeout() != 2*time.Second {
		t.Errorf("after an invalid edit: version %d timeout %s, want 2 and 2s", version(), timeout())
	}

	// The same content again is the same stored version.
	writeFile(t, path, src("1s"))
	waitFor("version 1 again", func() bool { return version() == 1 && timeout() == time.Second })

	// SIGHUP reloads even when nothing changed: an invalid file is logged again.
	writeFile(t, path, "name: w\nsteps: nope\n")
	waitFor("the problem logged", func() bool { return strings.Count(f.logs.String(), "steps: want a list") == 1 })
	hup <- syscall.SIGHUP
	waitFor("the problem logged again", func() bool { return strings.Count(f.logs.String(), "steps: want a list") == 2 })

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	waitFor("the removal logged", func() bool { return strings.Contains(f.logs.String(), "workflow file removed") })
	if version() != 1 || timeout() != time.Second {
		t.Errorf("after removal: version %d timeout %s", version(), timeout())
	}
}

// TestVersions: the digest decides the version, on both drivers; two
// registries loading the same file get the same version; a restarted
// registry knows every stored version.
func TestVersions(t *testing.T) {
	for name, open := range map[string]func(t *testing.T) store.Driver{
		"sqlite":   func(t *testing.T) store.Driver { return testutil.SQLite(t) },
		"postgres": func(t *testing.T) store.Driver { return testutil.Postgres(t) },
	} {
		t.Run(name, func(t *testing.T) {
			d := open(t)
			dir := t.TempDir()
			path := filepath.Join(dir, "w.yaml")
			v1 := "name: w\nsteps: [{name: s, agent: a}]\n"
			v2 := "name: w\nsteps: [{name: s, agent: b}]\n"
			writeFile(t, path, v1)
			ctx := context.Background()
			load := func() *Registry {
				t.Helper()
				r, err := NewRegistry(Options{Store: d})
				if err != nil {
					t.Fatal(err)
				}
				if err := r.LoadDir(ctx, dir); err != nil {
					t.Fatal(err)
				}
				return r
			}
			// Concurrent loads of the same file: one version.
			regs := make([]*Registry, 4)
			var wg sync.WaitGroup
			for i := range regs {
				wg.Add(1)
				go func() { defer wg.Done(); regs[i] = load() }()
			}
			wg.Wait()
			for i, r := range regs {
				if cur, _ := r.Current("w"); cur.Version != 1 {
					t.Errorf("registry %d: version %d, want 1", i, cur.Version)
				}
			}
			writeFile(t, path, v2)
			r2 := load()
			if cur, _ := r2.Current("w"); cur.Version != 2 || cur.Digest != Digest([]byte(v2)) {
				t.Errorf("changed file: version %d digest %s", cur.Version, cur.Digest)
			}
			// The older version is known after a restart, from the store.
			old, err := r2.Definition(ctx, "w", 1)
			if err != nil || old.Steps[0].Do.Agent != "a" || string(old.Source) != v1 {
				t.Errorf("version 1: %+v, %v", old, err)
			}
			if got := r2.ExternalAgents(); strings.Join(got, ",") != "a,b" {
				t.Errorf("ExternalAgents = %v, want both versions' agents", got)
			}
			// Reverting is the stored version 1 again, not a version 3.
			writeFile(t, path, v1)
			if cur, _ := load().Current("w"); cur.Version != 1 {
				t.Errorf("reverted file: version %d, want 1", cur.Version)
			}
			rows, err := d.Reader().WorkflowDefList(ctx, &store.WorkflowDefListParams{Name: "w"})
			if err != nil || len(rows) != 2 {
				t.Fatalf("stored versions: %d, %v", len(rows), err)
			}
			// A version stored by another process after this one started is
			// read from the store when a task needs it.
			writeFile(t, path, "name: w\nsteps: [{name: s, agent: c}]\n")
			load()
			got, err := r2.Definition(ctx, "w", 3)
			if err != nil || got.Steps[0].Do.Agent != "c" || got.File != "w v3 (stored)" {
				t.Errorf("version 3 from the store: %+v, %v", got, err)
			}
			if _, err := r2.Definition(ctx, "w", 9); err == nil {
				t.Error("version 9 found")
			}
		})
	}
}

// TestLoadDirInvalid: an invalid file fails the load with every problem and
// stores nothing.
func TestLoadDirInvalid(t *testing.T) {
	d := testutil.SQLite(t)
	dir := writeFiles(t, map[string]string{
		"good.yaml": "name: good\nsteps: [{name: s, agent: a}]\n",
		"bad.yaml":  "name: bad\nsteps:\n  - name: s\n    agent: a\n    timout: 1s\n  - {name: t}\n",
	})
	r, err := NewRegistry(Options{Store: d})
	if err != nil {
		t.Fatal(err)
	}
	err = r.LoadDir(context.Background(), dir)
	bad := filepath.Join(dir, "bad.yaml")
	checkProblems(t, err, []string{
		bad + `:5: steps[0].timout: unknown key (did you mean "timeout"?)`,
		bad + `:6: steps[1]: needs http (call a URL) or agent (a remote agent)`,
	})
	if rows, err := d.Reader().WorkflowDefList(context.Background(), &store.WorkflowDefListParams{Name: ""}); err != nil || len(rows) != 0 {
		t.Errorf("stored %d versions, %v; want none", len(rows), err)
	}
	if len(r.Workflows()) != 0 {
		t.Errorf("workflows registered: %v", r.Workflows())
	}
}

// TestFailingHostDoesNotStopOthers: transient failures of one host open
// that host's breaker only; drover's per-agent breaker of the "http" agent
// stays closed, so calls to another host go on.
func TestFailingHostDoesNotStopOthers(t *testing.T) {
	down := newService(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		http.Error(w, "down", http.StatusServiceUnavailable)
	})
	up := newService(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		_, _ = w.Write([]byte(`{"ok":true}`))
	})
	dir := t.TempDir()
	// The failing calls hold their slots until their deadline (3s); the
	// call to the healthy host has 30s, far more than the test waits.
	for name, c := range map[string]struct{ url, timeout string }{"down": {down.URL, "3s"}, "up": {up.URL, "30s"}} {
		writeFile(t, filepath.Join(dir, name+".yaml"), fmt.Sprintf(`name: %s
failure_threshold: 1
steps:
  - name: call
    timeout: %s
    http: {method: POST, url: "%s/x"}
    retry: {max_tries: 1}
`, name, c.timeout, c.url))
	}
	f := start(t, testutil.SQLite(t), dir, true)
	ctx := context.Background()
	// More failing calls than drover's default breaker threshold (10).
	for i := range 15 {
		if _, err := f.client.Submit(ctx, "down", nil, &drover.SubmitOptions{ID: fmt.Sprintf("down-%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for s := f.client.Stats(); s.AgentCalls+s.BreakerRefused < 15; s = f.client.Stats() {
		if time.Now().After(deadline) {
			t.Fatalf("calls: %+v", f.client.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := f.client.Submit(ctx, "up", nil, &drover.SubmitOptions{ID: "up-1"}); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	task, err := f.client.Wait(wctx, "up-1")
	if err != nil || task.ProcessState != drover.Processed {
		t.Fatalf("up-1: %v %v; stats %+v", task, err, f.client.Stats())
	}
	if s := f.client.Stats(); s.BreakerRefused != 0 {
		t.Errorf("drover's breaker refused %d calls", s.BreakerRefused)
	}
}
