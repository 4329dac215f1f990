package webhook

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/drover-run/drover/droverapi"
	dt "github.com/drover-run/drover/drovertype"
)

// Payload is the JSON body of a webhook request (droverapi.WebhookPayload).
type Payload = droverapi.WebhookPayload

// SessionJSON names the session of a session queue's event.
type SessionJSON = droverapi.WebhookSession

// TaskJSON is the task in a Payload.
type TaskJSON = droverapi.WebhookTask

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
