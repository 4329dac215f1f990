package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/drover-run/drover/internal/clicore"
)

// The container files at the repository's root, from this package.
const (
	dockerfilePath = "../../Dockerfile"
	composePath    = "../../deploy/compose.yaml"
)

// parseDroverArgs runs the binary's own flag parser over a command line
// of the image (without "drover"): the command must exist and its flags
// must be known and parse.
func parseDroverArgs(t *testing.T, args []string) *cobra.Command {
	t.Helper()
	e := &env{Env: &clicore.Env{Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: io.Discard, Getenv: func(string) string { return "" }}}
	root := e.rootCmd()
	cmd, rest, err := root.Find(args)
	if err != nil || cmd == root {
		t.Fatalf("drover %q: no such command (%v)", args, err)
	}
	if err := cmd.ParseFlags(rest); err != nil {
		t.Fatalf("drover %q: %v", args, err)
	}
	if cmd.Args != nil {
		if err := cmd.Args(cmd, cmd.Flags().Args()); err != nil {
			t.Fatalf("drover %q: %v", args, err)
		}
	}
	return cmd
}

type composeFile struct {
	Name     string
	Services map[string]struct {
		Image       string
		Build       map[string]string
		Command     []string
		Environment map[string]string
		Ports       []string
		DependsOn   map[string]map[string]string `yaml:"depends_on"`
		Healthcheck map[string]any
		Volumes     []string
	}
	Volumes map[string]any
}

// TestComposeFile checks deploy/compose.yaml: PostgreSQL, two drover
// servers whose --roles split the three roles between them, flags and
// variables the binary accepts, the console published.
func TestComposeFile(t *testing.T) {
	c := readCompose(t)
	pg, ok := c.Services["postgres"]
	if !ok || !strings.HasPrefix(pg.Image, "postgres:") || pg.Healthcheck == nil {
		t.Errorf("no postgres service with a health check: %+v", pg)
	}
	var servers []string
	roles := map[string]bool{}
	published := false
	for name, s := range c.Services {
		if len(s.Command) == 0 || s.Command[0] != "server" {
			continue
		}
		servers = append(servers, name)
		if s.Build["dockerfile"] != "Dockerfile" || s.Build["context"] != ".." {
			t.Errorf("service %s is not built from the repository's Dockerfile: %v", name, s.Build)
		}
		if s.DependsOn["postgres"]["condition"] != "service_healthy" {
			t.Errorf("service %s does not wait for a healthy postgres", name)
		}
		cmd := parseDroverArgs(t, s.Command)
		r, err := parseRoles(cmd.Flag("roles").Value.String())
		if err != nil || !cmd.Flags().Changed("roles") {
			t.Errorf("service %s: --roles %v", name, err)
		}
		for role, on := range map[string]bool{"scheduler": r.Scheduler, "agent": r.Agent, "supervisor": r.Supervisor} {
			if on && roles[role] {
				t.Errorf("role %s runs in two services", role)
			}
			roles[role] = roles[role] || on
		}
		// The image's health check reaches /healthz on port 8080.
		if l := cmd.Flag("listen").Value.String(); !strings.HasSuffix(l, ":8080") {
			t.Errorf("service %s listens on %q, not the health check's port 8080", name, l)
		}
		if slices.Contains(s.Ports, "127.0.0.1:8080:8080") {
			published = true
		}
		for k := range s.Environment {
			if !knownVariable(cmd, k) {
				t.Errorf("service %s: %s is no variable drover reads", name, k)
			}
		}
		if u := s.Environment[EnvDatabaseURL]; !strings.HasPrefix(u, "postgres://") || !strings.Contains(u, "@postgres:5432/") {
			t.Errorf("service %s: %s = %q, not the postgres service", name, EnvDatabaseURL, u)
		}
	}
	if len(servers) != 2 || len(roles) != 3 || !roles["scheduler"] || !roles["agent"] || !roles["supervisor"] {
		t.Errorf("drover servers %v with roles %v: want two that split scheduler, agent and supervisor", servers, roles)
	}
	if !published {
		t.Error("no service publishes the API and console on 127.0.0.1:8080")
	}
}

// TestComposeMonitoring checks the monitoring of deploy/compose.yaml:
// Prometheus scrapes the --metrics-listen port of every drover server,
// and Grafana is provisioned with that Prometheus and the dashboard of
// deploy/grafana (whose queries server's tests check against a running
// server).
func TestComposeMonitoring(t *testing.T) {
	c := readCompose(t)
	deployDir := filepath.Dir(composePath)
	// mounts maps a service's container paths to their files on the host.
	mounts := func(service string) map[string]string {
		m := map[string]string{}
		for _, v := range c.Services[service].Volumes {
			parts := strings.Split(v, ":")
			if len(parts) >= 2 && strings.HasPrefix(parts[0], "./") {
				host := filepath.Join(deployDir, parts[0])
				if _, err := os.Stat(host); err != nil {
					t.Errorf("service %s mounts %s: %v", service, parts[0], err)
				}
				m[parts[1]] = host
			}
		}
		return m
	}
	var want []string
	for name, s := range c.Services {
		if len(s.Command) == 0 || s.Command[0] != "server" {
			continue
		}
		addr := parseDroverArgs(t, s.Command).Flag("metrics-listen").Value.String()
		_, port, err := net.SplitHostPort(addr)
		if err != nil {
			t.Errorf("service %s: --metrics-listen %q: %v", name, addr, err)
			continue
		}
		want = append(want, name+":"+port)
	}

	prom, ok := c.Services["prometheus"]
	if !ok || !strings.HasPrefix(prom.Image, "prom/prometheus:") {
		t.Fatalf("no prometheus service: %+v", prom)
	}
	cfgPath, ok := mounts("prometheus")["/etc/prometheus/prometheus.yml"]
	if !ok {
		t.Fatal("the prometheus service mounts no /etc/prometheus/prometheus.yml")
	}
	var promCfg struct {
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			StaticConfigs []struct {
				Targets []string
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	if err := readYAML(cfgPath, &promCfg); err != nil {
		t.Fatal(err)
	}
	var targets []string
	for _, sc := range promCfg.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			targets = append(targets, st.Targets...)
		}
	}
	slices.Sort(want)
	slices.Sort(targets)
	if len(want) != 2 || !slices.Equal(targets, want) {
		t.Errorf("prometheus scrapes %v; the drover servers' metrics ports are %v", targets, want)
	}

	graf, ok := c.Services["grafana"]
	if !ok || !strings.HasPrefix(graf.Image, "grafana/grafana:") || !slices.Contains(graf.Ports, "127.0.0.1:3000:3000") {
		t.Fatalf("no grafana service published on 127.0.0.1:3000: %+v", graf)
	}
	gm := mounts("grafana")
	prov, ok := gm["/etc/grafana/provisioning"]
	if !ok {
		t.Fatal("the grafana service mounts no /etc/grafana/provisioning")
	}
	var ds struct {
		Datasources []struct {
			Type, URL string
			IsDefault bool `yaml:"isDefault"`
		}
	}
	if err := readYAML(filepath.Join(prov, "datasources", "prometheus.yaml"), &ds); err != nil {
		t.Fatal(err)
	}
	if len(ds.Datasources) != 1 || ds.Datasources[0].Type != "prometheus" || ds.Datasources[0].URL != "http://prometheus:9090" || !ds.Datasources[0].IsDefault {
		t.Errorf("grafana's data sources %+v: want the prometheus service as the default", ds.Datasources)
	}
	var dash struct {
		Providers []struct {
			Type    string
			Options struct{ Path string }
		}
	}
	if err := readYAML(filepath.Join(prov, "dashboards", "drover.yaml"), &dash); err != nil {
		t.Fatal(err)
	}
	if len(dash.Providers) != 1 || dash.Providers[0].Type != "file" {
		t.Fatalf("grafana's dashboard providers %+v: want one of type file", dash.Providers)
	}
	mounted := gm[dash.Providers[0].Options.Path+"/drover-dashboard.json"]
	if filepath.Clean(mounted) != filepath.Clean(filepath.Join(deployDir, "grafana", "drover-dashboard.json")) {
		t.Errorf("grafana's dashboards directory %s does not hold deploy/grafana/drover-dashboard.json (mounts %v)", dash.Providers[0].Options.Path, gm)
	}
}

// readYAML decodes the YAML file path into v.
func readYAML(path string, v any) error {
	src, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := yaml.Unmarshal(src, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// knownVariable reports whether drover reads the variable k in cmd.
func knownVariable(cmd *cobra.Command, k string) bool {
	switch k {
	case "DROVER_API_TOKENS", EnvWebhookSecret, EnvConfig:
		return true
	}
	found := false
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if envName(f.Name) == k && !notSettable[f.Name] {
			found = true
		}
	})
	return found
}

// dockerfileStage is the instructions of the Dockerfile's last stage.
func dockerfileStages(t *testing.T) [][]string {
	t.Helper()
	src, err := os.ReadFile(dockerfilePath)
	if err != nil {
		t.Fatal(err)
	}
	// Join continuation lines, drop comments.
	var lines []string
	cur := ""
	for _, l := range strings.Split(string(src), "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "#") {
			continue
		}
		if s, ok := strings.CutSuffix(l, "\\"); ok {
			cur += s + " "
			continue
		}
		if cur += l; strings.TrimSpace(cur) != "" {
			lines = append(lines, strings.TrimSpace(cur))
		}
		cur = ""
	}
	var stages [][]string
	for _, l := range lines {
		if strings.HasPrefix(strings.ToUpper(l), "FROM ") {
			stages = append(stages, nil)
		}
		if len(stages) > 0 {
			stages[len(stages)-1] = append(stages[len(stages)-1], l)
		}
	}
	return stages
}

// TestDockerfile checks the Dockerfile: a cgo build stage, a small final
// image running as a non-root user, a HEALTHCHECK the binary runs itself
// on /healthz, and commands the binary accepts.
func TestDockerfile(t *testing.T) {
	stages := dockerfileStages(t)
	if len(stages) < 2 {
		t.Fatalf("%d stages; want a build stage and a final one", len(stages))
	}
	build, final := strings.Join(stages[0], "\n"), stages[len(stages)-1]
	if !strings.Contains(build, "CGO_ENABLED=1 go build") || !strings.Contains(build, "./cmd/drover") {
		t.Errorf("the build stage does not build ./cmd/drover with cgo:\n%s", build)
	}
	if from := final[0]; !strings.Contains(from, "distroless/cc") && !strings.Contains(from, "-slim") {
		t.Errorf("final image %q is neither distroless/cc nor a slim one", from)
	}
	var user, health, cmd, entry string
	for _, l := range final {
		word, rest, _ := strings.Cut(l, " ")
		switch strings.ToUpper(word) {
		case "USER":
			user = rest
		case "HEALTHCHECK":
			health = rest
		case "CMD":
			cmd = rest
		case "ENTRYPOINT":
			entry = rest
		}
	}
	if user == "" || strings.HasPrefix(user, "root") || strings.HasPrefix(user, "0") {
		t.Errorf("final stage USER %q: want a non-root user", user)
	}
	_, hcmd, ok := strings.Cut(health, " CMD ")
	if !ok {
		t.Fatalf("final stage HEALTHCHECK %q has no CMD", health)
	}
	hargs := jsonArgs(t, hcmd)
	if len(hargs) < 2 || hargs[0] != "/usr/local/bin/drover" {
		t.Fatalf("HEALTHCHECK runs %q, not the drover binary", hargs)
	}
	hc := parseDroverArgs(t, hargs[1:])
	if hc.Name() != "healthcheck" || !strings.HasSuffix(hc.Flag("url").Value.String(), ":8080/healthz") {
		t.Errorf("HEALTHCHECK %q does not check /healthz on port 8080", hargs)
	}
	if e := jsonArgs(t, entry); !slices.Equal(e, []string{"/usr/local/bin/drover"}) {
		t.Errorf("ENTRYPOINT %q", e)
	}
	if c := parseDroverArgs(t, jsonArgs(t, cmd)); c.Name() != "server" || c.Flag("listen").Value.String() != "0.0.0.0:8080" {
		t.Errorf("CMD %q: want server --listen 0.0.0.0:8080", cmd)
	}
}

// jsonArgs parses the exec form of CMD or ENTRYPOINT (a JSON array).
func jsonArgs(t *testing.T, s string) []string {
	t.Helper()
	var out []string
	if err := yaml.Unmarshal([]byte(s), &out); err != nil || len(out) == 0 {
		t.Fatalf("%q is not the exec form [\"…\"]: %v", s, err)
	}
	return out
}

func TestHealthcheckCommand(t *testing.T) {
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) }))
	defer ok.Close()
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "not ready", http.StatusServiceUnavailable)
	}))
	defer down.Close()
	if out := mustRun(t, "healthcheck", "--url", ok.URL+"/healthz"); !strings.Contains(out, "200 OK") {
		t.Errorf("healthcheck: %q", out)
	}
	wantFailure(t, run(t, "", "healthcheck", "--url", down.URL+"/healthz"), ExitFailure, "503 Service Unavailable")
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	wantFailure(t, run(t, "", "healthcheck", "--url", closed.URL+"/healthz", "--timeout", "2s"), ExitFailure, "connection refused")
	wantFailure(t, run(t, "", "healthcheck", "--timeout", "0s"), ExitUsage, "--timeout must be positive")
}

// TestDockerImageBuilds builds the image and runs "drover version" in it,
// when a container runtime works here; otherwise it says why it skips.
func TestDockerImageBuilds(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a container image; skipped with -short")
	}
	docker, err := exec.LookPath("docker")
	if err != nil {
		t.Skip("no container runtime: docker is not installed")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, docker, "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		t.Skipf("no working container runtime: docker info: %v: %s", err, strings.TrimSpace(string(out)))
	}
	tag := "drover-test:" + clicore.RandomHex(6)
	var out bytes.Buffer
	b := exec.CommandContext(ctx, docker, "build", "-t", tag, "../..")
	b.Stdout, b.Stderr = &out, &out
	if err := b.Run(); err != nil {
		log := out.String()
		for _, pull := range []string{"failed to resolve source metadata", "pull access denied", "dial tcp", "i/o timeout", "TLS handshake timeout", "no such host", "failed to do request"} {
			if strings.Contains(log, pull) {
				t.Skipf("docker cannot fetch the base images or modules (network closed?): %s", lastLines(log, 3))
			}
		}
		t.Fatalf("docker build: %v\n%s", err, log)
	}
	t.Cleanup(func() { _ = exec.Command(docker, "rmi", "-f", tag).Run() })
	v, err := exec.CommandContext(ctx, docker, "run", "--rm", tag, "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(v), "drover ") {
		t.Errorf("docker run %s version: %v\n%s", tag, err, v)
	}
	u, err := exec.CommandContext(ctx, docker, "run", "--rm", "--entrypoint", "/usr/local/bin/drover", tag, "healthcheck", "--url", "http://127.0.0.1:1/healthz").CombinedOutput()
	if err == nil || !strings.Contains(string(u), "health check") {
		t.Errorf("healthcheck in the image against nothing: %v\n%s", err, u)
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], " | ")
}

// readCompose parses deploy/compose.yaml.
func readCompose(t *testing.T) composeFile {
	t.Helper()
	src, err := os.ReadFile(composePath)
	if err != nil {
		t.Fatal(err)
	}
	var c composeFile
	if err := yaml.Unmarshal(src, &c); err != nil {
		t.Fatalf("%s: %v", composePath, err)
	}
	return c
}
