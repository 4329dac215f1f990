package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/drover-run/drover/store/sqlite"
)

var droverBinary struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// DroverBinary builds cmd/drover once per test binary and returns its path:
// linking the 40 MB binary takes seconds, so the tests of a package share
// one build. It is built with the SQLite library of the test's own build
// (also when that came from -tags sqlite_purego); CGO_ENABLED and GOFLAGS
// carry over by themselves. A package that calls it removes the build in
// its TestMain with RemoveDroverBinary.
func DroverBinary(t testing.TB) string {
	t.Helper()
	b := &droverBinary
	b.once.Do(func() {
		b.dir, b.err = os.MkdirTemp("", "drover-test-bin-")
		if b.err != nil {
			return
		}
		b.path = filepath.Join(b.dir, "drover")
		args := []string{"build", "-o", b.path}
		if sqlite.DriverModule == "modernc.org/sqlite" {
			args = append(args, "-tags=sqlite_purego")
		}
		out, err := exec.Command("go", append(args, "github.com/drover-run/drover/cmd/drover")...).CombinedOutput()
		if err != nil {
			b.err = fmt.Errorf("build drover: %w\n%s", err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// RemoveDroverBinary removes what DroverBinary built, if anything.
func RemoveDroverBinary() {
	if droverBinary.dir != "" {
		_ = os.RemoveAll(droverBinary.dir)
	}
}
