package flow

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"time"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/store"
)

// Parallel groups. The branches of a group are consecutive steps with the
// same Group; they are dispatched together and join (all Processed) before
// the next step. While a group runs, Task.CurrentStep is its first branch
// and Task.CompleteBy the earliest deadline of its branches in flight, so
// that the supervisor's sweep finds the task when any branch's CompleteBy
// passes; each branch keeps its own attempt (fencing token), CompleteBy
// and FailureCount.

// span returns the steps [lo, hi) of the group step i is a branch of, or
// [i, i+1) for a step of its own.
func span(steps []*dt.StepRecord, i int) (lo, hi int) {
	g := steps[i].Group
	if g == "" {
		return i, i + 1
	}
	lo, hi = i, i+1
	for lo > 0 && steps[lo-1].Group == g {
		lo--
	}
	for hi < len(steps) && steps[hi].Group == g {
		hi++
	}
	return lo, hi
}

// output is the output of the step or group that ends at step i: a step's
// own, or for a group a JSON object of its branches' outputs by name.
func output(steps []*dt.StepRecord, i int) []byte {
	if steps[i].Group == "" {
		return steps[i].Output
	}
	lo, hi := span(steps, i)
	var buf bytes.Buffer
	buf.WriteByte('{')
	for k, s := range steps[lo:hi] {
		if k > 0 {
			buf.WriteByte(',')
		}
		name, _ := json.Marshal(s.Name)
		buf.Write(name)
		buf.WriteByte(':')
		switch {
		case len(s.Output) == 0:
			buf.WriteString("null")
		case json.Valid(s.Output):
			buf.Write(s.Output)
		default:
			// Not JSON: as a string, so the object stays valid.
			str, _ := json.Marshal(string(s.Output))
			buf.Write(str)
		}
	}
	buf.WriteByte('}')
	return buf.Bytes()
}

// previous is the previous output step i gets: the output of the step (or
// group) before it, or before its group. own reports that it is not the
// output of step i-1, which the store joins into a stored request, so the
// request carries it (dt.AgentRequest.PreviousOwn).
func previous(steps []*dt.StepRecord, i int) (prev []byte, own bool) {
	lo, _ := span(steps, i)
	if lo == 0 {
		return nil, i != lo
	}
	return output(steps, lo-1), i != lo || steps[lo-1].Group != ""
}

// request is the request of step i of l's task, kind, dispatched by
// instance with the step's current attempt and CompleteBy.
func request(l *loaded, i int, kind dt.RequestKind, instance string, now time.Time) *dt.AgentRequest {
	t, s := l.task, l.steps[i]
	agent, key := s.Agent, s.IdempotencyKey
	if kind == dt.KindCompensate {
		agent, key = s.Compensation, s.IdempotencyKey+"/compensate"
	}
	prev, own := previous(l.steps, i)
	req := &dt.AgentRequest{
		Agent: agent, TaskID: t.ID, Workflow: t.Workflow, StepIndex: s.Index, StepName: s.Name, Attempt: s.Attempt,
		Kind: kind, IdempotencyKey: key, CompleteBy: *s.CompleteBy, Scheduler: instance, CreatedAt: now,
		Input: t.Input, PreviousOutput: prev, PreviousOwn: own, TraceContext: t.TraceContext,
	}
	if kind == dt.KindCompensate {
		req.StepOutput = s.Output
	}
	return req
}

// inFlight reports whether step s runs forward. A branch in flight is
// not sent again when another instance (a scheduler of this process or
// another) claims its task: its reply is forwarded (see forwarded), or, if
// its dispatcher died, the supervisor recovers it after its CompleteBy.
func inFlight(s *dt.StepRecord) bool {
	return s.ProcessState == dt.Processing && s.CompleteBy != nil
}

// forwarded hands reply r of a branch in flight to the instance that holds
// its task now (another claimed it back after a sibling's retry) through
// the store's reply queue, and reports whether it did.
func forwarded(b *batch, l *loaded, s *dt.StepRecord, r *dt.AgentReply, instance string, now time.Time) bool {
	if s == nil || s.Group == "" || r.Kind != dt.KindDo || l.task.LockedBy == "" || l.task.LockedBy == instance {
		return false
	}
	if l.task.ProcessState != dt.Processing || s.ProcessState != dt.Processing || s.Attempt != r.Attempt ||
		s.CompleteBy == nil || now.After(*s.CompleteBy) {
		return false
	}
	f := *r
	f.ID, f.InProcess = 0, false
	b.forward = append(b.forward, &f)
	b.forwardTo = append(b.forwardTo, l.task.LockedBy)
	return true
}

// forwardReplies stores replies for the instances holding their tasks
// (to) and wakes them.
func forwardReplies(ctx context.Context, x store.Executor, replies []*dt.AgentReply, to []string) error {
	if len(replies) == 0 {
		return nil
	}
	if err := x.ReplyInsertMany(ctx, &store.ReplyInsertManyParams{Replies: replies}); err != nil {
		return err
	}
	for i, instance := range to {
		if !slices.Contains(to[:i], instance) {
			if err := store.Notify(ctx, x, &store.NotifyParams{Topic: store.TopicReplies(instance)}); err != nil {
				return err
			}
		}
	}
	return nil
}

// dispatchNext dispatches the next forward work of a task held by
// instance: the first step not Processed, or every branch of its group
// not already in flight from instance. It reports false when every step
// is Processed. The task's CurrentStep is the first branch, its
// CompleteBy the earliest deadline in flight.
func dispatchNext(b *batch, instance string, reserve func(string) (string, bool), l *loaded, now time.Time) (dispatched int, more bool) {
	t := l.task
	for i := 0; i < len(l.steps); {
		lo, hi := span(l.steps, i)
		done := true
		for _, s := range l.steps[lo:hi] {
			done = done && s.ProcessState == dt.Processed
		}
		if done {
			i = hi
			continue
		}
		var first *time.Time
		for k := lo; k < hi; k++ {
			s := l.steps[k]
			if s.ProcessState == dt.Processed {
				continue
			}
			// A branch in flight from this instance goes on; one sent by
			// another instance (which let go of the task) is sent again,
			// same key, so its reply comes here.
			if hi-lo == 1 || !inFlight(s) {
				dispatchStep(b, instance, reserve, l, k, dt.KindDo, now)
				dispatched++
			}
			if first == nil || s.CompleteBy.Before(*first) {
				first = s.CompleteBy
			}
		}
		deadline := *first
		t.CurrentStep, t.CompleteBy = lo, &deadline
		return dispatched, true
	}
	return 0, false
}

// completed records that step s completed now, after every other step of
// the task (FinishSeq).
func completed(l *loaded, s *dt.StepRecord, now time.Time) {
	last := 0
	for _, o := range l.steps {
		last = max(last, o.FinishSeq)
	}
	s.FinishSeq = last + 1
	finished := now
	s.FinishedAt = &finished
}

// nextToCompensate returns the index of the step compensation undoes next,
// or -1: steps are undone in reverse order of completion. A step whose
// outcome is unknown (it timed out, or was abandoned in flight when a
// sibling branch failed) never completed, so it comes first; steps
// completed before FinishSeq was recorded go last, by index.
func nextToCompensate(steps []*dt.StepRecord) int {
	best, bestRank, bestSeq := -1, -1, 0
	for i, s := range steps {
		if !needsCompensation(s) {
			continue
		}
		rank, seq := 1, s.FinishSeq
		switch {
		case s.ProcessState != dt.Processed:
			rank, seq = 2, s.Index
		case s.FinishSeq == 0:
			rank, seq = 0, s.Index
		}
		if rank > bestRank || (rank == bestRank && seq > bestSeq) {
			best, bestRank, bestSeq = i, rank, seq
		}
	}
	return best
}

// abandon stops the other branches of failed's group when failed failed
// for good: a branch still Pending or in flight is Cancelled, its request
// deleted, so a late reply finds it no longer Processing and is fenced; a
// step_abandoned event by actor ends its attempt in the history (the
// events are returned, for the supervisor to stamp with its term).
// With compensate, a branch that was dispatched may have taken effect, so
// it is undone too, like a step that timed out.
func abandon(b *batch, l *loaded, failed *dt.StepRecord, compensate bool, actor string, now time.Time) []*dt.Event {
	if failed.Group == "" {
		return nil
	}
	var evs []*dt.Event
	lo, hi := span(l.steps, failed.Index)
	for _, s := range l.steps[lo:hi] {
		if s == failed || (s.ProcessState != dt.Processing && s.ProcessState != dt.Pending) {
			continue
		}
		b.attemptEnds(s, dt.KindDo)
		b.deletes = append(b.deletes, store.StepRef{TaskID: s.TaskID, Index: s.Index})
		s.ProcessState = dt.Cancelled
		s.LastError = "abandoned: branch " + failed.Name + " of group " + failed.Group + " failed"
		s.LockedBy, s.CompleteBy, s.UpdatedAt = "", nil, now
		if compensate && s.Compensation != "" && s.Attempt > 0 {
			s.CompensationState = dt.Pending
			s.FailureCount = 0
		}
		b.step(s)
		e := ev(l.task, s.Index, dt.EventStepAbandoned, actor, now)
		e.Attempt, e.Message = s.Attempt, s.LastError
		b.event(e)
		evs = append(evs, e)
	}
	return evs
}
