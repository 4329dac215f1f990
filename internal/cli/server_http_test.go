package cli

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/drover-run/drover/internal/testutil"
	"github.com/drover-run/drover/store"
)

const (
	e2eSubmitTok   = "e2e-submit-token-0123456789"
	e2eOperatorTok = "e2e-operator-token-0123456789"
)

// buildDroverBinary returns cmd/drover, built once for the package's tests.
func buildDroverBinary(t *testing.T) string {
	t.Helper()
	return testutil.DroverBinary(t)
}

type serverProc struct {
	cmd    *exec.Cmd
	addr   string
	ready  string // the ready line
	stderr *syncBuffer
	done   chan error
}

var listenRe = regexp.MustCompile(` listen=(\S+)`)

// startServerProc runs `drover server` and waits for its ready line.
func startServerProc(t *testing.T, bin string, env []string, args ...string) *serverProc {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"server"}, args...)...)
	cmd.Env = append(os.Environ(), "DROVER_API_TOKENS=")
	cmd.Env = append(cmd.Env, env...)
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &serverProc{cmd: cmd, stderr: &syncBuffer{}, done: make(chan error, 1)}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(p.stderr, line)
			if strings.HasPrefix(line, ReadyPrefix) {
				select {
				case ready <- line:
				default:
				}
			}
		}
	}()
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			if err := <-p.done; err == nil {
				t.Log("the killed server exited with status 0")
			}
		}
	})
	select {
	case line := <-ready:
		m := listenRe.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("ready line without listen=: %q", line)
		}
		p.addr, p.ready = m[1], line
	case err := <-p.done:
		t.Fatalf("server exited before ready: %v\n%s", err, p.stderr.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("server not ready\n%s", p.stderr.String())
	}
	return p
}

// call sends one plain HTTP request, as curl would.
// getText GETs url with the token and returns the status and body.
func getText(t *testing.T, client *http.Client, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, string(b)
}

func call(t *testing.T, client *http.Client, method, url, token, body string) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s %s: %d, body not JSON: %q", method, url, resp.StatusCode, b)
	}
	return resp.StatusCode, m
}

func TestServerHTTPEndToEnd(t *testing.T) {
	bin := buildDroverBinary(t)
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	const metricsTok = "metrics-token-e2e-0123456789"
	if err := os.WriteFile(tokens, []byte("# test tokens\n"+e2eSubmitTok+" submit\n"+e2eOperatorTok+" operator\n"+metricsTok+" metrics prometheus\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hooks := make(chan string, 10)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hooks <- r.Header.Get("Drover-Event-Type")
		w.WriteHeader(http.StatusNoContent)
	}))
	defer receiver.Close()
	p := startServerProc(t, bin, []string{"DROVER_WEBHOOK_SECRET=e2e-webhook-secret-0123456789"},
		"--db", "sqlite:"+filepath.Join(dir, "d.db"), "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--egress-allow", "127.0.0.1",
		"--tokens-file", tokens, "--demo", "--step-timeout", "5s", "--webhook-url", receiver.URL+"/hook")
	base := "http://" + p.addr
	c := &http.Client{Timeout: 10 * time.Second}

	if code, _ := call(t, c, "GET", base+"/readyz", "", ""); code != 200 {
		t.Fatalf("readyz %d", code)
	}
	if code, _ := call(t, c, "POST", base+"/v1/tasks", "", `{"workflow":"orders"}`); code != 401 {
		t.Fatalf("no token: %d", code)
	}
	code, m := call(t, c, "POST", base+"/v1/tasks", e2eSubmitTok, `{"workflow":"orders","id":"order-1","input":{"order_id":"o-1","amount":42}}`)
	if code != 201 || m["id"] != "order-1" {
		t.Fatalf("submit: %d %v", code, m)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, m = call(t, c, "GET", base+"/v1/tasks/order-1", e2eSubmitTok, "")
		if code != 200 {
			t.Fatalf("get: %d %v", code, m)
		}
		if m["state"] == "Processed" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("task not final: %v\n%s", m, p.stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, s := range m["steps"].([]any) {
		if s.(map[string]any)["state"] != "Processed" {
			t.Fatalf("step not Processed: %v", s)
		}
	}
	// The scraper's token reads /metrics: the task's counters are there.
	status, body := getText(t, c, base+"/metrics", metricsTok)
	for _, want := range []string{"\ndrover_tasks_finished_total 1\n", "\ndrover_supervisor_leader 1\n", "\ngo_goroutines ", "\nprocess_cpu_seconds_total "} {
		if status != 200 || !strings.Contains(body, want) {
			t.Fatalf("GET /metrics: %d, no %q in:\n%s", status, want, body)
		}
	}
	if code, _ := call(t, c, "GET", base+"/v1/tasks/order-1", metricsTok, ""); code != 403 {
		t.Fatalf("the metrics token read a task: %d", code)
	}
	// --metrics-listen serves the same registry without a token, with the
	// webhook dispatcher's counters once the webhook is delivered.
	select {
	case <-hooks:
	case <-time.After(30 * time.Second):
		t.Fatalf("no webhook\n%s", p.stderr.String())
	}
	m2 := regexp.MustCompile(` metrics=(\S+)`).FindStringSubmatch(p.ready)
	if m2 == nil {
		t.Fatalf("ready line without metrics=: %q", p.ready)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err := c.Get("http://" + m2[1] + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 200 && strings.Contains(string(body), "\ndrover_webhook_delivered_total 1\n") &&
			strings.Contains(string(body), "\ndrover_tasks_finished_total 1\n") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("--metrics-listen: %d\n%s", resp.StatusCode, body)
		}
	}
	if strings.Contains(p.stderr.String(), e2eSubmitTok) || strings.Contains(p.stderr.String(), e2eOperatorTok) {
		t.Fatal("a token appears in the server's log")
	}

	// SIGTERM: the server stops and exits 0.
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, p.stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("server did not exit after SIGTERM\n%s", p.stderr.String())
	}
	if _, err := net.DialTimeout("tcp", p.addr, time.Second); err == nil {
		t.Fatal("the API still accepts connections after exit")
	}
}

func TestServerHTTPTLS(t *testing.T) {
	bin := buildDroverBinary(t)
	dir := t.TempDir()
	cert, key := writeSelfSigned(t, dir)
	p := startServerProc(t, bin, []string{"DROVER_API_TOKENS=" + e2eSubmitTok + " submit;" + e2eOperatorTok + " operator"},
		"--db", "sqlite:"+filepath.Join(dir, "d.db"), "--listen", "127.0.0.1:0", "--tls-cert", cert, "--tls-key", key)
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: true}
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	req, _ := http.NewRequest("GET", "https://"+p.addr+"/v1/queues", nil)
	req.Header.Set("Authorization", "Bearer "+e2eOperatorTok)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.ProtoMajor != 2 {
		t.Fatalf("%d over %s, want 200 over HTTP/2", resp.StatusCode, resp.Proto)
	}
}

func writeSelfSigned(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	_ = os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	_ = os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	return certFile, keyFile
}

func TestServerHTTPFlags(t *testing.T) {
	dir := t.TempDir()
	db := "sqlite:" + filepath.Join(dir, "d.db")
	tokens := filepath.Join(dir, "tokens")
	_ = os.WriteFile(tokens, []byte("short submit\n"), 0o600)
	t.Setenv("DROVER_API_TOKENS", "")
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--listen", "127.0.0.1:0"}, ExitUsage, "needs API tokens"},
		{[]string{"--listen", "0.0.0.0:0", "--insecure-no-auth"}, ExitUsage, "loopback"},
		{[]string{"--tokens-file", tokens}, ExitUsage, "needs --listen"},
		{[]string{"--listen", "127.0.0.1:0", "--tokens-file", tokens}, ExitFailure, "line 1"},
		{[]string{"--listen", "127.0.0.1:0", "--tokens-file", filepath.Join(dir, "none")}, ExitFailure, "--tokens-file"},
		{[]string{"--listen", "127.0.0.1:0", "--insecure-no-auth", "--tls-cert", "x"}, ExitUsage, "go together"},
		{[]string{"--listen", "127.0.0.1:0", "--insecure-no-auth", "--max-body-bytes", "0"}, ExitUsage, "--max-body-bytes"},
		{[]string{"--listen", "127.0.0.1:99999", "--insecure-no-auth"}, ExitFailure, "--listen"},
		{[]string{"--max-streams", "5"}, ExitUsage, "--max-streams needs --listen"},
		{[]string{"--listen", "127.0.0.1:0", "--insecure-no-auth", "--max-streams", "0"}, ExitUsage, "--max-streams must be positive"},
		{[]string{"--listen", "127.0.0.1:0", "--insecure-no-auth", "--max-streams-per-token", "0"}, ExitUsage, "--max-streams-per-token must be positive"},
		{[]string{"--listen", "127.0.0.1:0", "--insecure-no-auth", "--max-waiting", "-1"}, ExitUsage, "--max-waiting must be positive"},
		{[]string{"--listen", "127.0.0.1:0", "--insecure-no-auth", "--max-waiting-per-token", "0"}, ExitUsage, "--max-waiting-per-token must be positive"},
		{[]string{"--max-waiting", "5"}, ExitUsage, "--max-waiting needs --listen"},
		{[]string{"--max-waiting-per-namespace", "5"}, ExitUsage, "--max-waiting-per-namespace needs --listen"},
		{[]string{"--max-in-flight-per-token", "5"}, ExitUsage, "--max-in-flight-per-token needs --listen"},
		{[]string{"--listen", "127.0.0.1:0", "--insecure-no-auth", "--max-in-flight-per-token", "-1"}, ExitUsage, "--max-in-flight-per-token must not be negative"},
		{[]string{"--max-in-flight-per-namespace", "5"}, ExitUsage, "--max-in-flight-per-namespace needs --listen"},
		{[]string{"--listen", "127.0.0.1:0", "--insecure-no-auth", "--max-in-flight-per-namespace", "-1"}, ExitUsage, "--max-in-flight-per-namespace must not be negative"},
		{[]string{"--listen", "127.0.0.1:0", "--insecure-no-auth", "--max-streams-per-namespace", "-1"}, ExitUsage, "--max-streams-per-namespace must not be negative"},
		{[]string{"--listen", "127.0.0.1:0", "--insecure-no-auth", "--queue-create", "admin"}, ExitUsage, `--queue-create "admin": want submit or operator`},
		{[]string{"--queue-create", "operator"}, ExitUsage, "--queue-create needs --listen"},
		{[]string{"--listen", "127.0.0.1:0", "--insecure-no-auth", "--stream-heartbeat", "1ms"}, ExitUsage, "--stream-heartbeat must be at least"},
		{[]string{"--agent-redelivery-delay", "2s"}, ExitUsage, "--agent-redelivery-delay needs --listen"},
		{[]string{"--listen", "127.0.0.1:0", "--insecure-no-auth", "--agent-redelivery-delay", "25h"}, ExitUsage, "--agent-redelivery-delay 25h0m0s is above 24h0m0s"},
		// Above the default max without --agent-redelivery-max-delay: accepted (the bad port fails later).
		{[]string{"--listen", "127.0.0.1:99999", "--insecure-no-auth", "--agent-redelivery-delay", "1m"}, ExitFailure, "--listen"},
		{[]string{"--listen", "127.0.0.1:0", "--insecure-no-auth", "--agent-redelivery-delay", "1m", "--agent-redelivery-max-delay", "30s"}, ExitUsage,
			"redelivery max delay 30s is below the first delay 1m0s"},
		{[]string{"--listen", "127.0.0.1:0", "--insecure-no-auth", "--agent-redelivery-delay", "-1s"}, ExitUsage, "redelivery delay -1s is negative"},
		{[]string{"--listen", "127.0.0.1:0", "--insecure-no-auth", "--agent-redelivery-delay", "2s", "--agent-redelivery-max-delay", "1s"}, ExitUsage,
			"redelivery max delay 1s is below the first delay 2s"},
	} {
		r := run(t, "", append([]string{"--db", db, "server"}, c.args...)...)
		if r.code != c.code || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d containing %q", c.args, r.code, r.stderr, c.code, c.want)
		}
		if strings.Contains(r.stderr, "short") {
			t.Errorf("%v: the token appears in the error: %s", c.args, r.stderr)
		}
	}
}

// TestServerHTTPInProcess runs the server through Main with
// --insecure-no-auth on loopback and cancels it like a signal would.
func TestServerHTTPInProcess(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	errb := &syncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- MainIO(ctx, []string{"--db", "sqlite:" + filepath.Join(dir, "d.db"), "server", "--listen", "127.0.0.1:0", "--insecure-no-auth"},
			strings.NewReader(""), io.Discard, errb)
	}()
	var addr string
	deadline := time.Now().Add(30 * time.Second)
	for addr == "" {
		if m := listenRe.FindStringSubmatch(errb.String()); m != nil {
			addr = m[1]
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready: %s", errb.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	c := &http.Client{Timeout: 10 * time.Second}
	code, m := call(t, c, "POST", "http://"+addr+"/v1/queues/q/messages", "", `{"session_id":"s","body":{"k":"v"}}`)
	if code != 201 {
		t.Fatalf("publish without auth: %d %v", code, m)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errb.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no exit after cancel")
	}
}

// --agent-redelivery-delay 0 means at once, which httpapi.Options spells
// with a negative First (its zero value is the default).
func TestAPIRedelivery(t *testing.T) {
	for _, c := range []struct{ in, want store.Redelivery }{
		{store.Redelivery{First: 0, Max: 30 * time.Second}, store.Redelivery{First: -1}},
		{store.Redelivery{First: time.Second, Max: 30 * time.Second}, store.Redelivery{First: time.Second, Max: 30 * time.Second}},
	} {
		f := httpFlags{redelivery: c.in}
		if got := f.apiRedelivery(); got != c.want {
			t.Errorf("apiRedelivery(%+v) = %+v, want %+v", c.in, got, c.want)
		}
	}
}
