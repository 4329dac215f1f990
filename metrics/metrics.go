package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/drover-run/drover"
)

// DefaultStoreTimeout bounds the store read a scrape makes.
const DefaultStoreTimeout = 2 * time.Second

// Options are optional settings of NewCollector.
type Options struct {
	// StoreTimeout bounds the read of the queue depth at each scrape.
	// Default DefaultStoreTimeout.
	StoreTimeout time.Duration
}

// Collector is a prometheus.Collector of one drover Client. Counters are
// this process's since it started; drover_tasks_active is the whole
// store's, so every process of one store reports the same value.
type Collector struct {
	client  *drover.Client
	timeout time.Duration
}

// NewCollector returns a Collector of c.
func NewCollector(c *drover.Client, opts Options) *Collector {
	if opts.StoreTimeout <= 0 {
		opts.StoreTimeout = DefaultStoreTimeout
	}
	return &Collector{client: c, timeout: opts.StoreTimeout}
}

// counter is one field of drover.Stats as a Prometheus counter.
type counter struct {
	desc  *prometheus.Desc
	value func(drover.Stats) int64
}

func newCounter(name, help string, value func(drover.Stats) int64) counter {
	return counter{prometheus.NewDesc(name, help, nil, nil), value}
}

var (
	counters = []counter{
		newCounter("drover_steps_dispatched_total", "Steps this process's schedulers dispatched (attempts sent to agents), by claims and eager starts.",
			func(s drover.Stats) int64 { return s.Dispatched }),
		newCounter("drover_tasks_eager_started_total", "Tasks a Submit in this process started in its own transaction (of drover_steps_dispatched_total).",
			func(s drover.Stats) int64 { return s.EagerStarts }),
		newCounter("drover_replies_applied_total", "Agent replies this process's schedulers applied.",
			func(s drover.Stats) int64 { return s.RepliesApplied }),
		newCounter("drover_replies_late_total", "Agent replies discarded as stale: attempt superseded, deadline passed or task no longer held.",
			func(s drover.Stats) int64 { return s.LateReplies }),
		newCounter("drover_supervisor_recoveries_total", "Steps this process's supervisor recovered after their CompleteBy passed.",
			func(s drover.Stats) int64 { return s.Recoveries }),
		newCounter("drover_alerts_total", "Operator alerts this process raised.",
			func(s drover.Stats) int64 { return s.Alerts }),
		newCounter("drover_tasks_finished_total", "Tasks this process brought to Processed, Compensated or Error.",
			func(s drover.Stats) int64 { return s.TasksFinished }),
		newCounter("drover_agent_calls_total", "Calls of agent functions in this process, retries included.",
			func(s drover.Stats) int64 { return s.AgentCalls }),
		newCounter("drover_agent_retries_total", "Agent calls retried after a transient error.",
			func(s drover.Stats) int64 { return s.AgentRetries }),
		newCounter("drover_agent_calls_abandoned_total", "Agent calls stopped at their step's deadline, without a reply.",
			func(s drover.Stats) int64 { return s.Abandoned }),
		newCounter("drover_agent_breaker_refused_total", "Agent calls refused by an open circuit breaker.",
			func(s drover.Stats) int64 { return s.BreakerRefused }),
	}
	leaderDesc = prometheus.NewDesc("drover_supervisor_leader",
		"1 if this process's supervisor is the elected leader, else 0.", nil, nil)
	termDesc = prometheus.NewDesc("drover_supervisor_term",
		"The term this process's supervisor leads in; 0 when it does not lead.", nil, nil)
	activeDesc = prometheus.NewDesc("drover_tasks_active",
		"Tasks of the whole store not yet final (Pending, Processing or Compensating), read at each scrape.", nil, nil)
)

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, k := range counters {
		ch <- k.desc
	}
	ch <- leaderDesc
	ch <- termDesc
	ch <- activeDesc
}

// Collect implements prometheus.Collector. A failed store read reports
// drover_tasks_active as an error, which the handler serves alongside the
// other metrics (promhttp.ContinueOnError) or fails the scrape with.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.client.Stats()
	for _, k := range counters {
		ch <- prometheus.MustNewConstMetric(k.desc, prometheus.CounterValue, float64(k.value(s)))
	}
	term := c.client.SupervisorTerm()
	leader := 0.0
	if term > 0 {
		leader = 1
	}
	ch <- prometheus.MustNewConstMetric(leaderDesc, prometheus.GaugeValue, leader)
	ch <- prometheus.MustNewConstMetric(termDesc, prometheus.GaugeValue, float64(term))
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	n, err := c.client.Active(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(activeDesc, err)
		return
	}
	ch <- prometheus.MustNewConstMetric(activeDesc, prometheus.GaugeValue, float64(n))
}
