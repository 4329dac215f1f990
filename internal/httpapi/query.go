package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Query parameters are read the same way on every endpoint: the handler
// calls queryParams first, with the names it knows, then reads each value
// with the param* helpers. Every problem is a 400 naming the parameter:
// unknown_parameter for a name the endpoint does not know, invalid_parameter
// for anything else (given twice, not percent-encoded correctly, a value
// out of range).

// queryParams reads the request's query string strictly: each parameter
// must be correctly percent-encoded (r.URL.Query would silently drop one
// that is not, such as "limit=%zz"), one of known, and given once unless
// it is in multi.
func queryParams(r *http.Request, known []string, multi ...string) (url.Values, error) {
	q := url.Values{}
	for _, part := range strings.Split(r.URL.RawQuery, "&") {
		if part == "" {
			continue
		}
		pv, err := url.ParseQuery(part)
		if err != nil {
			name, _, _ := strings.Cut(part, "=")
			if n, err := url.QueryUnescape(name); err == nil {
				name = n
			}
			return nil, paramError(name, "malformed: %s (percent-encode the value; separate parameters with \"&\")", err)
		}
		for k, vs := range pv {
			q[k] = append(q[k], vs...)
		}
	}
	for k, v := range q {
		if !slices.Contains(known, k) {
			if len(known) == 0 {
				return nil, errorf(http.StatusBadRequest, "unknown_parameter", "unknown query parameter %q (this endpoint takes none)", k)
			}
			return nil, errorf(http.StatusBadRequest, "unknown_parameter", "unknown query parameter %q (known: %s)", k, strings.Join(known, ", "))
		}
		if len(v) > 1 && !slices.Contains(multi, k) {
			return nil, paramError(k, "given %d times", len(v))
		}
	}
	return q, nil
}

// noQuery refuses any query parameter: for endpoints that take none.
func noQuery(r *http.Request) error {
	_, err := queryParams(r, nil)
	return err
}

// paramError is the 400 of a query parameter with a bad value.
func paramError(name, format string, args ...any) *apiError {
	return errorf(http.StatusBadRequest, "invalid_parameter", "query parameter %q: %s", name, fmt.Sprintf(format, args...))
}

// paramCheck turns the error of a value check (checkName, checkSession)
// into the parameter's error.
func paramCheck(name string, err error) error {
	var ae *apiError
	if err == nil || !errors.As(err, &ae) {
		return err
	}
	return paramError(name, "%s", ae.message)
}

// queryTime reads an RFC 3339 time of query parameter name (zero when
// absent).
func queryTime(q url.Values, name string) (time.Time, error) {
	v := q.Get(name)
	if v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, paramError(name, "%q is not an RFC 3339 time such as 2026-01-02T15:04:05Z", v)
	}
	return t, nil
}

// parseLimit reads the limit query parameter (default def, at most
// maxListLimit).
func parseLimit(q url.Values, def int) (int, error) {
	s := q.Get("limit")
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > maxListLimit {
		return 0, paramError("limit", "want an integer from 1 to %d, got %q", maxListLimit, s)
	}
	return n, nil
}

// paramInt reads an integer parameter of at least min; def when absent
// (or empty, as every parameter).
func paramInt(q url.Values, name string, min, def int64) (int64, error) {
	s := q.Get(name)
	if s == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < min {
		return 0, paramError(name, "want an integer of at least %d, got %q", min, s)
	}
	return n, nil
}

// paramBool reads a true/false parameter; false when absent or empty.
func paramBool(q url.Values, name string) (bool, error) {
	s := q.Get(name)
	if s == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return false, paramError(name, "want true or false, got %q", s)
	}
	return b, nil
}
