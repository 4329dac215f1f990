package cli

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/drover-run/drover/internal/clicore"
)

// writeConfig writes a config file and returns its path.
func writeConfig(t *testing.T, src string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "drover.yaml")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// versionDB runs "drover version --json" and returns the database it read.
func versionDB(t *testing.T, args ...string) string {
	t.Helper()
	var v versionInfo
	if err := json.Unmarshal([]byte(mustRun(t, append([]string{"version", "--json"}, args...)...)), &v); err != nil {
		t.Fatal(err)
	}
	return v.DB
}

func TestConfigPrecedence(t *testing.T) {
	fileDB, filePath := migratedDB(t)
	envDB, envPath := migratedDB(t)
	flagDB, flagPath := migratedDB(t)
	cfg := writeConfig(t, "# drover settings\ndb: "+fileDB+"\nlock-timeout: 3s\nstate: [Error, Cancelled]\n")

	if got := versionDB(t, "--config", cfg); got != filePath {
		t.Errorf("file only: db %q, want %q", got, filePath)
	}
	t.Setenv(EnvDatabaseURL, envDB)
	if got := versionDB(t, "--config", cfg); got != envPath {
		t.Errorf("file and env: db %q, want %q", got, envPath)
	}
	if got := versionDB(t, "--config", cfg, "--db", flagDB); got != flagPath {
		t.Errorf("file, env and flag: db %q, want %q", got, flagPath)
	}
	// $DROVER_CONFIG names the file when --config does not.
	t.Setenv(EnvDatabaseURL, "")
	t.Setenv(EnvConfig, cfg)
	if got := versionDB(t); got != filePath {
		t.Errorf("$%s: db %q, want %q", EnvConfig, got, filePath)
	}

	// Every flag has its variable (--json: $DROVER_JSON), and a list in
	// the file sets a repeatable flag: only Error and Cancelled tasks.
	mustRun(t, "submit", "orders", `{"order_id":"o-1","amount":1}`, "--id", "pending-1")
	mustRun(t, "submit", "orders", `{"order_id":"o-2","amount":1}`, "--id", "cancelled-1")
	mustRun(t, "cancel", "cancelled-1")
	t.Setenv("DROVER_JSON", "true")
	out := mustRun(t, "list")
	if !strings.HasPrefix(out, `{"tasks":[{"id":"cancelled-1"`) || strings.Contains(out, "pending-1") {
		t.Errorf("list with state from the file and $DROVER_JSON: %s", out)
	}
	// The command line wins over both.
	if out := mustRun(t, "list", "--json=false", "--state", "Pending"); !strings.Contains(out, "pending-1") || strings.Contains(out, "cancelled-1") || strings.HasPrefix(out, "{") {
		t.Errorf("list --json=false --state Pending: %s", out)
	}
}

func TestConfigErrors(t *testing.T) {
	db, _ := migratedDB(t)
	for _, c := range []struct{ src, want string }{
		{"db: " + db + "\nlog-levle: debug\nwebhook-secret: x\n", `unknown key "log-levle" (line 2), "webhook-secret" (line 3): not a flag of any drover command`},
		{"lock-timeout: soon\n", `line 1: lock-timeout: invalid argument "soon"`},
		{"db: [a, b]\n", "line 1: db: want one value, not a list of 2"},
		{"db:\n", "line 1: db has no value"},
		{"log-level: {a: 1}\n", "line 1: log-level: want a value or a list of values"},
		{"- db\n", "line 1: want a mapping of flag names to values"},
		{"db: a\ndb: b\n", `line 2: key "db" given twice`},
		{"config: other.yaml\n", `unknown key "config"`},
		{"db: [unclosed\n", "yaml:"},
	} {
		path := writeConfig(t, c.src)
		r := run(t, "", "list", "--config", path)
		wantFailure(t, r, ExitUsage, "config file "+path)
		if !strings.Contains(r.stderr, c.want) {
			t.Errorf("config %q: stderr %q lacks %q", c.src, r.stderr, c.want)
		}
	}
	r := run(t, "", "list", "--config", filepath.Join(t.TempDir(), "none.yaml"))
	wantFailure(t, r, ExitUsage, "no such file")

	// A flag that only other commands have is known: the file can be
	// shared by the server and the CLI.
	mustRun(t, "list", "--db", db, "--config", writeConfig(t, "roles: agent\nlisten: 127.0.0.1:0\n"))

	t.Setenv("DROVER_LOCK_TIMEOUT", "x")
	wantFailure(t, run(t, "", "list", "--db", db), ExitUsage, `$DROVER_LOCK_TIMEOUT: invalid argument "x"`)
}

// TestConfigRemoteSettings checks that a server and token from the file or
// the environment act as $DROVER_SERVER always did: only for the commands
// that work against a server, and below an explicit --db.
func TestConfigRemoteSettings(t *testing.T) {
	db, _ := migratedDB(t)
	cfg := writeConfig(t, "db: "+db+"\nserver: http://127.0.0.1:1\ntoken: from-the-file\n")
	if out := mustRun(t, "migrate", "--config", cfg); !strings.Contains(out, "up to date") {
		t.Errorf("migrate with a server in the config file: %s", out)
	}
	r := run(t, "", "status", "t-1", "--config", cfg)
	wantFailure(t, r, ExitFailure, "127.0.0.1:1")
	wantFailure(t, run(t, "", "status", "t-1", "--config", cfg, "--db", db), ExitFailure, "not found")

	t.Setenv("DROVER_TOKEN_FILE", "/nonexistent/token")
	// The environment's token file outranks the file's token.
	wantFailure(t, run(t, "", "status", "t-1", "--config", cfg), ExitUsage, "--token-file: open /nonexistent/token")
	t.Setenv("DROVER_TOKEN", "x")
	wantFailure(t, run(t, "", "status", "t-1", "--config", cfg), ExitUsage, "--token and --token-file exclude each other (both set in the environment)")
}

// TestConfigConsumeVariables checks that the variables "queue consume
// --exec" sets for its command do not become flags of a drover it runs.
func TestConfigConsumeVariables(t *testing.T) {
	db, _ := migratedDB(t)
	t.Setenv("DROVER_QUEUE", "orders")
	t.Setenv("DROVER_SESSION", "s-1")
	t.Setenv("DROVER_MESSAGE_ID", "m-1")
	wantFailure(t, run(t, "", "queue", "publish", "--db", db, "--body", "x"), ExitUsage, "--queue")
}

// TestConfigDocExample checks the example of docs/operations.md: every
// key is a flag of "drover server" and every value parses.
func TestConfigDocExample(t *testing.T) {
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(doc), "```yaml\n# /etc/drover/drover.yaml\n")
	example, _, ok2 := strings.Cut(after, "```")
	if !ok || !ok2 {
		t.Fatal("docs/operations.md has no drover.yaml example")
	}
	path := writeConfig(t, example)
	e := &env{Env: &clicore.Env{Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: io.Discard, Getenv: func(string) string { return "" }}}
	root := e.rootCmd()
	server, _, err := root.Find([]string{"server"})
	if err != nil {
		t.Fatal(err)
	}
	if err := server.ParseFlags([]string{"--config", path}); err != nil {
		t.Fatal(err)
	}
	if err := e.resolveSettings(server); err != nil {
		t.Fatalf("the example: %v", err)
	}
	file, err := loadConfig(path, root)
	if err != nil {
		t.Fatal(err)
	}
	for name := range file {
		if server.Flags().Lookup(name) == nil {
			t.Errorf("the example's key %q is no flag of drover server", name)
		}
		if e.origin[name] != fromFile {
			t.Errorf("the example's key %q did not set the flag", name)
		}
	}
	if len(file) < 20 {
		t.Errorf("the example has %d keys; want a complete one", len(file))
	}
}
