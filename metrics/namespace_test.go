package metrics_test

import (
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
}
