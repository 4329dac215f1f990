// Package logattr names the slog attributes that identify what a log line
// is about, so that every line of a task's step or of a session message
// carries the same keys and a log search by ID finds them all: task, step
// and attempt; queue, session and seq.
package logattr

import "context"

// The attribute keys.
const (
	Task    = "task"
	Step    = "step"
	Attempt = "attempt"
	Agent   = "agent"
	Queue   = "queue"
	Session = "session"
	Seq     = "seq"
)

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
