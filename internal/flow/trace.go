package flow

import (
	"time"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/tracing"
	"github.com/drover-run/drover/store"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// The spans of a transaction are read off its events once its writes are
// flushed (spans), kept with the Machine's or Leader's counts of the
// transaction, and emitted only when it commits.

// began is when and how the attempt a batch ends had been dispatched.
type began struct {
	at   time.Time
	kind dt.RequestKind
}

// tracedBatch returns a batch that notes attempt starts when tr is on.
func tracedBatch(tr *tracing.Tracer) *batch {
	b := newBatch()
	if tr.On() {
		b.began = map[*dt.StepRecord]began{}
	}
	return b
}

// attemptEnds notes, while s's deadline is still set, when its current
// attempt of kind was dispatched: CompleteBy less the step's Timeout.
func (b *batch) attemptEnds(s *dt.StepRecord, kind dt.RequestKind) {
	if b.began != nil && s.CompleteBy != nil {
		b.began[s] = began{at: s.CompleteBy.Add(-s.Timeout), kind: kind}
	}
}

// spans appends to out the spans of the batch's events: a step attempt's
// outcome, a compensation's, a supervisor recovery, a final state.
func (b *batch) spans(out []tracing.Record) []tracing.Record {
	if b.began == nil {
		return out
	}
	tasks, steps := b.written()
	for i, e := range b.events {
		t := tasks[e.TaskID]
		if t == nil {
			continue
		}
		attrs := []attribute.KeyValue{tracing.AttrTask.String(t.ID), tracing.AttrWorkflow.String(t.Workflow),
			tracing.AttrInstance.String(e.Actor)}
		rec := tracing.Record{Parent: t.TraceContext, Start: e.CreatedAt, End: e.CreatedAt, Kind: trace.SpanKindInternal}
		s := steps[store.StepRef{TaskID: e.TaskID, Index: e.StepIndex}]
		attempt := func(outcome string) {
			bg := b.began[s]
			agent, key := s.Agent, s.IdempotencyKey
			rec.Name, rec.Start = tracing.SpanStep, bg.at
			if bg.kind == dt.KindCompensate {
				rec.Name, agent, key = tracing.SpanCompensate, s.Compensation, s.IdempotencyKey+"/compensate"
			}
			rec.Attrs = append(attrs, tracing.AttrStep.Int(s.Index), tracing.AttrStepName.String(s.Name),
				tracing.AttrAgent.String(agent), tracing.AttrAttempt.Int(e.Attempt),
				tracing.AttrIdempotencyKey.String(key), tracing.AttrOutcome.String(outcome))
			if outcome != "processed" && outcome != "compensated" {
				rec.Error = e.Message
			}
			out = append(out, rec)
		}
		switch e.Type {
		case dt.EventStepProcessed:
			if s != nil {
				attempt("processed")
			}
		case dt.EventStepCompensated:
			if s != nil {
				attempt("compensated")
			}
		case dt.EventStepFailed:
			if s != nil && e.Term == 0 { // the supervisor's is a recovery's outcome
				attempt("failed")
			}
		case dt.EventStepTimedOut:
			if s == nil {
				continue
			}
			attempt("timed_out")
			rec = tracing.Record{Name: tracing.SpanRecover, Parent: t.TraceContext, Start: e.CreatedAt, End: e.CreatedAt,
				Kind: trace.SpanKindInternal}
			rec.Attrs = append(attrs, tracing.AttrStep.Int(s.Index), tracing.AttrStepName.String(s.Name),
				tracing.AttrAttempt.Int(e.Attempt), tracing.AttrOutcome.String(recovery(b.events[i+1:], e)))
			out = append(out, rec)
		case dt.EventProcessed, dt.EventCompensated, dt.EventError, dt.EventCancelled:
			rec.Name = tracing.SpanFinal
			rec.Attrs = append(attrs, tracing.AttrState.String(string(e.State)))
			if e.Type == dt.EventError {
				rec.Error = e.Message
			}
			out = append(out, rec)
		}
	}
	return out
}

// recovery names what the supervisor did with a timed-out step, from the
// events that follow its step_timed_out event e.
func recovery(after []*dt.Event, e *dt.Event) string {
	for _, n := range after {
		if n.TaskID != e.TaskID {
			continue
		}
		switch n.Type {
		case dt.EventStepRetry:
			return "retry"
		case dt.EventStepWaiting:
			return "wait"
		case dt.EventCompensating:
			return "compensate"
		case dt.EventError:
			return "error"
		}
	}
	return "retry"
}
