package console

import (
	"testing"
	"time"

	"github.com/drover-run/drover"
	dt "github.com/drover-run/drover/drovertype"
)

// The charts bucket final tasks by the minute they finished in, take the
// percentiles of Processed tasks only, and, when the read was capped,
// start after the oldest task's minute.
func TestBuildCharts(t *testing.T) {
	now := time.Date(2026, 5, 2, 14, 30, 20, 0, time.UTC)
	fin := func(s dt.ProcessState, ago, took time.Duration) drover.FinishedTask {
		return drover.FinishedTask{State: s, UpdatedAt: now.Add(-ago), CreatedAt: now.Add(-ago - took)}
	}
	var fs []drover.FinishedTask
	for i := 1; i <= 100; i++ { // this minute: 100 processed, 1ms to 100ms
		fs = append(fs, fin(dt.Processed, time.Second, time.Duration(i)*time.Millisecond))
	}
	fs = append(fs, fin(dt.Error, 10*time.Second, time.Second), fin(dt.Processed, 30*time.Minute, 2*time.Second),
		fin(dt.Processed, 2*time.Hour, time.Hour)) // outside the hour
	c := buildCharts(fs, now)
	if len(c.Minutes) != chartMinutes || !c.Minutes[59].Start.Equal(now.Truncate(time.Minute)) || !c.Since.Equal(now.Truncate(time.Minute).Add(-59*time.Minute)) {
		t.Fatalf("minutes: %d, last %v, since %v", len(c.Minutes), c.Minutes[59].Start, c.Since)
	}
	last := c.Minutes[59]
	if last.Processed != 100 || last.Other != 1 || last.P50 != 50*time.Millisecond || last.P99 != 99*time.Millisecond {
		t.Errorf("this minute: %+v", last)
	}
	if m := c.Minutes[29]; m.Processed != 1 || m.P50 != 2*time.Second {
		t.Errorf("30 minutes ago (14:00): %+v", m)
	}
	if c.Processed != 101 || c.Other != 1 || c.MaxPerMin != 101 || c.MaxLatency != 2*time.Second || c.Capped {
		t.Errorf("totals: %d processed, %d other, max %d/min, max p99 %v, capped %v", c.Processed, c.Other, c.MaxPerMin, c.MaxLatency, c.Capped)
	}
	if c.P50 != 51*time.Millisecond || c.P99 != 100*time.Millisecond {
		t.Errorf("p50 %v, p99 %v over the hour", c.P50, c.P99)
	}
	if last.YOK >= c.Top+c.PlotH || last.YBad >= last.YOK || c.Line50 == "" {
		t.Errorf("the last bar is not drawn: %+v", last)
	}

	// Capped: the read ended 10 minutes ago, inside 14:20.
	capped := make([]drover.FinishedTask, chartTasks)
	for i := range capped {
		capped[i] = fin(dt.Processed, time.Duration(i)*10*time.Minute/chartTasks, time.Millisecond)
	}
	c = buildCharts(capped, now)
	if !c.Capped || !c.Since.Equal(time.Date(2026, 5, 2, 14, 21, 0, 0, time.UTC)) || c.Minutes[49].Processed != 0 || c.Minutes[50].Processed == 0 {
		t.Errorf("capped: %v since %v, 14:20 %d, 14:21 %d", c.Capped, c.Since, c.Minutes[49].Processed, c.Minutes[50].Processed)
	}
}
