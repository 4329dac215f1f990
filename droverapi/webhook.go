package droverapi

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Header names of a webhook request (docs/webhooks.md). The first three
// are those of the Standard Webhooks specification
// (https://www.standardwebhooks.com), so receivers verify requests with
// any of its libraries; the Drover-* ones are informational and not signed.
const (
	// WebhookIDHeader (webhook-id) carries the ID of the event the webhook
	// reports: the same on every attempt, so receivers de-duplicate on it.
	WebhookIDHeader = "webhook-id"
	// WebhookTimestampHeader (webhook-timestamp) carries the time of the
	// attempt in Unix seconds; it is signed.
	WebhookTimestampHeader = "webhook-timestamp"
	// WebhookSignatureHeader (webhook-signature) carries space-separated
	// "v1,<base64 HMAC-SHA256>" signatures (SignWebhook).
	WebhookSignatureHeader = "webhook-signature"
	// WebhookEventTypeHeader carries the event type (processed, compensated,
	// error, cancelled, or an alert's type).
	WebhookEventTypeHeader = "Drover-Event-Type"
	// WebhookAttemptHeader carries the attempt number, 1 for the first.
	WebhookAttemptHeader = "Drover-Delivery-Attempt"
)

// WebhookSecretPrefix starts a Standard Webhooks secret (WebhookSecret).
const WebhookSecretPrefix = "whsec_"

// MinWebhookSecretBytes is the shortest secret a Dispatcher accepts.
const MinWebhookSecretBytes = 16

// DefaultWebhookTolerance is how far from now VerifyWebhook accepts a
// webhook-timestamp when given a tolerance of 0, as the Standard Webhooks
// libraries do.
const DefaultWebhookTolerance = 5 * time.Minute

// Errors of VerifyWebhook; test them with errors.Is.
var (
	// ErrWebhookNoSignature: the webhook-signature header is missing or
	// has no v1 signature.
	ErrWebhookNoSignature = errors.New("droverapi: webhook: no signature")
	// ErrWebhookBadSignature: no v1 signature matches the key, the
	// webhook-id, the webhook-timestamp and the body (or the webhook-id
	// header is missing).
	ErrWebhookBadSignature = errors.New("droverapi: webhook: signature does not match")
	// ErrWebhookTimestamp: the webhook-timestamp header is missing,
	// malformed or further from now than the tolerance (a replayed request).
	ErrWebhookTimestamp = errors.New("droverapi: webhook: timestamp out of tolerance")
)

// WebhookKey returns the key that signs the webhooks sent to url:
// HMAC-SHA256(secret, url), with url exactly as drover was given it (the
// task's callback URL, or a --webhook-url without its #events= part). Each
// destination has its own key, so a request one receiver got does not
// verify at another; and an operator gives a receiver its key
// (WebhookSecret) instead of the server's secret.
func WebhookKey(secret []byte, url string) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(url))
	return m.Sum(nil)
}

// WebhookSecret returns the Standard Webhooks secret of the receiver at
// url: "whsec_" followed by the standard base64 of WebhookKey(secret, url).
// A receiver configures it in any Standard Webhooks library (or decodes
// it with ParseWebhookSecret for VerifyWebhookKey).
func WebhookSecret(secret []byte, url string) string {
	return WebhookSecretPrefix + base64.StdEncoding.EncodeToString(WebhookKey(secret, url))
}

// ParseWebhookSecret returns the key of a Standard Webhooks secret
// ("whsec_<base64>", the prefix optional, as the libraries accept it).
func ParseWebhookSecret(s string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(strings.TrimSpace(s), WebhookSecretPrefix))
	if err != nil {
		return nil, fmt.Errorf("droverapi: webhook secret: not %s followed by base64: %w", WebhookSecretPrefix, err)
	}
	if len(key) == 0 {
		return nil, fmt.Errorf("droverapi: webhook secret: empty key")
	}
	return key, nil
}

// webhookSignature is base64(HMAC-SHA256(key, "<id>.<t>.<body>")).
func webhookSignature(key []byte, id string, t int64, body []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id))
	m.Write([]byte{'.'})
	m.Write([]byte(strconv.FormatInt(t, 10)))
	m.Write([]byte{'.'})
	m.Write(body)
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// SignWebhook returns the signed headers of the webhook of event id with
// body, sent to url at t (Standard Webhooks):
//
//	webhook-id: <id>
//	webhook-timestamp: <unix seconds>
//	webhook-signature: v1,<base64 HMAC-SHA256(WebhookKey(secret, url), "<id>.<unix seconds>.<body>")>
//
// The destination (through the key), the event ID and the timestamp are
// signed with the body: a captured request cannot be sent to another
// receiver, under another event ID, or later.
func SignWebhook(secret []byte, url, id string, body []byte, t time.Time) http.Header {
	ts := t.Unix()
	h := http.Header{}
	h.Set(WebhookIDHeader, id)
	h.Set(WebhookTimestampHeader, strconv.FormatInt(ts, 10))
	h.Set(WebhookSignatureHeader, "v1,"+webhookSignature(WebhookKey(secret, url), id, ts, body))
	return h
}

// VerifyWebhook checks a webhook request received at url (the URL drover
// sends it to, exactly as drover was given it): its webhook-id,
// webhook-timestamp and webhook-signature headers in h, the raw request
// body (the bytes as received, before any JSON decoding) and the server's
// secret. It is VerifyWebhookKey with WebhookKey(secret, url).
func VerifyWebhook(secret []byte, url string, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	if len(secret) == 0 {
		return errors.New("droverapi: webhook: verify: empty secret")
	}
	return VerifyWebhookKey(WebhookKey(secret, url), h, body, now, tolerance)
}

// VerifyWebhookKey checks a webhook request with the receiver's key
// (WebhookKey, or ParseWebhookSecret of its whsec_ secret), as the
// Standard Webhooks libraries do. It fails with ErrWebhookTimestamp when
// webhook-timestamp is missing, malformed, or more than tolerance before or
// after now (DefaultWebhookTolerance when tolerance is 0), with
// ErrWebhookNoSignature when webhook-signature has no v1 entry, and with
// ErrWebhookBadSignature when webhook-id is missing or no v1 entry
// matches. Several entries (a sender signing with an old and a new key
// during a rotation) are accepted if any matches; entries of other
// versions are ignored. The comparison takes constant time.
func VerifyWebhookKey(key []byte, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	if tolerance == 0 {
		tolerance = DefaultWebhookTolerance
	}
	if len(key) == 0 {
		return errors.New("droverapi: webhook: verify: empty key")
	}
	var sigs []string
	for _, entry := range strings.Fields(h.Get(WebhookSignatureHeader)) {
		if v, s, ok := strings.Cut(entry, ","); ok && v == "v1" {
			sigs = append(sigs, s)
		}
	}
	if len(sigs) == 0 {
		if h.Get(WebhookSignatureHeader) == "" {
			return fmt.Errorf("%w: no %s header", ErrWebhookNoSignature, WebhookSignatureHeader)
		}
		return fmt.Errorf("%w: no v1,… entry in the %s header", ErrWebhookNoSignature, WebhookSignatureHeader)
	}
	raw := h.Get(WebhookTimestampHeader)
	if raw == "" {
		return fmt.Errorf("%w: no %s header", ErrWebhookTimestamp, WebhookTimestampHeader)
	}
	ts, err := strconv.ParseInt(raw, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: %s %q is not Unix seconds", ErrWebhookTimestamp, WebhookTimestampHeader, raw)
	}
	signed := time.Unix(ts, 0)
	switch age := now.Sub(signed); {
	case age > tolerance:
		return fmt.Errorf("%w: too old: signed at %s, %s ago (tolerance %s)", ErrWebhookTimestamp,
			signed.UTC().Format(time.RFC3339), age.Round(time.Second), tolerance)
	case age < -tolerance:
		return fmt.Errorf("%w: too new: signed at %s, %s in the future (tolerance %s)", ErrWebhookTimestamp,
			signed.UTC().Format(time.RFC3339), (-age).Round(time.Second), tolerance)
	}
	id := h.Get(WebhookIDHeader)
	if id == "" {
		return fmt.Errorf("%w: no %s header", ErrWebhookBadSignature, WebhookIDHeader)
	}
	want := []byte(webhookSignature(key, id, ts, body))
	for _, s := range sigs {
		if hmac.Equal([]byte(s), want) {
			return nil
		}
	}
	return fmt.Errorf("%w: none of %d v1 signatures matches", ErrWebhookBadSignature, len(sigs))
}
