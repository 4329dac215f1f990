package webhook

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/drover-run/drover/metrics"
)

// Collector returns a prometheus.Collector of the dispatcher's counters
// (Stats), for `drover server`'s GET /metrics.
func (d *Dispatcher) Collector() prometheus.Collector {
	return metrics.NewStatsCollector(d.Stats, statsFields...)
}

var statsFields = []metrics.Field[Stats]{
	{Name: "drover_webhook_enqueued_total", Help: "Webhook deliveries this process queued.", Type: prometheus.CounterValue,
		Value: func(s Stats) int64 { return s.Enqueued }},
	{Name: "drover_webhook_too_old_total", Help: "Final-state events older than the webhooks' maximum age when found: not queued.", Type: prometheus.CounterValue,
		Value: func(s Stats) int64 { return s.TooOld }},
	{Name: "drover_webhook_attempts_total", Help: "Webhook requests sent (or tried).", Type: prometheus.CounterValue,
		Value: func(s Stats) int64 { return s.Attempts }},
	{Name: "drover_webhook_delivered_total", Help: "Webhook attempts answered with a 2xx status.", Type: prometheus.CounterValue,
		Value: func(s Stats) int64 { return s.Delivered }},
	{Name: "drover_webhook_retried_total", Help: "Failed webhook attempts to be tried again.", Type: prometheus.CounterValue,
		Value: func(s Stats) int64 { return s.Retried }},
	{Name: "drover_webhook_failed_total", Help: "Webhook deliveries given up (attempts or age exhausted, or an unusable URL).", Type: prometheus.CounterValue,
		Value: func(s Stats) int64 { return s.Failed }},
	{Name: "drover_webhook_stale_total", Help: "Webhook results not recorded: the claim had expired and was taken over.", Type: prometheus.CounterValue,
		Value: func(s Stats) int64 { return s.Stale }},
	{Name: "drover_webhook_postponed_total", Help: "Claimed webhook deliveries put back without an attempt: their host had its maximum of requests in flight.", Type: prometheus.CounterValue,
		Value: func(s Stats) int64 { return s.Postponed }},
	{Name: "drover_webhook_in_flight", Help: "Webhook requests in flight now.", Type: prometheus.GaugeValue,
		Value: func(s Stats) int64 { return s.InFlight }},
}
