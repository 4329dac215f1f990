package clicore

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/store"
	"github.com/drover-run/drover/store/postgres"
	"github.com/drover-run/drover/store/sqlite"
)

// EnvSchema names the environment variable that sets --schema.
const EnvSchema = "DROVER_SCHEMA"

// DefaultSchema is --schema when neither the flag nor EnvSchema is set.
const DefaultSchema = postgres.DefaultSchema

// dbForms lists the accepted --db forms, for messages.
const dbForms = "sqlite:PATH, sqlite://PATH, file:PATH, PATH, or postgres://… / postgresql://…"

var schemaPattern = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// ValidSchema checks a --schema value the way the PostgreSQL driver does.
func ValidSchema(s string) error {
	if !schemaPattern.MatchString(s) || len(s) > 63 {
		return Usagef("--schema %q: want lowercase letters, digits and _, not starting with a digit, at most 63 bytes", s)
	}
	return nil
}

// DBTarget is a parsed --db value: a SQLite file or a PostgreSQL server.
type DBTarget struct {
	Postgres bool
	Path     string // SQLite file
	URL      string // PostgreSQL connection URL, as given
	Schema   string // PostgreSQL schema
}

// ParseDB resolves a database URL. schema is used for PostgreSQL only.
func ParseDB(raw, schema string) (DBTarget, error) {
	u := strings.TrimSpace(raw)
	lower := strings.ToLower(u)
	switch {
	case strings.HasPrefix(lower, "postgres://"), strings.HasPrefix(lower, "postgresql://"):
		// pgx wants the scheme in lower case.
		i := strings.Index(u, "://")
		u = lower[:i] + u[i:]
		if _, err := pgxpool.ParseConfig(u); err != nil {
			return DBTarget{}, Usagef("--db: not a valid PostgreSQL URL: %v", err)
		}
		if schema == "" {
			schema = DefaultSchema
		}
		if err := ValidSchema(schema); err != nil {
			return DBTarget{}, err
		}
		return DBTarget{Postgres: true, URL: u, Schema: schema}, nil
	case strings.HasPrefix(lower, "postgres:"), strings.HasPrefix(lower, "postgresql:"):
		return DBTarget{}, Usagef("--db %q: a PostgreSQL URL starts with postgres:// or postgresql://", RedactURL(raw))
	}
	p, err := dbPath(raw)
	if err != nil {
		return DBTarget{}, err
	}
	return DBTarget{Path: p}, nil
}

// dbPath resolves a SQLite database URL to a file path.
func dbPath(raw string) (string, error) {
	u := strings.TrimSpace(raw)
	if u == "" {
		return "", Usagef("--db is empty; want %s", dbForms)
	}
	lower := strings.ToLower(u)
	switch {
	case strings.HasPrefix(lower, "postgres:"), strings.HasPrefix(lower, "postgresql:"):
		return "", Usagef("--db %q is a PostgreSQL URL, not a SQLite file", RedactURL(raw))
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
			return "", Usagef("--db %q: unknown scheme %q; want %s", raw, u[:i], dbForms)
		}
	}
	if u == "" {
		return "", Usagef("--db %q has no file path", raw)
	}
	if strings.ContainsAny(u, "?#") {
		return "", Usagef("--db %q: query parameters are not supported for SQLite; use flags such as --synchronous", raw)
	}
	return u, nil
}

// RedactURL returns a PostgreSQL URL fit for logs and messages: no password,
// no query parameters (they may hold one too).
func RedactURL(raw string) string {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || u.Host == "" && u.Opaque != "" {
		// Not parseable: show the scheme only.
		if i := strings.Index(raw, ":"); i > 0 {
			return raw[:i] + ":…"
		}
		return "…"
	}
	if u.User != nil {
		u.User = url.User(u.User.Username())
	}
	u.RawQuery, u.ForceQuery, u.Fragment = "", false, ""
	return u.String()
}

// Name is how messages Name the target: the SQLite path, or the
// PostgreSQL URL without its password and parameters.
func (t DBTarget) Name() string {
	if t.Postgres {
		return RedactURL(t.URL)
	}
	return t.Path
}

// Desc names the target in messages, with the schema on PostgreSQL.
func (t DBTarget) Desc() string {
	if t.Postgres {
		return fmt.Sprintf("%s (schema %s)", t.Name(), t.Schema)
	}
	return t.Name()
}

// Target parses --db and --schema.
func (e *Env) Target() (DBTarget, error) { return ParseDB(e.DBURL, e.Schema) }

// Database is an open state store and how messages name it.
type Database struct {
	store.Driver
	Target DBTarget
	Label  string // the SQLite path, or the redacted PostgreSQL URL
}

// Desc names the store in messages.
func (d *Database) Desc() string { return d.Target.Desc() }

// MigrateHint is the command that migrates this store.
func (d *Database) MigrateHint() string {
	if d.Target.Postgres {
		return fmt.Sprintf("'drover migrate --schema %s' with the same --db", d.Target.Schema)
	}
	return fmt.Sprintf("'drover migrate --db %s'", d.Label)
}

func (d *Database) DriverName() string {
	if d.Target.Postgres {
		return "postgres"
	}
	return "sqlite"
}

// OpenOpts are what a command needs from the database.
type OpenOpts struct {
	Create      bool      // SQLite: create a missing file
	Migrate     bool      // apply migrations (PostgreSQL: creating the schema)
	Synchronous string    // SQLite: "" for the driver default
	Target      *DBTarget // overrides --db and --schema
	LockTimeout bool      // PostgreSQL: set lock_timeout to --lock-timeout
}

// OpenStore opens the store named by --db (and --schema). Without create, a
// missing SQLite file is an error; without migrate, a PostgreSQL schema is
// never created. Either way the schema must then be current.
func (e *Env) OpenStore(ctx context.Context, o OpenOpts) (*Database, error) {
	var t DBTarget
	if o.Target != nil {
		t = *o.Target
	} else {
		var err error
		if t, err = e.Target(); err != nil {
			return nil, err
		}
	}
	d, err := e.Connect(ctx, t, o)
	if err != nil {
		return nil, err
	}
	if err := d.ready(ctx, o.Migrate); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// Connect opens the store without looking at its schema.
func (e *Env) Connect(ctx context.Context, t DBTarget, o OpenOpts) (*Database, error) {
	if t.Postgres {
		d := &Database{Target: t, Label: t.Name()}
		drv, err := postgres.Open(ctx, t.URL, postgres.Options{Schema: t.Schema, LockTimeout: e.pgLockTimeout(t, o.LockTimeout)})
		if err != nil {
			return nil, d.StoreErr(err)
		}
		d.Driver = drv
		return d, nil
	}
	d := &Database{Target: t, Label: t.Name()}
	path := t.Path
	if !o.Create {
		st, err := os.Stat(path)
		switch {
		case errors.Is(err, os.ErrNotExist):
			return nil, fmt.Errorf("database file %s does not exist (create it with 'drover migrate --db %s', or point --db at an existing one)", path, path)
		case err != nil:
			return nil, fmt.Errorf("database file %s: %w", path, err)
		case st.IsDir():
			return nil, fmt.Errorf("database path %s is a directory, not a file", path)
		}
	}
	drv, err := sqlite.Open(ctx, path, sqlite.Options{Create: o.Create, BusyTimeout: e.LockTimeout, Synchronous: o.Synchronous})
	if err != nil {
		return nil, d.StoreErr(err)
	}
	d.Driver = drv
	return d, nil
}

// pgLockTimeout is postgres.Options.LockTimeout for a command that wants
// one: --lock-timeout, unless the URL sets lock_timeout itself. It is set
// inside drover's transactions rather than as a connection parameter,
// which PgBouncer refuses.
func (e *Env) pgLockTimeout(t DBTarget, want bool) time.Duration {
	if !want {
		return 0
	}
	if u, err := url.Parse(t.URL); err == nil && u.Query().Has("lock_timeout") {
		return 0
	}
	return e.LockTimeout
}

// ready migrates the store if asked, then checks that its schema is exactly
// the one this drover knows.
func (d *Database) ready(ctx context.Context, migrate bool) error {
	if migrate {
		if err := d.Migrate(ctx); err != nil {
			return d.StoreErr(err)
		}
	}
	applied, latest, err := d.SchemaVersion(ctx)
	if err != nil {
		return d.StoreErr(err)
	}
	switch {
	case applied == 0 && d.Target.Postgres:
		return &Wrapped{fmt.Sprintf("database %s has no drover schema %q (not migrated): run %s", d.Label, d.Target.Schema, d.MigrateHint()), drover.ErrNotMigrated}
	case applied == 0:
		return &Wrapped{fmt.Sprintf("database %s has no drover schema (not migrated): run %s", d.Label, d.MigrateHint()), drover.ErrNotMigrated}
	case applied < latest:
		return fmt.Errorf("database %s is at schema version %d of %d (%w): run %s", d.Desc(), applied, latest, drover.ErrNotMigrated, d.MigrateHint())
	case applied > latest:
		return fmt.Errorf("database %s is at schema version %d, this drover knows %d (%w): upgrade drover", d.Desc(), applied, latest, drover.ErrSchemaTooNew)
	}
	return nil
}

// MigrateAll applies the migrations d lacks ("drover migrate") and
// returns its schema version before and after, and the latest this drover
// knows. A database newer than this drover is refused, untouched.
func (d *Database) MigrateAll(ctx context.Context) (before, after, latest int, err error) {
	before, latest, err = d.SchemaVersion(ctx)
	if err != nil {
		return 0, 0, 0, d.StoreErr(err)
	}
	if before > latest {
		return 0, 0, 0, fmt.Errorf("database %s is at schema version %d, this drover knows %d (%w): upgrade drover", d.Desc(), before, latest, drover.ErrSchemaTooNew)
	}
	if err := d.Migrate(ctx); err != nil {
		return 0, 0, 0, d.StoreErr(err)
	}
	if after, _, err = d.SchemaVersion(ctx); err != nil {
		return 0, 0, 0, d.StoreErr(err)
	}
	return before, after, latest, nil
}

// StoreErr explains store errors about the database itself.
func (d *Database) StoreErr(err error) error {
	if err == nil {
		return nil
	}
	if d.Target.Postgres {
		if errors.Is(err, drover.ErrStoreLocked) {
			return &Wrapped{fmt.Sprintf("database %s: waited longer than --lock-timeout for a lock held by another session (%v)", d.Desc(), err), err}
		}
		return err
	}
	// The driver's own text ends with SQLite's reason.
	reason := err.Error()
	if i := strings.LastIndex(reason, ": "); i >= 0 {
		reason = reason[i+2:]
	}
	switch {
	case errors.Is(err, drover.ErrStoreCorrupt):
		return &Wrapped{fmt.Sprintf("database %s is corrupt or not a drover SQLite database (%s)", d.Label, reason), err}
	case errors.Is(err, drover.ErrStoreLocked):
		return &Wrapped{fmt.Sprintf("database %s is locked by another process; gave up after --lock-timeout (%s)", d.Label, reason), err}
	}
	return err
}

// DropSchema drops a PostgreSQL schema and everything in it (bench's
// temporary schema).
func DropSchema(ctx context.Context, d *Database) error {
	pg, ok := d.Driver.(*postgres.Driver)
	if !ok {
		return nil
	}
	_, err := pg.Pool().Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{d.Target.Schema}.Sanitize()+` CASCADE`)
	return err
}
