// Package logattr names the slog attributes that identify what a log line
// is about, so that every line of a task's step or of a session message
// carries the same keys and a log search by ID finds them all: task, step
// and attempt; queue, session and seq; and, when tracing is on, the trace
// and span IDs, so a line leads to its trace.
package logattr

import (
	"context"

	"go.opentelemetry.io/otel/trace"

	"github.com/drover-run/drover/internal/tracing"
)

// The attribute keys.
const (
	Task    = "task"
	Step    = "step"
	Attempt = "attempt"
	Agent   = "agent"
	Queue   = "queue"
	Session = "session"
	Seq     = "seq"
	TraceID = "trace_id"
	SpanID  = "span_id"
)

// Trace is the trace and span IDs of ctx's span when it is recording, as
// slog's key-value arguments; nil otherwise.
func Trace(ctx context.Context) []any {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return nil
	}
	sc := span.SpanContext()
	return []any{TraceID, sc.TraceID().String(), SpanID, sc.SpanID().String()}
}

// TraceOf is the trace ID of a stored trace context (a task's or a
// message's) as slog's key-value arguments; nil when there is none.
func TraceOf(stored string) []any {
	if id := tracing.TraceID(stored); id != "" {
		return []any{TraceID, id}
	}
	return nil
}

// StepAttempt is the attributes of one attempt of a task's step, as
// slog's key-value arguments.
func StepAttempt(task string, step, attempt int) []any {
	return []any{Task, task, Step, step, Attempt, attempt}
}

// Message is the attributes of a session-queue message.
func Message(queue, session string, seq int64) []any {
	return []any{Queue, queue, Session, session, Seq, seq}
}

type ctxKey struct{}

// With returns ctx carrying attrs, for code that logs about them without
// knowing them (the built-in HTTP agent, called for a step).
func With(ctx context.Context, attrs ...any) context.Context {
	return context.WithValue(ctx, ctxKey{}, append(From(ctx), attrs...))
}

// From returns the attributes ctx carries (With), or nil.
func From(ctx context.Context) []any {
	a, _ := ctx.Value(ctxKey{}).([]any)
	return a[:len(a):len(a)] // appending to the result must not change ctx's
}

// Append returns args followed by the attributes ctx carries.
func Append(ctx context.Context, args ...any) []any {
	return append(args, From(ctx)...)
}
