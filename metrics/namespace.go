package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/drover-run/drover/drovertype"
)

// NamespaceGauge is one gauge per namespace, read from counts once per
// scrape: counts returns the current value of each namespace holding any
// (keyed by stored namespace, "" for the default one, reported as
// drovertype.DefaultNamespace).
type NamespaceGauge struct {
	Name, Help string
	Counts     func() map[string]int
}

// NewNamespaceCollector returns a Collector of gauges labelled
// "namespace" (for the per-namespace limits of `drover server`).
func NewNamespaceCollector(gauges ...NamespaceGauge) prometheus.Collector {
	c := &nsCollector{gauges: gauges}
	for _, g := range gauges {
		c.descs = append(c.descs, prometheus.NewDesc(g.Name, g.Help, []string{"namespace"}, nil))
	}
	return c
}

type nsCollector struct {
	gauges []NamespaceGauge
	descs  []*prometheus.Desc
}

func (c *nsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c *nsCollector) Collect(ch chan<- prometheus.Metric) {
	for i, g := range c.gauges {
		for ns, n := range g.Counts() {
			if ns == "" {
				ns = drovertype.DefaultNamespace
			}
			ch <- prometheus.MustNewConstMetric(c.descs[i], prometheus.GaugeValue, float64(n), ns)
		}
	}
}
