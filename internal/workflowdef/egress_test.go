package workflowdef

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/internal/egress"
	"github.com/drover-run/drover/internal/egress/egresstest"
	"github.com/drover-run/drover/internal/httpagent"
	"github.com/drover-run/drover/internal/testutil"
	"github.com/drover-run/drover/store"
)

// TestParseURLHostsAndEgress: a URL whose host or port comes from data
// needs egress.allow, a literal host must be in it, and its rules and
// paths are checked, each problem with its line and field.
func TestParseURLHostsAndEgress(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, src string
		want      []string
	}{
		{"whole URL from data", oneStep("    http: {method: POST, url: \"${input.callback}\"}\n"), []string{
			`w.yaml:4: steps[0].http.url: "${input.callback}": the whole URL comes from the task's data, so the workflow must list the hosts it may reach: add egress: {allow: [HOST, ...]} (see docs/workflows.md)`,
		}},
		{"port from data", oneStep("    http: {method: GET, url: \"http://api.invalid:${input.port}/v1/items\"}\n"), []string{
			`w.yaml:4: steps[0].http.url: "http://api.invalid:${input.port}/v1/items": the host comes from the task's data, so the workflow must list the hosts it may reach: add egress: {allow: [HOST, ...]} (see docs/workflows.md)`,
		}},
		{"host from data, in a compensation", oneStep("    agent: a\n    compensate: {http: {method: DELETE, url: \"https://${input.tenant}.example.com/x\"}}\n"), []string{
			`w.yaml:5: steps[0].compensate.http.url: "https://${input.tenant}.example.com/x": the host comes from the task's data, so the workflow must list the hosts it may reach: add egress: {allow: [HOST, ...]} (see docs/workflows.md)`,
		}},
		{"literal host not listed", "name: w\negress: {allow: [a.example, \"10.0.0.0/8\"]}\nsteps:\n  - name: s\n    http: {method: GET, url: \"http://b.example/${input.id}\"}\n", []string{
			`w.yaml:5: steps[0].http.url: egress denied: b.example:80: not in egress.allow (a.example, 10.0.0.0/8)`,
		}},
		{"literal address not listed", "name: w\negress: {allow: [a.example]}\nsteps:\n  - name: s\n    http: {method: GET, url: \"http://127.0.0.1:9001/x\"}\n", []string{
			`w.yaml:5: steps[0].http.url: egress denied: 127.0.0.1:9001: not in egress.allow (a.example)`,
		}},
		{"non-standard address", "name: w\negress: {allow: [a.example]}\nsteps:\n  - name: s\n    http: {method: GET, url: \"http://2130706433/x\"}\n", []string{
			`w.yaml:5: steps[0].http.url: egress denied: 2130706433:80: not a standard IP address (decimal, octal and hexadecimal forms are refused; write IPv4 addresses like 192.0.2.1)`,
		}},
		{"bad rules", "name: w\negress:\n  allow:\n    - \"10.0.0.1/8\"\n    - http://x.example/\n    - [a]\nsteps: [{name: s, agent: a}]\n", []string{
			`w.yaml:4: egress.allow[0]: egress rule "10.0.0.1/8": bits are set after the prefix length; did you mean 10.0.0.0/8?`,
			`w.yaml:5: egress.allow[1]: egress rule "http://x.example/": a rule names a host, not a URL; want a host name, *.domain, an IP address or a CIDR prefix, optionally with :PORT (a CIDR without)`,
			`w.yaml:6: egress.allow[2]: want a string, got a list`,
		}},
		{"empty list", "name: w\negress: {allow: []}\nsteps: [{name: s, agent: a}]\n", []string{
			`w.yaml:2: egress.allow: the list is empty: name at least one host`,
		}},
		{"no allow", "name: w\negress: {alow: [a]}\nsteps: [{name: s, agent: a}]\n", []string{
			`w.yaml:2: egress.alow: unknown key (did you mean "allow"?)`,
			`w.yaml:2: egress.allow: required: the hosts the workflow's HTTP steps may reach, such as [api.example.com, "10.0.0.0/8"]`,
		}},
		{"dot segments", oneStep("    http: {method: GET, url: \"http://h.example/a/../admin/${input.id}\"}\n"), []string{
			`w.yaml:4: steps[0].http.url: "http://h.example/a/../admin/${input.id}": the path has "." or ".." segments`,
		}},
		{"encoded dot segments", oneStep("    http: {method: GET, url: \"http://h.example/a/%2e%2e/${input.id}\"}\n"), []string{
			`w.yaml:4: steps[0].http.url: "http://h.example/a/%2e%2e/${input.id}": the path has "." or ".." segments`,
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("w.yaml", []byte(c.src))
			checkProblems(t, err, c.want)
		})
	}
}

// egressEnv renders the URL of a one-step workflow with input.
func renderURL(t *testing.T, src, input string) (string, error) {
	t.Helper()
	d, err := Parse("w.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	r, err := d.Steps[0].Do.HTTP.request(&evalEnv{taskID: "t-1", stepName: "s", input: []byte(input)})
	if err != nil {
		return "", err
	}
	return r.URL, nil
}

// TestURLValuesCannotChangeHostOrPath: values are escaped so that they
// stay inside their path segment: "@", ":", "/", "?", "#" and "%" are
// encoded, "." and ".." are refused.
func TestURLValuesCannotChangeHostOrPath(t *testing.T) {
	t.Parallel()
	const src = "name: w\nsteps: [{name: s, http: {method: GET, url: \"http://api.example/users/${input.id}/profile?q=${input.q}\"}}]\n"
	for input, want := range map[string]string{
		`{"id":"ann","q":"x"}`:                     "http://api.example/users/ann/profile?q=x",
		`{"id":"a@127.0.0.1:19999","q":"x"}`:       "http://api.example/users/a%40127.0.0.1%3A19999/profile?q=x",
		`{"id":"%2e%2e","q":"x"}`:                  "http://api.example/users/%252e%252e/profile?q=x",
		`{"id":"Ann Lee/3;x=1,y+z~_.-","q":"a&b"}`: "http://api.example/users/Ann%20Lee%2F3%3Bx%3D1%2Cy%2Bz~_.-/profile?q=a%26b",
		`{"id":"...","q":".."}`:                    "http://api.example/users/.../profile?q=..",
	} {
		got, err := renderURL(t, src, input)
		if err != nil || got != want {
			t.Errorf("input %s: URL = %q, %v; want %q", input, got, err, want)
		}
	}
	// Escaped, "../../admin" is one segment; but a receiver that decodes
	// %2F before routing would see dot segments: refused too.
	for _, id := range []string{"../../admin?x=1#f", "a/../b", "./x"} {
		_, err := renderURL(t, src, `{"id":"`+id+`","q":"x"}`)
		if err == nil || !strings.Contains(err.Error(), `task t-1: ${input.id}: the rendered URL's path has a "." or ".." segment (as sent, or percent-decoded)`) {
			t.Errorf("id %q: err = %v, want dot segments refused", id, err)
		}
	}
	for _, v := range []string{".", ".."} {
		_, err := renderURL(t, src, `{"id":"`+v+`","q":"x"}`)
		var ee *evalError
		want := fmt.Sprintf(`task t-1: ${input.id}: the value %q would be a %q segment of the URL's path`, v, v)
		if !errors.As(err, &ee) || err.Error() != want || !drover.IsPermanent(permanentEval(err)) {
			t.Errorf("id %q: err = %v, want the permanent %q", v, err, want)
		}
	}
}

// TestPortInjectionIsRefused is the template: with the hosts
// declared, a port value carrying "@host:port" cannot move the call.
func TestPortInjectionIsRefused(t *testing.T) {
	t.Parallel()
	const src = "name: w\negress: {allow: [api.invalid]}\nsteps: [{name: s, http: {method: GET, url: \"http://api.invalid:${input.port}/v1/items\"}}]\n"
	got, err := renderURL(t, src, `{"port":"8080"}`)
	if err != nil || got != "http://api.invalid:8080/v1/items" {
		t.Fatalf("URL = %q, %v", got, err)
	}
	for _, port := range []string{"80@127.0.0.1:19999", "80/x@127.0.0.1:19999", "80#@127.0.0.1"} {
		_, err := renderURL(t, src, `{"port":"`+port+`"}`)
		var ee *evalError
		if !errors.As(err, &ee) || !strings.Contains(err.Error(), "the rendered URL does not parse") {
			t.Errorf("port %q: err = %v, want the rendered URL refused", port, err)
		}
	}
	// A subdomain from data cannot leave the domain either.
	const sub = "name: w\negress: {allow: [\"*.svc.example\"]}\nsteps: [{name: s, http: {method: GET, url: \"https://${input.t}.svc.example/x\"}}]\n"
	if _, err := renderURL(t, sub, `{"t":"evil.example/x?"}`); err == nil {
		t.Error("a tenant value with / and ? rendered a URL")
	}
}

// TestRenderedOriginMustMatchTheTemplate: the last check on a rendered URL.
func TestRenderedOriginMustMatchTheTemplate(t *testing.T) {
	t.Parallel()
	d, err := Parse("w.yaml", []byte("name: w\nsteps: [{name: s, http: {method: GET, url: \"https://api.example:8443/u/${input.id}\"}}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	h := d.Steps[0].Do.HTTP
	env := &evalEnv{taskID: "t-1"}
	if err := h.checkRendered(env, "https://API.example:8443/u/1"); err != nil {
		t.Errorf("same origin refused: %v", err)
	}
	for rendered, want := range map[string]string{
		"https://127.0.0.1:19999/u/1":       "the rendered URL calls https://127.0.0.1:19999, not https://api.example:8443 as the template says",
		"http://api.example:8443/u/1":       "calls http://api.example:8443",
		"https://api.example/u/1":           "calls https://api.example, not",
		"https://x@api.example:8443/u":      "calls https://x@api.example:8443",
		"https://api.example:8443/u/..":     `the rendered URL's path has a "." or ".." segment`,
		"https://api.example:8443/u/%2E%2e": `the rendered URL's path has a "." or ".." segment`,
	} {
		if err := h.checkRendered(env, rendered); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("checkRendered(%s) = %v, want %q", rendered, err, want)
		}
	}
}

// TestLoadDirRefusesLiteralHostsThePolicyRefuses: a workflow calling a
// loopback address fails the load unless the server or the file opens it.
func TestLoadDirRefusesLiteralHostsThePolicyRefuses(t *testing.T) {
	t.Parallel()
	file := "name: w\nsteps:\n  - name: s\n    http: {method: GET, url: \"http://127.0.0.1:9001/x\"}\n"
	for _, c := range []struct {
		name   string
		src    string
		server []string
		want   []string
	}{
		{"refused", file, nil, []string{`%s:4: steps[0].http.url: egress denied: 127.0.0.1:9001 is a loopback address, refused unless an egress allow rule opens it (such as 127.0.0.1) (drover server --egress-allow, or egress.allow in this file)`}},
		{"opened by the server", file, []string{"127.0.0.1:9001"}, nil},
		{"opened by the file", strings.Replace(file, "steps:", "egress: {allow: [\"127.0.0.1\"]}\nsteps:", 1), nil, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := writeFiles(t, map[string]string{"w.yaml": c.src})
			r, err := NewRegistry(Options{Store: testutil.SQLite(t), HTTP: httpagent.Options{Egress: egresstest.Open(t, c.server...)}})
			if err != nil {
				t.Fatal(err)
			}
			err = r.LoadDir(context.Background(), dir)
			if c.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			checkProblems(t, err, []string{fmt.Sprintf(c.want[0], filepath.Join(dir, "w.yaml"))})
		})
	}
}

// TestSSRFThroughTheHTTPAgent runs the reproduction through the
// registry and a client on each driver: a workflow whose URL is a whole
// expression, a callback to a loopback service. Nothing reaches it, the
// task ends in Error with "egress denied"; a listed host is still reached.
func TestSSRFThroughTheHTTPAgent(t *testing.T) {
	for name, open := range map[string]func(t *testing.T) store.Driver{
		"sqlite":   func(t *testing.T) store.Driver { return testutil.SQLite(t) },
		"postgres": func(t *testing.T) store.Driver { return testutil.Postgres(t) },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dns := egresstest.StartDNS(t)
			internal := egresstest.NewSink(t, "127.0.0.1:0", nil)
			partner := egresstest.NewSink(t, "127.0.0.1:0", nil)
			dns.Set("hooks.partner.test", "127.0.0.1")
			dns.Set("evil.partner.test", "127.0.0.1")
			dir := t.TempDir()
			writeFile(t, filepath.Join(dir, "cb.yaml"), `name: cb
egress: {allow: [hooks.partner.test, "*.partner.test"]}
steps:
  - name: notify
    timeout: 20s
    http: {method: GET, url: "${input.callback}"}
`)
			// The server opens nothing; hooks.partner.test is opened by the
			// file's exact-name rule.
			f := startWith(t, open(t), dir, true, egress.New(egress.Options{Resolver: dns.Resolver()}))
			ctx := context.Background()
			p := internal.Port()
			cases := map[string]struct{ callback, want string }{
				"issue":    {"http://127.0.0.1:" + p + "/latest/meta-data/iam/security-credentials/role", `egress denied: 127.0.0.1:` + p + `: not in workflow "cb"'s egress.allow (hooks.partner.test, *.partner.test)`},
				"mapped":   {"http://[::ffff:127.0.0.1]:" + p + "/", "not in workflow"},
				"decimal":  {"http://2130706433:" + p + "/", "not a standard IP address"},
				"octal":    {"http://0177.0.0.1:" + p + "/", "not a standard IP address"},
				"other":    {"https://evil.example/", `egress denied: evil.example:443: not in workflow`},
				"wildcard": {"http://evil.partner.test:" + p + "/", "evil.partner.test:" + p + " resolves to 127.0.0.1, a loopback address"},
				"userinfo": {"http://hooks.partner.test@127.0.0.1:" + p + "/", "egress denied: 127.0.0.1:" + p + ": not in workflow"},
			}
			for id, c := range cases {
				if _, err := f.client.Submit(ctx, "cb", []byte(fmt.Sprintf(`{"callback":%q}`, c.callback)), &drover.SubmitOptions{ID: id}); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := f.client.Submit(ctx, "cb", []byte(fmt.Sprintf(`{"callback":"http://hooks.partner.test:%s/done"}`, partner.Port())), &drover.SubmitOptions{ID: "listed"}); err != nil {
				t.Fatal(err)
			}
			for id, c := range cases {
				task := waitFinal(t, f.client, id)
				if task.ProcessState != drover.Error || !strings.HasPrefix(task.LastError, "egress denied: ") || !strings.Contains(task.LastError, c.want) {
					t.Errorf("%s (%s) ended %s with %q; want Error with %q", id, c.callback, task.ProcessState, task.LastError, c.want)
				}
				if string(task.Output) != "" && string(task.Output) != "null" {
					t.Errorf("%s has output %s", id, task.Output)
				}
			}
			if n := internal.Conns(); n != 0 {
				t.Errorf("%d connection(s) reached the internal service", n)
			}
			if task := waitFinal(t, f.client, "listed"); task.ProcessState != drover.Processed || string(task.Output) != `"reached"` || partner.Requests() != 1 {
				t.Errorf("listed host: task %s output %s (%q), %d requests; want Processed, reached once", task.ProcessState, task.Output, task.LastError, partner.Requests())
			}
		})
	}
}
