package metrics

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/clock"
	"github.com/drover-run/drover/store"
)

// MaxQueueSeries caps the session queues a scrape reads: the first ones
// by stored name.
const MaxQueueSeries = 50

// QueueDepthSessions caps the sessions a scrape reads per queue
// (store.QueueDepth); past it the depth counts that many.
const QueueDepthSessions = 1000

var (
	queueLabels       = []string{NamespaceLabel, "queue"}
	queueSessionsDesc = prometheus.NewDesc("drover_queue_sessions_ready",
		"Sessions of a session queue with messages to deliver (not blocked), read at each scrape (at most 1,000 per queue).", queueLabels, nil)
	queueMessagesDesc = prometheus.NewDesc("drover_queue_messages_pending",
		"Pending messages of those sessions, read at each scrape.", queueLabels, nil)
	queueOldestDesc = prometheus.NewDesc("drover_queue_oldest_wait_seconds",
		"How long the longest-waiting deliverable session of a queue has waited for a consumer (its head ready, nobody holding it); 0 when none waits.", queueLabels, nil)
)

// queueCollector reads the session queues' depth and oldest wait at each
// scrape, for the first MaxQueueSeries queues.
type queueCollector struct {
	store store.Driver
	clock clock.Clock
}

func (q *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- queueSessionsDesc
	ch <- queueMessagesDesc
	ch <- queueOldestDesc
}

func (q *queueCollector) collect(ctx context.Context, ch chan<- prometheus.Metric) {
	r := q.store.Reader()
	queues, err := r.QueueList(ctx, &store.QueueListParams{Limit: MaxQueueSeries})
	if err != nil {
		ch <- prometheus.NewInvalidMetric(queueSessionsDesc, err)
		return
	}
	now := q.clock.Now()
	for _, qu := range queues {
		d, err := r.QueueDepth(ctx, &store.QueueDepthParams{Queue: qu.Name, Limit: QueueDepthSessions, Now: now})
		if err != nil {
			ch <- prometheus.NewInvalidMetric(queueSessionsDesc, err)
			return
		}
		ns := dt.NamespaceOf(qu.Name)
		if ns == "" {
			ns = dt.DefaultNamespace
		}
		labels := []string{ns, dt.LocalName(qu.Name)}
		wait := 0.0
		if !d.OldestWaiting.IsZero() && now.After(d.OldestWaiting) {
			wait = now.Sub(d.OldestWaiting).Seconds()
		}
		ch <- prometheus.MustNewConstMetric(queueSessionsDesc, prometheus.GaugeValue, float64(d.Sessions), labels...)
		ch <- prometheus.MustNewConstMetric(queueMessagesDesc, prometheus.GaugeValue, float64(d.Messages), labels...)
		ch <- prometheus.MustNewConstMetric(queueOldestDesc, prometheus.GaugeValue, wait, labels...)
	}
}
