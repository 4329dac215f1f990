package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/droverclient"
	"github.com/drover-run/drover/internal/testutil"
	"github.com/drover-run/drover/server"
	"github.com/drover-run/drover/store"
)

// The tokens of the metrics server.
const (
	operatorToken  = "metrics-test-operator-0123456789"
	metricsToken   = "metrics-test-metrics-0123456789a"
	acmeToken      = "metrics-test-acme-submit-012345"
	acmeMetricsTok = "metrics-test-acme-metrics-01234"
)

// metricsServer is a running server on a real store after a workload
// that makes every kind of series: a task that retries after a timeout,
// one that compensates, one that fails, transient agent errors, a task in
// a namespace, session locks renewed and lost, a queue with a session
// waiting.
type metricsServer struct {
	url string
}

// startMetricsServer runs the workload once for the tests of this file,
// on d (SQLite or PostgreSQL).
func startMetricsServer(t *testing.T, d store.Driver) *metricsServer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var slowCalls, flakyCalls atomic.Int64
	ok := func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) { return []byte(`{}`), nil }
	agents := []drover.Agent{
		{Name: "ok", Func: ok},
		{Name: "undo", Func: ok},
		{Name: "flaky", Func: func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) {
			if flakyCalls.Add(1) == 1 {
				return nil, errors.New("try again")
			}
			return []byte(`{}`), nil
		}},
		{Name: "slow", Func: func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) {
			if slowCalls.Add(1) == 1 {
				<-ctx.Done() // past the step's deadline: the supervisor retries it
				return nil, ctx.Err()
			}
			return []byte(`{}`), nil
		}},
		{Name: "bad", Func: func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) {
			return nil, drover.Permanent(errors.New("card declined"))
		}},
		{Name: "hang", Func: func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) {
			<-ctx.Done() // always past the deadline
			return nil, ctx.Err()
		}},
	}
	hang := drover.Step{Name: "hold", Agent: "hang", Timeout: 100 * time.Millisecond}
	workflows := []drover.Workflow{
		{Name: "pay", Steps: []drover.Step{{Name: "reserve", Agent: "ok", Compensation: "undo"}, {Name: "charge", Agent: "flaky"}}},
		{Name: "slowpay", RetryDelay: time.Millisecond, Steps: []drover.Step{{Name: "wait", Agent: "slow", Timeout: 300 * time.Millisecond}}},
		{Name: "refund", Steps: []drover.Step{{Name: "reserve", Agent: "ok", Compensation: "undo"}, {Name: "charge", Agent: "bad", OnFailure: drover.PolicyCompensate}}},
		{Name: "fail", Steps: []drover.Step{{Name: "charge", Agent: "bad"}}},
		// Timed out past the threshold: Error; compensated; waited, then Error.
		{Name: "hangfail", FailureThreshold: 1, Steps: []drover.Step{hang}},
		{Name: "hangcomp", FailureThreshold: 1, OnFailure: drover.PolicyCompensate, Steps: []drover.Step{{Name: "reserve", Agent: "ok", Compensation: "undo"}, hang}},
		{Name: "hangwait", FailureThreshold: 1, Wait: drover.WaitPolicy{MaxWaits: 1, Delay: time.Millisecond}, Steps: []drover.Step{hang}},
	}
	tokens := []server.Token{
		{Secret: operatorToken, Scopes: []server.Scope{server.ScopeOperator}},
		{Secret: metricsToken, Scopes: []server.Scope{server.ScopeMetrics}},
		{Secret: acmeToken, Scopes: []server.Scope{server.ScopeSubmit}, Namespace: "acme"},
		{Secret: acmeMetricsTok, Scopes: []server.Scope{server.ScopeMetrics}, Namespace: "acme"},
	}
	var delivered atomic.Int64
	hooks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { delivered.Add(1) }))
	t.Cleanup(hooks.Close)
	ready := make(chan server.Ready, 1)
	done := make(chan error, 1)
	go func() {
		done <- server.Run(ctx, server.Config{Store: d, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			Workflows: workflows, Agents: agents, SupervisorInterval: 20 * time.Millisecond, PollInterval: 10 * time.Millisecond,
			EgressAllow: []string{"127.0.0.1"}, Webhooks: server.Webhooks{Secret: []byte("metrics-test-webhook-secret-0123"), URLs: []string{hooks.URL}},
			HTTP: &server.HTTPConfig{Listen: "127.0.0.1:0", Tokens: tokens}, OnReady: func(r server.Ready) { ready <- r }})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server.Run: %v", err)
		}
	})
	var r server.Ready
	select {
	case r = <-ready:
	case err := <-done:
		t.Fatalf("server.Run: %v", err)
	}
	op, err := droverclient.New(r.URL, operatorToken)
	if err != nil {
		t.Fatal(err)
	}
	acme, err := droverclient.New(r.URL, acmeToken)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"p-1": "Processed", "s-1": "Processed", "r-1": "Compensated", "f-1": "Error",
		"h-1": "Error", "h-2": "Compensated", "h-3": "Error"}
	for id, wf := range map[string]string{"p-1": "pay", "s-1": "slowpay", "r-1": "refund", "f-1": "fail",
		"h-1": "hangfail", "h-2": "hangcomp", "h-3": "hangwait"} {
		if _, _, err := op.SubmitTask(ctx, droverclient.SubmitRequest{Workflow: wf, ID: id, Input: json.RawMessage(`{}`)}); err != nil {
			t.Fatalf("submit %s: %v", id, err)
		}
	}
	if _, _, err := acme.SubmitTask(ctx, droverclient.SubmitRequest{Workflow: "fail", ID: "a-1", Input: json.RawMessage(`{}`)}); err != nil {
		t.Fatalf("submit a-1 in acme: %v", err)
	}
	for id, state := range want {
		testutil.WaitFor(t, id+" "+state, func() bool {
			task, err := op.Task(ctx, id)
			return err == nil && string(task.State) == state
		})
	}
	testutil.WaitFor(t, "a-1 in Error", func() bool {
		task, err := acme.Task(ctx, "a-1")
		return err == nil && string(task.State) == "Error"
	})

	testutil.WaitFor(t, "a webhook delivered", func() bool { return delivered.Load() > 0 })

	// A delayed task an operator cancels before it starts.
	hour := int64(3_600_000)
	if _, _, err := op.SubmitTask(ctx, droverclient.SubmitRequest{Workflow: "pay", ID: "c-1", Input: json.RawMessage(`{}`), DelayMS: &hour}); err != nil {
		t.Fatalf("submit c-1: %v", err)
	}
	if _, err := op.Cancel(ctx, "c-1", "not needed"); err != nil {
		t.Fatalf("cancel c-1: %v", err)
	}

	// Session locks: one renewed, one lost (a stale token); session s2
	// waits for a consumer.
	if _, err := op.Publish(ctx, "orders-q", droverclient.PublishMessage{SessionID: "s1", Body: json.RawMessage(`1`)},
		droverclient.PublishMessage{SessionID: "s2", Body: json.RawMessage(`2`)}); err != nil {
		t.Fatal(err)
	}
	l, err := op.AcceptSession(ctx, "orders-q", "s1")
	if err != nil {
		t.Fatal(err)
	}
	if err := op.Renew(ctx, l); err != nil {
		t.Fatal(err)
	}
	if err := op.Release(ctx, l); err != nil {
		t.Fatal(err)
	}
	if err := op.Renew(ctx, l); err == nil {
		t.Fatal("renew of a released lock succeeded")
	}
	if _, err := op.AcceptSession(ctx, "orders-q", "s1"); err != nil {
		t.Fatal(err)
	}
	// A remote consumer dead-letters a message of a queue with the block
	// policy (the default): the session is blocked, an operator alert.
	if _, err := op.Publish(ctx, "blocky", droverclient.PublishMessage{SessionID: "b1", Body: json.RawMessage(`1`)}); err != nil {
		t.Fatal(err)
	}
	bl, err := op.AcceptSession(ctx, "blocky", "b1")
	if err != nil {
		t.Fatal(err)
	}
	got, err := op.Receive(ctx, bl, time.Second)
	if err != nil || got.Message == nil {
		t.Fatalf("receive from blocky: %+v %v", got, err)
	}
	if err := op.Settle(ctx, bl, got.Message.Seq, droverclient.Settlement{Outcome: droverclient.DeadLetter, Reason: "bad"}); err != nil {
		t.Fatal(err)
	}
	// A request no route serves.
	resp, err := http.Get(r.URL + "/v1/no-such-route/p-1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return &metricsServer{url: r.URL}
}

// scrape returns the metric families GET /metrics serves to token.
func (s *metricsServer) scrape(t *testing.T, token string) map[string]*dto.MetricFamily {
	t.Helper()
	req, _ := http.NewRequest("GET", s.url+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET /metrics: %s %s", resp.Status, b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return mfs
}

// series returns the metrics of mfs[name] whose labels include want.
func series(mfs map[string]*dto.MetricFamily, name string, want map[string]string) []*dto.Metric {
	var out []*dto.Metric
	for _, m := range mfs[name].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		match := true
		for k, v := range want {
			if labels[k] != v {
				match = false
			}
		}
		if match {
			out = append(out, m)
		}
	}
	return out
}

// total is the sum of the counters, or histogram counts, of ms.
func total(ms []*dto.Metric) float64 {
	n := 0.0
	for _, m := range ms {
		n += m.GetCounter().GetValue() + float64(m.GetHistogram().GetSampleCount()) + m.GetGauge().GetValue()
	}
	return n
}

// TestMetricsOfARunningServer runs a workload on a server on each driver
// and scrapes its GET /metrics: the series and their labels, what a
// namespace's token sees, and that the Grafana dashboard and the docs'
// table name exactly what the server serves.
func TestMetricsOfARunningServer(t *testing.T) {
	for name, open := range map[string]func(testing.TB) store.Driver{
		"sqlite":   func(t testing.TB) store.Driver { return testutil.SQLite(t) },
		"postgres": func(t testing.TB) store.Driver { return testutil.Postgres(t) },
	} {
		t.Run(name, func(t *testing.T) {
			s := startMetricsServer(t, open(t))
			checkSeries(t, s)
			t.Run("dashboard", func(t *testing.T) { checkDashboard(t, s.scrape(t, metricsToken)) })
			t.Run("docs", func(t *testing.T) { checkDocs(t, s.scrape(t, metricsToken)) })
		})
	}
}

// checkSeries checks the series of the workload, their labels, and what
// a namespace's token sees.
func checkSeries(t *testing.T, s *metricsServer) {
	t.Helper()
	def := map[string]string{"namespace": "default"}
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range def {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	type check struct {
		name   string
		labels map[string]string
		min    float64
	}
	checks := []check{
		{"drover_task_duration_seconds", with("workflow", "pay", "state", "Processed"), 1},
		{"drover_task_duration_seconds", with("workflow", "pay", "state", "Cancelled"), 1},
		{"drover_task_duration_seconds", with("workflow", "refund", "state", "Compensated"), 1},
		{"drover_task_duration_seconds", with("workflow", "fail", "state", "Error"), 1},
		{"drover_task_duration_seconds", map[string]string{"namespace": "acme", "workflow": "fail", "state": "Error"}, 1},
		{"drover_step_duration_seconds", with("workflow", "pay", "step", "charge", "outcome", "processed"), 1},
		{"drover_step_duration_seconds", with("workflow", "fail", "step", "charge", "outcome", "failed"), 1},
		{"drover_step_duration_seconds", with("workflow", "slowpay", "step", "wait", "outcome", "processed"), 1},
		{"drover_agent_call_duration_seconds", map[string]string{"agent": "flaky", "outcome": "error"}, 1},
		{"drover_agent_call_duration_seconds", map[string]string{"agent": "flaky", "outcome": "ok"}, 1},
		{"drover_agent_call_duration_seconds", map[string]string{"agent": "bad", "outcome": "permanent"}, 3},
		{"drover_step_retries_total", with("workflow", "slowpay", "step", "wait"), 1},
		{"drover_supervisor_recovery_actions_total", with("workflow", "slowpay", "action", "retry"), 1},
		{"drover_compensations_total", with("workflow", "refund", "step", "reserve", "outcome", "compensated"), 1},
		{"drover_supervisor_recovery_actions_total", with("workflow", "hangfail", "action", "error"), 1},
		{"drover_step_duration_seconds", with("workflow", "hangfail", "step", "hold", "outcome", "failed"), 1},
		{"drover_supervisor_recovery_actions_total", with("workflow", "hangcomp", "action", "compensate"), 1},
		{"drover_step_duration_seconds", with("workflow", "hangcomp", "step", "hold", "outcome", "failed"), 1},
		{"drover_compensations_total", with("workflow", "hangcomp", "step", "reserve", "outcome", "compensated"), 1},
		{"drover_task_duration_seconds", with("workflow", "hangcomp", "state", "Compensated"), 1},
		{"drover_supervisor_recovery_actions_total", with("workflow", "hangwait", "action", "wait"), 1},
		{"drover_supervisor_recovery_actions_total", with("workflow", "hangwait", "action", "error"), 1},
		{"drover_alerts_by_kind_total", with("workflow", "hangwait", "kind", "step_waiting"), 1},
		{"drover_alerts_by_kind_total", with("workflow", "fail", "kind", "error"), 1},
		{"drover_alerts_by_kind_total", with("workflow", "refund", "kind", "step_failed"), 1},
		{"drover_alerts_by_kind_total", with("kind", "session_blocked"), 1},
		{"drover_leader_changes_total", map[string]string{"lease": "supervisor", "change": "acquired"}, 1},
		{"drover_leader_changes_total", map[string]string{"lease": "instance", "change": "acquired"}, 1},
		{"drover_leader_changes_total", map[string]string{"lease": "maintenance:webhooks", "change": "acquired"}, 1},
		{"drover_leader_changes_total", map[string]string{"lease": "maintenance:dedupe", "change": "acquired"}, 1},
		{"drover_http_requests_total", map[string]string{"method": "POST", "route": "/v1/tasks", "status": "201"}, 5},
		{"drover_http_requests_total", map[string]string{"method": "GET", "route": "/v1/tasks/{id}"}, 1},
		{"drover_http_requests_total", map[string]string{"method": "GET", "route": "unmatched", "status": "401"}, 1},
		{"drover_http_request_duration_seconds", map[string]string{"method": "POST", "route": "/v1/tasks"}, 5},
		{"drover_session_locks_total", with("queue", "orders-q", "event", "renewed"), 1},
		{"drover_session_locks_total", with("queue", "orders-q", "event", "lost"), 1},
		{"drover_queue_sessions_ready", with("queue", "orders-q"), 2},
		{"drover_queue_messages_pending", with("queue", "orders-q"), 2},
	}
	mfs := s.scrape(t, metricsToken)
	for _, c := range checks {
		if got := total(series(mfs, c.name, c.labels)); got < c.min {
			t.Errorf("%s%v = %v, want at least %v", c.name, c.labels, got, c.min)
		}
	}
	// The route label is the pattern, never a path with an ID.
	for _, m := range mfs["drover_http_requests_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "route" && (strings.Contains(l.GetValue(), "p-1") || l.GetValue() != "unmatched" && !strings.HasPrefix(l.GetValue(), "/")) {
				t.Errorf("route label %q is not a route pattern", l.GetValue())
			}
		}
	}
	// s2 waits for a consumer (s1 is held): its wait grows.
	testutil.WaitFor(t, "orders-q's oldest wait above 0", func() bool {
		return total(series(s.scrape(t, metricsToken), "drover_queue_oldest_wait_seconds", with("queue", "orders-q"))) > 0
	})

	// A namespace's metrics token sees its namespace's series only: its
	// task's, none of the default namespace's nor the server's own.
	acme := s.scrape(t, acmeMetricsTok)
	if got := total(series(acme, "drover_task_duration_seconds", map[string]string{"namespace": "acme", "workflow": "fail", "state": "Error"})); got != 1 {
		t.Errorf("acme's scrape: drover_task_duration_seconds of its failed task = %v, want 1", got)
	}
	for name, mf := range acme {
		for _, m := range mf.GetMetric() {
			ns := ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "namespace" {
					ns = l.GetValue()
				}
			}
			if ns != "acme" {
				t.Errorf("acme's scrape holds %s with namespace %q", name, ns)
			}
		}
	}
}
