package droverapi

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Header names of a webhook request (docs/webhooks.md).

const (
	// WebhookEventIDHeader carries the ID of the event the webhook reports: the
	// same on every attempt, so receivers de-duplicate on it.
	WebhookEventIDHeader = "Drover-Event-Id"
	// WebhookEventTypeHeader carries the event type (processed, compensated,
	// error, cancelled).
	WebhookEventTypeHeader = "Drover-Event-Type"
	// WebhookAttemptHeader carries the attempt number, 1 for the first.
	WebhookAttemptHeader = "Drover-Delivery-Attempt"
	// WebhookSignatureHeader carries "t=<unix seconds>,v2=<hex HMAC-SHA256>"
	// (SignWebhook).
	WebhookSignatureHeader = "Drover-Signature"
)

// MinWebhookSecretBytes is the shortest secret a Dispatcher accepts.
const MinWebhookSecretBytes = 16

// DefaultWebhookTolerance is the signature age VerifyWebhook accepts when
// given a tolerance of 0.
const DefaultWebhookTolerance = 5 * time.Minute

// Errors of VerifyWebhook; test them with errors.Is.
var (
	// ErrWebhookNoSignature: the header is empty or has no v2 signature.
	ErrWebhookNoSignature = errors.New("droverapi: webhook: no signature")
	// ErrWebhookBadSignature: no v2 signature matches the key, the event ID,
	// the timestamp and the body (or the event ID header is missing).
	ErrWebhookBadSignature = errors.New("droverapi: webhook: signature does not match")
	// ErrWebhookTimestamp: the header's timestamp is missing, malformed or
	// further from now than the tolerance (a replayed request).
	ErrWebhookTimestamp = errors.New("droverapi: webhook: signature timestamp out of tolerance")
)

// WebhookKey returns the key that signs the webhooks sent to url:
// HMAC-SHA256(secret, url), with url exactly as drover was given it (the
// task's callback URL, or a --webhook-url without its #events= part). Each
// destination has its own key, so a request one receiver got does not
// verify at another; and an operator can give a receiver its key instead
// of the server's secret.
func WebhookKey(secret []byte, url string) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(url))
	return m.Sum(nil)
}

// webhookSignature is hex(HMAC-SHA256(key, "<event id>.<t>.<body>")).
func webhookSignature(key []byte, eventID string, t int64, body []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(eventID))
	m.Write([]byte{'.'})
	m.Write([]byte(strconv.FormatInt(t, 10)))
	m.Write([]byte{'.'})
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// SignWebhook returns the Drover-Signature header value of the webhook of
// event eventID with body, sent to url at t:
//
//	t=<unix seconds>,v2=<hex HMAC-SHA256(WebhookKey(secret, url), "<event id>.<unix seconds>.<body>")>
//
// The destination (through the key), the event ID (the Drover-Event-Id
// header) and the timestamp are signed with the body: a captured request
// cannot be sent to another receiver, under another event ID, or later.
func SignWebhook(secret []byte, url, eventID string, body []byte, t time.Time) string {
	ts := t.Unix()
	return "t=" + strconv.FormatInt(ts, 10) + ",v2=" + webhookSignature(WebhookKey(secret, url), eventID, ts, body)
}

// VerifyWebhook checks a webhook request received at url (the URL drover
// sends it to, exactly as drover was given it): its Drover-Signature and
// Drover-Event-Id headers in h, the raw request body (the bytes as
// received, before any JSON decoding) and the server's secret. It is
// VerifyWebhookKey with WebhookKey(secret, url).
func VerifyWebhook(secret []byte, url string, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	if len(secret) == 0 {
		return errors.New("droverapi: webhook: verify: empty secret")
	}
	return VerifyWebhookKey(WebhookKey(secret, url), h, body, now, tolerance)
}

// VerifyWebhookKey checks a webhook request with the receiver's key
// (WebhookKey). It fails with ErrWebhookTimestamp when the header's
// timestamp is more than tolerance away from now (DefaultWebhookTolerance
// when tolerance is 0), with ErrWebhookBadSignature when no v2 value
// matches, and with ErrWebhookNoSignature when there is none. Several v2
// values (a sender signing with an old and a new secret during a rotation)
// are accepted if any matches. The comparison takes constant time.
func VerifyWebhookKey(key []byte, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	if tolerance == 0 {
		tolerance = DefaultWebhookTolerance
	}
	if len(key) == 0 {
		return errors.New("droverapi: webhook: verify: empty key")
	}
	var (
		ts     int64
		haveTS bool
		sigs   []string
	)
	for _, part := range strings.Split(h.Get(WebhookSignatureHeader), ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			continue
		}
		switch k {
		case "t":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return fmt.Errorf("%w: t=%q is not an integer", ErrWebhookTimestamp, v)
			}
			ts, haveTS = n, true
		case "v2":
			sigs = append(sigs, v)
		}
	}
	if len(sigs) == 0 {
		return ErrWebhookNoSignature
	}
	if !haveTS {
		return fmt.Errorf("%w: no t= in the header", ErrWebhookTimestamp)
	}
	if age := now.Sub(time.Unix(ts, 0)); age > tolerance || age < -tolerance {
		return fmt.Errorf("%w: signed at %s, %s from now (tolerance %s)", ErrWebhookTimestamp,
			time.Unix(ts, 0).UTC().Format(time.RFC3339), age.Round(time.Second), tolerance)
	}
	id := h.Get(WebhookEventIDHeader)
	if id == "" {
		return fmt.Errorf("%w: no %s header", ErrWebhookBadSignature, WebhookEventIDHeader)
	}
	want := []byte(webhookSignature(key, id, ts, body))
	for _, s := range sigs {
		if hmac.Equal([]byte(s), want) {
			return nil
		}
	}
	return ErrWebhookBadSignature
}
