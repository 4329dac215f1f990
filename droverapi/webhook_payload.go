package droverapi

import (
	"encoding/json"
	"time"
)

// WebhookPayload is the JSON body of a webhook request. It is built once, when the
// delivery is queued, so every attempt sends the same bytes. Type, State,
// StepIndex, Alert, Message and OccurredAt come from the event; the rest is
// the task as it was when the delivery was queued (normally within a poll
// interval of the event). An event of a session queue (session_blocked)
// has no task: Task is null and Session names the session.
type WebhookPayload struct {
	// ID is the event ID, as in the webhook-id header: receivers
	// de-duplicate on it.
	ID   string `json:"id"`
	Type string `json:"type"` // processed, compensated, error, cancelled, or an alert's type
	// Subject is what the event is about: the task ID, or
	// "session:<queue>/<session>".
	Subject string `json:"subject"`
	// Namespace is the namespace of the task or session; absent: the
	// default namespace. IDs and names here are as the namespace's
	// callers know them (without the namespace).
	Namespace  string          `json:"namespace,omitempty"`
	TaskID     string          `json:"task_id"` // "" for a session's event
	Workflow   string          `json:"workflow"`
	State      string          `json:"state"`      // the task's state after the event
	StepIndex  int             `json:"step_index"` // the step the event is about; -1: the whole task
	Alert      bool            `json:"alert"`      // the event is an operator alert
	Output     json.RawMessage `json:"output"`     // the task's output; null when none
	LastError  string          `json:"last_error"` // why the task failed; "" when it did not
	Message    string          `json:"message"`    // the event's message (a cancel reason, an error, the next attempt of a wait)
	OccurredAt time.Time       `json:"occurred_at"`
	Task       *WebhookTask    `json:"task"`              // null for a session's event
	Session    *WebhookSession `json:"session,omitempty"` // a session's event only
}

// WebhookSession names the session of a session queue's event.
type WebhookSession struct {
	Queue string `json:"queue"`
	ID    string `json:"id"`
}

// WebhookTask is the task in a WebhookPayload: the fields of GET /v1/tasks/{id}
// without steps, lock and deadline (a final task holds none), and without
// the callback URL (which may carry a credential of its receiver's).
type WebhookTask struct {
	ID               string          `json:"id"`
	Workflow         string          `json:"workflow"`
	WorkflowVersion  int             `json:"workflow_version"`
	State            string          `json:"state"`
	Input            json.RawMessage `json:"input"`
	Output           json.RawMessage `json:"output"`
	LastError        string          `json:"last_error"`
	FailureCount     int             `json:"failure_count"`
	CurrentStep      int             `json:"current_step"`
	StepCount        int             `json:"step_count"`
	OrderingKey      string          `json:"ordering_key"`
	OrderingSeq      int64           `json:"ordering_seq"`
	FailureThreshold int             `json:"failure_threshold"`
	OnFailure        string          `json:"on_failure"`
	CreatedAt        time.Time       `json:"created_at"`
	UpdatedAt        time.Time       `json:"updated_at"`
}
