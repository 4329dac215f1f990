package metrics

import (
	"cmp"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/drover-run/drover/drovertype"
)

// NamespaceLabel is the label of the series that belong to one namespace.
const NamespaceLabel = "namespace"

// MaxNamespaceSeries caps the namespaces one NamespaceGauge reports per
// scrape: the ones with the largest values (ties by name), so that
// namespaces named freely by global tokens cannot grow a scrape without
// bound.
const MaxNamespaceSeries = 200

// NamespaceGauge is one gauge per namespace, read from counts once per
// scrape: counts returns the current value of each namespace holding any
// (keyed by stored namespace, "" for the default one, reported as
// drovertype.DefaultNamespace, which is reported 0 when counts has none).
type NamespaceGauge struct {
	Name, Help string
	Counts     func() map[string]int
}

// NewNamespaceCollector returns a Collector of gauges labelled
// "namespace" (for the per-namespace limits of `drover server`), each
// with at most MaxNamespaceSeries series.
func NewNamespaceCollector(gauges ...NamespaceGauge) prometheus.Collector {
	c := &nsCollector{gauges: gauges}
	for _, g := range gauges {
		c.descs = append(c.descs, prometheus.NewDesc(g.Name, g.Help, []string{NamespaceLabel}, nil))
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
	type count struct {
		ns string
		n  int
	}
	for i, g := range c.gauges {
		counts := g.Counts()
		// The default namespace always has a series (0 when it holds
		// none), so the gauge exists before namespaces are in use.
		_, hasDefault := counts[""]
		_, hasDefaultName := counts[drovertype.DefaultNamespace]
		var cs []count
		if !hasDefault && !hasDefaultName {
			cs = append(cs, count{drovertype.DefaultNamespace, 0})
		}
		for ns, n := range counts {
			if ns == "" {
				ns = drovertype.DefaultNamespace
			}
			cs = append(cs, count{ns, n})
		}
		if len(cs) > MaxNamespaceSeries {
			slices.SortFunc(cs, func(a, b count) int { return cmp.Or(cmp.Compare(b.n, a.n), cmp.Compare(a.ns, b.ns)) })
			cs = cs[:MaxNamespaceSeries]
		}
		for _, x := range cs {
			ch <- prometheus.MustNewConstMetric(c.descs[i], prometheus.GaugeValue, float64(x.n), x.ns)
		}
	}
}

// ForNamespace returns the series of g that belong to namespace ns (as
// its tokens name it; drovertype.DefaultNamespace for the default one):
// those labelled NamespaceLabel with ns. Everything else (the server's own
// series, other namespaces') is left out, so a namespace's scraper sees
// its share and nothing of the others'.
func ForNamespace(g prometheus.Gatherer, ns string) prometheus.Gatherer {
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		mfs, err := g.Gather()
		out := mfs[:0]
		for _, mf := range mfs {
			mf.Metric = slices.DeleteFunc(mf.Metric, func(m *dto.Metric) bool { return !hasLabel(m, NamespaceLabel, ns) })
			if len(mf.Metric) > 0 {
				out = append(out, mf)
			}
		}
		return out, err
	})
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue() == value
		}
	}
	return false
}
