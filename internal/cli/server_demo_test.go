package cli

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/drover-run/drover/internal/workflowdef"
	"github.com/drover-run/drover/store/sqlite"
)

// payWorkflow is the workflow of the first-contact report: one step on a
// remote agent named like one of the orders demo's agents.
const payWorkflow = "name: pay\nsteps:\n  - {name: charge, agent: payments, timeout: 60s}\n" // long enough for a loaded machine

// writeWorkflows writes files (name → content) into a new directory.
func writeWorkflows(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "workflows")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, src := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestServerYAMLWorkflowWithPythonAgent is the first contact of a user: the
// real binary serves a YAML workflow whose step names the remote agent
// "payments", and the Python example agent (DROVER_AGENT=payments) does the
// work. A plain server must not run the orders demo, whose agent of the
// same name would take the step (and fail it: the input is no order).
func TestServerYAMLWorkflowWithPythonAgent(t *testing.T) {
	t.Parallel()
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3 is needed to run examples/remote-agent-python (scripts/test installs it; not skipped): %v", err)
	}
	script, err := filepath.Abs(filepath.Join("..", "..", "examples", "remote-agent-python", "agent.py"))
	if err != nil {
		t.Fatal(err)
	}
	bin := buildDroverBinary(t)
	for _, store := range []string{"sqlite", "postgres"} {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			db := []string{"--db", "sqlite:" + filepath.Join(dir, "drover.db")}
			if store == "postgres" {
				url, schema := pgSchema(t)
				db = []string{"--db", url, "--schema", schema}
			}
			wf := writeWorkflows(t, map[string]string{"pay.yaml": payWorkflow})
			const agentTok = "python-agent-token-0123456789"
			tokens := filepath.Join(dir, "tokens")
			if err := os.WriteFile(tokens, []byte(e2eSubmitTok+" submit\n"+agentTok+" agent:payments\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			p := startServerProc(t, bin, nil, append(db, "--listen", "127.0.0.1:0", "--workflows", wf, "--tokens-file", tokens)...)
			base := "http://" + p.addr

			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			agent := exec.CommandContext(ctx, python, script, "--once", "--wait-ms", "20000")
			agent.Env = append(os.Environ(), "DROVER_URL="+base, "DROVER_TOKEN="+agentTok, "DROVER_AGENT=payments")
			agentLog := &syncBuffer{}
			agent.Stdout, agent.Stderr = agentLog, agentLog
			if err := agent.Start(); err != nil {
				t.Fatal(err)
			}
			agentDone := make(chan error, 1)
			go func() { agentDone <- agent.Wait() }()

			c := &http.Client{Timeout: 10 * time.Second}
			if code, m := call(t, c, "POST", base+"/v1/tasks", e2eSubmitTok, `{"workflow":"pay","id":"pay-1","input":{"amount":42}}`); code != 201 {
				t.Fatalf("submit: %d %v", code, m)
			}
			var task map[string]any
			for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				var code int
				code, task = call(t, c, "GET", base+"/v1/tasks/pay-1", e2eSubmitTok, "")
				if code != 200 {
					t.Fatalf("get: %d %v", code, task)
				}
				if st := task["state"]; st == "Processed" {
					break
				} else if st == "Error" || st == "Compensated" || st == "Cancelled" {
					t.Fatalf("task ended %v, not through the Python agent: %v\nagent log:\n%s\nserver log:\n%s", st, task, agentLog, p.stderr)
				}
				if time.Now().After(deadline) {
					t.Fatalf("task not Processed: %v\nagent log:\n%s\nserver log:\n%s", task, agentLog, p.stderr)
				}
			}
			out, _ := task["output"].(map[string]any)
			if out["handled_by"] != "python" || out["charged"] != 42.0 || out["receipt"] != "rcpt-pay-1/0/charge" {
				t.Fatalf("task output %v, want the Python agent's receipt rcpt-pay-1/0/charge\nagent log:\n%s", task["output"], agentLog)
			}
			select {
			case err := <-agentDone:
				if err != nil || !strings.Contains(agentLog.String(), "handled 1 request(s)") {
					t.Fatalf("agent.py --once: %v\n%s", err, agentLog)
				}
			case <-ctx.Done():
				t.Fatalf("agent.py did not exit after its request\n%s", agentLog)
			}
			if strings.Contains(p.stderr.String(), "remote service") {
				t.Errorf("a plain server started the demo's remote service:\n%s", p.stderr)
			}
			if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if err := <-p.done; err != nil {
				t.Fatalf("server exit on SIGTERM: %v\n%s", err, p.stderr)
			}
		})
	}
}

// A server without --demo registers nothing of the demo: no "orders"
// workflow (a YAML file may take the name), no demo agents, no simulated
// service; the demo's flags need --demo.
func TestServerWithoutDemo(t *testing.T) {
	t.Parallel()
	// "orders" is a name like any other here; its step's agent "payments"
	// is a remote one.
	wf := writeWorkflows(t, map[string]string{"orders.yaml": "name: orders\nsteps:\n  - {name: charge, agent: payments}\n"})
	db := "sqlite:" + filepath.Join(t.TempDir(), "d.db")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	errb := &syncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- MainIO(ctx, []string{"--db", db, "server", "--listen", "127.0.0.1:0", "--insecure-no-auth", "--workflows", wf},
			strings.NewReader(""), io.Discard, errb)
	}()
	var base string
	waitFor(t, "the ready line", func() bool {
		select {
		case code := <-done:
			t.Fatalf("server exited %d: %s", code, errb)
		default:
		}
		m := listenRe.FindStringSubmatch(errb.String())
		if m != nil {
			base = "http://" + m[1]
		}
		return m != nil
	})
	c := &http.Client{Timeout: 10 * time.Second}
	if code, m := call(t, c, "POST", base+"/v1/tasks", "", `{"workflow":"orders","id":"o-1","input":{"order_id":"o-1","amount":1}}`); code != 201 {
		t.Fatalf("submit: %d %v", code, m)
	}
	// The step waits for a remote agent: no demo agent took it.
	code, m := call(t, c, "POST", base+"/v1/agents/payments/poll", "", `{"max":1,"wait_ms":10000}`)
	reqs, _ := m["requests"].([]any)
	if code != 200 || len(reqs) != 1 || reqs[0].(map[string]any)["task_id"] != "o-1" {
		t.Fatalf("poll for payments: %d %v, want the request of o-1\n%s", code, m, errb)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d: %s", code, errb)
	}
	for _, not := range []string{"remote service", "remote_url"} {
		if strings.Contains(errb.String(), not) {
			t.Errorf("the log mentions %q: the demo ran\n%s", not, errb)
		}
	}

	// The demo's flags without --demo are usage errors.
	for _, args := range [][]string{{"--remote-url", "http://127.0.0.1:1"}, {"--step-timeout", "1s"}, {"--retry-delay", "1s"}} {
		r := run(t, "", append([]string{"--db", db, "server"}, args...)...)
		if r.code != ExitUsage || !strings.Contains(r.stderr, args[0]+" needs --demo") {
			t.Errorf("%v: exit %d, stderr %q; want exit %d, %q", args, r.code, r.stderr, ExitUsage, args[0]+" needs --demo")
		}
	}
	help := run(t, "", "server", "--help")
	for _, want := range []string{"--demo", "Nothing of the demo runs without\n--demo", "with --demo: base URL"} {
		if !strings.Contains(help.stdout, want) {
			t.Errorf("server --help does not say %q", want)
		}
	}
}

// "drover submit orders" on the database submits a declarative workflow
// named orders when a server stored one, not the demo's (whose input
// check would refuse this input).
func TestSubmitDeclarativeOrders(t *testing.T) {
	t.Parallel()
	url, path := migratedDB(t)
	d, err := sqlite.Open(t.Context(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := workflowdef.NewRegistry(workflowdef.Options{Store: d})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.LoadDir(t.Context(), writeWorkflows(t, map[string]string{"orders.yaml": "name: orders\nsteps:\n  - {name: charge, agent: payments}\n"})); err != nil {
		t.Fatal(err)
	}
	d.Close()
	var tk TaskJSON
	if err := json.Unmarshal([]byte(mustRun(t, "submit", "orders", `{"amount":42}`, "--id", "d-1", "--db", url, "--json")), &tk); err != nil {
		t.Fatal(err)
	}
	if tk.WorkflowVersion != 1 || len(tk.Steps) != 1 || tk.Steps[0].Name != "charge" {
		t.Fatalf("submitted %+v, want version 1 of the declarative orders with its step charge", tk)
	}
}

// An agent name with two providers fails the start with both named: here
// the demo's in-process "payments" and a workflow's remote "payments",
// with every role and with roles that run no agent.
func TestServerAgentWithTwoProviders(t *testing.T) {
	t.Parallel()
	wf := writeWorkflows(t, map[string]string{"pay.yaml": payWorkflow})
	for _, roles := range []string{"all", "scheduler,supervisor"} {
		db := "sqlite:" + filepath.Join(t.TempDir(), "d.db")
		r := run(t, "", "--db", db, "server", "--demo", "--roles", roles, "--workflows", wf)
		want := `agent "payments" has two providers: the orders demo (--demo) and the remote agent named by workflow "pay" v1 (` + filepath.Join(wf, "pay.yaml") + `)`
		if r.code != ExitFailure || !strings.Contains(r.stderr, want) || strings.Contains(r.stderr, ReadyPrefix) {
			t.Errorf("--roles %s: exit %d, stderr %q; want exit %d with %q", roles, r.code, r.stderr, ExitFailure, want)
		}
	}
}
