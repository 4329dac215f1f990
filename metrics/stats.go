package metrics

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Field is one int64 field of a stats snapshot S as a metric.
type Field[S any] struct {
	Name, Help string
	Type       prometheus.ValueType // CounterValue or GaugeValue
	Value      func(S) int64
}

// NewStatsCollector returns a Collector that reads stats once per scrape
// and reports each field of the snapshot.
func NewStatsCollector[S any](stats func() S, fields ...Field[S]) prometheus.Collector {
	c := &statsCollector[S]{stats: stats, fields: fields}
	for _, f := range fields {
		c.descs = append(c.descs, prometheus.NewDesc(f.Name, f.Help, nil, nil))
	}
	return c
}

type statsCollector[S any] struct {
	stats  func() S
	fields []Field[S]
	descs  []*prometheus.Desc
}

func (c *statsCollector[S]) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c *statsCollector[S]) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	for i, f := range c.fields {
		ch <- prometheus.MustNewConstMetric(c.descs[i], f.Type, float64(f.Value(s)))
	}
}

// MaxScrapes is how many scrapes Handler serves at once; more get 503,
// since each reads the store.
const MaxScrapes = 2

// Handler serves g in Prometheus's formats. A metric that fails (a store
// read) is logged to log and left out; the others are still served. A
// positive timeout answers 503 to a scrape that takes longer.
func Handler(g prometheus.Gatherer, log *slog.Logger, timeout time.Duration) http.Handler {
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{
		ErrorHandling:       promhttp.ContinueOnError,
		ErrorLog:            slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		MaxRequestsInFlight: MaxScrapes,
		Timeout:             timeout,
	})
}
