package droverapi

import (
	"encoding/json"
	"time"
)

// Queue is a session queue and its policy.
type Queue struct {
	Name             string    `json:"name"`
	MaxDeliveryCount int       `json:"max_delivery_count"`
	PoisonPolicy     string    `json:"poison_policy"` // "block" or "skip"
	DedupeWindowMS   int64     `json:"dedupe_window_ms"`
	LockDurationMS   int64     `json:"lock_duration_ms"`
	CreatedAt        time.Time `json:"created_at"`
	UpdatedAt        time.Time `json:"updated_at"`
}

// QueueList is a page of GET /v1/queues.
type QueueList struct {
	Queues []Queue `json:"queues"`
	// NextAfter is the after parameter of the next page; "" at the end.
	NextAfter string `json:"next_after"`
}

// Session is one session of a queue.
type Session struct {
	Queue string `json:"queue"`
	ID    string `json:"id"`
	// NextSeq is the sequence number the next published message gets.
	NextSeq     int64           `json:"next_seq"`
	Pending     int             `json:"pending"`
	ReadyAt     *time.Time      `json:"ready_at"`
	LockHolder  string          `json:"lock_holder"`
	LockedUntil *time.Time      `json:"locked_until"`
	State       json.RawMessage `json:"state"`
	Closed      bool            `json:"closed"`
	Blocked     bool            `json:"blocked"`
	CreatedAt   time.Time       `json:"created_at"`
	UpdatedAt   time.Time       `json:"updated_at"`
}

// SessionList is a page of GET /v1/queues/{queue}/sessions.
type SessionList struct {
	Sessions []Session `json:"sessions"`
	// NextAfter is the after parameter of the next page; "" at the end.
	NextAfter string `json:"next_after"`
}

// Message is a stored message of a session (pending or dead-lettered).
type Message struct {
	Queue     string `json:"queue"`
	SessionID string `json:"session_id"`
	Seq       int64  `json:"seq"`
	MessageID string `json:"message_id"`
	// Body is the JSON the message was published with (a body that is not
	// JSON comes as a JSON string).
	Body          json.RawMessage `json:"body"`
	DeliveryCount int             `json:"delivery_count"`
	EndOfSequence bool            `json:"end_of_sequence"`
	AvailableAt   time.Time       `json:"available_at"`
	Dead          bool            `json:"dead"`
	DeadReason    string          `json:"dead_reason"`
	DeadAt        *time.Time      `json:"dead_at"`
	EnqueuedAt    time.Time       `json:"enqueued_at"`
}

// MessageList is a page of a session's messages.
type MessageList struct {
	Messages []Message `json:"messages"`
	// NextFromSeq is the from_seq parameter of the next page; 0 at the end.
	NextFromSeq int64 `json:"next_from_seq"`
}

// DeadLetterCursor is where the next page of dead letters starts.
type DeadLetterCursor struct {
	AfterSession string `json:"after_session"`
	AfterSeq     int64  `json:"after_seq"`
}

// DeadLetterList is a page of a queue's dead letters.
type DeadLetterList struct {
	DeadLetters []Message `json:"dead_letters"`
	// Next is nil at the end.
	Next *DeadLetterCursor `json:"next"`
}

// DeadLetterAction is the answer of a dead letter's resubmit or discard.
// (Its fields are in name order, as the server has always sent them.)
type DeadLetterAction struct {
	Action    string `json:"action"`
	Queue     string `json:"queue"`
	Seq       int64  `json:"seq"`
	SessionID string `json:"session_id"`
}

// PublishMessage is one message of POST /v1/queues/{queue}/messages.
type PublishMessage struct {
	// SessionID is the session the message belongs to (required).
	SessionID string `json:"session_id"`
	// Body is any JSON value (required).
	Body json.RawMessage `json:"body"`
	// MessageID de-duplicates within the queue's dedupe window.
	MessageID string `json:"message_id,omitempty"`
	// EndOfSequence closes the session after this message.
	EndOfSequence bool `json:"end_of_sequence,omitempty"`
	// NotBefore delays the message's delivery.
	NotBefore *time.Time `json:"not_before,omitempty"`
}

// PublishRequest is the body of POST /v1/queues/{queue}/messages: one
// message's fields, or Messages (a batch), never both.
type PublishRequest struct {
	SessionID     *string          `json:"session_id,omitempty"`
	Body          json.RawMessage  `json:"body,omitempty"`
	MessageID     *string          `json:"message_id,omitempty"`
	EndOfSequence *bool            `json:"end_of_sequence,omitempty"`
	NotBefore     *time.Time       `json:"not_before,omitempty"`
	Messages      []PublishMessage `json:"messages,omitempty"`
}

// Published is the outcome of one published message.
type Published struct {
	SessionID string `json:"session_id"`
	Seq       int64  `json:"seq"`
	// Duplicate: a message with the same ID was published within the
	// dedupe window; nothing was stored and Seq is the first one's.
	Duplicate bool `json:"duplicate"`
}

// PublishResult is the answer of a publish, in the order of the request's
// messages.
type PublishResult struct {
	Published []Published `json:"published"`
}

// PolicyChange is the body of PUT /v1/queues/{queue}: the fields to
// change; nil fields keep their value.
type PolicyChange struct {
	MaxDeliveryCount *int    `json:"max_delivery_count,omitempty"`
	PoisonPolicy     *string `json:"poison_policy,omitempty"` // "block" or "skip"
	// DedupeWindowMS of 0 turns de-duplication off.
	DedupeWindowMS *int64 `json:"dedupe_window_ms,omitempty"`
	LockDurationMS *int64 `json:"lock_duration_ms,omitempty"` // 10 to 86400000
}
