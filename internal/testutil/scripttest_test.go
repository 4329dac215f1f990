package testutil_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/drover-run/drover/internal/testutil"
)

// scripts/test, the suite's command in CI, refuses every setting that would
// turn PostgreSQL tests into passes, before it runs anything. The script
// runs with a stand-in `go` first on PATH, which records its call and fails,
// so a script that did not refuse is seen (and never runs the suite from
// inside the suite).
func TestScriptsTestRefusesToSkipPostgres(t *testing.T) {
	t.Parallel()
	script, err := filepath.Abs("../../scripts/test")
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	ran := filepath.Join(bin, "go-ran")
	fakeGo := "#!/bin/sh\necho \"$@\" >> " + ran + "\nexit 97\n"
	if err := os.WriteFile(filepath.Join(bin, "go"), []byte(fakeGo), 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(t *testing.T, env []string, args ...string) (code int, stderr string, goRan bool) {
		t.Helper()
		if err := os.Remove(ran); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		cmd := exec.Command("bash", append([]string{script}, args...)...)
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, testutil.PostgresSkipEnv+"=") && !strings.HasPrefix(kv, "PATH=") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		// CC=true passes the C compiler check; a URL set skips the search
		// for a PostgreSQL.
		cmd.Env = append(cmd.Env, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "CC=true",
			testutil.PostgresURLEnv+"=postgres://unused@127.0.0.1:1/none")
		cmd.Env = append(cmd.Env, env...)
		var out strings.Builder
		cmd.Stderr = &out
		err := cmd.Run()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		_, statErr := os.Stat(ran)
		return cmd.ProcessState.ExitCode(), out.String(), statErr == nil
	}

	// The control: with nothing to refuse, the script goes on to go vet.
	if code, stderr, goRan := run(t, nil); !goRan || code != 97 {
		t.Fatalf("plain run: exit %d, go run %v, stderr %q; want the stand-in go run (exit 97)", code, goRan, stderr)
	}
	for _, c := range []struct {
		name string
		env  []string
		args []string
		says string
	}{
		{"skip", []string{testutil.PostgresSkipEnv + "=skip"}, nil, testutil.PostgresSkipEnv + "=skip"},
		{"any value", []string{testutil.PostgresSkipEnv + "=1"}, nil, testutil.PostgresSkipEnv + "=1"},
		{"-short", nil, []string{"-run", "X", "-short"}, "-short"},
		{"-short=true", nil, []string{"-short=true"}, "-short=true"},
		{"-test.short", nil, []string{"-test.short"}, "-test.short"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, stderr, goRan := run(t, c.env, c.args...)
			if goRan || code != 2 || !strings.Contains(stderr, "refusing to run with "+c.says) {
				t.Errorf("exit %d, go run %v, stderr %q; want exit 2 before running go, naming %s", code, goRan, stderr, c.says)
			}
		})
	}
	// -short=false skips nothing.
	if code, stderr, goRan := run(t, nil, "-short=false"); !goRan || code != 97 {
		t.Errorf("-short=false: exit %d, go run %v, stderr %q; want the script to go on", code, goRan, stderr)
	}
}
