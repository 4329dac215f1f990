package logattr

import (
	"context"
	"slices"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

func TestContext(t *testing.T) {
	ctx := With(context.Background(), StepAttempt("t-1", 2, 3)...)
	want := []any{"task", "t-1", "step", 2, "attempt", 3}
	if got := From(ctx); !slices.Equal(got, want) {
		t.Errorf("From = %v", got)
	}
	// Appending to what From returned leaves ctx alone.
	_ = append(From(ctx), "x", 1)
	if got := Append(ctx, "url", "u"); !slices.Equal(got, append([]any{"url", "u"}, want...)) {
		t.Errorf("Append = %v", got)
	}
	if From(context.Background()) != nil {
		t.Error("an empty context carries attributes")
	}
}

func TestTrace(t *testing.T) {
	if Trace(context.Background()) != nil || TraceOf("") != nil {
		t.Error("trace attributes without a trace")
	}
	tp := sdktrace.NewTracerProvider()
	defer func() { _ = tp.Shutdown(context.Background()) }()
	ctx, span := tp.Tracer("test").Start(context.Background(), "call")
	sc := span.SpanContext()
	want := []any{TraceID, sc.TraceID().String(), SpanID, sc.SpanID().String()}
	if got := Trace(ctx); !slices.Equal(got, want) {
		t.Errorf("Trace = %v, want %v", got, want)
	}
	stored := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"
	if got := TraceOf(stored); !slices.Equal(got, []any{TraceID, sc.TraceID().String()}) {
		t.Errorf("TraceOf = %v", got)
	}
	span.End()
	// A span that ended no longer records: its context's lines carry no IDs.
	if got := Trace(ctx); got != nil {
		t.Errorf("Trace of an ended span = %v", got)
	}
}
