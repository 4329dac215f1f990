// Package tracing is drover's OpenTelemetry instrumentation, kept in one
// place: the span names and attributes, the W3C trace context stored with
// a task or a session message and carried in HTTP headers, and the spans
// the engine records after its transactions commit.
//
// A task is one trace. Its submit span's context is stored with the task
// (drovertype.Task.TraceContext), and every later span about the task, in
// whichever process, is a child of it: a step attempt, an agent call, a
// supervisor recovery, a compensation, the final state, a webhook
// delivery. A session message's publish span is stored the same way
// (drovertype.Message.TraceContext) and its receive and settle spans
// continue it.
//
// A nil *Tracer is off, and every method of it costs a nil check: an
// untraced process pays nothing else.
package tracing

import (
	"context"
	"net/http"
	"strings"
	"time"

	dt "github.com/drover-run/drover/drovertype"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// ScopeName is the instrumentation scope of drover's spans.
const ScopeName = "github.com/drover-run/drover"

// Span names. They are stable: dashboards and tests select on them.
const (
	SpanSubmit     = "drover.submit"             // Submit, one per task
	SpanStep       = "drover.step"               // one attempt of a step, dispatch to outcome
	SpanAgentCall  = "drover.agent.call"         // one call of an agent function (or remote agent)
	SpanRecover    = "drover.supervisor.recover" // the supervisor recovering a timed-out step
	SpanCompensate = "drover.compensate"         // one attempt of a step's compensation
	SpanFinal      = "drover.task.final"         // the task reaching a final state
	SpanWebhook    = "drover.webhook.deliver"    // one webhook delivery attempt
	SpanPublish    = "drover.convoy.publish"     // a session message published
	SpanReceive    = "drover.convoy.receive"     // a session message handed to a consumer
	SpanSettle     = "drover.convoy.settle"      // a session message completed, abandoned or dead-lettered
)

// Attribute keys.
const (
	AttrTask           = attribute.Key("drover.task.id")
	AttrWorkflow       = attribute.Key("drover.workflow")
	AttrStep           = attribute.Key("drover.step")
	AttrStepName       = attribute.Key("drover.step.name")
	AttrAgent          = attribute.Key("drover.agent")
	AttrAttempt        = attribute.Key("drover.attempt")
	AttrIdempotencyKey = attribute.Key("drover.idempotency_key")
	AttrKind           = attribute.Key("drover.kind")
	AttrOutcome        = attribute.Key("drover.outcome")
	AttrState          = attribute.Key("drover.state")
	AttrInstance       = attribute.Key("drover.instance")
	AttrURL            = attribute.Key("url.full")
	AttrEvent          = attribute.Key("drover.event")
	AttrQueue          = attribute.Key("messaging.destination.name")
	AttrSession        = attribute.Key("drover.session")
	AttrSeq            = attribute.Key("drover.seq")
	AttrMessagingSys   = attribute.Key("messaging.system")
	AttrMessagingOp    = attribute.Key("messaging.operation.type")
)

// Tracer starts drover's spans; nil is off.
type Tracer struct {
	t trace.Tracer
}

// New returns the tracer of tp, or nil (off) when tp is nil or the no-op
// provider.
func New(tp trace.TracerProvider) *Tracer {
	if tp == nil {
		return nil
	}
	if _, ok := tp.(noop.TracerProvider); ok {
		return nil
	}
	return &Tracer{t: tp.Tracer(ScopeName)}
}

// On reports whether t records spans.
func (t *Tracer) On() bool { return t != nil }

// off is the span handed out when tracing is off: every method a no-op.
var off = trace.SpanFromContext(context.Background())

// Start starts span name. Its parent is the span of ctx, or, when ctx has
// none and stored is a stored trace context, that. Off, it returns ctx and
// a span that does nothing.
func (t *Tracer) Start(ctx context.Context, name, stored string, kind trace.SpanKind, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if t == nil {
		return ctx, off
	}
	if stored != "" && !trace.SpanContextFromContext(ctx).IsValid() {
		ctx = Remote(ctx, stored)
	}
	return t.t.Start(ctx, name, trace.WithSpanKind(kind), trace.WithAttributes(attrs...))
}

// End ends span, with an error status when err is not nil.
func End(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// w3c is the propagation format: W3C traceparent and tracestate.
var w3c = propagation.TraceContext{}

// Inject sets the traceparent (and tracestate) headers of h from ctx's
// span; nothing when it has none.
func Inject(ctx context.Context, h http.Header) {
	if trace.SpanContextFromContext(ctx).IsValid() {
		w3c.Inject(ctx, propagation.HeaderCarrier(h))
	}
}

// Extract returns ctx with the remote span of h's traceparent, if any.
func Extract(ctx context.Context, h http.Header) context.Context {
	if h.Get("traceparent") == "" {
		return ctx
	}
	return w3c.Extract(ctx, propagation.HeaderCarrier(h))
}

// Context returns the trace context of ctx's span to store with a task or
// a message: "<traceparent>" or "<traceparent> <tracestate>"; "" when ctx
// has no valid span.
func Context(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	c := propagation.MapCarrier{}
	w3c.Inject(ctx, c)
	if ts := c["tracestate"]; ts != "" {
		return c["traceparent"] + " " + ts
	}
	return c["traceparent"]
}

// Remote returns ctx with the span of a stored trace context (Context) as
// its remote parent; ctx unchanged when stored is "" or not valid.
func Remote(ctx context.Context, stored string) context.Context {
	if stored == "" {
		return ctx
	}
	parent, state, _ := strings.Cut(stored, " ")
	return w3c.Extract(ctx, propagation.MapCarrier{"traceparent": parent, "tracestate": state})
}

// TraceID returns the trace ID of a stored trace context, "" when it has
// none: for log lines about a task or message read from the store.
func TraceID(stored string) string {
	if stored == "" {
		return ""
	}
	sc := trace.SpanContextFromContext(Remote(context.Background(), stored))
	if !sc.IsValid() {
		return ""
	}
	return sc.TraceID().String()
}

// Record is a span of the engine's, built while a transaction runs and
// emitted (Emit) once it commits, with its own start and end times: so a
// rolled-back transaction records nothing, and a step attempt's span runs
// from its dispatch to its outcome, whichever transactions those were.
type Record struct {
	Name       string
	Parent     string // the task's stored trace context
	Start, End time.Time
	Kind       trace.SpanKind
	Attrs      []attribute.KeyValue
	Error      string // not "": the span's status is Error with this description
}

// Emit records the spans of recs.
func (t *Tracer) Emit(recs []Record) {
	if t == nil {
		return
	}
	ctx := context.Background()
	for i := range recs {
		r := &recs[i]
		start := r.Start
		if start.IsZero() || start.After(r.End) {
			start = r.End
		}
		_, span := t.t.Start(Remote(ctx, r.Parent), r.Name, trace.WithSpanKind(r.Kind), trace.WithTimestamp(start),
			trace.WithAttributes(r.Attrs...))
		if r.Error != "" {
			span.SetStatus(codes.Error, r.Error)
		}
		span.End(trace.WithTimestamp(r.End))
	}
}

// AgentCall starts the span of a call of r's agent: a child of ctx's span
// if it has one (a remote agent's request), else of r's task.
func (t *Tracer) AgentCall(ctx context.Context, r *dt.AgentRequest) (context.Context, trace.Span) {
	if t == nil {
		return ctx, off
	}
	return t.Start(ctx, SpanAgentCall, r.TraceContext, trace.SpanKindInternal,
		AttrTask.String(r.TaskID), AttrWorkflow.String(r.Workflow), AttrStep.Int(r.StepIndex),
		AttrStepName.String(r.StepName), AttrAgent.String(r.Agent), AttrAttempt.Int(r.Attempt),
		AttrKind.String(string(r.Kind)), AttrIdempotencyKey.String(r.IdempotencyKey))
}

// Outcome sets the outcome of ctx's span: outcome, or, when "", "ok" or
// "failed" after err; an error status with err.
func Outcome(ctx context.Context, outcome string, err error) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	if outcome == "" {
		outcome = "ok"
		if err != nil {
			outcome = "failed"
		}
	}
	span.SetAttributes(AttrOutcome.String(outcome))
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
}
