package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/drover-run/drover/internal/workflowdef"
	"github.com/drover-run/drover/store/sqlite"
)

// "drover submit" on the database knows the declarative workflows a server
// stored, and submits with their latest version.
func TestSubmitStoredDeclarativeWorkflow(t *testing.T) {
	url, path := migratedDB(t)
	dir := t.TempDir()
	wf := func(u string) string {
		return "name: ship\nsteps:\n  - name: call\n    http: {method: POST, url: \"" + u + "\"}\n"
	}
	storeWorkflow(t, path, dir, "ship.yaml", wf("http://ship.example/v1"))
	// A second version, as a reload would store it.
	storeWorkflow(t, path, dir, "ship.yaml", wf("http://ship.example/v2"))

	out := mustRun(t, "submit", "ship", `{"n":1}`, "--id", "s-1", "--db", url, "--json")
	var tk struct {
		ID              string `json:"id"`
		Workflow        string `json:"workflow"`
		WorkflowVersion int    `json:"workflow_version"`
		Steps           []struct {
			Agent string `json:"agent"`
		} `json:"steps"`
	}
	if err := json.Unmarshal([]byte(out), &tk); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if tk.ID != "s-1" || tk.Workflow != "ship" || tk.WorkflowVersion != 2 || len(tk.Steps) != 1 || tk.Steps[0].Agent != workflowdef.HTTPAgentName {
		t.Fatalf("submitted %+v, want s-1 of ship version 2 with one http step", tk)
	}
	r := run(t, "", "submit", "nope", `{}`, "--db", url)
	if r.code != 1 || !strings.Contains(r.stderr, `unknown workflow "nope" (this database knows: ship, orders (the demo's, run by "drover server --demo"))`) {
		t.Fatalf("unknown workflow: exit %d, stderr %q", r.code, r.stderr)
	}
}

// A declarative workflow's required_input is checked at submission: an
// input without the fields is refused, not stored to fail in its step.
func TestSubmitDeclarativeRequiredInput(t *testing.T) {
	url, path := migratedDB(t)
	dir := t.TempDir()
	storeWorkflow(t, path, dir, "ship.yaml",
		"name: ship\nrequired_input: [order_id]\nsteps:\n  - name: call\n    http: {method: POST, url: \"http://ship.example/${input.order_id}\"}\n")
	r := run(t, "", "submit", "ship", `{"n":1}`, "--id", "s-1", "--db", url)
	wantFailure(t, r, 1, `invalid input for workflow "ship": missing order_id (required_input: order_id)`)
	if out := mustRun(t, "submit", "ship", `{"order_id":"o-1"}`, "--id", "s-2", "--db", url); out != "s-2\n" {
		t.Fatalf("submit: %q", out)
	}
	r = run(t, "", "status", "s-1", "--db", url)
	wantFailure(t, r, 1, "not found")
}

// storeWorkflow writes a workflow file into dir and loads the directory
// into the SQLite database at path, as a server's start or reload does.
func storeWorkflow(t *testing.T, path, dir, file, src string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, file), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := sqlite.Open(t.Context(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	reg, err := workflowdef.NewRegistry(workflowdef.Options{Store: d})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.LoadDir(t.Context(), dir); err != nil {
		t.Fatal(err)
	}
}
