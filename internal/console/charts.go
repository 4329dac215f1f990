package console

import (
	"fmt"
	"slices"
	"time"

	"github.com/drover-run/drover"
	dt "github.com/drover-run/drover/drovertype"
)

// chartTasks caps the final tasks the overview's charts read: the read
// is one range of the index of final tasks by time, newest first, so a
// page costs at most this many rows whatever the store holds.
const chartTasks = 10000

// chartMinutes is the charts' window: a bar per minute.
const chartMinutes = 60

// Chart geometry (SVG user units).
const (
	chartW, chartH     = 720.0, 150.0
	chartLeft          = 48.0 // room for the axis labels
	chartTop, chartBot = 8.0, 20.0
)

// minute is one minute of the charts.
type minute struct {
	Start            time.Time
	Processed, Other int             // tasks that finished in it: Processed, and Error, Compensated or Cancelled
	P50, P99         time.Duration   // latency of its Processed tasks (0: none)
	lat              []time.Duration // submit to Processed
	// Picture coordinates.
	X, YOK, HOK, YBad, HBad, Y50, Y99 float64
}

// charts are the overview's throughput and latency of the last hour.
type charts struct {
	Minutes []*minute
	// Since is where the data begin: the window's start, or later when
	// the read stopped at chartTasks (Capped).
	Since, Until     time.Time
	Capped           bool
	Read             int // final tasks read
	Processed, Other int
	P50, P99         time.Duration // over every Processed task read
	MaxPerMin        int
	MaxLatency       time.Duration
	W, H, Left, Top  float64
	PlotW, PlotH     float64
	BarW             float64
	Line50, Line99   string // SVG polyline points
	Ticks            []tick
	YTicksN, YTicksL []yTick
}

// yTick is a label on a chart's vertical axis.
type yTick struct {
	Y     float64
	Label string
}

// buildCharts buckets the final tasks read (newest first, at most
// chartTasks) into the minutes of the hour before now.
func buildCharts(fs []drover.FinishedTask, now time.Time) *charts {
	end := now.UTC().Truncate(time.Minute).Add(time.Minute)
	c := &charts{Until: now.UTC(), Since: end.Add(-chartMinutes * time.Minute), Read: len(fs), Capped: len(fs) >= chartTasks,
		W: chartW, H: chartH, Left: chartLeft, Top: chartTop, PlotW: chartW - chartLeft - 8, PlotH: chartH - chartTop - chartBot}
	if c.Capped {
		// The minute of the oldest task read may be partial: start after it.
		c.Since = fs[len(fs)-1].UpdatedAt.UTC().Truncate(time.Minute).Add(time.Minute)
	}
	c.BarW = c.PlotW / chartMinutes
	for i := range chartMinutes {
		c.Minutes = append(c.Minutes, &minute{Start: end.Add(time.Duration(i-chartMinutes) * time.Minute)})
	}
	var all []time.Duration
	for _, f := range fs {
		i := int(f.UpdatedAt.Sub(end.Add(-chartMinutes*time.Minute)) / time.Minute)
		if i < 0 || i >= chartMinutes || f.UpdatedAt.Before(c.Since) {
			continue
		}
		m := c.Minutes[i]
		if f.State == dt.Processed {
			m.Processed++
			m.lat = append(m.lat, f.UpdatedAt.Sub(f.CreatedAt))
		} else {
			m.Other++
		}
	}
	for _, m := range c.Minutes {
		c.Processed += m.Processed
		c.Other += m.Other
		c.MaxPerMin = max(c.MaxPerMin, m.Processed+m.Other)
		all = append(all, m.lat...)
		m.P50, m.P99 = percentile(m.lat, 50), percentile(m.lat, 99)
		c.MaxLatency = max(c.MaxLatency, m.P99)
		m.lat = nil
	}
	c.P50, c.P99 = percentile(all, 50), percentile(all, 99)
	c.layout()
	return c
}

// percentile is the nearest-rank p-th percentile of ds (sorted in place;
// 0 when empty).
func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	rank := (p*len(ds) + 99) / 100 // ceil(p/100 * n)
	return ds[max(rank, 1)-1]
}

func (c *charts) layout() {
	base := c.Top + c.PlotH
	perMin := float64(max(c.MaxPerMin, 1))
	maxLat := float64(max(c.MaxLatency, time.Millisecond))
	var l50, l99 []byte
	for i, m := range c.Minutes {
		m.X = c.Left + float64(i)*c.BarW
		m.HOK = float64(m.Processed) / perMin * c.PlotH
		m.HBad = float64(m.Other) / perMin * c.PlotH
		m.YOK = base - m.HOK
		m.YBad = m.YOK - m.HBad
		if m.P99 > 0 {
			m.Y50 = base - float64(m.P50)/maxLat*c.PlotH
			m.Y99 = base - float64(m.P99)/maxLat*c.PlotH
			x := m.X + c.BarW/2
			l50 = fmt.Appendf(l50, "%.1f,%.1f ", x, m.Y50)
			l99 = fmt.Appendf(l99, "%.1f,%.1f ", x, m.Y99)
		}
		if i%10 == 0 {
			c.Ticks = append(c.Ticks, tick{X: m.X, Label: m.Start.Format("15:04")})
		}
	}
	c.Line50, c.Line99 = string(l50), string(l99)
	for _, f := range []float64{0, .5, 1} {
		y := base - f*c.PlotH
		c.YTicksN = append(c.YTicksN, yTick{Y: y, Label: fmt.Sprint(int(f * perMin))})
		c.YTicksL = append(c.YTicksL, yTick{Y: y, Label: roundDur(time.Duration(f * maxLat))})
	}
}

// roundDur shows a latency to a sensible precision.
func roundDur(d time.Duration) string {
	switch {
	case d == 0:
		return "0"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// Finished is how many tasks the charts count.
func (c *charts) Finished() int { return c.Processed + c.Other }
