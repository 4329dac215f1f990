package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/internal/clock"
	"github.com/drover-run/drover/internal/instrument"
)

// DefaultStoreTimeout bounds the store read a scrape makes.
const DefaultStoreTimeout = 2 * time.Second

// Options are optional settings of NewCollector.
type Options struct {
	// StoreTimeout bounds the store reads (active tasks, session queues)
	// of each scrape. Default DefaultStoreTimeout.
	StoreTimeout time.Duration
	// Clock is the time the session queues' waits are measured at.
	// Default the system clock.
	Clock drover.Clock
}

// Collector is a prometheus.Collector of one drover Client. Counters are
// this process's since it started; drover_tasks_active is the whole
// store's, so every process of one store reports the same value.
type Collector struct {
	client   *drover.Client
	timeout  time.Duration
	stats    prometheus.Collector // the counters
	recorder prometheus.Collector // the labelled metrics the roles record
	queues   *queueCollector
}

// NewCollector returns a Collector of c.
func NewCollector(c *drover.Client, opts Options) *Collector {
	if opts.StoreTimeout <= 0 {
		opts.StoreTimeout = DefaultStoreTimeout
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	return &Collector{client: c, timeout: opts.StoreTimeout, stats: NewStatsCollector(c.Stats, counters...),
		recorder: instrument.ClientRecorder(c), queues: &queueCollector{store: c.Store(), clock: opts.Clock}}
}

// counters are drover.Stats as Prometheus counters.
var counters = []Field[drover.Stats]{
	{Name: "drover_steps_dispatched_total", Help: "Steps this process's schedulers dispatched (attempts sent to agents), by claims and eager starts.", Type: prometheus.CounterValue,
		Value: func(s drover.Stats) int64 { return s.Dispatched }},
	{Name: "drover_tasks_eager_started_total", Help: "Tasks a Submit in this process started in its own transaction (of drover_steps_dispatched_total).", Type: prometheus.CounterValue,
		Value: func(s drover.Stats) int64 { return s.EagerStarts }},
	{Name: "drover_replies_applied_total", Help: "Agent replies this process's schedulers applied.", Type: prometheus.CounterValue,
		Value: func(s drover.Stats) int64 { return s.RepliesApplied }},
	{Name: "drover_replies_late_total", Help: "Agent replies discarded as stale: attempt superseded, deadline passed or task no longer held.", Type: prometheus.CounterValue,
		Value: func(s drover.Stats) int64 { return s.LateReplies }},
	{Name: "drover_supervisor_recoveries_total", Help: "Steps this process's supervisor recovered after their CompleteBy passed.", Type: prometheus.CounterValue,
		Value: func(s drover.Stats) int64 { return s.SupervisorRecoveries }},
	{Name: "drover_supervisor_waits_total", Help: "Extended waits this process's supervisor started for steps past their failure threshold (WaitPolicy).", Type: prometheus.CounterValue,
		Value: func(s drover.Stats) int64 { return s.SupervisorWaits }},
	{Name: "drover_alerts_total", Help: "Operator alerts this process raised.", Type: prometheus.CounterValue,
		Value: func(s drover.Stats) int64 { return s.Alerts }},
	{Name: "drover_tasks_finished_total", Help: "Tasks this process brought to Processed, Compensated or Error.", Type: prometheus.CounterValue,
		Value: func(s drover.Stats) int64 { return s.TasksFinished }},
	{Name: "drover_agent_calls_total", Help: "Calls of agent functions in this process, retries included.", Type: prometheus.CounterValue,
		Value: func(s drover.Stats) int64 { return s.AgentCalls }},
	{Name: "drover_agent_retries_total", Help: "Agent calls retried after a transient error.", Type: prometheus.CounterValue,
		Value: func(s drover.Stats) int64 { return s.AgentRetries }},
	{Name: "drover_agent_calls_abandoned_total", Help: "Agent calls stopped at their step's deadline, without a reply.", Type: prometheus.CounterValue,
		Value: func(s drover.Stats) int64 { return s.AbandonedCalls }},
	{Name: "drover_agent_breaker_refused_total", Help: "Agent calls refused by an open circuit breaker.", Type: prometheus.CounterValue,
		Value: func(s drover.Stats) int64 { return s.BreakerRefused }},
}

var (
	leaderDesc = prometheus.NewDesc("drover_supervisor_leader",
		"1 if this process's supervisor is the elected leader, else 0.", nil, nil)
	termDesc = prometheus.NewDesc("drover_supervisor_term",
		"The term this process's supervisor leads in; 0 when it does not lead.", nil, nil)
	activeDesc = prometheus.NewDesc("drover_tasks_active",
		"Tasks of the whole store not yet final (Pending, Processing or Compensating), read at each scrape.", nil, nil)
)

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	c.stats.Describe(ch)
	c.recorder.Describe(ch)
	c.queues.Describe(ch)
	ch <- leaderDesc
	ch <- termDesc
	ch <- activeDesc
}

// Collect implements prometheus.Collector. A failed store read reports
// drover_tasks_active as an error, which the handler serves alongside the
// other metrics (promhttp.ContinueOnError) or fails the scrape with.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.stats.Collect(ch)
	c.recorder.Collect(ch)
	term := c.client.SupervisorTerm()
	leader := 0.0
	if term > 0 {
		leader = 1
	}
	ch <- prometheus.MustNewConstMetric(leaderDesc, prometheus.GaugeValue, leader)
	ch <- prometheus.MustNewConstMetric(termDesc, prometheus.GaugeValue, float64(term))
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	c.queues.collect(ctx, ch)
	n, err := c.client.Active(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(activeDesc, err)
		return
	}
	ch <- prometheus.MustNewConstMetric(activeDesc, prometheus.GaugeValue, float64(n))
}
