package remotesim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// maxErrBody bounds how much of an error body a StatusError keeps.
const maxErrBody = 4 << 10

// Client calls a Service over HTTP.
type Client struct {
	// BaseURL is the service root, e.g. "http://127.0.0.1:4000".
	BaseURL string
	// HTTP does the requests; it has no timeout of its own so that the
	// caller's ctx alone bounds each call.
	HTTP *http.Client
}

// NewClient returns a Client whose transport keeps enough idle connections
// for many concurrent agents to one host.
func NewClient(baseURL string) *Client {
	tr := &http.Transport{
		Proxy: nil, // loopback service; never go through a proxy
		DialContext: (&net.Dialer{
			Timeout:   10 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
	}
	return &Client{BaseURL: baseURL, HTTP: &http.Client{Transport: tr}}
}

// StatusError is a non-2xx answer from the service.
type StatusError struct {
	Code int
	Body string
}

// Error implements error.
func (e *StatusError) Error() string {
	return "remotesim: HTTP " + strconv.Itoa(e.Code) + ": " + e.Body
}

// IsPermanent reports whether err is a client or business error that a retry
// cannot fix: any 4xx except 408 and 429.
func IsPermanent(err error) bool {
	var se *StatusError
	if !errors.As(err, &se) {
		return false
	}
	return se.Code >= 400 && se.Code < 500 && se.Code != http.StatusRequestTimeout && se.Code != http.StatusTooManyRequests
}

// IsTransient reports whether a retry may succeed: 5xx, 408, 429, and
// transport errors including a per-attempt deadline. context.Canceled is not
// transient: it means the caller itself gave up.
func IsTransient(err error) bool {
	if err == nil {
		return false
	}
	var se *StatusError
	if errors.As(err, &se) {
		return se.Code >= 500 || se.Code == http.StatusRequestTimeout || se.Code == http.StatusTooManyRequests
	}
	return !errors.Is(err, context.Canceled)
}

// Call performs operation once for orderID under idempotencyKey. Retrying is
// the caller's job; it must pass the same key on every retry.
func (c *Client) Call(ctx context.Context, operation, idempotencyKey, orderID string, amount int64) (Response, error) {
	body, err := json.Marshal(request{OrderID: orderID, Amount: amount})
	if err != nil {
		return Response{}, fmt.Errorf("remotesim: encode request: %w", err)
	}
	u := c.BaseURL + "/v1/" + url.PathEscape(operation)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return Response{}, fmt.Errorf("remotesim: %s: %w", operation, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", idempotencyKey)

	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	res, err := hc.Do(req)
	if err != nil {
		return Response{}, fmt.Errorf("remotesim: %s: %w", operation, err)
	}
	defer func() {
		// Drain so the keep-alive connection is reused.
		_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, maxErrBody))
		_ = res.Body.Close()
	}()

	if res.StatusCode < 200 || res.StatusCode > 299 {
		b, err := io.ReadAll(io.LimitReader(res.Body, maxErrBody))
		if err != nil {
			return Response{}, fmt.Errorf("remotesim: %s: read error body: %w", operation, err)
		}
		return Response{}, &StatusError{Code: res.StatusCode, Body: string(bytes.TrimSpace(b))}
	}
	var out Response
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
		return Response{}, fmt.Errorf("remotesim: %s: decode response: %w", operation, err)
	}
	return out, nil
}
