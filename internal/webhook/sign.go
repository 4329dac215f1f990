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
	// HeaderID (webhook-id) carries the ID of the event the webhook
	// reports: the same on every attempt, so receivers de-duplicate on it.
	HeaderID = droverapi.WebhookIDHeader
	// HeaderTimestamp (webhook-timestamp) carries the attempt's time in
	// Unix seconds.
	HeaderTimestamp = droverapi.WebhookTimestampHeader
	// HeaderEventType carries the event type (processed, compensated,
	// error, cancelled).
	HeaderEventType = droverapi.WebhookEventTypeHeader
	// HeaderAttempt carries the attempt number, 1 for the first.
	HeaderAttempt = droverapi.WebhookAttemptHeader
	// HeaderSignature (webhook-signature) carries "v1,<base64 HMAC-SHA256>".
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

// Sign returns the signed headers (webhook-id, webhook-timestamp,
// webhook-signature) of event id's body sent to url at t; see
// droverapi.SignWebhook.
func Sign(secret []byte, url, id string, body []byte, t time.Time) http.Header {
	return droverapi.SignWebhook(secret, url, id, body, t)
}

// Verify checks a request received at url; see droverapi.VerifyWebhook.
func Verify(secret []byte, url string, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	return droverapi.VerifyWebhook(secret, url, h, body, now, tolerance)
}
