package cli

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/metrics"
)

// newMetrics returns the registry the server's GET /metrics serves: the
// client's metrics (package metrics), and Go's and the process's.
func newMetrics(c *drover.Client) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewCollector(c, metrics.Options{}),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}
