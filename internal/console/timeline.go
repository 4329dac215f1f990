package console

import (
	"fmt"
	"strings"
	"time"

	"github.com/drover-run/drover"
	dt "github.com/drover-run/drover/drovertype"
)

// attempt is one dispatch of a step (or of its compensation), rebuilt
// from the event history: who held it, when it started and ended, its
// deadline, its outcome and error text.
type attempt struct {
	Step     int
	Name     string
	Number   int  // the step's attempt (fencing token)
	Undo     bool // a compensation attempt
	Start    time.Time
	End      *time.Time
	Deadline time.Time
	Holder   string
	Outcome  string // "processed", "failed", "timed out", "compensated", "running", "abandoned"
	Error    string
	// Picture coordinates (SVG user units), set by layout.
	X, W, DX, Y float64
}

// Class is the attempt's CSS class on the picture.
func (a *attempt) Class() string { return "tl-" + strings.ReplaceAll(a.Outcome, " ", "-") }

// Label names the attempt's row.
func (a *attempt) Label() string {
	l := fmt.Sprintf("%d %s #%d", a.Step, a.Name, a.Number)
	if a.Undo {
		l += " undo"
	}
	return l
}

// timeline is the picture of a task's attempts.
type timeline struct {
	Attempts   []*attempt
	From, To   time.Time
	Width      float64
	Height     float64
	LabelW     float64
	Ticks      []tick
	Incomplete bool // the history shown is cut short
	RowH       float64
	PlotW      float64
}

type tick struct {
	X     float64
	Label string
}

// Geometry of the picture.
const (
	tlWidth  = 1200.0
	tlLabelW = 230.0
	tlRowH   = 26.0
	tlTop    = 22.0
)

// buildTimeline rebuilds every attempt of t from its history evs (ID
// order) and lays them out; nil when no step was ever dispatched.
func buildTimeline(t *drover.Task, evs []*drover.Event, more bool, now time.Time) *timeline {
	type key struct {
		step, n int
		undo    bool
	}
	open := map[key]*attempt{}
	var all []*attempt
	byStep := func(step, n int) *attempt { // the attempt an end event closes
		for _, undo := range []bool{true, false} {
			if a := open[key{step, n, undo}]; a != nil {
				return a
			}
		}
		return nil
	}
	closeAll := func(at time.Time, why string) {
		for k, a := range open {
			end := at
			a.End, a.Outcome, a.Error = &end, "abandoned", why
			delete(open, k)
		}
	}
	for _, e := range evs {
		switch e.Type {
		case dt.EventStepStarted, dt.EventCompensating, dt.EventSignalWaiting:
			if e.StepIndex < 0 {
				continue // the task starts compensating: no dispatch yet
			}
			s := stepAt(t, e.StepIndex)
			a := &attempt{Step: e.StepIndex, Number: e.Attempt, Undo: e.Type == dt.EventCompensating, Start: e.CreatedAt, Holder: e.Actor, Outcome: "running"}
			if e.Type == dt.EventSignalWaiting {
				a.Holder = dt.SignalHolder // a wait: no scheduler holds it
			}
			if s != nil {
				a.Name = s.Name
				a.Deadline = e.CreatedAt.Add(s.Timeout)
				if s.Attempt == e.Attempt && s.CompleteBy != nil {
					a.Deadline = *s.CompleteBy
				}
			}
			if old := open[key{a.Step, a.Number, a.Undo}]; old != nil {
				old.End, old.Outcome = &a.Start, "abandoned"
			}
			open[key{a.Step, a.Number, a.Undo}] = a
			all = append(all, a)
		case dt.EventStepProcessed, dt.EventStepCompensated, dt.EventStepFailed, dt.EventStepTimedOut:
			a := byStep(e.StepIndex, e.Attempt)
			if a == nil {
				// Already ended (a supervisor's alert after a timeout):
				// its text adds to that attempt's.
				for i := len(all) - 1; i >= 0; i-- {
					if p := all[i]; p.Step == e.StepIndex && (e.Attempt == 0 || p.Number == e.Attempt) {
						if e.Message != "" && !strings.Contains(p.Error, e.Message) {
							p.Error = strings.TrimPrefix(p.Error+"; "+e.Message, "; ")
						}
						break
					}
				}
				continue
			}
			end := e.CreatedAt
			a.End, a.Error = &end, e.Message
			a.Outcome = map[dt.EventType]string{dt.EventStepProcessed: "processed", dt.EventStepCompensated: "compensated",
				dt.EventStepFailed: "failed", dt.EventStepTimedOut: "timed out"}[e.Type]
			delete(open, key{a.Step, a.Number, a.Undo})
		case dt.EventCancelled:
			closeAll(e.CreatedAt, "the task was cancelled: its reply is discarded")
		case dt.EventResubmitted:
			closeAll(e.CreatedAt, "the task was resubmitted")
		}
	}
	if len(all) == 0 {
		return nil
	}
	tl := &timeline{Attempts: all, Incomplete: more, Width: tlWidth, LabelW: tlLabelW, RowH: tlRowH}
	tl.layout(now)
	return tl
}

// layout places the attempts on a common time axis: from the first start
// to the last end or deadline (now for a running attempt).
func (tl *timeline) layout(now time.Time) {
	tl.From, tl.To = tl.Attempts[0].Start, tl.Attempts[0].Start
	for _, a := range tl.Attempts {
		end := now
		if a.End != nil {
			end = *a.End
		}
		for _, x := range []time.Time{a.Start, end, a.Deadline} {
			if x.IsZero() {
				continue
			}
			if x.Before(tl.From) {
				tl.From = x
			}
			if x.After(tl.To) {
				tl.To = x
			}
		}
	}
	span := tl.To.Sub(tl.From)
	if span <= 0 {
		span = time.Millisecond
	}
	tl.PlotW = tl.Width - tl.LabelW - 40 // room for the last tick's label
	x := func(at time.Time) float64 { return tl.LabelW + float64(at.Sub(tl.From))/float64(span)*tl.PlotW }
	for i, a := range tl.Attempts {
		end := now
		if a.End != nil {
			end = *a.End
		}
		a.X = x(a.Start)
		a.W = max(x(end)-a.X, 3)
		a.DX = x(a.Deadline)
		if a.Deadline.IsZero() {
			a.DX = 0
		}
		a.Y = tlTop + float64(i)*tl.RowH
	}
	tl.Height = tlTop + float64(len(tl.Attempts))*tl.RowH + 8
	for i := range 5 {
		at := tl.From.Add(span * time.Duration(i) / 4)
		tl.Ticks = append(tl.Ticks, tick{X: x(at), Label: "+" + at.Sub(tl.From).Round(tickRound(span)).String()})
	}
}

// tickRound is the precision of the axis' labels for a span.
func tickRound(span time.Duration) time.Duration {
	switch {
	case span >= time.Minute:
		return time.Second
	case span >= 2*time.Second:
		return 100 * time.Millisecond
	}
	return time.Millisecond
}
