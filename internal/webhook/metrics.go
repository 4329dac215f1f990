package webhook

import "github.com/prometheus/client_golang/prometheus"

// Collector returns a prometheus.Collector of the dispatcher's counters
// (Stats), for `drover server`'s GET /metrics.
func (d *Dispatcher) Collector() prometheus.Collector { return collector{d} }

type collector struct{ d *Dispatcher }

type metric struct {
	desc  *prometheus.Desc
	typ   prometheus.ValueType
	value func(Stats) int64
}

var metrics = func() []metric {
	m := func(name, help string, typ prometheus.ValueType, value func(Stats) int64) metric {
		return metric{prometheus.NewDesc(name, help, nil, nil), typ, value}
	}
	return []metric{
		m("drover_webhook_enqueued_total", "Webhook deliveries this process queued.", prometheus.CounterValue,
			func(s Stats) int64 { return s.Enqueued }),
		m("drover_webhook_too_old_total", "Final-state events older than the webhooks' maximum age when found: not queued.", prometheus.CounterValue,
			func(s Stats) int64 { return s.TooOld }),
		m("drover_webhook_attempts_total", "Webhook requests sent (or tried).", prometheus.CounterValue,
			func(s Stats) int64 { return s.Attempts }),
		m("drover_webhook_delivered_total", "Webhook attempts answered with a 2xx status.", prometheus.CounterValue,
			func(s Stats) int64 { return s.Delivered }),
		m("drover_webhook_retried_total", "Failed webhook attempts to be tried again.", prometheus.CounterValue,
			func(s Stats) int64 { return s.Retried }),
		m("drover_webhook_failed_total", "Webhook deliveries given up (attempts or age exhausted, or an unusable URL).", prometheus.CounterValue,
			func(s Stats) int64 { return s.Failed }),
		m("drover_webhook_stale_total", "Webhook results not recorded: the claim had expired and was taken over.", prometheus.CounterValue,
			func(s Stats) int64 { return s.Stale }),
		m("drover_webhook_in_flight", "Webhook requests in flight now.", prometheus.GaugeValue,
			func(s Stats) int64 { return s.InFlight }),
	}
}()

// Describe implements prometheus.Collector.
func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range metrics {
		ch <- m.desc
	}
}

// Collect implements prometheus.Collector.
func (c collector) Collect(ch chan<- prometheus.Metric) {
	s := c.d.Stats()
	for _, m := range metrics {
		ch <- prometheus.MustNewConstMetric(m.desc, m.typ, float64(m.value(s)))
	}
}
