package server_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The server links none of the demo, the benchmarks or the command line:
// "drover server --demo" hands the demo's workflow and agents in through
// Config, so a server built without it cannot run them.
func TestServerLinksNoDemo(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/drover-run/drover/server").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps listed %d packages: %q", len(deps), out)
	}
	for _, pkg := range deps {
		for _, banned := range []string{"internal/orders", "internal/remotesim", "internal/democmd", "internal/benchcmd", "internal/cli", "internal/clicore"} {
			if pkg == "github.com/drover-run/drover/"+banned {
				t.Errorf("package server links %s", pkg)
			}
		}
	}
}
