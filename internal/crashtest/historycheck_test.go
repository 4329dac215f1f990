package crashtest

import (
	"strings"
	"testing"

	"github.com/drover-run/drover"
)

// The history checks of the PostgreSQL crash test must accept a correct
// history and catch each kind of violation; otherwise a passing crash test
// proves nothing.

type evb struct{ evs []*drover.Event }

func (b *evb) add(task string, step int, typ drover.EventType, actor string, term int64, attempt int) *evb {
	b.evs = append(b.evs, &drover.Event{ID: int64(len(b.evs) + 1), TaskID: task, StepIndex: step, Type: typ,
		Actor: actor, Term: term, Attempt: attempt})
	return b
}

const (
	sA = "node-0/scheduler-0"
	sB = "node-1/scheduler-1"
	v0 = "node-0/supervisor"
	v1 = "node-1/supervisor"
)

// goodHistory: A runs step 0; step 1 hangs at A and the supervisor (node-0,
// term 1) resets it; B takes over; step 2 fails for good at B, which
// compensates steps 1 and 0; a later timeout is handled by the next leader.
func goodHistory() *evb {
	b := &evb{}
	b.add("t1", -1, drover.EventSubmitted, "", 0, 0).
		add("t1", 0, drover.EventStepStarted, sA, 0, 1).
		add("t1", 0, drover.EventStepProcessed, sA, 0, 1).
		add("t1", 1, drover.EventStepStarted, sA, 0, 1).
		add("t1", 1, drover.EventStepTimedOut, v0, 1, 1).
		add("t1", 1, drover.EventStepRetry, v0, 1, 1).
		add("t1", 1, drover.EventReplyDiscarded, sA, 0, 1).
		add("t1", 1, drover.EventStepStarted, sB, 0, 2).
		add("t1", 1, drover.EventStepProcessed, sB, 0, 2).
		add("t1", 2, drover.EventStepStarted, sB, 0, 1).
		add("t1", 2, drover.EventStepFailed, sB, 0, 1).
		add("t1", -1, drover.EventCompensating, sB, 0, 0).
		add("t1", 1, drover.EventCompensating, sB, 0, 3).
		add("t1", 1, drover.EventStepCompensated, sB, 0, 3).
		add("t1", 0, drover.EventCompensating, sB, 0, 2).
		add("t1", 0, drover.EventStepCompensated, sB, 0, 2).
		add("t1", -1, drover.EventCompensated, sB, 0, 0).
		add("t2", 0, drover.EventStepStarted, sA, 0, 1).
		add("t2", 0, drover.EventStepTimedOut, v1, 2, 1).
		add("t2", 0, drover.EventStepFailed, v1, 2, 0).
		add("t2", -1, drover.EventCompensating, v1, 2, 0).
		add("t2", -1, drover.EventCompensated, sB, 0, 0)
	return b
}

func TestHistoryChecksAcceptCorrectHistory(t *testing.T) {
	evs := goodHistory().evs
	if vs := stepHolderViolations(evs); len(vs) != 0 {
		t.Errorf("step-holder check rejects a correct history: %v", vs)
	}
	vs, pairs, actions := supervisorTermViolations(evs)
	if len(vs) != 0 {
		t.Errorf("term check rejects a correct history: %v", vs)
	}
	if strings.Join(pairs, " ") != v0+"@1 "+v1+"@2" || actions != 5 {
		t.Errorf("leaders %v over %d actions, want %s@1 %s@2 over 5", pairs, actions, v0, v1)
	}
}

func TestHistoryChecksCatchViolations(t *testing.T) {
	steps := []struct {
		name string
		b    *evb
		want string
	}{
		{"second holder without reset", (&evb{}).
			add("t", 0, drover.EventStepStarted, sA, 0, 1).
			add("t", 0, drover.EventStepStarted, sB, 0, 2), "without a reset"},
		{"attempt in flight", (&evb{}).
			add("t", 0, drover.EventStepStarted, sA, 0, 1).
			add("t", 0, drover.EventStepStarted, sA, 0, 2), "two attempts in flight"},
		{"attempt skipped", (&evb{}).
			add("t", 0, drover.EventStepStarted, sA, 0, 1).
			add("t", 0, drover.EventStepTimedOut, v0, 1, 1).
			add("t", 0, drover.EventStepStarted, sB, 0, 3), "lost fence"},
		{"same attempt twice", (&evb{}).
			add("t", 0, drover.EventStepStarted, sA, 0, 1).
			add("t", 0, drover.EventStepTimedOut, v0, 1, 1).
			add("t", 0, drover.EventStepStarted, sB, 0, 1), "lost fence"},
		{"stale reply applied", (&evb{}).
			add("t", 0, drover.EventStepStarted, sA, 0, 1).
			add("t", 0, drover.EventStepTimedOut, v0, 1, 1).
			add("t", 0, drover.EventStepStarted, sB, 0, 2).
			add("t", 0, drover.EventStepProcessed, sA, 0, 1), "stale reply"},
		{"reply applied by another scheduler", (&evb{}).
			add("t", 0, drover.EventStepStarted, sA, 0, 1).
			add("t", 0, drover.EventStepProcessed, sB, 0, 1), "but " + sA + " started"},
		{"compensation while the step is in flight", (&evb{}).
			add("t", 0, drover.EventStepStarted, sA, 0, 1).
			add("t", 0, drover.EventCompensating, sB, 0, 2), "two attempts in flight"},
		{"timeout without term", (&evb{}).
			add("t", 0, drover.EventStepStarted, sA, 0, 1).
			add("t", 0, drover.EventStepTimedOut, v0, 0, 1), "without a supervisor term"},
	}
	for _, c := range steps {
		vs := stepHolderViolations(c.b.evs)
		if !strings.Contains(strings.Join(vs, "\n"), c.want) {
			t.Errorf("%s: violations %q, want one mentioning %q", c.name, vs, c.want)
		}
	}

	terms := []struct {
		name string
		b    *evb
		want string
	}{
		{"two leaders in one term", (&evb{}).
			add("t", 0, drover.EventStepTimedOut, v0, 3, 1).
			add("u", 0, drover.EventStepTimedOut, v1, 3, 1), "two leaders"},
		{"deposed leader acts", (&evb{}).
			add("t", 0, drover.EventStepTimedOut, v0, 3, 1).
			add("u", 0, drover.EventStepTimedOut, v1, 4, 1).
			add("w", 0, drover.EventStepTimedOut, v0, 3, 1), "deposed leader"},
		{"term on a scheduler event", (&evb{}).
			add("t", 0, drover.EventStepStarted, sA, 2, 1), "not a supervisor"},
	}
	for _, c := range terms {
		vs, _, _ := supervisorTermViolations(c.b.evs)
		if !strings.Contains(strings.Join(vs, "\n"), c.want) {
			t.Errorf("%s: violations %q, want one mentioning %q", c.name, vs, c.want)
		}
	}
}
