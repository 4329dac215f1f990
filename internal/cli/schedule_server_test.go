package cli

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestServerWorkflowSchedules: the schedules: of a workflow file fire in
// "drover server --workflows" (each due time one task, which runs), show
// in the API and the CLI, and change on reload; one removed from its file
// is no longer fired, and can then be deleted (not before: the server
// would store it again at its next start).
func TestServerWorkflowSchedules(t *testing.T) {
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	defer svc.Close()
	bin := buildDroverBinary(t)
	dir := t.TempDir()
	wf := filepath.Join(dir, "workflows")
	if err := os.Mkdir(wf, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(wf, "tick.yaml")
	write := func(every string) {
		src := "name: tick\nsteps:\n  - name: ping\n    http: {method: POST, url: \"" + svc.URL + "/ping\", body: \"${input}\"}\n"
		if every != "" {
			src += "schedules:\n  - name: ticker\n    every: " + every + "\n    input: {source: schedule}\n    catch_up: skip\n"
		}
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("1s")
	db := "sqlite:" + filepath.Join(dir, "d.db")
	proc := startServerProc(t, bin, nil, "--db", db, "--listen", "127.0.0.1:0", "--egress-allow", "127.0.0.1",
		"--insecure-no-auth", "--workflows", wf, "--workflows-poll", "0", "--poll-interval", "20ms")
	base := "http://" + proc.addr
	c := &http.Client{Timeout: 10 * time.Second}

	code, m := call(t, c, "GET", base+"/v1/schedules/ticker", "", "")
	if code != 200 || m["workflow"] != "tick" || m["every_seconds"] != float64(1) || m["catch_up"] != "skip" {
		t.Fatalf("GET /v1/schedules/ticker: %d %v", code, m)
	}
	waitFor(t, "a due time's task processed", func() bool {
		_, m := call(t, c, "GET", base+"/v1/schedules/ticker", "", "")
		id, _ := m["last_task"].(string)
		if !strings.HasPrefix(id, "schedule:ticker:") {
			return false
		}
		code, task := call(t, c, "GET", base+"/v1/tasks/"+id, "", "")
		return code == 200 && task["state"] == "Processed"
	})
	out := mustRun(t, "schedule", "list", "--db", db)
	if !strings.Contains(out, "ticker") || !strings.Contains(out, "every 1s") {
		t.Errorf("schedule list:\n%s", out)
	}

	write("2s")
	if err := proc.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the reloaded schedule", func() bool {
		_, m := call(t, c, "GET", base+"/v1/schedules/ticker", "", "")
		return m["every_seconds"] == float64(2)
	})
	r := run(t, "", "schedule", "delete", "ticker", "--server", base)
	wantFailure(t, r, 1, `server: 409 wrong_state: schedule still defined: "ticker" is in the configuration of this server`)

	write("") // the schedule removed from the file
	if err := proc.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the reload that removes the schedule", func() bool {
		return strings.Contains(proc.stderr.String(), "schedules no workflow file defines any more")
	})
	if r := run(t, "", "schedule", "delete", "ticker", "--server", base); r.code != 0 || r.stdout != "schedule ticker deleted\n" ||
		!strings.Contains(r.stderr, "a process that still defines schedule ticker stores it again") {
		t.Errorf("schedule delete: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if code, m := call(t, c, "GET", base+"/v1/schedules/ticker", "", ""); code != 404 {
		t.Errorf("GET the deleted schedule: %d %v", code, m)
	}
	if out := mustRun(t, "schedule", "list", "--db", db); strings.Contains(out, "ticker") {
		t.Errorf("schedule list after the delete:\n%s", out)
	}
	r = run(t, "", "schedule", "delete", "ticker", "--db", db)
	wantFailure(t, r, 1, `schedule not found: "ticker"`)
	if err := proc.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-proc.done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, proc.stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("no exit after SIGTERM\n%s", proc.stderr.String())
	}
}
