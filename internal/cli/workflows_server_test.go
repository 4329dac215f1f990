package cli

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestServerWorkflowsInvalid: an invalid file stops the start, every
// problem printed as FILE:LINE: FIELD: MESSAGE, before the database is
// touched.
func TestServerWorkflowsInvalid(t *testing.T) {
	dir := t.TempDir()
	wf := filepath.Join(dir, "workflows")
	if err := os.Mkdir(wf, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"good.yaml": "name: good\nsteps: [{name: s, http: {method: GET, url: \"http://svc.example:1/\"}}]\n",
		"trip.yaml": "name: trip\nsteps:\n  - name: reserve\n    timeout: 10x\n    http: {method: POST, url: \"http://h/${input.id}\"}\n  - name: charge\n    agnet: payments\n",
		"dup.json":  `{"name": "good", "steps": [{"name": "s", "agent": "a"}]}`,
		"mine.yml":  "name: orders\nsteps: [{name: s, agent: a}]\n",
	}
	for name, src := range files {
		if err := os.WriteFile(filepath.Join(wf, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dbPath := filepath.Join(dir, "d.db")
	// With --demo the demo's workflow name "orders" is taken.
	r := run(t, "", "--db", "sqlite:"+dbPath, "server", "--demo", "--workflows", wf)
	if r.code != ExitFailure {
		t.Errorf("exit %d, want %d", r.code, ExitFailure)
	}
	p := func(name string) string { return filepath.Join(wf, name) }
	want := []string{
		p("good.yaml") + `:1: name: workflow "good" is also defined in ` + p("dup.json"),
		p("mine.yml") + `:1: name: "orders" is a built-in workflow; choose another name`,
		p("trip.yaml") + `:4: steps[0].timeout: "10x" is not a duration (such as 500ms, 10s, 1m)`,
		p("trip.yaml") + `:7: steps[1].agnet: unknown key (did you mean "agent"?)`,
		"drover: --workflows " + wf + ": 4 problem(s) in 3 file(s), listed above; no workflow was loaded",
	}
	if got := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("stderr:\n%s\nwant:\n%s", r.stderr, strings.Join(want, "\n"))
	}
	if _, err := os.Stat(dbPath); !os.IsNotExist(err) {
		t.Errorf("the database was created (%v) although the workflows are invalid", err)
	}

	// Help.
	help := run(t, "", "server", "--help")
	for _, want := range []string{"--workflows DIR loads declarative workflows", "--workflows-poll duration", "FILE:LINE: FIELD: MESSAGE", "docs/workflows.md"} {
		if !strings.Contains(help.stdout, want) {
			t.Errorf("server --help does not say %q", want)
		}
	}

	// Flags.
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--workflows", filepath.Join(dir, "none")}, ExitFailure, "--workflows " + filepath.Join(dir, "none") + ": workflows directory: open"},
		{[]string{"--workflows-poll", "1s"}, ExitUsage, "--workflows-poll needs --workflows DIR"},
		{[]string{"--workflows", wf, "--workflows-poll", "-1s"}, ExitUsage, "--workflows-poll must not be negative"},
	} {
		r := run(t, "", append([]string{"--db", "sqlite:" + dbPath, "server"}, c.args...)...)
		if r.code != c.code || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d containing %q", c.args, r.code, r.stderr, c.code, c.want)
		}
	}
}

// TestServerWorkflowsReload runs the real binary with --workflows: a
// workflow calling a local HTTP service runs over the API; SIGHUP loads
// a new version used by the next task; an invalid edit is logged with its
// line and changes nothing.
func TestServerWorkflowsReload(t *testing.T) {
	var mu sync.Mutex
	var calls []string // "PATH KEY BODY"
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		calls = append(calls, r.URL.Path+" "+r.Header.Get("Idempotency-Key")+" "+string(b))
		mu.Unlock()
		_, _ = w.Write([]byte(`{"greeted":true}`))
	}))
	defer svc.Close()
	called := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), calls...)
	}

	bin := buildDroverBinary(t)
	dir := t.TempDir()
	wf := filepath.Join(dir, "workflows")
	if err := os.Mkdir(wf, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(wf, "hello.yaml")
	version := func(v string) string {
		return "name: hello\nsteps:\n  - name: greet\n    http:\n      method: POST\n      url: \"" + svc.URL + "/" + v + "/hello\"\n      body: {name: \"${input.name}\"}\n"
	}
	write := func(src string) {
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(version("v1"))
	proc := startServerProc(t, bin, nil, "--db", "sqlite:"+filepath.Join(dir, "d.db"), "--listen", "127.0.0.1:0", "--egress-allow", "127.0.0.1",
		"--insecure-no-auth", "--workflows", wf, "--workflows-poll", "0", "--poll-interval", "20ms")
	base := "http://" + proc.addr
	c := &http.Client{Timeout: 10 * time.Second}
	if !strings.Contains(proc.stderr.String(), `msg="workflow loaded" workflow=hello version=1 file=`+path) {
		t.Errorf("no load line:\n%s", proc.stderr.String())
	}

	runTask := func(id string) map[string]any {
		t.Helper()
		if code, m := call(t, c, "POST", base+"/v1/tasks", "", `{"workflow":"hello","id":"`+id+`","input":{"name":"`+id+`"}}`); code != 201 {
			t.Fatalf("submit %s: %d %v", id, code, m)
		}
		var m map[string]any
		waitFor(t, "task "+id+" final", func() bool {
			var code int
			code, m = call(t, c, "GET", base+"/v1/tasks/"+id, "", "")
			return code == 200 && m["state"] != "Pending" && m["state"] != "Processing"
		})
		if m["state"] != "Processed" {
			t.Fatalf("task %s: %v\n%s", id, m, proc.stderr.String())
		}
		return m
	}
	wantCall := func(id, path string) {
		t.Helper()
		for _, s := range called() {
			if strings.HasSuffix(s, `{"name":"`+id+`"}`) {
				if want := path + " " + id + "/0/greet " + `{"name":"` + id + `"}`; s != want {
					t.Errorf("call for %s: %q, want %q", id, s, want)
				}
				return
			}
		}
		t.Errorf("no call for %s: %v", id, called())
	}

	runTask("t1")
	wantCall("t1", "/v1/hello")

	write(version("v2"))
	if err := proc.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "version 2 loaded", func() bool {
		return strings.Contains(proc.stderr.String(), `msg="workflow loaded" workflow=hello version=2 file=`+path)
	})
	runTask("t2")
	wantCall("t2", "/v2/hello")

	write("name: hello\nsteps:\n  - name: greet\n    timeout: soon\n    agent: a\n")
	if err := proc.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the problem logged", func() bool {
		return strings.Contains(proc.stderr.String(), path+`:4: steps[0].timeout: \"soon\" is not a duration`)
	})
	runTask("t3")
	wantCall("t3", "/v2/hello")

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
