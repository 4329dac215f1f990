package httpagent

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	dt "github.com/drover-run/drover/drovertype"
)

// ErrBreakerOpen is the failure of a try refused by the host's open (or
// half-open and busy) circuit breaker. It is transient.
var ErrBreakerOpen = errors.New("circuit breaker open")

// ErrResponseTooLarge is the failure of a response body over
// Options.MaxResponseBytes. It is permanent.
var ErrResponseTooLarge = errors.New("response body too large")

// bodyExcerpt is how much of an error response's body an error keeps.
const bodyExcerpt = 200

// StatusError is a response whose status code was not a success. Do returns
// it wrapped (errors.As finds it), with drover.Permanent when the code is
// permanent.
type StatusError struct {
	Method string
	URL    string // redacted: no userinfo, query values replaced
	Code   int
	// Body is the start of the response body (up to 200 bytes).
	Body string
	// RetryAfter is the server's Retry-After on 429 and 503, 0 otherwise.
	RetryAfter time.Duration
}

// Error implements error.
func (e *StatusError) Error() string {
	s := fmt.Sprintf("%s %s: HTTP %d", e.Method, e.URL, e.Code)
	if e.RetryAfter > 0 {
		s += fmt.Sprintf(" (Retry-After %s)", e.RetryAfter)
	}
	if e.Body != "" {
		s += ": " + e.Body
	}
	return s
}

// tryError carries how a try failed to Do and to the breaker's callbacks. Do
// returns the error inside, never the tryError itself.
type tryError struct {
	outcome outcome
	err     error
}

func (e *tryError) Error() string { return e.err.Error() }
func (e *tryError) Unwrap() error { return e.err }

func failed(o outcome, err error) error { return &tryError{outcome: o, err: err} }

// outcomeOf is the outcome of a try's error.
func outcomeOf(err error) outcome {
	var te *tryError
	switch {
	case err == nil:
		return success
	case errors.As(err, &te):
		return te.outcome
	default:
		return transient
	}
}

// unwrapTry drops the tryError around err.
func unwrapTry(err error) error {
	if te, ok := err.(*tryError); ok {
		return te.err
	}
	return err
}

// redact returns u fit for errors and logs: without userinfo and fragment,
// query values replaced by "REDACTED" (tokens are often passed there); the
// query keys stay, they help an operator tell calls apart.
func redact(u *url.URL) string {
	r := *u
	r.User = nil
	r.Fragment, r.RawFragment = "", ""
	if r.RawQuery != "" {
		parts := strings.Split(r.RawQuery, "&")
		for i, p := range parts {
			if k, _, ok := strings.Cut(p, "="); ok {
				parts[i] = k + "=REDACTED"
			} else if p != "" {
				parts[i] = "REDACTED" // a bare value may be a secret too
			}
		}
		r.RawQuery = strings.Join(parts, "&")
	}
	return r.String()
}

// excerpt is the start of b as text: at most bodyExcerpt bytes, cut on a
// UTF-8 boundary, surrounding space trimmed, NUL characters and invalid
// bytes replaced with a note saying so.
func excerpt(b []byte) string {
	if len(b) > bodyExcerpt {
		n := bodyExcerpt
		for n > 0 && !utf8.RuneStart(b[n]) {
			n--
		}
		b = b[:n]
	}
	return dt.Storable(strings.TrimSpace(string(b)))
}
