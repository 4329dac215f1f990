package httpagent

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
)

// Defaults of Options, BreakerPolicy and RetryPolicy fields left zero.
const (
	DefaultMaxConcurrentPerHost = 16
	DefaultMaxHosts             = 1024
	DefaultMaxResponseBytes     = 1 << 20
	DefaultBreakerFailures      = 5
	DefaultBreakerOpenFor       = 5 * time.Second
	DefaultInitialInterval      = 100 * time.Millisecond
	DefaultMaxInterval          = 10 * time.Second
)

// RetryPolicy is the back-off between the tries of one Do.
type RetryPolicy struct {
	// InitialInterval is the wait after the first failure (default 100ms);
	// it doubles after each further failure, with ±50% jitter.
	InitialInterval time.Duration
	// MaxInterval caps the wait (default 10s).
	MaxInterval time.Duration
	// MaxTries bounds the tries, the first included; 0 tries until the
	// context's deadline.
	MaxTries uint
}

// StatusPolicy overrides the classification of single status codes. The
// default: 2xx success; 5xx, 408, 425 and 429 transient; every other code
// permanent. A code listed here wins over the default, 2xx included.
type StatusPolicy struct {
	Transient []int
	Permanent []int
}

// BreakerPolicy configures the circuit breaker of each host.
type BreakerPolicy struct {
	// Failures is how many consecutive transient failures open the breaker
	// (default 5).
	Failures uint32
	// OpenFor is how long an open breaker refuses calls before letting trial
	// calls through (default 5s).
	OpenFor time.Duration
}

// methods are the methods a step may use. CONNECT and TRACE make no sense for
// an agent call.
var methods = []string{
	http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut,
	http.MethodPatch, http.MethodDelete, http.MethodOptions,
}

// ValidateMethod reports whether m is a method the HTTP agent calls with:
// GET, HEAD, POST, PUT, PATCH, DELETE or OPTIONS, in upper case.
func ValidateMethod(m string) error {
	if slices.Contains(methods, m) {
		return nil
	}
	if up := strings.ToUpper(m); slices.Contains(methods, up) {
		return fmt.Errorf("method %q must be upper case: %q", m, up)
	}
	return fmt.Errorf("method %q is not one of %s", m, strings.Join(methods, ", "))
}

// ValidateStatusPolicy reports every code of p outside 100-599 and every code
// listed both as transient and as permanent.
func ValidateStatusPolicy(p StatusPolicy) error {
	var errs []error
	check := func(list string, codes []int) {
		for _, c := range codes {
			if c < 100 || c > 599 {
				errs = append(errs, fmt.Errorf("%s status %d is not an HTTP status code (100-599)", list, c))
			}
		}
	}
	check("transient", p.Transient)
	check("permanent", p.Permanent)
	var both []int
	for _, c := range p.Transient {
		if slices.Contains(p.Permanent, c) && !slices.Contains(both, c) {
			both = append(both, c)
			errs = append(errs, fmt.Errorf("status %d is listed as both transient and permanent", c))
		}
	}
	return errors.Join(errs...)
}

// outcome is how one try ended.
type outcome int

const (
	success outcome = iota
	transient
	permanent
	// cut: the caller's context ended. It says nothing about the service, so
	// the breaker does not count it.
	cut
)

// classify applies p to a status code.
func (p StatusPolicy) classify(code int) outcome {
	switch {
	case slices.Contains(p.Transient, code):
		return transient
	case slices.Contains(p.Permanent, code):
		return permanent
	case code >= 200 && code <= 299:
		return success
	case code >= 500 && code <= 599,
		code == http.StatusRequestTimeout, code == http.StatusTooEarly, code == http.StatusTooManyRequests:
		return transient
	default:
		return permanent
	}
}
