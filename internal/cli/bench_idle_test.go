package cli

import (
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// drover bench idle starts idle servers on a temporary PostgreSQL schema,
// counts the database's transactions and drops the schema; its figures
// add up. (What they are is a benchmark's to say: docs/benchmarks.md.)
func TestPostgresBenchIdle(t *testing.T) {
	t.Parallel()
	url := pgTestURL(t)
	bin := buildDroverBinary(t)
	out, err := exec.Command(bin, "bench", "idle", "--db", url, "--processes", "2", "--for", "2s", "--warmup", "1s", "--json").Output()
	if err != nil {
		t.Fatalf("drover bench idle: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var r struct {
		Mode               string
		Processes          int
		Roles              string
		Seconds            float64
		Transactions       int64
		TxPerSec           float64 `json:"tx_per_sec"`
		TxPerSecPerProcess float64 `json:"tx_per_sec_per_process"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &r); err != nil {
		t.Fatalf("last line is not the JSON result: %v\n%s", err, out)
	}
	if r.Mode != "idle" || r.Processes != 2 || r.Roles != "all" || r.Seconds < 2 || r.TxPerSec < 0 ||
		r.TxPerSecPerProcess*2 > r.TxPerSec+1e-9 || r.TxPerSecPerProcess*2 < r.TxPerSec-1e-9 {
		t.Errorf("result %+v", r)
	}
	for _, args := range [][]string{
		{"bench", "idle"},
		{"bench", "idle", "--db", url, "--processes", "0"},
		{"bench", "idle", "--db", "sqlite:" + t.TempDir() + "/x.db"},
	} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		if code := exitCode(err); code != 2 || !strings.Contains(string(out), "--") {
			t.Errorf("drover %s: exit %d, %s; want a usage error", strings.Join(args, " "), code, out)
		}
	}
}

// exitCode is the exit status of a finished command (0 for a nil error).
func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}
