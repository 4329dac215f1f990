package cli

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestServerNamespaces runs a real server with a tokens file of two
// namespaces and the namespace flags: the same task ID in each names two
// tasks, and each token reads and lists its own; a token beyond
// --max-in-flight-per-token, and a namespace beyond
// --max-in-flight-per-namespace, get 429 quota_exceeded; team-a's metrics
// token scrapes team-a's series only.
func TestServerNamespaces(t *testing.T) {
	bin := buildDroverBinary(t)
	dir := t.TempDir()
	const aTok, bTok = "ns-e2e-team-a-token-0123456789", "ns-e2e-team-b-token-0123456789"
	const aMetricsTok, a2Tok = "ns-e2e-team-a-metrics-0123456789", "ns-e2e-team-a-second-0123456789"
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte(aTok+" submit,ns:team-a ci-a\n"+bTok+" submit,ns:team-b ci-b\n"+aMetricsTok+" metrics,ns:team-a prom-a\n"+a2Tok+" submit,ns:team-a ci-a2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	wf := filepath.Join(dir, "wf")
	if err := os.MkdirAll(wf, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(wf, "w.yaml"), []byte("name: w\nsteps: [{name: s, agent: far, timeout: 30s}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startServerProc(t, bin, nil, "--db", "sqlite:"+filepath.Join(dir, "d.db"), "--listen", "127.0.0.1:0",
		"--tokens-file", tokens, "--workflows", wf, "--namespace-max-in-flight", "10", "--http-max-per-namespace", "4",
		"--max-waiting-per-namespace", "8", "--max-streams-per-namespace", "8", "--max-in-flight-per-token", "2", "--max-in-flight-per-namespace", "3")
	base := "http://" + p.addr
	c := &http.Client{Timeout: 10 * time.Second}
	for tok, in := range map[string]string{aTok: `"a"`, bTok: `"b"`} {
		if code, m := call(t, c, "POST", base+"/v1/tasks", tok, `{"workflow":"w","id":"same","input":`+in+`}`); code != 201 || m["id"] != "same" {
			t.Fatalf("submit: %d %v", code, m)
		}
	}
	for tok, in := range map[string]string{aTok: "a", bTok: "b"} {
		if code, m := call(t, c, "GET", base+"/v1/tasks/same", tok, ""); code != 200 || m["input"] != in {
			t.Fatalf("get: %d %v, want input %q", code, m, in)
		}
		if code, m := call(t, c, "GET", base+"/v1/tasks", tok, ""); code != 200 || len(m["tasks"].([]any)) != 1 {
			t.Fatalf("list: %d %v", code, m)
		}
	}
	if code, m := call(t, c, "POST", base+"/v1/tasks", aTok, `{"workflow":"w","id":"second"}`); code != 201 {
		t.Fatalf("a's second task: %d %v", code, m)
	}
	code, m := call(t, c, "POST", base+"/v1/tasks", aTok, `{"workflow":"w","id":"third"}`)
	if e, _ := m["error"].(map[string]any); code != 429 || e["code"] != "quota_exceeded" {
		t.Fatalf("a's third task: %d %v, want 429 quota_exceeded", code, m)
	}
	if code, m := call(t, c, "POST", base+"/v1/tasks", bTok, `{"workflow":"w","id":"second"}`); code != 201 {
		t.Fatalf("b's second task: %d %v", code, m)
	}
	if code, m := call(t, c, "POST", base+"/v1/tasks", a2Tok, `{"workflow":"w","id":"third"}`); code != 201 {
		t.Fatalf("a's third task, from its second token: %d %v", code, m)
	}
	code, m = call(t, c, "POST", base+"/v1/tasks", a2Tok, `{"workflow":"w","id":"fourth"}`)
	if e, _ := m["error"].(map[string]any); code != 429 || e["code"] != "quota_exceeded" || !strings.Contains(fmt.Sprint(e["message"]), `namespace "team-a"`) {
		t.Fatalf("a's fourth task: %d %v, want 429 quota_exceeded for the namespace", code, m)
	}
	// The schedulers hold team-a's three tasks: its scrape shows that, and
	// nothing of team-b's or of the server's own series.
	var body string
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(body, `drover_namespace_tasks_held{namespace="team-a"} 3`); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("team-a's scrape:\n%s", body)
		}
		var status int
		if status, body = getText(t, c, base+"/metrics", aMetricsTok); status != 200 {
			t.Fatalf("GET /metrics: %d %s", status, body)
		}
	}
	for _, not := range []string{"team-b", "go_goroutines", "drover_tasks_active "} {
		if strings.Contains(body, not) {
			t.Errorf("team-a's scrape shows %q:\n%s", not, body)
		}
	}

}
