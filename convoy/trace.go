package convoy

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/drover-run/drover/internal/tracing"
	"github.com/drover-run/drover/store"
)

// The spans of session messages (Config.TracerProvider): a publish span
// per message, stored with it, and its receive and settle spans as its
// children in whichever process consumes it.

func messageAttrs(queue, session string, seq int64, op string) []attribute.KeyValue {
	return []attribute.KeyValue{tracing.AttrMessagingSys.String("drover"), tracing.AttrMessagingOp.String(op),
		tracing.AttrQueue.String(queue), tracing.AttrSession.String(session), tracing.AttrSeq.Int64(seq)}
}

// tracePublish starts a publish span per message of pms, children of
// ctx's span, and stores their contexts with the messages.
func (c *Client) tracePublish(ctx context.Context, pms []store.PublishMessage) []trace.Span {
	spans := make([]trace.Span, len(pms))
	for i := range pms {
		var sctx context.Context
		sctx, spans[i] = c.tracer.Start(ctx, tracing.SpanPublish, "", trace.SpanKindProducer,
			tracing.AttrMessagingSys.String("drover"), tracing.AttrMessagingOp.String("send"),
			tracing.AttrQueue.String(pms[i].Queue), tracing.AttrSession.String(pms[i].SessionID))
		pms[i].TraceContext = tracing.Context(sctx)
	}
	return spans
}

// endPublish ends the publish spans with the sequence numbers given.
func endPublish(spans []trace.Span, res []store.PublishResult, err error) {
	for i, span := range spans {
		if err == nil && i < len(res) {
			span.SetAttributes(tracing.AttrSeq.Int64(res[i].Seq), attribute.Bool("drover.duplicate", res[i].Duplicate))
		}
		tracing.End(span, err)
	}
}

// traceReceive starts the receive span of m, a child of its publish span,
// for its handler's context; the caller ends it. Off, it returns ctx.
func (c *Client) traceReceive(ctx context.Context, m *ReceivedMessage) (context.Context, trace.Span) {
	if !c.tracer.On() {
		return ctx, trace.SpanFromContext(context.Background())
	}
	attrs := append(messageAttrs(m.Queue, m.SessionID, m.Seq, "receive"), attribute.Int("drover.delivery_count", m.DeliveryCount))
	// A receive continues the message's trace, not the consumer's.
	return c.tracer.Start(trace.ContextWithSpanContext(ctx, trace.SpanContext{}), tracing.SpanReceive, m.TraceContext,
		trace.SpanKindConsumer, attrs...)
}

// traceReceived records the receive of m, handed to a caller that
// settles it later (SessionReceiver, leases).
func (c *Client) traceReceived(m *ReceivedMessage) {
	if c.tracer.On() && m != nil {
		_, span := c.traceReceive(context.Background(), m)
		span.End()
	}
}

// traceSettle records the settle of m (action: complete, abandon or
// dead_letter); err, when not nil, is why it was not applied.
func (c *Client) traceSettle(m *ReceivedMessage, action store.SettleAction, err error) {
	if !c.tracer.On() || m == nil {
		return
	}
	_, span := c.tracer.Start(context.Background(), tracing.SpanSettle, m.TraceContext, trace.SpanKindConsumer,
		append(messageAttrs(m.Queue, m.SessionID, m.Seq, "settle"), tracing.AttrOutcome.String(string(action)))...)
	tracing.End(span, err)
}
