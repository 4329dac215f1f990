package webhook

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/internal/testutil"
	"github.com/drover-run/drover/internal/testutil/clienttest"
	"github.com/drover-run/drover/internal/tracing"
)

// TestDeliverySpansJoinTheTasksTrace: with a tracer, each delivery attempt
// is a drover.webhook.deliver span, a child of the task's submit span,
// and sends its traceparent to the receiver.
func TestDeliverySpansJoinTheTasksTrace(t *testing.T) {
	t.Parallel()
	tp, exp := testutil.MemTracer(t)
	drv := testutil.SQLite(t)
	rc := newReceiver(t)
	rc.respond = failFirst(1)
	c := clienttest.Start(t, drover.Config{Store: drv, PollInterval: 10 * time.Millisecond, TracerProvider: tp,
		Workflows: []drover.Workflow{{Name: "echo", Steps: []drover.Step{{Name: "a", Agent: "echo"}}}},
		Agents: []drover.Agent{{Name: "echo", Func: func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) {
			return r.Input, nil
		}}}})
	task, err := c.Submit(context.Background(), "echo", []byte(`{}`), &drover.SubmitOptions{ID: "w-1", CallbackURL: rc.url("/cb")})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, c, "w-1", drover.Processed)
	opts := fastOptions(&logBuffer{})
	opts.Tracer = tracing.New(tp)
	run(t, newDispatcher(t, drv, opts))
	waitFor(t, "the delivery to succeed", func() bool { return len(rc.okCount()) == 1 })

	var delivers []tracetest.SpanStub
	waitFor(t, "two delivery spans", func() bool {
		delivers = delivers[:0]
		for _, s := range exp.GetSpans() {
			if s.Name == tracing.SpanWebhook {
				delivers = append(delivers, s)
			}
		}
		return len(delivers) == 2
	})
	parent := tracing.Remote(context.Background(), task.TraceContext)
	for i, s := range delivers {
		if s.Parent.SpanID() != trace.SpanContextFromContext(parent).SpanID() || s.SpanContext.TraceID() != trace.SpanContextFromContext(parent).TraceID() {
			t.Errorf("attempt %d: span %s is not a child of the task's submit span", i+1, s.SpanContext.SpanID())
		}
		want := map[int]string{0: "pending", 1: "delivered"}[i]
		if got := attr(s, "drover.outcome"); got != want {
			t.Errorf("attempt %d: outcome %q, want %q", i+1, got, want)
		}
	}
	hits := rc.all()
	if len(hits) != 2 {
		t.Fatalf("%d requests, want two", len(hits))
	}
	for i, h := range hits {
		if want := "00-" + delivers[i].SpanContext.TraceID().String() + "-" + delivers[i].SpanContext.SpanID().String() + "-01"; h.Header.Get("traceparent") != want {
			t.Errorf("request %d: traceparent %q, want %q", i+1, h.Header.Get("traceparent"), want)
		}
	}
}

func attr(s tracetest.SpanStub, key string) string {
	for _, a := range s.Attributes {
		if string(a.Key) == key {
			return a.Value.String()
		}
	}
	return ""
}
