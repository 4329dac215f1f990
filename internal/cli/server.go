package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/internal/egress"
	"github.com/drover-run/drover/internal/httpagent"
	"github.com/drover-run/drover/internal/orders"
	"github.com/drover-run/drover/internal/remotesim"
	"github.com/drover-run/drover/internal/workflowdef"
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
			return r, usagef("--roles: unknown role %q; want a comma-separated list of %s (or all)", strings.TrimSpace(part), strings.Join(roleNames, ", "))
		}
		seen = true
	}
	if !seen {
		return r, usagef("--roles is empty; want a comma-separated list of %s (or all)", strings.Join(roleNames, ", "))
	}
	return r, nil
}

func rolesString(r drover.Roles) string {
	var out []string
	if r.Scheduler {
		out = append(out, "scheduler")
	}
	if r.Agent {
		out = append(out, "agent")
	}
	if r.Supervisor {
		out = append(out, "supervisor")
	}
	return strings.Join(out, ",")
}

func validSynchronous(s string) error {
	switch strings.ToLower(s) {
	case "full", "normal":
		return nil
	}
	return usagef("--synchronous %q: want full or normal", s)
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
Compensated, Error, Cancelled) the server POSTs a JSON event, signed with
HMAC-SHA256 in the Drover-Signature header with a key of each
destination's (receivers verify with the URL they are called at), to the
task's callback URL and to
every --webhook-url; it retries with back-off and sends the same
Drover-Event-Id on every attempt, so receivers de-duplicate on it.
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
			ctx := cmd.Context()
			r, err := parseRoles(roles)
			if err != nil {
				return err
			}
			t, err := e.target()
			if err != nil {
				return err
			}
			if err := checkSynchronous(cmd, t, synchronous); err != nil {
				return err
			}
			for name, d := range map[string]time.Duration{"--supervisor-interval": supInterval, "--lease-ttl": leaseTTL, "--step-timeout": stepTimeout, "--poll-interval": pollInterval, "--shutdown-timeout": shutdown} {
				if d <= 0 {
					return usagef("%s must be positive, got %s", name, d)
				}
			}
			if retryDelay < 0 {
				return usagef("--retry-delay must not be negative, got %s", retryDelay)
			}
			if schedulers < 0 {
				return usagef("--schedulers must not be negative, got %d", schedulers)
			}
			if maxInput <= 0 {
				return usagef("--max-input-bytes must be positive, got %d", maxInput)
			}
			if wfPoll < 0 {
				return usagef("--workflows-poll must not be negative, got %s", wfPoll)
			}
			if cmd.Flags().Changed("workflows-poll") && wfDir == "" {
				return usagef("--workflows-poll needs --workflows DIR")
			}
			if !demo {
				for _, name := range []string{"remote-url", "step-timeout", "retry-delay"} {
					if cmd.Flags().Changed(name) {
						return usagef("--%s needs --demo: it configures the orders demo", name)
					}
				}
			}
			tokens, cert, err := e.checkHTTPFlags(cmd, &hf, allowPerms)
			if err != nil {
				return err
			}
			egressRules, err := egress.ParseRules(egressAllow)
			if err != nil {
				return usagef("--egress-allow: %v", err)
			}
			outbound := egress.New(egress.Options{Allow: egressRules})
			hookSecret, err := e.checkWebhookFlags(&wh, outbound, allowPerms)
			if err != nil {
				return err
			}
			log := e.logger(slog.LevelDebug)
			// With --demo its workflow's name is taken.
			var reserved []string
			if demo {
				reserved = []string{orders.WorkflowName}
			}
			if wfDir != "" {
				// Fail on an invalid file before touching the database.
				if _, err := workflowdef.Load(wfDir, outbound, reserved...); err != nil {
					return workflowsError(e.stderr, wfDir, err)
				}
			}

			d, err := e.openServerStore(ctx, log, t, synchronous)
			if err != nil {
				return err
			}
			if schedulers == 0 {
				schedulers = drover.DefaultSchedulers(d.Driver) // so the log says how many run
			}
			defer d.Close()

			// The registry of declarative workflows. Without --workflows it
			// still runs the HTTP steps of versions stored by other servers.
			// reg.RemoteInput maps the input of remote agents' requests.
			reg, err := workflowdef.NewRegistry(workflowdef.Options{Store: d.Driver, Logger: log, Reserved: reserved,
				HTTP: httpagent.Options{Egress: outbound}, HTTPMaxPerNamespace: httpMaxPerNS})
			if err != nil {
				return err
			}
			if wfDir != "" {
				if err := loadWorkflows(ctx, e.stderr, reg, wfDir); err != nil {
					return err
				}
			}
			if err := checkAgentProviders(demo, reg); err != nil {
				return err
			}

			cfg := drover.Config{
				Store: d.Driver, InstanceID: instanceID, Roles: r,
				Schedulers: schedulers, SupervisorInterval: supInterval, LeaseTTL: leaseTTL,
				PollInterval: pollInterval, MaxInputBytes: maxInput, Logger: log, NoEagerStart: noEagerStart,
				NamespaceMaxInFlight: nsInFlight,
			}
			if demo {
				stopRemote, err := addDemo(ctx, log, &cfg, &remoteURL, orders.Options{StepTimeout: stepTimeout, RetryDelay: retryDelay})
				if err != nil {
					return err
				}
				defer stopRemote()
			}
			cfg.Workflows = append(cfg.Workflows, reg.Workflows()...)
			cfg.ExternalAgents = append(cfg.ExternalAgents, reg.ExternalAgents()...)
			if r.Agent {
				cfg.Agents = append(cfg.Agents, reg.HTTPAgent())
			} else {
				cfg.ExternalAgents = append(cfg.ExternalAgents, workflowdef.HTTPAgentName)
			}

			c, err := drover.New(cfg)
			if err != nil {
				return err
			}
			if demo {
				reg.Attach(demoGuard{c})
			} else {
				reg.Attach(c)
			}
			var ln net.Listener
			if hf.listen != "" {
				if ln, err = listenHTTP(&hf); err != nil {
					return err
				}
				defer ln.Close()
			}
			metricsReg := newMetrics(c)
			var metricsAddr string
			if hf.metrics != "" {
				ms, mln, err := serveMetrics(hf.metrics, metricsReg, log)
				if err != nil {
					return err
				}
				defer ms.Close()
				metricsAddr = mln.Addr().String()
			}
			if err := e.startServer(ctx, log, d, c, leaseTTL); err != nil {
				return err
			}
			var api *apiServer
			if ln != nil {
				if api, err = serveHTTP(ln, &hf, tokens, cert, c, d, log, c.InstanceID(), reg.RemoteInput, remoteAgent(demo, reg), metricsReg, wh.allow); err != nil {
					sctx, cancel := context.WithTimeout(context.Background(), shutdown)
					defer cancel()
					_ = c.Stop(sctx)
					return err
				}
				log.Info("HTTP API serving", "url", api.url(), "auth", !hf.insecure, "tls", cert != nil)
			}
			if wfDir != "" {
				stopWatch := watchWorkflows(ctx, reg, wfPoll)
				defer stopWatch()
			}
			hooks, stopHooks, err := startWebhooks(ctx, c, hookSecret, &wh, log)
			if err != nil {
				sctx, cancel := context.WithTimeout(context.Background(), shutdown)
				defer cancel()
				_ = c.Stop(sctx)
				return err
			}
			if hooks != nil {
				metricsReg.MustRegister(hooks.Collector())
			}
			metricsReg.MustRegister(namespaceMetrics(reg, api))
			started := []any{"instance", c.InstanceID(), "db", d.desc(), "roles", rolesString(r),
				"schedulers", schedulers, "supervisor_interval", supInterval, "workflows", len(c.Workflows()),
				"egress_opened", outbound.Opened()}
			if demo {
				started = append(started, "demo", true, "remote_url", remoteURL)
			}
			log.Info("server started", started...)
			ready := fmt.Sprintf("%sinstance=%s db=%s roles=%s", ReadyPrefix, c.InstanceID(), d.name, rolesString(r))
			if t.postgres {
				ready += " schema=" + t.schema
			}
			var apiDone chan error
			if api != nil {
				ready += " listen=" + ln.Addr().String()
				apiDone = api.done
			}
			if metricsAddr != "" {
				ready += " metrics=" + metricsAddr
			}
			fmt.Fprintln(e.stderr, ready)

			var apiErr error
			select {
			case <-ctx.Done():
			case apiErr = <-apiDone:
				log.Error("HTTP API stopped", "err", apiErr)
			}
			log.Info("shutting down: waiting for calls in flight", "timeout", shutdown)
			sctx, cancel := context.WithTimeout(context.Background(), shutdown)
			defer cancel()
			if api != nil && apiErr == nil {
				// First stop taking requests: nothing new is submitted
				// while the roles wind down.
				if err := api.shutdown(sctx); err != nil {
					log.Warn("HTTP API: requests in flight did not finish", "err", err)
				}
			}
			stopHooks()
			if err := c.Stop(sctx); err != nil {
				return fmt.Errorf("shutdown did not finish within --shutdown-timeout %s: %w", shutdown, err)
			}
			log.Info("server stopped", "stats", logFields(c.Stats()))
			if apiErr != nil {
				return fmt.Errorf("HTTP API: %w", apiErr)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&roles, "roles", "scheduler,agent,supervisor", "roles to run: comma-separated scheduler, agent, supervisor (or all)")
	f.StringVar(&instanceID, "instance-id", "", "this process's instance ID (LockedBy); restart with the same ID to resume its tasks (default: host-pid-random)")
	f.DurationVar(&supInterval, "supervisor-interval", time.Second, "time between supervisor sweeps")
	f.DurationVar(&leaseTTL, "lease-ttl", 10*time.Second, "how long supervisor leadership lasts unrenewed")
	f.IntVar(&schedulers, "schedulers", 0, "scheduler instances in this process (0: the store's default, 1 on SQLite, 2 on PostgreSQL)")
	f.BoolVar(&noEagerStart, "no-eager-start", false, "leave every submitted task Pending for a claim, instead of starting it in the submitting transaction when a scheduler of this process has room")
	f.BoolVar(&demo, "demo", false, "also run the orders demo: its workflow, its agents and, without --remote-url, an embedded simulated remote service")
	f.StringVar(&remoteURL, "remote-url", "", "with --demo: base URL of the remote service the demo's agents call (default: start an embedded simulated one)")
	f.DurationVar(&stepTimeout, "step-timeout", orders.DefaultStepTimeout, "with --demo: time budget of each step of the demo's workflow as registered here")
	f.DurationVar(&retryDelay, "retry-delay", 0, "with --demo: wait before a recovered step of the demo's workflow is claimed again, doubled on each failure")
	f.StringVar(&synchronous, "synchronous", "full", "SQLite synchronous mode: full (survives power loss) or normal (faster; survives a crash); SQLite only")
	f.IntVar(&maxInput, "max-input-bytes", drover.DefaultMaxInputBytes, "largest task input accepted, in bytes")
	f.DurationVar(&pollInterval, "poll-interval", 100*time.Millisecond, "how often to look for work from other processes")
	f.DurationVar(&shutdown, "shutdown-timeout", 30*time.Second, "how long to wait for calls in flight on shutdown")
	f.StringVar(&wfDir, "workflows", "", "directory of declarative workflow files (*.yaml, *.yml, *.json) to load; reloaded on SIGHUP and on change")
	f.DurationVar(&wfPoll, "workflows-poll", 2*time.Second, "how often to check --workflows for changed files (0: only on SIGHUP)")
	f.BoolVar(&allowPerms, allowInsecurePermsFlag, false, "start although --tokens-file or --webhook-secret-file is open to group or others (a warning is printed); by default that refuses to start: chmod 600 the file")
	f.StringArrayVar(&egressAllow, "egress-allow", nil, "open a destination of HTTP steps and webhooks that is refused by default (loopback, private, link-local and other special-purpose addresses): a host name, host:port, an IP address, [IPv6]:port or a CIDR prefix (repeatable), such as --egress-allow 127.0.0.1 or --egress-allow 10.0.0.0/8")
	f.IntVar(&nsInFlight, "namespace-max-in-flight", 0, "tasks of one namespace a scheduler holds at once, once namespaces are in use, so one namespace's slow tasks leave the others room (0: three quarters of the scheduler's 1024; negative: no cap)")
	f.IntVar(&httpMaxPerNS, "http-max-per-namespace", 0, "calls of HTTP steps one namespace may make at once, once namespaces are in use; its further calls wait, so its slow hosts leave other namespaces slots (0: three quarters of the "+strconv.Itoa(workflowdef.DefaultHTTPConcurrency)+" calls of the process)")
	hf.register(cmd)
	wh.register(cmd)
	return cmd
}

// demoProvider names the orders demo's agents in messages.
const demoProvider = "the orders demo (--demo)"

// addDemo registers the orders demo in cfg: its workflow and, with the
// agent role, its agents, which call *remoteURL or an embedded simulated
// service it starts (its URL is then stored in *remoteURL); without the
// agent role the agents are declared as running elsewhere. The returned
// function stops the embedded service.
func addDemo(ctx context.Context, log *slog.Logger, cfg *drover.Config, remoteURL *string, opts orders.Options) (func(), error) {
	cfg.Workflows = append(cfg.Workflows, orders.Workflow(opts))
	if !cfg.Roles.Agent {
		cfg.ExternalAgents = append(cfg.ExternalAgents, orders.AgentNames()...)
		return func() {}, nil
	}
	stop := func() {}
	if *remoteURL == "" {
		svc := remotesim.New(remotesim.Config{Seed: time.Now().UnixNano()})
		url, stopSvc, err := svc.Serve(context.WithoutCancel(ctx), "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("start the demo's embedded remote service: %w", err)
		}
		stop, *remoteURL = stopSvc, url
		log.Info("embedded remote service of the demo started (no faults)", "url", url)
	}
	cfg.Agents = append(cfg.Agents, orders.Agents(*remoteURL, opts)...)
	return stop, nil
}

// checkAgentProviders fails when an agent name has two providers among the
// built-in HTTP agent, the demo's agents (with demo) and the remote agents
// the registry's workflows name: the scheduler would hand its requests to
// whichever runs here, silently. The error names the agent and both.
func checkAgentProviders(demo bool, reg *workflowdef.Registry) error {
	type provider struct{ kind, what string }
	by := map[string]provider{workflowdef.HTTPAgentName: {"builtin", "the built-in HTTP agent"}}
	var errs []error
	add := func(name string, p provider) {
		if prev, ok := by[name]; ok && prev.kind != p.kind {
			errs = append(errs, fmt.Errorf("%w: agent %q has two providers: %s and %s; one agent name must have one provider: rename the workflow's agent", drover.ErrInvalidConfig, name, prev.what, p.what))
			return
		}
		by[name] = p
	}
	if demo {
		for _, name := range orders.AgentNames() {
			add(name, provider{"demo", demoProvider})
		}
	}
	remote := reg.RemoteAgentSources()
	names := make([]string, 0, len(remote))
	for name := range remote {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		add(name, provider{"remote", "the remote agent named by " + remote[name]})
	}
	return errors.Join(errs...)
}

// remoteAgent reports whether remote agents may serve an agent over the
// API: one a workflow declares remote, never the built-in http agent nor
// the demo's (which run in a server with the agent role).
func remoteAgent(demo bool, reg *workflowdef.Registry) func(string) bool {
	return func(agent string) bool {
		if agent == workflowdef.HTTPAgentName || (demo && slices.Contains(orders.AgentNames(), agent)) {
			return false
		}
		return reg.IsRemoteAgent(agent)
	}
}

// demoGuard is the client the registry of a --demo server registers
// reloaded workflows with: a new version naming one of the demo's agents as
// a remote agent is refused (the registry keeps the previous one), as
// checkAgentProviders refuses it at start.
type demoGuard struct{ *drover.Client }

// AddWorkflows refuses external agents named like the demo's, then
// registers ws.
func (g demoGuard) AddWorkflows(ws []drover.Workflow, externalAgents []string) error {
	var errs []error
	for _, a := range externalAgents {
		if slices.Contains(orders.AgentNames(), a) {
			errs = append(errs, fmt.Errorf("%w: agent %q has two providers: %s and a remote agent of the reloaded workflows; rename the workflow's agent", drover.ErrInvalidConfig, a, demoProvider))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return g.Client.AddWorkflows(ws, externalAgents)
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

// loadWorkflows loads the --workflows directory into the registry.
func loadWorkflows(ctx context.Context, stderr io.Writer, reg *workflowdef.Registry, dir string) error {
	return workflowsError(stderr, dir, reg.LoadDir(ctx, dir))
}

// watchWorkflows reloads the workflow directory on SIGHUP and on change
// until the returned function is called (it waits for a reload in
// progress) or ctx ends.
func watchWorkflows(ctx context.Context, reg *workflowdef.Registry, poll time.Duration) func() {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		reg.Watch(wctx, poll, hup)
	}()
	return func() {
		signal.Stop(hup)
		cancel()
		<-done
	}
}

// checkSynchronous validates --synchronous. It is a SQLite setting: given
// explicitly with a PostgreSQL database it is a usage error, since the
// server's synchronous_commit decides durability there.
func checkSynchronous(cmd *cobra.Command, t dbTarget, synchronous string) error {
	if t.postgres {
		if cmd.Flags().Changed("synchronous") {
			return usagef("--synchronous applies to SQLite only; on PostgreSQL durability is the server's synchronous_commit setting")
		}
		return nil
	}
	return validSynchronous(synchronous)
}

// dbAttemptTimeout bounds one attempt to open and migrate the database, so a
// server whose packets vanish (rather than being refused) still retries.
const dbAttemptTimeout = 30 * time.Second

// openServerStore opens and migrates the server's store. On PostgreSQL it
// waits for the database with exponential back-off until ctx ends.
func (e *env) openServerStore(ctx context.Context, log *slog.Logger, t dbTarget, synchronous string) (*database, error) {
	if !t.postgres {
		return e.openStore(ctx, openOpts{target: &t, create: true, migrate: true, synchronous: synchronous})
	}
	var wait time.Duration
	for {
		actx, cancel := context.WithTimeout(ctx, dbAttemptTimeout)
		d, err := e.openStore(actx, openOpts{target: &t, migrate: true})
		cancel()
		if err == nil {
			return d, nil
		}
		if wait, err = waitForDB(ctx, log, wait, err); err != nil {
			return nil, err
		}
	}
}

// waitForDB logs why the database is not usable yet and sleeps for the next
// back-off interval after wait. It returns the error to give up with when err
// cannot pass by itself or ctx ended.
func waitForDB(ctx context.Context, log *slog.Logger, wait time.Duration, err error) (time.Duration, error) {
	if ctx.Err() != nil {
		return wait, fmt.Errorf("gave up waiting for the database on signal: %w", err)
	}
	if !retryable(err) {
		return wait, err
	}
	wait = nextBackoff(wait)
	log.Warn("waiting for the database", "err", oneLine(err.Error()), "retry_in", wait)
	select {
	case <-ctx.Done():
		return wait, fmt.Errorf("gave up waiting for the database on signal: %w", err)
	case <-time.After(wait):
		return wait, nil
	}
}

// startServer starts the client's roles. After a crash the same instance ID
// frees up when its lease expires (--lease-ttl): that is waited for rather
// than failing; on PostgreSQL so is a database that went away meanwhile.
func (e *env) startServer(ctx context.Context, log *slog.Logger, d *database, c *drover.Client, leaseTTL time.Duration) error {
	var wait time.Duration
	for {
		actx, cancel := context.WithTimeout(ctx, dbAttemptTimeout)
		err := c.Start(actx)
		cancel()
		switch {
		case err == nil:
			return nil
		case errors.Is(err, drover.ErrInstanceInUse):
			log.Warn("waiting for the instance ID to be released", "err", err)
			select {
			case <-ctx.Done():
				return fmt.Errorf("%w; gave up on signal", err)
			case <-time.After(min(leaseTTL/4, time.Second)):
			}
		case d.t.postgres:
			if wait, err = waitForDB(ctx, log, wait, d.storeErr(err)); err != nil {
				return err
			}
		default:
			return d.storeErr(err)
		}
	}
}
