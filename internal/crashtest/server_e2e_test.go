package crashtest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/drover-run/drover/droverclient"
	"github.com/drover-run/drover/internal/remotesim"
)

// Tokens of the end-to-end test (at least 16 bytes each).
const (
	e2eSubmitToken   = "submit-token-0123456789"
	e2eOperatorToken = "operator-token-0123456789"
	e2eAgentToken    = "agent-token-0123456789"
	e2eWebhookSecret = "webhook-secret-0123456789"
)

// e2eWorkflow is the walkthrough's workflow (docs/server.md): reserve stock
// at the inventory service, charge the card at the flaky payments service
// (which declines amounts over its limit), then hand a notification to a
// remote agent; a declined card undoes the reservation.
const e2eWorkflow = `name: order
on_failure: compensate
failure_threshold: 3
steps:
  - name: reserve
    timeout: 5s
    http:
      method: POST
      url: "INVENTORY/v1/reserve-stock"
      body: {order_id: "${input.order_id}", amount: "${input.amount}"}
    compensate:
      http:
        method: POST
        url: "INVENTORY/v1/release-stock"
        body: {order_id: "${input.order_id}", amount: "${input.amount}"}
  - name: charge
    timeout: 5s
    http:
      method: POST
      url: "PAYMENTS/v1/charge-card"
      body: {order_id: "${input.order_id}", amount: "${input.amount}"}
    retry: {initial_interval: 20ms, max_interval: 200ms}
  - name: notify
    timeout: 5s
    agent: notifier
    input: {order: "${input.order_id}", confirmation: "${steps.charge.output.confirmation}"}
`

// e2eServer is one `drover server` child process with the HTTP API.
type e2eServer struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error // exit status, once done is closed
}

// serverLog is a server's log, whose tail the test prints if it fails.
func serverLog(t *testing.T) *lockedWriter {
	logw := &lockedWriter{w: &strings.Builder{}}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("server log (tail):\n%s", tail(logw.String(), 60))
		}
	})
	return logw
}

func startE2EServer(t *testing.T, bin string, args []string, logw io.Writer) *e2eServer {
	t.Helper()
	cmd := exec.Command(bin, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start server: %v", err)
	}
	s := &e2eServer{cmd: cmd, done: make(chan struct{})}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var once sync.Once
		for sc.Scan() {
			fmt.Fprintln(logw, "server: "+sc.Text())
			if strings.Contains(sc.Text(), "drover server ready") {
				once.Do(func() { close(ready) })
			}
		}
	}()
	go func() { s.err = cmd.Wait(); close(s.done) }()
	select {
	case <-ready:
	case <-s.done:
		t.Fatalf("server exited before it was ready: %v", s.err)
	case <-time.After(60 * time.Second):
		t.Fatal("server not ready after 60s")
	}
	return s
}

// TestServerModeEndToEnd is server mode's end-to-end test: the real binary with
// a workflow directory, two local HTTP services (one flaky, one of them
// declining large amounts), a remote agent, a webhook receiver; tasks
// submitted with the Go client and with curl, events followed over SSE, the
// server SIGKILLed and restarted mid-run, a compensated task resubmitted
// from the CLI against the server.
func TestServerModeEndToEnd(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Fatalf("this test drives the server with curl, which is not installed: %v", err)
	}
	bin := buildDrover(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()

	inventory := remotesim.New(remotesim.Config{Seed: 1})
	invURL, stopInv, err := inventory.Serve(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stopInv()
	// 0.2, not more: five transient failures in a row across the orders
	// open the host's breaker for 5 s, and a few such runs exhaust an
	// order's failure threshold by chance (seen at 0.3 on a loaded machine).
	payments := remotesim.New(remotesim.Config{Seed: 2, TransientRate: 0.2, RejectAmountAbove: 1000})
	payURL, stopPay, err := payments.Serve(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stopPay()

	// The webhook receiver checks every signature and records event IDs.
	var hookMu sync.Mutex
	hooks := map[string]map[string]int{} // task → event id → deliveries
	badHooks := 0
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		hookMu.Lock()
		defer hookMu.Unlock()
		// The URL it is called at: the --webhook-url, exactly.
		if err := droverclient.VerifyWebhook([]byte(e2eWebhookSecret), "http://"+r.Host+r.URL.RequestURI(), r.Header, body, time.Now(), 0); err != nil {
			badHooks++
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var p struct {
			TaskID string `json:"task_id"`
		}
		_ = json.Unmarshal(body, &p)
		if hooks[p.TaskID] == nil {
			hooks[p.TaskID] = map[string]int{}
		}
		hooks[p.TaskID][r.Header.Get(droverclient.WebhookIDHeader)]++
		w.WriteHeader(http.StatusNoContent)
	}))
	defer receiver.Close()

	wfDir := filepath.Join(dir, "workflows")
	must(t, os.MkdirAll(wfDir, 0o755))
	wf := strings.NewReplacer("INVENTORY", invURL, "PAYMENTS", payURL).Replace(e2eWorkflow)
	must(t, os.WriteFile(filepath.Join(wfDir, "order.yaml"), []byte(wf), 0o644))
	tokens := filepath.Join(dir, "tokens")
	must(t, os.WriteFile(tokens, []byte(e2eSubmitToken+" submit\n"+e2eOperatorToken+" operator\n"+e2eAgentToken+" agent:notifier\n"), 0o600))
	secret := filepath.Join(dir, "webhook-secret")
	must(t, os.WriteFile(secret, []byte(e2eWebhookSecret+"\n"), 0o600))

	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	args := []string{"server", "--db", "sqlite:" + filepath.Join(dir, "drover.db"), "--instance-id", "e2e",
		"--listen", fmt.Sprintf("127.0.0.1:%d", port), "--tokens-file", tokens, "--workflows", wfDir,
		"--webhook-url", receiver.URL + "/hooks", "--webhook-secret-file", secret, "--egress-allow", "127.0.0.1",
		"--supervisor-interval", "100ms", "--lease-ttl", "1s", "--shutdown-timeout", "10s"}
	logw := serverLog(t)
	srv := startE2EServer(t, bin, args, logw)
	defer func() { _ = srv.cmd.Process.Kill(); <-srv.done }()

	submitter, err := droverclient.New(base, e2eSubmitToken)
	must(t, err)
	agents, err := droverclient.New(base, e2eAgentToken)
	must(t, err)

	// The remote agent: a notification service in "another language".
	go func() {
		_ = agents.RunAgent(ctx, "notifier", func(ctx context.Context, r *droverclient.Request) (json.RawMessage, error) {
			var in struct {
				Order        string `json:"order"`
				Confirmation string `json:"confirmation"`
			}
			if err := json.Unmarshal(r.Input, &in); err != nil || in.Order == "" || in.Confirmation == "" {
				return nil, droverclient.Permanent(fmt.Errorf("bad input %s", r.Input))
			}
			return json.Marshal(map[string]string{"notified": in.Order, "confirmation": in.Confirmation})
		}, droverclient.AgentOptions{Concurrency: 4, Wait: 2 * time.Second})
	}()

	// Every event, over SSE, across the restart.
	var evMu sync.Mutex
	var events []droverclient.Event
	go func() {
		_ = submitter.FollowEvents(ctx, droverclient.FollowOptions{MinBackoff: 50 * time.Millisecond, MaxBackoff: 500 * time.Millisecond},
			func(e *droverclient.Event) error {
				evMu.Lock()
				events = append(events, *e)
				evMu.Unlock()
				return nil
			})
	}()

	// Orders: amounts over 1000 are declined by payments and compensated.
	var orders []e2eOrder
	for i := 1; i <= 24; i++ {
		amount := 10 * i
		if i%6 == 0 {
			amount = 5000
		}
		orders = append(orders, e2eOrder{fmt.Sprintf("o-%d", i), amount})
	}
	submit := func(o e2eOrder) {
		in := fmt.Sprintf(`{"order_id":%q,"amount":%d}`, o.id, o.amount)
		if _, _, err := submitter.SubmitTask(ctx, droverclient.SubmitRequest{Workflow: "order", ID: o.id, Input: json.RawMessage(in)}); err != nil {
			t.Fatalf("submit %s: %v", o.id, err)
		}
	}
	curlSubmit := func(o e2eOrder) {
		body := fmt.Sprintf(`{"workflow":"order","id":%q,"input":{"order_id":%q,"amount":%d}}`, o.id, o.id, o.amount)
		out, err := exec.CommandContext(ctx, curl, "-sS", "--fail-with-body", "-H", "Authorization: Bearer "+e2eSubmitToken,
			"-H", "Content-Type: application/json", base+"/v1/tasks", "-d", body).CombinedOutput()
		if err != nil || !strings.Contains(string(out), `"id":"`+o.id+`"`) {
			t.Fatalf("curl submit %s: %v: %s", o.id, err, out)
		}
	}
	for i, o := range orders[:12] {
		if i%4 == 0 {
			curlSubmit(o)
		} else {
			submit(o)
		}
	}
	// Kill the server once some tasks are final and others are not.
	waitE2E(t, ctx, "some tasks final", func() bool { return countFinal(ctx, submitter, orders[:12]) >= 3 })
	_ = srv.cmd.Process.Signal(syscall.SIGKILL)
	<-srv.done
	srv = startE2EServer(t, bin, args, logw)
	for _, o := range orders[12:] {
		submit(o)
	}
	waitE2E(t, ctx, "every task final", func() bool {
		if countFinal(ctx, submitter, orders) == len(orders) {
			return true
		}
		if dl, _ := ctx.Deadline(); time.Until(dl) < 20*time.Second {
			for _, o := range orders {
				tctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				tk, err := submitter.Task(tctx, o.id)
				cancel()
				if err != nil {
					t.Logf("%s: %v", o.id, err)
				} else if !tk.Final() {
					b, _ := json.Marshal(tk)
					t.Logf("not final: %s", b)
				}
			}
			t.FailNow()
		}
		return false
	})

	// Outcomes: Processed with the agent's output, or Compensated with an alert.
	var compensated []string
	for _, o := range orders {
		tk, err := submitter.Task(ctx, o.id)
		must(t, err)
		if tk.WorkflowVersion != 1 {
			t.Errorf("%s: workflow_version %d, want 1", o.id, tk.WorkflowVersion)
		}
		switch {
		case o.amount <= 1000:
			if tk.State != "Processed" || !strings.Contains(string(tk.Output), `"notified":"`+o.id+`"`) {
				t.Errorf("%s: %s, output %s; want Processed with the notifier's output", o.id, tk.State, tk.Output)
			}
		default:
			if tk.State != "Compensated" {
				t.Errorf("%s (amount %d): %s, want Compensated", o.id, o.amount, tk.State)
			}
			compensated = append(compensated, o.id)
		}
	}
	// Every compensated task raised an alert (the declined card).
	alerts, err := submitter.Alerts(ctx, droverclient.AlertParams{Limit: 1000})
	must(t, err)
	alerted := map[string]bool{}
	for _, a := range alerts.Alerts {
		alerted[a.Subject] = true
	}
	for _, id := range compensated {
		if !alerted[id] {
			t.Errorf("%s was compensated without an alert", id)
		}
	}

	// The operator raises the card limit and resubmits a compensated
	// order from the CLI, against the server: a new run, new keys.
	payments.SetRejectAmountAbove(1_000_000)
	again := compensated[0]
	out, err := exec.CommandContext(ctx, bin, "resubmit", again, "--server", base, "--token", e2eOperatorToken).CombinedOutput()
	if err != nil {
		t.Fatalf("drover resubmit --server: %v\n%s", err, out)
	}
	waitE2E(t, ctx, "the resubmitted task processed", func() bool {
		tk, err := submitter.Task(ctx, again)
		return err == nil && tk.State == "Processed"
	})

	// No effect applied twice at the services, apart from the resubmitted
	// order's reservation (done, undone, done again: its release ran once).
	for _, o := range orders {
		wantReserve, wantRelease, wantCharge := 1, 0, 1
		switch {
		case o.id == again:
			wantReserve, wantRelease = 2, 1
		case o.amount > 1000:
			wantRelease, wantCharge = 1, 0
		}
		if got := inventory.Applied("reserve-stock", o.id); got != wantReserve {
			t.Errorf("%s: reserve-stock applied %d times, want %d", o.id, got, wantReserve)
		}
		if got := inventory.Applied("release-stock", o.id); got != wantRelease {
			t.Errorf("%s: release-stock applied %d times, want %d", o.id, got, wantRelease)
		}
		if got := payments.Applied("charge-card", o.id); got != wantCharge {
			t.Errorf("%s: charge-card applied %d times, want %d", o.id, got, wantCharge)
		}
	}
	if st := payments.Stats(); st.Transient == 0 {
		t.Errorf("payments injected no transient failures (%+v): the test did not exercise retries", st)
	}

	// SSE: the stream saw every task's final event, in ID order, once.
	waitE2E(t, ctx, "the stream to show the resubmitted task processed", func() bool {
		evMu.Lock()
		defer evMu.Unlock()
		n := 0
		for _, e := range events {
			if e.Subject == again && e.Type == "processed" {
				n++
			}
		}
		return n == 1
	})
	evMu.Lock()
	final := map[string]int{}
	var last int64
	for _, e := range events {
		if e.ID <= last {
			t.Errorf("event %d after %d on the stream: out of order or repeated", e.ID, last)
		}
		last = e.ID
		if e.Type == "processed" || e.Type == "compensated" {
			final[e.Subject]++
		}
	}
	evMu.Unlock()
	for _, o := range orders {
		want := 1
		if o.id == again {
			want = 2 // compensated, then processed
		}
		if final[o.id] != want {
			t.Errorf("%s: %d final events on the stream, want %d", o.id, final[o.id], want)
		}
	}

	// Webhooks: every final event delivered, signed, to the receiver.
	waitE2E(t, ctx, "a webhook for every final event", func() bool {
		hookMu.Lock()
		defer hookMu.Unlock()
		for _, o := range orders {
			want := 1
			if o.id == again {
				want = 2
			}
			if len(hooks[o.id]) != want {
				return false
			}
		}
		return true
	})
	hookMu.Lock()
	if badHooks > 0 {
		t.Errorf("%d webhooks failed signature verification", badHooks)
	}
	hookMu.Unlock()

	// SIGTERM: a clean exit.
	_ = srv.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-srv.done:
		if srv.err != nil {
			t.Errorf("server exit after SIGTERM: %v", srv.err)
		}
	case <-time.After(30 * time.Second):
		t.Error("server did not exit within 30s of SIGTERM")
	}
}

// e2eOrder is one order of the end-to-end test.
type e2eOrder struct {
	id     string
	amount int
}

// countFinal counts the orders in a final state, with one list request (the
// server rate-limits each token).
func countFinal(ctx context.Context, c *droverclient.Client, orders []e2eOrder) int {
	page, err := c.Tasks(ctx, droverclient.ListParams{Workflow: "order", Limit: 1000})
	if err != nil {
		return -1
	}
	want := map[string]bool{}
	for _, o := range orders {
		want[o.id] = true
	}
	n := 0
	for _, tk := range page.Tasks {
		if want[tk.ID] && tk.Final() {
			n++
		}
	}
	return n
}

func waitE2E(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// lockedWriter collects the server's log from several goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  *strings.Builder
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (l *lockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.String()
}
