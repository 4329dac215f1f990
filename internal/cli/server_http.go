package cli

import (
	"crypto/tls"
	"fmt"
	"os"
	"runtime"
	"time"

	"github.com/spf13/cobra"

	"github.com/drover-run/drover/internal/clicore"
	"github.com/drover-run/drover/internal/httpapi"
	"github.com/drover-run/drover/server"
	"github.com/drover-run/drover/store"
)

// httpFlags are the flags of the server's HTTP API.
type httpFlags struct {
	listen       string
	tokensFile   string
	tlsCert      string
	tlsKey       string
	insecure     bool
	maxBodyBytes int64
	rate         float64
	burst        int
	maxStreams   int
	maxStreamsTk int // --max-streams-per-token
	maxWaiting   int
	maxWaitingTk int // --max-waiting-per-token
	maxWaitingNS int // --max-waiting-per-namespace
	maxStreamsNS int // --max-streams-per-namespace
	maxTasksTk   int // --max-in-flight-per-token
	maxTasksNS   int // --max-in-flight-per-namespace
	heartbeat    time.Duration
	queueCreate  string
	metrics      string // --metrics-listen
	redelivery   store.Redelivery
}

func (f *httpFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.listen, "listen", "", "serve the HTTP API on this address (host:port; :0 picks a port, shown in the ready line); default: no HTTP API")
	fl.StringVar(&f.metrics, "metrics-listen", "", "also serve Prometheus metrics (GET /metrics, no token) on this address, with or without --listen; bind an address only your monitoring reaches")
	fl.StringVar(&f.tokensFile, "tokens-file", "", "file of API bearer tokens, one \"TOKEN SCOPE[,SCOPE] [NAME]\" per line (scopes: submit, agent:AGENT, metrics, operator, ns:NAMESPACE, which confines the token to a namespace (a metrics token to its namespace's series); NAME is recorded as the actor of its operator actions); default: $"+httpapi.EnvTokens+" (entries separated by \";\")")
	fl.StringVar(&f.tlsCert, "tls-cert", "", "serve the HTTP API over TLS (and HTTP/2) with this PEM certificate file (needs --tls-key)")
	fl.StringVar(&f.tlsKey, "tls-key", "", "PEM private key file of --tls-cert")
	fl.BoolVar(&f.insecure, "insecure-no-auth", false, "serve the HTTP API without tokens; allowed on a loopback address only")
	fl.Int64Var(&f.maxBodyBytes, "max-body-bytes", httpapi.DefaultMaxBodyBytes, "largest HTTP request body accepted, in bytes")
	fl.Float64Var(&f.rate, "rate-limit", httpapi.DefaultRate, "HTTP requests per second allowed per token (sustained; negative: no limit)")
	fl.IntVar(&f.burst, "rate-burst", httpapi.DefaultBurst, "HTTP requests a token may send at once above --rate-limit")
	fl.IntVar(&f.maxStreams, "max-streams", httpapi.DefaultMaxStreams, "event streams (SSE) served at once; more get 503 with Retry-After")
	fl.IntVar(&f.maxStreamsTk, "max-streams-per-token", httpapi.DefaultMaxStreamsPerToken, "event streams one token may hold open; more get 429 with Retry-After")
	fl.IntVar(&f.maxWaiting, "max-waiting", httpapi.DefaultMaxWaiting, "waiting calls served at once (remote agents' polls, session accepts and receives with a wait); more get 503 with Retry-After")
	fl.IntVar(&f.maxWaitingTk, "max-waiting-per-token", httpapi.DefaultMaxWaitingPerToken, "waiting calls one token may hold; more get 429 with Retry-After")
	fl.IntVar(&f.maxWaitingNS, "max-waiting-per-namespace", 0, "waiting calls one namespace may hold (all its tokens), once namespaces are in use; more get 429 with Retry-After (0: three quarters of --max-waiting)")
	fl.IntVar(&f.maxStreamsNS, "max-streams-per-namespace", 0, "event streams one namespace may hold open, once namespaces are in use; more get 429 with Retry-After (0: three quarters of --max-streams)")
	fl.IntVar(&f.maxTasksNS, "max-in-flight-per-namespace", 0, "tasks one namespace may have in flight (not yet final: Pending, Processing or Compensating), whoever submitted them; a submit of a new task beyond it gets 429 quota_exceeded (0: no quota; the default namespace has none)")
	fl.IntVar(&f.maxTasksTk, "max-in-flight-per-token", 0, "tasks one token may have in flight (submitted and not yet final: Pending, Processing or Compensating); a submit of a new task beyond it gets 429 quota_exceeded (0: no quota; tokens sharing a name share it)")
	fl.StringVar(&f.queueCreate, "queue-create", string(httpapi.QueueCreateSubmit), "who may create a session queue by publishing to it over the API: submit (any token that may publish) or operator (operator tokens only; others publish to existing queues, 403 otherwise)")
	fl.DurationVar(&f.heartbeat, "stream-heartbeat", httpapi.DefaultHeartbeat, "interval of the keep-alive comments on idle event streams")
	fl.DurationVar(&f.redelivery.First, "agent-redelivery-delay", httpapi.DefaultRedeliveryFirst, "how long a request a remote agent failed transiently waits before it is delivered again; doubles with each transient failure of the request (0: at once)")
	fl.DurationVar(&f.redelivery.Max, "agent-redelivery-max-delay", httpapi.DefaultRedeliveryMax, "longest wait of --agent-redelivery-delay as it doubles (unset: 30s, or --agent-redelivery-delay if longer)")
}

// checkHTTPFlags validates the flags and loads tokens and the certificate,
// before anything starts. It returns the API's configuration, nil without
// --listen.
func (e *env) checkHTTPFlags(cmd *cobra.Command, f *httpFlags, allowPerms bool) (*server.HTTPConfig, error) {
	tokens, cert, err := e.checkHTTPFlagValues(cmd, f, allowPerms)
	if err != nil || f.listen == "" {
		return nil, err
	}
	return &server.HTTPConfig{Listen: f.listen, Tokens: tokens, NoAuth: f.insecure, TLSCert: cert, MaxBodyBytes: f.maxBodyBytes,
		Rate: f.rate, Burst: f.burst, MaxStreams: f.maxStreams, MaxStreamsPerToken: f.maxStreamsTk,
		MaxWaiting: f.maxWaiting, MaxWaitingPerToken: f.maxWaitingTk, Heartbeat: f.heartbeat,
		MaxWaitingPerNamespace: f.maxWaitingNS, MaxStreamsPerNamespace: f.maxStreamsNS, MaxInFlightPerToken: f.maxTasksTk,
		QueueCreate: server.QueueCreate(f.queueCreate), Redelivery: f.apiRedelivery(), MaxInFlightPerNamespace: f.maxTasksNS}, nil
}

// checkHTTPFlagValues checks the flags and loads the tokens (nil with
// --insecure-no-auth) and the certificate.
func (e *env) checkHTTPFlagValues(cmd *cobra.Command, f *httpFlags, allowPerms bool) ([]server.Token, *tls.Certificate, error) {
	if f.listen == "" {
		for _, name := range []string{"tokens-file", "tls-cert", "tls-key", "insecure-no-auth", "max-body-bytes", "rate-limit", "rate-burst", "max-streams", "stream-heartbeat",
			"agent-redelivery-delay", "agent-redelivery-max-delay", "max-streams-per-token", "max-waiting", "max-waiting-per-token", "queue-create",
			"max-waiting-per-namespace", "max-streams-per-namespace", "max-in-flight-per-token", "max-in-flight-per-namespace"} {
			if cmd.Flags().Changed(name) {
				return nil, nil, clicore.Usagef("--%s needs --listen", name)
			}
		}
		return nil, nil, nil
	}
	if f.maxBodyBytes <= 0 {
		return nil, nil, clicore.Usagef("--max-body-bytes must be positive, got %d", f.maxBodyBytes)
	}
	if f.burst <= 0 {
		return nil, nil, clicore.Usagef("--rate-burst must be positive, got %d", f.burst)
	}
	if f.rate == 0 {
		return nil, nil, clicore.Usagef("--rate-limit must not be 0 (negative: no limit)")
	}
	for name, n := range map[string]int{"--max-streams": f.maxStreams, "--max-streams-per-token": f.maxStreamsTk, "--max-waiting": f.maxWaiting, "--max-waiting-per-token": f.maxWaitingTk} {
		if n <= 0 {
			return nil, nil, clicore.Usagef("%s must be positive, got %d", name, n)
		}
	}
	for name, n := range map[string]int{"--max-waiting-per-namespace": f.maxWaitingNS, "--max-streams-per-namespace": f.maxStreamsNS, "--max-in-flight-per-token": f.maxTasksTk,
		"--max-in-flight-per-namespace": f.maxTasksNS} {
		if n < 0 {
			return nil, nil, clicore.Usagef("%s must not be negative, got %d", name, n)
		}
	}
	switch httpapi.QueueCreate(f.queueCreate) {
	case httpapi.QueueCreateSubmit, httpapi.QueueCreateOperator:
	default:
		return nil, nil, clicore.Usagef("--queue-create %q: want submit or operator", f.queueCreate)
	}
	if f.heartbeat < 100*time.Millisecond {
		return nil, nil, clicore.Usagef("--stream-heartbeat must be at least 100ms, got %s", f.heartbeat)
	}
	if !cmd.Flags().Changed("agent-redelivery-max-delay") && f.redelivery.First > f.redelivery.Max {
		f.redelivery.Max = f.redelivery.First // a first delay above the default max: no doubling
	}
	if f.redelivery.First > store.MaxRedelivery {
		return nil, nil, clicore.Usagef("--agent-redelivery-delay %s is above %s", f.redelivery.First, store.MaxRedelivery)
	}
	if err := f.redelivery.Validate(); err != nil {
		return nil, nil, clicore.Usagef("--agent-redelivery-delay, --agent-redelivery-max-delay: %v", err)
	}
	if (f.tlsCert == "") != (f.tlsKey == "") {
		return nil, nil, clicore.Usagef("--tls-cert and --tls-key go together")
	}
	var cert *tls.Certificate
	if f.tlsCert != "" {
		c, err := tls.LoadX509KeyPair(f.tlsCert, f.tlsKey)
		if err != nil {
			return nil, nil, fmt.Errorf("load --tls-cert/--tls-key: %w", err)
		}
		cert = &c
	}
	var tokens []server.Token
	var err error
	switch {
	case f.insecure:
		if f.tokensFile != "" {
			return nil, nil, clicore.Usagef("--insecure-no-auth and --tokens-file exclude each other")
		}
		return nil, cert, nil
	case f.tokensFile != "":
		fh, oerr := os.Open(f.tokensFile)
		if oerr != nil {
			return nil, nil, fmt.Errorf("--tokens-file: %w", oerr)
		}
		if err := e.checkSecretFile(fh, "--tokens-file", f.tokensFile, allowPerms); err != nil {
			fh.Close()
			return nil, nil, err
		}
		tokens, err = httpapi.ParseTokens(fh)
		fh.Close()
		if err != nil {
			return nil, nil, fmt.Errorf("--tokens-file %s: %w", f.tokensFile, err)
		}
	case e.Getenv(httpapi.EnvTokens) != "":
		if tokens, err = httpapi.ParseTokensEnv(e.Getenv(httpapi.EnvTokens)); err != nil {
			return nil, nil, fmt.Errorf("$%s: %w", httpapi.EnvTokens, err)
		}
	}
	if len(tokens) == 0 {
		return nil, nil, clicore.Usagef("--listen needs API tokens: --tokens-file FILE or $%s (or --insecure-no-auth on a loopback address)", httpapi.EnvTokens)
	}
	return tokens, cert, nil
}

// allowInsecurePermsFlag accepts secret files other users may read.
const allowInsecurePermsFlag = "allow-insecure-permissions"

// checkSecretFile refuses a file of secrets (opened as fh) that the
// group or others may read or write: every user of the machine could use
// its tokens. With allow it only warns, on stderr. Not on Windows, whose
// permissions are not mode bits.
func (e *env) checkSecretFile(fh *os.File, flag, path string, allow bool) error {
	mode, open, err := openToOthers(fh)
	if err != nil {
		return fmt.Errorf("%s: %w", flag, err)
	}
	if !open {
		return nil
	}
	if allow {
		fmt.Fprintf(e.Stderr, "drover: WARNING: %s %s is open to group or others (mode %04o); accepted because of --%s: chmod 600 it\n", flag, path, mode, allowInsecurePermsFlag)
		return nil
	}
	return fmt.Errorf("%s %s is open to group or others (mode %04o): other users of this machine could read its secrets; run chmod 600 %s (or pass --%s to accept it)",
		flag, path, mode, path, allowInsecurePermsFlag)
}

// openToOthers reports whether the group or others may read or write the
// file fh, and its permission bits. Never on Windows, whose permissions
// are not mode bits.
func openToOthers(fh *os.File) (mode os.FileMode, open bool, err error) {
	if runtime.GOOS == "windows" {
		return 0, false, nil
	}
	fi, err := fh.Stat()
	if err != nil {
		return 0, false, err
	}
	mode = fi.Mode().Perm()
	return mode, mode&0o077 != 0, nil
}

// apiRedelivery is server.HTTPConfig.Redelivery for the flags: there, a
// zero value means the default and a negative First means at once.
func (f *httpFlags) apiRedelivery() store.Redelivery {
	if f.redelivery.First == 0 {
		return store.Redelivery{First: -1}
	}
	return f.redelivery
}
