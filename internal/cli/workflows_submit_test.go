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
	if err := os.WriteFile(filepath.Join(dir, "ship.yaml"), []byte(wf("http://127.0.0.1:1/v1")), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := sqlite.Open(t.Context(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := workflowdef.NewRegistry(workflowdef.Options{Store: d})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.LoadDir(t.Context(), dir); err != nil {
		t.Fatal(err)
	}
	// A second version, as a reload would store it.
	if err := os.WriteFile(filepath.Join(dir, "ship.yaml"), []byte(wf("http://127.0.0.1:1/v2")), 0o644); err != nil {
		t.Fatal(err)
	}
	reg2, _ := workflowdef.NewRegistry(workflowdef.Options{Store: d})
	if err := reg2.LoadDir(t.Context(), dir); err != nil {
		t.Fatal(err)
	}
	d.Close()

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
	if r.code != 1 || !strings.Contains(r.stderr, `unknown workflow "nope" (this database knows: orders, ship)`) {
		t.Fatalf("unknown workflow: exit %d, stderr %q", r.code, r.stderr)
	}
}
