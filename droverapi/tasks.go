package droverapi

import (
	"encoding/json"
	"time"
)

// Task is a task as the API returns it (GET /v1/tasks/{id} and the answer
// of submit, resubmit and cancel). Steps is set only on a single task's
// read and on submit's answer.
type Task struct {
	ID       string `json:"id"`
	Workflow string `json:"workflow"`
	// WorkflowVersion is the version of a declarative workflow the task
	// runs; 0 (absent) for a workflow defined in Go.
	WorkflowVersion int             `json:"workflow_version,omitempty"`
	State           string          `json:"state"`
	Input           json.RawMessage `json:"input"`
	Output          json.RawMessage `json:"output"`
	LastError       string          `json:"last_error"`
	LockedBy        string          `json:"locked_by"`
	CompleteBy      *time.Time      `json:"complete_by"`
	FailureCount    int             `json:"failure_count"`
	CurrentStep     int             `json:"current_step"`
	StepCount       int             `json:"step_count"`
	OrderingKey     string          `json:"ordering_key"`
	OrderingSeq     int64           `json:"ordering_seq"`
	// Priority orders the tasks waiting to start: from 0 (lowest) to 10.
	Priority int `json:"priority"`
	// CallbackURL receives a signed webhook when the task is final.
	CallbackURL string `json:"callback_url,omitempty"`
	// CallbackEvents is what CallbackURL receives besides final states
	// ("alerts", event types); absent: final states only.
	CallbackEvents   []string `json:"callback_events,omitempty"`
	FailureThreshold int      `json:"failure_threshold"`
	OnFailure        string   `json:"on_failure"`
	RetryDelayMS     int64    `json:"retry_delay_ms"`
	// Wait is the task's extended-wait policy; absent: the task does not wait.
	Wait        *WaitPolicy `json:"wait,omitempty"`
	AvailableAt time.Time   `json:"available_at"`
	CreatedAt   time.Time   `json:"created_at"`
	UpdatedAt   time.Time   `json:"updated_at"`
	Steps       []Step      `json:"steps,omitempty"`
}

// Task states, as the API spells them (drover.ProcessState).
const (
	StatePending      = "Pending"
	StateProcessing   = "Processing"
	StateProcessed    = "Processed"
	StateError        = "Error"
	StateCompensating = "Compensating"
	StateCompensated  = "Compensated"
	StateCancelled    = "Cancelled"
)

// Final reports whether the task is in a final state (Processed, Error,
// Compensated or Cancelled).
func (t *Task) Final() bool {
	switch t.State {
	case StateProcessed, StateError, StateCompensated, StateCancelled:
		return true
	}
	return false
}

// Step is one step of a Task.
type Step struct {
	Index             int             `json:"index"`
	Name              string          `json:"name"`
	Agent             string          `json:"agent"`
	Compensation      string          `json:"compensation"`
	TimeoutMS         int64           `json:"timeout_ms"`
	State             string          `json:"state"`
	CompensationState string          `json:"compensation_state"`
	LockedBy          string          `json:"locked_by"`
	CompleteBy        *time.Time      `json:"complete_by"`
	FailureCount      int             `json:"failure_count"`
	Attempt           int             `json:"attempt"`
	IdempotencyKey    string          `json:"idempotency_key"`
	Output            json.RawMessage `json:"output"`
	LastError         string          `json:"last_error"`
	StartedAt         *time.Time      `json:"started_at"`
	FinishedAt        *time.Time      `json:"finished_at"`
	UpdatedAt         time.Time       `json:"updated_at"`
	// OnFailure and Wait are the step's own policies; absent: the task's.
	OnFailure string      `json:"on_failure,omitempty"`
	Wait      *WaitPolicy `json:"wait,omitempty"`
	// Signal names the signal a signal step waits for; absent for an
	// agent's step. SignalDefault is its default outcome at the deadline;
	// absent: the deadline fails the step.
	Signal        string          `json:"signal,omitempty"`
	SignalDefault json.RawMessage `json:"signal_default,omitempty"`
	// Group names the parallel group the step is a branch of; absent for
	// a step of its own.
	Group string `json:"group,omitempty"`
	// FinishSeq numbers the task's steps in the order they completed;
	// absent while the step has not completed.
	FinishSeq int `json:"finish_seq,omitempty"`
}

// WaitPolicy is the extended wait of a task or step (drover.WaitPolicy)
// in milliseconds.
type WaitPolicy struct {
	MaxWaits   int     `json:"max_waits"`
	DelayMS    int64   `json:"delay_ms"`
	Multiplier float64 `json:"multiplier"`
	MaxDelayMS int64   `json:"max_delay_ms"`
}

// SubmitRequest is the body of POST /v1/tasks.
type SubmitRequest struct {
	// Workflow is the registered workflow to run.
	Workflow string `json:"workflow"`
	// Input is the task's input; any JSON value.
	Input json.RawMessage `json:"input"`
	// ID makes the submit idempotent: the same ID and input again
	// returns the existing task (200 instead of 201). Empty: the server
	// picks one.
	ID string `json:"id,omitempty"`
	// OrderingKey runs the tasks sharing it one at a time, in submit
	// order.
	OrderingKey string `json:"ordering_key,omitempty"`
	// CallbackURL receives a signed webhook when the task is final.
	CallbackURL string `json:"callback_url,omitempty"`
	// CallbackEvents chooses what CallbackURL receives: "final",
	// "alerts", event types. Absent: final.
	CallbackEvents []string `json:"callback_events,omitempty"`
	// RunAt delays the task until this time (RFC 3339): it waits Pending,
	// unclaimed, and can be cancelled meanwhile. Not with DelayMS.
	RunAt *time.Time `json:"run_at,omitempty"`
	// DelayMS delays the task by this many milliseconds from the submit.
	DelayMS *int64 `json:"delay_ms,omitempty"`
	// Priority is the task's priority, from 0 (lowest) to 10; absent: its
	// workflow's. Higher priorities start first among waiting tasks, aged
	// one minute per level so that lower ones are not starved.
	Priority *int `json:"priority,omitempty"`
}

// TaskList is a page of GET /v1/tasks.
type TaskList struct {
	Tasks []Task `json:"tasks"`
	// NextAfter is the after parameter of the next page; "" at the end.
	NextAfter string `json:"next_after"`
}

// ResubmitRequest is the optional body of POST /v1/tasks/{id}/resubmit.
type ResubmitRequest struct {
	// FromStep restarts the task at this step; nil: at the step that
	// failed.
	FromStep *int `json:"from_step,omitempty"`
}

// SignalRequest is the optional body of POST /v1/tasks/{id}/signals/{name}.
type SignalRequest struct {
	// ID de-duplicates: a signal with the ID of one the task already has
	// (of the same name) is ignored. Empty: the server draws one.
	ID string `json:"id,omitempty"`
	// Payload becomes the output of the step waiting for the signal; any
	// JSON value, null when absent.
	Payload json.RawMessage `json:"payload,omitempty"`
}

// SignalResult answers POST /v1/tasks/{id}/signals/{name}.
type SignalResult struct {
	Name string `json:"name"`
	ID   string `json:"id"`
	// Duplicate: the task already had a signal of this name and ID, so
	// this one was ignored (status 200; a stored signal: 201).
	Duplicate bool `json:"duplicate"`
	// Delivered: the task's current step was waiting for this signal and
	// completed with it; else the signal is kept for a step that waits for
	// it later.
	Delivered bool `json:"delivered"`
	Task      Task `json:"task"`
}

// CancelRequest is the optional body of POST /v1/tasks/{id}/cancel.
type CancelRequest struct {
	Reason string `json:"reason,omitempty"`
}
