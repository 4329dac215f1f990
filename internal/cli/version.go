package cli

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"

	"github.com/drover-run/drover/internal/clicore"
	"github.com/drover-run/drover/store/postgres"
	"github.com/drover-run/drover/store/sqlite"
)

// versionInfo is what "drover version" reports.
type versionInfo struct {
	Version        string `json:"version"`
	Commit         string `json:"commit,omitempty"`
	CommitTime     string `json:"commit_time,omitempty"`
	Modified       bool   `json:"modified,omitempty"`
	GoVersion      string `json:"go_version"`
	Platform       string `json:"platform"`
	SchemaSQLite   int    `json:"schema_version_sqlite"`
	SchemaPostgres int    `json:"schema_version_postgres"`
	SQLiteDriver   string `json:"sqlite_driver"`
	SQLiteLibrary  string `json:"sqlite_library"`
	PostgresDriver string `json:"postgres_driver"`

	// With --db: the store's applied schema version.
	DB            string `json:"db,omitempty"`
	SchemaApplied *int   `json:"schema_version_applied,omitempty"`
}

// Modules of the drivers, as build info names them.
const (
	sqliteModule   = sqlite.DriverModule
	postgresModule = "github.com/jackc/pgx/v5"
)

// buildVersion fills the binary's part of versionInfo from build info,
// which the go command records: the module version for "go install
// …@vX", "(devel)" for a build in a work tree, plus the VCS revision then.
func buildVersion(bi *debug.BuildInfo, ok bool) versionInfo {
	v := versionInfo{Version: "(devel)", GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	v.SQLiteDriver, v.PostgresDriver = sqliteModule+" (unknown version)", postgresModule+" (unknown version)"
	if ok {
		if bi.Main.Version != "" {
			v.Version = bi.Main.Version
		}
		if bi.GoVersion != "" {
			v.GoVersion = bi.GoVersion
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				v.Commit = s.Value
			case "vcs.time":
				v.CommitTime = s.Value
			case "vcs.modified":
				v.Modified = s.Value == "true"
			}
		}
		for _, d := range bi.Deps {
			m := d
			if d.Replace != nil {
				m = d.Replace
			}
			switch d.Path {
			case sqliteModule:
				v.SQLiteDriver = d.Path + " " + m.Version
			case postgresModule:
				v.PostgresDriver = d.Path + " " + m.Version
			}
		}
	}
	v.SQLiteLibrary = sqlite.LibraryVersion()
	v.SchemaSQLite, _ = sqlite.LatestSchemaVersion()
	v.SchemaPostgres, _ = postgres.LatestSchemaVersion()
	return v
}

func currentVersion() versionInfo { return buildVersion(debug.ReadBuildInfo()) }

// writeText prints v as "drover version" does without --json.
func (v versionInfo) writeText(w io.Writer) {
	fmt.Fprintf(w, "drover %s\n", v.Version)
	if v.Commit != "" {
		c := v.Commit
		if v.Modified {
			c += " (modified)"
		}
		if v.CommitTime != "" {
			c += " " + v.CommitTime
		}
		fmt.Fprintf(w, "  commit:          %s\n", c)
	}
	fmt.Fprintf(w, "  go:              %s %s\n", v.GoVersion, v.Platform)
	if v.SchemaSQLite == v.SchemaPostgres {
		fmt.Fprintf(w, "  schema version:  %d\n", v.SchemaSQLite)
	} else {
		fmt.Fprintf(w, "  schema version:  %d (SQLite), %d (PostgreSQL)\n", v.SchemaSQLite, v.SchemaPostgres)
	}
	if v.SchemaApplied != nil {
		fmt.Fprintf(w, "  database schema: %d (%s)\n", *v.SchemaApplied, v.DB)
	}
	fmt.Fprintf(w, "  sqlite driver:   %s (SQLite %s)\n", v.SQLiteDriver, v.SQLiteLibrary)
	fmt.Fprintf(w, "  postgres driver: %s\n", v.PostgresDriver)
}

func (v versionInfo) text() string {
	var b strings.Builder
	v.writeText(&b)
	return b.String()
}

func (e *env) versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print drover's version, commit, Go version, schema version and driver versions",
		Long: `version prints the version of this drover binary (the module version "go
install" recorded, or "(devel)" for a build from a work tree, then with the
commit and "(modified)" for uncommitted changes), the Go version and
platform it was built with, the schema version it migrates databases to, and
the versions of its SQLite and PostgreSQL drivers. "drover --version" prints
the same.

With --db (or $` + EnvDatabaseURL + `, or db in the config file) it also opens that database, read only,
and prints the schema version applied there; it fails if the database cannot
be opened. It never migrates or creates anything.`,
		Example: `  drover version
  drover version --json
  drover version --db 'postgres://drover@db:5432/app?sslmode=disable' --schema drover`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			v := currentVersion()
			if e.dbGiven(cmd) {
				if err := e.appliedSchema(cmd.Context(), &v); err != nil {
					return err
				}
			}
			if e.JSON {
				return clicore.WriteJSON(e.Stdout, v)
			}
			v.writeText(e.Stdout)
			return nil
		},
	}
}

// dbGiven reports whether the database was named (by the flag, the
// environment or the config file) rather than defaulted.
func (e *env) dbGiven(cmd *cobra.Command) bool { return cmd.Flags().Changed("db") }

// appliedSchema reads the schema version applied in the store of --db.
func (e *env) appliedSchema(ctx context.Context, v *versionInfo) error {
	t, err := e.Target()
	if err != nil {
		return err
	}
	d, err := e.Connect(ctx, t, clicore.OpenOpts{})
	if err != nil {
		return err
	}
	defer d.Close()
	applied, _, err := d.SchemaVersion(ctx)
	if err != nil {
		return d.StoreErr(err)
	}
	v.DB, v.SchemaApplied = d.Desc(), &applied
	return nil
}
