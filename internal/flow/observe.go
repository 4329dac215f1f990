package flow

import (
	"time"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/instrument"
	"github.com/drover-run/drover/store"
)

// observe adds to t what batch b does, read from its events, for the
// Recorder of c; nothing without one.
func (t *tally) observe(c *Counters, b *batch, now time.Time) {
	if c == nil || c.Recorder == nil || len(b.events) == 0 {
		return
	}
	tasks, steps := b.written()
	for i, e := range b.events {
		task := tasks[e.TaskID]
		if task == nil {
			continue
		}
		o := instrument.Observation{Namespace: dt.NamespaceOf(task.ID), Workflow: task.Workflow}
		s := steps[store.StepRef{TaskID: e.TaskID, Index: e.StepIndex}]
		if s != nil {
			o.Step = s.Name
		}
		switch e.Type {
		case dt.EventProcessed, dt.EventCompensated, dt.EventError:
			if e.StepIndex < 0 && task.ProcessState.Final() {
				o.Kind, o.State, o.Duration = instrument.TaskFinished, string(task.ProcessState), now.Sub(task.CreatedAt)
				t.obs = append(t.obs, o)
			}
		case dt.EventStepProcessed:
			t.stepFinished(o, s, "processed", now)
		case dt.EventStepFailed:
			if s != nil && s.CompensationState == dt.Error {
				o.Kind, o.State = instrument.Compensated, "failed"
				t.obs = append(t.obs, o)
			} else {
				t.stepFinished(o, s, "failed", now)
			}
		case dt.EventStepCompensated:
			o.Kind, o.State = instrument.Compensated, "compensated"
			t.obs = append(t.obs, o)
		case dt.EventStepRetry:
			o.Kind = instrument.StepRetried
			t.obs = append(t.obs, o)
		case dt.EventStepTimedOut:
			o.Kind, o.State = instrument.Recovered, recoveryAction(b.events[i+1:], e.TaskID)
			t.obs = append(t.obs, o)
			// Ended in Error: the step (or its compensation) failed for
			// good with no step_failed event.
			switch {
			case o.State != "error" || s == nil:
			case s.CompensationState == dt.Error:
				o.Kind, o.State = instrument.Compensated, "failed"
				t.obs = append(t.obs, o)
			case s.ProcessState == dt.Error:
				t.stepFinished(o, s, "failed", now)
			}
		}
		if e.Alert {
			o.Kind, o.State = instrument.Alert, string(e.Type)
			t.obs = append(t.obs, o)
		}
	}
}

// stepFinished adds the end of step s, as outcome.
func (t *tally) stepFinished(o instrument.Observation, s *dt.StepRecord, outcome string, now time.Time) {
	if s == nil || s.StartedAt == nil {
		return
	}
	o.Kind, o.State, o.Duration = instrument.StepFinished, outcome, now.Sub(*s.StartedAt)
	t.obs = append(t.obs, o)
}

// recoveryAction is what the supervisor did with a timed-out step of task
// id, from the events that follow the step_timed_out one.
func recoveryAction(next []*dt.Event, id string) string {
	for _, e := range next {
		if e.TaskID != id {
			continue
		}
		switch e.Type {
		case dt.EventStepRetry:
			return "retry"
		case dt.EventStepWaiting:
			return "wait"
		case dt.EventCompensating, dt.EventStepFailed:
			return "compensate"
		case dt.EventError:
			return "error"
		}
	}
	return "retry"
}

// written indexes the tasks and steps the batch writes, by ID and by
// step, for reading its events.
func (b *batch) written() (map[string]*dt.Task, map[store.StepRef]*dt.StepRecord) {
	tasks := make(map[string]*dt.Task, len(b.tasks))
	for _, t := range b.tasks {
		tasks[t.ID] = t
	}
	steps := make(map[store.StepRef]*dt.StepRecord, len(b.steps))
	for _, s := range b.steps {
		steps[store.StepRef{TaskID: s.TaskID, Index: s.Index}] = s
	}
	return tasks, steps
}
