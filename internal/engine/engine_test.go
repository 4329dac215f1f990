package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/agentrt"
	"github.com/drover-run/drover/internal/clock"
	"github.com/drover-run/drover/internal/flow"
	"github.com/drover-run/drover/internal/startstop"
	"github.com/drover-run/drover/internal/testutil"
	"github.com/drover-run/drover/store"
)

// drivers runs fn once per store driver.
func drivers(t *testing.T, fn func(t *testing.T, drv store.Driver)) {
	t.Run("sqlite", func(t *testing.T) { fn(t, testutil.SQLite(t)) })
	t.Run("postgres", func(t *testing.T) { fn(t, testutil.Postgres(t)) })
}

// newEngine is every role of a process on drv: two schedulers, the agent
// "echo" and the supervisor.
func newEngine(drv store.Driver, instance string) *Engine {
	echo := func(_ context.Context, r *dt.AgentRequest) ([]byte, error) { return r.Input, nil }
	return New(Config{
		Store: drv, Clock: clock.Real{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Instance: instance, Counters: &flow.Counters{},
		Schedulers: 2, ClaimBatch: 16, MaxInFlight: 64, PollInterval: 10 * time.Millisecond,
		Agents:      []agentrt.Spec{{Name: "echo", Func: echo, Concurrency: 4}},
		IsPermanent: func(error) bool { return false },
		Supervisor:  true, SupervisorInterval: 20 * time.Millisecond, LeaseTTL: 2 * time.Second,
	})
}

// submit stores a pending one-step task for the agent "echo".
func submit(t *testing.T, drv store.Driver, id string) {
	t.Helper()
	now := time.Now().UTC().Truncate(time.Microsecond)
	sub := flow.Submission{
		Task: &dt.Task{ID: id, Workflow: "w", Input: []byte(`{}`), InputHash: flow.InputHash("w", []byte(`{}`)),
			ProcessState: dt.Pending, StepCount: 1, FailureThreshold: 3, OnFailure: dt.PolicyError,
			AvailableAt: now, CreatedAt: now, UpdatedAt: now},
		Steps: []*dt.StepRecord{{TaskID: id, Name: "a", Agent: "echo", Timeout: 10 * time.Second,
			ProcessState: dt.Pending, IdempotencyKey: flow.IdempotencyKey(id, 0, "a"), UpdatedAt: now}},
	}
	if err := drv.InTx(context.Background(), func(ctx context.Context, x store.Executor) error {
		_, err := flow.Submit(ctx, x, []flow.Submission{sub})
		return err
	}); err != nil {
		t.Fatalf("submit %s: %v", id, err)
	}
}

// engineGoroutines counts the goroutines running the engine's code (its
// roles and their helpers), not the test's nor the store's.
func engineGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "drover/internal/") && !strings.Contains(g, "testing.tRunner") {
			count++
		}
	}
	return count
}

// noGoroutineLeft waits until no goroutine of the engine runs.
func noGoroutineLeft(t *testing.T) {
	t.Helper()
	testutil.WaitFor(t, "the engine's goroutines to end", func() bool { return engineGoroutines() == 0 })
}

// recorder notes the starts and stops of the services it wraps.
type recorder struct {
	mu  sync.Mutex
	log []string
}

func (r *recorder) note(s string) {
	r.mu.Lock()
	r.log = append(r.log, s)
	r.mu.Unlock()
}

func (r *recorder) notes() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.log)
}

type recorded struct {
	startstop.Service
	name string
	r    *recorder
}

func (s *recorded) Start(ctx context.Context) error {
	err := s.Service.Start(ctx)
	if err == nil {
		s.r.note("start " + s.name)
	}
	return err
}

func (s *recorded) Stop() {
	s.Service.Stop()
	s.r.note("stop " + s.name)
}

// record wraps every service of e, in place, and returns their names in
// the engine's order.
func record(e *Engine, r *recorder) []string {
	var names []string
	for i, s := range e.services {
		name := fmt.Sprintf("service %d", i)
		if f, ok := s.(*startstop.Func); ok {
			name = f.Name
		}
		names = append(names, name)
		e.services[i] = &recorded{Service: s, name: name, r: r}
	}
	return names
}

// failing is a service that refuses to start.
type failing struct{}

var errRefused = errors.New("refused to start")

func (failing) Start(context.Context) error { return errRefused }
func (failing) Stop()                       {}

// Start runs every role together: a submitted task is claimed, sent to the
// local agent and finished, and the supervisor leads; Stop ends them all
// and leaves no goroutine of theirs behind.
func TestStartRunsEveryRoleAndStopEndsThem(t *testing.T) {
	drivers(t, func(t *testing.T, drv store.Driver) {
		e := newEngine(drv, "engine-run")
		if err := e.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		submit(t, drv, "t-1")
		testutil.WaitFor(t, "the task to finish", func() bool { return e.cfg.Counters.TasksFinished.Load() == 1 })
		testutil.WaitFor(t, "the supervisor to lead", func() bool { return e.SupervisorTerm() > 0 })
		select {
		case <-e.Runtime().Ready():
		default:
			t.Error("the agent runtime is not ready")
		}
		if engineGoroutines() == 0 {
			t.Fatal("no goroutine of the engine counted while it runs")
		}
		e.Stop()
		noGoroutineLeft(t)
	})
}

// The agent runtime starts first, so the schedulers' first dispatches take
// the fast path, and stops last, after the schedulers that dispatch to it;
// Stop is idempotent, and a no-op before Start.
func TestStopOrderAndIdempotentStop(t *testing.T) {
	drivers(t, func(t *testing.T, drv store.Driver) {
		e := newEngine(drv, "engine-order")
		e.Stop() // never started: nothing to do
		r := &recorder{}
		names := record(e, r)
		want := []string{"agent", "scheduler engine-order/scheduler-0", "scheduler engine-order/scheduler-1", "supervisor", "dedupe expiry"}
		if !slices.Equal(names, want) {
			t.Fatalf("services %q, want %q", names, want)
		}
		if err := e.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		e.Stop()
		e.Stop()
		var wantLog []string
		for _, n := range want {
			wantLog = append(wantLog, "start "+n)
		}
		for i := len(want) - 1; i >= 0; i-- {
			wantLog = append(wantLog, "stop "+want[i])
		}
		for i := len(want) - 1; i >= 0; i-- {
			wantLog = append(wantLog, "stop "+want[i]) // the second Stop: each a no-op
		}
		if got := r.notes(); !slices.Equal(got, wantLog) {
			t.Errorf("log\n%q\nwant\n%q", got, wantLog)
		}
		noGoroutineLeft(t)
	})
}

// A service failing to start stops those already started, in reverse
// order, and starts none after it; Start returns its error.
func TestFailedStartStopsTheStarted(t *testing.T) {
	drivers(t, func(t *testing.T, drv store.Driver) {
		e := newEngine(drv, "engine-fail")
		// Between the schedulers and the supervisor.
		e.services = slices.Insert(e.services, 3, startstop.Service(failing{}))
		r := &recorder{}
		record(e, r)
		if err := e.Start(context.Background()); !errors.Is(err, errRefused) {
			t.Fatalf("Start = %v, want %v", err, errRefused)
		}
		want := []string{"start agent", "start scheduler engine-fail/scheduler-0", "start scheduler engine-fail/scheduler-1",
			"stop scheduler engine-fail/scheduler-1", "stop scheduler engine-fail/scheduler-0", "stop agent"}
		if got := r.notes(); !slices.Equal(got, want) {
			t.Errorf("log\n%q\nwant\n%q", got, want)
		}
		noGoroutineLeft(t)
		if e.SupervisorTerm() != 0 {
			t.Error("the supervisor leads although it never started")
		}
	})
}
