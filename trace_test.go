package drover_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/internal/testutil"
	"github.com/drover-run/drover/internal/tracing"
)

// TestTracingOneTracePerTask: with a TracerProvider, a task is one trace:
// the submit span, whose context is stored with the task, and as its
// children every step attempt, agent call, supervisor recovery,
// compensation and the final state; the agent function's context
// carries its call's span.
func TestTracingOneTracePerTask(t *testing.T) {
	t.Parallel()
	tp, exp := testutil.MemTracer(t)
	var (
		mu         sync.Mutex
		agentSpans = map[string]trace.SpanContext{}
	)
	agent := func(name string, f func(ctx context.Context) ([]byte, error)) drover.Agent {
		return drover.Agent{Name: name, Func: func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) {
			mu.Lock()
			agentSpans[name] = trace.SpanContextFromContext(ctx)
			mu.Unlock()
			return f(ctx)
		}}
	}
	done := func(ctx context.Context) ([]byte, error) { return []byte(`"ok"`), nil }
	c := startClient(t, drover.Config{
		Store: newStore(t), TracerProvider: tp,
		Workflows: []drover.Workflow{{Name: "trip", OnFailure: drover.PolicyCompensate, FailureThreshold: 1, Steps: []drover.Step{
			{Name: "flight", Agent: "air", Compensation: "air-undo"},
			{Name: "car", Agent: "cars-silent", Compensation: "cars-undo", Timeout: time.Second},
		}}},
		Agents: []drover.Agent{agent("air", done), agent("air-undo", done), agent("cars-undo", done),
			// Never answers: the supervisor recovers the step at CompleteBy.
			agent("cars-silent", func(ctx context.Context) ([]byte, error) { <-ctx.Done(); return nil, ctx.Err() })},
	})
	sub, err := c.Submit(context.Background(), "trip", []byte(`{}`), &drover.SubmitOptions{ID: "trip-1"})
	if err != nil {
		t.Fatal(err)
	}
	if sub.TraceContext == "" {
		t.Fatal("the submitted task has no trace context")
	}
	if task := waitTask(t, c, "trip-1"); task.ProcessState != drover.Compensated {
		t.Fatalf("trip ended %s (%s)", task.ProcessState, task.LastError)
	}
	// name/step/outcome of every span the task's trace must have.
	want := []string{
		"drover.submit//", "drover.step/0/processed", "drover.step/1/timed_out", "drover.supervisor.recover/1/compensate",
		"drover.compensate/1/compensated", "drover.compensate/0/compensated", "drover.task.final//",
		"drover.agent.call/0/ok", "drover.agent.call/1/abandoned",
	}
	var spans tracetest.SpanStubs
	have := func(key string) bool {
		for _, s := range spans {
			if s.Name+"/"+testutil.SpanAttr(s, "drover.step")+"/"+testutil.SpanAttr(s, "drover.outcome") == key {
				return true
			}
		}
		return false
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, s := range spans {
				t.Logf("span %s step=%s outcome=%s", s.Name, testutil.SpanAttr(s, "drover.step"), testutil.SpanAttr(s, "drover.outcome"))
			}
		}
	})
	waitFor(t, "the task's spans", func() bool {
		spans = exp.GetSpans()
		for _, w := range want {
			if !have(w) {
				return false
			}
		}
		return true
	})
	var submit tracetest.SpanStub
	for _, s := range spans {
		if s.Name == tracing.SpanSubmit {
			submit = s
		}
	}
	traceID := submit.SpanContext.TraceID()
	for _, s := range spans {
		if s.SpanContext.TraceID() != traceID {
			t.Errorf("span %s is in trace %s, not the task's %s", s.Name, s.SpanContext.TraceID(), traceID)
		}
		if s.Name != tracing.SpanSubmit && s.Parent.SpanID() != submit.SpanContext.SpanID() {
			t.Errorf("span %s has parent %s, not the submit span %s", s.Name, s.Parent.SpanID(), submit.SpanContext.SpanID())
		}
		if s.Name != tracing.SpanSubmit && testutil.SpanAttr(s, "drover.task.id") != "trip-1" {
			t.Errorf("span %s: drover.task.id %q", s.Name, testutil.SpanAttr(s, "drover.task.id"))
		}
		if s.Name == tracing.SpanFinal && testutil.SpanAttr(s, "drover.state") != "Compensated" {
			t.Errorf("final span: state %q", testutil.SpanAttr(s, "drover.state"))
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for name, sc := range agentSpans {
		if sc.TraceID() != traceID {
			t.Errorf("agent %s ran with trace %s in its context, not the task's", name, sc.TraceID())
		}
	}
}

// TestTracingOffStoresNoContext: without a TracerProvider nothing is
// traced and the task stores no trace context.
func TestTracingOffStoresNoContext(t *testing.T) {
	t.Parallel()
	c := startClient(t, drover.Config{Store: newStore(t),
		Workflows: []drover.Workflow{{Name: "one", Steps: []drover.Step{{Name: "a", Agent: "a"}}}},
		Agents: []drover.Agent{{Name: "a", Func: func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) {
			if trace.SpanContextFromContext(ctx).IsValid() {
				return nil, drover.Permanent(errors.New("a span in an untraced call"))
			}
			return []byte(`1`), nil
		}}}})
	task, err := c.Submit(context.Background(), "one", nil, &drover.SubmitOptions{ID: "one"})
	if err != nil {
		t.Fatal(err)
	}
	if task.TraceContext != "" {
		t.Errorf("trace context %q stored without tracing", task.TraceContext)
	}
	if got := waitTask(t, c, "one"); got.ProcessState != drover.Processed || got.TraceContext != "" {
		t.Errorf("task ended %s (%s), trace context %q", got.ProcessState, got.LastError, got.TraceContext)
	}
}

// TestTracingCancelledTask: an operator's Cancel ends the task's trace with
// its final-state span.
func TestTracingCancelledTask(t *testing.T) {
	t.Parallel()
	tp, exp := testutil.MemTracer(t)
	c := startClient(t, drover.Config{Store: newStore(t), TracerProvider: tp, ExternalAgents: []string{"elsewhere"},
		Workflows: []drover.Workflow{{Name: "wait", Steps: []drover.Step{{Name: "a", Agent: "elsewhere"}}}}})
	task, err := c.Submit(context.Background(), "wait", nil, &drover.SubmitOptions{ID: "c-1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CancelAs(context.Background(), "c-1", "not needed", "ops"); err != nil {
		t.Fatal(err)
	}
	var final tracetest.SpanStub
	waitFor(t, "the final-state span", func() bool {
		for _, s := range exp.GetSpans() {
			if s.Name == tracing.SpanFinal {
				final = s
				return true
			}
		}
		return false
	})
	if final.SpanContext.TraceID().String() != tracing.TraceID(task.TraceContext) || testutil.SpanAttr(final, "drover.state") != "Cancelled" ||
		testutil.SpanAttr(final, "drover.instance") != "ops" {
		t.Errorf("final span: trace %s state %q actor %q", final.SpanContext.TraceID(), testutil.SpanAttr(final, "drover.state"),
			testutil.SpanAttr(final, "drover.instance"))
	}
}
