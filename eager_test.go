package drover_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/internal/testutil"
	"github.com/drover-run/drover/store"
)

// heldAgent's calls for input "hold" wait until release is closed; the
// others return at once. calls counts the calls per task ID.
type heldAgent struct {
	mu      sync.Mutex
	calls   map[string][]int // task ID → attempts called
	release chan struct{}
}

func newHeldAgent() *heldAgent {
	return &heldAgent{calls: map[string][]int{}, release: make(chan struct{})}
}

func (h *heldAgent) agent(concurrency int) drover.Agent {
	return drover.Agent{Name: "a", Concurrency: concurrency, Func: func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) {
		h.mu.Lock()
		h.calls[r.TaskID] = append(h.calls[r.TaskID], r.Attempt)
		h.mu.Unlock()
		if string(r.Input) == `"hold"` {
			select {
			case <-h.release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return []byte(`"done"`), nil
	}}
}

// client starts a client on d running workflow "w" (one step on agent "a",
// a minute's budget) with h's agent at the given concurrency, and cfg's
// other settings.
func (h *heldAgent) client(t *testing.T, d store.Driver, concurrency int, cfg drover.Config) *drover.Client {
	t.Helper()
	cfg.Store = d
	cfg.Workflows = []drover.Workflow{{Name: "w", Steps: []drover.Step{{Name: "s", Agent: "a", Timeout: time.Minute}}}}
	cfg.Agents = []drover.Agent{h.agent(concurrency)}
	return startClient(t, cfg)
}

func (h *heldAgent) attempts(id string) []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]int(nil), h.calls[id]...)
}

// waitAccepting submits tasks of workflow "w" with input until one comes
// back started: a scheduler accepts once it has restored its in-flight
// requests after Start; until then tasks are claimed as usual.
func waitAccepting(t *testing.T, c *drover.Client, input []byte) {
	t.Helper()
	waitFor(t, "a task started at submission", func() bool {
		task, err := c.Submit(context.Background(), "w", input, nil)
		if err != nil {
			t.Fatal(err)
		}
		return task.ProcessState == drover.Processing
	})
}

func eagerStores(t *testing.T) map[string]store.Driver {
	return map[string]store.Driver{"sqlite": testutil.SQLite(t), "postgres": testutil.Postgres(t)}
}

// TestSubmitStartsTheTask: with a scheduler running in the process, Submit
// stores the new task already claimed, with its first step dispatched to
// the agent of the process, in its own transaction. The polls are slower
// than the test, so nothing else could have started it. A submission of
// an existing ID starts nothing and leaves no agent slot taken.
func TestSubmitStartsTheTask(t *testing.T) {
	for name, d := range eagerStores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			h := newHeldAgent()
			defer close(h.release)
			c := h.client(t, d, 2, drover.Config{PollInterval: time.Minute})

			waitAccepting(t, c, []byte(`"quick"`))

			before := time.Now()
			task, err := c.Submit(ctx, "w", []byte(`"hold"`), &drover.SubmitOptions{ID: "held-1"})
			if err != nil {
				t.Fatal(err)
			}
			if task.ProcessState != drover.Processing || !strings.HasPrefix(task.LockedBy, c.InstanceID()+"/scheduler-") ||
				task.CompleteBy == nil || task.CompleteBy.Before(before.Add(time.Minute-time.Second)) || task.CurrentStep != 0 {
				t.Fatalf("submitted task: %s LockedBy %q CompleteBy %v step %d; want Processing, held by a scheduler of %s, due in a minute, at step 0",
					task.ProcessState, task.LockedBy, task.CompleteBy, task.CurrentStep, c.InstanceID())
			}
			stored, err := c.Task(ctx, "held-1")
			if err != nil {
				t.Fatal(err)
			}
			if stored.ProcessState != drover.Processing || stored.LockedBy != task.LockedBy || !stored.CompleteBy.Equal(*task.CompleteBy) {
				t.Errorf("stored task: %s LockedBy %q CompleteBy %v; want what Submit returned", stored.ProcessState, stored.LockedBy, stored.CompleteBy)
			}
			waitFor(t, "the agent called for held-1", func() bool { return len(h.attempts("held-1")) == 1 })
			evs := events(t, c, "held-1")
			if got := strings.Join(eventTypes(evs), " "); got != "submitted step_started" {
				t.Fatalf("events of held-1: %s, want submitted step_started", got)
			}
			if evs[0].State != drover.Pending || evs[1].Actor != task.LockedBy || evs[1].Attempt != 1 {
				t.Errorf("events of held-1: submitted in state %s, step_started by %q attempt %d; want Pending, by %q attempt 1",
					evs[0].State, evs[1].Actor, evs[1].Attempt, task.LockedBy)
			}

			// The same ID again: the stored task, and no second call.
			again, err := c.Submit(ctx, "w", []byte(`"hold"`), &drover.SubmitOptions{ID: "held-1"})
			if err != nil {
				t.Fatal(err)
			}
			if again.LockedBy != task.LockedBy || !again.CompleteBy.Equal(*task.CompleteBy) {
				t.Errorf("resubmitted ID returned LockedBy %q CompleteBy %v, want the stored task", again.LockedBy, again.CompleteBy)
			}
			// Its reserved agent slot was handed back: with two slots and
			// held-1 in one, held-2's call starts while held-1's waits.
			if _, err := c.Submit(ctx, "w", []byte(`"hold"`), &drover.SubmitOptions{ID: "held-2"}); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the agent called for held-2 beside held-1", func() bool { return len(h.attempts("held-2")) == 1 })
			if got := h.attempts("held-1"); len(got) != 1 || got[0] != 1 {
				t.Errorf("held-1 called with attempts %v, want [1]", got)
			}

			if st := c.Stats(); st.EagerStarts < 3 || st.EagerStarts > st.Dispatched {
				t.Errorf("Stats: %d eager starts of %d dispatched; want at least 3 (held-1, held-2 and a quick one), at most all", st.EagerStarts, st.Dispatched)
			}
			h.release <- struct{}{}
			h.release <- struct{}{}
			for _, id := range []string{"held-1", "held-2"} {
				if done := waitTask(t, c, id); done.ProcessState != drover.Processed || string(done.Output) != `"done"` {
					t.Errorf("%s ended %s with output %s, want Processed with \"done\"", id, done.ProcessState, done.Output)
				}
			}
		})
	}
}

// TestSubmitLeavesTaskPending: with NoEagerStart, and for a task with an
// ordering key, Submit stores the task Pending and a claim starts it.
func TestSubmitLeavesTaskPending(t *testing.T) {
	for name, d := range eagerStores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			h := newHeldAgent()
			close(h.release)
			eager := h.client(t, d, 4, drover.Config{InstanceID: "eager"})
			waitAccepting(t, eager, nil)
			keyed, err := eager.Submit(ctx, "w", nil, &drover.SubmitOptions{OrderingKey: "k"})
			if err != nil {
				t.Fatal(err)
			}
			if keyed.ProcessState != drover.Pending || keyed.LockedBy != "" {
				t.Errorf("task with an ordering key: %s LockedBy %q, want Pending and not held", keyed.ProcessState, keyed.LockedBy)
			}
			if done := waitTask(t, eager, keyed.ID); done.ProcessState != drover.Processed {
				t.Errorf("task with an ordering key ended %s", done.ProcessState)
			}
			if err := eager.Stop(ctx); err != nil {
				t.Fatal(err)
			}

			plain := h.client(t, d, 4, drover.Config{InstanceID: "plain", NoEagerStart: true})
			for range 20 {
				task, err := plain.Submit(ctx, "w", nil, nil)
				if err != nil {
					t.Fatal(err)
				}
				if task.ProcessState != drover.Pending || task.LockedBy != "" {
					t.Fatalf("NoEagerStart: submitted task %s LockedBy %q, want Pending and not held", task.ProcessState, task.LockedBy)
				}
				if done := waitTask(t, plain, task.ID); done.ProcessState != drover.Processed {
					t.Errorf("task %s ended %s", task.ID, done.ProcessState)
				}
			}
			if st := plain.Stats(); st.EagerStarts != 0 || st.Dispatched < 20 {
				t.Errorf("NoEagerStart: Stats %d eager starts of %d dispatched, want 0 of at least 20", st.EagerStarts, st.Dispatched)
			}
		})
	}
}

// TestEagerStartKeepsMaxInFlight: tasks started at submission count toward
// the scheduler's MaxInFlight like those it claims, also when many Submits
// and the scheduler's own claims run at once: with every call held in the
// agent, the scheduler ends up holding exactly MaxInFlight tasks, and the
// rest wait Pending until calls finish.
func TestEagerStartKeepsMaxInFlight(t *testing.T) {
	for name, d := range eagerStores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			h := newHeldAgent()
			const maxInFlight = 4
			c := h.client(t, d, 64, drover.Config{Schedulers: 1, MaxInFlight: maxInFlight, ClaimBatch: maxInFlight, InstanceID: "cap"})
			released := false
			defer func() {
				if !released {
					close(h.release)
				}
			}()
			waitAccepting(t, c, []byte(`"quick"`))
			waitFor(t, "the quick tasks finished", func() bool {
				n, err := c.Active(ctx)
				return err == nil && n == 0
			})

			var (
				wg      sync.WaitGroup
				mu      sync.Mutex
				ids     []string
				started int
			)
			for range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 5 {
						task, err := c.Submit(ctx, "w", []byte(`"hold"`), nil)
						if err != nil {
							t.Error(err)
							return
						}
						mu.Lock()
						ids = append(ids, task.ID)
						if task.ProcessState == drover.Processing {
							started++
						}
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			// How many start at submission depends on how the Submits
			// meet the scheduler's claims, which hold room while they run.
			t.Logf("%d of 40 tasks started at submission", started)
			if started > maxInFlight {
				t.Errorf("%d of 40 tasks started at submission, want at most %d", started, maxInFlight)
			}
			held := func() int {
				n, err := d.Reader().TaskCountLockedBy(ctx, &store.TaskCountLockedByParams{Instance: "cap/scheduler-0"})
				if err != nil {
					t.Fatal(err)
				}
				return n
			}
			waitFor(t, "the scheduler to fill its room", func() bool { return held() >= maxInFlight })
			if n := held(); n != maxInFlight {
				t.Fatalf("the scheduler holds %d tasks, MaxInFlight is %d", n, maxInFlight)
			}
			close(h.release)
			released = true
			for _, id := range ids {
				if done := waitTask(t, c, id); done.ProcessState != drover.Processed {
					t.Errorf("task %s ended %s", id, done.ProcessState)
				}
			}
		})
	}
}

// TestEagerStartCopiesTheInput: the agent of the process gets a started
// task's input from memory, after Submit has returned, so Submit must not
// keep the caller's buffer, which the caller may reuse at once.
func TestEagerStartCopiesTheInput(t *testing.T) {
	ctx := context.Background()
	var (
		mu  sync.Mutex
		got = map[string]string{} // task ID → input the agent saw
	)
	agent := drover.Agent{Name: "a", Concurrency: 64, Func: func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) {
		mu.Lock()
		got[r.TaskID] = string(r.Input)
		mu.Unlock()
		return []byte("null"), nil
	}}
	wf := drover.Workflow{Name: "w", Steps: []drover.Step{{Name: "s", Agent: "a", Timeout: time.Minute}}}
	c := startClient(t, drover.Config{Store: newStore(t), Workflows: []drover.Workflow{wf}, Agents: []drover.Agent{agent}})
	want := map[string]string{}
	started := 0
	buf := make([]byte, 0, 64)
	for i := range 50 {
		buf = fmt.Appendf(buf[:0], `{"n":%d}`, i)
		task, err := c.Submit(ctx, "w", buf, nil)
		if err != nil {
			t.Fatal(err)
		}
		want[task.ID] = string(buf)
		if task.ProcessState == drover.Processing {
			started++
		}
	}
	if started == 0 {
		t.Fatal("no task was started at submission")
	}
	for id := range want {
		waitTask(t, c, id)
	}
	mu.Lock()
	defer mu.Unlock()
	for id, w := range want {
		if got[id] != w {
			t.Errorf("task %s: the agent got input %s, want %s", id, got[id], w)
		}
	}
}

// TestEagerStartWithTheInstanceLeaseLost: once another holder has the
// process's instance lease (the process is about to stop its roles), a
// Submit still succeeds: the task is stored Pending, not started by a
// scheduler that may no longer act.
func TestEagerStartWithTheInstanceLeaseLost(t *testing.T) {
	for name, d := range eagerStores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			h := newHeldAgent()
			close(h.release)
			c := h.client(t, d, 4, drover.Config{InstanceID: "lost", LeaseTTL: time.Minute})
			waitAccepting(t, c, nil)
			// Taken over as if it had expired (an hour from now); the
			// process renews only every 20 seconds, after the test.
			err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
				_, ok, err := x.LeaseAcquire(ctx, &store.LeaseAcquireParams{Name: "instance:lost", Holder: "thief", Now: time.Now().Add(time.Hour), TTL: time.Hour})
				if err == nil && !ok {
					err = errors.New("not acquired")
				}
				return err
			})
			if err != nil {
				t.Fatalf("take the instance lease: %v", err)
			}
			task, err := c.Submit(ctx, "w", nil, nil)
			if err != nil {
				t.Fatalf("Submit with the instance lease lost: %v", err)
			}
			if task.ProcessState != drover.Pending || task.LockedBy != "" {
				t.Errorf("Submit with the instance lease lost: %s LockedBy %q, want Pending and not held", task.ProcessState, task.LockedBy)
			}
		})
	}
}

// TestEagerStartReservesNoRoomForKeyedTasks: Submits of tasks with an
// ordering key, waiting for a key that an application's transaction holds,
// set no room aside for eager start; otherwise they would leave the
// scheduler no room to claim unrelated tasks until that transaction ends.
func TestEagerStartReservesNoRoomForKeyedTasks(t *testing.T) {
	ctx := context.Background()
	d := testutil.Postgres(t)
	h := newHeldAgent()
	close(h.release)
	c := h.client(t, d, 8, drover.Config{Schedulers: 1, MaxInFlight: 2, ClaimBatch: 2})
	waitAccepting(t, c, nil)

	// The application holds key k in its open transaction.
	tx, err := d.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := c.SubmitTx(ctx, tx, "w", nil, &drover.SubmitOptions{OrderingKey: "k"}); err != nil {
		t.Fatal(err)
	}
	// Two Submits on k wait for it (together or apart).
	waiting := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := c.Submit(ctx, "w", nil, &drover.SubmitOptions{OrderingKey: "k"})
			waiting <- err
		}()
	}
	waitFor(t, "both Submits on k waiting for the application's transaction", func() bool {
		var n int
		err := d.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n)
		return err == nil && n >= 1
	})
	// Meanwhile an unkeyed task still runs.
	task, err := c.Submit(ctx, "w", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	done, err := c.Wait(wctx, task.ID)
	if err != nil || done.ProcessState != drover.Processed {
		t.Fatalf("an unkeyed task while keyed Submits wait: %v, %v; want Processed", done, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-waiting; err != nil {
			t.Fatal(err)
		}
	}
}
