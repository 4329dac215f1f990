package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/convoy"
	"github.com/drover-run/drover/droverapi"
	"github.com/drover-run/drover/store"
)

// apiError is an error with its HTTP status and machine-readable code.
type apiError struct {
	status  int
	code    string
	message string
}

func (e *apiError) Error() string { return e.message }

func errorf(status int, code, format string, args ...any) *apiError {
	return &apiError{status: status, code: code, message: fmt.Sprintf(format, args...)}
}

func badRequest(format string, args ...any) *apiError {
	return errorf(http.StatusBadRequest, "invalid_request", format, args...)
}

func tooLarge(limit int64) *apiError {
	return errorf(http.StatusRequestEntityTooLarge, "body_too_large", "the request body is larger than %d bytes", limit)
}

// writeError answers with err's status and a JSON error body. Errors that are
// not the caller's fault are logged and reported without detail.
func (h *Handler) writeError(w http.ResponseWriter, r *http.Request, err error) {
	ae := h.classify(err)
	if ae.status >= 500 {
		h.log.Error("http: request failed", "method", r.Method, "path", r.URL.Path, "status", ae.status, "err", err)
	}
	msg := ae.message
	if ns := h.ns(r); ns != "" {
		// Names in messages as the caller knows them: without the namespace.
		msg = strings.ReplaceAll(msg, `"`+ns+"/", `"`)
	}
	writeJSON(w, ae.status, droverapi.Error{Error: droverapi.ErrorDetail{Code: ae.code, Message: msg}})
}

// classify maps an error of the API, drover or convoy to a status and code.
func (h *Handler) classify(err error) *apiError {
	var ae *apiError
	var mb *http.MaxBytesError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &mb):
		return tooLarge(mb.Limit)
	case errors.Is(err, store.ErrNotFound), errors.Is(err, drover.ErrScheduleNotFound):
		return errorf(http.StatusNotFound, "not_found", "%s", err)
	case errors.Is(err, drover.ErrTaskConflict):
		return errorf(http.StatusConflict, "conflict", "%s", err)
	case errors.Is(err, drover.ErrNotResubmittable), errors.Is(err, drover.ErrAlreadyFinal), errors.Is(err, convoy.ErrSessionClosed),
		errors.Is(err, drover.ErrScheduleDefined):
		return errorf(http.StatusConflict, "wrong_state", "%s", err)
	case errors.Is(err, drover.ErrInputTooLarge):
		return errorf(http.StatusRequestEntityTooLarge, "input_too_large", "%s", err)
	case errors.Is(err, drover.ErrUnknownWorkflow), errors.Is(err, drover.ErrInvalidSchedule), errors.Is(err, drover.ErrInvalidInput), errors.Is(err, drover.ErrInvalidTaskID),
		errors.Is(err, drover.ErrNoSuchStep), errors.Is(err, convoy.ErrInvalidQueue), errors.Is(err, convoy.ErrInvalidSession),
		errors.Is(err, convoy.ErrInvalidMessage), errors.Is(err, convoy.ErrInvalidReason):
		return errorf(http.StatusBadRequest, "invalid_request", "%s", err)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, store.ErrLocked), errors.Is(err, store.ErrConflict):
		return errorf(http.StatusServiceUnavailable, "unavailable", "the store did not answer in time; retry")
	}
	return errorf(http.StatusInternalServerError, "internal", "internal error")
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"error":{"code":"internal","message":"internal error"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// readBody reads the request body (already capped, its Content-Type
// checked by the handler's wrap).
func readBody(r *http.Request) ([]byte, error) {
	return io.ReadAll(r.Body)
}

// decodeJSON decodes body, a JSON object, into v strictly: unknown fields,
// fields spelt in another case, wrong types, malformed JSON and trailing data
// are errors naming the problem. An empty body is an error when required,
// else leaves v as it is.
func decodeJSON(body []byte, v any, required bool) error {
	if len(bytes.TrimSpace(body)) == 0 {
		if required {
			return badRequest("the request body is empty; a JSON object is required")
		}
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return errorf(http.StatusBadRequest, "malformed_json", "unexpected data after the JSON object at offset %d", dec.InputOffset())
	}
	// encoding/json matches names case-insensitively; the API does not.
	return checkKeys(body, reflect.TypeOf(v), "")
}

func jsonError(err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	var mb *http.MaxBytesError
	switch {
	case errors.As(err, &mb):
		return tooLarge(mb.Limit)
	case errors.As(err, &se):
		return errorf(http.StatusBadRequest, "malformed_json", "malformed JSON at offset %d: %s", se.Offset, se.Error())
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errorf(http.StatusBadRequest, "malformed_json", "malformed JSON: the body ends early")
	case errors.As(err, &te):
		if te.Field == "" {
			return badRequest("the request body must be a JSON object, not %s", te.Value)
		}
		return errorf(http.StatusBadRequest, "invalid_field", "field %q: want %s, got %s", te.Field, jsonKind(te.Type), te.Value)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return errorf(http.StatusBadRequest, "unknown_field", "unknown field %s", strings.TrimPrefix(err.Error(), "json: unknown field "))
	}
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	// Errors of UnmarshalJSON methods (such as a bad time) name no field.
	return errorf(http.StatusBadRequest, "invalid_field", "invalid JSON value: %s", strings.TrimPrefix(err.Error(), "json: "))
}

func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map:
		if t.String() == "time.Time" {
			return "an RFC 3339 time string"
		}
		return "an object"
	}
	return t.String()
}

// checkKeys verifies that every key of the JSON object raw is spelt exactly
// as a json tag of the struct t (after Decode accepted it, only the case
// can differ), recursing into struct and slice-of-struct fields.
func checkKeys(raw []byte, t reflect.Type, prefix string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || t.String() == "time.Time" {
		return nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
		return nil // not an object: Decode judged it already
	}
	fields := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name != "" && name != "-" {
			fields[name] = f.Type
		}
	}
	for k, v := range obj {
		ft, ok := fields[k]
		if !ok {
			return errorf(http.StatusBadRequest, "unknown_field", "unknown field %q", prefix+k)
		}
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		switch {
		case ft.Kind() == reflect.Struct:
			if err := checkKeys(v, ft, prefix+k+"."); err != nil {
				return err
			}
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
			var items []json.RawMessage
			if json.Unmarshal(v, &items) == nil {
				for i, it := range items {
					if err := checkKeys(it, ft.Elem(), fmt.Sprintf("%s%s[%d].", prefix, k, i)); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}
