package drover_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/internal/testutil"
	"github.com/drover-run/drover/store"
)

// effects is a remote service that applies each idempotency key once, as
// the services agents call do: it records the keys it applied, in order.
type effects struct {
	mu      sync.Mutex
	applied map[string]int // key → calls
	order   []string
}

func (e *effects) apply(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.applied == nil {
		e.applied = map[string]int{}
	}
	if e.applied[key]++; e.applied[key] == 1 {
		e.order = append(e.order, key)
	}
}

// of lists the effects applied for task id, keys without the task's part.
func (e *effects) of(id string) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, k := range e.order {
		if rest, ok := strings.CutPrefix(k, id+"/"); ok {
			out = append(out, rest)
		}
	}
	return out
}

// The scheduler and supervisor process crashes at each of its writing
// transactions in turn, before the commit and after it, and a process
// with the same instance ID takes over (Restore re-sends the branches in
// flight; the supervisor recovers what was lost). Every task still ends
// as it should, each branch's effect is applied under one idempotency key
// (never twice, never under two keys), and compensation undoes in exact
// reverse order of completion.
func TestParallelGroupCrashAtEveryTransaction(t *testing.T) {
	t.Parallel()
	bothStores(t, func(t *testing.T, d store.Driver) {
		svc := &effects{}
		var reader *drover.Client
		processed := func(id, step string) func() bool {
			return func() bool { s, _ := stepState(reader, id, step); return s == drover.Processed }
		}
		do := func(name string) drover.Agent {
			return drover.Agent{Name: name, Func: func(ctx context.Context, q *drover.AgentRequest) ([]byte, error) {
				if name == "a" {
					// a completes after b, so completion order is not index order.
					if err := until(ctx, processed(q.TaskID, "b")); err != nil {
						return nil, err
					}
				}
				if name == "last" && strings.HasPrefix(q.TaskID, "undo") {
					return nil, drover.Permanent(errors.New("refused"))
				}
				svc.apply(q.IdempotencyKey)
				return []byte(`"` + name + `"`), nil
			}}
		}
		undo := func(name string) drover.Agent {
			return drover.Agent{Name: "undo-" + name, Func: func(_ context.Context, q *drover.AgentRequest) ([]byte, error) {
				svc.apply(q.IdempotencyKey)
				return nil, nil
			}}
		}
		step := func(name string) drover.Step {
			return drover.Step{Name: name, Agent: name, Compensation: "undo-" + name, Timeout: time.Second}
		}
		wf := drover.Workflow{Name: "w", OnFailure: drover.PolicyCompensate, FailureThreshold: 20, Steps: []drover.Step{
			step("first"), {Name: "g", Parallel: []drover.Step{step("a"), step("b")}}, step("last"),
		}}
		agents := []drover.Agent{do("first"), do("a"), do("b"), do("last"), undo("first"), undo("a"), undo("b"), undo("last")}
		cfg := func(d store.Driver, instance string) drover.Config {
			// A short lease: the survivor waits for the crashed process's
			// instance lease to lapse before it takes over.
			return fast(drover.Config{Store: d, InstanceID: instance, Schedulers: 1, Workflows: []drover.Workflow{wf}, Agents: agents,
				LeaseTTL: 300 * time.Millisecond})
		}
		var err error
		if reader, err = drover.New(drover.Config{Store: d, Workflows: []drover.Workflow{wf}}); err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		run := func(cp *testutil.ProcessCrash, name string) {
			t.Helper()
			for _, id := range []string{"ok-" + name, "undo-" + name} {
				if _, err := reader.Submit(ctx, "w", nil, &drover.SubmitOptions{ID: id}); err != nil {
					t.Fatal(err)
				}
			}
			final := func(id string) bool {
				tk, err := reader.Task(ctx, id)
				return err == nil && tk.ProcessState.Final()
			}
			done := func() bool { return final("ok-"+name) && final("undo-"+name) }
			c, err := drover.New(cfg(cp, "proc-"+name))
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Start(ctx); err != nil {
				t.Fatal(err)
			}
			testutil.WaitFor(t, name+": the crash or the end", func() bool { return cp.Fired() || done() })
			stop, cancel := context.WithTimeout(ctx, 15*time.Second)
			_ = c.Stop(stop) // a crashed process's stop fails: its transactions do
			cancel()
			if cp.Fired() {
				survivor, err := drover.New(cfg(d, "proc-"+name))
				if err != nil {
					t.Fatal(err)
				}
				testutil.WaitFor(t, name+": the survivor starting", func() bool { return survivor.Start(ctx) == nil })
				testutil.WaitFor(t, name+": the survivor finishing", done)
				stop, cancel := context.WithTimeout(ctx, 15*time.Second)
				if err := survivor.Stop(stop); err != nil {
					t.Errorf("%s: survivor Stop: %v", name, err)
				}
				cancel()
			}
			ok, _ := reader.Task(ctx, "ok-"+name)
			if ok.ProcessState != drover.Processed || string(ok.Output) != `"last"` {
				t.Errorf("%s: ok task %s (%s), output %s; want Processed", name, ok.ProcessState, ok.LastError, ok.Output)
			}
			if got, want := svc.of("ok-"+name), []string{"0/first", "2/b", "1/a", "3/last"}; !slices.Equal(got, want) {
				t.Errorf("%s: ok task's effects %v, want %v", name, got, want)
			}
			u, _ := reader.Task(ctx, "undo-"+name)
			if u.ProcessState != drover.Compensated {
				t.Errorf("%s: undo task %s (%s), want Compensated", name, u.ProcessState, u.LastError)
			}
			if got, want := svc.of("undo-"+name), []string{"0/first", "2/b", "1/a", "1/a/compensate", "2/b/compensate", "0/first/compensate"}; !slices.Equal(got, want) {
				t.Errorf("%s: undo task's effects %v, want %v (each once, undone in reverse order of completion)", name, got, want)
			}
		}
		clean := &testutil.ProcessCrash{Driver: d}
		run(clean, "clean")
		n := clean.Writes()
		if n < 8 {
			t.Fatalf("a clean run wrote in %d transactions; want at least 8", n)
		}
		fired := 0
		for k := int64(1); k <= n; k++ {
			for _, after := range []bool{false, true} {
				cp := &testutil.ProcessCrash{Driver: d, At: k, AfterCommit: after}
				run(cp, fmt.Sprintf("%d-%v", k, after))
				if cp.Fired() {
					fired++
				}
			}
		}
		// Timing may shift a run's last transactions; most points crash.
		if fired < int(n) {
			t.Errorf("only %d of %d crash points crashed", fired, 2*n)
		}
		t.Logf("%d writing transactions in a clean run; %d crash points crashed", n, fired)
	})
}
