package cli

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/drover-run/drover/internal/testutil"
)

// TestLogLinesCarryTaskIDs runs a task in a real "drover server" whose HTTP
// step first gets a 503 (the HTTP agent retries), then hangs past the
// step's deadline (the supervisor recovers it), then succeeds; every log
// line about the task must carry its task, step and attempt.
func TestLogLinesCarryTaskIDs(t *testing.T) {
	var calls atomic.Int32
	remote := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch calls.Add(1) {
		case 1:
			w.WriteHeader(http.StatusServiceUnavailable)
		case 2:
			<-r.Context().Done() // past the step's deadline
		default:
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"ok":true}`))
		}
	}))
	defer remote.Close()

	bin := buildDroverBinary(t)
	url, _ := migratedDB(t)
	dir := t.TempDir()
	wf := "name: ship\nsteps:\n  - name: call\n    timeout: 1s\n    http: {method: POST, url: \"" + remote.URL + "/ship\"}\n"
	if err := os.WriteFile(filepath.Join(dir, "ship.yaml"), []byte(wf), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := startServerProc(t, bin, nil, "--db", url, "--workflows", dir, "--listen", "127.0.0.1:0", "--insecure-no-auth",
		"--egress-allow", "127.0.0.1", "--supervisor-interval", "50ms", "--log-level", "debug", "--json")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("server log:\n%s", srv.stderr.String())
		}
	})
	mustRun(t, "submit", "ship", "{}", "--id", "ship-1", "--db", url)

	want := map[string]bool{ // messages that must appear with the IDs
		"scheduler dispatched a step":                       false,
		"http agent call failed; retrying":                  false,
		"agent call abandoned: the step's deadline passed":  false,
		"supervisor recovered a step whose deadline passed": false,
		"agent call finished":                               false,
	}
	attempts := map[float64]bool{}
	testutil.WaitFor(t, "the task's log lines", func() bool {
		for _, line := range strings.Split(srv.stderr.String(), "\n") {
			var rec map[string]any
			if json.Unmarshal([]byte(line), &rec) != nil {
				continue
			}
			msg, _ := rec["msg"].(string)
			if rec["task"] == nil && !strings.Contains(line, "ship-1") {
				continue
			}
			// A line about the task names it, its step and the attempt.
			if rec["task"] != "ship-1" || rec["step"] != 0.0 || rec["attempt"] == nil {
				t.Fatalf("a log line about the task lacks its IDs: %s", line)
			}
			attempts[rec["attempt"].(float64)] = true
			if _, ok := want[msg]; ok {
				want[msg] = true
			}
		}
		for _, seen := range want {
			if !seen {
				return false
			}
		}
		return true
	})
	if len(attempts) < 2 {
		t.Errorf("log lines of attempts %v; want the first and the recovered one", attempts)
	}
	// The call finished; its reply is applied a moment later.
	testutil.WaitFor(t, "ship-1 Processed", func() bool {
		return strings.Contains(mustRun(t, "status", "ship-1", "--db", url), "Processed")
	})
}
