// Package examples_test checks the programs under examples/: each is one a
// user can copy into their own module, so each imports only drover's
// public packages, and each builds and runs as its comment says.
package examples_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

const module = "github.com/drover-run/drover"

// No file under examples/ (this test included) imports an internal
// package of drover: a user's module could not import it.
func TestExamplesImportOnlyPublicPackages(t *testing.T) {
	t.Parallel()
	files := 0
	err := filepath.WalkDir(".", func(path string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() || !strings.HasSuffix(path, ".go") {
			return err
		}
		files++
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			p := strings.Trim(imp.Path.Value, `"`)
			if internal(p) {
				t.Errorf("examples/%s imports %s: an example may import only drover's public packages", filepath.ToSlash(path), p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 4 {
		t.Fatalf("found %d Go files under examples/, want the examples and this test", files)
	}
}

// internal reports whether the import path p is one of drover's internal
// packages (an "internal" element anywhere in the path).
func internal(p string) bool {
	if p != module && !strings.HasPrefix(p, module+"/") {
		return false
	}
	for _, elem := range strings.Split(p, "/") {
		if elem == "internal" {
			return true
		}
	}
	return false
}

func TestInternalRule(t *testing.T) {
	t.Parallel()
	for p, want := range map[string]bool{
		module + "/internal/orders":         true,
		module + "/store/internal/ordering": true,
		module + "/store/sqlite":            false,
		module:                              false,
		"github.com/other/internal/x":       false,
		module + "/internalish":             false,
	} {
		if got := internal(p); got != want {
			t.Errorf("internal(%q) = %v, want %v", p, got, want)
		}
	}
}

// buildExamples builds every example into a temporary directory.
func buildExamples(t *testing.T) string {
	t.Helper()
	bin := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin+string(filepath.Separator), "./orders", "./submit_tx", "./submit_tx_postgres", "./delayed", "./priorities", "./signals", "./schedules", "./parallel", "./retry")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build the examples: %v\n%s", err, out)
	}
	return bin
}

// runExample runs a built example and returns its output; it fails the
// test unless the example exits 0 within a minute.
func runExample(t *testing.T, bin, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, name), args...)
	cmd.Env = append(os.Environ(), "TMPDIR="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", name, err, out)
	}
	t.Logf("%s:\n%s", name, out)
	return string(out)
}

func wantLines(t *testing.T, name, out string, lines ...string) {
	t.Helper()
	for _, l := range lines {
		if !strings.Contains(out, l) {
			t.Errorf("%s printed no line with %q", name, l)
		}
	}
}

func TestExamplesRun(t *testing.T) {
	t.Parallel()
	bin := buildExamples(t)

	t.Run("orders", func(t *testing.T) {
		t.Parallel()
		out := runExample(t, bin, "orders")
		// Orders up to 5000 are shipped; the shop declines to charge more,
		// and those orders release their stock.
		for i := 1; i <= 8; i++ {
			if i <= 5 {
				wantLines(t, "orders", out, fmt.Sprintf("order-o-%d  Processed   shipped, confirmation ship-o-%d", i, i))
			} else {
				wantLines(t, "orders", out, fmt.Sprintf("order-o-%d  Compensated charge: card declined for %d", i, i*1000))
			}
		}
		wantLines(t, "orders", out, "step reserve Processed compensation Compensated", " 0 operations done twice")
	})

	t.Run("submit_tx", func(t *testing.T) {
		t.Parallel()
		out := runExample(t, bin, "submit_tx")
		wantLines(t, "submit_tx", out,
			"o-1: business row present, task present (Pending, 3 steps)",
			"o-2: business row absent, task absent")
	})

	t.Run("delayed", func(t *testing.T) {
		t.Parallel()
		out := runExample(t, bin, "delayed")
		wantLines(t, "delayed", out, "in-2s submitted: Pending, starts at 2s", "now: Processed", "in-2s: Processed", "in-1h: Cancelled")
		var after float64
		if i := strings.Index(out, "in-2s sent "); i < 0 {
			t.Error("in-2s never sent")
		} else if _, err := fmt.Sscanf(out[i:], "in-2s sent %fs", &after); err != nil || after < 2 {
			t.Errorf("in-2s sent %.1fs after its submit (%v), want no earlier than 2s", after, err)
		}
		if strings.Contains(out, "in-1h sent") {
			t.Error("the cancelled delayed task ran")
		}
	})

	t.Run("signals", func(t *testing.T) {
		t.Parallel()
		out := runExample(t, bin, "signals")
		wantLines(t, "signals", out, "o-2: approval sent early, completed a step: false",
			"o-1: approval sent, completed a step: true, duplicate: false",
			"o-1: approval sent, completed a step: false, duplicate: true",
			`o-1: shipped, approved with {"by":"ann"}`, `o-2: shipped, approved with {"by":"bob"}`,
			"o-1: Processed ", "o-2: Processed ", "o-3: stock released",
			`o-3: Compensated step 1 (approve): no signal "approved" by the deadline`)
		if !strings.Contains(out, "o-3: a late approval is refused") {
			t.Error("a signal to a final order was not refused")
		}
	})

	t.Run("parallel", func(t *testing.T) {
		t.Parallel()
		out := runExample(t, bin, "parallel")
		wantLines(t, "parallel", out,
			`order-1: ship got {"stock":"inventory ok for order-1","payment":"payments ok for order-1"}`,
			"order-1: Processed", "step 1 stock in group reserve: Processed", "step 2 payment in group reserve: Processed",
			"order-2: undo stock\norder-2: undo quote\norder-2: Compensated (card declined)",
			"step 2 payment in group reserve: Error")
	})

	t.Run("priorities", func(t *testing.T) {
		t.Parallel()
		out := runExample(t, bin, "priorities")
		if want := "ran reset-42\nran export-vip\nran export-1\nran export-2\nran export-3\n"; out != want {
			t.Errorf("priorities printed\n%s\nwant\n%s", out, want)
		}
	})

	t.Run("schedules", func(t *testing.T) {
		t.Parallel()
		out := runExample(t, bin, "schedules")
		wantLines(t, "schedules", out, "heartbeat paused", `report built by task report-rerun-1 with input {"kind":"sales"}`,
			"daily-report run now: report-rerun-1 Processed", "heartbeat: paused, its last task a due time's: true")
		if n := strings.Count(out, "  schedule:heartbeat:"); n != 3 {
			t.Errorf("%d heartbeat task IDs, want 3:\n%s", n, out)
		}
		if !strings.Contains(out, "daily-report: next due ") || !strings.Contains(out, " 06:00 in Berlin (5 due times listed)") {
			t.Errorf("no next due time of the daily report:\n%s", out)
		}
	})

	t.Run("retry", func(t *testing.T) {
		t.Parallel()
		out := runExample(t, bin, "retry")
		if want := "order-ok: Processed; quote called 3 times, charge 1\n" +
			"order-declined: Error; quote called 3 times, charge 1\norder-declined: card declined\n"; out != want {
			t.Errorf("retry printed\n%s\nwant\n%s", out, want)
		}
	})

	t.Run("submit_tx_postgres", func(t *testing.T) {
		t.Parallel()
		db := freshDatabase(t)
		out := runExample(t, bin, "submit_tx_postgres", "--db", db)
		if n := strings.Count(out, "business row present, task present (Pending, 3 steps)"); n != 2 {
			t.Errorf("%d orders committed with their task, want 2", n)
		}
		if n := strings.Count(out, "business row absent, task absent"); n != 2 {
			t.Errorf("%d orders rolled back with their task, want 2", n)
		}
	})
}

// freshDatabase creates a database of its own on the test server
// (DROVER_TEST_DATABASE_URL) for an example that writes to fixed schemas,
// and drops it when the test ends. It returns the database's URL.
func freshDatabase(t *testing.T) string {
	t.Helper()
	server := os.Getenv("DROVER_TEST_DATABASE_URL")
	if server == "" {
		if os.Getenv("DROVER_TEST_POSTGRES") == "skip" {
			t.Skip("DROVER_TEST_DATABASE_URL is not set and DROVER_TEST_POSTGRES=skip")
		}
		t.Fatal("DROVER_TEST_DATABASE_URL is not set: this example needs a PostgreSQL server (set DROVER_TEST_POSTGRES=skip to skip it)")
	}
	u, err := url.Parse(server)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		t.Fatalf("DROVER_TEST_DATABASE_URL must be a postgres:// URL here: %v", err)
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "drover_example_" + hex.EncodeToString(b)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, server)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn, err := pgx.Connect(ctx, server)
		if err != nil {
			t.Errorf("drop database %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	u.Path = "/" + name
	return u.String()
}
