package webhook

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	dt "github.com/drover-run/drover/drovertype"
)

// Payload is the JSON body of a webhook request. It is built once, when the
// delivery is queued, so every attempt sends the same bytes. Type, State,
// StepIndex, Alert, Message and OccurredAt come from the event; the rest is
// the task as it was when the delivery was queued (normally within a poll
// interval of the event). An event of a session queue (session_blocked)
// has no task: Task is null and Session names the session.
type Payload struct {
	// ID is the event ID, as in the Drover-Event-Id header: receivers
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
	Task       *TaskJSON       `json:"task"`              // null for a session's event
	Session    *SessionJSON    `json:"session,omitempty"` // a session's event only
}

// SessionJSON names the session of a session queue's event.
type SessionJSON struct {
	Queue string `json:"queue"`
	ID    string `json:"id"`
}

// SessionOf returns the session of an event subject of the form
// "session:<queue>/<session>" (dt.SessionSubject), and whether it is one.
func SessionOf(subject string) (SessionJSON, bool) {
	// A namespace's session subject starts "<ns>/".
	rest, ok := strings.CutPrefix(dt.LocalName(subject), "session:")
	if !ok {
		return SessionJSON{}, false
	}
	// Queue names have no "/"; session IDs may.
	q, id, ok := strings.Cut(rest, "/")
	return SessionJSON{Queue: q, ID: id}, ok
}

// TaskJSON is the task in a Payload: the fields of GET /v1/tasks/{id}
// without steps, lock and deadline (a final task holds none), and without
// the callback URL (which may carry a credential of its receiver's).
type TaskJSON struct {
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

// jsonOrString returns b as raw JSON if it is valid JSON, as a JSON string
// otherwise, and null when b is empty (as the HTTP API does).
func jsonOrString(b []byte) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("null")
	}
	if json.Valid(b) {
		return json.RawMessage(b)
	}
	s, _ := json.Marshal(string(b))
	return s
}

// BuildPayload returns the body of the webhook for event ev of task t (nil
// for an event of a session).
func BuildPayload(ev *dt.Event, t *dt.Task) ([]byte, error) {
	p := Payload{
		ID: strconv.FormatInt(ev.ID, 10), Type: string(ev.Type), Subject: dt.LocalName(ev.TaskID), State: string(ev.State),
		Namespace: dt.NamespaceOf(ev.TaskID),
		StepIndex: ev.StepIndex, Alert: ev.Alert, Output: json.RawMessage("null"), Message: ev.Message,
		OccurredAt: ev.CreatedAt.UTC(),
	}
	if s, ok := SessionOf(ev.TaskID); ok {
		p.Session = &s
	}
	if t != nil {
		if p.State == "" {
			p.State = string(t.ProcessState)
		}
		p.TaskID, p.Workflow, p.Output, p.LastError = dt.LocalName(t.ID), t.Workflow, jsonOrString(t.Output), t.LastError
		p.Task = &TaskJSON{
			ID: dt.LocalName(t.ID), Workflow: t.Workflow, WorkflowVersion: t.WorkflowVersion, State: string(t.ProcessState),
			Input: jsonOrString(t.Input), Output: jsonOrString(t.Output), LastError: t.LastError,
			FailureCount: t.FailureCount, CurrentStep: t.CurrentStep, StepCount: t.StepCount,
			OrderingKey: dt.LocalOrderingKey(t.OrderingKey), OrderingSeq: t.OrderingSeq, FailureThreshold: t.FailureThreshold,
			OnFailure: string(t.OnFailure), CreatedAt: t.CreatedAt.UTC(), UpdatedAt: t.UpdatedAt.UTC(),
		}
	}
	b, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("webhook: payload of event %d: %w", ev.ID, err)
	}
	return b, nil
}
