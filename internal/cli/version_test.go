package cli

import (
	"encoding/json"
	"os/exec"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/drover-run/drover/internal/testutil"
	"github.com/drover-run/drover/store/postgres"
	"github.com/drover-run/drover/store/sqlite"
)

func TestVersionFromBuildInfo(t *testing.T) {
	latest, err := sqlite.LatestSchemaVersion()
	if err != nil {
		t.Fatal(err)
	}
	deps := []*debug.Module{
		{Path: sqliteModule, Version: "v1.14.53"},
		{Path: postgresModule, Version: "v5.12.0", Replace: &debug.Module{Path: "example.com/pgx", Version: "v5.12.1"}},
	}
	// What "go install github.com/drover-run/drover/cmd/drover@v1.2.3" records.
	installed := buildVersion(&debug.BuildInfo{GoVersion: "go1.26.1", Main: debug.Module{Path: "github.com/drover-run/drover", Version: "v1.2.3"}, Deps: deps}, true)
	text := installed.text()
	for _, want := range []string{"drover v1.2.3\n", "go1.26.1", "schema version:  " + strconv.Itoa(latest), sqliteModule + " v1.14.53 (SQLite 3.", postgresModule + " v5.12.1"} {
		if !strings.Contains(text, want) {
			t.Errorf("installed build: %q lacks %q", text, want)
		}
	}
	if strings.Contains(text, "commit:") {
		t.Errorf("installed build without VCS settings shows a commit: %q", text)
	}
	// A build in a work tree: "(devel)", the revision and the dirty flag.
	devel := buildVersion(&debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123abcd"}, {Key: "vcs.time", Value: "2026-11-28T07:00:00Z"}, {Key: "vcs.modified", Value: "true"},
	}}, true)
	if text := devel.text(); !strings.HasPrefix(text, "drover (devel)\n  commit:          0123abcd (modified) 2026-11-28T07:00:00Z\n") {
		t.Errorf("devel build: %q", text)
	}
	if v := buildVersion(nil, false); v.Version != "(devel)" || !strings.Contains(v.SQLiteDriver, "unknown version") {
		t.Errorf("no build info: %+v", v)
	}
}

// sqliteLibraries are the SQLite libraries store/sqlite can be built with.
var sqliteLibraries = []string{"github.com/mattn/go-sqlite3", "modernc.org/sqlite"}

// TestVersionCommand runs a built binary: "version", "--version" and
// "version --db", checked against what "go version -m" reads from it.
func TestVersionCommand(t *testing.T) {
	bin := buildDroverBinary(t)
	meta, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatalf("go version -m: %v", err)
	}
	want := map[string]string{}
	var sqliteLibs []string
	for _, line := range strings.Split(string(meta), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "dep" && slices.Contains(sqliteLibraries, f[1]) {
			sqliteLibs = append(sqliteLibs, f[1])
		}
		switch {
		case len(f) >= 3 && f[0] == "mod":
			want["version"] = f[2]
		case len(f) >= 3 && f[0] == "dep" && (f[1] == sqliteModule || f[1] == postgresModule):
			want[f[1]] = f[2]
		case len(f) >= 2 && f[0] == "build" && strings.HasPrefix(f[1], "vcs.revision="):
			want["commit"] = strings.TrimPrefix(f[1], "vcs.revision=")
		}
	}
	// The binary, built as this test is (CGO_ENABLED, GOFLAGS' tags),
	// links the one SQLite library this test's build links.
	if !slices.Equal(sqliteLibs, []string{sqliteModule}) {
		t.Errorf("the binary links the SQLite libraries %v, want only %s", sqliteLibs, sqliteModule)
	}
	out, err := exec.Command(bin, "version", "--json").Output()
	if err != nil {
		t.Fatalf("drover version --json: %v", err)
	}
	var v versionInfo
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("version --json: %v: %s", err, out)
	}
	latest, _ := sqlite.LatestSchemaVersion()
	if v.Version != want["version"] || v.Commit != want["commit"] || v.SchemaSQLite != latest || v.SchemaPostgres != latest ||
		v.SQLiteDriver != sqliteModule+" "+want[sqliteModule] || v.PostgresDriver != postgresModule+" "+want[postgresModule] ||
		!strings.HasPrefix(v.GoVersion, "go1.") || v.SQLiteLibrary != sqlite.LibraryVersion() || !strings.HasPrefix(v.SQLiteLibrary, "3.") || v.SchemaApplied != nil {
		t.Errorf("version --json = %+v; go version -m says %v", v, want)
	}
	text, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatalf("drover version: %v", err)
	}
	flag, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatalf("drover --version: %v", err)
	}
	if string(text) != string(flag) || !strings.HasPrefix(string(text), "drover "+want["version"]+"\n") {
		t.Errorf("version:\n%s--version:\n%s", text, flag)
	}

	// With --db: the applied version, read only; a missing file is an error.
	db, _ := migratedDB(t)
	out, err = exec.Command(bin, "version", "--db", db).Output()
	if err != nil || !strings.Contains(string(out), "database schema: "+strconv.Itoa(latest)+" (") {
		t.Errorf("version --db %s: %v\n%s", db, err, out)
	}
	cmd := exec.Command(bin, "version", "--db", "sqlite:"+t.TempDir()+"/missing.db")
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "does not exist") {
		t.Errorf("version --db on a missing file: %v\n%s", err, out)
	}
}

// TestVersionPostgres reads the applied schema version of a PostgreSQL
// schema: 0 before "drover migrate" (nothing is created), the latest after.
func TestVersionPostgres(t *testing.T) {
	url, schema := testutil.PostgresURL(t), testutil.FreshSchema(t)
	latest, err := postgres.LatestSchemaVersion()
	if err != nil {
		t.Fatal(err)
	}
	applied := func() int {
		var v versionInfo
		if err := json.Unmarshal([]byte(mustRun(t, "version", "--json", "--db", url, "--schema", schema)), &v); err != nil || v.SchemaApplied == nil {
			t.Fatalf("version --json: %v %+v", err, v)
		}
		return *v.SchemaApplied
	}
	if got := applied(); got != 0 {
		t.Errorf("before migrate: applied %d", got)
	}
	mustRun(t, "migrate", "--db", url, "--schema", schema)
	if got := applied(); got != latest {
		t.Errorf("after migrate: applied %d, want %d", got, latest)
	}
}
