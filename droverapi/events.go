package droverapi

import "time"

// Event is one event of the history (GET /v1/events, a task's or a
// session's stream).
type Event struct {
	ID int64 `json:"id"`
	// Subject is the task ID, or "session:<queue>/<session>".
	Subject string `json:"subject"`
	// StepIndex is the step the event is about; -1: the whole task.
	StepIndex int    `json:"step_index"`
	Type      string `json:"type"`
	State     string `json:"state"`
	// Alert marks an operator alert.
	Alert     bool      `json:"alert"`
	Actor     string    `json:"actor"`
	Attempt   int       `json:"attempt"`
	Message   string    `json:"message"`
	CreatedAt time.Time `json:"created_at"`
}

// EventList is a page of GET /v1/events.
type EventList struct {
	Events []Event `json:"events"`
	// NextAfter is the after parameter of the next page; 0 when the page
	// is not full.
	NextAfter int64 `json:"next_after"`
}

// End is the data of a task stream's last event, "end": the task is final.
type End struct {
	Subject string `json:"subject"`
	State   string `json:"state"`
}

// Alert is an operator alert (GET /v1/alerts).
type Alert struct {
	ID int64 `json:"id"`
	// Subject is the task ID, or "session:<queue>/<session>".
	Subject   string    `json:"subject"`
	StepIndex int       `json:"step_index"`
	Type      string    `json:"type"`
	State     string    `json:"state"`
	Actor     string    `json:"actor"`
	Attempt   int       `json:"attempt"`
	Message   string    `json:"message"`
	CreatedAt time.Time `json:"created_at"`
	// Acknowledged is nil while the alert is open.
	Acknowledged *Ack `json:"acknowledged"`
}

// Ack is an alert's acknowledgement.
type Ack struct {
	EventID int64     `json:"event_id"`
	Actor   string    `json:"actor"`
	At      time.Time `json:"at"`
}

// AlertList is a page of GET /v1/alerts.
type AlertList struct {
	Alerts []Alert `json:"alerts"`
	// NextAfter is the after parameter of the next page; 0 at the end.
	NextAfter int64 `json:"next_after"`
}

// Error is the body of every error response.
type Error struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is what went wrong: a machine-readable code (such as
// invalid_field, not_found, stale_token) and a message naming the
// offending field or parameter.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Status is the answer of /healthz ("ok") and /readyz ("ready").
type Status struct {
	Status string `json:"status"`
}
