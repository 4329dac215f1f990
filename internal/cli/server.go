package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/internal/orders"
	"github.com/drover-run/drover/internal/remotesim"
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
		remoteURL    string
		stepTimeout  time.Duration
		retryDelay   time.Duration
		synchronous  string
		maxInput     int
		pollInterval time.Duration
		shutdown     time.Duration
	)
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run the scheduler, agent and supervisor roles",
		Long: `server runs drover's roles on the database named by --db until interrupted
(SIGINT or SIGTERM: it stops claiming work, lets calls in flight finish or reach
their deadline, and exits; a second signal exits at once). It creates and
migrates the SQLite database if needed.

By default one process runs all roles. --roles splits them over processes
(all on the same database): schedulers claim tasks and dispatch steps,
agents call the remote service, and supervisors recover steps whose deadline
passed (only the elected one acts).

The server runs the "orders" workflow. Its agents call the remote service at
--remote-url; without it the server starts an embedded simulated service on
127.0.0.1 with no faults and logs its URL.

A task's step time budgets are recorded with the task when it is submitted,
so every process agrees on them: set them with "drover submit --step-timeout".
The server's --step-timeout only sets the budget in the workflow definition it
registers, which tasks submitted elsewhere do not use.

Logs go to stderr (--log-level; as JSON objects with --json). When the
server is running it prints one line on stderr:
  drover server ready instance=ID db=PATH roles=ROLES`,
		Example: `  drover server --db sqlite:./drover.db
  drover server --roles scheduler,supervisor --instance-id sched-1 --schedulers 4
  drover server --roles agent --remote-url http://127.0.0.1:8080 --instance-id agents-1`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			r, err := parseRoles(roles)
			if err != nil {
				return err
			}
			if err := validSynchronous(synchronous); err != nil {
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
			if schedulers <= 0 {
				return usagef("--schedulers must be positive, got %d", schedulers)
			}
			if maxInput <= 0 {
				return usagef("--max-input-bytes must be positive, got %d", maxInput)
			}
			log := e.logger(slog.LevelDebug)

			drv, path, err := e.openStore(ctx, openOpts{create: true, migrate: true, synchronous: synchronous})
			if err != nil {
				return err
			}
			defer drv.Close()

			opts := orders.Options{StepTimeout: stepTimeout, RetryDelay: retryDelay}
			cfg := drover.Config{
				Store: drv, InstanceID: instanceID, Roles: r,
				Workflows:  []drover.Workflow{orders.Workflow(opts)},
				Schedulers: schedulers, SupervisorInterval: supInterval, LeaseTTL: leaseTTL,
				PollInterval: pollInterval, MaxInputBytes: maxInput, Logger: log,
			}
			stopRemote := func() {}
			if r.Agent {
				if remoteURL == "" {
					svc := remotesim.New(remotesim.Config{Seed: time.Now().UnixNano()})
					url, stop, err := svc.Serve(context.WithoutCancel(ctx), "127.0.0.1:0")
					if err != nil {
						return fmt.Errorf("start the embedded remote service: %w", err)
					}
					stopRemote = stop
					remoteURL = url
					log.Info("embedded remote service started (no faults)", "url", url)
				}
				cfg.Agents = orders.Agents(remoteURL, opts)
			} else {
				cfg.ExternalAgents = orders.AgentNames()
			}
			defer stopRemote()

			c, err := drover.New(cfg)
			if err != nil {
				return err
			}
			// After a crash, the same instance ID frees up when its lease
			// expires (--lease-ttl): wait for it rather than fail.
			for {
				err := c.Start(ctx)
				if err == nil {
					break
				}
				if !errors.Is(err, drover.ErrInstanceInUse) {
					return storeErr(path, err)
				}
				log.Warn("waiting for the instance ID to be released", "err", err)
				select {
				case <-ctx.Done():
					return fmt.Errorf("%w; gave up on signal", err)
				case <-time.After(min(leaseTTL/4, time.Second)):
				}
			}
			log.Info("server started", "instance", c.InstanceID(), "db", path, "roles", rolesString(r),
				"schedulers", schedulers, "supervisor_interval", supInterval, "remote_url", remoteURL)
			fmt.Fprintf(e.stderr, "%sinstance=%s db=%s roles=%s\n", ReadyPrefix, c.InstanceID(), path, rolesString(r))

			<-ctx.Done()
			log.Info("shutting down: waiting for calls in flight", "timeout", shutdown)
			sctx, cancel := context.WithTimeout(context.Background(), shutdown)
			defer cancel()
			if err := c.Stop(sctx); err != nil {
				return fmt.Errorf("shutdown did not finish within --shutdown-timeout %s: %w", shutdown, err)
			}
			log.Info("server stopped", "stats", fmt.Sprintf("%+v", c.Stats()))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&roles, "roles", "scheduler,agent,supervisor", "roles to run: comma-separated scheduler, agent, supervisor (or all)")
	f.StringVar(&instanceID, "instance-id", "", "this process's instance ID (LockedBy); restart with the same ID to resume its tasks (default: host-pid-random)")
	f.DurationVar(&supInterval, "supervisor-interval", time.Second, "time between supervisor sweeps")
	f.DurationVar(&leaseTTL, "lease-ttl", 10*time.Second, "how long supervisor leadership lasts unrenewed")
	f.IntVar(&schedulers, "schedulers", 1, "scheduler instances in this process")
	f.StringVar(&remoteURL, "remote-url", "", "base URL of the remote service the orders agents call (default: start an embedded simulated one)")
	f.DurationVar(&stepTimeout, "step-timeout", orders.DefaultStepTimeout, "time budget of each orders step in the registered workflow")
	f.DurationVar(&retryDelay, "retry-delay", 0, "wait before a recovered step is claimed again, doubled on each failure")
	f.StringVar(&synchronous, "synchronous", "full", "SQLite synchronous mode: full (survives power loss) or normal (faster; survives a crash)")
	f.IntVar(&maxInput, "max-input-bytes", drover.DefaultMaxInputBytes, "largest task input accepted, in bytes")
	f.DurationVar(&pollInterval, "poll-interval", 100*time.Millisecond, "how often to look for work from other processes")
	f.DurationVar(&shutdown, "shutdown-timeout", 30*time.Second, "how long to wait for calls in flight on shutdown")
	return cmd
}
