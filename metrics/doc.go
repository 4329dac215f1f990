// Package metrics exposes a drover Client as Prometheus metrics: the
// process's counters (drover.Stats), whether its supervisor leads, and the
// store's queue depth.
//
// Register a Collector in any prometheus.Registerer:
//
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(metrics.NewCollector(client, metrics.Options{}))
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// `drover server --listen` serves the same metrics at GET /metrics (token
// scope "metrics"; see docs/operations.md for what to watch).
package metrics
