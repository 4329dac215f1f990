package flow

import (
	"bytes"
	"context"
	"fmt"
	"time"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/store"
)

// Signal steps run no agent: the step waits, until its CompleteBy, for a
// named signal (drovertype.Signal) sent from outside. While it waits the
// task and the step are held by drovertype.SignalHolder rather than by a
// scheduler, so the wait takes no scheduler's room and survives every
// process: TaskClaim does not take the task, Restore does not list it, and
// TaskListExpired hands it to the supervisor at CompleteBy. A signal that
// arrives in time (Signal) or is already stored when the step starts
// (Machine.takeSignals) completes the step with its payload as output and
// makes the task claimable, so any scheduler runs the next step. At the
// deadline the supervisor completes the step with its default outcome, or
// fails it: the failure policy applies at once, as to a permanent error
// (Leader.signalTimeout); no retries, no extended waits.

// wait starts signal step s of the held task l: its attempt moves on,
// its deadline is set and the task is let go of to SignalHolder. The tick
// then looks for a stored signal (takeSignals).
func (m *Machine) wait(b *batch, l *loaded, s *dt.StepRecord, now time.Time) {
	t := l.task
	deadline := now.Add(s.Timeout)
	s.Attempt++
	s.ProcessState = dt.Processing
	s.LockedBy = dt.SignalHolder
	s.CompleteBy = &deadline
	if s.StartedAt == nil {
		started := now
		s.StartedAt = &started
	}
	s.UpdatedAt = now
	b.step(s)
	if t.LockedBy == m.Instance {
		b.released++
		m.nsLetGo(t)
	}
	t.LockedBy = dt.SignalHolder
	t.CurrentStep = s.Index
	t.CompleteBy = &deadline
	t.UpdatedAt = now
	b.task(t)
	e := ev(t, s.Index, dt.EventSignalWaiting, m.Instance, now)
	e.Attempt = s.Attempt
	e.Message = fmt.Sprintf("waiting for signal %q until %s", s.Signal, deadline.UTC().Format(time.RFC3339))
	b.event(e)
	b.waits = append(b.waits, l)
}

// takeSignals gives each signal step the batch started a signal stored
// for it before, oldest first, in the batch's transaction: the step
// completes with it and the task becomes claimable.
func (m *Machine) takeSignals(ctx context.Context, x store.Executor, b *batch, now time.Time) error {
	if len(b.waits) == 0 {
		return nil
	}
	takes := make([]store.SignalTake, len(b.waits))
	for i, l := range b.waits {
		s := l.steps[l.task.CurrentStep]
		takes[i] = store.SignalTake{TaskID: l.task.ID, Name: s.Signal, StepIndex: s.Index, Attempt: s.Attempt}
	}
	got, err := x.SignalTake(ctx, &store.SignalTakeParams{Takes: takes, At: now})
	if err != nil {
		return err
	}
	for i, sig := range got {
		if sig != nil {
			deliver(b, b.waits[i], sig, m.Instance, now)
		}
	}
	b.waits = nil
	return nil
}

// deliver completes the waiting signal step of l with sig's payload and
// makes the task claimable, for the next step or its end.
func deliver(b *batch, l *loaded, sig *dt.Signal, actor string, now time.Time) {
	t := l.task
	s := l.steps[t.CurrentStep]
	b.attemptEnds(s, dt.KindDo)
	s.ProcessState = dt.Processed
	s.Output = sig.Payload
	s.LockedBy, s.CompleteBy, s.LastError = "", nil, ""
	completed(l, s, now)
	s.UpdatedAt = now
	b.step(s)
	t.ProcessState = dt.Pending
	t.LockedBy, t.CompleteBy = "", nil
	t.AvailableAt, t.UpdatedAt = now, now
	b.task(t)
	e := ev(t, s.Index, dt.EventStepProcessed, actor, now)
	e.Attempt = s.Attempt
	e.Message = fmt.Sprintf("signal %q (ID %s)", sig.Name, sig.ID)
	b.event(e)
	b.claimable = true
}

// SignalResult is what Signal did.
type SignalResult struct {
	// Signal is the signal as stored (ReceivedAt set); nil for a duplicate.
	Signal *dt.Signal
	// Duplicate: the task already had a signal of this name and ID; nothing
	// changed.
	Duplicate bool
	// Delivered: a step was waiting for it and completed with it; else it
	// is kept for a step that waits for it later.
	Delivered bool
	// Task is the task after the signal.
	Task *dt.Task
}

// Signal stores sig (TaskID, Name, ID, Payload, Sender) for its task and,
// if the task's current step waits for a signal of that name and its
// deadline has not passed, completes the step with it, fenced by the
// task's lock and the step's state. A task that does not exist fails with
// store.ErrNotFound, a final one with ErrAlreadyFinal (the signal is not
// stored: nothing would ever read it).
func Signal(ctx context.Context, x store.Executor, sig *dt.Signal, now time.Time) (SignalResult, error) {
	tasks, steps, err := x.TaskGetManyWithSteps(ctx, &store.TaskGetManyWithStepsParams{IDs: []string{sig.TaskID}})
	if err != nil {
		return SignalResult{}, err
	}
	if len(tasks) == 0 {
		return SignalResult{}, fmt.Errorf("task %q: %w", sig.TaskID, store.ErrNotFound)
	}
	t := tasks[0]
	if t.ProcessState.Final() {
		return SignalResult{Task: t}, fmt.Errorf("task %q is %s, so signal %q was not stored: %w", t.ID, t.ProcessState, sig.Name, ErrAlreadyFinal)
	}
	sig.ReceivedAt = now
	sig.ConsumedAt = nil
	inserted, err := x.SignalInsert(ctx, &store.SignalInsertParams{Signal: sig})
	if err != nil {
		return SignalResult{}, err
	}
	if !inserted {
		return SignalResult{Duplicate: true, Task: t}, nil
	}
	res := SignalResult{Signal: sig, Task: t}
	l := group(tasks, steps)[t.ID]
	b := newBatch()
	actor := sig.Sender
	if actor == "" {
		actor = "signal"
	}
	e := ev(t, -1, dt.EventSignalReceived, actor, now)
	e.Message = fmt.Sprintf("signal %q (ID %s) kept until a step waits for it", sig.Name, sig.ID)
	b.event(e)
	if l.broken() == "" && t.ProcessState == dt.Processing && t.LockedBy == dt.SignalHolder {
		s := l.steps[t.CurrentStep]
		if s.Waiting() && s.Signal == sig.Name && s.CompleteBy != nil && !now.After(*s.CompleteBy) {
			got, err := x.SignalTake(ctx, &store.SignalTakeParams{At: now,
				Takes: []store.SignalTake{{TaskID: t.ID, Name: s.Signal, StepIndex: s.Index, Attempt: s.Attempt}}})
			if err != nil {
				return SignalResult{}, err
			}
			if got[0] != nil {
				e.StepIndex, e.Attempt = s.Index, s.Attempt
				e.Message = fmt.Sprintf("signal %q (ID %s) completed step %d (%s)", sig.Name, sig.ID, s.Index, s.Name)
				deliver(b, l, got[0], actor, now)
				res.Delivered = true
			}
		}
	}
	return res, b.flush(ctx, x)
}

// signalTimeout ends signal step s of l, whose deadline passed with no
// signal: with its default outcome, the step completes and the task is
// claimable again; without one the step fails and the failure policy
// applies (Error with an alert, or compensation). The missed deadline
// counts once in FailureCount; a wait is never tried again by itself.
func (sv *Leader) signalTimeout(b *batch, l *loaded, s *dt.StepRecord, now time.Time) {
	t := l.task
	b.attemptEnds(s, dt.KindDo)
	s.LockedBy, s.CompleteBy, s.UpdatedAt = "", nil, now
	s.FailureCount++
	t.FailureCount++
	finished := now
	s.FinishedAt = &finished
	b.step(s)
	e := sv.event(b, t, s.Index, dt.EventStepTimedOut, now)
	e.Attempt = s.Attempt
	if s.SignalDefault != nil {
		e.Message = fmt.Sprintf("no signal %q by the deadline; the step completes with its default outcome", s.Signal)
		s.ProcessState, s.Output, s.LastError = dt.Processed, bytes.Clone(s.SignalDefault), ""
		completed(l, s, now)
		t.ProcessState, t.AvailableAt = dt.Pending, now
		b.claimable = true
		sv.event(b, t, s.Index, dt.EventStepProcessed, now).Attempt = s.Attempt
		return
	}
	reason := fmt.Sprintf("step %d (%s): no signal %q by the deadline", s.Index, s.Name, s.Signal)
	e.Message = reason
	s.ProcessState, s.LastError = dt.Error, reason
	t.LastError = reason
	alert := func(typ dt.EventType, step int, msg string) {
		a := sv.event(b, t, step, typ, now)
		a.Alert, a.Message, a.Attempt = true, msg, s.Attempt
		sv.pending.alerts++
	}
	if policy, _ := t.PolicyOf(s); policy == dt.PolicyCompensate {
		t.ProcessState = dt.Compensating
		alert(dt.EventStepFailed, s.Index, reason+"; compensating")
		sv.event(b, t, -1, dt.EventCompensating, now)
		return
	}
	t.ProcessState = dt.Error
	alert(dt.EventError, -1, reason)
	sv.pending.finished++
}
