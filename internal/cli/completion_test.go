package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestCompletionScripts(t *testing.T) {
	for shell, want := range map[string]string{
		"bash": "# bash completion V2 for drover",
		"zsh":  "#compdef drover",
		"fish": "# fish completion for drover",
	} {
		out := mustRun(t, "completion", shell)
		if !strings.Contains(out, want) || !strings.Contains(out, "__complete") {
			t.Errorf("completion %s: no script (%d bytes): %.200q", shell, len(out), out)
		}
	}
}

// complete runs "drover __complete ARGS..." and returns the candidates
// (without descriptions) and the directive line.
func complete(t *testing.T, args ...string) (names []string, directive string) {
	t.Helper()
	r := run(t, "", append([]string{"__complete"}, args...)...)
	if r.code != 0 {
		t.Fatalf("__complete %q: exit %d: %s", args, r.code, r.stderr)
	}
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		if strings.HasPrefix(line, ":") {
			directive = line
			continue
		}
		name, _, _ := strings.Cut(line, "\t")
		names = append(names, name)
	}
	return names, directive
}

func TestCompletionWorkflowsAndTaskIDs(t *testing.T) {
	url, path := migratedDB(t)
	dir := t.TempDir()
	storeWorkflow(t, path, dir, "ship.yaml", "name: ship\nsteps:\n  - name: call\n    http: {method: POST, url: \"http://ship.example/\"}\n")
	storeWorkflow(t, path, dir, "bill.yaml", "name: billing\nsteps:\n  - name: call\n    http: {method: POST, url: \"http://bill.example/\"}\n")
	for _, id := range []string{"ship-1", "ship-2", "other-1"} {
		mustRun(t, "submit", "ship", "{}", "--id", id, "--db", url)
	}

	if names, dir := complete(t, "submit", "--db", url, ""); !slices.Equal(names, []string{"billing", "orders", "ship"}) || dir != ":4" {
		t.Errorf("submit workflows = %q %s", names, dir)
	}
	if names, _ := complete(t, "submit", "--db", url, "sh"); !slices.Equal(names, []string{"ship"}) {
		t.Errorf("submit sh = %q", names)
	}
	if names, _ := complete(t, "list", "--db", url, "--workflow", "b"); !slices.Equal(names, []string{"billing"}) {
		t.Errorf("list --workflow b = %q", names)
	}
	for _, c := range []string{"status", "cancel", "resubmit"} {
		if names, _ := complete(t, c, "--db", url, "ship-"); !slices.Equal(names, []string{"ship-1", "ship-2"}) {
			t.Errorf("%s ship- = %q", c, names)
		}
	}
	if names, _ := complete(t, "events", "--db", url, "--task", "o"); !slices.Equal(names, []string{"other-1"}) {
		t.Errorf("events --task o = %q", names)
	}
	// The database from the environment, as every command takes it.
	t.Setenv(EnvDatabaseURL, url)
	if names, _ := complete(t, "status", ""); len(names) != 3 {
		t.Errorf("status with $%s = %q", EnvDatabaseURL, names)
	}

	// A database that does not exist: no candidates, no error, nothing created.
	missing := filepath.Join(t.TempDir(), "none.db")
	r := run(t, "", "__complete", "status", "--db", "sqlite:"+missing, "")
	if r.code != 0 || strings.TrimSpace(r.stdout) != ":4" {
		t.Errorf("missing database: exit %d, stdout %q", r.code, r.stdout)
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Errorf("completion created %s: %v", missing, err)
	}
	// Neither does an unreachable PostgreSQL server print anything.
	if names, _ := complete(t, "submit", "--db", "postgres://nobody@127.0.0.1:1/none?connect_timeout=1", ""); !slices.Equal(names, []string{"orders"}) {
		t.Errorf("unreachable postgres = %q", names)
	}
}

// TestCompletionInBash loads the bash script into a real bash and asks it
// for the candidates of "drover status ship-", as the shell does on Tab.
func TestCompletionInBash(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("bash is not installed")
	}
	bin := buildDroverBinary(t)
	url, _ := migratedDB(t)
	mustRun(t, "submit", "orders", `{"order_id":"o-1","amount":1}`, "--id", "ship-9", "--db", url)
	script := filepath.Join(t.TempDir(), "drover.bash")
	out, err := exec.Command(bin, "completion", "bash").Output()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(script, out, 0o644); err != nil {
		t.Fatal(err)
	}
	// cobra's script needs _get_comp_words_by_ref of the bash-completion
	// package, which this machine may lack, and compopt works only inside
	// a completion the shell started: minimal stand-ins.
	drive := `compopt() { :; }
_get_comp_words_by_ref() { cur=${COMP_WORDS[COMP_CWORD]}; prev=${COMP_WORDS[COMP_CWORD-1]}; words=("${COMP_WORDS[@]}"); cword=$COMP_CWORD; }
source "$SCRIPT"
COMP_WORDS=(drover status --db "$DB" ship-); COMP_CWORD=4; COMP_LINE="drover status --db $DB ship-"; COMP_POINT=${#COMP_LINE}
__start_drover drover ship- --db
printf '%s\n' "${COMPREPLY[@]}"`
	cmd := exec.Command("bash", "--norc", "--noprofile", "-c", drive)
	cmd.Env = append(os.Environ(), "SCRIPT="+script, "DB="+url, "PATH="+filepath.Dir(bin)+":"+os.Getenv("PATH"))
	got, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(got)) != "ship-9" {
		t.Errorf("bash completion: %v: %q", err, got)
	}
}
