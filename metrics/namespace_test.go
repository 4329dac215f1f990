package metrics_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/drover-run/drover/metrics"
)

// TestNamespaceCollector: one gauge per namespace holding any, the default
// namespace ("") labelled "default".
func TestNamespaceCollector(t *testing.T) {
	c := metrics.NewNamespaceCollector(metrics.NamespaceGauge{Name: "drover_test_calls", Help: "Calls.",
		Counts: func() map[string]int { return map[string]int{"": 2, "team-a": 5} }})
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	want := `# HELP drover_test_calls Calls.
# TYPE drover_test_calls gauge
drover_test_calls{namespace="default"} 2
drover_test_calls{namespace="team-a"} 5
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "drover_test_calls"); err != nil {
		t.Fatal(err)
	}
	// Before namespaces are in use: the default namespace, at 0.
	reg = prometheus.NewRegistry()
	reg.MustRegister(metrics.NewNamespaceCollector(metrics.NamespaceGauge{Name: "drover_test_calls", Help: "Calls.",
		Counts: func() map[string]int { return nil }}))
	want = `# HELP drover_test_calls Calls.
# TYPE drover_test_calls gauge
drover_test_calls{namespace="default"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "drover_test_calls"); err != nil {
		t.Fatal(err)
	}
}

// TestNamespaceCollectorBounded: a gauge reports at most
// MaxNamespaceSeries namespaces, those with the largest values.
func TestNamespaceCollectorBounded(t *testing.T) {
	counts := map[string]int{}
	for i := range metrics.MaxNamespaceSeries + 50 {
		counts[fmt.Sprintf("ns-%03d", i)] = i + 1
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewNamespaceCollector(metrics.NamespaceGauge{Name: "drover_test_calls", Help: "Calls.",
		Counts: func() map[string]int { return counts }}))
	if n := testutil.CollectAndCount(reg, "drover_test_calls"); n != metrics.MaxNamespaceSeries {
		t.Fatalf("%d series, want %d", n, metrics.MaxNamespaceSeries)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mfs[0].Metric {
		if m.GetGauge().GetValue() <= 50 {
			t.Fatalf("a small namespace kept over larger ones: %v", m)
		}
	}
}

// TestForNamespace: only the series labelled with the namespace are
// gathered; families left empty are dropped.
func TestForNamespace(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewNamespaceCollector(metrics.NamespaceGauge{Name: "drover_test_calls", Help: "Calls.",
		Counts: func() map[string]int { return map[string]int{"": 2, "team-a": 5, "team-b": 7} }}))
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "drover_test_global", Help: "Global."})
	reg.MustRegister(g)
	want := `# HELP drover_test_calls Calls.
# TYPE drover_test_calls gauge
drover_test_calls{namespace="team-a"} 5
`
	if err := testutil.GatherAndCompare(metrics.ForNamespace(reg, "team-a"), strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
	want = `# HELP drover_test_calls Calls.
# TYPE drover_test_calls gauge
drover_test_calls{namespace="default"} 2
`
	if err := testutil.GatherAndCompare(metrics.ForNamespace(reg, "default"), strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}
