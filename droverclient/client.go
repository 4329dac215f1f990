package droverclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/drover-run/drover/droverapi"
	"github.com/drover-run/drover/internal/tracing"
)

// Client calls one drover server. Its zero value is not usable; create it
// with New.
type Client struct {
	base      *url.URL
	token     string
	http      *http.Client
	namespace string // the Drover-Namespace header; "": none
	tracer    *tracing.Tracer
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient makes the client send its requests with hc (for TLS
// settings or a custom transport). Default: http.DefaultClient.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.http = hc } }

// WithNamespace makes every request act in namespace ns (the
// Drover-Namespace header), for a global token; a token of a namespace
// acts in its own without it (naming another is 403). Default: the
// token's namespace, or the default one.
func WithNamespace(ns string) Option { return func(c *Client) { c.namespace = ns } }

// WithTracerProvider turns OpenTelemetry tracing on: every request
// carries the W3C trace context of its context's span (traceparent), so
// a task submitted or a message published continues the caller's trace,
// and RunAgent runs each call of its handler in a drover.agent.call span,
// a child of the task's trace. Default: off.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *Client) { c.tracer = tracing.New(tp) }
}

// setAuth sets the headers of the client's identity on req: the token
// and the namespace.
func (c *Client) setAuth(req *http.Request) {
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if c.namespace != "" {
		req.Header.Set("Drover-Namespace", c.namespace)
	}
}

// New returns a client for the server at baseURL (for example
// "http://127.0.0.1:8080") that authenticates with the bearer token
// (empty for a server run with --insecure-no-auth).
func New(baseURL, token string, opts ...Option) (*Client, error) {
	if !strings.Contains(baseURL, "://") {
		// "127.0.0.1:8080" or "localhost:8080": url.Parse's complaint
		// about it ("first path segment in URL cannot contain colon")
		// does not say what is missing.
		return nil, fmt.Errorf("droverclient: server URL %q has no scheme: want http://HOST:PORT or https://HOST:PORT, such as %q", baseURL, "http://"+baseURL)
	}
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("droverclient: server URL %q: want http://HOST:PORT or https://HOST:PORT (%v)", baseURL, errors.Unwrap(err))
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("droverclient: server URL %q: want http://HOST:PORT or https://HOST:PORT", baseURL)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("droverclient: server URL %q: must not have a query or fragment", baseURL)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	c := &Client{base: u, token: token, http: http.DefaultClient}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// Errors that APIError matches with errors.Is, by HTTP status.
var (
	ErrUnauthorized = errors.New("unauthorized")        // 401
	ErrForbidden    = errors.New("forbidden")           // 403
	ErrNotFound     = errors.New("not found")           // 404
	ErrConflict     = errors.New("conflict")            // 409
	ErrRateLimited  = errors.New("rate limited")        // 429
	ErrUnavailable  = errors.New("server unavailable")  // 503
	ErrInvalid      = errors.New("request was refused") // other 4xx
)

// APIError is an error answer of the server: its HTTP status and the
// error body's code and message.
type APIError struct {
	Status  int
	Code    string // e.g. "invalid_field", "wrong_state", "stale_token"
	Message string

	retryAfter time.Duration // the Retry-After of a 429 or 503, if any
}

func (e *APIError) Error() string {
	return fmt.Sprintf("drover server: %d %s: %s", e.Status, e.Code, e.Message)
}

// Is lets errors.Is match an APIError against the Err* values by status.
func (e *APIError) Is(target error) bool {
	switch e.Status {
	case http.StatusUnauthorized:
		return target == ErrUnauthorized
	case http.StatusForbidden:
		return target == ErrForbidden
	case http.StatusNotFound:
		return target == ErrNotFound
	case http.StatusConflict:
		// A stale token (remote agents) is also ErrStale.
		return target == ErrConflict || (target == ErrStale && e.Code == "stale_token")
	case http.StatusTooManyRequests:
		return target == ErrRateLimited
	case http.StatusServiceUnavailable:
		return target == ErrUnavailable
	}
	return e.Status >= 400 && e.Status < 500 && target == ErrInvalid
}

// url joins the base URL with path segments (each escaped) and the query.
func (c *Client) url(query url.Values, segments ...string) string {
	u := *c.base
	var b strings.Builder
	b.WriteString(u.Path)
	for _, s := range segments {
		b.WriteByte('/')
		if strings.HasPrefix(s, "/") { // a literal path part such as "/v1/tasks"
			b.WriteString(strings.TrimPrefix(s, "/"))
			continue
		}
		b.WriteString(url.PathEscape(s))
	}
	u.Path = ""
	u.RawPath = ""
	s := u.String() + b.String()
	if len(query) > 0 {
		s += "?" + query.Encode()
	}
	return s
}

// do sends a JSON request and decodes a JSON answer into out (when not
// nil). body nil sends no body. An error answer becomes an *APIError.
func (c *Client) do(ctx context.Context, method, rawURL string, body, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, fmt.Errorf("droverclient: encode request: %w", err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, rawURL, rd)
	if err != nil {
		return 0, fmt.Errorf("droverclient: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	c.setAuth(req)
	if c.tracer.On() {
		tracing.Inject(ctx, req.Header)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, fmt.Errorf("droverclient: %s %s: %w", method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return resp.StatusCode, fmt.Errorf("droverclient: %s %s: read answer: %w", method, req.URL.Path, err)
	}
	if resp.StatusCode >= 400 {
		return resp.StatusCode, decodeError(resp.StatusCode, data)
	}
	if out != nil && len(bytes.TrimSpace(data)) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, fmt.Errorf("droverclient: %s %s: decode answer: %w", method, req.URL.Path, err)
		}
	}
	return resp.StatusCode, nil
}

// decodeError turns an error answer into an *APIError; a body that is not
// drover's error shape (a proxy's page, say) keeps its first bytes as the
// message.
func decodeError(status int, data []byte) error {
	var e droverapi.Error
	if json.Unmarshal(data, &e) == nil && e.Error.Code != "" {
		return &APIError{Status: status, Code: e.Error.Code, Message: e.Error.Message}
	}
	msg := strings.TrimSpace(string(data))
	if len(msg) > 200 {
		msg = msg[:200] + "…"
	}
	return &APIError{Status: status, Code: http.StatusText(status), Message: msg}
}
