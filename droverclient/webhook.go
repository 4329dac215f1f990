package droverclient

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
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
	// WebhookSignatureHeader carries "t=<unix seconds>,v1=<hex HMAC-SHA256>".
	WebhookSignatureHeader = "Drover-Signature"
)

// MinWebhookSecretBytes is the shortest secret a Dispatcher accepts.
const MinWebhookSecretBytes = 16

// DefaultWebhookTolerance is the signature age Verify accepts when given a
// tolerance of 0.
const DefaultWebhookTolerance = 5 * time.Minute

// Errors of Verify; test them with errors.Is.
var (
	// ErrWebhookNoSignature: the header is empty or has no v1 signature.
	ErrWebhookNoSignature = errors.New("droverclient: webhook: no signature")
	// ErrWebhookBadSignature: no v1 signature matches the body and secret.
	ErrWebhookBadSignature = errors.New("droverclient: webhook: signature does not match")
	// ErrWebhookTimestamp: the header's timestamp is missing, malformed or
	// further from now than the tolerance (a replayed request).
	ErrWebhookTimestamp = errors.New("droverclient: webhook: signature timestamp out of tolerance")
)

// webhookSignature is hex(HMAC-SHA256(secret, "<t>.<body>")).
func webhookSignature(secret []byte, t int64, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(strconv.FormatInt(t, 10)))
	m.Write([]byte{'.'})
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// SignWebhook returns the Drover-Signature header value for body sent at t:
// "t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<unix seconds>.<body>")>".
// The timestamp is signed with the body, so a captured request cannot be
// replayed later with a new timestamp.
func SignWebhook(secret, body []byte, t time.Time) string {
	ts := t.Unix()
	return "t=" + strconv.FormatInt(ts, 10) + ",v1=" + webhookSignature(secret, ts, body)
}

// VerifyWebhook checks a Drover-Signature header against the raw request body (the
// bytes as received, before any JSON decoding) and the shared secret. It
// fails with ErrWebhookTimestamp when the header's timestamp is more than
// tolerance away from now (DefaultWebhookTolerance when tolerance is 0), with
// ErrWebhookBadSignature when no v1 value matches, and with ErrWebhookNoSignature when
// there is none. Several v1 values (a sender signing with an old and a new
// secret during a rotation) are accepted if any matches. The comparison
// takes constant time.
func VerifyWebhook(secret []byte, header string, body []byte, now time.Time, tolerance time.Duration) error {
	if tolerance == 0 {
		tolerance = DefaultWebhookTolerance
	}
	if len(secret) == 0 {
		return errors.New("droverclient: webhook: verify: empty secret")
	}
	var (
		ts     int64
		haveTS bool
		sigs   []string
	)
	for _, part := range strings.Split(header, ",") {
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
		case "v1":
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
	want := []byte(webhookSignature(secret, ts, body))
	for _, s := range sigs {
		if hmac.Equal([]byte(s), want) {
			return nil
		}
	}
	return ErrWebhookBadSignature
}
