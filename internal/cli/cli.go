// Package cli is the drover command line: the code behind cmd/drover, kept
// here so it can be tested by calling Main.
//
// Every command reports a failure as one line on stderr, "drover: <message>",
// and exits 1; a usage error (unknown command or flag, wrong arguments, a bad
// flag value) exits 2. Help goes to stdout and exits 0.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/internal/orders"
	"github.com/drover-run/drover/store/sqlite"
)

// EnvDatabaseURL names the environment variable that sets --db.
const EnvDatabaseURL = "DROVER_DATABASE_URL"

// DefaultDatabaseURL is --db when neither the flag nor EnvDatabaseURL is set.
const DefaultDatabaseURL = "sqlite:./drover.db"

// Exit codes.
const (
	ExitOK      = 0
	ExitFailure = 1
	ExitUsage   = 2
)

// usageError marks an error as a usage error: exit code 2.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return &usageError{fmt.Errorf(format, args...)}
}

// exitError carries an exit code for a failure whose message was already
// printed (the demo prints its summary, then fails).
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// env is what one invocation of the CLI works with.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string

	// Global flags.
	dbURL       string
	jsonOut     bool
	lockTimeout time.Duration
	logLevel    string

	entered bool // a command's own code started: errors are not usage errors
}

// Main runs the drover command line with args (without the program name) and
// returns the process exit code. It reads standard input from os.Stdin.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return MainIO(ctx, args, os.Stdin, stdout, stderr)
}

// MainIO is Main with an explicit standard input.
func MainIO(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	e := &env{stdin: stdin, stdout: stdout, stderr: stderr, getenv: os.Getenv}
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
	var ue *usageError
	var xe *exitError
	switch {
	case errors.As(err, &xe):
		code = xe.code
	case errors.As(err, &ue) || !e.entered:
		// Errors cobra raises itself (unknown command or flag, wrong
		// number of arguments) happen before the command's code runs.
		code = ExitUsage
	}
	msg := oneLine(err.Error())
	if code == ExitUsage && cmd != nil {
		msg += fmt.Sprintf(" (see '%s --help')", cmd.CommandPath())
	}
	fmt.Fprintf(stderr, "drover: %s\n", msg)
	return code
}

// oneLine folds a multi-line message (errors.Join, cobra's suggestions) onto
// one line.
func oneLine(s string) string {
	var parts []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			parts = append(parts, l)
		}
	}
	return strings.ReplaceAll(strings.Join(parts, "; "), "Did you mean this?; ", "did you mean ")
}

// wrapped is an error with its own message that still matches the errors it
// wraps with errors.Is.
type wrapped struct {
	msg string
	err error
}

func (w *wrapped) Error() string { return w.msg }
func (w *wrapped) Unwrap() error { return w.err }

func (e *env) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "drover",
		Short: "Run multi-step tasks against flaky remote services (Scheduler Agent Supervisor)",
		Long: `drover makes a multi-step operation that calls flaky remote services succeed or
fail as a whole. A task runs a workflow of steps; a Scheduler claims it and
sends each step to an Agent, which calls the remote service with retries and a
stable idempotency key; a Supervisor recovers steps whose deadline passed and
alerts an operator when a task fails for good.

Everything lives in one SQLite file (--db). Run "drover migrate" once, then
"drover server" to run the roles and "drover submit" to add work.

The database URL comes from --db, else from $` + EnvDatabaseURL + `, else
` + DefaultDatabaseURL + `. Accepted forms: sqlite:PATH, sqlite://PATH, file:PATH
or a bare PATH.`,
		Example: `  drover migrate --db sqlite:./drover.db
  drover server &
  drover submit orders '{"order_id":"o-1","amount":1234}' --id order-o-1
  drover status order-o-1 --events
  drover demo orders --orders 200 --transient-rate 0.2 --hang-rate 0.05`,
		SilenceUsage:  true,
		SilenceErrors: true,
		// Commands that run set e.entered; see MainIO.
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			e.entered = true
			if !cmd.Flags().Changed("db") {
				if v := e.getenv(EnvDatabaseURL); v != "" {
					e.dbURL = v
				}
			}
			if _, err := parseLevel(e.logLevel); err != nil {
				return err
			}
			return nil
		},
	}
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error { return &usageError{err} })
	pf := root.PersistentFlags()
	pf.StringVar(&e.dbURL, "db", DefaultDatabaseURL, "database URL: sqlite:PATH, sqlite://PATH, file:PATH or PATH (env "+EnvDatabaseURL+")")
	pf.BoolVar(&e.jsonOut, "json", false, "print machine-readable JSON on stdout")
	pf.DurationVar(&e.lockTimeout, "lock-timeout", 10*time.Second, "how long to wait for a database locked by another process")
	pf.StringVar(&e.logLevel, "log-level", "info", "log level on stderr: debug, info, warn or error")

	root.AddCommand(
		e.migrateCmd(),
		e.serverCmd(),
		e.submitCmd(),
		e.statusCmd(),
		e.listCmd(),
		e.resubmitCmd(),
		e.cancelCmd(),
		e.eventsCmd(),
		e.demoCmd(),
		e.benchCmd(),
	)
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
				return &usageError{err}
			}
			return nil
		}
	}
	for _, sub := range c.Commands() {
		wrapArgs(sub)
	}
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, usagef("--log-level %q: want debug, info, warn or error", s)
	}
	return l, nil
}

// logger logs to stderr at --log-level, but never below min; as JSON
// objects with --json.
func (e *env) logger(floor slog.Level) *slog.Logger {
	l, _ := parseLevel(e.logLevel)
	opts := &slog.HandlerOptions{Level: max(l, floor)}
	if e.jsonOut {
		return slog.New(slog.NewJSONHandler(e.stderr, opts))
	}
	return slog.New(slog.NewTextHandler(e.stderr, opts))
}

// dbPath resolves a database URL to a SQLite file path.
func dbPath(raw string) (string, error) {
	u := strings.TrimSpace(raw)
	if u == "" {
		return "", usagef("--db is empty; want sqlite:PATH, sqlite://PATH, file:PATH or PATH")
	}
	lower := strings.ToLower(u)
	switch {
	case strings.HasPrefix(lower, "postgres://"), strings.HasPrefix(lower, "postgresql://"),
		strings.HasPrefix(lower, "postgres:"), strings.HasPrefix(lower, "postgresql:"):
		return "", errors.New("postgres driver not available yet (coming with the PostgreSQL issue); use a sqlite: URL")
	case strings.HasPrefix(lower, "sqlite3://"):
		u = u[len("sqlite3://"):]
	case strings.HasPrefix(lower, "sqlite://"):
		u = u[len("sqlite://"):]
	case strings.HasPrefix(lower, "sqlite3:"):
		u = u[len("sqlite3:"):]
	case strings.HasPrefix(lower, "sqlite:"):
		u = u[len("sqlite:"):]
	case strings.HasPrefix(lower, "file://"):
		u = u[len("file://"):]
	case strings.HasPrefix(lower, "file:"):
		u = u[len("file:"):]
	default:
		if i := strings.Index(u, "://"); i > 0 && !strings.ContainsAny(u[:i], `/\.`) {
			return "", usagef("--db %q: unknown scheme %q; want sqlite:PATH, sqlite://PATH, file:PATH or PATH", raw, u[:i])
		}
	}
	if u == "" {
		return "", usagef("--db %q has no file path", raw)
	}
	if strings.ContainsAny(u, "?#") {
		return "", usagef("--db %q: query parameters are not supported; use flags such as --synchronous", raw)
	}
	return u, nil
}

// openOpts are what a command needs from the database.
type openOpts struct {
	create      bool   // create (and migrate) a missing file
	migrate     bool   // apply migrations
	synchronous string // "" for the driver default
	path        string // overrides --db
}

// openStore opens the SQLite store named by --db. Without create, a missing
// file is an error and the schema must be current.
func (e *env) openStore(ctx context.Context, o openOpts) (*sqlite.Driver, string, error) {
	path := o.path
	if path == "" {
		var err error
		if path, err = dbPath(e.dbURL); err != nil {
			return nil, "", err
		}
	}
	if !o.create {
		st, err := os.Stat(path)
		switch {
		case errors.Is(err, os.ErrNotExist):
			return nil, path, fmt.Errorf("database file %s does not exist (create it with 'drover migrate --db %s', or point --db at an existing one)", path, path)
		case err != nil:
			return nil, path, fmt.Errorf("database file %s: %w", path, err)
		case st.IsDir():
			return nil, path, fmt.Errorf("database path %s is a directory, not a file", path)
		}
	}
	drv, err := sqlite.Open(ctx, path, sqlite.Options{Create: o.create, BusyTimeout: e.lockTimeout, Synchronous: o.synchronous})
	if err != nil {
		return nil, path, storeErr(path, err)
	}
	if o.migrate {
		if err := drv.Migrate(ctx); err != nil {
			drv.Close()
			return nil, path, storeErr(path, err)
		}
	}
	if err := checkSchema(ctx, drv, path); err != nil {
		drv.Close()
		return nil, path, err
	}
	return drv, path, nil
}

// checkSchema fails unless the store's schema is exactly the one this
// drover knows.
func checkSchema(ctx context.Context, drv *sqlite.Driver, path string) error {
	applied, latest, err := drv.SchemaVersion(ctx)
	if err != nil {
		return storeErr(path, err)
	}
	switch {
	case applied == 0:
		return &wrapped{fmt.Sprintf("database %s has no drover schema (not migrated): run 'drover migrate --db %s'", path, path), drover.ErrNotMigrated}
	case applied < latest:
		return fmt.Errorf("database %s is at schema version %d of %d (%w): run 'drover migrate --db %s'", path, applied, latest, drover.ErrNotMigrated, path)
	case applied > latest:
		return fmt.Errorf("database %s is at schema version %d, this drover knows %d (%w): upgrade drover", path, applied, latest, drover.ErrSchemaTooNew)
	}
	return nil
}

// storeErr explains store errors about the database file itself.
func storeErr(path string, err error) error {
	// The driver's own text ends with SQLite's reason.
	reason := err.Error()
	if i := strings.LastIndex(reason, ": "); i >= 0 {
		reason = reason[i+2:]
	}
	switch {
	case errors.Is(err, drover.ErrStoreCorrupt):
		return &wrapped{fmt.Sprintf("database %s is corrupt or not a drover SQLite database (%s)", path, reason), err}
	case errors.Is(err, drover.ErrStoreLocked):
		return &wrapped{fmt.Sprintf("database %s is locked by another process; gave up after --lock-timeout (%s)", path, reason), err}
	}
	return err
}

// clientConfig is the base client configuration of the CLI: it knows the
// orders workflow, whose agents run in a server.
func clientConfig(drv *sqlite.Driver, maxInput int, stepTimeout time.Duration) drover.Config {
	return drover.Config{
		Store:          drv,
		Workflows:      []drover.Workflow{orders.Workflow(orders.Options{StepTimeout: stepTimeout})},
		ExternalAgents: orders.AgentNames(),
		MaxInputBytes:  maxInput,
	}
}

// readClient opens the store and a client that submits and reads; it never
// starts roles. The caller closes the returned driver.
func (e *env) readClient(ctx context.Context, maxInput int, stepTimeout time.Duration) (*drover.Client, *sqlite.Driver, error) {
	drv, _, err := e.openStore(ctx, openOpts{})
	if err != nil {
		return nil, nil, err
	}
	c, err := drover.New(clientConfig(drv, maxInput, stepTimeout))
	if err != nil {
		drv.Close()
		return nil, nil, err
	}
	return c, drv, nil
}
