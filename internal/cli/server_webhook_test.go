package cli

import (
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/drover-run/drover/droverclient"
)

func TestServerWebhookFlags(t *testing.T) {
	dir := t.TempDir()
	db := "sqlite:" + filepath.Join(dir, "d.db")
	short := filepath.Join(dir, "short")
	_ = os.WriteFile(short, []byte("tooshort\n"), 0o600)
	empty := filepath.Join(dir, "empty")
	_ = os.WriteFile(empty, []byte("\n"), 0o600)
	t.Setenv(EnvWebhookSecret, "")
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--webhook-url", "http://127.0.0.1:1/hook"}, ExitUsage, "--webhook-url needs a signing secret"},
		{[]string{"--webhook-secret-file", short}, ExitUsage, "must be at least 16"},
		{[]string{"--webhook-secret-file", empty}, ExitUsage, "is empty"},
		{[]string{"--webhook-secret-file", filepath.Join(dir, "none")}, ExitFailure, "--webhook-secret-file"},
		{[]string{"--webhook-secret-file", short, "--webhook-url", "ftp://x/y"}, ExitUsage, ""},
		{[]string{"--callback-url-prefix", "https://hooks.example.com/hooks"}, ExitUsage, `--callback-url-prefix: callback URL prefix "https://hooks.example.com/hooks": the path must end with "/"`},
		{[]string{"--callback-url-prefix", "hooks.example.com/"}, ExitUsage, "want an http or https URL"},
	} {
		r := run(t, "", append([]string{"--db", db, "server"}, c.args...)...)
		if r.code != c.code || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d containing %q", c.args, r.code, r.stderr, c.code, c.want)
		}
		if strings.Contains(r.stderr, "tooshort") {
			t.Errorf("%v: the secret appears in the error: %s", c.args, r.stderr)
		}
	}
	t.Setenv(EnvWebhookSecret, "0123456789abcdef-secret")
	r := run(t, "", "--db", db, "server", "--webhook-url", "ftp://example.com/hook")
	if r.code != ExitUsage || !strings.Contains(r.stderr, `--webhook-url "ftp://example.com/hook"`) {
		t.Errorf("bad URL with a secret from the environment: exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestWebhookSecretCommand: "drover webhook secret URL" prints the
// receiver's whsec_ secret from the server's secret, read as drover server
// reads it; its deliveries verify with it in TestServerWebhookAlertsEndToEnd.
func TestWebhookSecretCommand(t *testing.T) {
	dir := t.TempDir()
	const url = "https://hooks.example.com/drover"
	// The value docs/webhooks.md's shell snippet and Python compute.
	const want = "whsec_wEPaRArkEUL6XfFv4rIzWqCxQcu5K3gwvrUZPrE1ObM="
	t.Setenv(EnvWebhookSecret, "0123456789abcdef-secret")
	if got := strings.TrimSpace(mustRun(t, "webhook", "secret", url)); got != want {
		t.Errorf("secret from $%s: %q, want %q", EnvWebhookSecret, got, want)
	}
	if got := mustRun(t, "webhook", "secret", url+"#events=alerts", "--json"); got != `{"secret":"`+want+`","url":"`+url+`"}`+"\n" {
		t.Errorf("--json with #events=: %q", got)
	}
	file := filepath.Join(dir, "secret")
	_ = os.WriteFile(file, []byte("another-secret-0123456789\n"), 0o600)
	if got := strings.TrimSpace(mustRun(t, "webhook", "secret", url, "--webhook-secret-file", file)); got == want || !strings.HasPrefix(got, "whsec_") {
		t.Errorf("--webhook-secret-file: %q, want another whsec_ secret than $%s's", got, EnvWebhookSecret)
	}
	open := filepath.Join(dir, "open")
	_ = os.WriteFile(open, []byte("another-secret-0123456789\n"), 0o644)
	_ = os.Chmod(open, 0o644)
	wantFailure(t, run(t, "", "webhook", "secret", url, "--webhook-secret-file", open), ExitFailure, "is open to group or others")
	wantFailure(t, run(t, "", "webhook", "secret", "ftp://x/y"), ExitUsage, "want an http or https URL")
	wantFailure(t, run(t, "", "webhook", "secret", url+"#evnts=alerts"), ExitUsage, "the part after # must be events=LIST")
	wantFailure(t, run(t, "", "webhook", "secret"), ExitUsage, "accepts 1 arg")
	t.Setenv(EnvWebhookSecret, "tooshort")
	wantFailure(t, run(t, "", "webhook", "secret", url), ExitUsage, "must be at least 16")
	t.Setenv(EnvWebhookSecret, "")
	wantFailure(t, run(t, "", "webhook", "secret", url), ExitUsage, "no webhook secret: give --webhook-secret-file FILE or $"+EnvWebhookSecret)
}

func TestServerWebhookURLEvents(t *testing.T) {
	dir := t.TempDir()
	db := "sqlite:" + filepath.Join(dir, "d.db")
	t.Setenv(EnvWebhookSecret, "0123456789abcdef-secret")
	for _, c := range []struct{ url, want string }{
		{"http://127.0.0.1:1/h#evnts=alerts", `the part after # must be events=LIST`},
		{"http://127.0.0.1:1/h#events=alerts,retries", `unknown event selector "retries"`},
		{"http://127.0.0.1:1/h#events=", `events= lists no events`},
	} {
		r := run(t, "", "--db", db, "server", "--webhook-url", c.url)
		if r.code != ExitUsage || !strings.Contains(r.stderr, `--webhook-url "`+c.url+`"`) || !strings.Contains(r.stderr, c.want) {
			t.Errorf("--webhook-url %s: exit %d, stderr %q; want a usage error containing %q", c.url, r.code, r.stderr, c.want)
		}
	}
}

// TestServerWebhookAlertsEndToEnd runs the real binary on each store: a
// --webhook-url choosing alerts gets the task's alerts, a plain one its
// final state, and the task's callback URL the events the submit chose,
// all signed.
func TestServerWebhookAlertsEndToEnd(t *testing.T) {
	bin := buildDroverBinary(t)
	const secret = "e2e-webhook-secret-0123456789"
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			dir := t.TempDir()
			var (
				mu   sync.Mutex
				hits = map[string][]string{} // path → event types, signature verified
				bad  []string
			)
			var alertsKey []byte // from "drover webhook secret", set before the server starts
			recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/pay" {
					http.Error(w, `{"error":"card declined"}`, http.StatusUnprocessableEntity) // a permanent failure
					return
				}
				body, _ := io.ReadAll(r.Body)
				mu.Lock()
				defer mu.Unlock()
				if err := droverclient.VerifyWebhook([]byte(secret), "http://"+r.Host+r.URL.RequestURI(), r.Header, body, time.Now(), 0); err != nil {
					bad = append(bad, r.URL.Path+": "+err.Error())
				}
				// The receiver at /alerts holds only its whsec_ secret.
				if r.URL.Path == "/alerts" {
					if err := droverclient.VerifyWebhookKey(alertsKey, r.Header, body, time.Now(), 0); err != nil {
						bad = append(bad, r.URL.Path+" with its whsec_ secret: "+err.Error())
					}
				}
				hits[r.URL.Path] = append(hits[r.URL.Path], r.Header.Get("Drover-Event-Type"))
				w.WriteHeader(http.StatusNoContent)
			}))
			defer recv.Close()
			wf := filepath.Join(dir, "workflows")
			if err := os.MkdirAll(wf, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(wf, "charge.yaml"), []byte("name: charge\nsteps:\n  - name: pay\n    http: {method: POST, url: \""+recv.URL+"/pay\"}\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			tokens := filepath.Join(dir, "tokens")
			if err := os.WriteFile(tokens, []byte(e2eSubmitTok+" submit\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			secretFile := filepath.Join(dir, "webhook-secret")
			if err := os.WriteFile(secretFile, []byte(secret+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			whsec := strings.TrimSpace(mustRun(t, "webhook", "secret", recv.URL+"/alerts#events=alerts", "--webhook-secret-file", secretFile))
			key, err := droverclient.ParseWebhookSecret(whsec)
			if err != nil || !strings.HasPrefix(whsec, "whsec_") {
				t.Fatalf("drover webhook secret printed %q: %v", whsec, err)
			}
			alertsKey = key
			dbArgs := []string{"--db", "sqlite:" + filepath.Join(dir, "d.db")}
			if driver == "postgres" {
				url, schema := pgSchema(t)
				dbArgs = []string{"--db", url, "--schema", schema}
			}
			p := startServerProc(t, bin, []string{EnvWebhookSecret + "=" + secret}, append(dbArgs,
				"--listen", "127.0.0.1:0", "--tokens-file", tokens, "--workflows", wf, "--egress-allow", "127.0.0.1",
				"--webhook-url", recv.URL+"/final", "--webhook-url", recv.URL+"/alerts#events=alerts")...)
			defer func() {
				_ = p.cmd.Process.Signal(syscall.SIGTERM)
				if err := <-p.done; err != nil {
					t.Errorf("the server's exit after SIGTERM: %v", err)
				}
			}()
			c := &http.Client{Timeout: 10 * time.Second}
			code, m := call(t, c, "POST", "http://"+p.addr+"/v1/tasks", e2eSubmitTok,
				`{"workflow":"charge","id":"c-1","callback_url":"`+recv.URL+`/cb","callback_events":["step_failed"]}`)
			if code != 201 || fmt.Sprint(m["callback_events"]) != "[step_failed]" {
				t.Fatalf("submit: %d %v", code, m)
			}
			want := map[string]string{"/final": "error", "/alerts": "error step_failed", "/cb": "step_failed"}
			got := func() map[string]string {
				mu.Lock()
				defer mu.Unlock()
				out := map[string]string{}
				for path, types := range hits {
					s := slices.Clone(types)
					slices.Sort(s)
					out[path] = strings.Join(s, " ")
				}
				return out
			}
			deadline := time.Now().Add(60 * time.Second)
			for !maps.Equal(got(), want) {
				if time.Now().After(deadline) {
					t.Fatalf("webhooks received %v, want %v\n%s", got(), want, p.stderr.String())
				}
				time.Sleep(20 * time.Millisecond)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(bad) > 0 {
				t.Errorf("signatures that do not verify: %v", bad)
			}
		})
	}
}
