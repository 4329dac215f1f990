package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/internal/clicore"
	"github.com/drover-run/drover/internal/democmd"
	"github.com/drover-run/drover/internal/egress"
	"github.com/drover-run/drover/internal/orders"
	"github.com/drover-run/drover/internal/tracing"
	"github.com/drover-run/drover/internal/workflowdef"
	"github.com/drover-run/drover/server"
	"github.com/drover-run/drover/store"
)

// ReadyPrefix starts the line "drover server" prints on stderr once it runs.
const ReadyPrefix = "drover server ready "

var roleNames = []string{"scheduler", "agent", "supervisor"}

// parseRoles parses a comma-separated list of role names ("all" for every role).
func parseRoles(s string) (drover.Roles, error) {
	var r drover.Roles
	seen := false
	for _, part := range strings.Split(s, ",") {
		switch strings.ToLower(strings.TrimSpace(part)) {
		case "":
			continue
		case "all":
			r = drover.AllRoles
		case "scheduler", "schedulers":
			r.Scheduler = true
		case "agent", "agents":
			r.Agent = true
		case "supervisor", "supervisors":
			r.Supervisor = true
		default:
			return r, clicore.Usagef("--roles: unknown role %q; want a comma-separated list of %s (or all)", strings.TrimSpace(part), strings.Join(roleNames, ", "))
		}
		seen = true
	}
	if !seen {
		return r, clicore.Usagef("--roles is empty; want a comma-separated list of %s (or all)", strings.Join(roleNames, ", "))
	}
	return r, nil
}

func (e *env) serverCmd() *cobra.Command {
	var (
		roles        string
		instanceID   string
		supInterval  time.Duration
		leaseTTL     time.Duration
		schedulers   int
		noEagerStart bool
		demo         bool
		remoteURL    string
		stepTimeout  time.Duration
		retryDelay   time.Duration
		synchronous  string
		maxInput     int
		pollInterval time.Duration
		shutdown     time.Duration
		wfDir        string
		wfPoll       time.Duration
		egressAllow  []string
		httpMaxPerNS int
		nsInFlight   int
		hf           httpFlags
		wh           webhookFlags
		allowPerms   bool
	)
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run the scheduler, agent and supervisor roles, and with --listen the HTTP API",
		Long: `server runs drover's roles on the database named by --db until interrupted
(SIGINT or SIGTERM: it stops claiming work, lets calls in flight finish or reach
their deadline, and exits; a second signal exits at once). It creates and
migrates the database if needed: the SQLite file, or the PostgreSQL schema
--schema.

On PostgreSQL a database that cannot be used at start-up (down, restarting,
refusing the connection or the login, failing the migration) is waited for:
the server logs "waiting for the database" with the reason and retries with
exponential back-off, 100ms doubling to 5s, until it succeeds or is
interrupted; only a schema newer than this drover fails at once. Once
running, a broken connection is re-established by the connection pool and the
roles retry their work; nothing is lost, since all state is in the database.

With OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, or
OTEL_TRACES_EXPORTER=otlp) set, the server traces every task with
OpenTelemetry and exports the spans with OTLP (http/protobuf, or grpc with
OTEL_EXPORTER_OTLP_PROTOCOL=grpc); OTEL_SDK_DISABLED=true turns it off. See
docs/operations.md, Tracing.

By default one process runs all roles. --roles splits them over processes
(all on the same database): schedulers claim tasks and dispatch steps,
agents call the remote service, and supervisors recover steps whose deadline
passed (only the elected one acts). On PostgreSQL the processes may run on
any number of hosts.

The server runs the workflows declared with --workflows (and the HTTP steps
of every version stored in the database). --demo adds the "orders" demo of
"drover demo orders": its workflow, its agents (inventory, payments,
shipping, inventory-release, payments-refund), which call the remote service
at --remote-url or, without it, an embedded simulated service on 127.0.0.1
with no faults whose URL is logged. Nothing of the demo runs without
--demo. An agent name with two providers (the built-in HTTP agent, the
demo's agents, a remote agent a workflow names) fails the start with an
error naming both.

A task's step time budgets are recorded with the task when it is submitted,
so every process agrees on them: set them with "drover submit --step-timeout".
The server's --step-timeout only sets the budget in the demo's workflow
definition it registers, which tasks submitted elsewhere do not use.

Logs go to stderr (--log-level; as JSON objects with --json). When the
server is running it prints one line on stderr:
  drover server ready instance=ID db=PATH roles=ROLES
(with " schema=NAME" after it on PostgreSQL; the URL is shown without its
password and parameters; with " listen=HOST:PORT" after it when the HTTP API
is served).

--listen ADDR serves the HTTP API (JSON, described at /openapi.json; see
docs/server.md): tasks, alerts and session queues under /v1, /healthz and
/readyz, Prometheus metrics at /metrics (also on their own, without
tokens, with --metrics-listen); remote agents poll
/v1/agents/AGENT/poll. Callers send "Authorization: Bearer TOKEN"; tokens
come from --tokens-file or $DROVER_API_TOKENS, one "TOKEN SCOPE[,SCOPE]
[NAME]" per line (";" between entries in the variable), scopes submit,
agent:AGENT (the remote agent AGENT: poll, complete and fail its requests;
repeat it for several), metrics (/metrics only) and operator; the plain
scope agent (every remote agent) still works and is warned about at start;
the history records a token's operator actions with the actor "http:NAME".
Only agents that a workflow declares remote are handed to remote agents,
never the built-in http agent or agents running in a server. Waiting calls
(agent polls, session accepts and receives with a wait) and event streams
are capped per token and per server (--max-waiting, --max-streams and their
-per-token forms); unknown tokens are rate-limited per client address.
The tokens file (and --webhook-secret-file) must not be open to group or
others: the server refuses to start until it is chmod 600, unless
--allow-insecure-permissions (then it warns).
--insecure-no-auth serves without tokens, on a loopback address only, and
answers only requests for a loopback Host from their own Origin; every
write needs Content-Type: application/json.
--tls-cert/--tls-key serve HTTPS (and HTTP/2; TLS 1.2 with AEAD cipher
suites only, or 1.3). On shutdown the API stops accepting requests and
/readyz answers 503 first; requests in flight finish.

--workflows DIR loads declarative workflows, one per file (*.yaml, *.yml or
*.json; see docs/workflows.md). Every file is checked
first: any problem in any file fails the start, and each problem is printed
as FILE:LINE: FIELD: MESSAGE. Each file's content is stored as a version of
its workflow (the same content keeps its version), and one line is logged
per workflow with its name, version and file. On SIGHUP, and when a file
changes (checked every --workflows-poll; 0 checks only on SIGHUP), the
directory is read again: changed valid files become new versions for new
tasks, invalid ones are logged with every problem and keep their previous
version, and a removed file's workflow stays registered. Tasks keep the
version they were submitted with, across reloads and restarts. A server
with the agent role runs the HTTP steps of every stored version, with or
without --workflows.

Every outbound call (HTTP steps and webhooks) goes through an egress
policy: loopback, private (RFC 1918, fc00::/7), link-local (169.254.0.0/16,
with cloud metadata services, fe80::/10), unspecified, multicast and the
other special-purpose addresses are refused, checked on the URL and on
every address a name resolves to when connecting; a refused call fails at
once with "egress denied: ..." naming the host, the address and why.
--egress-allow RULE (repeatable) opens a destination: a host name (every
address it resolves to), host:port, an IP address, [IPv6]:port or a CIDR
prefix, for example --egress-allow 127.0.0.1 for services on this host.
A workflow file may list its own hosts (egress: {allow: [...]},
docs/workflows.md). HTTP_PROXY and HTTPS_PROXY are not used. A workflow
whose URL names a refused host fails the start (or its reload).

--webhook-secret-file FILE (or $DROVER_WEBHOOK_SECRET) turns on webhooks
(docs/webhooks.md): when a task reaches a final state (Processed,
Compensated, Error, Cancelled) the server POSTs a JSON event, signed as
Standard Webhooks specifies (webhook-id, webhook-timestamp and
webhook-signature headers) with a key of each destination's, to the
task's callback URL and to every --webhook-url; "drover webhook secret
--url URL" prints the whsec_ secret a receiver at URL verifies with. It
retries with back-off and sends the same webhook-id on every attempt, so
receivers de-duplicate on it.
Deliveries are durable: any server with the secret sends the ones due.
A --webhook-url ending in #events=LIST receives the events LIST chooses
instead: final, alerts (every operator alert: a permanent step failure, a
failure that starts compensation, an extended wait, a task in Error, a
blocked session), or event types, for example
--webhook-url 'https://ops.example.com/hook#events=alerts' (the #… part is
not sent).`,
		Example: `  drover server --db sqlite:./drover.db --workflows ./workflows
  drover server --db 'postgres://drover@db:5432/app?sslmode=disable' --schema drover
  drover server --roles scheduler,supervisor --instance-id sched-1 --schedulers 4
  drover server --demo
  drover server --demo --roles agent --remote-url http://127.0.0.1:9000 --instance-id agents-1
  drover server --listen 127.0.0.1:8080 --tokens-file /etc/drover/tokens
  drover server --listen :8443 --tokens-file tokens --tls-cert cert.pem --tls-key key.pem
  drover server --listen 127.0.0.1:8080 --tokens-file tokens --workflows ./workflows
  drover server --listen 127.0.0.1:8080 --tokens-file tokens --workflows ./workflows --egress-allow 127.0.0.1`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := parseRoles(roles)
			if err != nil {
				return err
			}
			t, err := e.Target()
			if err != nil {
				return err
			}
			if err := clicore.CheckSynchronous(cmd, t, synchronous); err != nil {
				return err
			}
			for name, d := range map[string]time.Duration{"--supervisor-interval": supInterval, "--lease-ttl": leaseTTL, "--step-timeout": stepTimeout, "--poll-interval": pollInterval, "--shutdown-timeout": shutdown} {
				if d <= 0 {
					return clicore.Usagef("%s must be positive, got %s", name, d)
				}
			}
			if retryDelay < 0 {
				return clicore.Usagef("--retry-delay must not be negative, got %s", retryDelay)
			}
			if schedulers < 0 {
				return clicore.Usagef("--schedulers must not be negative, got %d", schedulers)
			}
			if maxInput <= 0 {
				return clicore.Usagef("--max-input-bytes must be positive, got %d", maxInput)
			}
			if wfPoll < 0 {
				return clicore.Usagef("--workflows-poll must not be negative, got %s", wfPoll)
			}
			if cmd.Flags().Changed("workflows-poll") && wfDir == "" {
				return clicore.Usagef("--workflows-poll needs --workflows DIR")
			}
			if !demo {
				for _, name := range []string{"remote-url", "step-timeout", "retry-delay"} {
					if cmd.Flags().Changed(name) {
						return clicore.Usagef("--%s needs --demo: it configures the orders demo", name)
					}
				}
			}
			httpCfg, err := e.checkHTTPFlags(cmd, &hf, allowPerms)
			if err != nil {
				return err
			}
			egressRules, err := egress.ParseRules(egressAllow)
			if err != nil {
				return clicore.Usagef("--egress-allow: %v", err)
			}
			hookSecret, err := e.checkWebhookFlags(&wh, egress.New(egress.Options{Allow: egressRules}), allowPerms)
			if err != nil {
				return err
			}
			log := e.Logger(slog.LevelDebug)
			tp, flushTraces, err := tracing.FromEnv(cmd.Context(), nil)
			if err != nil {
				return clicore.Usagef("tracing: %v", err)
			}
			if tp != nil {
				log.Info("tracing on: spans exported with OTLP (OTEL_EXPORTER_OTLP_* environment)")
				defer func() {
					ctx, cancel := context.WithTimeout(context.WithoutCancel(cmd.Context()), 5*time.Second)
					defer cancel()
					if err := flushTraces(ctx); err != nil {
						log.Warn("tracing: spans not exported at shutdown", "err", err)
					}
				}()
			}
			var d *clicore.Database
			cfg := server.Config{
				TracerProvider: tp,
				OpenStore: func(ctx context.Context) (store.Driver, error) {
					var err error
					if d, err = e.openServerStore(ctx, t, synchronous); err != nil {
						return nil, err
					}
					// The driver itself, not the wrapper: the server
					// looks for its optional capabilities (store.Listener).
					return d.Driver, nil
				},
				WaitForStore: t.Postgres, StoreName: t.Desc(), Logger: log,
				InstanceID: instanceID, Roles: r, Schedulers: schedulers,
				SupervisorInterval: supInterval, LeaseTTL: leaseTTL, PollInterval: pollInterval,
				MaxInputBytes: maxInput, NoEagerStart: noEagerStart, ShutdownTimeout: shutdown,
				NamespaceMaxInFlight: nsInFlight, HTTPMaxPerNamespace: httpMaxPerNS,
				WorkflowsDir: wfDir, WorkflowsPoll: wfPoll, EgressAllow: egressAllow,
				HTTP: httpCfg, MetricsListen: hf.metrics,
				Webhooks: server.Webhooks{Secret: hookSecret, URLs: wh.urls, CallbackURLPrefixes: wh.prefixes, MaxPerNamespace: wh.maxPerNS},
				OnReady: func(rd server.Ready) {
					ready := fmt.Sprintf("%sinstance=%s db=%s roles=%s", ReadyPrefix, rd.InstanceID, t.Name(), rd.Roles)
					if t.Postgres {
						ready += " schema=" + t.Schema
					}
					if rd.Listen != "" {
						ready += " listen=" + rd.Listen
					}
					if rd.Metrics != "" {
						ready += " metrics=" + rd.Metrics
					}
					fmt.Fprintln(e.Stderr, ready)
				},
			}
			if demo {
				stopRemote, err := democmd.AddToServer(cmd.Context(), &cfg, remoteURL, orders.Options{StepTimeout: stepTimeout, RetryDelay: retryDelay})
				if err != nil {
					return err
				}
				defer stopRemote()
			}
			return e.serverErr(server.Run(cmd.Context(), cfg), d)
		},
	}
	f := cmd.Flags()
	f.StringVar(&roles, "roles", "scheduler,agent,supervisor", "roles to run: comma-separated scheduler, agent, supervisor (or all)")
	f.StringVar(&instanceID, "instance-id", "", "this process's instance ID (LockedBy); restart with the same ID to resume its tasks (default: host-pid-random)")
	f.DurationVar(&supInterval, "supervisor-interval", time.Second, "time between supervisor sweeps while tasks are held (on PostgreSQL, an idle supervisor sweeps every third of --lease-ttl)")
	f.DurationVar(&leaseTTL, "lease-ttl", 10*time.Second, "how long supervisor leadership lasts unrenewed")
	f.IntVar(&schedulers, "schedulers", 0, "scheduler instances in this process (0: the store's default, 1 on SQLite, 2 on PostgreSQL)")
	f.BoolVar(&noEagerStart, "no-eager-start", false, "leave every submitted task Pending for a claim, instead of starting it in the submitting transaction when a scheduler of this process has room")
	f.BoolVar(&demo, "demo", false, "also run the orders demo: its workflow, its agents and, without --remote-url, an embedded simulated remote service")
	f.StringVar(&remoteURL, "remote-url", "", "with --demo: base URL of the remote service the demo's agents call (default: start an embedded simulated one)")
	f.DurationVar(&stepTimeout, "step-timeout", orders.DefaultStepTimeout, "with --demo: time budget of each step of the demo's workflow as registered here")
	f.DurationVar(&retryDelay, "retry-delay", 0, "with --demo: wait before a recovered step of the demo's workflow is claimed again, doubled on each failure")
	f.StringVar(&synchronous, "synchronous", "full", "SQLite synchronous mode: full (survives power loss) or normal (faster; survives a crash); SQLite only")
	f.IntVar(&maxInput, "max-input-bytes", drover.DefaultMaxInputBytes, "largest task input accepted, in bytes")
	f.DurationVar(&pollInterval, "poll-interval", 100*time.Millisecond, "how often to look for work from other processes (on PostgreSQL, where notifications announce it, only every 30s or this, the longer, as a fallback)")
	f.DurationVar(&shutdown, "shutdown-timeout", 30*time.Second, "how long to wait for calls in flight on shutdown")
	f.StringVar(&wfDir, "workflows", "", "directory of declarative workflow files (*.yaml, *.yml, *.json) to load; reloaded on SIGHUP and on change")
	f.DurationVar(&wfPoll, "workflows-poll", 2*time.Second, "how often to check --workflows for changed files (0: only on SIGHUP)")
	f.BoolVar(&allowPerms, allowInsecurePermsFlag, false, "start although --tokens-file or --webhook-secret-file is open to group or others (a warning is printed); by default that refuses to start: chmod 600 the file")
	f.IntVar(&nsInFlight, "namespace-max-in-flight", 0, "tasks of one namespace a scheduler holds at once, once namespaces are in use, so one namespace's slow tasks leave the others room (0: three quarters of the scheduler's 1024; negative: no cap)")
	f.IntVar(&httpMaxPerNS, "http-max-per-namespace", 0, "calls of HTTP steps one namespace may make at once, once namespaces are in use; its further calls wait, so its slow hosts leave other namespaces slots (0: three quarters of the 256 calls of the process)")
	f.StringArrayVar(&egressAllow, "egress-allow", nil, "open a destination of HTTP steps and webhooks that is refused by default (loopback, private, link-local and other special-purpose addresses): a host name, host:port, an IP address, [IPv6]:port or a CIDR prefix (repeatable), such as --egress-allow 127.0.0.1 or --egress-allow 10.0.0.0/8")
	hf.register(cmd)
	wh.register(cmd)
	return cmd
}

// serverErr is the command's error for what server.Run returned, with the
// flags' names and the store's explanations.
func (e *env) serverErr(err error, d *clicore.Database) error {
	var we *server.WorkflowsError
	var ae *server.AddrError
	var se *server.ShutdownError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &we):
		return workflowsError(e.Stderr, we.Dir, we.Err)
	case errors.As(err, &ae) && errors.Is(err, server.ErrNoAuthNotLoopback):
		return clicore.Usagef("--insecure-no-auth serves without tokens, so it binds a loopback address only (such as 127.0.0.1:PORT), not %s", ae.Addr)
	case errors.As(err, &ae):
		return fmt.Errorf("--%w", err)
	case errors.As(err, &se):
		return fmt.Errorf("shutdown did not finish within --shutdown-timeout %s: %w", se.Timeout, se.Err)
	case d != nil:
		return d.StoreErr(err)
	}
	return err
}

// workflowsError reports a failure to load the --workflows directory. Every
// problem of every invalid file is printed on its own line, FILE:LINE:
// FIELD: MESSAGE, before the error.
func workflowsError(stderr io.Writer, dir string, err error) error {
	var pe *workflowdef.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &pe):
		for _, p := range pe.Problems {
			fmt.Fprintln(stderr, p.String())
		}
		return fmt.Errorf("--workflows %s: %d problem(s) in %d file(s), listed above; no workflow was loaded", dir, len(pe.Problems), pe.Files())
	default:
		return fmt.Errorf("--workflows %s: %w", dir, err)
	}
}

// openServerStore opens and migrates the server's store, creating a
// SQLite file.
func (e *env) openServerStore(ctx context.Context, t clicore.DBTarget, synchronous string) (*clicore.Database, error) {
	if !t.Postgres {
		return e.OpenStore(ctx, clicore.OpenOpts{Target: &t, Create: true, Migrate: true, Synchronous: synchronous})
	}
	return e.OpenStore(ctx, clicore.OpenOpts{Target: &t, Migrate: true})
}
