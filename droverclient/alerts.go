package droverclient

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/drover-run/drover/droverapi"
)

// Alert is an event an operator must look at (a task ending in Error, a
// permanent failure, a session blocked by a dead letter), with its
// acknowledgement.
type Alert = droverapi.Alert

// Ack is the acknowledgement of an alert: the event recording it, who and
// when.
type Ack = droverapi.Ack

// AlertParams page an alert listing (GET /v1/alerts).
type AlertParams struct {
	// After returns alerts with a greater ID: the NextAfter of the
	// previous page.
	After int64
	// Limit caps the page (1-1000); 0 takes the server's default (100).
	Limit int
	// Unacknowledged leaves out acknowledged alerts.
	Unacknowledged bool
}

// AlertPage is one page of alerts, by ID.
type AlertPage = droverapi.AlertList

// Alerts lists alerts by ID, one page at a time.
func (c *Client) Alerts(ctx context.Context, p AlertParams) (*AlertPage, error) {
	q := url.Values{}
	if p.After > 0 {
		q.Set("after", strconv.FormatInt(p.After, 10))
	}
	if p.Limit > 0 {
		q.Set("limit", strconv.Itoa(p.Limit))
	}
	if p.Unacknowledged {
		q.Set("unacknowledged", "true")
	}
	var page AlertPage
	if _, err := c.do(ctx, http.MethodGet, c.url(q, "/v1/alerts"), nil, &page); err != nil {
		return nil, err
	}
	return &page, nil
}

// AckAlert acknowledges an alert (operator scope) and returns it with its
// acknowledgement. It is idempotent: acknowledging again returns the first
// acknowledgement. An unknown alert: ErrNotFound.
func (c *Client) AckAlert(ctx context.Context, id int64) (*Alert, error) {
	var a Alert
	if _, err := c.do(ctx, http.MethodPost, c.url(nil, "/v1/alerts", strconv.FormatInt(id, 10), "ack"), struct{}{}, &a); err != nil {
		return nil, err
	}
	return &a, nil
}
