package crashtest

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/internal/flow"
	"github.com/drover-run/drover/internal/orders"
	"github.com/drover-run/drover/internal/remotesim"
	"github.com/drover-run/drover/internal/testutil"
	"github.com/drover-run/drover/store/sqlite"
)

var long = flag.Bool("crash.long", false, "run the long crash soak (more orders, more kills)")

// buildDrover returns cmd/drover, built once for the package's tests.
func buildDrover(t *testing.T) string {
	t.Helper()
	return testutil.DroverBinary(t)
}

// crashRig starts the remote-service simulator, its calls taking latency
// (a tenth fail transiently, 3% hang, 1% fail for good), and a log for the
// servers' output, in a directory it returns: removed when the test
// passes, kept (and named) when it fails.
func crashRig(t *testing.T, seed int64, latency time.Duration) (sim *remotesim.Service, remote, logDir string, logw io.Writer) {
	t.Helper()
	sim = remotesim.New(remotesim.Config{TransientRate: 0.1, HangRate: 0.03, PermanentRate: 0.01, Seed: seed, Latency: latency})
	remote, stopSim, err := sim.Serve(context.Background(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stopSim)
	if logDir, err = os.MkdirTemp("", "drover-crash-logs-"); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(logDir, "servers.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		logf.Close()
		if t.Failed() {
			t.Logf("server logs kept in %s", logf.Name())
		} else {
			os.RemoveAll(logDir)
		}
	})
	var logMu sync.Mutex
	return sim, remote, logDir, writerFunc(func(p []byte) (int, error) { logMu.Lock(); defer logMu.Unlock(); return logf.Write(p) })
}

// waitAllFinal waits until no task is active, for at most limit; past it
// the test fails, pointing at the servers' log in dir.
func waitAllFinal(t *testing.T, client *drover.Client, limit time.Duration, when, dir string) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		active, err := client.Active(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if active == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d tasks still not final %s; server log: %s", active, when, filepath.Join(dir, "servers.log"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// server is one running `drover server` child process.
type server struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// startServer starts bin's `drover server --demo` on the store dbArgs name
// (--db and, on PostgreSQL, --schema) and waits until it is ready.
func startServer(t *testing.T, bin string, dbArgs []string, remote, instance string, logw io.Writer) *server {
	t.Helper()
	args := append([]string{"server", "--demo"}, dbArgs...)
	cmd := exec.Command(bin, append(args,
		"--remote-url", remote,
		"--instance-id", instance,
		"--step-timeout", "1s",
		"--supervisor-interval", "100ms",
		"--lease-ttl", "1s",
		"--schedulers", "2",
	)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start server: %v", err)
	}
	ready := make(chan struct{})
	s := &server{cmd: cmd, done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		once := sync.Once{}
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(logw, instance+": "+line)
			if strings.Contains(line, "drover server ready") {
				once.Do(func() { close(ready) })
			}
		}
	}()
	go func() { _ = cmd.Wait(); close(s.done) }()
	select {
	case <-ready:
	case <-s.done:
		t.Fatalf("server %s exited before it was ready", instance)
	case <-time.After(60 * time.Second):
		s.kill()
		t.Fatalf("server %s not ready after 60s", instance)
	}
	return s
}

func (s *server) kill() {
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.done
}

// TestServerSurvivesSIGKILL is the crash test: every task ends final
// and the remote service sees no duplicate effect, however often the server
// dies mid-flight.
func TestServerSurvivesSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test builds and kills real processes; skipped with -short")
	}
	nOrders, kills := 150, 6
	if *long {
		nOrders, kills = 2000, 40
	}
	bin := buildDrover(t)
	ctx := context.Background()
	dir := t.TempDir()
	db := filepath.Join(dir, "drover.db")

	// Latency keeps calls in flight long enough for the kills to land mid-work.
	sim, remote, logDir, logw := crashRig(t, 7, 20*time.Millisecond)

	// The first server creates and migrates the store.
	srv := startServer(t, bin, []string{"--db", "sqlite:" + db}, remote, "node-0", logw)
	defer func() { srv.kill() }()

	// A submit-only client in this process: a second process on the file.
	drv, err := sqlite.Open(ctx, db, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer drv.Close()
	client, err := drover.New(drover.Config{Store: drv, Workflows: []drover.Workflow{orders.Workflow(orders.Options{})}})
	if err != nil {
		t.Fatal(err)
	}
	// Orders arrive in waves, one before each kill, so every kill lands on
	// work in flight however long the run.
	submitted := 0
	submitWave := func(n int) {
		var params []drover.SubmitParams
		for ; n > 0 && submitted < nOrders; n-- {
			submitted++
			params = append(params, drover.SubmitParams{Workflow: "orders",
				Input:   []byte(fmt.Sprintf(`{"order_id":"o-%d","amount":%d}`, submitted, 100+submitted)),
				Options: drover.SubmitOptions{ID: fmt.Sprintf("order-%d", submitted)}})
		}
		if len(params) == 0 {
			return
		}
		if _, err := client.SubmitMany(ctx, params); err != nil {
			t.Fatalf("submit: %v", err)
		}
	}
	wave := (nOrders + kills - 1) / kills
	submitWave(wave)

	// Kill at random moments while work is in flight; restart sometimes with
	// the same instance ID (resume) and sometimes with a new one (the
	// supervisor recovers the dead instance's tasks).
	rng := rand.New(rand.NewPCG(1, 2))
	instance := "node-0"
	killedBusy := 0
	for k := 0; k < kills; k++ {
		if k > 0 {
			submitWave(wave)
		}
		time.Sleep(time.Duration(150+rng.IntN(600)) * time.Millisecond)
		if held, err := heldTasks(ctx, client); err == nil && held > 0 {
			killedBusy++
		}
		srv.kill()
		if rng.IntN(2) == 0 {
			instance = fmt.Sprintf("node-%d", k+1)
		}
		srv = startServer(t, bin, []string{"--db", "sqlite:" + db}, remote, instance, logw)
	}

	if killedBusy < kills/2 {
		t.Fatalf("only %d of %d kills hit a server holding tasks; the test is not exercising crashes", killedBusy, kills)
	}

	submitWave(nOrders) // whatever is left

	// Let the last server finish everything.
	waitAllFinal(t, client, 3*time.Minute, "after the last restart", logDir)

	counts, err := client.Counts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	final := counts[drover.Processed] + counts[drover.Error] + counts[drover.Compensated]
	if final != nOrders {
		t.Errorf("final tasks = %d (%v), want %d", final, counts, nOrders)
	}
	st := sim.Stats()
	if st.DuplicateEffects != 0 {
		t.Errorf("remote service saw %d duplicate effects, want 0 (stats %+v)", st.DuplicateEffects, st)
	}
	// Every order that ended Processed was charged exactly once; every
	// Compensated one was refunded if it had been charged.
	tasks, err := client.Tasks(ctx, drover.ListParams{Limit: nOrders + 10})
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range tasks {
		orderID := "o-" + strings.TrimPrefix(tk.ID, "order-")
		switch tk.ProcessState {
		case drover.Processed:
			for _, op := range []string{"reserve", "charge", "ship"} {
				if n := sim.Applied(op, orderID); n != 1 {
					t.Errorf("%s Processed but %s applied %d times", tk.ID, op, n)
				}
			}
		case drover.Compensated:
			if sim.Applied("charge", orderID) == 1 && sim.Applied("refund", orderID) != 1 {
				t.Errorf("%s Compensated: charged but refund applied %d times", tk.ID, sim.Applied("refund", orderID))
			}
		case drover.Error:
			alerts, err := client.Events(ctx, drover.EventQuery{TaskID: tk.ID, AlertsOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			if len(alerts) == 0 {
				t.Errorf("%s ended in Error without an operator alert", tk.ID)
			}
			if strings.HasPrefix(tk.LastError, flow.BrokenPrefix) {
				t.Errorf("%s set to Error as broken: %s", tk.ID, tk.LastError)
			}
		}
	}
	checkNoConcurrentHolders(t, client)
	t.Logf("orders %d: %v; remote %+v; kills %d (%d while tasks were held)", nOrders, counts, st, kills, killedBusy)
}

// checkNoConcurrentHolders reads the durable history: for every task, each
// step attempt is started by one scheduler, and the attempts of a step grow
// by one each time — so no two schedulers ever ran the same attempt, and a
// new holder only ever took over a step after the previous one was reset.
func checkNoConcurrentHolders(t *testing.T, c *drover.Client) {
	t.Helper()
	ctx := context.Background()
	type key struct {
		task string
		step int
	}
	lastAttempt := map[key]int{}
	var after int64
	for {
		evs, err := c.Events(ctx, drover.EventQuery{AfterID: after, Limit: 5000})
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 0 {
			return
		}
		for _, e := range evs {
			after = e.ID
			if e.Type != "step_started" && e.Type != "compensating" {
				continue
			}
			if e.StepIndex < 0 {
				continue
			}
			k := key{e.TaskID, e.StepIndex}
			if e.Attempt != lastAttempt[k]+1 {
				t.Errorf("task %s step %d: attempt %d started by %s after attempt %d: two holders or a lost fence",
					e.TaskID, e.StepIndex, e.Attempt, e.Actor, lastAttempt[k])
			}
			lastAttempt[k] = e.Attempt
		}
	}
}

// heldTasks counts tasks some scheduler holds right now.
func heldTasks(ctx context.Context, c *drover.Client) (int, error) {
	ts, err := c.Tasks(ctx, drover.ListParams{States: []drover.ProcessState{drover.Processing, drover.Compensating}, Limit: 100000})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, t := range ts {
		if t.LockedBy != "" {
			n++
		}
	}
	return n, nil
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
