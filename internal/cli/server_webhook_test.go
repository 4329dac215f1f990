package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
