package httpapi

import (
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/drover-run/drover/metrics"
)

const metricsTok = "metrics-token-0123456789"

// GET /metrics serves Options.Metrics to tokens of scope metrics (or
// operator), and answers 404 on a server without metrics.
func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	tokens := append(slices.Clone(testTokens), Token{Secret: metricsTok, Scopes: []Scope{ScopeMetrics}})
	e := newEnv(t, testutilSQLite(t), Options{Metrics: reg, Tokens: tokens})
	reg.MustRegister(metrics.NewCollector(e.d, metrics.Options{}))
	e.do("POST", "/v1/tasks", submitTok, `{"workflow":"echo","id":"m1","input":{}}`).must(t, 201)
	for deadline := time.Now().Add(10 * time.Second); e.d.Stats().TasksFinished < 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the task did not finish")
		}
	}
	scrape := func(token string) string { t.Helper(); return scrapeMetrics(t, e, token) }
	body := scrape(metricsTok)
	for _, line := range []string{"drover_tasks_finished_total 1", "drover_tasks_active 0", "drover_steps_dispatched_total 2"} {
		if !strings.Contains(body, "\n"+line+"\n") {
			t.Errorf("no line %q in:\n%s", line, body)
		}
	}
	scrape(operatorTok)
	e.do("GET", "/metrics", submitTok, "").mustError(t, 403, "forbidden")
	e.do("GET", "/v1/tasks", metricsTok, "").mustError(t, 403, "forbidden")

	e2 := newEnv(t, testutilSQLite(t), Options{})
	e2.do("GET", "/metrics", operatorTok, "").mustError(t, 404, "not_found")
}

// TestMetricsOfANamespace: a metrics token of namespace a scrapes only
// the series labelled namespace="a" (here the tasks a's schedulers hold),
// nothing of b's nor the server's own; a global metrics token sees all.
func TestMetricsOfANamespace(t *testing.T) {
	const aMetricsTok = "ns-a-metrics-token-0123456789"
	reg := prometheus.NewRegistry()
	tokens := append(slices.Clone(nsTokens), Token{Secret: metricsTok, Scopes: []Scope{ScopeMetrics}},
		Token{Secret: aMetricsTok, Scopes: []Scope{ScopeMetrics}, Namespace: "a"})
	e := newEnv(t, testutilSQLite(t), Options{Metrics: reg, Tokens: tokens})
	reg.MustRegister(metrics.NewCollector(e.d, metrics.Options{}),
		metrics.NewNamespaceCollector(metrics.NamespaceGauge{Name: "drover_namespace_tasks_held", Help: "Held.", Counts: e.d.NamespaceHeld}))
	e.do("POST", "/v1/tasks", aSubmitTok, `{"workflow":"external","id":"x1"}`).must(t, 201)
	e.do("POST", "/v1/tasks", aSubmitTok, `{"workflow":"external","id":"x2"}`).must(t, 201)
	e.do("POST", "/v1/tasks", bSubmitTok, `{"workflow":"external","id":"x1"}`).must(t, 201)
	e.do("POST", "/v1/tasks", submitTok, `{"workflow":"external","id":"x1"}`).must(t, 201)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if h := e.d.NamespaceHeld(); h["a"] == 2 && h["b"] == 1 && h[""] == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("held: %v", e.d.NamespaceHeld())
		}
	}
	scrape := func(token string) string { t.Helper(); return scrapeMetrics(t, e, token) }
	body := scrape(aMetricsTok)
	if !strings.Contains(body, "\n"+`drover_namespace_tasks_held{namespace="a"} 2`+"\n") {
		t.Errorf("a's series missing:\n%s", body)
	}
	for _, not := range []string{`namespace="b"`, `namespace="default"`, "drover_tasks_active", "drover_steps_dispatched_total"} {
		if strings.Contains(body, not) {
			t.Errorf("a's scrape shows %s:\n%s", not, body)
		}
	}
	body = scrape(metricsTok)
	for _, want := range []string{`drover_namespace_tasks_held{namespace="b"} 1`, `drover_namespace_tasks_held{namespace="default"} 1`, "drover_tasks_active 4"} {
		if !strings.Contains(body, want) {
			t.Errorf("the global scrape lacks %s:\n%s", want, body)
		}
	}
	e.do("GET", "/metrics", aSubmitTok, "").mustError(t, 403, "forbidden")
}

// scrapeMetrics GETs /metrics with the token: 200 in Prometheus's text
// format.
func scrapeMetrics(t *testing.T, e *testEnv, token string) string {
	t.Helper()
	req := httptest.NewRequest("GET", "/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	rec := httptest.NewRecorder()
	e.h.ServeHTTP(rec, req)
	if rec.Code != 200 {
		t.Fatalf("GET /metrics: status %d: %s", rec.Code, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("Content-Type %q, want text/plain", ct)
	}
	return rec.Body.String()
}
