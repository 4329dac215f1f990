package droverapi

import (
	"encoding/json"
	"time"
)

// PollRequest is the body of a remote agent's poll. Both fields are
// optional.
type PollRequest struct {
	// Max is the most requests to take (default 1, at most 100).
	Max *int `json:"max,omitempty"`
	// WaitMS is how long to wait for one (default 30000, at most 60000).
	WaitMS *int64 `json:"wait_ms,omitempty"`
}

// AgentRequest is one request handed to a remote agent by a poll.
type AgentRequest struct {
	// ID and Token identify the request and the claim on it: complete and
	// fail send them back.
	ID    int64  `json:"id"`
	Token string `json:"token"`

	Agent     string `json:"agent"`
	TaskID    string `json:"task_id"`
	Workflow  string `json:"workflow"`
	StepIndex int    `json:"step_index"`
	StepName  string `json:"step_name"`
	// Kind is "do", or "compensate" for undoing a step that completed.
	Kind string `json:"kind"`
	// Attempt is the step's attempt; a retry after a timeout is a new
	// attempt with a new token.
	Attempt int `json:"attempt"`
	// IdempotencyKey is the same for every attempt of the step: pass it to
	// the remote service so that a redone call has no second effect.
	IdempotencyKey string `json:"idempotency_key"`
	// CompleteBy is the deadline: a completion at or after it is refused.
	CompleteBy time.Time `json:"complete_by"`

	// Input is the step's input, PreviousOutput the output of the step
	// before (null for the first), StepOutput, for a compensation, the
	// output of the step being undone.
	Input          json.RawMessage `json:"input"`
	PreviousOutput json.RawMessage `json:"previous_output"`
	StepOutput     json.RawMessage `json:"step_output"`

	// Traceparent and Tracestate are the W3C trace context of the task
	// when it is traced (absent otherwise): an agent's span of the call
	// continues the task's trace as their child (droverclient.RunAgent
	// does, with a tracer provider).
	Traceparent string `json:"traceparent,omitempty"`
	Tracestate  string `json:"tracestate,omitempty"`
}

// PollResult is the answer of a poll: the requests taken, maybe none.
type PollResult struct {
	Requests []AgentRequest `json:"requests"`
}

// CompleteRequest is the body of a request's complete.
type CompleteRequest struct {
	Token  string          `json:"token"`
	Output json.RawMessage `json:"output"`
}

// FailRequest is the body of a request's fail.
type FailRequest struct {
	Token string `json:"token"`
	Error string `json:"error"`
	// Permanent ends the step's retries at once.
	Permanent bool `json:"permanent"`
}

// Accepted is the answer of a complete or a fail.
type Accepted struct {
	Accepted bool `json:"accepted"`
}
