package httpagent

import (
	"context"
	"net/http"
	"sync"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestTraceparentSentFromTheCallsSpan: a call whose context carries a span
// (the agent call's, when tracing) sends it as traceparent on every try;
// without one it sends none.
func TestTraceparentSentFromTheCallsSpan(t *testing.T) {
	t.Parallel()
	var (
		mu  sync.Mutex
		got []string
	)
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		mu.Lock()
		got = append(got, r.Header.Get("traceparent"))
		mu.Unlock()
		if n < 2 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	c := newCaller(t, Options{})
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracetest.NewInMemoryExporter()))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	ctx, span := tp.Tracer("test").Start(deadline(t, guard), "drover.agent.call")
	if _, err := c.Do(ctx, &Request{Method: http.MethodPost, URL: s.URL + "/x", IdempotencyKey: "k", Retry: fast}); err != nil {
		t.Fatal(err)
	}
	span.End()
	want := "00-" + span.SpanContext().TraceID().String() + "-" + span.SpanContext().SpanID().String() + "-01"
	mu.Lock()
	tries := append([]string(nil), got...)
	mu.Unlock()
	if len(tries) != 2 || tries[0] != want || tries[1] != want {
		t.Fatalf("traceparent per try %q, want %q twice", tries, want)
	}
	if _, err := c.Do(deadline(t, guard), &Request{Method: http.MethodPost, URL: s.URL + "/y", IdempotencyKey: "k2", Retry: fast}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if last := got[len(got)-1]; last != "" {
		t.Errorf("an untraced call sent traceparent %q", last)
	}
}
