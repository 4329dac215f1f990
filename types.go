package drover

import (
	"context"
	"time"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/clock"
)

// Domain types, defined in package drovertype so drivers can share them.
type (
	// Task is one run of a workflow and its state record.
	Task = dt.Task
	// TaskStep is the state record of one step of a task.
	TaskStep = dt.StepRecord
	// ProcessState is the state of a task or step.
	ProcessState = dt.ProcessState
	// FailurePolicy says what happens when a step fails for good.
	FailurePolicy = dt.FailurePolicy
	// WaitPolicy makes the supervisor wait an extended period and try a
	// step again once its FailureCount reaches the threshold, before the
	// failure policy applies (Workflow.Wait, Step.Wait).
	WaitPolicy = dt.WaitPolicy
	// AgentRequest is what an agent receives: input, idempotency key, CompleteBy.
	AgentRequest = dt.AgentRequest
	// Event is one entry of a task's durable history.
	Event = dt.Event
	// EventType names an event.
	EventType = dt.EventType
	// WebhookEventSet is what a webhook subscription receives (final
	// states, alerts, event types).
	WebhookEventSet = dt.WebhookEventSet
)

// The process states.
const (
	Pending      = dt.Pending
	Processing   = dt.Processing
	Processed    = dt.Processed
	Error        = dt.Error
	Compensating = dt.Compensating
	Compensated  = dt.Compensated
	Cancelled    = dt.Cancelled
)

// The event types of the history.
const (
	EventSubmitted       = dt.EventSubmitted
	EventStepStarted     = dt.EventStepStarted
	EventStepProcessed   = dt.EventStepProcessed
	EventStepFailed      = dt.EventStepFailed
	EventStepTimedOut    = dt.EventStepTimedOut
	EventStepRetry       = dt.EventStepRetry
	EventStepAbandoned   = dt.EventStepAbandoned
	EventStepWaiting     = dt.EventStepWaiting
	EventSessionBlocked  = dt.EventSessionBlocked
	EventReplyDiscarded  = dt.EventReplyDiscarded
	EventCompensating    = dt.EventCompensating
	EventStepCompensated = dt.EventStepCompensated
	EventProcessed       = dt.EventProcessed
	EventCompensated     = dt.EventCompensated
	EventError           = dt.EventError
	EventCancelled       = dt.EventCancelled
	EventResubmitted     = dt.EventResubmitted
)

// The failure policies.
const (
	PolicyError      = dt.PolicyError
	PolicyCompensate = dt.PolicyCompensate
)

// Clock tells drover the time (any type with a Now() time.Time method);
// tests inject their own. It is the one clock type of every package of
// drover, so one value serves a Client, a convoy.Client and the server.
type Clock = clock.Clock

// AgentFunc is an agent's code: call the remote service for req and return the
// step's output. ctx ends at req.CompleteBy; pass req.IdempotencyKey to the
// service so a retried call is not applied twice. Wrap non-transient errors
// with Permanent.
type AgentFunc func(ctx context.Context, req *AgentRequest) ([]byte, error)

// RetryPolicy shapes an agent's retries inside the step's deadline:
// exponential backoff with jitter.
type RetryPolicy struct {
	InitialInterval time.Duration // default 50ms
	MaxInterval     time.Duration // default 5s
	MaxTries        uint          // 0: retry until CompleteBy
	// Retryable, when set, decides which errors are retried: an error it
	// returns false for fails the step at once, as a Permanent error does
	// (a Permanent error is never retried, whatever it says). Default:
	// every error that is not Permanent (or Config.IsPermanent) is.
	Retryable func(error) bool
}

// BreakerPolicy configures an agent's circuit breaker.
type BreakerPolicy struct {
	Failures uint32        // consecutive transient failures that open it; default 10
	OpenFor  time.Duration // how long it stays open before a trial call; default 2s
}

// Agent registers the code that runs the steps naming it.
type Agent struct {
	Name        string
	Func        AgentFunc
	Concurrency int // calls at once in this process; default 64
	Retry       RetryPolicy
	Breaker     BreakerPolicy
}
