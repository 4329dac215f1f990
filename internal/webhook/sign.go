package webhook

import (
	"net/http"
	"time"

	"github.com/drover-run/drover/droverapi"
)

// The signing scheme lives in the public package droverapi, so receivers
// written in Go verify webhooks with droverapi.VerifyWebhook; these are
// the dispatcher's names for it.

// Header names of a webhook request.
const (
	// HeaderEventID carries the ID of the event the webhook reports: the
	// same on every attempt, so receivers de-duplicate on it.
	HeaderEventID = droverapi.WebhookEventIDHeader
	// HeaderEventType carries the event type (processed, compensated,
	// error, cancelled).
	HeaderEventType = droverapi.WebhookEventTypeHeader
	// HeaderAttempt carries the attempt number, 1 for the first.
	HeaderAttempt = droverapi.WebhookAttemptHeader
	// HeaderSignature carries "t=<unix seconds>,v2=<hex HMAC-SHA256>".
	HeaderSignature = droverapi.WebhookSignatureHeader
)

// MinSecretBytes is the shortest secret a Dispatcher accepts.
const MinSecretBytes = droverapi.MinWebhookSecretBytes

// DefaultTolerance is the signature age Verify accepts when given a
// tolerance of 0.
const DefaultTolerance = droverapi.DefaultWebhookTolerance

// Errors of Verify; test them with errors.Is.
var (
	ErrNoSignature  = droverapi.ErrWebhookNoSignature
	ErrBadSignature = droverapi.ErrWebhookBadSignature
	ErrTimestamp    = droverapi.ErrWebhookTimestamp
)

// Sign returns the Drover-Signature header value of event eventID's body
// sent to url at t; see droverapi.SignWebhook.
func Sign(secret []byte, url, eventID string, body []byte, t time.Time) string {
	return droverapi.SignWebhook(secret, url, eventID, body, t)
}

// Verify checks a request received at url; see droverapi.VerifyWebhook.
func Verify(secret []byte, url string, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	return droverapi.VerifyWebhook(secret, url, h, body, now, tolerance)
}
