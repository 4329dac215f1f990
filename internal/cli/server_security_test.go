package cli

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// startMain runs `drover ARGS` (a server) in this process until the test
// ends and returns the API's address and its stderr.
func startMain(t *testing.T, args ...string) (string, *syncBuffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errb := &syncBuffer{}
	done := make(chan int, 1)
	go func() { done <- MainIO(ctx, args, strings.NewReader(""), io.Discard, errb) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("the server did not stop within 30s")
		}
	})
	var addr string
	waitFor(t, "the server's ready line", func() bool {
		if m := listenRe.FindStringSubmatch(errb.String()); m != nil {
			addr = m[1]
			return true
		}
		select {
		case code := <-done:
			done <- code
			t.Fatalf("the server exited with %d: %s", code, errb.String())
		default:
		}
		return false
	})
	return addr, errb
}

// writeFile writes a file of the test with mode perm (exactly, whatever
// the umask).
func writeFile(t *testing.T, path, content string, perm os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), perm); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, perm); err != nil {
		t.Fatal(err)
	}
}

// An agent token bound to payments polls payments only: not the built-in
// http agent (whose requests wait in the store on a server without the
// agent role), nor an agent no workflow declares remote; the plain agent
// scope and operator tokens never get the http agent's requests either.
func TestServerAgentTokenBinding(t *testing.T) {
	const (
		payTok = "payments-token-0123456789"
		anyTok = "any-agent-token-0123456789"
	)
	dir := t.TempDir()
	wf := filepath.Join(dir, "workflows")
	if err := os.Mkdir(wf, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(wf, "pay.yaml"), "name: pay\nsteps:\n  - {name: charge, agent: payments}\n", 0o644)
	writeFile(t, filepath.Join(wf, "fetch.yaml"), "name: fetch\nsteps:\n  - {name: get, http: {method: GET, url: \"http://127.0.0.1:1/card\"}}\n", 0o644)
	tokens := filepath.Join(dir, "tokens")
	writeFile(t, tokens, e2eSubmitTok+" submit\n"+e2eOperatorTok+" operator\n"+payTok+" agent:payments\n"+anyTok+" agent old-agent\n", 0o600)
	addr, errb := startMain(t, "--db", "sqlite:"+filepath.Join(dir, "d.db"), "server", "--roles", "scheduler,supervisor",
		"--listen", "127.0.0.1:0", "--tokens-file", tokens, "--workflows", wf, "--egress-allow", "127.0.0.1")
	base := "http://" + addr
	c := &http.Client{Timeout: 10 * time.Second}

	if code, m := call(t, c, "POST", base+"/v1/tasks", e2eSubmitTok, `{"workflow":"fetch","id":"f-1"}`); code != 201 {
		t.Fatalf("submit: %d %v", code, m)
	}
	if code, m := call(t, c, "POST", base+"/v1/tasks", e2eSubmitTok, `{"workflow":"pay","id":"p-1"}`); code != 201 {
		t.Fatalf("submit: %d %v", code, m)
	}
	for _, p := range []struct {
		token, agent string
		status       int
	}{
		{payTok, "http", 403},
		{payTok, "refunds", 403},
		{anyTok, "http", 404},
		{anyTok, "refunds", 404},
		{e2eOperatorTok, "http", 404},
	} {
		code, m := call(t, c, "POST", base+"/v1/agents/"+p.agent+"/poll", p.token, `{"wait_ms":500}`)
		if code != p.status {
			t.Errorf("poll %s with the %s token: %d %v, want %d", p.agent, p.token[:3], code, m, p.status)
		}
	}
	code, m := call(t, c, "POST", base+"/v1/agents/payments/poll", payTok, `{"wait_ms":20000}`)
	if reqs, _ := m["requests"].([]any); code != 200 || len(reqs) != 1 {
		t.Fatalf("poll payments: %d %v", code, m)
	}
	// The http step's request still waits for a server with the agent role.
	if code, m := call(t, c, "GET", base+"/v1/tasks/f-1", e2eSubmitTok, ""); code != 200 || m["state"] != "Processing" {
		t.Fatalf("task f-1: %d %v", code, m)
	}
	if !strings.Contains(errb.String(), "a token has the plain agent scope") || !strings.Contains(errb.String(), "token=old-agent") {
		t.Errorf("no warning about the unbound agent token:\n%s", errb.String())
	}
}

// A server without auth answers only requests for a loopback Host from its
// own origin, and every write needs a JSON Content-Type.
func TestServerNoAuthBrowserDefences(t *testing.T) {
	dir := t.TempDir()
	addr, _ := startMain(t, "--db", "sqlite:"+filepath.Join(dir, "d.db"), "server", "--listen", "127.0.0.1:0", "--insecure-no-auth")
	c := &http.Client{Timeout: 10 * time.Second}
	send := func(host, origin, contentType string) int {
		req, _ := http.NewRequest("POST", "http://"+addr+"/v1/queues/q/messages", strings.NewReader(`{"session_id":"s","body":1}`))
		if host != "" {
			req.Host = host
		}
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	_, port, _ := strings.Cut(addr, ":")
	for _, c := range []struct {
		host, origin, ct string
		want             int
	}{
		{"rebound.example:" + port, "", "application/json", 403},
		{"", "http://evil.example", "application/json", 403},
		{"", "", "text/plain", 415},
		{"", "", "", 415},
		{"localhost:" + port, "http://localhost:" + port, "application/json", 201},
		{"", "http://" + addr, "application/json", 201},
	} {
		if got := send(c.host, c.origin, c.ct); got != c.want {
			t.Errorf("Host %q Origin %q Content-Type %q: %d, want %d", c.host, c.origin, c.ct, got, c.want)
		}
	}
}

// A tokens file or webhook secret file that group or others may read
// stops the start with how to fix it; --allow-insecure-permissions starts
// anyway, with a warning.
func TestServerSecretFilePermissions(t *testing.T) {
	dir := t.TempDir()
	db := "sqlite:" + filepath.Join(dir, "d.db")
	tokens := filepath.Join(dir, "tokens")
	writeFile(t, tokens, e2eSubmitTok+" submit\n", 0o644)
	secret := filepath.Join(dir, "secret")
	writeFile(t, secret, "0123456789abcdef-secret\n", 0o640)
	t.Setenv("DROVER_API_TOKENS", "")
	t.Setenv(EnvWebhookSecret, "")
	for _, c := range []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"--listen", "127.0.0.1:0", "--tokens-file", tokens}, ExitFailure,
			[]string{"--tokens-file " + tokens + " is open to group or others (mode 0644)", "chmod 600 " + tokens, "--allow-insecure-permissions"}},
		{[]string{"--webhook-secret-file", secret}, ExitFailure,
			[]string{"--webhook-secret-file " + secret + " is open to group or others (mode 0640)", "chmod 600 " + secret}},
		// Accepted: the start goes on to fail later, on the port.
		{[]string{"--listen", "127.0.0.1:99999", "--tokens-file", tokens, "--webhook-secret-file", secret, "--allow-insecure-permissions"}, ExitFailure,
			[]string{"WARNING: --tokens-file " + tokens + " is open", "WARNING: --webhook-secret-file " + secret + " is open", "--listen 127.0.0.1:99999"}},
	} {
		r := run(t, "", append([]string{"--db", db, "server"}, c.args...)...)
		for _, w := range c.want {
			if r.code != c.code || !strings.Contains(r.stderr, w) {
				t.Errorf("%v: exit %d, stderr %q; want exit %d containing %q", c.args, r.code, r.stderr, c.code, w)
			}
		}
		if strings.Contains(r.stderr, e2eSubmitTok) || strings.Contains(r.stderr, "abcdef-secret") {
			t.Errorf("%v: a secret appears in the output: %s", c.args, r.stderr)
		}
	}
	// chmod 600: the start goes on.
	for _, p := range []string{tokens, secret} {
		if err := os.Chmod(p, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	r := run(t, "", "--db", db, "server", "--listen", "127.0.0.1:99999", "--tokens-file", tokens, "--webhook-secret-file", secret)
	if r.code != ExitFailure || !strings.Contains(r.stderr, "--listen 127.0.0.1:99999") || strings.Contains(r.stderr, "WARNING") {
		t.Errorf("mode 0600: exit %d, stderr %q", r.code, r.stderr)
	}
}

// The API's TLS offers TLS 1.2 with AEAD suites only (and 1.3): a client
// offering only CBC suites gets no connection.
func TestServerTLSCipherSuites(t *testing.T) {
	dir := t.TempDir()
	cert, key := writeSelfSigned(t, dir)
	t.Setenv("DROVER_API_TOKENS", e2eSubmitTok+" submit")
	addr, _ := startMain(t, "--db", "sqlite:"+filepath.Join(dir, "d.db"), "server", "--listen", "127.0.0.1:0", "--tls-cert", cert, "--tls-key", key)
	dial := func(cfg *tls.Config) error {
		cfg.InsecureSkipVerify = true
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, cfg)
		if err == nil {
			conn.Close()
		}
		return err
	}
	cbc := []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA, tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256,
		tls.TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA, tls.TLS_RSA_WITH_AES_128_CBC_SHA, tls.TLS_RSA_WITH_AES_256_CBC_SHA}
	if err := dial(&tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: cbc}); err == nil {
		t.Fatal("a TLS 1.2 client offering only CBC suites connected")
	}
	if err := dial(&tls.Config{MaxVersion: tls.VersionTLS11}); err == nil {
		t.Fatal("a TLS 1.1 client connected")
	}
	for _, suite := range []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256} {
		if err := dial(&tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{suite}}); err != nil {
			t.Errorf("TLS 1.2 with %s: %v", tls.CipherSuiteName(suite), err)
		}
	}
	if err := dial(&tls.Config{MinVersion: tls.VersionTLS13}); err != nil {
		t.Errorf("TLS 1.3: %v", err)
	}
}

// --queue-create operator: a submit token publishes to existing queues
// only.
func TestServerQueueCreateOperator(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	writeFile(t, tokens, e2eSubmitTok+" submit\n"+e2eOperatorTok+" operator\n", 0o600)
	addr, _ := startMain(t, "--db", "sqlite:"+filepath.Join(dir, "d.db"), "server", "--listen", "127.0.0.1:0", "--tokens-file", tokens, "--queue-create", "operator")
	base := "http://" + addr
	c := &http.Client{Timeout: 10 * time.Second}
	if code, m := call(t, c, "POST", base+"/v1/queues/orders/messages", e2eSubmitTok, `{"session_id":"s","body":1}`); code != 403 {
		t.Fatalf("submit token creating a queue: %d %v", code, m)
	}
	if code, m := call(t, c, "PUT", base+"/v1/queues/orders/policy", e2eOperatorTok, `{"max_delivery_count":5}`); code != 201 {
		t.Fatalf("operator creating the queue: %d %v", code, m)
	}
	if code, m := call(t, c, "POST", base+"/v1/queues/orders/messages", e2eSubmitTok, `{"session_id":"s","body":1}`); code != 201 {
		t.Fatalf("submit token publishing to it: %d %v", code, m)
	}
}
