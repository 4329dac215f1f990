package docstest

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRunDoc checks the runner on small documents: what passes, and that
// a failing command, a background command that dies, and a server that is
// waited for are reported as they should be.
func TestRunDoc(t *testing.T) {
	if testing.Short() {
		t.Skip("runs bash sessions; skipped with -short")
	}
	netns := netnsWorks()
	port := 8765
	if !netns {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port = l.Addr().(*net.TCPAddr).Port
		l.Close()
	}
	run := func(t *testing.T, doc string) error {
		t.Helper()
		blocks, err := parseDoc(doc)
		if err != nil {
			t.Fatal(err)
		}
		root := t.TempDir()
		w := &workspace{root: root, clone: filepath.Join(root, "repo"), bin: filepath.Join(root, "bin"), netns: netns,
			env: sessionEnv(t, filepath.Join(root, "bin"), filepath.Join(root, "home"), filepath.Join(root, "tmp"))}
		w.fresh(t)
		return runDoc(t, w, "doc.md", blocks)
	}

	t.Run("passes", func(t *testing.T) {
		start := time.Now()
		err := run(t, fmt.Sprintf(strings.Join([]string{
			"```sh",
			"X=1",
			`test "$X" = 1   # variables last from one command to the next`,
			// Listening only after a second: the next command passes
			// because the runner waits for the address.
			"(sleep 1; exec python3 -m http.server %[1]d --bind 127.0.0.1) >/dev/null 2>&1 &   # --listen 127.0.0.1:%[1]d",
			"curl -sf http://127.0.0.1:%[1]d/ >/dev/null",
			"sleep 60   # Ctrl-C to stop",
			"```",
			"<!-- docs-test: skip, needs nothing: a test of the marker -->",
			"```sh",
			"false",
			"```",
		}, "\n"), port))
		if err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > 30*time.Second {
			t.Errorf("took %s: the Ctrl-C command was not interrupted once quiet", d)
		}
	})

	t.Run("failing command", func(t *testing.T) {
		err := run(t, strings.Join([]string{
			"Text.",
			"",
			"```sh",
			"echo fine",
			"echo boom >&2; false",
			"echo never > ran",
			"```",
		}, "\n"))
		if err == nil {
			t.Fatal("no error")
		}
		for _, want := range []string{"doc.md:5 (block at line 3): exit status 1", "echo boom >&2; false", "--- its output:\nboom\n"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("the error does not say %q:\n%s", want, err)
			}
		}
	})

	t.Run("hung command", func(t *testing.T) {
		defer func(d time.Duration) { cmdTimeout = d }(cmdTimeout)
		cmdTimeout = 2 * time.Second
		err := run(t, strings.Join([]string{
			"```sh",
			"sleep 3600 & sleep 3601",
			"```",
		}, "\n"))
		if err == nil || !strings.Contains(err.Error(), "doc.md:2 (block at line 1): no exit within 2s") {
			t.Fatalf("err = %v, want no exit within 2s", err)
		}
		// Both sleeps are gone: the hung one has a process group of its own.
		for _, left := range sleeping(t) {
			t.Errorf("left running: %s", left)
		}
	})

	t.Run("background command dies", func(t *testing.T) {
		err := run(t, strings.Join([]string{
			"```sh",
			"(sleep 0.2; echo crashed; exit 4) &",
			"sleep 1",
			"```",
		}, "\n"))
		if err == nil {
			t.Fatal("no error")
		}
		for _, want := range []string{"doc.md:2 (block at line 1): this background command exited with status 4", "crashed"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("the error does not say %q:\n%s", want, err)
			}
		}
	})
}

// sleeping lists the processes running "sleep 3600" or "sleep 3601".
func sleeping(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if c := strings.ReplaceAll(string(b), "\x00", " "); c == "sleep 3600 " || c == "sleep 3601 " {
			out = append(out, e.Name()+": "+c)
		}
	}
	return out
}
