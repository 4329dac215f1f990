package cli

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/drover-run/drover/internal/egress/egresstest"
)

// TestServerSSRFReproduction is the reported attack on drover server: a
// submit token makes the built-in HTTP agent fetch an internal service
// through a URL taken from the task's input, and reads the answer as the
// task's output. The workflow file as reported does not load any more; with
// its hosts declared, every way of naming the internal service ends the
// task in Error with "egress denied" and nothing reaches the service; a
// declared host is still called. Both drivers.
func TestServerSSRFReproduction(t *testing.T) {
	bin := buildDroverBinary(t)
	internal := egresstest.NewSink(t, "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"AccessKeyId":"AKIA-SECRET","SecretAccessKey":"s3cr3t"}`))
	}))
	partner := egresstest.NewSink(t, "127.0.0.1:0", nil)
	ip := internal.Port()

	// The reported file: a URL that is a whole expression, no hosts listed.
	bare := writeWorkflows(t, map[string]string{"cb.yaml": "name: cb\nsteps:\n  - name: call\n    http: {method: GET, url: \"${input.callback}\"}\n"})
	r := run(t, "", "--db", "sqlite:"+filepath.Join(t.TempDir(), "d.db"), "server", "--workflows", bare)
	if r.code != ExitFailure || !strings.Contains(r.stderr, filepath.Join(bare, "cb.yaml")+`:4: steps[0].http.url: "${input.callback}": the whole URL comes from the task's data, so the workflow must list the hosts it may reach`) {
		t.Fatalf("start with the reported file: exit %d\n%s", r.code, r.stderr)
	}

	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			dir := t.TempDir()
			dbArgs := []string{"--db", "sqlite:" + filepath.Join(dir, "d.db")}
			if driver == "postgres" {
				url, schema := pgSchema(t)
				dbArgs = []string{"--db", url, "--schema", schema}
			}
			wf := writeWorkflows(t, map[string]string{
				"cb.yaml": "name: cb\negress: {allow: [hooks.example.com, \"127.0.0.1:" + partner.Port() + "\"]}\nsteps:\n" +
					"  - name: call\n    timeout: 20s\n    http: {method: GET, url: \"${input.callback}\"}\n",
				"port.yaml": "name: port\negress: {allow: [api.invalid]}\nsteps:\n" +
					"  - name: call\n    timeout: 20s\n    http: {method: GET, url: \"http://api.invalid:${input.port}/v1/items\"}\n",
			})
			tokens := filepath.Join(dir, "tokens")
			if err := os.WriteFile(tokens, []byte(e2eSubmitTok+" submit\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			p := startServerProc(t, bin, nil, append(dbArgs, "--listen", "127.0.0.1:0", "--tokens-file", tokens,
				"--workflows", wf, "--poll-interval", "20ms")...)
			defer func() {
				_ = p.cmd.Process.Signal(syscall.SIGTERM)
				if err := <-p.done; err != nil {
					t.Errorf("the server's exit after SIGTERM: %v", err)
				}
			}()
			base := "http://" + p.addr
			c := &http.Client{Timeout: 10 * time.Second}
			submit := func(body string) (int, map[string]any) {
				t.Helper()
				return call(t, c, "POST", base+"/v1/tasks", e2eSubmitTok, body)
			}
			refused := map[string]struct{ body, want string }{
				"issue": {`{"workflow":"cb","id":"issue","input":{"callback":"http://127.0.0.1:` + ip + `/latest/meta-data/iam/security-credentials/role"}}`,
					`egress denied: 127.0.0.1:` + ip + `: not in workflow "cb"'s egress.allow (hooks.example.com, 127.0.0.1:` + partner.Port() + `)`},
				"metadata": {`{"workflow":"cb","id":"metadata","input":{"callback":"http://169.254.169.254/latest/meta-data/"}}`,
					`egress denied: 169.254.169.254:80: not in workflow "cb"'s egress.allow`},
				"decimal": {`{"workflow":"cb","id":"decimal","input":{"callback":"http://2130706433:` + ip + `/"}}`,
					`egress denied: 2130706433:` + ip + `: not a standard IP address`},
				"mapped": {`{"workflow":"cb","id":"mapped","input":{"callback":"http://[::ffff:127.0.0.1]:` + ip + `/"}}`,
					`egress denied: [::ffff:127.0.0.1]:` + ip + `: not in workflow`},
				"port": {`{"workflow":"port","id":"port","input":{"port":"80@127.0.0.1:` + ip + `"}}`,
					`task port: ${input.port}: the rendered URL does not parse`},
			}
			for id, x := range refused {
				if code, m := submit(x.body); code != 201 {
					t.Fatalf("submit %s: %d %v", id, code, m)
				}
			}
			if code, m := submit(`{"workflow":"cb","id":"listed","input":{"callback":"http://127.0.0.1:` + partner.Port() + `/done"}}`); code != 201 {
				t.Fatalf("submit listed: %d %v", code, m)
			}
			// A callback URL naming the internal service is refused at submit.
			code, m := submit(`{"workflow":"cb","id":"hook","input":{"callback":"https://hooks.example.com/x"},"callback_url":"http://127.0.0.1:` + ip + `/hook"}`)
			e, _ := m["error"].(map[string]any)
			if msg, _ := e["message"].(string); code != 400 || !strings.Contains(msg, `field "callback_url" is refused: egress denied: 127.0.0.1:`+ip+` is a loopback address`) {
				t.Errorf("submit with an internal callback_url: %d %v, want 400 naming callback_url", code, m)
			}
			final := func(id string) map[string]any {
				t.Helper()
				var m map[string]any
				waitFor(t, "task "+id+" final", func() bool {
					var code int
					code, m = call(t, c, "GET", base+"/v1/tasks/"+id, e2eSubmitTok, "")
					return code == 200 && m["state"] != "Pending" && m["state"] != "Processing"
				})
				return m
			}
			for id, x := range refused {
				m := final(id)
				last, _ := m["last_error"].(string)
				if m["state"] != "Error" || !strings.Contains(last, x.want) || m["output"] != nil {
					t.Errorf("task %s: state %v, output %v, last_error %q; want Error, no output, %q", id, m["state"], m["output"], last, x.want)
				}
			}
			if m := final("listed"); m["state"] != "Processed" || m["output"] != "reached" {
				t.Errorf("task listed: %v, want Processed with the partner's answer", m)
			}
			if n := internal.Conns(); n != 0 {
				t.Errorf("%d connection(s) reached the internal service", n)
			}
			if strings.Contains(p.stderr.String(), "s3cr3t") {
				t.Error("the internal service's answer reached the logs")
			}
		})
	}
}

// TestServerEgressFlags: --egress-allow rules are checked, and a
// --webhook-url the policy refuses stops the start (server_webhook_test
// opens its loopback receiver with --egress-allow).
func TestServerEgressFlags(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("a-webhook-secret-0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}
	db := "sqlite:" + filepath.Join(dir, "d.db")
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--egress-allow", "10.0.0.1/8"}, ExitUsage, `--egress-allow: egress rule "10.0.0.1/8": bits are set after the prefix length; did you mean 10.0.0.0/8?`},
		{[]string{"--egress-allow", "http://x.example/"}, ExitUsage, `--egress-allow: egress rule "http://x.example/": a rule names a host, not a URL`},
		{[]string{"--webhook-secret-file", secret, "--webhook-url", "http://127.0.0.1:1/hook"}, ExitUsage,
			`--webhook-url "http://127.0.0.1:1/hook": egress denied: 127.0.0.1:1 is a loopback address`},
		{[]string{"--webhook-secret-file", secret, "--webhook-url", "http://169.254.169.254/x#events=alerts"}, ExitUsage,
			`--webhook-url "http://169.254.169.254/x#events=alerts": egress denied: 169.254.169.254:80 is a link-local address (the cloud metadata service)`},
	} {
		r := run(t, "", append([]string{"--db", db, "server"}, c.args...)...)
		if r.code != c.code || !strings.Contains(r.stderr, c.want) {
			t.Errorf("server %v: exit %d, stderr %q; want %d with %q", c.args, r.code, r.stderr, c.code, c.want)
		}
	}
	help := run(t, "", "server", "--help")
	for _, want := range []string{"--egress-allow stringArray", "egress denied:", "HTTP_PROXY and HTTPS_PROXY are not used"} {
		if !strings.Contains(help.stdout, want) {
			t.Errorf("server --help lacks %q", want)
		}
	}
}
