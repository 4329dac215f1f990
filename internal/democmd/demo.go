package democmd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/drover-run/drover"
	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/clicore"
	"github.com/drover-run/drover/internal/orders"
	"github.com/drover-run/drover/internal/remotesim"
	"github.com/drover-run/drover/server"
	"github.com/drover-run/drover/store"
)

// DemoSummary is what "drover demo orders" reports; with --json it is the
// last line on stdout.
type DemoSummary struct {
	Orders      int `json:"orders"`
	Processed   int `json:"processed"`
	Error       int `json:"error"`
	Compensated int `json:"compensated"`
	Cancelled   int `json:"cancelled"`
	Unfinished  int `json:"unfinished"`

	// From the simulated remote service.
	AgentCalls        int64 `json:"agent_calls"`
	Applied           int64 `json:"applied"`
	DeduplicatedCalls int64 `json:"deduplicated_calls"`
	DuplicateEffects  int64 `json:"duplicate_effects"`
	InjectedTransient int64 `json:"injected_transient"`
	InjectedPermanent int64 `json:"injected_permanent"`
	InjectedHangs     int64 `json:"injected_hangs"`

	// From the durable event history.
	SupervisorRecoveries   int `json:"supervisor_recoveries"`
	Alerts                 int `json:"alerts"`
	ErrorTasksWithoutAlert int `json:"error_tasks_without_alert"`

	// From this process's counters.
	LateReplies    int64 `json:"late_replies"`
	AgentRetries   int64 `json:"agent_retries"`
	AbandonedCalls int64 `json:"abandoned_calls"`
	BreakerRefused int64 `json:"breaker_refused"`

	Seconds    float64 `json:"seconds"`
	Seed       int64   `json:"seed"`
	TaskPrefix string  `json:"task_prefix"`
	DB         string  `json:"db,omitempty"`
	Schema     string  `json:"schema,omitempty"`
}

type demoFlags struct {
	orders      int
	transient   float64
	hang        float64
	permanent   float64
	seed        int64
	stepTimeout time.Duration
	supInterval time.Duration
	schedulers  int
	timeout     time.Duration
	console     string
}

func (e *env) demoCmd() *cobra.Command {
	demo := &cobra.Command{
		Use:   "demo",
		Short: "Run a self-contained demonstration",
		Long:  `demo runs a self-contained demonstration of drover. See "drover demo orders --help".`,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return clicore.Usagef("demo needs a subcommand: orders, ledger or service")
		},
	}
	var f demoFlags
	ordersCmd := &cobra.Command{
		Use:   "orders",
		Short: "Run N orders through the workflow against a flaky simulated service",
		Long: `demo orders starts a simulated remote service (inventory, payments, shipping)
that fails transiently (--transient-rate: HTTP 503), permanently (--permanent-rate:
HTTP 422, sticky per idempotency key) or never answers (--hang-rate; half of
those after applying the effect, so the caller cannot know). It then runs all
drover roles in this process (two schedulers, the agents, a supervisor), submits
--orders orders (order_id o-1 … o-N) and waits until every one is final:
Processed, Compensated (a step failed for good and the completed ones were
undone) or Error (an operator alert was raised).

Progress goes to stderr every half second (not with --json). The summary says how many calls
the service saw, how many the idempotency keys made harmless
(deduplicated_calls) and how many effects were applied twice
(duplicate_effects, which must be 0), how often the supervisor recovered a
timed-out step, and the alerts raised. With --json the summary is one JSON
object, the last line on stdout.

The exit code is 1 if any effect was applied twice, if some order did not end
Processed, Compensated or Error, if an Error task has no alert, or if the
orders did not finish within --timeout.

With --console ADDR (a loopback address such as 127.0.0.1:8080) the demo does
not end after its summary: it keeps its store and serves the operator console
(and the HTTP API, without auth) on ADDR, with the orders workflow and its
agents running and the simulated service's faults turned off, until
interrupted. Open http://ADDR/ to see the failed orders, why they failed, and
resubmit them.

The database is a fresh temporary SQLite file, deleted afterwards, unless --db
is given explicitly (the DROVER_DATABASE_URL variable is not used here). With
an explicit --db (SQLite or PostgreSQL, in the schema --schema) the store is
migrated if needed and kept, the task IDs get a random prefix, and the
summary says how to inspect them.`,
		Example: `  drover demo orders
  drover demo orders --orders 500 --transient-rate 0.2 --hang-rate 0.05 --permanent-rate 0.02 --json
  drover demo orders --orders 50 --console 127.0.0.1:8080
  drover demo orders --orders 50 --db sqlite:./demo.db && drover list --db sqlite:./demo.db --state Error
  drover demo orders --orders 500 --db postgres://postgres@127.0.0.1:5432/postgres --schema drover_demo`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.validate(); err != nil {
				return err
			}
			var explicit *clicore.DBTarget
			if cmd.Flags().Changed("db") {
				t, err := e.Target()
				if err != nil {
					return err
				}
				explicit = &t
			}
			return e.runDemo(cmd.Context(), f, explicit)
		},
	}
	fl := ordersCmd.Flags()
	fl.IntVar(&f.orders, "orders", 200, "number of orders")
	fl.Float64Var(&f.transient, "transient-rate", 0.1, "probability a call fails with a transient 503")
	fl.Float64Var(&f.hang, "hang-rate", 0.02, "probability a call never answers")
	fl.Float64Var(&f.permanent, "permanent-rate", 0.01, "probability a call is rejected for good (422)")
	fl.Int64Var(&f.seed, "seed", 1, "seed of the service's fault sequence")
	fl.DurationVar(&f.stepTimeout, "step-timeout", time.Second, "time budget of each step")
	fl.DurationVar(&f.supInterval, "supervisor-interval", 200*time.Millisecond, "time between supervisor sweeps")
	fl.IntVar(&f.schedulers, "schedulers", 2, "scheduler instances")
	fl.DurationVar(&f.timeout, "timeout", 0, "give up if the orders are not all final by then (default: 30s + 100ms per order)")
	fl.StringVar(&f.console, "console", "", "then keep the store and serve the operator console on this loopback address (e.g. 127.0.0.1:8080) until interrupted")
	demo.AddCommand(ordersCmd)
	demo.AddCommand(e.demoLedgerCmd())
	demo.AddCommand(e.demoServiceCmd())
	return demo
}

func (f *demoFlags) validate() error {
	if f.orders <= 0 {
		return clicore.Usagef("--orders must be positive, got %d", f.orders)
	}
	for name, r := range map[string]float64{"--transient-rate": f.transient, "--hang-rate": f.hang, "--permanent-rate": f.permanent} {
		if math.IsNaN(r) || r < 0 || r > 1 {
			return clicore.Usagef("%s must be between 0 and 1, got %v", name, r)
		}
	}
	if sum := f.transient + f.hang + f.permanent; sum > 1 {
		return clicore.Usagef("--transient-rate + --hang-rate + --permanent-rate must be at most 1, got %v", sum)
	}
	if f.stepTimeout <= 0 || f.supInterval <= 0 {
		return clicore.Usagef("--step-timeout and --supervisor-interval must be positive")
	}
	if f.schedulers <= 0 {
		return clicore.Usagef("--schedulers must be positive, got %d", f.schedulers)
	}
	if f.timeout < 0 {
		return clicore.Usagef("--timeout must not be negative, got %s", f.timeout)
	}
	if f.timeout == 0 {
		f.timeout = 30*time.Second + time.Duration(f.orders)*100*time.Millisecond
	}
	return nil
}

func (e *env) runDemo(ctx context.Context, f demoFlags, explicit *clicore.DBTarget) (err error) {
	start := time.Now()
	log := e.Logger(slog.LevelWarn)

	svc := remotesim.New(remotesim.Config{TransientRate: f.transient, HangRate: f.hang, PermanentRate: f.permanent, Seed: f.seed})
	url, stopRemote, err := svc.Serve(context.WithoutCancel(ctx), "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("start the simulated remote service: %w", err)
	}
	defer stopRemote()

	o := clicore.OpenOpts{Create: true, Migrate: true, Target: explicit}
	if explicit == nil {
		dir, err := os.MkdirTemp("", "drover-demo-")
		if err != nil {
			return fmt.Errorf("create a temporary database: %w", err)
		}
		defer os.RemoveAll(dir)
		o.Target = &clicore.DBTarget{Path: filepath.Join(dir, "demo.db")}
		o.Synchronous = "normal" // thrown away afterwards
	}
	drv, err := e.OpenStore(ctx, o)
	if err != nil {
		return err
	}
	defer drv.Close()

	opts := orders.Options{
		StepTimeout: f.stepTimeout,
		Retry:       drover.RetryPolicy{InitialInterval: 20 * time.Millisecond, MaxInterval: 200 * time.Millisecond},
		// Hung calls dispatched together reach their deadline together and
		// trip the breaker; keep it open for a fraction of a step's budget
		// so one burst does not time out every step of an agent.
		Breaker: drover.BreakerPolicy{OpenFor: f.stepTimeout / 4},
	}
	c, err := drover.New(drover.Config{
		Store:              drv.Driver,
		Workflows:          []drover.Workflow{orders.Workflow(opts)},
		Agents:             orders.Agents(url, opts),
		Schedulers:         f.schedulers,
		SupervisorInterval: f.supInterval,
		LeaseTTL:           max(2*time.Second, 5*f.supInterval),
		PollInterval:       50 * time.Millisecond,
		Logger:             log,
	})
	if err != nil {
		return err
	}
	if err := c.Start(ctx); err != nil {
		return drv.StoreErr(err)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second+f.stepTimeout)
			defer cancel()
			if err := c.Stop(sctx); err != nil {
				log.Warn("stop the demo client", "err", err)
			}
		}
	}
	defer stop()

	prefix := "demo-" + clicore.RandomHex(4) + "-"
	if explicit == nil {
		prefix = "demo-"
	}
	const chunk = 1000
	for i := 1; i <= f.orders; i += chunk {
		var ps []drover.SubmitParams
		for j := i; j < i+chunk && j <= f.orders; j++ {
			ps = append(ps, drover.SubmitParams{
				Workflow: orders.WorkflowName,
				Input:    orders.Input(fmt.Sprintf("o-%d", j), int64(100+(j*37)%9900)),
				Options:  drover.SubmitOptions{ID: fmt.Sprintf("%so-%d", prefix, j)},
			})
		}
		if _, err := c.SubmitMany(ctx, ps); err != nil {
			return drv.StoreErr(fmt.Errorf("submit orders: %w", err))
		}
	}
	fmt.Fprintf(e.Stderr, "demo: submitted %d orders (task IDs %so-1 … %so-%d) against %s\n", f.orders, prefix, prefix, f.orders, url)

	// Wait until every order is final, reporting progress.
	deadline := time.NewTimer(f.timeout)
	defer deadline.Stop()
	check := time.NewTicker(50 * time.Millisecond)
	defer check.Stop()
	lastReport := time.Now()
	var counts map[drover.ProcessState]int
	for {
		counts, err = prefixCounts(ctx, c, prefix)
		if err != nil {
			return err
		}
		final := counts[drover.Processed] + counts[drover.Error] + counts[drover.Compensated] + counts[drover.Cancelled]
		if final >= f.orders {
			break
		}
		if time.Since(lastReport) >= clicore.ProgressEvery {
			lastReport = time.Now()
			st := svc.Stats()
			e.ProgressLine("demo", start, fmt.Sprintf("final %d/%d  processed=%d error=%d compensated=%d in-flight=%d  calls=%d dedup=%d recoveries=%d",
				final, f.orders, counts[drover.Processed], counts[drover.Error], counts[drover.Compensated],
				f.orders-final, st.Calls, st.DeduplicatedCalls, c.Stats().SupervisorRecoveries))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("demo interrupted: %d of %d orders final", final, f.orders)
		case <-deadline.C:
			return fmt.Errorf("demo timed out after %s (--timeout): %d of %d orders final (%s)", f.timeout, final, f.orders, clicore.StateCounts(counts))
		case <-check.C:
		}
	}
	stop()
	if f.console == "" {
		stopRemote()
	}

	s, err := e.demoSummary(ctx, c, prefix, counts)
	if err != nil {
		return err
	}
	st := svc.Stats()
	cs := c.Stats()
	s.Orders = f.orders
	s.AgentCalls, s.Applied, s.DeduplicatedCalls, s.DuplicateEffects = st.Calls, st.Applied, st.DeduplicatedCalls, st.DuplicateEffects
	s.InjectedTransient, s.InjectedPermanent, s.InjectedHangs = st.Transient, st.Permanent, st.Hangs
	s.LateReplies, s.AgentRetries, s.AbandonedCalls, s.BreakerRefused = cs.LateReplies, cs.AgentRetries, cs.AbandonedCalls, cs.BreakerRefused
	s.Seconds = math.Round(time.Since(start).Seconds()*1000) / 1000
	s.Seed = f.seed
	s.TaskPrefix = prefix
	if explicit != nil {
		s.DB = drv.Label
		if explicit.Postgres {
			s.Schema = explicit.Schema
		}
	}

	if e.JSON {
		if err := clicore.WriteJSON(e.Stdout, s); err != nil {
			return err
		}
	} else {
		printDemoSummary(e, s)
	}
	if f.console == "" && s.Error+s.Compensated > 0 {
		fmt.Fprintln(e.Stderr, "demo: to see why these orders failed and resubmit them in the operator console, run this command again with --console 127.0.0.1:8080 and open http://127.0.0.1:8080/")
	}

	var problems []string
	if s.DuplicateEffects > 0 {
		problems = append(problems, fmt.Sprintf("%d effects were applied twice", s.DuplicateEffects))
	}
	if n := s.Processed + s.Error + s.Compensated; n != s.Orders {
		problems = append(problems, fmt.Sprintf("processed+error+compensated = %d, not %d", n, s.Orders))
	}
	if s.ErrorTasksWithoutAlert > 0 {
		problems = append(problems, fmt.Sprintf("%d Error tasks have no alert", s.ErrorTasksWithoutAlert))
	}
	if f.console != "" {
		// The operator fixed the service: a resubmitted order completes.
		svc.SetRates(0, 0, 0)
		svc.Forgive()
		if err := e.serveConsole(ctx, f, drv.Driver, url, opts, log, s); err != nil {
			return err
		}
	}
	if len(problems) > 0 {
		return &clicore.ExitError{Code: clicore.ExitFailure, Msg: "demo failed: " + strings.Join(problems, "; ")}
	}
	return nil
}

// serveConsole serves the operator console and the HTTP API (without
// auth, so on loopback only) on the demo's store at f.console until ctx
// ends, with the orders workflow and its agents running on the simulated
// service at remoteURL, so that a resubmitted order runs again.
func (e *env) serveConsole(ctx context.Context, f demoFlags, d store.Driver, remoteURL string, opts orders.Options, log *slog.Logger, s *DemoSummary) error {
	err := server.Run(ctx, server.Config{
		Store: d, Logger: log, StoreName: "the demo's store",
		HTTP:      &server.HTTPConfig{Listen: f.console, NoAuth: true},
		Workflows: []drover.Workflow{orders.Workflow(opts)}, Agents: orders.Agents(remoteURL, opts), AgentsProvider: demoProvider,
		Schedulers: f.schedulers, SupervisorInterval: f.supInterval, LeaseTTL: max(2*time.Second, 5*f.supInterval), PollInterval: 50 * time.Millisecond,
		OnReady: func(r server.Ready) {
			fmt.Fprintf(e.Stderr, "demo: the operator console shows this demo's orders at %s/ (%d in Error, %d compensated; see Alerts).\n"+
				"demo: the simulated service's faults are off now: a resubmitted order completes. Ctrl-C stops.\n", r.URL, s.Error, s.Compensated)
		},
	})
	if err != nil {
		return fmt.Errorf("serve the console on %s: %w", f.console, err)
	}
	return nil
}

// prefixCounts counts the states of the tasks whose ID starts with prefix.
func prefixCounts(ctx context.Context, c *drover.Client, prefix string) (map[drover.ProcessState]int, error) {
	counts := map[drover.ProcessState]int{}
	err := eachTask(ctx, c, prefix, func(t *drover.Task) { counts[t.ProcessState]++ })
	return counts, err
}

// eachTask calls fn for every task whose ID starts with prefix.
func eachTask(ctx context.Context, c *drover.Client, prefix string, fn func(*drover.Task)) error {
	after := prefix
	for {
		ts, err := c.Tasks(ctx, drover.ListParams{AfterID: after, Limit: 1000})
		if err != nil {
			return err
		}
		for _, t := range ts {
			if !strings.HasPrefix(t.ID, prefix) {
				return nil
			}
			fn(t)
		}
		if len(ts) < 1000 {
			return nil
		}
		after = ts[len(ts)-1].ID
	}
}

// demoSummary reads the outcome from the durable state: task states, and
// from the event history the supervisor recoveries and the alerts.
func (e *env) demoSummary(ctx context.Context, c *drover.Client, prefix string, counts map[drover.ProcessState]int) (*DemoSummary, error) {
	s := &DemoSummary{
		Processed: counts[drover.Processed], Error: counts[drover.Error], Compensated: counts[drover.Compensated],
		Cancelled: counts[drover.Cancelled],
	}
	for st, n := range counts {
		if !st.Final() {
			s.Unfinished += n
		}
	}
	// The history of this run starts with the first order's submission.
	first, err := c.Events(ctx, drover.EventQuery{TaskID: prefix + "o-1", Limit: 1})
	if err != nil {
		return nil, err
	}
	if len(first) == 0 {
		return nil, errors.New("demo: the first order has no history")
	}
	alerted := map[string]bool{}
	evs, err := clicore.AllEvents(ctx, c, drover.EventQuery{AfterID: first[0].ID - 1})
	if err != nil {
		return nil, err
	}
	for _, ev := range evs {
		if !strings.HasPrefix(ev.TaskID, prefix) {
			continue
		}
		if ev.Type == dt.EventStepTimedOut {
			s.SupervisorRecoveries++
		}
		if ev.Alert {
			s.Alerts++
			alerted[ev.TaskID] = true
		}
	}
	if err := eachTask(ctx, c, prefix, func(t *drover.Task) {
		if t.ProcessState == drover.Error && !alerted[t.ID] {
			s.ErrorTasksWithoutAlert++
		}
	}); err != nil {
		return nil, err
	}
	return s, nil
}

func printDemoSummary(e *env, s *DemoSummary) {
	w := e.Stdout
	fmt.Fprintf(w, "drover demo orders: %d orders in %.1fs\n", s.Orders, s.Seconds)
	fmt.Fprintf(w, "  outcome:       processed %d, compensated %d, error %d", s.Processed, s.Compensated, s.Error)
	if s.Cancelled+s.Unfinished > 0 {
		fmt.Fprintf(w, ", cancelled %d, unfinished %d", s.Cancelled, s.Unfinished)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  remote calls:  %d (%d applied, %d deduplicated by idempotency key, %d applied twice)\n",
		s.AgentCalls, s.Applied, s.DeduplicatedCalls, s.DuplicateEffects)
	fmt.Fprintf(w, "  faults:        %d transient, %d permanent, %d hangs injected\n", s.InjectedTransient, s.InjectedPermanent, s.InjectedHangs)
	fmt.Fprintf(w, "  recovery:      %d agent retries, %d refused by an open circuit breaker, %d calls abandoned at their deadline,\n"+
		"                 %d supervisor recoveries, %d late replies discarded\n",
		s.AgentRetries, s.BreakerRefused, s.AbandonedCalls, s.SupervisorRecoveries, s.LateReplies)
	fmt.Fprintf(w, "  alerts:        %d (Error tasks without an alert: %d)\n", s.Alerts, s.ErrorTasksWithoutAlert)
	if s.DB != "" {
		db := "--db " + s.DB
		if s.Schema != "" {
			db = fmt.Sprintf("--db '%s' --schema %s", s.DB, s.Schema)
		}
		fmt.Fprintf(w, "  inspect:       drover list %s --state Error; drover status %s %so-1 --events\n", db, db, s.TaskPrefix)
	}
}
