package drovertype

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

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

// WebhookEvents are the event types of a task reaching a final state: what a
// webhook subscription receives by default (the selector "final").
var WebhookEvents = []EventType{EventProcessed, EventCompensated, EventError, EventCancelled}

// IsWebhookEvent reports whether t is the type of a final-state event.
func IsWebhookEvent(t EventType) bool { return slices.Contains(WebhookEvents, t) }

// Selectors of a WebhookEventSet besides event types.
const (
	// WebhookSelectFinal selects the final-state events (WebhookEvents).
	WebhookSelectFinal = "final"
	// WebhookSelectAlerts selects every operator alert: an event with
	// Alert set, of a task or of a session.
	WebhookSelectAlerts = "alerts"
)

// WebhookAlertEvents are the event types a webhook subscription may name
// besides the final-state ones: the alert kinds.
var WebhookAlertEvents = []EventType{EventStepFailed, EventStepWaiting, EventSessionBlocked}

// WebhookEventSet is what a webhook subscription receives: selectors, each
// "final", "alerts" or an event type of WebhookEvents or WebhookAlertEvents,
// sorted and without repeats (ParseWebhookEvents). Empty means final.
type WebhookEventSet []string

// ParseWebhookEvents checks selectors and returns them as a set. Empty
// input (or only "final") gives the empty set: final states.
func ParseWebhookEvents(selectors []string) (WebhookEventSet, error) {
	var out WebhookEventSet
	for _, s := range selectors {
		switch {
		case s == WebhookSelectFinal || s == WebhookSelectAlerts ||
			IsWebhookEvent(EventType(s)) || slices.Contains(WebhookAlertEvents, EventType(s)):
		case s == "":
			return nil, fmt.Errorf("an empty event selector")
		default:
			return nil, fmt.Errorf("unknown event selector %q: want %s, %s or an event type (%s)", s,
				WebhookSelectFinal, WebhookSelectAlerts, strings.Join(webhookTypes(), ", "))
		}
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	if len(out) == 1 && out[0] == WebhookSelectFinal {
		return nil, nil
	}
	return out, nil
}

func webhookTypes() []string {
	var out []string
	for _, t := range append(slices.Clone(WebhookEvents), WebhookAlertEvents...) {
		out = append(out, string(t))
	}
	return out
}

// SplitWebhookEvents parses a comma-separated list of selectors (the
// stored and command-line form).
func SplitWebhookEvents(list string) (WebhookEventSet, error) {
	if strings.TrimSpace(list) == "" {
		return nil, nil
	}
	parts := strings.Split(list, ",")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return ParseWebhookEvents(parts)
}

// String is the comma-separated form of the set; "" for final states.
func (s WebhookEventSet) String() string { return strings.Join(s, ",") }

// Matches reports whether the set selects event e.
func (s WebhookEventSet) Matches(e *Event) bool {
	if len(s) == 0 {
		return IsWebhookEvent(e.Type)
	}
	for _, sel := range s {
		switch sel {
		case WebhookSelectFinal:
			if IsWebhookEvent(e.Type) {
				return true
			}
		case WebhookSelectAlerts:
			if e.Alert {
				return true
			}
		default:
			if EventType(sel) == e.Type {
				return true
			}
		}
	}
	return false
}

// Union returns the events either set selects.
func (s WebhookEventSet) Union(o WebhookEventSet) WebhookEventSet {
	a, b := s, o
	if len(a) == 0 {
		a = WebhookEventSet{WebhookSelectFinal}
	}
	if len(b) == 0 {
		b = WebhookEventSet{WebhookSelectFinal}
	}
	u, _ := ParseWebhookEvents(append(slices.Clone(a), b...))
	return u
}

// WebhookCandidate reports whether some WebhookEventSet could select e: it
// is a final-state event or an alert (every selector picks one of those).
func WebhookCandidate(e *Event) bool { return e.Alert || IsWebhookEvent(e.Type) }

// WebhookDelivery is one webhook to send: one event (a task's final state,
// or an alert) to one URL. (EventID, URL) is unique, so an event is queued
// at most once per URL whatever the number of processes enqueuing.
type WebhookDelivery struct {
	ID        int64
	EventID   int64 // the event of the history it reports; the webhook-id header
	URL       string
	TaskID    string // the event's subject: a task ID, or "session:<queue>/<session>"
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
