package drovertype

import "time"

// WebhookStatus is where a webhook delivery stands.
type WebhookStatus string

// The states of a webhook delivery.
const (
	// WebhookPending: not delivered yet; it is attempted (again) at
	// NextAttemptAt.
	WebhookPending WebhookStatus = "pending"
	// WebhookDelivered: the receiver answered an attempt with a 2xx status.
	WebhookDelivered WebhookStatus = "delivered"
	// WebhookFailed: the attempts ran out (MaxAttempts or MaxAge) without a
	// 2xx answer; LastError says why the last one failed.
	WebhookFailed WebhookStatus = "failed"
)

// Valid reports whether s is one of the defined statuses.
func (s WebhookStatus) Valid() bool {
	return s == WebhookPending || s == WebhookDelivered || s == WebhookFailed
}

// WebhookEvents are the event types that trigger webhooks: the task reached a
// final state.
var WebhookEvents = []EventType{EventProcessed, EventCompensated, EventError, EventCancelled}

// IsWebhookEvent reports whether events of type t are sent to webhooks.
func IsWebhookEvent(t EventType) bool {
	for _, w := range WebhookEvents {
		if w == t {
			return true
		}
	}
	return false
}

// WebhookDelivery is one webhook to send: one final-state event of a task
// to one URL (SAS-15). (EventID, URL) is unique, so an event is queued at
// most once per URL whatever the number of processes enqueuing.
type WebhookDelivery struct {
	ID        int64
	EventID   int64 // the event of the history it reports; Drover-Event-Id
	URL       string
	TaskID    string
	EventType EventType
	Payload   []byte // the JSON body, built once at enqueue: every attempt sends the same bytes

	// Attempts counts the attempts started: a claim increments it, so a
	// claim whose process died still counts.
	Attempts int
	// NextAttemptAt is when the delivery is due. While an attempt is in
	// flight it is the end of the claim's lease: a claim whose process
	// died is taken over once it passes.
	NextAttemptAt time.Time
	ClaimedBy     string // dispatcher instance of the attempt in flight; "" when none

	DeliveredAt *time.Time
	FailedAt    *time.Time
	LastError   string // why the last attempt failed; "" when none did
	LastStatus  int    // HTTP status of the last answer; 0 when none came

	CreatedAt time.Time
	UpdatedAt time.Time
}

// Status derives the delivery's status from DeliveredAt and FailedAt.
func (d *WebhookDelivery) Status() WebhookStatus {
	switch {
	case d.DeliveredAt != nil:
		return WebhookDelivered
	case d.FailedAt != nil:
		return WebhookFailed
	}
	return WebhookPending
}
