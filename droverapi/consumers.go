package droverapi

import (
	"encoding/json"
	"time"
)

// AcceptRequest is the body of POST /v1/queues/{queue}/sessions:accept.
// Both fields are optional: without Session the next available session is
// accepted, waiting up to WaitMS (default 0).
type AcceptRequest struct {
	Session *string `json:"session,omitempty"`
	WaitMS  *int64  `json:"wait_ms,omitempty"`
}

// Lease is the answer of an accept: the session held and the lock token
// that proves it. Session is nil when no session came within the wait.
type Lease struct {
	Queue          string     `json:"queue,omitempty"`
	Session        *string    `json:"session"`
	LockToken      string     `json:"lock_token,omitempty"`
	LockedUntil    *time.Time `json:"locked_until,omitempty"`
	LockDurationMS int64      `json:"lock_duration_ms,omitempty"`
}

// ReceiveRequest is the body of POST .../sessions/{session}/receive.
type ReceiveRequest struct {
	LockToken *string `json:"lock_token,omitempty"`
	WaitMS    *int64  `json:"wait_ms,omitempty"`
}

// ReceivedMessage is the head message of a leased session.
type ReceivedMessage struct {
	Queue     string `json:"queue"`
	SessionID string `json:"session_id"`
	Seq       int64  `json:"seq"`
	MessageID string `json:"message_id"`
	// Body is the JSON the message was published with (a body that is not
	// JSON comes as a JSON string).
	Body          json.RawMessage `json:"body"`
	DeliveryCount int             `json:"delivery_count"`
	EndOfSequence bool            `json:"end_of_sequence"`
	EnqueuedAt    time.Time       `json:"enqueued_at"`
	AvailableAt   time.Time       `json:"available_at"`
	// Traceparent and Tracestate are the W3C trace context of the
	// message's publish span when it was traced (absent otherwise), for
	// the consumer's spans of it.
	Traceparent string `json:"traceparent,omitempty"`
	Tracestate  string `json:"tracestate,omitempty"`
}

// ReceiveResult is the answer of a receive: Message, or nil when none came
// within the wait. Blocked: the session is halted by a dead letter
// (nothing to receive until an operator resolves it); Ended: its
// end-of-sequence message was settled. Either way release the session.
type ReceiveResult struct {
	Message *ReceivedMessage `json:"message"`
	Blocked bool             `json:"blocked"`
	Ended   bool             `json:"ended"`
}

// SettleRequest is the body of POST .../sessions/{session}/settle.
type SettleRequest struct {
	LockToken *string `json:"lock_token,omitempty"`
	Seq       *int64  `json:"seq,omitempty"`
	// Outcome is "complete", "abandon" or "dead_letter".
	Outcome *string `json:"outcome,omitempty"`
	// Reason is a dead letter's reason.
	Reason *string `json:"reason,omitempty"`
	// DelayMS delays an abandoned message's next delivery.
	DelayMS *int64 `json:"delay_ms,omitempty"`
}

// SettleResult is the answer of a settle. (Its fields are in name order,
// as the server has always sent them.)
type SettleResult struct {
	Outcome   string `json:"outcome"`
	Queue     string `json:"queue"`
	Seq       int64  `json:"seq"`
	SessionID string `json:"session_id"`
}

// LockRequest is the body of a renew or a release.
type LockRequest struct {
	LockToken *string `json:"lock_token,omitempty"`
}

// LockRenewed is the answer of a renew.
type LockRenewed struct {
	LockedUntil time.Time `json:"locked_until"`
	Queue       string    `json:"queue"`
	SessionID   string    `json:"session_id"`
}

// LockReleased is the answer of a release.
type LockReleased struct {
	Queue     string `json:"queue"`
	Released  bool   `json:"released"`
	SessionID string `json:"session_id"`
}
