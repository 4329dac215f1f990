package flow

import (
	"fmt"
	"strings"
	"testing"

	dt "github.com/drover-run/drover/drovertype"
)

// afterTheirTasks places each started task's events right after its own,
// keeping every task's events in order (a parallel group starts several
// steps), and puts those of a task with no event first at the end.
func TestAfterTheirTasks(t *testing.T) {
	ev := func(task string, typ dt.EventType, step int) *dt.Event {
		return &dt.Event{TaskID: task, Type: typ, StepIndex: step}
	}
	show := func(evs []*dt.Event) string {
		var parts []string
		for _, e := range evs {
			parts = append(parts, fmt.Sprintf("%s:%s%d", e.TaskID, e.Type, e.StepIndex))
		}
		return strings.Join(parts, " ")
	}
	submitted := []*dt.Event{ev("a", dt.EventSubmitted, -1), ev("b", dt.EventSubmitted, -1), ev("c", dt.EventSubmitted, -1)}
	started := []*dt.Event{
		ev("a", dt.EventStepStarted, 0), ev("c", dt.EventStepStarted, 0), ev("c", dt.EventStepStarted, 1), // c: a group
		ev("x", dt.EventStepStarted, 0), // no submitted event of its own
	}
	got := show(afterTheirTasks(submitted, started))
	want := "a:submitted-1 a:step_started0 b:submitted-1 c:submitted-1 c:step_started0 c:step_started1 x:step_started0"
	if got != want {
		t.Errorf("afterTheirTasks =\n  %s\nwant\n  %s", got, want)
	}
	if got := show(afterTheirTasks(submitted, nil)); got != show(submitted) {
		t.Errorf("afterTheirTasks with nothing started = %s", got)
	}
}
