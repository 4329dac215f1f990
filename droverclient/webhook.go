package droverclient

import (
	"net/http"
	"time"

	"github.com/drover-run/drover/droverapi"
)

// The webhook signature scheme lives in droverapi, with the API's other
// wire definitions; these names forward to it so that receivers already
// written against droverclient keep compiling.

// Header names of a webhook request (docs/webhooks.md).
const (
	// WebhookIDHeader is droverapi.WebhookIDHeader.
	WebhookIDHeader = droverapi.WebhookIDHeader
	// WebhookTimestampHeader is droverapi.WebhookTimestampHeader.
	WebhookTimestampHeader = droverapi.WebhookTimestampHeader
	// WebhookEventTypeHeader is droverapi.WebhookEventTypeHeader.
	WebhookEventTypeHeader = droverapi.WebhookEventTypeHeader
	// WebhookAttemptHeader is droverapi.WebhookAttemptHeader.
	WebhookAttemptHeader = droverapi.WebhookAttemptHeader
	// WebhookSignatureHeader is droverapi.WebhookSignatureHeader.
	WebhookSignatureHeader = droverapi.WebhookSignatureHeader
)

// WebhookSecretPrefix is droverapi.WebhookSecretPrefix.
const WebhookSecretPrefix = droverapi.WebhookSecretPrefix

// MinWebhookSecretBytes is droverapi.MinWebhookSecretBytes.
const MinWebhookSecretBytes = droverapi.MinWebhookSecretBytes

// DefaultWebhookTolerance is droverapi.DefaultWebhookTolerance.
const DefaultWebhookTolerance = droverapi.DefaultWebhookTolerance

// Errors of VerifyWebhook; test them with errors.Is. They are droverapi's.
var (
	// ErrWebhookNoSignature is droverapi.ErrWebhookNoSignature.
	ErrWebhookNoSignature = droverapi.ErrWebhookNoSignature
	// ErrWebhookBadSignature is droverapi.ErrWebhookBadSignature.
	ErrWebhookBadSignature = droverapi.ErrWebhookBadSignature
	// ErrWebhookTimestamp is droverapi.ErrWebhookTimestamp.
	ErrWebhookTimestamp = droverapi.ErrWebhookTimestamp
)

// WebhookKey is droverapi.WebhookKey.
func WebhookKey(secret []byte, url string) []byte { return droverapi.WebhookKey(secret, url) }

// WebhookSecret is droverapi.WebhookSecret.
func WebhookSecret(secret []byte, url string) string { return droverapi.WebhookSecret(secret, url) }

// ParseWebhookSecret is droverapi.ParseWebhookSecret.
func ParseWebhookSecret(s string) ([]byte, error) { return droverapi.ParseWebhookSecret(s) }

// SignWebhook is droverapi.SignWebhook.
func SignWebhook(secret []byte, url, id string, body []byte, t time.Time) http.Header {
	return droverapi.SignWebhook(secret, url, id, body, t)
}

// VerifyWebhook is droverapi.VerifyWebhook.
func VerifyWebhook(secret []byte, url string, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	return droverapi.VerifyWebhook(secret, url, h, body, now, tolerance)
}

// VerifyWebhookKey is droverapi.VerifyWebhookKey.
func VerifyWebhookKey(key []byte, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	return droverapi.VerifyWebhookKey(key, h, body, now, tolerance)
}
