package droverclient

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/drover-run/drover/droverapi"
)

// SignalResult is the answer to Signal: whether the signal completed the
// step waiting for it (Delivered), was kept for a later step, or was a
// duplicate, with the task after it.
type SignalResult = droverapi.SignalResult

// SignalOptions are Signal's optional fields.
type SignalOptions struct {
	// ID de-duplicates: a signal with the ID of one the task already has
	// (of the same name) is ignored. "": the server draws one.
	ID string
}

// Signal sends the signal name with payload (any JSON value; nil means
// null) to task id: it completes the task's step waiting for that signal,
// or is kept until a step of the task waits for it. A final task refuses
// it (409, an *Error with code wrong_state); an unknown one is 404.
func (c *Client) Signal(ctx context.Context, id, name string, payload json.RawMessage, opts *SignalOptions) (*SignalResult, error) {
	if id == "" {
		return nil, errEmptyID
	}
	body := droverapi.SignalRequest{Payload: payload}
	if opts != nil {
		body.ID = opts.ID
	}
	var res SignalResult
	if _, err := c.do(ctx, http.MethodPost, c.url(nil, "/v1/tasks", seg(id), "signals", seg(name)), body, &res); err != nil {
		return nil, err
	}
	return &res, nil
}
