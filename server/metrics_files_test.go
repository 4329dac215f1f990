package server_test

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
)

// The files the metrics are checked against, from this package.
const (
	dashboardPath  = "../deploy/grafana/drover-dashboard.json"
	operationsPath = "../docs/operations.md"
)

// exposed are the metric names a scrape holds, with the series names of
// histograms (_bucket, _sum, _count), and the type of each family.
func exposed(mfs map[string]*dto.MetricFamily) (names map[string]bool, types map[string]string) {
	names, types = map[string]bool{}, map[string]string{}
	for name, mf := range mfs {
		names[name] = true
		types[name] = strings.ToLower(mf.GetType().String())
		if mf.GetType() == dto.MetricType_HISTOGRAM {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				names[name+suffix] = true
			}
		}
	}
	return names, types
}

// promqlMetric matches an identifier of a PromQL expression that is a
// metric name: every drover metric starts with drover_, and so no label,
// function or keyword does. Quoted strings are removed first.
var (
	promqlString = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")
	promqlMetric = regexp.MustCompile(`\b(?:drover|go|process)_[a-zA-Z0-9_:]*`)
)

// metricsOf returns the metric names expr queries.
func metricsOf(expr string) []string {
	return promqlMetric.FindAllString(promqlString.ReplaceAllString(expr, `""`), -1)
}

// dashboardExprs returns every PromQL expression of the dashboard, by
// panel title.
func dashboardExprs(t *testing.T) map[string][]string {
	t.Helper()
	src, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title         string `json:"title"`
		UID           string `json:"uid"`
		SchemaVersion int    `json:"schemaVersion"`
		Panels        []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			GridPos struct {
				H, W, X, Y int
			} `json:"gridPos"`
			Targets []struct {
				Expr  string `json:"expr"`
				RefID string `json:"refId"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(src, &d); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	if d.Title == "" || d.UID == "" || d.SchemaVersion == 0 || len(d.Panels) == 0 {
		t.Fatalf("%s: not a Grafana dashboard (title %q, uid %q, schemaVersion %d, %d panels)", dashboardPath, d.Title, d.UID, d.SchemaVersion, len(d.Panels))
	}
	out := map[string][]string{}
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		if p.Title == "" || p.GridPos.W == 0 || p.GridPos.H == 0 || len(p.Targets) == 0 {
			t.Errorf("panel %q (%s): no title, size or queries", p.Title, p.Type)
		}
		for _, tg := range p.Targets {
			if tg.Expr == "" || tg.RefID == "" {
				t.Errorf("panel %q: a query without expr or refId", p.Title)
			}
			out[p.Title] = append(out[p.Title], tg.Expr)
		}
	}
	for _, v := range d.Templating.List {
		if q, ok := v.Query.(map[string]any); ok {
			if s, ok := q["query"].(string); ok {
				out["variable "+v.Name] = append(out["variable "+v.Name], s)
			}
		} else if s, ok := v.Query.(string); ok && v.Type == "query" {
			out["variable "+v.Name] = append(out["variable "+v.Name], s)
		}
	}
	return out
}

// checkDashboard checks that every metric the dashboard queries is one
// the server serves, and that its panels cover the operator's questions.
func checkDashboard(t *testing.T, mfs map[string]*dto.MetricFamily) {
	names, _ := exposed(mfs)
	used := map[string]bool{}
	for panel, exprs := range dashboardExprs(t) {
		for _, expr := range exprs {
			ms := metricsOf(expr)
			if len(ms) == 0 && !strings.HasPrefix(panel, "variable ") {
				t.Errorf("panel %q: %q queries no drover metric", panel, expr)
			}
			for _, m := range ms {
				used[m] = true
				if !names[m] {
					t.Errorf("panel %q queries %s, which the server does not serve", panel, m)
				}
			}
			if strings.Contains(expr, "histogram_quantile") && !strings.Contains(expr, "_bucket") {
				t.Errorf("panel %q: histogram_quantile over no _bucket series: %s", panel, expr)
			}
		}
	}
	for _, m := range []string{"drover_task_duration_seconds_bucket", "drover_step_duration_seconds_bucket", "drover_agent_call_duration_seconds_bucket",
		"drover_alerts_by_kind_total", "drover_queue_messages_pending", "drover_queue_oldest_wait_seconds", "drover_supervisor_leader",
		"drover_http_requests_total", "drover_webhook_delivered_total", "drover_tasks_finished_total"} {
		if !used[m] {
			t.Errorf("the dashboard does not query %s", m)
		}
	}
}

// docsMetric is a row of the monitoring table: | `name` | type | labels | meaning |.
var docsMetric = regexp.MustCompile("^\\| `([a-z_:]+)` \\| (counter|gauge|histogram) \\| ([^|]*) \\| ([^|]+) \\|$")

// checkDocs checks that docs/operations.md's monitoring table lists
// exactly the drover metrics the server serves, with their types and
// labels.
func checkDocs(t *testing.T, mfs map[string]*dto.MetricFamily) {
	src, err := os.ReadFile(operationsPath)
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, line := range strings.Split(string(src), "\n") {
		m := docsMetric.FindStringSubmatch(line)
		if m == nil {
			if strings.HasPrefix(line, "| `drover_") {
				t.Errorf("%s: a metric row not of the form | `name` | type | labels | meaning |: %s", operationsPath, line)
			}
			continue
		}
		name, typ, labels := m[1], m[2], m[3]
		if documented[name] {
			t.Errorf("%s lists %s twice", operationsPath, name)
		}
		documented[name] = true
		mf, ok := mfs[name]
		if !ok {
			t.Errorf("%s lists %s, which the server does not serve", operationsPath, name)
			continue
		}
		if got := strings.ToLower(mf.GetType().String()); got != typ {
			t.Errorf("%s: %s is a %s, the docs say %s", operationsPath, name, got, typ)
		}
		var want []string
		for _, l := range strings.Split(labels, ",") {
			if l = strings.Trim(strings.TrimSpace(l), "`"); l != "" && l != "—" {
				want = append(want, l)
			}
		}
		var got []string
		if len(mf.GetMetric()) > 0 {
			for _, l := range mf.GetMetric()[0].GetLabel() {
				got = append(got, l.GetName())
			}
		}
		slices.Sort(want)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s: %s has labels %v, the docs say %v", operationsPath, name, got, want)
		}
	}
	for name := range mfs {
		if strings.HasPrefix(name, "drover_") && !documented[name] {
			t.Errorf("the server serves %s, which %s's monitoring table does not list", name, operationsPath)
		}
	}
}
