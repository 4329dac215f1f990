package console

import (
	"strings"
	"testing"
	"time"

	"github.com/drover-run/drover"
	dt "github.com/drover-run/drover/drovertype"
)

// The timeline rebuilds each attempt from the history: a timed-out one
// (with the supervisor's later alert text), a retry that failed, its
// compensation, and one still running with its stored deadline.
func TestBuildTimeline(t *testing.T) {
	t0 := time.Date(2026, 5, 2, 14, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	deadline := at(40)
	task := &drover.Task{ID: "o-1", Steps: []dt.StepRecord{
		{Index: 0, Name: "charge", Timeout: 10 * time.Second, Attempt: 2},
		{Index: 1, Name: "ship", Timeout: 30 * time.Second, Attempt: 2, CompleteBy: &deadline},
	}}
	ev := func(s, step int, typ dt.EventType, attempt int, actor, msg string) *drover.Event {
		return &drover.Event{StepIndex: step, Type: typ, Attempt: attempt, Actor: actor, Message: msg, CreatedAt: at(s)}
	}
	evs := []*drover.Event{
		ev(0, -1, dt.EventSubmitted, 0, "api", ""),
		ev(1, 0, dt.EventStepStarted, 1, "sched-a", ""),
		ev(11, 0, dt.EventStepTimedOut, 1, "sup", "CompleteBy passed; FailureCount 1 of 3"),
		ev(12, 0, dt.EventStepStarted, 2, "sched-b", ""),
		ev(13, 0, dt.EventStepProcessed, 2, "sched-b", ""),
		ev(14, 1, dt.EventStepStarted, 1, "sched-b", ""),
		ev(15, 1, dt.EventStepFailed, 1, "sched-b", "permanent error: no address"),
		ev(15, -1, dt.EventCompensating, 0, "sched-b", ""),
		ev(16, 0, dt.EventCompensating, 1, "sched-b", ""),
		ev(17, 0, dt.EventStepCompensated, 1, "sched-b", ""),
		ev(18, 1, dt.EventStepStarted, 2, "sched-c", ""),
	}
	tl := buildTimeline(task, evs, false, at(20))
	if tl == nil {
		t.Fatal("no timeline")
	}
	var got []string
	for _, a := range tl.Attempts {
		got = append(got, a.Label()+" "+a.Holder+" "+a.Outcome+" "+when(a.End)+" deadline "+when(a.Deadline)+" "+a.Error)
	}
	want := []string{
		"0 charge #1 sched-a timed out 2026-05-02 14:00:11Z deadline 2026-05-02 14:00:11Z CompleteBy passed; FailureCount 1 of 3",
		"0 charge #2 sched-b processed 2026-05-02 14:00:13Z deadline 2026-05-02 14:00:22Z ",
		"1 ship #1 sched-b failed 2026-05-02 14:00:15Z deadline 2026-05-02 14:00:44Z permanent error: no address",
		"0 charge #1 undo sched-b compensated 2026-05-02 14:00:17Z deadline 2026-05-02 14:00:26Z ",
		"1 ship #2 sched-c running - deadline 2026-05-02 14:00:40Z ",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("attempts:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// The axis runs from the first start to the last deadline.
	if !tl.From.Equal(at(1)) || !tl.To.Equal(at(44)) {
		t.Errorf("axis %s to %s", tl.From, tl.To)
	}
	if a := tl.Attempts[0]; a.X != tlLabelW || a.DX <= a.X {
		t.Errorf("first attempt at x=%v, deadline x=%v", a.X, a.DX)
	}
	if buildTimeline(task, evs[:1], false, at(1)) != nil {
		t.Error("a timeline before the first dispatch")
	}
}
