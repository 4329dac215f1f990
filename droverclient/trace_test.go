package droverclient_test

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/convoy"
	"github.com/drover-run/drover/droverclient"
	"github.com/drover-run/drover/internal/httpapi"
	"github.com/drover-run/drover/internal/httpapi/apitest"
	"github.com/drover-run/drover/internal/testutil"
	"github.com/drover-run/drover/internal/tracing"
)

// TestRunAgentContinuesTheTasksTrace: a remote agent's request carries
// the task's trace context, and a client with a tracer provider runs the
// handler in a drover.agent.call span, a child of the task's submit span
// (the server's spans and the agent's exported apart, as by two
// processes); the client's requests carry their context's traceparent,
// and a remote consumer receives a traced message's context.
func TestRunAgentContinuesTheTasksTrace(t *testing.T) {
	t.Parallel()
	serverExp, agentExp := tracetest.NewInMemoryExporter(), tracetest.NewInMemoryExporter()
	serverTP := sdktrace.NewTracerProvider(sdktrace.WithSyncer(serverExp))
	agentTP := sdktrace.NewTracerProvider(sdktrace.WithSyncer(agentExp))
	t.Cleanup(func() { _ = serverTP.Shutdown(context.Background()); _ = agentTP.Shutdown(context.Background()) })
	var (
		mu          sync.Mutex
		submitTrace string
		handlerSC   trace.SpanContext
	)
	cfg := drover.Config{Store: testutil.SQLite(t), PollInterval: 10 * time.Millisecond, TracerProvider: serverTP,
		Workflows:      []drover.Workflow{{Name: "remote", Steps: []drover.Step{{Name: "a", Agent: "worker"}}}},
		ExternalAgents: []string{"worker"}}
	opts := httpapi.Options{Rate: -1, Tokens: []httpapi.Token{
		{Secret: submitTok, Scopes: []httpapi.Scope{httpapi.ScopeSubmit}},
		{Secret: agentTok, Scopes: []httpapi.Scope{httpapi.ScopeAgent}},
	}}
	s := apitest.Start(t, cfg, opts, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost && r.URL.Path == "/v1/tasks" {
				mu.Lock()
				submitTrace = r.Header.Get("traceparent")
				mu.Unlock()
			}
			h.ServeHTTP(w, r)
		})
	})
	sub, err := droverclient.New(s.URL, submitTok, droverclient.WithTracerProvider(agentTP))
	if err != nil {
		t.Fatal(err)
	}
	ag, err := droverclient.New(s.URL, agentTok, droverclient.WithTracerProvider(agentTP))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		_ = ag.RunAgent(ctx, "worker", func(ctx context.Context, r *droverclient.Request) (json.RawMessage, error) {
			mu.Lock()
			handlerSC = trace.SpanContextFromContext(ctx)
			mu.Unlock()
			return json.RawMessage(`1`), nil
		}, droverclient.AgentOptions{Wait: time.Second})
	}()

	// The task is submitted in-process, traced by the server's provider.
	task, err := s.Drover.Submit(context.Background(), "remote", nil, &drover.SubmitOptions{ID: "r-1"})
	if err != nil {
		t.Fatal(err)
	}
	waitTask(t, sub, "r-1", "Processed")
	var call tracetest.SpanStub
	testutil.WaitFor(t, "the agent's call span", func() bool {
		for _, sp := range agentExp.GetSpans() {
			if sp.Name == tracing.SpanAgentCall {
				call = sp
				return true
			}
		}
		return false
	})
	parent := trace.SpanContextFromContext(tracing.Remote(context.Background(), task.TraceContext))
	if call.Parent.SpanID() != parent.SpanID() || call.SpanContext.TraceID() != parent.TraceID() {
		t.Errorf("the agent's call span has parent %s in trace %s, want the submit span %s in %s",
			call.Parent.SpanID(), call.SpanContext.TraceID(), parent.SpanID(), parent.TraceID())
	}
	mu.Lock()
	if handlerSC.SpanID() != call.SpanContext.SpanID() {
		t.Errorf("the handler's context carries span %s, not its call's %s", handlerSC.SpanID(), call.SpanContext.SpanID())
	}
	mu.Unlock()

	// A submit from a traced context sends its traceparent.
	rctx, root := agentTP.Tracer("test").Start(context.Background(), "caller")
	if _, _, err := sub.SubmitTask(rctx, droverclient.SubmitRequest{Workflow: "remote", ID: "r-2"}); err != nil {
		t.Fatal(err)
	}
	root.End()
	mu.Lock()
	if want := "00-" + root.SpanContext().TraceID().String() + "-" + root.SpanContext().SpanID().String() + "-01"; submitTrace != want {
		t.Errorf("the submit sent traceparent %q, want %q", submitTrace, want)
	}
	mu.Unlock()

	// A remote consumer gets a traced message's context with it.
	pub, err := convoy.New(convoy.Config{Store: cfg.Store, TracerProvider: serverTP})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pub.Publish(context.Background(), "jobs", convoy.Message{SessionID: "s", Body: []byte(`1`)}); err != nil {
		t.Fatal(err)
	}
	l, err := sub.Accept(context.Background(), "jobs", time.Second)
	if err != nil || l == nil {
		t.Fatalf("Accept: %+v %v", l, err)
	}
	r, err := sub.Receive(context.Background(), l, time.Second)
	if err != nil || r.Message == nil {
		t.Fatalf("Receive: %+v %v", r, err)
	}
	var publish tracetest.SpanStub
	for _, sp := range serverExp.GetSpans() {
		if sp.Name == tracing.SpanPublish {
			publish = sp
		}
	}
	if want := "00-" + publish.SpanContext.TraceID().String() + "-" + publish.SpanContext.SpanID().String() + "-01"; r.Message.Traceparent != want {
		t.Errorf("the received message's traceparent %q, want the publish span's %q", r.Message.Traceparent, want)
	}
}
