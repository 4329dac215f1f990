package crashtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgURLEnv names the PostgreSQL the tests use; scripts/test sets it.
const pgURLEnv = "DROVER_TEST_DATABASE_URL"

// pgCluster is the PostgreSQL server a crash test runs on, and how to
// restart it.
type pgCluster struct {
	URL  string
	Desc string
	// restart takes the server down, calls during, keeps it down for about
	// downtime (when the method allows), and starts it again.
	restart func(downtime time.Duration, during func()) error
}

// Restart restarts the server, calling during while it is down (or, for a
// cluster restarted in one command, just before), and waits until it
// answers again.
func (c *pgCluster) Restart(downtime time.Duration, during func()) error {
	if err := c.restart(downtime, during); err != nil {
		return err
	}
	return waitPG(c.URL, 60*time.Second)
}

// provideRestartablePG returns a PostgreSQL server the test may restart:
// its own throwaway cluster when the PostgreSQL binaries are installed,
// else the one DROVER_TEST_DATABASE_URL names, if that is the local
// Debian cluster pg_ctlcluster can restart. Anything else fails the test:
// the restart step must never be skipped silently.
func provideRestartablePG(t *testing.T) *pgCluster {
	t.Helper()
	envURL := os.Getenv(pgURLEnv)
	if envURL == "" {
		t.Fatalf("%s is not set: this test needs PostgreSQL, e.g. %s='postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable' (scripts/test sets it)", pgURLEnv, pgURLEnv)
	}
	if bin, ok := pgBinDir(); ok {
		c, err := startThrowawayPG(t, bin)
		if err != nil {
			t.Fatalf("start a throwaway PostgreSQL from %s: %v", bin, err)
		}
		return c
	}
	c, err := localClusterPG(envURL)
	if err != nil {
		t.Fatalf("cannot run the PostgreSQL restart step: no PostgreSQL binaries (initdb, pg_ctl) under /usr/lib/postgresql/*/bin "+
			"to start a private server, and %s=%s cannot be restarted by this test: %v", pgURLEnv, redactURL(envURL), err)
	}
	return c
}

// pgBinDir finds the newest /usr/lib/postgresql/<version>/bin holding
// initdb and pg_ctl.
func pgBinDir() (string, bool) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	version := func(d string) float64 {
		v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(d)), 64)
		return v
	}
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if isExecutable(filepath.Join(d, "initdb")) && isExecutable(filepath.Join(d, "pg_ctl")) {
			return d, true
		}
	}
	return "", false
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// startThrowawayPG initdb's and starts a private cluster on a free port, as
// scripts/testpg.sh does (as user postgres when running as root: initdb
// refuses root), stopped and removed when the test ends.
func startThrowawayPG(t *testing.T, bin string) (*pgCluster, error) {
	dir, err := os.MkdirTemp("", "drover-crashpg-")
	if err != nil {
		return nil, err
	}
	var as []string
	if os.Geteuid() == 0 {
		if _, err := user.Lookup("postgres"); err != nil {
			if out, err := exec.Command("useradd", "--system", "--home-dir", dir, "postgres").CombinedOutput(); err != nil {
				os.RemoveAll(dir)
				return nil, fmt.Errorf("useradd postgres: %v: %s", err, out)
			}
		}
		u, err := user.Lookup("postgres")
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		as = []string{"runuser", "-u", "postgres", "--"}
	}
	run := func(timeout time.Duration, name string, args ...string) error {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		argv := append(append(append([]string{}, as...), filepath.Join(bin, name)), args...)
		out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s: %v: %s", strings.Join(argv, " "), err, bytes2line(out))
		}
		return nil
	}
	data := filepath.Join(dir, "data")
	if err := run(2*time.Minute, "initdb", "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8"); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	var port int
	start := func() error {
		err := run(90*time.Second, "pg_ctl", "-D", data, "-l", filepath.Join(dir, "server.log"), "-w", "-t", "60",
			"-o", fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=300", port, dir), "start")
		if err != nil {
			if b, rerr := os.ReadFile(filepath.Join(dir, "server.log")); rerr == nil {
				err = fmt.Errorf("%w; server.log: %s", err, tail(string(b), 5))
			}
		}
		return err
	}
	stop := func(mode string) error {
		return run(90*time.Second, "pg_ctl", "-D", data, "-m", mode, "-w", "-t", "60", "stop")
	}
	for try := 0; ; try++ {
		if port, err = freePort(); err == nil {
			err = start()
		}
		if err == nil {
			break
		}
		if try == 2 {
			_ = stop("immediate")
			os.RemoveAll(dir)
			return nil, err
		}
	}
	t.Cleanup(func() {
		if err := stop("immediate"); err != nil {
			t.Logf("stop the throwaway PostgreSQL: %v", err)
		}
		os.RemoveAll(dir)
	})
	c := &pgCluster{
		URL:  fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port),
		Desc: fmt.Sprintf("throwaway PostgreSQL %s on port %d (data %s)", filepath.Base(filepath.Dir(bin)), port, data),
	}
	// An immediate stop is a crash for the server: no checkpoint, crash
	// recovery on start, and every client connection cut.
	c.restart = func(downtime time.Duration, during func()) error {
		if err := stop("immediate"); err != nil {
			return err
		}
		during()
		time.Sleep(downtime) // the outage itself, not a synchronization
		return start()
	}
	if err := waitPG(c.URL, 60*time.Second); err != nil {
		return nil, err
	}
	return c, nil
}

// localClusterPG accepts rawURL only if it names the local Debian cluster on
// 127.0.0.1:5432 (or localhost) that pg_ctlcluster manages.
func localClusterPG(rawURL string) (*pgCluster, error) {
	cfg, err := pgx.ParseConfig(rawURL)
	if err != nil {
		return nil, fmt.Errorf("parse URL: %w", err)
	}
	if (cfg.Host != "127.0.0.1" && cfg.Host != "localhost") || cfg.Port != 5432 {
		return nil, fmt.Errorf("it is %s:%d, not the local cluster on 127.0.0.1:5432", cfg.Host, cfg.Port)
	}
	ctl, err := exec.LookPath("pg_ctlcluster")
	if err != nil {
		return nil, errors.New("pg_ctlcluster is not installed")
	}
	version, err := localClusterVersion()
	if err != nil {
		return nil, err
	}
	c := &pgCluster{URL: rawURL, Desc: fmt.Sprintf("local cluster %s/main (restarted with pg_ctlcluster)", version)}
	c.restart = func(_ time.Duration, during func()) error {
		// Shared: restart it at once rather than keep it down.
		during()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, ctl, "--skip-systemctl-redirect", version, "main", "restart").CombinedOutput()
		if err != nil {
			return fmt.Errorf("pg_ctlcluster %s main restart: %v: %s", version, err, bytes2line(out))
		}
		return nil
	}
	return c, nil
}

var portLine = regexp.MustCompile(`(?m)^\s*port\s*=\s*(\d+)`)

// localClusterVersion is the version of /etc/postgresql/<v>/main listening
// on port 5432.
func localClusterVersion() (string, error) {
	confs, _ := filepath.Glob("/etc/postgresql/*/main/postgresql.conf")
	for _, conf := range confs {
		b, err := os.ReadFile(conf)
		if err != nil {
			continue
		}
		if m := portLine.FindSubmatch(b); m != nil && string(m[1]) == "5432" {
			return filepath.Base(filepath.Dir(filepath.Dir(conf))), nil
		}
	}
	return "", errors.New("no /etc/postgresql/<version>/main cluster on port 5432")
}

// waitPG waits until the server at url accepts a connection and answers.
func waitPG(url string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		conn, err := pgx.Connect(ctx, url)
		if err == nil {
			_, err = conn.Exec(ctx, "SELECT 1")
			conn.Close(ctx)
		}
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("PostgreSQL at %s not answering after %s: %w", redactURL(url), limit, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// dropSchema drops schema and everything in it.
func dropSchema(rawURL, schema string) error {
	return execSQL(rawURL, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
}

// execSQL runs one statement on its own connection.
func execSQL(rawURL, sql string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, rawURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

func bytes2line(b []byte) string { return tail(string(b), 3) }

// tail returns the last n lines of s on one line.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
