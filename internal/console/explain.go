package console

import (
	"fmt"
	"strings"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/convoy"
	dt "github.com/drover-run/drover/drovertype"
)

// explain is the sentence at the top of a task's page: where the task is
// and why, from its state, its steps, its last error and its history's
// alerts.
func explain(t *drover.Task, evs []*drover.Event) string {
	var b strings.Builder
	cur := stepAt(t, t.CurrentStep)
	switch t.ProcessState {
	case dt.Pending:
		switch {
		case cur == nil:
			b.WriteString("Waiting for a scheduler.")
		case cur.FailureCount > 0:
			fmt.Fprintf(&b, "Waiting to retry step %d %s (it failed %d time%s", cur.Index, quote(cur.Name), cur.FailureCount, plural(cur.FailureCount))
			if cur.LastError != "" {
				fmt.Fprintf(&b, ": %s", cur.LastError)
			}
			b.WriteString(")")
			if t.AvailableAt.After(t.UpdatedAt) {
				fmt.Fprintf(&b, ", not before %s", when(t.AvailableAt))
			}
			b.WriteString(".")
		case t.AvailableAt.After(t.UpdatedAt) && cur.Attempt == 0 && cur.Index == 0:
			fmt.Fprintf(&b, "Scheduled: starts at %s (delayed when submitted); cancel it to keep it from running.", when(t.AvailableAt))
		default:
			fmt.Fprintf(&b, "Waiting for a scheduler to start step %d %s.", cur.Index, quote(cur.Name))
		}
	case dt.Processing:
		if cur != nil && cur.Waiting() {
			then := "then it fails and the failure policy applies"
			if cur.SignalDefault != nil {
				then = "then it completes with its default outcome"
			}
			fmt.Fprintf(&b, "Waiting for signal %s until %s (step %d %s); %s.", quote(cur.Signal), when(cur.CompleteBy), cur.Index, quote(cur.Name), then)
		} else if cur != nil && cur.Group != "" {
			branches(&b, t, cur.Group)
		} else if cur != nil {
			fmt.Fprintf(&b, "Step %d %s is running (attempt %d", cur.Index, quote(cur.Name), cur.Attempt)
			if cur.LockedBy != "" {
				fmt.Fprintf(&b, ", held by %s", cur.LockedBy)
			}
			if cur.CompleteBy != nil {
				fmt.Fprintf(&b, ", deadline %s", when(cur.CompleteBy))
			}
			b.WriteString(").")
		} else {
			b.WriteString("Running.")
		}
	case dt.Processed:
		fmt.Fprintf(&b, "Done: all %d steps completed, the last at %s.", t.StepCount, when(t.UpdatedAt))
	case dt.Error:
		if s := failedStep(t); s != nil {
			fmt.Fprintf(&b, "Step %d %s failed", s.Index, quote(s.Name))
			if s.FinishedAt != nil {
				fmt.Fprintf(&b, " at %s", when(s.FinishedAt))
			}
			fmt.Fprintf(&b, ": %s.", firstOf(s.LastError, t.LastError, "no error recorded"))
		} else {
			fmt.Fprintf(&b, "Failed: %s.", firstOf(t.LastError, "no error recorded"))
		}
		b.WriteString(" It waits for an operator: fix the cause, then resubmit.")
	case dt.Compensating:
		fmt.Fprintf(&b, "Undoing the completed steps")
		if s := failedStep(t); s != nil {
			fmt.Fprintf(&b, " after step %d %s failed: %s", s.Index, quote(s.Name), firstOf(s.LastError, t.LastError, "no error recorded"))
		}
		b.WriteString(".")
	case dt.Compensated:
		fmt.Fprintf(&b, "Failed and compensated: %s; the completed steps were undone.", firstOf(t.LastError, "no error recorded"))
	case dt.Cancelled:
		fmt.Fprintf(&b, "Cancelled at %s", when(t.UpdatedAt))
		if t.LastError != "" {
			fmt.Fprintf(&b, ": %s", t.LastError)
		}
		b.WriteString(".")
	default:
		fmt.Fprintf(&b, "In state %s.", t.ProcessState)
	}
	if n := alertCount(evs); n > 0 {
		fmt.Fprintf(&b, " %d alert%s raised (see the history and Alerts).", n, plural(n))
	}
	return b.String()
}

// failedStep is the step in Error, else the current step (nil if none).
func failedStep(t *drover.Task) *dt.StepRecord {
	for i := range t.Steps {
		if s := &t.Steps[i]; s.ProcessState == dt.Error {
			return s
		}
	}
	return stepAt(t, t.CurrentStep)
}

func stepAt(t *drover.Task, i int) *dt.StepRecord {
	for k := range t.Steps {
		if t.Steps[k].Index == i {
			return &t.Steps[k]
		}
	}
	return nil
}

func alertCount(evs []*drover.Event) int {
	n := 0
	for _, e := range evs {
		if e.Alert {
			n++
		}
	}
	return n
}

func quote(s string) string { return "“" + s + "”" }

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func firstOf(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

// sessionStory is the sentence at the top of a session's page: whether it
// is blocked and by which message, held, or idle. msgs are its first
// messages (Peek from the head).
func sessionStory(s *convoy.Session, msgs []*convoy.StoredMessage) string {
	var b strings.Builder
	var dead *convoy.StoredMessage
	for _, m := range msgs {
		if m.Dead {
			dead = m
			break
		}
	}
	switch {
	case s.Blocked && dead != nil:
		fmt.Fprintf(&b, "Blocked: message %d was dead-lettered at %s (%s). The %d message%s behind it wait%s for an operator to resubmit or discard it.",
			dead.Seq, when(dead.DeadAt), firstOf(dead.DeadReason, "no reason recorded"), s.Pending, plural(s.Pending), verbS(s.Pending))
	case s.Blocked:
		b.WriteString("Blocked by a dead letter: resubmit or discard it to let the session go on.")
	case s.LockHolder != "" && s.LockedUntil != nil:
		fmt.Fprintf(&b, "Held by %s until %s; %d message%s pending.", s.LockHolder, when(s.LockedUntil), s.Pending, plural(s.Pending))
	case s.Pending > 0:
		fmt.Fprintf(&b, "Waiting for a consumer: %d message%s pending, the first available at %s.", s.Pending, plural(s.Pending), when(s.ReadyAt))
	case s.Closed:
		b.WriteString("Done: every message was settled and the session is closed.")
	default:
		b.WriteString("Idle: every message published so far was settled.")
	}
	if dead != nil && !s.Blocked {
		fmt.Fprintf(&b, " Message %d is a dead letter (the queue skips them): see below.", dead.Seq)
	}
	return b.String()
}

// verbS is the third person's "s" for n subjects.
func verbS(n int) string {
	if n == 1 {
		return "s"
	}
	return ""
}

// branches tells where the branches of t's parallel group g are.
func branches(b *strings.Builder, t *drover.Task, g string) {
	fmt.Fprintf(b, "Parallel group %s is running:", quote(g))
	sep := " "
	for i := range t.Steps {
		s := &t.Steps[i]
		if s.Group != g {
			continue
		}
		fmt.Fprintf(b, "%sstep %d %s %s", sep, s.Index, quote(s.Name), strings.ToLower(string(s.ProcessState)))
		if s.ProcessState == dt.Processing {
			fmt.Fprintf(b, " (attempt %d", s.Attempt)
			if s.CompleteBy != nil {
				fmt.Fprintf(b, ", deadline %s", when(s.CompleteBy))
			}
			b.WriteString(")")
		}
		sep = ", "
	}
	b.WriteString("; they join before the next step.")
}
