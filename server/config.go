package server

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/internal/httpapi"
	"github.com/drover-run/drover/store"
)

// Config is what a server runs. Only a store is required: the zero values of
// the other fields run every role on it with the library's defaults, no
// HTTP API, no metrics listener and no webhooks.
type Config struct {
	// Store is the state store, opened and migrated; the caller closes it
	// after Run returns. Set either Store or OpenStore.
	Store store.Driver
	// OpenStore opens (and migrates) the store when Run needs it, after
	// the workflows directory was checked; Run closes it on return.
	OpenStore func(ctx context.Context) (store.Driver, error)
	// WaitForStore makes Run wait for a store that cannot be used yet
	// (down, restarting, refusing connections): OpenStore and the start of
	// the roles are retried with exponential back-off, 100ms doubling to
	// 5s, with a log line each time, until they succeed or ctx ends. Errors
	// that cannot pass by themselves (a schema newer than this drover, a
	// bad configuration) fail at once. Meant for PostgreSQL.
	WaitForStore bool
	// StoreName names the store in logs (without secrets).
	StoreName string
	// Logger receives the server's logs. Default: slog.Default().
	Logger *slog.Logger
	// TracerProvider, when set, traces tasks, session messages, remote
	// agents' requests and webhook deliveries with OpenTelemetry
	// (drover.Config.TracerProvider; docs/operations.md, Tracing), and
	// the API continues the trace of a request's traceparent header.
	// nil: off. `drover server` sets it from the OTEL_* environment.
	TracerProvider trace.TracerProvider

	// InstanceID, Roles, Schedulers, SupervisorInterval, LeaseTTL,
	// PollInterval, MaxInputBytes and NoEagerStart are those of
	// drover.Config. After a crash the same InstanceID frees up when its
	// lease expires: Run waits for that instead of failing.
	InstanceID         string
	Roles              drover.Roles
	Schedulers         int
	SupervisorInterval time.Duration
	LeaseTTL           time.Duration
	PollInterval       time.Duration
	MaxInputBytes      int
	NoEagerStart       bool
	// NamespaceMaxInFlight is drover.Config.NamespaceMaxInFlight (0: its
	// default) and HTTPMaxPerNamespace the built-in http agent's calls of
	// one namespace at once (workflowdef.Options.HTTPMaxPerNamespace; 0:
	// its default): see docs/security.md.
	NamespaceMaxInFlight int
	HTTPMaxPerNamespace  int
	// ShutdownTimeout bounds the wait for calls and requests in flight
	// once ctx ends. Default 30s.
	ShutdownTimeout time.Duration

	// WorkflowsDir is a directory of declarative workflow files (*.yaml,
	// *.yml, *.json). Any problem in any file fails Run before the store
	// is touched (a *WorkflowsError). The directory is read again on
	// SIGHUP and, with WorkflowsPoll, when a file changes.
	WorkflowsDir  string
	WorkflowsPoll time.Duration
	// EgressAllow opens destinations of outbound calls (HTTP steps,
	// webhooks) that the egress policy refuses by default: host names,
	// host:port, IP addresses, [IPv6]:port or CIDR prefixes.
	EgressAllow []string

	// Workflows and Agents are workflows and agents written in Go that run
	// beside the declarative ones. Without the agent role the agents are
	// declared as running elsewhere. Their names are reserved: a
	// declarative workflow may not take them, nor name one of the agents
	// as a remote agent (at start and on reload).
	Workflows []drover.Workflow
	Agents    []drover.Agent
	// AgentsProvider names the provider of Agents in error messages.
	// Default: "agents in the server's configuration".
	AgentsProvider string
	// Schedules submit workflows (of Workflows or of WorkflowsDir) at
	// recurring due times, beside the schedules: of the workflow files
	// (see drover.Schedule).
	Schedules []drover.Schedule

	// HTTP serves the HTTP API; nil serves none.
	HTTP *HTTPConfig
	// MetricsListen also serves Prometheus metrics (GET /metrics, without
	// tokens) on this address.
	MetricsListen string
	// Webhooks sends signed webhooks; a nil Secret sends none.
	Webhooks Webhooks

	// StartedLog adds key-value pairs to the "server started" log line.
	StartedLog []any
	// OnReady is called once everything runs, before Run waits for ctx.
	OnReady func(Ready)
}

// HTTPConfig configures the HTTP API (see docs/server.md). Zero values of
// the limits take the API's defaults.
type HTTPConfig struct {
	// Listen is the address to serve on (host:port; ":0" picks a port,
	// reported by Ready.Listen).
	Listen string
	// Tokens are the bearer tokens callers send; required unless NoAuth.
	Tokens []Token
	// NoAuth serves without tokens: on a loopback address only, answering
	// only requests for a loopback Host from their own Origin.
	NoAuth bool
	// TLSCert serves HTTPS (and HTTP/2) with TLS 1.2 AEAD suites or 1.3.
	TLSCert *tls.Certificate
	// MaxBodyBytes is the largest request body accepted.
	MaxBodyBytes int64
	// Rate (requests per second, negative: no limit) and Burst limit each
	// token.
	Rate  float64
	Burst int
	// MaxStreams, MaxStreamsPerToken, MaxWaiting and MaxWaitingPerToken
	// cap event streams and waiting calls per server and per token.
	MaxStreams         int
	MaxStreamsPerToken int
	MaxWaiting         int
	MaxWaitingPerToken int
	// MaxWaitingPerNamespace and MaxStreamsPerNamespace cap one
	// namespace's waiting calls and streams (0: three quarters of
	// MaxWaiting and MaxStreams).
	MaxWaitingPerNamespace int
	MaxStreamsPerNamespace int
	// MaxInFlightPerToken caps the tasks one token has submitted that are
	// not final yet; more submits get 429 quota_exceeded (0: no quota).
	MaxInFlightPerToken int
	// MaxInFlightPerNamespace caps the tasks of one namespace (other than
	// the default one) that are not final yet, whoever submitted them;
	// more submits get 429 quota_exceeded (0: no quota).
	MaxInFlightPerNamespace int
	// Heartbeat is the interval of keep-alive comments on idle streams.
	Heartbeat time.Duration
	// QueueCreate is who may create a session queue by publishing to it:
	// QueueCreateSubmit (default) or QueueCreateOperator.
	QueueCreate QueueCreate
	// Redelivery is the delay before a request a remote agent failed
	// transiently is delivered again (zero: the defaults; a negative
	// First: at once).
	Redelivery store.Redelivery
}

// Webhooks configures the webhook dispatcher (see docs/webhooks.md).
type Webhooks struct {
	// Secret signs every delivery; at least 16 bytes. Nil: no webhooks.
	Secret []byte
	// URLs receive the events of every task: final states by default, or
	// what a "#events=LIST" suffix chooses.
	URLs []string
	// CallbackURLPrefixes, when set, are the only prefixes tasks' own
	// callback URLs may start with.
	CallbackURLPrefixes []string
	// MaxPerNamespace caps the requests in flight for one namespace's
	// events (webhook.Options.MaxPerNamespace; 0: its default).
	MaxPerNamespace int
}

// Token is a bearer token of the HTTP API and what it may do.
type Token = httpapi.Token

// Scope is what a token may do: ScopeSubmit, ScopeAgent, ScopeMetrics or
// ScopeOperator.
type Scope = httpapi.Scope

// What a token may do.
const (
	ScopeSubmit   = httpapi.ScopeSubmit   // submit and read tasks, publish messages
	ScopeOperator = httpapi.ScopeOperator // everything an operator does
	ScopeAgent    = httpapi.ScopeAgent    // serve remote agents (Token.Agents)
	ScopeMetrics  = httpapi.ScopeMetrics  // GET /metrics only
)

// QueueCreate says who may create a session queue over the API.
type QueueCreate = httpapi.QueueCreate

// Who may create session queues over the API.
const (
	QueueCreateSubmit   = httpapi.QueueCreateSubmit
	QueueCreateOperator = httpapi.QueueCreateOperator
)

// EnvTokens names the variable "drover server" reads tokens from.
const EnvTokens = httpapi.EnvTokens

// ParseTokens reads tokens, one "TOKEN SCOPE[,SCOPE] [NAME]" per line
// (blank lines and lines starting with # are skipped).
func ParseTokens(r io.Reader) ([]Token, error) { return httpapi.ParseTokens(r) }

// ParseTokensEnv parses entries as in a tokens file separated by ";".
func ParseTokensEnv(s string) ([]Token, error) { return httpapi.ParseTokensEnv(s) }

// Ready describes a server that runs, for Config.OnReady.
type Ready struct {
	// InstanceID is the process's instance ID (LockedBy).
	InstanceID string
	// Roles are the roles it runs, comma-separated ("scheduler,agent").
	Roles string
	// Listen is the HTTP API's bound address ("" without one).
	Listen string
	// URL is the HTTP API's base URL ("" without one).
	URL string
	// Metrics is the metrics listener's bound address ("" without one).
	Metrics string
}
