package webhook

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/tracing"
	"github.com/drover-run/drover/store"
)

// traceDelivery starts the span of an attempt of w, a child of its task's
// trace (read from the store: deliveries do not keep it; a session's
// event, or a task deleted since, starts a trace of its own).
func (d *Dispatcher) traceDelivery(ctx context.Context, w *dt.WebhookDelivery) (context.Context, trace.Span) {
	var stored string
	if _, session := SessionOf(w.TaskID); !session {
		if t, err := d.store.Reader().TaskGet(ctx, &store.TaskGetParams{ID: w.TaskID}); err == nil {
			stored = t.TraceContext
		}
	}
	return d.opts.Tracer.Start(ctx, tracing.SpanWebhook, stored, trace.SpanKindClient,
		tracing.AttrTask.String(w.TaskID), tracing.AttrEvent.String(string(w.EventType)),
		attribute.Int64("drover.event.id", w.EventID), tracing.AttrURL.String(redact(w.URL)),
		tracing.AttrAttempt.Int(w.Attempts))
}

// endDelivery ends the span of an attempt with its result.
func endDelivery(span trace.Span, res store.WebhookResult) {
	span.SetAttributes(tracing.AttrOutcome.String(string(res.Status)))
	if res.LastStatus != 0 {
		span.SetAttributes(attribute.Int("http.response.status_code", res.LastStatus))
	}
	if res.Status != dt.WebhookDelivered {
		span.SetStatus(codes.Error, res.LastError)
	}
	span.End()
}
