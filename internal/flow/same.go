package flow

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	dt "github.com/drover-run/drover/drovertype"
)

// conflict says how a submission differs from the task stored under its
// ID, or "" when it is the same submission (submitted again: idempotent).
// The workflow, the ordering key, the callback URL and events, and the
// input count; inputs are compared as JSON values, so key order and
// spacing do not matter. The input hash is only the fast path: tasks stored with a hash
// of other bytes of an equal value compare equal too.
func conflict(stored, sub *dt.Task) string {
	switch {
	case stored.Workflow != sub.Workflow:
		return fmt.Sprintf("the workflow: %q is stored, this submission has %q", stored.Workflow, sub.Workflow)
	case stored.OrderingKey != sub.OrderingKey:
		return fmt.Sprintf("the ordering key: %s is stored, this submission has %s", quoteOrNone(stored.OrderingKey), quoteOrNone(sub.OrderingKey))
	case stored.CallbackURL != sub.CallbackURL:
		return fmt.Sprintf("the callback URL: %s is stored, this submission has %s", quoteOrNone(stored.CallbackURL), quoteOrNone(sub.CallbackURL))
	case !slices.Equal(stored.CallbackEvents, sub.CallbackEvents): // both sorted sets
		return fmt.Sprintf("the callback events: %s are stored, this submission has %s", eventsText(stored.CallbackEvents), eventsText(sub.CallbackEvents))
	case stored.InputHash != sub.InputHash && !JSONEqual(stored.Input, sub.Input):
		return "the input: a different JSON value is stored"
	}
	return ""
}

func eventsText(set dt.WebhookEventSet) string {
	if len(set) == 0 {
		return dt.WebhookSelectFinal
	}
	return strings.Join(set, ",")
}

func quoteOrNone(s string) string {
	if s == "" {
		return "none"
	}
	if len(s) > 80 {
		s = s[:80] + "…"
	}
	return strconv.Quote(s)
}

// conflictError is ErrTaskConflict for task id, saying what differs.
func conflictError(id, diff string) error {
	return fmt.Errorf("task %q: %w: it differs in %s", id, ErrTaskConflict, diff)
}

// JSONEqual reports whether a and b are JSON documents of the same value:
// objects with the same members in any order, arrays with equal elements
// in order, numbers of the same decimal value (1, 1.0 and 1e0 are equal;
// no rounding to float64), equal strings, booleans and nulls. Spacing does
// not matter. A document that is not valid JSON equals only the same bytes.
// In an object with a repeated member the last one counts, as decoding
// does.
func JSONEqual(a, b []byte) bool {
	if bytes.Equal(a, b) {
		return true
	}
	va, ok := decodeJSON(a)
	if !ok {
		return false
	}
	vb, ok := decodeJSON(b)
	if !ok {
		return false
	}
	return sameValue(va, vb)
}

func decodeJSON(b []byte) (any, bool) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, false
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, false
	}
	return v, true
}

func sameValue(a, b any) bool {
	switch a := a.(type) {
	case map[string]any:
		b, ok := b.(map[string]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for k, va := range a {
			vb, ok := b[k]
			if !ok || !sameValue(va, vb) {
				return false
			}
		}
		return true
	case []any:
		b, ok := b.([]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for i := range a {
			if !sameValue(a[i], b[i]) {
				return false
			}
		}
		return true
	case json.Number:
		b, ok := b.(json.Number)
		return ok && (a == b || canonNumber(string(a)) == canonNumber(string(b)))
	default: // string, bool, nil
		return a == b
	}
}

// canonNumber spells a JSON number's decimal value one way: sign, the
// significant digits and the exponent ("-12e3" for -1.2e4 and -12000);
// "0" for every zero. A number whose exponent is out of range keeps its
// text (prefixed so it equals no canonical spelling).
func canonNumber(s string) string {
	orig := s
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	mant, exp := s, int64(0)
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		e, err := strconv.ParseInt(s[i+1:], 10, 64)
		if err != nil || e > 1<<60 || e < -1<<60 {
			return "!" + orig
		}
		mant, exp = s[:i], e
	}
	whole, frac, _ := strings.Cut(mant, ".")
	digits := strings.TrimLeft(whole+frac, "0")
	if digits == "" {
		return "0"
	}
	exp -= int64(len(frac))
	sig := strings.TrimRight(digits, "0")
	exp += int64(len(digits) - len(sig))
	if neg {
		sig = "-" + sig
	}
	return sig + "e" + strconv.FormatInt(exp, 10)
}
