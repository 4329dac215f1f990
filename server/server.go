package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"reflect"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/internal/egress"
	"github.com/drover-run/drover/internal/httpagent"
	"github.com/drover-run/drover/internal/oneline"
	"github.com/drover-run/drover/internal/webhook"
	"github.com/drover-run/drover/internal/workflowdef"
	"github.com/drover-run/drover/store"
)

// DefaultShutdownTimeout is Config.ShutdownTimeout when it is zero.
const DefaultShutdownTimeout = 30 * time.Second

// Server is a configured server, ready to Run.
type Server struct {
	cfg      Config
	log      *slog.Logger
	outbound *egress.Policy
	subs     []webhook.Subscription
	allow    *webhook.Allow
	reserved []string // the workflow names of cfg.Workflows
	agents   []string // the agent names of cfg.Agents
}

// New checks cfg and returns a server that runs it. Errors name the
// Config field that is wrong.
func New(cfg Config) (*Server, error) {
	if (cfg.Store == nil) == (cfg.OpenStore == nil) {
		return nil, fmt.Errorf("%w: server: set one of Config.Store and Config.OpenStore", drover.ErrInvalidConfig)
	}
	if cfg.Roles == (drover.Roles{}) {
		cfg.Roles = drover.AllRoles
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = DefaultShutdownTimeout
	}
	if cfg.AgentsProvider == "" {
		cfg.AgentsProvider = "agents in the server's configuration"
	}
	s := &Server{cfg: cfg, log: cfg.Logger}
	if s.log == nil {
		s.log = slog.Default()
	}
	rules, err := egress.ParseRules(cfg.EgressAllow)
	if err != nil {
		return nil, fmt.Errorf("%w: Config.EgressAllow: %w", drover.ErrInvalidConfig, err)
	}
	s.outbound = egress.New(egress.Options{Allow: rules})
	if err := s.checkWebhooks(); err != nil {
		return nil, fmt.Errorf("%w: %w", drover.ErrInvalidConfig, err)
	}
	if h := cfg.HTTP; h != nil && !h.NoAuth && len(h.Tokens) == 0 {
		return nil, fmt.Errorf("%w: Config.HTTP needs Tokens (or NoAuth on a loopback address)", drover.ErrInvalidConfig)
	}
	for _, w := range cfg.Workflows {
		s.reserved = append(s.reserved, w.Name)
	}
	for _, a := range cfg.Agents {
		s.agents = append(s.agents, a.Name)
	}
	return s, nil
}

// Run runs the server until ctx ends, then stops it: the HTTP API first
// stops taking requests (and /readyz answers 503), the webhook dispatcher
// and the roles let calls in flight finish within ShutdownTimeout.
func Run(ctx context.Context, cfg Config) error {
	s, err := New(cfg)
	if err != nil {
		return err
	}
	return s.Run(ctx)
}

// WorkflowsError is Run's error for an invalid workflows directory. Err
// is a *workflowdef.Error listing every problem when the files were read.
type WorkflowsError struct {
	Dir string
	Err error
}

func (e *WorkflowsError) Error() string { return fmt.Sprintf("workflows %s: %v", e.Dir, e.Err) }
func (e *WorkflowsError) Unwrap() error { return e.Err }

// AddrError is Run's error for an address it could not serve on. What is
// "listen" (the HTTP API) or "metrics-listen".
type AddrError struct {
	What, Addr string
	Err        error
}

func (e *AddrError) Error() string { return fmt.Sprintf("%s %s: %v", e.What, e.Addr, e.Err) }
func (e *AddrError) Unwrap() error { return e.Err }

// ErrNoAuthNotLoopback is the error of an HTTP API without tokens on an
// address other than a loopback one.
var ErrNoAuthNotLoopback = errors.New("an HTTP API without tokens binds a loopback address only")

// Run runs the server until ctx ends; see the package function Run.
func (s *Server) Run(ctx context.Context) error {
	cfg, log := &s.cfg, s.log
	if cfg.WorkflowsDir != "" {
		// Fail on an invalid file before touching the database.
		if _, err := workflowdef.Load(cfg.WorkflowsDir, s.outbound, s.reserved...); err != nil {
			return &WorkflowsError{cfg.WorkflowsDir, err}
		}
	}
	drv := cfg.Store
	if drv == nil {
		var err error
		if drv, err = s.openStore(ctx); err != nil {
			return err
		}
		defer drv.Close()
	}
	schedulers := cfg.Schedulers
	if schedulers == 0 {
		schedulers = drover.DefaultSchedulers(drv) // so the log says how many run
	}

	// The registry of declarative workflows. Without a directory it still
	// runs the HTTP steps of versions stored by other servers.
	// reg.RemoteInput maps the input of remote agents' requests.
	reg, err := workflowdef.NewRegistry(workflowdef.Options{Store: drv, Logger: log, Reserved: s.reserved,
		HTTP: httpagent.Options{Egress: s.outbound}, HTTPMaxPerNamespace: cfg.HTTPMaxPerNamespace})
	if err != nil {
		return err
	}
	if cfg.WorkflowsDir != "" {
		if err := reg.LoadDir(ctx, cfg.WorkflowsDir); err != nil {
			return &WorkflowsError{cfg.WorkflowsDir, err}
		}
	}
	if err := s.checkAgentProviders(reg); err != nil {
		return err
	}

	dc := drover.Config{
		Store: drv, InstanceID: cfg.InstanceID, Roles: cfg.Roles,
		Schedulers: schedulers, SupervisorInterval: cfg.SupervisorInterval, LeaseTTL: cfg.LeaseTTL,
		PollInterval: cfg.PollInterval, MaxInputBytes: cfg.MaxInputBytes, Logger: log, NoEagerStart: cfg.NoEagerStart,
		NamespaceMaxInFlight: cfg.NamespaceMaxInFlight, TracerProvider: cfg.TracerProvider,
		Workflows: slices.Clone(cfg.Workflows),
	}
	if cfg.Roles.Agent {
		dc.Agents = slices.Clone(cfg.Agents)
	} else {
		dc.ExternalAgents = slices.Clone(s.agents)
	}
	dc.Workflows = append(dc.Workflows, reg.Workflows()...)
	dc.Schedules = append(slices.Clone(cfg.Schedules), reg.Schedules()...)
	dc.ExternalAgents = append(dc.ExternalAgents, reg.ExternalAgents()...)
	if cfg.Roles.Agent {
		dc.Agents = append(dc.Agents, reg.HTTPAgent())
	} else {
		dc.ExternalAgents = append(dc.ExternalAgents, workflowdef.HTTPAgentName)
	}
	c, err := drover.New(dc)
	if err != nil {
		return err
	}
	if len(s.agents) > 0 {
		reg.Attach(agentGuard{c, s})
	} else {
		reg.Attach(c)
	}
	var ln net.Listener
	if cfg.HTTP != nil {
		if ln, err = listenHTTP(cfg.HTTP); err != nil {
			return err
		}
		defer ln.Close()
	}
	metricsReg := newMetrics(c)
	var metricsAddr string
	if cfg.MetricsListen != "" {
		ms, mln, err := serveMetrics(cfg.MetricsListen, metricsReg, log)
		if err != nil {
			return err
		}
		defer ms.Close()
		metricsAddr = mln.Addr().String()
	}
	if err := s.start(ctx, c); err != nil {
		return err
	}
	stopClient := func() {
		sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
		defer cancel()
		_ = c.Stop(sctx)
	}
	var api *apiServer
	if ln != nil {
		if api, err = s.serveHTTP(ln, c, drv, reg, metricsReg); err != nil {
			stopClient()
			return err
		}
		log.Info("HTTP API serving", "url", api.url(), "console", api.url()+"/", "auth", !cfg.HTTP.NoAuth, "tls", cfg.HTTP.TLSCert != nil)
	}
	if cfg.WorkflowsDir != "" {
		stopWatch := watchWorkflows(ctx, reg, cfg.WorkflowsPoll)
		defer stopWatch()
	}
	hooks, stopHooks, err := s.startWebhooks(ctx, c)
	if err != nil {
		stopClient()
		return err
	}
	if hooks != nil {
		metricsReg.MustRegister(hooks.Collector())
	}
	metricsReg.MustRegister(namespaceMetrics(c, reg, hooks, api))
	started := []any{"instance", c.InstanceID(), "db", cfg.StoreName, "roles", rolesString(cfg.Roles),
		"schedulers", schedulers, "supervisor_interval", cfg.SupervisorInterval, "workflows", len(c.Workflows()),
		"egress_opened", s.outbound.Opened()}
	started = append(started, cfg.StartedLog...)
	log.Info("server started", started...)
	ready := Ready{InstanceID: c.InstanceID(), Roles: rolesString(cfg.Roles), Metrics: metricsAddr}
	var apiDone chan error
	if api != nil {
		ready.Listen, ready.URL = ln.Addr().String(), api.url()
		apiDone = api.done
	}
	if cfg.OnReady != nil {
		cfg.OnReady(ready)
	}

	var apiErr error
	select {
	case <-ctx.Done():
	case apiErr = <-apiDone:
		log.Error("HTTP API stopped", "err", apiErr)
	}
	log.Info("shutting down: waiting for calls in flight", "timeout", cfg.ShutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if api != nil && apiErr == nil {
		// First stop taking requests: nothing new is submitted while the
		// roles wind down.
		if err := api.shutdown(sctx); err != nil {
			log.Warn("HTTP API: requests in flight did not finish", "err", err)
		}
	}
	stopHooks()
	if err := c.Stop(sctx); err != nil {
		return &ShutdownError{cfg.ShutdownTimeout, err}
	}
	log.Info("server stopped", "stats", logFields(c.Stats()))
	if apiErr != nil {
		return fmt.Errorf("HTTP API: %w", apiErr)
	}
	return nil
}

// ShutdownError is Run's error when calls in flight outlast the shutdown
// timeout.
type ShutdownError struct {
	Timeout time.Duration
	Err     error
}

func (e *ShutdownError) Error() string {
	return fmt.Sprintf("shutdown did not finish within %s: %v", e.Timeout, e.Err)
}
func (e *ShutdownError) Unwrap() error { return e.Err }

// rolesString lists the roles r runs, comma-separated.
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

// checkAgentProviders fails when an agent name has two providers among the
// built-in HTTP agent, Config.Agents and the remote agents the registry's
// workflows name: the scheduler would hand its requests to whichever runs
// here, silently. The error names the agent and both.
func (s *Server) checkAgentProviders(reg *workflowdef.Registry) error {
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
	for _, name := range s.agents {
		add(name, provider{"config", s.cfg.AgentsProvider})
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
// one of Config.Agents (which run in a server with the agent role).
func (s *Server) remoteAgent(reg *workflowdef.Registry) func(string) bool {
	return func(agent string) bool {
		if agent == workflowdef.HTTPAgentName || slices.Contains(s.agents, agent) {
			return false
		}
		return reg.IsRemoteAgent(agent)
	}
}

// agentGuard is the client the registry of a server with Config.Agents
// registers reloaded workflows with: a new version naming one of them as a
// remote agent is refused (the registry keeps the previous one), as
// checkAgentProviders refuses it at start.
type agentGuard struct {
	*drover.Client
	s *Server
}

// AddWorkflows refuses external agents named like Config.Agents, then
// registers ws.
func (g agentGuard) AddWorkflows(ws []drover.Workflow, externalAgents []string) error {
	var errs []error
	for _, a := range externalAgents {
		if slices.Contains(g.s.agents, a) {
			errs = append(errs, fmt.Errorf("%w: agent %q has two providers: %s and a remote agent of the reloaded workflows; rename the workflow's agent", drover.ErrInvalidConfig, a, g.s.cfg.AgentsProvider))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return g.Client.AddWorkflows(ws, externalAgents)
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

// attemptTimeout bounds one attempt to open the store or start the roles,
// so a server whose packets vanish (rather than being refused) still
// retries.
const attemptTimeout = 30 * time.Second

// openStore calls Config.OpenStore, with WaitForStore until it succeeds.
func (s *Server) openStore(ctx context.Context) (store.Driver, error) {
	var wait time.Duration
	for {
		actx, cancel := context.WithTimeout(ctx, attemptTimeout)
		d, err := s.cfg.OpenStore(actx)
		cancel()
		if err == nil {
			return d, nil
		}
		if !s.cfg.WaitForStore {
			return nil, err
		}
		if wait, err = waitForStore(ctx, s.log, wait, err); err != nil {
			return nil, err
		}
	}
}

// start starts the client's roles. After a crash the same instance ID
// frees up when its lease expires: that is waited for rather than
// failing; with WaitForStore so is a store that went away meanwhile.
func (s *Server) start(ctx context.Context, c *drover.Client) error {
	leaseTTL := s.cfg.LeaseTTL
	if leaseTTL <= 0 {
		leaseTTL = 10 * time.Second
	}
	var wait time.Duration
	for {
		actx, cancel := context.WithTimeout(ctx, attemptTimeout)
		err := c.Start(actx)
		cancel()
		switch {
		case err == nil:
			return nil
		case errors.Is(err, drover.ErrInstanceInUse):
			s.log.Warn("waiting for the instance ID to be released", "err", err)
			select {
			case <-ctx.Done():
				return fmt.Errorf("%w; gave up on signal", err)
			case <-time.After(min(leaseTTL/4, time.Second)):
			}
		case s.cfg.WaitForStore:
			if wait, err = waitForStore(ctx, s.log, wait, err); err != nil {
				return err
			}
		default:
			return err
		}
	}
}

// waitForStore logs why the store is not usable yet and sleeps for the
// next back-off interval after wait (100ms doubling to 5s). It returns the
// error to give up with when err cannot pass by itself or ctx ended.
func waitForStore(ctx context.Context, log *slog.Logger, wait time.Duration, err error) (time.Duration, error) {
	if ctx.Err() != nil {
		return wait, fmt.Errorf("gave up waiting for the database on signal: %w", err)
	}
	if !retryable(err) {
		return wait, err
	}
	wait = nextBackoff(wait)
	log.Warn("waiting for the database", "err", oneline.Fold(err.Error()), "retry_in", wait)
	select {
	case <-ctx.Done():
		return wait, fmt.Errorf("gave up waiting for the database on signal: %w", err)
	case <-time.After(wait):
		return wait, nil
	}
}

// retryable tells whether a start-up error may go away by itself (the
// database is unreachable, restarting, or not accepting connections yet).
// Errors about drover's own configuration and schema are not.
func retryable(err error) bool {
	if err == nil {
		return false
	}
	for _, perm := range []error{drover.ErrSchemaTooNew, drover.ErrInvalidConfig, drover.ErrInvalidWorkflow, drover.ErrUnknownAgent, drover.ErrUnknownWorkflow, drover.ErrStoreCorrupt} {
		if errors.Is(err, perm) {
			return false
		}
	}
	return true
}

// nextBackoff returns the next wait of an exponential back-off from 100ms
// to 5s.
func nextBackoff(d time.Duration) time.Duration {
	if d <= 0 {
		return 100 * time.Millisecond
	}
	return min(2*d, 5*time.Second)
}

// logFields is a struct as a log group of its fields, named as in its JSON
// (stats.dispatched=12 in text logs, "stats":{"dispatched":12} in JSON).
func logFields(v any) slog.Value {
	rv := reflect.ValueOf(v)
	rt := rv.Type()
	attrs := make([]slog.Attr, 0, rt.NumField())
	for i := range rt.NumField() {
		f := rt.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		attrs = append(attrs, slog.Any(name, rv.Field(i).Interface()))
	}
	return slog.GroupValue(attrs...)
}
