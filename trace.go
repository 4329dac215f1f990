package drover

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/drover-run/drover/internal/tracing"
)

// The spans of Submit: one drover.submit span per task, whose context is
// stored with the task (Task.TraceContext), so every later span of the
// task, in any process, joins its trace.

// submitSpans carries, in Submit's context, the spans of its tasks in
// the order of its params; prepare takes the next one's context.
type submitSpans struct {
	spans []trace.Span
	next  int
}

type submitSpansKey struct{}

// traceSubmit starts a drover.submit span per task of params, children of
// ctx's span.
func (c *Client) traceSubmit(ctx context.Context, params []SubmitParams) (context.Context, []trace.Span) {
	ss := &submitSpans{spans: make([]trace.Span, len(params))}
	for i, p := range params {
		_, ss.spans[i] = c.tracer.Start(ctx, tracing.SpanSubmit, "", trace.SpanKindProducer,
			tracing.AttrWorkflow.String(p.Workflow))
	}
	return context.WithValue(ctx, submitSpansKey{}, ss), ss.spans
}

// submitContext returns the trace context to store with the next task
// prepare builds: its drover.submit span's.
func submitContext(ctx context.Context) string {
	ss, _ := ctx.Value(submitSpansKey{}).(*submitSpans)
	if ss == nil || ss.next >= len(ss.spans) {
		return ""
	}
	span := ss.spans[ss.next]
	ss.next++
	return tracing.Context(trace.ContextWithSpan(ctx, span))
}

// endSubmit ends the submit spans with the tasks' IDs and states.
func endSubmit(spans []trace.Span, ts []*Task, err error) {
	for i, span := range spans {
		if err == nil && i < len(ts) {
			t := ts[i]
			span.SetAttributes(tracing.AttrTask.String(t.ID), tracing.AttrState.String(string(t.ProcessState)))
		}
		tracing.End(span, err)
	}
}

// traceCancelled records the final-state span of a task an operator
// cancelled (the engine records the others).
func (c *Client) traceCancelled(t *Task, actor string) {
	if !c.tracer.On() {
		return
	}
	c.tracer.Emit([]tracing.Record{{Name: tracing.SpanFinal, Parent: t.TraceContext, Start: t.UpdatedAt, End: t.UpdatedAt,
		Kind: trace.SpanKindInternal, Attrs: []attribute.KeyValue{tracing.AttrTask.String(t.ID),
			tracing.AttrWorkflow.String(t.Workflow), tracing.AttrInstance.String(actor),
			tracing.AttrState.String(string(t.ProcessState))}}})
}
