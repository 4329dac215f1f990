package cli

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

// validSchema checks a --schema value the way the PostgreSQL driver does.
func validSchema(s string) error {
	if !schemaPattern.MatchString(s) || len(s) > 63 {
		return usagef("--schema %q: want lowercase letters, digits and _, not starting with a digit, at most 63 bytes", s)
	}
	return nil
}

// dbTarget is a parsed --db value: a SQLite file or a PostgreSQL server.
type dbTarget struct {
	postgres bool
	path     string // SQLite file
	url      string // PostgreSQL connection URL, as given
	schema   string // PostgreSQL schema
}

// parseDB resolves a database URL. schema is used for PostgreSQL only.
func parseDB(raw, schema string) (dbTarget, error) {
	u := strings.TrimSpace(raw)
	lower := strings.ToLower(u)
	switch {
	case strings.HasPrefix(lower, "postgres://"), strings.HasPrefix(lower, "postgresql://"):
		// pgx wants the scheme in lower case.
		i := strings.Index(u, "://")
		u = lower[:i] + u[i:]
		if _, err := pgxpool.ParseConfig(u); err != nil {
			return dbTarget{}, usagef("--db: not a valid PostgreSQL URL: %v", err)
		}
		if schema == "" {
			schema = DefaultSchema
		}
		if err := validSchema(schema); err != nil {
			return dbTarget{}, err
		}
		return dbTarget{postgres: true, url: u, schema: schema}, nil
	case strings.HasPrefix(lower, "postgres:"), strings.HasPrefix(lower, "postgresql:"):
		return dbTarget{}, usagef("--db %q: a PostgreSQL URL starts with postgres:// or postgresql://", redactURL(raw))
	}
	p, err := dbPath(raw)
	if err != nil {
		return dbTarget{}, err
	}
	return dbTarget{path: p}, nil
}

// dbPath resolves a SQLite database URL to a file path.
func dbPath(raw string) (string, error) {
	u := strings.TrimSpace(raw)
	if u == "" {
		return "", usagef("--db is empty; want %s", dbForms)
	}
	lower := strings.ToLower(u)
	switch {
	case strings.HasPrefix(lower, "postgres:"), strings.HasPrefix(lower, "postgresql:"):
		return "", usagef("--db %q is a PostgreSQL URL, not a SQLite file", redactURL(raw))
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
			return "", usagef("--db %q: unknown scheme %q; want %s", raw, u[:i], dbForms)
		}
	}
	if u == "" {
		return "", usagef("--db %q has no file path", raw)
	}
	if strings.ContainsAny(u, "?#") {
		return "", usagef("--db %q: query parameters are not supported for SQLite; use flags such as --synchronous", raw)
	}
	return u, nil
}

// redactURL returns a PostgreSQL URL fit for logs and messages: no password,
// no query parameters (they may hold one too).
func redactURL(raw string) string {
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

// name is how messages name the target: the SQLite path, or the
// PostgreSQL URL without its password and parameters.
func (t dbTarget) name() string {
	if t.postgres {
		return redactURL(t.url)
	}
	return t.path
}

// desc names the target in messages, with the schema on PostgreSQL.
func (t dbTarget) desc() string {
	if t.postgres {
		return fmt.Sprintf("%s (schema %s)", t.name(), t.schema)
	}
	return t.name()
}

// target parses --db and --schema.
func (e *env) target() (dbTarget, error) { return parseDB(e.dbURL, e.schema) }

// database is an open state store and how messages name it.
type database struct {
	store.Driver
	t    dbTarget
	name string // the SQLite path, or the redacted PostgreSQL URL
}

// desc names the store in messages.
func (d *database) desc() string { return d.t.desc() }

// migrateHint is the command that migrates this store.
func (d *database) migrateHint() string {
	if d.t.postgres {
		return fmt.Sprintf("'drover migrate --schema %s' with the same --db", d.t.schema)
	}
	return fmt.Sprintf("'drover migrate --db %s'", d.name)
}

func (d *database) driverName() string {
	if d.t.postgres {
		return "postgres"
	}
	return "sqlite"
}

// openOpts are what a command needs from the database.
type openOpts struct {
	create      bool      // SQLite: create a missing file
	migrate     bool      // apply migrations (PostgreSQL: creating the schema)
	synchronous string    // SQLite: "" for the driver default
	target      *dbTarget // overrides --db and --schema
	lockTimeout bool      // PostgreSQL: set lock_timeout to --lock-timeout
}

// openStore opens the store named by --db (and --schema). Without create, a
// missing SQLite file is an error; without migrate, a PostgreSQL schema is
// never created. Either way the schema must then be current.
func (e *env) openStore(ctx context.Context, o openOpts) (*database, error) {
	var t dbTarget
	if o.target != nil {
		t = *o.target
	} else {
		var err error
		if t, err = e.target(); err != nil {
			return nil, err
		}
	}
	d, err := e.connect(ctx, t, o)
	if err != nil {
		return nil, err
	}
	if err := d.ready(ctx, o.migrate); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// connect opens the store without looking at its schema.
func (e *env) connect(ctx context.Context, t dbTarget, o openOpts) (*database, error) {
	if t.postgres {
		d := &database{t: t, name: t.name()}
		drv, err := postgres.Open(ctx, t.url, postgres.Options{Schema: t.schema, LockTimeout: e.pgLockTimeout(t, o.lockTimeout)})
		if err != nil {
			return nil, d.storeErr(err)
		}
		d.Driver = drv
		return d, nil
	}
	d := &database{t: t, name: t.name()}
	path := t.path
	if !o.create {
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
	drv, err := sqlite.Open(ctx, path, sqlite.Options{Create: o.create, BusyTimeout: e.lockTimeout, Synchronous: o.synchronous})
	if err != nil {
		return nil, d.storeErr(err)
	}
	d.Driver = drv
	return d, nil
}

// pgLockTimeout is postgres.Options.LockTimeout for a command that wants
// one: --lock-timeout, unless the URL sets lock_timeout itself. It is set
// inside drover's transactions rather than as a connection parameter,
// which PgBouncer refuses.
func (e *env) pgLockTimeout(t dbTarget, want bool) time.Duration {
	if !want {
		return 0
	}
	if u, err := url.Parse(t.url); err == nil && u.Query().Has("lock_timeout") {
		return 0
	}
	return e.lockTimeout
}

// ready migrates the store if asked, then checks that its schema is exactly
// the one this drover knows.
func (d *database) ready(ctx context.Context, migrate bool) error {
	if migrate {
		if err := d.Migrate(ctx); err != nil {
			return d.storeErr(err)
		}
	}
	applied, latest, err := d.SchemaVersion(ctx)
	if err != nil {
		return d.storeErr(err)
	}
	switch {
	case applied == 0 && d.t.postgres:
		return &wrapped{fmt.Sprintf("database %s has no drover schema %q (not migrated): run %s", d.name, d.t.schema, d.migrateHint()), drover.ErrNotMigrated}
	case applied == 0:
		return &wrapped{fmt.Sprintf("database %s has no drover schema (not migrated): run %s", d.name, d.migrateHint()), drover.ErrNotMigrated}
	case applied < latest:
		return fmt.Errorf("database %s is at schema version %d of %d (%w): run %s", d.desc(), applied, latest, drover.ErrNotMigrated, d.migrateHint())
	case applied > latest:
		return fmt.Errorf("database %s is at schema version %d, this drover knows %d (%w): upgrade drover", d.desc(), applied, latest, drover.ErrSchemaTooNew)
	}
	return nil
}

// storeErr explains store errors about the database itself.
func (d *database) storeErr(err error) error {
	if err == nil {
		return nil
	}
	if d.t.postgres {
		if errors.Is(err, drover.ErrStoreLocked) {
			return &wrapped{fmt.Sprintf("database %s: waited longer than --lock-timeout for a lock held by another session (%v)", d.desc(), err), err}
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
		return &wrapped{fmt.Sprintf("database %s is corrupt or not a drover SQLite database (%s)", d.name, reason), err}
	case errors.Is(err, drover.ErrStoreLocked):
		return &wrapped{fmt.Sprintf("database %s is locked by another process; gave up after --lock-timeout (%s)", d.name, reason), err}
	}
	return err
}

// dropSchema drops a PostgreSQL schema and everything in it (bench's
// temporary schema).
func dropSchema(ctx context.Context, d *database) error {
	pg, ok := d.Driver.(*postgres.Driver)
	if !ok {
		return nil
	}
	_, err := pg.Pool().Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{d.t.schema}.Sanitize()+` CASCADE`)
	return err
}
