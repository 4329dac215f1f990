// Package metrics exposes a drover Client as Prometheus metrics: the
// process's counters (drover.Stats), the latency histograms and labelled
// counters its roles record (tasks, steps and agent calls by workflow,
// step and agent; retries, recoveries, compensations, alerts, leader
// changes), whether its supervisor leads, and, read from the store at each
// scrape, the unfinished tasks and the session queues' depth and oldest
// wait.
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
