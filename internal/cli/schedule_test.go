package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/drover-run/drover/droverapi"
)

// TestSchedules: the schedule commands show and change a schedule the
// same way on the database and through the server.
func TestSchedules(t *testing.T) {
	e := newRemoteEnv(t)
	out := e.sameBothWays(t, []string{"schedule", "list"})
	if !strings.Contains(out, "nightly-order") || !strings.Contains(out, `cron "0 2 * * *" Europe/Berlin`) || !strings.Contains(out, "active") {
		t.Fatalf("schedule list:\n%s", out)
	}
	e.sameBothWays(t, []string{"schedule", "list", "--json"})
	out = e.sameBothWays(t, []string{"schedule", "show", "nightly-order"})
	if strings.Count(out, ", ") != 4 || !strings.Contains(out, `{"order_id":"o-nightly","amount":5}`) {
		t.Fatalf("schedule show (5 next due times):\n%s", out)
	}
	r := run(t, "", "schedule", "pause", "nightly-order", "--server", e.url, "--token", remoteSubmitTok)
	wantFailure(t, r, 1, "schedule pause, resume, run and delete need an operator token")
	if out := e.op(t, "schedule", "pause", "nightly-order"); out != "schedule nightly-order paused; next due -\n" {
		t.Fatalf("pause: %q", out)
	}
	var s droverapi.Schedule
	if err := json.Unmarshal([]byte(e.local(t, "schedule", "show", "nightly-order", "--json")), &s); err != nil || !s.Paused || len(s.NextDue) != 0 {
		t.Fatalf("paused schedule: %+v (%v)", s, err)
	}
	if out := e.local(t, "schedule", "resume", "nightly-order"); !strings.HasPrefix(out, "schedule nightly-order active; next due ") {
		t.Fatalf("resume: %q", out)
	}
	if out := e.op(t, "schedule", "run", "nightly-order", "--id", "nightly-remote"); out != "nightly-remote\n" {
		t.Fatalf("run over the server: %q", out)
	}
	if out := e.local(t, "schedule", "run", "nightly-order", "--id", "nightly-local"); out != "nightly-local\n" {
		t.Fatalf("run on the database: %q", out)
	}
	if out := e.local(t, "schedule", "run", "nightly-order"); !strings.HasPrefix(out, "schedule:nightly-order:run:") {
		t.Fatalf("run without --id: %q", out)
	}
	if st := e.taskState(t, "nightly-local"); st != "Pending" && st != "Processing" {
		t.Errorf("run task state %s", st)
	}
	r = run(t, "", "schedule", "show", "missing", "--db", e.db)
	wantFailure(t, r, 1, `schedule not found: "missing"`)
	r = run(t, "", "schedule", "show", "missing", "--server", e.url, "--token", remoteSubmitTok)
	wantFailure(t, r, 1, "server: 404 not_found")
	r = run(t, "", "schedule", "run", "nightly-order", "--id", "a b", "--db", e.db)
	wantFailure(t, r, 2, "")

	// Delete: an operator's; refused by the server that defines it.
	r = run(t, "", "schedule", "delete", "nightly-order", "--server", e.url, "--token", remoteSubmitTok)
	wantFailure(t, r, 1, "server: 403 forbidden")
	r = run(t, "", "schedule", "delete", "nightly-order", "--server", e.url, "--token", remoteOperatorTok)
	wantFailure(t, r, 1, "server: 409 wrong_state")
	if out := e.local(t, "schedule", "delete", "nightly-order", "--json"); out != `{"deleted":"nightly-order"}`+"\n" {
		t.Fatalf("delete on the database: %q", out)
	}
	r = run(t, "", "schedule", "show", "nightly-order", "--db", e.db)
	wantFailure(t, r, 1, `schedule not found: "nightly-order"`)
}
