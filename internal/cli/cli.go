package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/drover-run/drover/internal/backend"
	"github.com/drover-run/drover/internal/benchcmd"
	"github.com/drover-run/drover/internal/clicore"
	"github.com/drover-run/drover/internal/democmd"
	"github.com/drover-run/drover/internal/oneline"
)

// EnvDatabaseURL names the environment variable that sets --db.
const EnvDatabaseURL = "DROVER_DATABASE_URL"

// DefaultDatabaseURL is --db when neither the flag nor EnvDatabaseURL is set.
const DefaultDatabaseURL = "sqlite:./drover.db"

// Exit codes.
const (
	ExitOK      = clicore.ExitOK
	ExitFailure = clicore.ExitFailure
	ExitUsage   = clicore.ExitUsage
)

// env is what one invocation of the CLI works with.
type env struct {
	*clicore.Env

	// --server, --token, --token-file, --namespace (remote.go); remote
	// is set when the command runs against a server.
	serverURL string
	token     string
	tokenFile string
	namespace string
	remote    *backend.Remote

	entered bool // a command's own code started: errors are not usage errors

	// --config, and where each flag's value came from (config.go).
	configPath string
	origin     map[string]int
}

// Main runs the drover command line with args (without the program name) and
// returns the process exit code. It reads standard input from os.Stdin.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return MainIO(ctx, args, os.Stdin, stdout, stderr)
}

// MainIO is Main with an explicit standard input.
func MainIO(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	e := &env{Env: &clicore.Env{Stdin: stdin, Stdout: stdout, Stderr: stderr, Getenv: os.Getenv}}
	root := e.rootCmd()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return ExitOK
	}
	code := ExitFailure
	var ue *clicore.UsageError
	var xe *clicore.ExitError
	switch {
	case errors.As(err, &xe):
		code = xe.Code
	case errors.As(err, &ue) || !e.entered:
		// Errors cobra raises itself (unknown command or flag, wrong
		// number of arguments) happen before the command's code runs.
		code = ExitUsage
	}
	msg := OneLine(err.Error())
	if code == ExitUsage && cmd != nil {
		msg += fmt.Sprintf(" (see '%s --help')", cmd.CommandPath())
	}
	fmt.Fprintf(stderr, "drover: %s\n", msg)
	return code
}

// OneLine folds a multi-line message (errors.Join, cobra's suggestions, pgx's
// per-address connect errors) onto one line, dropping repeated lines.
func OneLine(s string) string {
	return strings.ReplaceAll(oneline.Fold(s), "Did you mean this?; ", "did you mean ")
}

func (e *env) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "drover",
		Short: "Run multi-step tasks against flaky remote services (Scheduler Agent Supervisor)",
		Long: `drover makes a multi-step operation that calls flaky remote services succeed or
fail as a whole. A task runs a workflow of steps; a Scheduler claims it and
sends each step to an Agent, which calls the remote service with retries and a
stable idempotency key; a Supervisor recovers steps whose deadline passed and
alerts an operator when a task fails for good.

The state lives in one SQLite file, or in one schema of a PostgreSQL
database shared by any number of drover processes on any number of hosts
(--db, --schema). Run "drover migrate" once, then "drover server" to run the
roles and "drover submit" to add work.

The database URL comes from --db, else from $` + EnvDatabaseURL + `, else
` + DefaultDatabaseURL + `. Accepted forms:
  sqlite:PATH, sqlite://PATH, file:PATH, PATH          a SQLite file
  postgres://USER[:PASSWORD]@HOST[:PORT]/DB[?PARAMS]   a PostgreSQL database
  postgresql://…                                       (the same)
PostgreSQL URL parameters are those of pgx/libpq (sslmode, connect_timeout,
pool_max_conns, …). On PostgreSQL the store lives in the schema --schema
(else $` + clicore.EnvSchema + `, else ` + clicore.DefaultSchema + `), created by "drover migrate"; several
stores can share one database under different schemas, and the application's
own tables can live beside them. SQLite does not use --schema (a malformed
name is still refused).

With --server URL (else $` + EnvServer + `) the commands that read or change tasks,
alerts and queues (submit, status, list, resubmit, cancel, events, alerts,
queue publish/peek/sessions/list/dlq/resolve) go through a running drover
server's HTTP API instead of the database, with the bearer token of --token,
--token-file or $` + EnvToken + `, and print the same output. The other commands
refuse --server; --db and --server exclude each other. With a global token,
--namespace NAME (else $` + EnvNamespace + `) acts in namespace NAME (the
Drover-Namespace header); a token of a namespace acts in its own without it.

Every flag can also be set by the environment variable DROVER_ and its name
in capitals with _ for - (--log-level: DROVER_LOG_LEVEL; --db keeps
` + EnvDatabaseURL + `), or by a key of the YAML file of --config (else
$` + EnvConfig + `) named as the flag (log-level: debug; a list for a
repeatable flag). The command line wins over the environment, which wins
over the file; a key that is no flag of any command is an error. demo and
bench take --db and --schema from their command line only.`,
		Example: `  drover migrate --db sqlite:./drover.db
  drover server --demo &
  drover submit orders '{"order_id":"o-1","amount":1234}' --id order-o-1
  drover status order-o-1 --events
  drover demo orders --orders 200 --transient-rate 0.2 --hang-rate 0.05
  export DROVER_DATABASE_URL='postgres://drover:secret@db.internal:5432/app?sslmode=require'
  drover migrate --schema drover && drover server --schema drover --workflows ./workflows
  drover status order-o-1 --server http://127.0.0.1:8080 --token-file ~/.drover-token
  drover server --config /etc/drover/drover.yaml`,
		SilenceUsage:  true,
		SilenceErrors: true,
		// Commands that run set e.entered; see MainIO.
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			e.entered = true
			if err := e.resolveSettings(cmd); err != nil {
				return err
			}
			if err := clicore.ValidSchema(e.Schema); err != nil {
				return err
			}
			if e.LockTimeout < 0 {
				return clicore.Usagef("--lock-timeout must not be negative, got %s", e.LockTimeout)
			}
			if _, err := clicore.ParseLevel(e.LogLevel); err != nil {
				return err
			}
			return e.setupRemote(cmd)
		},
	}
	// --version prints what "drover version" does, without a database.
	root.Version = "-"
	root.SetVersionTemplate(currentVersion().text())
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error { return clicore.Usage(err) })
	pf := root.PersistentFlags()
	pf.StringVar(&e.DBURL, "db", DefaultDatabaseURL, "database URL: sqlite:PATH, sqlite://PATH, file:PATH or PATH, or postgres://USER@HOST:PORT/DB (env "+EnvDatabaseURL+")")
	pf.StringVar(&e.Schema, "schema", clicore.DefaultSchema, "PostgreSQL schema holding drover's tables; ignored for SQLite (env "+clicore.EnvSchema+")")
	pf.BoolVar(&e.JSON, "json", false, "print machine-readable JSON on stdout")
	pf.DurationVar(&e.LockTimeout, "lock-timeout", 10*time.Second, "how long to wait for a lock held by another process (SQLite: the database file; PostgreSQL: lock_timeout, set inside each of drover's transactions and reads, for every command but server, demo and bench, unless the URL sets lock_timeout)")
	pf.StringVar(&e.LogLevel, "log-level", "info", "log level on stderr: debug, info, warn or error")
	pf.StringVar(&e.serverURL, "server", "", "run the command against a drover server's HTTP API (http://HOST:PORT or https://…) instead of the database; for the commands that read or change tasks, alerts and queues (env "+EnvServer+")")
	pf.StringVar(&e.token, "token", "", "bearer token for --server (env "+EnvToken+"); prefer --token-file, as arguments are visible to other users")
	pf.StringVar(&e.tokenFile, "token-file", "", "read the bearer token for --server from this file (chmod 600: one open to the group or others is used with a warning)")
	pf.StringVar(&e.configPath, "config", "", "read settings from this YAML file: keys are flag names (db: …, log-level: …); command-line flags and DROVER_* variables take precedence (env "+EnvConfig+")")
	pf.StringVar(&e.namespace, "namespace", "", "the namespace --server acts in, for a global token (env "+EnvNamespace+"); a token of a namespace acts in its own without it, and naming another is refused")

	root.AddCommand(
		e.migrateCmd(),
		e.serverCmd(),
		e.submitCmd(),
		e.statusCmd(),
		e.listCmd(),
		e.resubmitCmd(),
		e.cancelCmd(),
		e.signalCmd(),
		e.eventsCmd(),
		democmd.Command(e.Env),
		benchcmd.Command(e.Env),
		e.queueCmd(),
		e.alertsCmd(),
		e.scheduleCmd(),
		e.versionCmd(),
		e.healthcheckCmd(),
		e.webhookCmd(),
	)
	e.setupCompletion(root)
	// Arguments errors are usage errors.
	for _, c := range root.Commands() {
		wrapArgs(c)
	}
	return root
}

func wrapArgs(c *cobra.Command) {
	if c.Args != nil {
		orig := c.Args
		c.Args = func(cmd *cobra.Command, args []string) error {
			if err := orig(cmd, args); err != nil {
				return clicore.Usage(err)
			}
			return nil
		}
	}
	for _, sub := range c.Commands() {
		wrapArgs(sub)
	}
}
