package webhook

import (
	"net/http"
	"time"

	"github.com/drover-run/drover/droverclient"
)

// The signing scheme lives in the public package droverclient, so receivers
// written in Go verify webhooks with droverclient.VerifyWebhook; these are
// the dispatcher's names for it.

// Header names of a webhook request.
const (
	// HeaderEventID carries the ID of the event the webhook reports: the
	// same on every attempt, so receivers de-duplicate on it.
	HeaderEventID = droverclient.WebhookEventIDHeader
	// HeaderEventType carries the event type (processed, compensated,
	// error, cancelled).
	HeaderEventType = droverclient.WebhookEventTypeHeader
	// HeaderAttempt carries the attempt number, 1 for the first.
	HeaderAttempt = droverclient.WebhookAttemptHeader
	// HeaderSignature carries "t=<unix seconds>,v2=<hex HMAC-SHA256>".
	HeaderSignature = droverclient.WebhookSignatureHeader
)

// MinSecretBytes is the shortest secret a Dispatcher accepts.
const MinSecretBytes = droverclient.MinWebhookSecretBytes

// DefaultTolerance is the signature age Verify accepts when given a
// tolerance of 0.
const DefaultTolerance = droverclient.DefaultWebhookTolerance

// Errors of Verify; test them with errors.Is.
var (
	ErrNoSignature  = droverclient.ErrWebhookNoSignature
	ErrBadSignature = droverclient.ErrWebhookBadSignature
	ErrTimestamp    = droverclient.ErrWebhookTimestamp
)

// Sign returns the Drover-Signature header value of event eventID's body
// sent to url at t; see droverclient.SignWebhook.
func Sign(secret []byte, url, eventID string, body []byte, t time.Time) string {
	return droverclient.SignWebhook(secret, url, eventID, body, t)
}

// Verify checks a request received at url; see droverclient.VerifyWebhook.
func Verify(secret []byte, url string, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	return droverclient.VerifyWebhook(secret, url, h, body, now, tolerance)
}
