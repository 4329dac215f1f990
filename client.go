package drover

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/agentrt"
	"github.com/drover-run/drover/internal/clock"
	"github.com/drover-run/drover/internal/engine"
	"github.com/drover-run/drover/internal/flow"
	"github.com/drover-run/drover/internal/instrument"
	"github.com/drover-run/drover/internal/notifier"
	"github.com/drover-run/drover/internal/tracing"
	"github.com/drover-run/drover/store"
)

// Roles selects what a Client runs when started.
type Roles struct {
	Scheduler  bool
	Agent      bool
	Supervisor bool
}

// AllRoles runs scheduler, agents and supervisor in one process.
var AllRoles = Roles{Scheduler: true, Agent: true, Supervisor: true}

// Config configures a Client.
type Config struct {
	// Store is the state store driver, for example from sqlite.Open. Required.
	Store store.Driver
	// InstanceID names this process in LockedBy and in events. Restarting
	// with the same ID resumes the tasks the process held. Default: a
	// random ID (tasks of a previous run are then recovered by the
	// supervisor once their CompleteBy passes).
	InstanceID string
	// Workflows this client can submit and schedule.
	Workflows []Workflow
	// Schedules submit workflows of Workflows at recurring due times (see
	// Schedule). Start stores them; the processes with the Supervisor
	// role fire them, each due time once. Give every such process the
	// same schedules.
	Schedules []Schedule
	// Agents this process runs (with the Agent role).
	Agents []Agent
	// ExternalAgents are agents that run in other processes; steps may name
	// them without a local registration. A name in both Agents and
	// ExternalAgents is an error: one agent name has one provider.
	ExternalAgents []string
	// Roles to run on Start. Zero value: all roles. A client that only
	// submits and reads never calls Start and needs no roles or agents.
	Roles Roles
	// Schedulers is how many scheduler instances (goroutines) to run.
	// Default: DefaultSchedulers(Store).
	Schedulers int
	// SupervisorInterval is the time between supervisor sweeps. Default 1s.
	// Where the store notifies (PostgreSQL), a supervisor with no task held
	// sweeps only every LeaseTTL/3, and every SupervisorInterval again once
	// a submit wakes it or a sweep finds tasks held.
	SupervisorInterval time.Duration
	// LeaseTTL is how long supervisor leadership lasts unrenewed. Default 10s.
	LeaseTTL time.Duration
	// Retention, when positive, makes the supervisor leader delete final
	// tasks (and their steps and events) last updated longer ago than this;
	// an ordering key goes with its last task. Default 0: keep everything.
	Retention time.Duration
	// MaxInFlight caps the tasks one scheduler holds at once. Default
	// DefaultMaxInFlight.
	MaxInFlight int
	// ClaimBatch caps the tasks claimed per transaction. Default 256.
	ClaimBatch int
	// NamespaceMaxInFlight caps the tasks of one namespace
	// (SubmitOptions.Namespace) one scheduler holds at once, so that one
	// namespace's slow tasks cannot take all of MaxInFlight. It applies
	// once a scheduler has claimed or started a task of a namespace other
	// than the default one, to claims and to starts at submission (see
	// NoEagerStart) alike: a task over the cap waits Pending for a claim.
	// Default: three quarters of MaxInFlight; negative: no cap.
	NamespaceMaxInFlight int
	// NoEagerStart turns eager start off. By default, a Submit (and a
	// SubmitMany of one task; not SubmitTx, nor SubmitMany of several) in
	// a process running the scheduler role starts the new task in the
	// transaction that stores it (shared by concurrent Submits): the task
	// is stored already claimed by one of this process's schedulers, with
	// its first step dispatched (to an agent of this process if one has a
	// free slot), instead of Pending for the next claim. That saves a
	// transaction and a scheduler tick per task, most of a task's latency
	// under light load. Tasks with an OrderingKey, and tasks beyond the
	// schedulers' room (MaxInFlight), wait for a claim. Set it to leave
	// every new task to the claims of all processes' schedulers.
	NoEagerStart bool
	// PollInterval is how often roles poll the store when nothing in this
	// process signals new work (work from other processes). Default 100ms.
	// Where the store notifies (PostgreSQL) and the Clock is the real one,
	// the roles rely on notifications and poll only every 30s (or
	// PollInterval, the longer) as a fallback; a scheduler with nothing to
	// claim sleeps until the next delayed task is due: see
	// docs/operations.md.
	PollInterval time.Duration
	// MaxInputBytes caps a task's input. Default 1 MiB.
	MaxInputBytes int
	// IsPermanent classifies agent errors as permanent in addition to those
	// wrapped with Permanent; for errors from libraries you do not control.
	IsPermanent func(error) bool
	// Clock defaults to the system clock.
	Clock Clock
	// Logger defaults to a discarding logger.
	Logger *slog.Logger
	// TracerProvider, when set, traces every task with OpenTelemetry: a
	// drover.submit span per Submit, whose context is stored with the
	// task, and the spans of its step attempts, agent calls, supervisor
	// recoveries, compensations and final state as its children, in
	// whichever process runs them (see docs/operations.md, Tracing). nil
	// turns tracing off; the global provider (otel.GetTracerProvider) is
	// not used unless passed here.
	TracerProvider trace.TracerProvider
}

// DefaultMaxInputBytes is the default cap on a task's input.
const DefaultMaxInputBytes = 1 << 20

// DefaultMaxInFlight is the default of Config.MaxInFlight.
const DefaultMaxInFlight = 1024

// Client submits and inspects tasks and, once started, runs the roles.
type Client struct {
	cfg      Config
	store    store.Driver
	clock    Clock
	log      *slog.Logger
	counters flow.Counters
	groups   submitGroups    // Submit's group commit (submit_group.go)
	tracer   *tracing.Tracer // nil: tracing off

	// wfMu guards workflows and knownAgents: AddWorkflows changes them
	// while submissions read them.
	wfMu      sync.RWMutex
	workflows map[string]Workflow
	// knownAgents are the registered and external agents.
	knownAgents map[string]bool
	// localAgents are the agents of Config.Agents, which run in this
	// process; no external agent may take one of their names.
	localAgents map[string]bool

	// schedMu guards schedules, those this Client fires; schedWake
	// wakes its schedule leader.
	schedMu   sync.Mutex
	schedules map[string]Schedule
	schedWake chan struct{}
	// schedSync orders the changes of what this Client defines with the
	// store writes that go with them (AddSchedules, RemoveSchedules,
	// DeleteSchedule's check, the leader's restore of deleted ones).
	schedSync sync.Mutex

	mu      sync.Mutex
	started bool
	cancel  context.CancelFunc
	done    chan struct{}
	engine  *engine.Engine // the running roles; kept after Stop for Stats
}

// DefaultSchedulers is how many schedulers a Client runs on store d when
// Config.Schedulers is zero: 1 on SQLite, which commits one transaction at
// a time, so a second scheduler would only wait for the first; 2 on other
// stores (PostgreSQL), where the second scheduler's transaction runs while
// the first one's results are processed, which keeps two cores busy.
func DefaultSchedulers(d store.Driver) int {
	if d != nil && d.Name() == "sqlite" {
		return 1
	}
	return 2
}

// New validates cfg and returns a Client. It does not touch the store.
func New(cfg Config) (*Client, error) {
	if cfg.Store == nil {
		return nil, fmt.Errorf("%w: Store is required", ErrInvalidConfig)
	}
	if cfg.Roles == (Roles{}) {
		cfg.Roles = AllRoles
	}
	if cfg.InstanceID == "" {
		host, _ := os.Hostname()
		var b [4]byte
		_, _ = rand.Read(b[:])
		cfg.InstanceID = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
	}
	if !validName(cfg.InstanceID) {
		return nil, fmt.Errorf("%w: InstanceID %q must be 1-%d printable characters without spaces or \"/\"", ErrInvalidConfig, cfg.InstanceID, maxNameLen)
	}
	if cfg.Schedulers <= 0 {
		cfg.Schedulers = DefaultSchedulers(cfg.Store)
	}
	if cfg.SupervisorInterval <= 0 {
		cfg.SupervisorInterval = time.Second
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = 10 * time.Second
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = DefaultMaxInFlight
	}
	if cfg.NamespaceMaxInFlight == 0 {
		cfg.NamespaceMaxInFlight = max(1, cfg.MaxInFlight*3/4)
	}
	if cfg.ClaimBatch <= 0 {
		cfg.ClaimBatch = 256
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 100 * time.Millisecond
	}
	if cfg.MaxInputBytes <= 0 {
		cfg.MaxInputBytes = DefaultMaxInputBytes
	}
	if cfg.LeaseTTL < 10*time.Millisecond || cfg.SupervisorInterval < time.Millisecond || cfg.PollInterval < time.Millisecond {
		return nil, fmt.Errorf("%w: LeaseTTL must be at least 10ms, SupervisorInterval and PollInterval at least 1ms", ErrInvalidConfig)
	}
	if cfg.Retention < 0 {
		return nil, fmt.Errorf("%w: Retention %s is negative", ErrInvalidConfig, cfg.Retention)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	c := &Client{cfg: cfg, store: cfg.Store, clock: cfg.Clock, log: cfg.Logger, workflows: map[string]Workflow{},
		tracer: tracing.New(cfg.TracerProvider), schedules: map[string]Schedule{}, schedWake: make(chan struct{}, 1)}
	c.counters.Recorder = instrument.New()

	agents := map[string]bool{}
	c.knownAgents = agents
	c.localAgents = map[string]bool{}
	for _, a := range cfg.Agents {
		if !validName(a.Name) {
			return nil, fmt.Errorf("%w: agent name %q must be 1-%d printable characters without spaces or \"/\"", ErrInvalidConfig, a.Name, maxNameLen)
		}
		if a.Func == nil {
			return nil, fmt.Errorf("%w: agent %q has no Func", ErrInvalidConfig, a.Name)
		}
		if agents[a.Name] {
			return nil, fmt.Errorf("%w: agent %q registered twice", ErrInvalidConfig, a.Name)
		}
		agents[a.Name] = true
		c.localAgents[a.Name] = true
	}
	var errs []error
	for _, name := range slices.Compact(slices.Sorted(slices.Values(cfg.ExternalAgents))) {
		// A name with two providers would be served by whichever happens
		// to take its requests: refuse it rather than choose silently.
		if c.localAgents[name] {
			errs = append(errs, agentTwiceError(name, "Config.ExternalAgents"))
		}
		agents[name] = true
	}
	for _, w := range cfg.Workflows {
		if err := w.Validate(); err != nil {
			errs = append(errs, err)
			continue
		}
		if _, dup := c.workflows[w.Name]; dup {
			errs = append(errs, fmt.Errorf("%w: workflow %q defined twice", ErrInvalidWorkflow, w.Name))
			continue
		}
		c.workflows[w.Name] = w.withDefaults()
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if err := c.checkSchedules(cfg.Schedules); err != nil {
		return nil, err
	}
	for _, s := range cfg.Schedules {
		c.schedules[s.Name] = s.withDefaults()
	}
	return c, nil
}

// agentTwiceError reports an agent name that Config.Agents registers and
// that where also declares as running in another process.
func agentTwiceError(name, where string) error {
	return fmt.Errorf("%w: agent %q has two providers: Config.Agents runs it in this process and %s declares it as running in another process (a remote agent); rename one of them", ErrInvalidConfig, name, where)
}

// checkAgents fails when a step names an agent that is neither registered
// nor declared external. Only a process running the Agent role checks: a
// client that only submits and reads needs no agents.
func (c *Client) checkAgents() error {
	c.wfMu.RLock()
	defer c.wfMu.RUnlock()
	var errs []error
	for _, w := range c.workflows {
		for _, s := range w.FlatSteps() {
			for _, a := range []string{s.Agent, s.Compensation} {
				if a != "" && !c.knownAgents[a] {
					errs = append(errs, fmt.Errorf("workflow %q step %q: %w %q (register it in Config.Agents or list it in Config.ExternalAgents)", w.Name, s.Name, ErrUnknownAgent, a))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// InstanceID returns the instance ID this client runs as.
func (c *Client) InstanceID() string { return c.cfg.InstanceID }

// Store returns the state-store driver.
func (c *Client) Store() store.Driver { return c.store }

// Migrate brings the store's schema up to date.
func (c *Client) Migrate(ctx context.Context) error { return c.store.Migrate(ctx) }

func (c *Client) checkSchema(ctx context.Context) error {
	applied, latest, err := c.store.SchemaVersion(ctx)
	if err != nil {
		return err
	}
	if applied == 0 {
		return fmt.Errorf("%w: run `drover migrate` or Client.Migrate", ErrNotMigrated)
	}
	if applied > latest {
		return fmt.Errorf("%w: store at version %d, this drover knows %d", ErrSchemaTooNew, applied, latest)
	}
	if applied < latest {
		return fmt.Errorf("%w: store at version %d of %d; run `drover migrate`", ErrNotMigrated, applied, latest)
	}
	return nil
}

// adviseOnStore logs, as warnings, the store's advice on its database's
// settings (store.Advise), such as a PostgreSQL whose autovacuum is off.
// Advice that cannot be read is not a reason to stop: it is logged at
// debug level.
func (c *Client) adviseOnStore(ctx context.Context) {
	advice, err := store.Advise(ctx, c.store)
	if err != nil {
		c.log.Debug("store advice", "err", err)
	}
	for _, a := range advice {
		c.log.Warn("database setting", "advice", a)
	}
}

// Start runs the configured roles in the background until Stop.
func (c *Client) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started {
		return ErrAlreadyStarted
	}
	if c.cfg.Roles.Agent {
		if err := c.checkAgents(); err != nil {
			return err
		}
	}
	if err := c.checkSchema(ctx); err != nil {
		return err
	}
	if c.cfg.Roles.Scheduler {
		c.adviseOnStore(ctx)
	}
	c.schedMu.Lock()
	defs := slices.Collect(maps.Values(c.schedules))
	c.schedMu.Unlock()
	if err := c.syncSchedules(ctx, defs); err != nil {
		return fmt.Errorf("store schedules: %w", err)
	}
	lease, err := c.acquireInstance(ctx)
	if err != nil {
		return err
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	c.cancel = cancel
	c.done = make(chan struct{})
	cfg := engine.Config{Store: c.store, Clock: c.clock, Log: c.log, Instance: c.cfg.InstanceID, Counters: &c.counters,
		Fence: lease.check, ClaimBatch: c.cfg.ClaimBatch, MaxInFlight: c.cfg.MaxInFlight, PollInterval: c.cfg.PollInterval,
		NamespaceMaxInFlight: c.cfg.NamespaceMaxInFlight, Supervisor: c.cfg.Roles.Supervisor, SupervisorInterval: c.cfg.SupervisorInterval, LeaseTTL: c.cfg.LeaseTTL,
		Retention: c.cfg.Retention, Trace: c.tracer, Live: notifier.For(c.store).Live}
	if c.cfg.Roles.Scheduler {
		cfg.Schedulers = c.cfg.Schedulers
	}
	if c.cfg.Roles.Agent {
		for _, a := range c.cfg.Agents {
			fn := a.Func
			cfg.Agents = append(cfg.Agents, agentrt.Spec{
				Name: a.Name, Func: func(ctx context.Context, r *dt.AgentRequest) ([]byte, error) { return fn(ctx, r) },
				Concurrency: a.Concurrency, Retry: agentrt.Retry(a.Retry), BreakerFailures: a.Breaker.Failures, BreakerOpen: a.Breaker.OpenFor,
			})
		}
		cfg.IsPermanent = func(err error) bool {
			return IsPermanent(err) || (c.cfg.IsPermanent != nil && c.cfg.IsPermanent(err))
		}
		cfg.StepRetry = c.stepRetry
	}
	eng := engine.New(cfg)
	if err := eng.Start(runCtx); err != nil {
		cancel()
		lease.release(context.Background())
		return err
	}
	c.engine = eng
	// Wake roles when other processes signal work (PostgreSQL LISTEN/NOTIFY,
	// over the process's one listening connection); polling remains the
	// fallback.
	unsubscribe := notifier.For(c.store).Subscribe(eng.WakeFor)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-runCtx.Done()
		unsubscribe()
		eng.Stop()
	}()
	if c.cfg.Roles.Supervisor {
		r := c.scheduleRunner()
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.runSchedules(runCtx, r)
		}()
	}
	// Keep the instance lease; if it is lost, stop acting at once.
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := lease.keep(runCtx, c.cfg.LeaseTTL/3); err != nil {
			c.log.Error("instance lease lost; stopping all roles", "instance", c.cfg.InstanceID, "err", err)
			cancel()
		}
	}()
	go func() {
		wg.Wait()
		lease.release(context.Background())
		close(c.done)
	}()
	c.started = true
	return nil
}

// Stop stops the roles and waits for them, up to ctx's deadline. Agent calls
// in flight run on until they finish or reach their CompleteBy.
func (c *Client) Stop(ctx context.Context) error {
	c.mu.Lock()
	if !c.started {
		c.mu.Unlock()
		return nil
	}
	c.cancel()
	done := c.done
	c.started = false
	c.mu.Unlock()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// wakeSchedulers tells this process's schedulers, if it runs them, that
// new tasks wait (engine.Engine.WakeSchedulers).
func (c *Client) wakeSchedulers() {
	if e := c.runningEngine(); e != nil {
		e.WakeSchedulers()
	}
}

// runningEngine returns the engine of the running roles, or nil.
func (c *Client) runningEngine() *engine.Engine {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.engine
}

func init() {
	// Package metrics serves the Client's Recorder, which is no part of
	// its API.
	instrument.ClientRecorder = func(c any) *instrument.Recorder { return c.(*Client).counters.Recorder }
}

// Stats are counters of what this process did since it started.
type Stats struct {
	Dispatched int64 `json:"dispatched"`
	// EagerStarts counts the tasks of Dispatched that a Submit started in
	// its own transaction (see Config.NoEagerStart).
	EagerStarts          int64 `json:"eager_starts"`
	RepliesApplied       int64 `json:"replies_applied"`
	LateReplies          int64 `json:"late_replies"`
	SupervisorRecoveries int64 `json:"supervisor_recoveries"`
	// SupervisorWaits counts the extended waits this process's supervisor started
	// (WaitPolicy).
	SupervisorWaits int64 `json:"supervisor_waits"`
	Alerts          int64 `json:"alerts"`
	TasksFinished   int64 `json:"tasks_finished"` // brought to Processed, Compensated or Error by this process
	AgentCalls      int64 `json:"agent_calls"`
	AgentRetries    int64 `json:"agent_retries"`
	AbandonedCalls  int64 `json:"abandoned_calls"`
	BreakerRefused  int64 `json:"breaker_refused"`
}

// Stats returns this process's counters.
func (c *Client) Stats() Stats {
	s := Stats{
		Dispatched: c.counters.Dispatched.Load(), RepliesApplied: c.counters.RepliesApplied.Load(),
		LateReplies: c.counters.LateReplies.Load(), SupervisorRecoveries: c.counters.SupervisorRecoveries.Load(), Alerts: c.counters.Alerts.Load(),
		SupervisorWaits: c.counters.SupervisorWaits.Load(),
		TasksFinished:   c.counters.TasksFinished.Load(), EagerStarts: c.counters.EagerStarts.Load(),
	}
	if e := c.runningEngine(); e != nil && e.Runtime() != nil {
		rt := e.Runtime()
		s.AgentCalls, s.AgentRetries = rt.Stats.AgentCalls.Load(), rt.Stats.AgentRetries.Load()
		s.AbandonedCalls, s.BreakerRefused = rt.Stats.AbandonedCalls.Load(), rt.Stats.BreakerRefused.Load()
	}
	return s
}

// stepRetry is the retry policy of a request's step when its workflow,
// as registered here, gives the step one (the step at that index must
// still have the request's name: another version may differ).
func (c *Client) stepRetry(r *dt.AgentRequest) *agentrt.Retry {
	c.wfMu.RLock()
	w, ok := c.workflows[r.Workflow]
	c.wfMu.RUnlock()
	steps := w.FlatSteps()
	if !ok || r.StepIndex < 0 || r.StepIndex >= len(steps) {
		return nil
	}
	s := steps[r.StepIndex]
	if s.Retry == nil || s.Name != r.StepName {
		return nil
	}
	p := agentrt.Retry(*s.Retry)
	return &p
}

// AgentHealth is how one of this process's agents is doing: its circuit
// breaker, its calls in flight and its recent calls and failures.
type AgentHealth = agentrt.Health

// AgentHealth reports the agents this process runs, by name (none when
// it does not run the agent role or has not started).
func (c *Client) AgentHealth() []AgentHealth {
	if e := c.runningEngine(); e != nil && e.Runtime() != nil {
		return e.Runtime().Health()
	}
	return nil
}

// SupervisorTerm returns the term this process's supervisor leads in, or 0.
func (c *Client) SupervisorTerm() int64 {
	if e := c.runningEngine(); e != nil {
		return e.SupervisorTerm()
	}
	return 0
}

// NamespaceHeld returns how many tasks of each namespace this process's
// schedulers hold (keyed by stored namespace, "" for the default one),
// counted once a task of a namespace other than the default one was
// claimed or started; empty before, and when the process runs no
// scheduler.
func (c *Client) NamespaceHeld() map[string]int {
	if e := c.runningEngine(); e != nil {
		return e.NamespaceHeld()
	}
	return nil
}
