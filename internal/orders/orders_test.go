package orders_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/internal/orders"
	"github.com/drover-run/drover/internal/remotesim"
	"github.com/drover-run/drover/store/sqlite"
)

func TestParseOrder(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in      string
		wantErr string // "" for success
	}{
		{`{"order_id":"o-1","amount":1234}`, ""},
		{`{"amount":0,"order_id":"x"}`, ""},
		{` {"order_id":"o-1","amount":1} `, ""},
		{`{"order_id":"o-1"}`, "missing amount"},
		{`{"amount":5}`, "missing order_id"},
		{`{}`, "missing order_id and amount"},
		{`null`, "missing order_id and amount"},
		{``, "missing order_id and amount"},
		{`{"order_id":"o-1","amount":1,"coupon":"x"}`, "unknown field"},
		{`{"order_id":"","amount":1}`, "order_id is empty"},
		{`{"order_id":"o","amount":-1}`, "negative"},
		{`{"order_id":"o","amount":1.5}`, "cannot unmarshal"},
		{`{"order_id":7,"amount":1}`, "cannot unmarshal"},
		{`[1,2]`, "cannot unmarshal"},
		{`{"order_id":"o","amount":1}{}`, "data after"},
		{`{"order_id":`, "unexpected EOF"},
		{`{"order_id":"` + strings.Repeat("x", orders.MaxOrderIDLen+1) + `","amount":1}`, "limit"},
	}
	for _, tc := range cases {
		o, err := orders.ParseOrder([]byte(tc.in))
		if tc.wantErr == "" {
			if err != nil {
				t.Errorf("ParseOrder(%s) = %v", tc.in, err)
			}
			if o.OrderID == "" {
				t.Errorf("ParseOrder(%s) = %+v", tc.in, o)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, orders.ErrInvalidOrder) {
			t.Errorf("ParseOrder(%s) err = %v, want one containing %q", tc.in, err, tc.wantErr)
		}
	}
	if o, err := orders.ParseOrder(orders.Input("o-9", 42)); err != nil || o != (orders.Order{OrderID: "o-9", Amount: 42}) {
		t.Fatalf("round trip = %+v, %v", o, err)
	}
}

func TestWorkflowShape(t *testing.T) {
	t.Parallel()
	w := orders.Workflow(orders.Options{})
	if err := w.Validate(); err != nil {
		t.Fatal(err)
	}
	if w.Name != "orders" || w.OnFailure != drover.PolicyCompensate || w.FailureThreshold != 3 || len(w.Steps) != 3 {
		t.Fatalf("workflow = %+v", w)
	}
	want := []drover.Step{
		{Name: "reserve", Agent: "inventory", Compensation: "inventory-release", Timeout: 2 * time.Second},
		{Name: "charge", Agent: "payments", Compensation: "payments-refund", Timeout: 2 * time.Second},
		{Name: "ship", Agent: "shipping", Timeout: 2 * time.Second},
	}
	for i, s := range want {
		if !reflect.DeepEqual(w.Steps[i], s) {
			t.Errorf("step %d = %+v, want %+v", i, w.Steps[i], s)
		}
	}
	w = orders.Workflow(orders.Options{StepTimeout: time.Second, RetryDelay: time.Millisecond, FailureThreshold: 5})
	if w.Steps[2].Timeout != time.Second || w.RetryDelay != time.Millisecond || w.FailureThreshold != 5 {
		t.Fatalf("options not applied: %+v", w)
	}
	names := map[string]bool{}
	for _, a := range orders.Agents("http://127.0.0.1:1", orders.Options{}) {
		names[a.Name] = true
	}
	for _, n := range orders.AgentNames() {
		if !names[n] {
			t.Errorf("Agents lacks %q", n)
		}
	}
}

func startRemote(t *testing.T, cfg remotesim.Config) (*remotesim.Service, string) {
	t.Helper()
	svc := remotesim.New(cfg)
	ts := httptest.NewServer(svc.Handler())
	t.Cleanup(ts.Close)
	t.Cleanup(svc.Close)
	return svc, ts.URL
}

func agentFunc(t *testing.T, url, name string) drover.AgentFunc {
	t.Helper()
	for _, a := range orders.Agents(url, orders.Options{}) {
		if a.Name == name {
			return a.Func
		}
	}
	t.Fatalf("no agent %q", name)
	return nil
}

func TestAgentClassifiesErrors(t *testing.T) {
	t.Parallel()
	svc, url := startRemote(t, remotesim.Config{Seed: 1})
	ctx := t.Context()
	charge := agentFunc(t, url, "payments")
	req := &drover.AgentRequest{IdempotencyKey: "t1/1/charge", Input: orders.Input("o-1", 100)}

	out, err := charge(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	var resp remotesim.Response
	if err := json.Unmarshal(out, &resp); err != nil || resp.Operation != "charge" || resp.OrderID != "o-1" {
		t.Fatalf("output %s: %+v %v", out, resp, err)
	}
	// Same key again: deduplicated, applied once.
	if _, err := charge(ctx, req); err != nil {
		t.Fatal(err)
	}
	if n := svc.Applied("charge", "o-1"); n != 1 {
		t.Fatalf("Applied = %d", n)
	}

	// Invalid input: permanent, no call made.
	calls := svc.Stats().Calls
	_, err = charge(ctx, &drover.AgentRequest{IdempotencyKey: "k", Input: []byte(`{"order_id":"o-2"}`)})
	if !drover.IsPermanent(err) || svc.Stats().Calls != calls {
		t.Fatalf("invalid input: err %v permanent=%v", err, drover.IsPermanent(err))
	}

	// 4xx (a key reused for another order): permanent.
	_, err = charge(ctx, &drover.AgentRequest{IdempotencyKey: req.IdempotencyKey, Input: orders.Input("o-3", 1)})
	if !drover.IsPermanent(err) || !remotesim.IsPermanent(err) {
		t.Fatalf("409: err %v, want permanent", err)
	}

	// 5xx: transient, not marked.
	svc.SetRates(1, 0, 0)
	_, err = charge(ctx, &drover.AgentRequest{IdempotencyKey: "k5", Input: orders.Input("o-5", 1)})
	if err == nil || drover.IsPermanent(err) {
		t.Fatalf("503: err %v, want transient", err)
	}
	svc.SetRates(0, 0, 0)

	// A hang with CallTimeout: transient deadline error, well before ctx ends.
	svc.SetRates(0, 1, 0)
	hang := orders.Agents(url, orders.Options{CallTimeout: 50 * time.Millisecond})[0].Func
	_, err = hang(ctx, &drover.AgentRequest{IdempotencyKey: "k6", Input: orders.Input("o-6", 1)})
	if !errors.Is(err, context.DeadlineExceeded) || drover.IsPermanent(err) {
		t.Fatalf("hang: err %v, want deadline exceeded", err)
	}
}

// TestEndToEnd runs the workflow on a real store against the simulated
// service: a clean order is Processed; one whose charge is rejected is
// compensated (its reservation released, nothing charged).
func TestEndToEnd(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	svc, url := startRemote(t, remotesim.Config{Seed: 1})
	drv, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "orders.db"), sqlite.Options{Create: true, Synchronous: "normal"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { drv.Close() })
	opts := orders.Options{StepTimeout: 2 * time.Second, Retry: drover.RetryPolicy{InitialInterval: 5 * time.Millisecond, MaxInterval: 50 * time.Millisecond}}
	c, err := drover.New(drover.Config{
		Store: drv, Workflows: []drover.Workflow{orders.Workflow(opts)}, Agents: orders.Agents(url, opts),
		SupervisorInterval: 100 * time.Millisecond, PollInterval: 20 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Migrate(ctx); err != nil {
		t.Fatal(err)
	}

	// Submit before Start, so the charge of o-2 can be sabotaged first:
	// its idempotency key is used for another order, and the service
	// answers the agent with a 409, a permanent error.
	good, err := c.Submit(ctx, orders.WorkflowName, orders.Input("o-1", 100), &drover.SubmitOptions{ID: "order-o-1"})
	if err != nil {
		t.Fatal(err)
	}
	bad, err := c.Submit(ctx, orders.WorkflowName, orders.Input("o-2", 5), &drover.SubmitOptions{ID: "order-o-2"})
	if err != nil {
		t.Fatal(err)
	}
	tk, err := c.Task(ctx, bad.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := remotesim.NewClient(url).Call(ctx, "charge", tk.Steps[1].IdempotencyKey, "someone-else", 1); err != nil {
		t.Fatal(err)
	}

	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })

	got, err := c.Wait(ctx, good.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.ProcessState != drover.Processed {
		t.Fatalf("o-1 = %s (%s)", got.ProcessState, got.LastError)
	}
	for _, op := range []string{"reserve", "charge", "ship"} {
		if n := svc.Applied(op, "o-1"); n != 1 {
			t.Errorf("o-1 %s applied %d times", op, n)
		}
	}
	var out remotesim.Response
	if err := json.Unmarshal(got.Output, &out); err != nil || out.Operation != "ship" {
		t.Errorf("o-1 output %s: %v", got.Output, err)
	}

	got, err = c.Wait(ctx, bad.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.ProcessState != drover.Compensated {
		t.Fatalf("o-2 = %s (%s), want Compensated", got.ProcessState, got.LastError)
	}
	for op, want := range map[string]int{"reserve": 1, "release": 1, "charge": 0, "refund": 0, "ship": 0} {
		if n := svc.Applied(op, "o-2"); n != want {
			t.Errorf("o-2 %s applied %d times, want %d", op, n, want)
		}
	}
	if s := svc.Stats(); s.DuplicateEffects != 0 {
		t.Errorf("DuplicateEffects = %d", s.DuplicateEffects)
	}
}
