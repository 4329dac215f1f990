package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/internal/httpapi"
	"github.com/drover-run/drover/internal/httpapi/apitest"
	"github.com/drover-run/drover/store/sqlite"
)

// TestSignal: drover signal, on the database and against a server:
// status shows the waiting step, a signal completes it, a repeated ID is
// ignored, a final task refuses one, bad arguments are usage errors.
func TestSignal(t *testing.T) {
	t.Parallel()
	db, path := migratedDB(t)
	drv, err := sqlite.Open(context.Background(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { drv.Close() })
	s := apitest.Start(t, drover.Config{
		Store: drv, PollInterval: 10 * time.Millisecond, SupervisorInterval: 50 * time.Millisecond,
		Workflows: []drover.Workflow{{Name: "approval", Steps: []drover.Step{
			{Name: "approve", Signal: "approved", Timeout: time.Hour},
			{Name: "confirm", Signal: "confirmed", Timeout: time.Hour},
			{Name: "ship", Agent: "prev"},
		}}},
		Agents: []drover.Agent{{Name: "prev", Func: func(_ context.Context, r *drover.AgentRequest) ([]byte, error) { return r.PreviousOutput, nil }}},
	}, httpapi.Options{Rate: -1, Tokens: []httpapi.Token{{Secret: remoteSubmitTok, Scopes: []httpapi.Scope{httpapi.ScopeSubmit}}}}, nil)
	srv := []string{"--server", s.URL, "--token", remoteSubmitTok}
	local := []string{"--db", db}
	state := func(id string) TaskJSON {
		t.Helper()
		var tj TaskJSON
		if err := json.Unmarshal([]byte(mustRun(t, "status", id, "--json", "--db", db)), &tj); err != nil {
			t.Fatal(err)
		}
		return tj
	}
	wantFailure(t, run(t, "", append([]string{"signal", "a1", "approved"}, srv...)...), 1, "404 not_found")
	wantFailure(t, run(t, "", append([]string{"signal", "a1", "approved"}, local...)...), 1, "not found")
	wantFailure(t, run(t, "", append([]string{"signal", "a1", "has space"}, local...)...), 2, "signal name")
	wantFailure(t, run(t, "", append([]string{"signal", "a1", "approved", "--payload", "{"}, local...)...), 2, "--payload is not a JSON document")

	mustRun(t, append([]string{"submit", "approval", "--id", "a1"}, srv...)...)
	waitFor(t, "a1 waiting", func() bool { tj := state("a1"); return tj.Steps[0].State == "Processing" })
	if out := mustRun(t, "status", "a1", "--db", db); !strings.Contains(out, `Waiting:       step 0 (approve) waits for signal "approved" until `) ||
		!strings.Contains(out, "signal:approved") || !strings.Contains(out, drover.SignalHolder) {
		t.Errorf("status of a waiting task:\n%s", out)
	}
	if out := mustRun(t, append([]string{"signal", "a1", "approved", "--payload", `{"by":"ann"}`, "--id", "s1"}, srv...)...); !strings.Contains(out, "signal approved (ID s1) completed the waiting step of a1") {
		t.Errorf("remote signal: %q", out)
	}
	if out := mustRun(t, append([]string{"signal", "a1", "approved", "--id", "s1"}, local...)...); !strings.Contains(out, "a duplicate, ignored") {
		t.Errorf("repeated signal: %q", out)
	}
	r := run(t, `"yes"`, append([]string{"signal", "a1", "confirmed", "--payload", "-", "--json"}, local...)...)
	var res struct {
		ID        string   `json:"id"`
		Duplicate bool     `json:"duplicate"`
		Task      TaskJSON `json:"task"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &res) != nil || res.ID == "" || res.Duplicate || string(res.Task.Steps[0].Output) != `{"by":"ann"}` {
		t.Fatalf("local signal --json: %+v", r)
	}
	waitFor(t, "a1 Processed", func() bool { return state("a1").State == "Processed" })
	if got := string(state("a1").Output); got != `"yes"` {
		t.Errorf("a1 output %s, want the confirmation", got)
	}
	wantFailure(t, run(t, "", append([]string{"signal", "a1", "approved"}, srv...)...), 1, "409 wrong_state")
}
