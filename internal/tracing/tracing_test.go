package tracing_test

import (
	"context"
	"net/http"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/drover-run/drover/internal/tracing"
)

func TestOffForNilAndNoop(t *testing.T) {
	for name, tp := range map[string]trace.TracerProvider{"nil": nil, "noop": noop.NewTracerProvider()} {
		tr := tracing.New(tp)
		if tr.On() {
			t.Errorf("%s provider: tracing on", name)
		}
		ctx, span := tr.Start(context.Background(), tracing.SpanSubmit, "", trace.SpanKindInternal)
		if span.IsRecording() || trace.SpanContextFromContext(ctx).IsValid() {
			t.Errorf("%s provider: a span was started", name)
		}
		span.End()
		tr.Emit([]tracing.Record{{Name: tracing.SpanStep}})
	}
}

// TestStoredContextRoundTrips: the context stored with a task or message
// (traceparent, tracestate) gives the same span back as a remote parent,
// and in headers.
func TestStoredContextRoundTrips(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tr := tracing.New(tp)
	if tracing.Context(context.Background()) != "" {
		t.Error("a context without a span has a trace context")
	}
	ts, err := trace.ParseTraceState("vendor=a,other=b")
	if err != nil {
		t.Fatal(err)
	}
	ctx, span := tr.Start(context.Background(), tracing.SpanSubmit, "", trace.SpanKindProducer)
	ctx = trace.ContextWithSpanContext(ctx, span.SpanContext().WithTraceState(ts))
	stored := tracing.Context(ctx)
	sc := span.SpanContext()
	if want := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01 vendor=a,other=b"; stored != want {
		t.Fatalf("stored %q, want %q", stored, want)
	}
	if got := tracing.TraceID(stored); got != sc.TraceID().String() {
		t.Errorf("TraceID %q, want %q", got, sc.TraceID())
	}
	remote := trace.SpanContextFromContext(tracing.Remote(context.Background(), stored))
	if !remote.IsRemote() || remote.SpanID() != sc.SpanID() || remote.TraceState().Get("vendor") != "a" {
		t.Errorf("Remote gave %v", remote)
	}
	for _, bad := range []string{"", "garbage", "00-zz-yy-01"} {
		if tracing.TraceID(bad) != "" || trace.SpanContextFromContext(tracing.Remote(context.Background(), bad)).IsValid() {
			t.Errorf("stored %q gave a span", bad)
		}
	}
	// A child started from the stored context, with no span in ctx.
	_, child := tr.Start(context.Background(), tracing.SpanStep, stored, trace.SpanKindInternal)
	child.End()
	span.End()
	h := http.Header{}
	tracing.Inject(trace.ContextWithSpan(context.Background(), child), h)
	got := trace.SpanContextFromContext(tracing.Extract(context.Background(), h))
	if got.SpanID() != child.SpanContext().SpanID() || got.TraceID() != sc.TraceID() {
		t.Errorf("headers %v gave %v", h, got)
	}
	stubs := exp.GetSpans()
	if len(stubs) != 2 || stubs[0].Parent.SpanID() != sc.SpanID() {
		t.Fatalf("spans %v: want the child of the stored span first", stubs)
	}
}

func TestFromEnv(t *testing.T) {
	ctx := context.Background()
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	for name, getenv := range map[string]func(string) string{
		"nothing set":   env(),
		"sdk disabled":  env("OTEL_SDK_DISABLED", "true", "OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
		"exporter none": env("OTEL_TRACES_EXPORTER", "none", "OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
	} {
		tp, shutdown, err := tracing.FromEnv(ctx, getenv)
		if err != nil || tp != nil || shutdown(ctx) != nil {
			t.Errorf("%s: provider %v, err %v; want off", name, tp, err)
		}
	}
	for name, getenv := range map[string]func(string) string{
		"endpoint":        env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
		"traces endpoint": env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:4318/v1/traces"),
		"exporter otlp":   env("OTEL_TRACES_EXPORTER", "otlp"),
		"grpc":            env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
		"traces grpc":     env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL", "bogus", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc"),
	} {
		tp, shutdown, err := tracing.FromEnv(ctx, getenv)
		if err != nil || tp == nil {
			t.Errorf("%s: provider %v, err %v; want on", name, tp, err)
			continue
		}
		if !tracing.New(tp).On() {
			t.Errorf("%s: the provider records nothing", name)
		}
		_ = shutdown(ctx)
	}
	for name, getenv := range map[string]func(string) string{
		"exporter zipkin": env("OTEL_TRACES_EXPORTER", "zipkin"),
		"http/json":       env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
	} {
		if _, _, err := tracing.FromEnv(ctx, getenv); err == nil {
			t.Errorf("%s: no error", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}
