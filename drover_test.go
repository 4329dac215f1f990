package drover_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/drover-run/drover/internal/testutil"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/internal/clock"
	"github.com/drover-run/drover/internal/flow"
	"github.com/drover-run/drover/store"
	"github.com/drover-run/drover/store/sqlite"
)

// ---- helpers ----

func newStore(t *testing.T) *sqlite.Driver {
	t.Helper()
	return testutil.SQLite(t)
}

// fast fills in the timings that make a test run quickly.
func fast(cfg drover.Config) drover.Config {
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 5 * time.Millisecond
	}
	if cfg.SupervisorInterval == 0 {
		cfg.SupervisorInterval = 20 * time.Millisecond
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = 2 * time.Second
	}
	return cfg
}

// startClient creates and starts a client; it is stopped at cleanup, before
// the store closes.
func startClient(t *testing.T, cfg drover.Config) *drover.Client {
	t.Helper()
	c, err := drover.New(fast(cfg))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if err := c.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return c
}

func waitTask(t *testing.T, c *drover.Client, id string) *drover.Task {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	task, err := c.Wait(ctx, id)
	if err != nil {
		t.Fatalf("Wait(%s): %v", id, err)
	}
	return task
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	waitWithin(t, 15*time.Second, what, cond)
}

// waitWithin is waitFor with its own deadline, for work whose size makes
// its time depend on the machine's load.
func waitWithin(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func events(t *testing.T, c *drover.Client, id string) []*drover.Event {
	t.Helper()
	evs, err := c.Events(context.Background(), drover.EventQuery{TaskID: id})
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

func eventTypes(evs []*drover.Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, string(e.Type))
	}
	return out
}

// wantNothingStored checks the store holds no task and no event.
func wantNothingStored(t *testing.T, c *drover.Client) {
	t.Helper()
	counts, err := c.Counts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for s, n := range counts {
		if n != 0 {
			t.Errorf("%d %s tasks stored", n, s)
		}
	}
	if evs, _ := c.Events(context.Background(), drover.EventQuery{}); len(evs) != 0 {
		t.Errorf("%d events stored", len(evs))
	}
}

func okAgent(name string) drover.Agent {
	return drover.Agent{Name: name, Func: func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) {
		return json.Marshal(name + " done")
	}}
}

// ---- tests ----

func TestMultiStepWorkflowRunsInOrder(t *testing.T) {
	t.Parallel()
	d := newStore(t)
	var (
		mu    sync.Mutex
		calls = map[string][]string{} // task → agents in call order
		prevs = map[string][]string{} // task → PreviousOutput each agent saw
	)
	agent := func(name string) drover.Agent {
		return drover.Agent{Name: name, Func: func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) {
			mu.Lock()
			calls[r.TaskID] = append(calls[r.TaskID], name)
			prevs[r.TaskID] = append(prevs[r.TaskID], string(r.PreviousOutput))
			mu.Unlock()
			var acc string
			if r.PreviousOutput != nil {
				if err := json.Unmarshal(r.PreviousOutput, &acc); err != nil {
					return nil, drover.Permanent(err)
				}
			}
			return json.Marshal(acc + name)
		}}
	}
	c := startClient(t, drover.Config{
		Store: d,
		Workflows: []drover.Workflow{{Name: "pipeline", Steps: []drover.Step{
			{Name: "first", Agent: "A"}, {Name: "second", Agent: "B"}, {Name: "third", Agent: "C"},
		}}},
		Agents: []drover.Agent{agent("A"), agent("B"), agent("C")},
	})
	var ids []string
	for i := range 8 {
		task, err := c.Submit(context.Background(), "pipeline", []byte(fmt.Sprintf(`{"n":%d}`, i)), nil)
		if err != nil {
			t.Fatal(err)
		}
		// Pending, or already started by a scheduler of this client (eager
		// start, see eager_test.go).
		pending := task.ProcessState == drover.Pending && task.LockedBy == "" && task.CompleteBy == nil
		started := task.ProcessState == drover.Processing && strings.HasPrefix(task.LockedBy, c.InstanceID()+"/scheduler-") && task.CompleteBy != nil
		if (!pending && !started) || task.FailureCount != 0 || task.CurrentStep != 0 {
			t.Errorf("fresh task record: %+v; want Pending and not held, or Processing held by this client, at step 0 with FailureCount 0", task)
		}
		ids = append(ids, task.ID)
	}
	for _, id := range ids {
		task := waitTask(t, c, id)
		if task.ProcessState != drover.Processed || string(task.Output) != `"ABC"` {
			t.Errorf("task %s: %s with output %s; want Processed, \"ABC\"", id, task.ProcessState, task.Output)
		}
		for i, s := range task.Steps {
			if s.ProcessState != drover.Processed || s.Attempt != 1 || s.LockedBy != "" || s.CompleteBy != nil ||
				s.StartedAt == nil || s.FinishedAt == nil || s.FinishedAt.Before(*s.StartedAt) {
				t.Errorf("task %s step %d: %+v", id, i, s)
			}
			if i > 0 && s.StartedAt.Before(*task.Steps[i-1].FinishedAt) {
				t.Errorf("task %s step %d started before step %d finished", id, i, i-1)
			}
		}
		mu.Lock()
		if got := strings.Join(calls[id], ","); got != "A,B,C" {
			t.Errorf("task %s: agents called %s, want A,B,C", id, got)
		}
		if got := strings.Join(prevs[id], "|"); got != `|"A"|"AB"` {
			t.Errorf("task %s: previous outputs %s", id, got)
		}
		mu.Unlock()
		want := []string{"submitted", "step_started", "step_processed", "step_started", "step_processed", "step_started", "step_processed", "processed"}
		evs := events(t, c, id)
		got := eventTypes(evs)
		// A claim event may or may not be recorded; the step events must be in this order.
		got = slices.DeleteFunc(got, func(s string) bool { return s == string(drover.EventType("claimed")) })
		if !slices.Equal(got, want) {
			t.Errorf("task %s events %v, want %v", id, got, want)
		}
	}
	// The counts are published after the transaction that finished the
	// tasks commits, which Wait may see first.
	waitFor(t, "the stats of 8 tasks of 3 steps", func() bool {
		st := c.Stats()
		return st.Dispatched == 24 && st.RepliesApplied == 24 && st.TasksFinished == 8
	})
	if st := c.Stats(); st.LateReplies != 0 {
		t.Errorf("stats %+v", st)
	}
}

// One step's idempotency key is the same across agent
// retries, a supervisor recovery and an operator's resubmission.
func TestIdempotencyKeyStableAcrossRetriesRecoveriesAndResubmission(t *testing.T) {
	t.Parallel()
	d := newStore(t)
	type call struct {
		key     string
		attempt int
	}
	var (
		mu    sync.Mutex
		seen  []call
		count atomic.Int64
		hung  = make(chan struct{})
		let   = make(chan struct{}) // lets the hanging call return
	)
	// The injected clock stands still: no deadline passes until the test
	// moves it, however slow the machine.
	clk := clock.NewFake(time.Now())
	const budget = 30 * time.Second
	c := startClient(t, drover.Config{
		Store: d, Clock: clk, LeaseTTL: time.Hour,
		Workflows: []drover.Workflow{{Name: "pay", FailureThreshold: 3, Steps: []drover.Step{
			{Name: "charge", Agent: "payments", Timeout: budget},
		}}},
		Agents: []drover.Agent{{Name: "payments", Retry: drover.RetryPolicy{InitialInterval: 5 * time.Millisecond},
			Func: func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) {
				mu.Lock()
				seen = append(seen, call{r.IdempotencyKey, r.Attempt})
				mu.Unlock()
				switch count.Add(1) {
				case 1:
					return nil, errors.New("connection reset") // transient: retried by the agent
				case 2:
					// Hangs past CompleteBy: the supervisor recovers the
					// step. Once the clock is past it, the call gives up;
					// the runtime sends nothing back.
					close(hung)
					select {
					case <-let:
					case <-ctx.Done():
					}
					return nil, drover.Permanent(errors.New("gave up"))
				case 3:
					return nil, drover.Permanent(errors.New("card expired")) // Error, operator alert
				default:
					return []byte(`"charged"`), nil
				}
			}}},
	})
	task, err := c.Submit(context.Background(), "pay", []byte(`{"amount":10}`), &drover.SubmitOptions{ID: "order-7"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-hung:
	case <-time.After(15 * time.Second):
		t.Fatal("the agent's retry never came")
	}
	clk.Advance(budget + time.Second)
	close(let)
	failed := waitTask(t, c, task.ID)
	if failed.ProcessState != drover.Error || !strings.Contains(failed.LastError, "card expired") {
		t.Fatalf("after the permanent error: %s (%q), want Error", failed.ProcessState, failed.LastError)
	}
	if _, err := c.Resubmit(context.Background(), task.ID, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the resubmitted task to finish", func() bool {
		tk, err := c.Task(context.Background(), task.ID)
		return err == nil && tk.ProcessState == drover.Processed
	})
	done, err := c.Task(context.Background(), task.ID)
	if err != nil {
		t.Fatal(err)
	}
	if string(done.Output) != `"charged"` {
		t.Errorf("output %s", done.Output)
	}
	want := flow.IdempotencyKey("order-7", 0, "charge")
	if done.Steps[0].IdempotencyKey != want {
		t.Errorf("stored key %q, want %q", done.Steps[0].IdempotencyKey, want)
	}
	mu.Lock()
	defer mu.Unlock()
	var attempts []int
	for _, cl := range seen {
		if cl.key != want {
			t.Errorf("a call used key %q, want %q on every call", cl.key, want)
		}
		attempts = append(attempts, cl.attempt)
	}
	if !slices.Equal(attempts, []int{1, 1, 2, 3}) {
		t.Errorf("attempts %v, want [1 1 2 3]: retry, recovery, resubmission", attempts)
	}
	types := strings.Join(eventTypes(events(t, c, task.ID)), " ")
	for _, w := range []string{"step_timed_out", "step_retry", "step_failed", "error", "resubmitted", "processed"} {
		if !strings.Contains(types, w) {
			t.Errorf("history lacks %s: %s", w, types)
		}
	}
	if st := c.Stats(); st.AgentRetries < 1 || st.SupervisorRecoveries < 1 || st.AbandonedCalls < 1 {
		t.Errorf("stats %+v: want a retry, a recovery and an abandoned call", st)
	}
}

func TestSubmitTxCommitsAndRollsBackWithAppData(t *testing.T) {
	t.Parallel()
	d := newStore(t)
	ctx := context.Background()
	c := startClient(t, drover.Config{
		Store:     d,
		Workflows: []drover.Workflow{{Name: "order", Steps: []drover.Step{{Name: "charge", Agent: "payments"}}}},
		Agents:    []drover.Agent{okAgent("payments")},
	})
	if _, err := d.DB().ExecContext(ctx, `CREATE TABLE orders (id TEXT PRIMARY KEY, amount INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	orderExists := func(id string) bool {
		var n int
		if err := d.DB().QueryRowContext(ctx, `SELECT count(*) FROM orders WHERE id = ?`, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	submitIn := func(orderID string, commit bool) (*drover.Task, error) {
		tx, err := d.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id, amount) VALUES (?, 42)`, orderID); err != nil {
			tx.Rollback()
			t.Fatal(err)
		}
		task, err := c.SubmitTx(ctx, tx, "order", []byte(`{"order":"`+orderID+`"}`), &drover.SubmitOptions{ID: "task-" + orderID})
		if err != nil || !commit {
			if rerr := tx.Rollback(); rerr != nil {
				t.Fatal(rerr)
			}
			return task, err
		}
		return task, tx.Commit()
	}

	// Commit: both the order and the task exist, and the task runs.
	if _, err := submitIn("o-1", true); err != nil {
		t.Fatal(err)
	}
	if !orderExists("o-1") {
		t.Error("committed order missing")
	}
	if task := waitTask(t, c, "task-o-1"); task.ProcessState != drover.Processed {
		t.Errorf("committed task ended %s", task.ProcessState)
	}

	// Rollback: neither exists.
	if _, err := submitIn("o-2", false); err != nil {
		t.Fatal(err)
	}
	if orderExists("o-2") {
		t.Error("rolled-back order exists")
	}
	if _, err := c.Task(ctx, "task-o-2"); !errors.Is(err, drover.ErrTaskNotFound) {
		t.Errorf("rolled-back task: err = %v, want ErrTaskNotFound", err)
	}
	if evs := events(t, c, "task-o-2"); len(evs) != 0 {
		t.Errorf("rolled-back task left %d events", len(evs))
	}

	// A failed submission makes the application roll back its own row too.
	tx, err := d.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id, amount) VALUES ('o-3', 1)`); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SubmitTx(ctx, tx, "order", []byte(`{"order":"o-1"}`), &drover.SubmitOptions{ID: "task-o-1"}); err != nil {
		t.Errorf("resubmitting the same task in a transaction: %v (want the existing task)", err)
	}
	if _, err := c.SubmitTx(ctx, tx, "order", []byte(`{"different":true}`), &drover.SubmitOptions{ID: "task-o-1"}); !errors.Is(err, drover.ErrTaskConflict) {
		t.Errorf("conflicting SubmitTx: err = %v, want ErrTaskConflict", err)
	}
	tx.Rollback()
	if orderExists("o-3") {
		t.Error("order o-3 exists after rollback")
	}

	// Only a *sql.Tx on this store will do.
	var notTx any = d.DB()
	if _, err := c.SubmitTx(ctx, notTx, "order", []byte(`{}`), &drover.SubmitOptions{ID: "task-x"}); !errors.Is(err, store.ErrUnsupportedTx) {
		t.Errorf("SubmitTx with a %T: err = %v, want ErrUnsupportedTx", notTx, err)
	}
	if _, err := c.Task(ctx, "task-x"); !errors.Is(err, drover.ErrTaskNotFound) {
		t.Errorf("task-x: %v", err)
	}
}

func TestBadInputsStoreNothing(t *testing.T) {
	t.Parallel()
	d := newStore(t)
	c, err := drover.New(drover.Config{
		Store: d, MaxInputBytes: 64,
		Workflows: []drover.Workflow{{Name: "order", Steps: []drover.Step{{Name: "charge", Agent: "payments"}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	big := []byte(`"` + strings.Repeat("x", 64) + `"`)
	cases := []struct {
		name     string
		workflow string
		input    []byte
		id       string
		want     error
		opts     drover.SubmitOptions
	}{
		{"unknown workflow", "nope", []byte(`{}`), "", drover.ErrUnknownWorkflow, drover.SubmitOptions{}},
		{"invalid JSON", "order", []byte(`{"a":`), "", drover.ErrInvalidInput, drover.SubmitOptions{}},
		{"not JSON at all", "order", []byte("hello"), "", drover.ErrInvalidInput, drover.SubmitOptions{}},
		{"input too large", "order", big, "", drover.ErrInputTooLarge, drover.SubmitOptions{}},
		{"task ID with a space", "order", []byte(`{}`), "has space", drover.ErrInvalidTaskID, drover.SubmitOptions{}},
		{"task ID with a control character", "order", []byte(`{}`), "bad\x00id", drover.ErrInvalidTaskID, drover.SubmitOptions{}},
		{"task ID too long", "order", []byte(`{}`), strings.Repeat("a", 201), drover.ErrInvalidTaskID, drover.SubmitOptions{}},
		{"callback events without a callback URL", "order", []byte(`{}`), "", drover.ErrInvalidInput,
			drover.SubmitOptions{CallbackEvents: []string{"alerts"}}},
		{"unknown callback event", "order", []byte(`{}`), "", drover.ErrInvalidInput,
			drover.SubmitOptions{CallbackURL: "https://hooks.example.com/x", CallbackEvents: []string{"alerts", "step_retry"}}},
	}
	for _, tc := range cases {
		opts := tc.opts
		opts.ID = tc.id
		_, err := c.Submit(ctx, tc.workflow, tc.input, &opts)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.want)
		}
		if errors.Is(tc.want, drover.ErrInputTooLarge) && errors.Is(err, drover.ErrInvalidInput) {
			t.Errorf("%s: too large reported as invalid", tc.name)
		}
	}
	// All or none: one bad submission in a batch stores none.
	_, err = c.SubmitMany(ctx, []drover.SubmitParams{
		{Workflow: "order", Input: []byte(`{"ok":1}`)},
		{Workflow: "order", Input: []byte(`{`)},
	})
	if !errors.Is(err, drover.ErrInvalidInput) {
		t.Errorf("SubmitMany with a bad input: err = %v", err)
	}
	wantNothingStored(t, c)

	// Other bad inputs.
	if _, err := c.Task(ctx, "missing"); !errors.Is(err, drover.ErrTaskNotFound) {
		t.Errorf("Task(missing): %v", err)
	}
	if _, err := c.Tasks(ctx, drover.ListParams{States: []drover.ProcessState{"Running"}}); !errors.Is(err, drover.ErrInvalidInput) {
		t.Errorf("Tasks with an unknown state: %v", err)
	}
	neg := -1
	if _, err := c.Resubmit(ctx, "missing", &drover.ResubmitOptions{FromStep: &neg}); !errors.Is(err, drover.ErrNoSuchStep) {
		t.Errorf("Resubmit from step -1: %v", err)
	}
	if _, err := c.Resubmit(ctx, "missing", nil); !errors.Is(err, drover.ErrTaskNotFound) {
		t.Errorf("Resubmit(missing): %v", err)
	}
	if _, err := c.Cancel(ctx, "missing", ""); !errors.Is(err, drover.ErrTaskNotFound) {
		t.Errorf("Cancel(missing): %v", err)
	}
	// An empty input is the JSON null document.
	task, err := c.Submit(ctx, "order", nil, nil)
	if err != nil || string(task.Input) != "null" {
		t.Errorf("Submit(nil input) = %v, %v", task, err)
	}
}

func TestSubmitIsIdempotentByID(t *testing.T) {
	t.Parallel()
	d := newStore(t)
	c, err := drover.New(drover.Config{Store: d,
		Workflows: []drover.Workflow{{Name: "order", Steps: []drover.Step{{Name: "charge", Agent: "payments"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	first, err := c.Submit(ctx, "order", []byte(`{"a":1}`), &drover.SubmitOptions{ID: "o-1"})
	if err != nil {
		t.Fatal(err)
	}
	stored, err := c.Task(ctx, "o-1")
	if err != nil || stored.ID != first.ID {
		t.Fatalf("Task(o-1) = %v, %v", stored, err)
	}
	again, err := c.Submit(ctx, "order", []byte(`{"a":1}`), &drover.SubmitOptions{ID: "o-1"})
	if err != nil || again.ID != "o-1" || !again.CreatedAt.Equal(stored.CreatedAt) {
		t.Errorf("same submission again: %+v, %v; want the existing task", again, err)
	}
	if _, err := c.Submit(ctx, "order", []byte(`{"a":2}`), &drover.SubmitOptions{ID: "o-1"}); !errors.Is(err, drover.ErrTaskConflict) {
		t.Errorf("different input under the same ID: err = %v, want ErrTaskConflict", err)
	}
	if evs := events(t, c, "o-1"); len(evs) != 1 {
		t.Errorf("%d events after three submissions of one ID, want 1", len(evs))
	}
	got, _ := c.Task(ctx, "o-1")
	if string(got.Input) != `{"a":1}` {
		t.Errorf("input changed to %s", got.Input)
	}
	// Generated IDs are distinct.
	a, _ := c.Submit(ctx, "order", []byte(`{}`), nil)
	b, _ := c.Submit(ctx, "order", []byte(`{}`), nil)
	if a == nil || b == nil || a.ID == b.ID || a.ID == "" {
		t.Errorf("generated IDs: %v, %v", a, b)
	}
}

// Submitting an ID again through the Client: the same JSON value in other
// bytes is the same submission; another ordering key, callback URL or
// workflow is ErrTaskConflict saying which.
func TestSubmitSameIDThroughClient(t *testing.T) {
	t.Parallel()
	d := newStore(t)
	ctx := context.Background()
	c, err := drover.New(drover.Config{
		Store: d,
		Workflows: []drover.Workflow{
			{Name: "order", Steps: []drover.Step{{Name: "charge", Agent: "payments"}}},
			{Name: "other", Steps: []drover.Step{{Name: "charge", Agent: "payments"}}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	opts := drover.SubmitOptions{ID: "o-1", OrderingKey: "cust-1", CallbackURL: "http://127.0.0.1:9/cb"}
	first, err := c.Submit(ctx, "order", []byte(`{"a":1,"b":[true,null]}`), &opts)
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.Submit(ctx, "order", []byte("{ \"b\": [ true, null ],\n\"a\": 1.0 }"), &opts)
	if err != nil || again.ID != first.ID || !again.CreatedAt.Equal(first.CreatedAt) {
		t.Fatalf("the same value in other bytes: %v, %v", again, err)
	}
	for _, c2 := range []struct {
		workflow string
		opts     drover.SubmitOptions
		want     string
	}{
		{"order", drover.SubmitOptions{ID: "o-1", OrderingKey: "cust-2", CallbackURL: opts.CallbackURL}, "ordering key"},
		{"order", drover.SubmitOptions{ID: "o-1", CallbackURL: opts.CallbackURL}, "ordering key"},
		{"order", drover.SubmitOptions{ID: "o-1", OrderingKey: "cust-1"}, "callback URL"},
		{"other", opts, "workflow"},
	} {
		_, err := c.Submit(ctx, c2.workflow, []byte(`{"a":1,"b":[true,null]}`), &c2.opts)
		if !errors.Is(err, drover.ErrTaskConflict) || !strings.Contains(err.Error(), c2.want) {
			t.Errorf("%s %+v: err = %v, want ErrTaskConflict naming the %s", c2.workflow, c2.opts, err, c2.want)
		}
	}
	if evs := events(t, c, "o-1"); len(evs) != 1 {
		t.Errorf("%d events, want the one submission's", len(evs))
	}
}

func TestInvalidWorkflowsReportEveryProblem(t *testing.T) {
	t.Parallel()
	d := newStore(t)
	_, err := drover.New(drover.Config{Store: d, Workflows: []drover.Workflow{
		{Name: "bad name", FailureThreshold: -1, OnFailure: "retry-forever", RetryDelay: -time.Second},
		{Name: "w2", Steps: []drover.Step{
			{Name: "", Agent: ""},
			{Name: "x", Agent: "a", Timeout: -time.Second},
			{Name: "x", Agent: "a", Compensation: "bad agent"},
		}},
		{Name: "ok", Steps: []drover.Step{{Name: "s", Agent: "a"}}},
		{Name: "ok", Steps: []drover.Step{{Name: "s", Agent: "a"}}},
	}})
	if !errors.Is(err, drover.ErrInvalidWorkflow) {
		t.Fatalf("err = %v, want ErrInvalidWorkflow", err)
	}
	var all []*drover.ValidationError
	var walk func(error)
	walk = func(e error) {
		var ve *drover.ValidationError
		if errors.As(e, &ve) && e == error(ve) {
			all = append(all, ve)
			return
		}
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, x := range j.Unwrap() {
				walk(x)
			}
		}
	}
	walk(err)
	byName := map[string]*drover.ValidationError{}
	for _, ve := range all {
		byName[ve.Workflow] = ve
	}
	if ve := byName["bad name"]; ve == nil || len(ve.Problems) != 5 {
		t.Errorf("workflow %q: problems %v, want 5 (name, no steps, threshold, policy, delay)", "bad name", ve)
	}
	if ve := byName["w2"]; ve == nil || len(ve.Problems) != 5 {
		t.Errorf("workflow w2: problems %v, want 5 (step name, step agent, timeout, duplicate name, compensation agent)", ve)
	}
	if !strings.Contains(err.Error(), `"ok" defined twice`) {
		t.Errorf("duplicate workflow not reported: %v", err)
	}

	for _, cfg := range []drover.Config{
		{},
		{Store: d, InstanceID: "has space"},
		{Store: d, Agents: []drover.Agent{{Name: "a"}}},
		{Store: d, Agents: []drover.Agent{okAgent("a"), okAgent("a")}},
	} {
		if _, err := drover.New(cfg); !errors.Is(err, drover.ErrInvalidConfig) {
			t.Errorf("New(%+v): err = %v, want ErrInvalidConfig", cfg, err)
		}
	}
}

func TestUnknownAgentRefusedAtStart(t *testing.T) {
	t.Parallel()
	d := newStore(t)
	wf := []drover.Workflow{{Name: "order", Steps: []drover.Step{
		{Name: "charge", Agent: "payments", Compensation: "refunds"},
		{Name: "ship", Agent: "ghost"},
	}}}
	c, err := drover.New(drover.Config{Store: d, Workflows: wf, Agents: []drover.Agent{okAgent("payments")}})
	if err != nil {
		t.Fatal(err)
	}
	err = c.Start(context.Background())
	if !errors.Is(err, drover.ErrUnknownAgent) || !strings.Contains(err.Error(), "ghost") || !strings.Contains(err.Error(), "refunds") {
		t.Fatalf("Start: err = %v, want ErrUnknownAgent naming ghost and refunds", err)
	}
	wantNothingStored(t, c)
	if err := c.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}

	// Declared as running elsewhere, they are fine; so is a process without
	// the Agent role.
	for _, cfg := range []drover.Config{
		{Store: d, Workflows: wf, Agents: []drover.Agent{okAgent("payments")}, ExternalAgents: []string{"ghost", "refunds"}},
		{Store: d, Workflows: wf, Roles: drover.Roles{Scheduler: true, Supervisor: true}},
	} {
		c := startClient(t, cfg)
		if err := c.Stop(context.Background()); err != nil {
			t.Error(err)
		}
	}
}

// TestAgentWithTwoProvidersRefused: an agent name registered in
// Config.Agents (run in this process) and listed in Config.ExternalAgents
// (run by a remote agent) would be served by whichever took the request
// first. New refuses it, naming the agent and both providers.
func TestAgentWithTwoProvidersRefused(t *testing.T) {
	t.Parallel()
	d := newStore(t)
	wf := []drover.Workflow{{Name: "pay", Steps: []drover.Step{{Name: "charge", Agent: "payments"}}}}
	for _, roles := range []drover.Roles{drover.AllRoles, {Scheduler: true}} {
		_, err := drover.New(drover.Config{Store: d, Workflows: wf, Roles: roles,
			Agents: []drover.Agent{okAgent("payments"), okAgent("shipping")}, ExternalAgents: []string{"payments", "refunds", "payments"}})
		if !errors.Is(err, drover.ErrInvalidConfig) {
			t.Fatalf("roles %+v: New: err = %v, want ErrInvalidConfig", roles, err)
		}
		for _, m := range []string{`agent "payments" has two providers`, "Config.Agents", "Config.ExternalAgents"} {
			if !strings.Contains(err.Error(), m) {
				t.Errorf("roles %+v: error %q does not mention %q", roles, err, m)
			}
		}
		if n := strings.Count(err.Error(), "two providers"); n != 1 {
			t.Errorf("roles %+v: %d conflicts reported, want 1 (payments listed twice is one conflict): %v", roles, n, err)
		}
	}
}

func TestStartNeedsMigratedStore(t *testing.T) {
	t.Parallel()
	d, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "fresh.db"), sqlite.Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	c, err := drover.New(drover.Config{Store: d})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); !errors.Is(err, drover.ErrNotMigrated) {
		t.Fatalf("Start on an unmigrated store: %v", err)
	}
	if err := c.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); !errors.Is(err, drover.ErrAlreadyStarted) {
		t.Errorf("second Start: %v", err)
	}
	if err := c.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func collect(t *testing.T, ch <-chan *drover.Event, n int, stop func(*drover.Event) bool) []*drover.Event {
	t.Helper()
	var out []*drover.Event
	timeout := time.After(20 * time.Second)
	for n < 0 || len(out) < n {
		select {
		case e, ok := <-ch:
			if !ok {
				t.Fatalf("subscription closed after %d events", len(out))
			}
			out = append(out, e)
			if stop != nil && stop(e) {
				return out
			}
		case <-timeout:
			t.Fatalf("timed out after %d events", len(out))
		}
	}
	return out
}

func ids(evs []*drover.Event) []int64 {
	var out []int64
	for _, e := range evs {
		out = append(out, e.ID)
	}
	return out
}

// startTwoSteps starts a client running the workflow "two": steps a and b,
// whose agents succeed.
func startTwoSteps(t *testing.T) *drover.Client {
	t.Helper()
	return startClient(t, drover.Config{
		Store: newStore(t),
		Workflows: []drover.Workflow{{Name: "two", Steps: []drover.Step{
			{Name: "a", Agent: "A"}, {Name: "b", Agent: "B"},
		}}},
		Agents: []drover.Agent{okAgent("A"), okAgent("B")},
	})
}

func TestSubscribeDeliversEveryEventInOrderAndResumes(t *testing.T) {
	t.Parallel()
	c := startTwoSteps(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Subscribed before the task exists; other tasks run alongside.
	sub := c.Subscribe(ctx, drover.Subscription{TaskID: "watched", PollInterval: 5 * time.Millisecond})
	for i := range 3 {
		if _, err := c.Submit(ctx, "two", []byte(fmt.Sprintf(`{"other":%d}`, i)), nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Submit(ctx, "two", []byte(`{}`), &drover.SubmitOptions{ID: "watched"}); err != nil {
		t.Fatal(err)
	}
	got := collect(t, sub, -1, func(e *drover.Event) bool { return e.Type == "processed" })
	for _, e := range got {
		if e.TaskID != "watched" {
			t.Errorf("event of task %s on a subscription to watched", e.TaskID)
		}
	}
	stored := events(t, c, "watched")
	if !slices.Equal(ids(got), ids(stored)) {
		t.Errorf("subscription delivered %v, history has %v", ids(got), ids(stored))
	}
	if len(got) < 6 || got[0].Type != "submitted" {
		t.Errorf("events %v", eventTypes(got))
	}
	// A subscriber that reconnects after the third event misses nothing.
	resumed := c.Subscribe(ctx, drover.Subscription{TaskID: "watched", AfterID: stored[2].ID, PollInterval: 5 * time.Millisecond})
	rest := collect(t, resumed, len(stored)-3, nil)
	if !slices.Equal(ids(rest), ids(stored[3:])) {
		t.Errorf("resumed subscription delivered %v, want %v", ids(rest), ids(stored[3:]))
	}
	cancel()
	// The channels close when the context ends.
	for _, ch := range []<-chan *drover.Event{sub, resumed} {
		for range ch {
		}
	}
}

// A subscription with UntilFinal closes once its task is final and every
// event up to then was delivered, also when the task is final already.
func TestSubscribeUntilFinal(t *testing.T) {
	t.Parallel()
	c := startTwoSteps(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.Submit(ctx, "two", []byte(`{}`), &drover.SubmitOptions{ID: "w"}); err != nil {
		t.Fatal(err)
	}
	drain := func(s drover.Subscription) []*drover.Event {
		var got []*drover.Event
		for e := range c.Subscribe(ctx, s) {
			got = append(got, e)
		}
		if ctx.Err() != nil {
			t.Fatal("the subscription did not end before its context")
		}
		return got
	}
	got := drain(drover.Subscription{TaskID: "w", UntilFinal: true, PollInterval: 5 * time.Millisecond})
	stored := events(t, c, "w")
	if !slices.Equal(ids(got), ids(stored)) || got[len(got)-1].Type != "processed" {
		t.Fatalf("delivered %v, history %v", eventTypes(got), eventTypes(stored))
	}
	// Final already, resumed after its last event: closes with nothing.
	if rest := drain(drover.Subscription{TaskID: "w", UntilFinal: true, AfterID: stored[len(stored)-1].ID}); len(rest) != 0 {
		t.Fatalf("after the last event: %v", eventTypes(rest))
	}
	// A task that does not exist (or was deleted): nothing more comes.
	if none := drain(drover.Subscription{TaskID: "nope", UntilFinal: true}); len(none) != 0 {
		t.Fatalf("unknown task: %v", eventTypes(none))
	}
}

func TestAlertSubscriptionGetsErrorAlerts(t *testing.T) {
	t.Parallel()
	d := newStore(t)
	c := startClient(t, drover.Config{
		Store: d,
		Workflows: []drover.Workflow{
			{Name: "doomed", Steps: []drover.Step{{Name: "charge", Agent: "declines"}}},
			{Name: "fine", Steps: []drover.Step{{Name: "charge", Agent: "accepts"}}},
		},
		Agents: []drover.Agent{okAgent("accepts"), {Name: "declines", Func: func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) {
			return nil, drover.Permanent(errors.New("card declined"))
		}}},
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	alerts := c.Subscribe(ctx, drover.Subscription{AlertsOnly: true, PollInterval: 5 * time.Millisecond})
	if _, err := c.Submit(ctx, "fine", []byte(`{}`), &drover.SubmitOptions{ID: "fine-1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Submit(ctx, "doomed", []byte(`{}`), &drover.SubmitOptions{ID: "doomed-1"}); err != nil {
		t.Fatal(err)
	}
	if task := waitTask(t, c, "fine-1"); task.ProcessState != drover.Processed {
		t.Fatalf("fine-1 ended %s", task.ProcessState)
	}
	got := collect(t, alerts, -1, func(e *drover.Event) bool { return e.Type == "error" })
	for _, e := range got {
		if !e.Alert || e.TaskID != "doomed-1" {
			t.Errorf("alert subscription delivered %+v", e)
		}
	}
	last := got[len(got)-1]
	if last.State != drover.Error || !strings.Contains(last.Message, "card declined") {
		t.Errorf("error alert: %+v", last)
	}
	if task, _ := c.Task(ctx, "doomed-1"); task.ProcessState != drover.Error {
		t.Errorf("doomed-1 is %s", task.ProcessState)
	}
}

func TestCancelAndResubmitViaClient(t *testing.T) {
	t.Parallel()
	d := newStore(t)
	release := make(chan struct{})
	var (
		calls atomic.Int64
		mu    sync.Mutex
		keys  []string
	)
	c := startClient(t, drover.Config{
		Store:     d,
		Workflows: []drover.Workflow{{Name: "ship", Steps: []drover.Step{{Name: "book", Agent: "carrier", Timeout: 20 * time.Second}}}},
		Agents: []drover.Agent{{Name: "carrier", Func: func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) {
			mu.Lock()
			keys = append(keys, r.IdempotencyKey)
			mu.Unlock()
			if calls.Add(1) == 1 {
				<-release // slow carrier
				return []byte(`"booked late"`), nil
			}
			return []byte(`"booked"`), nil
		}}},
	})
	ctx := context.Background()
	if _, err := c.Submit(ctx, "ship", []byte(`{}`), &drover.SubmitOptions{ID: "s-1"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the first call", func() bool { return calls.Load() == 1 })
	task, err := c.Cancel(ctx, "s-1", "customer cancelled")
	if err != nil || task.ProcessState != drover.Cancelled {
		t.Fatalf("Cancel: %v, %v", task, err)
	}
	if _, err := c.Cancel(ctx, "s-1", "again"); !errors.Is(err, drover.ErrAlreadyFinal) {
		t.Errorf("second Cancel: %v", err)
	}
	// The slow call answers after the cancel: its reply is discarded.
	close(release)
	waitFor(t, "the late reply to be discarded", func() bool { return c.Stats().LateReplies == 1 })
	if task, _ := c.Task(ctx, "s-1"); task.ProcessState != drover.Cancelled || task.Steps[0].ProcessState != drover.Cancelled {
		t.Errorf("after the late reply: %s / %s", task.ProcessState, task.Steps[0].ProcessState)
	}
	if _, err := c.Resubmit(ctx, "s-1", &drover.ResubmitOptions{Actor: "alice"}); err != nil {
		t.Fatal(err)
	}
	done := waitTask(t, c, "s-1")
	if done.ProcessState != drover.Processed || string(done.Output) != `"booked"` || done.Steps[0].Attempt != 2 {
		t.Errorf("after resubmit: %s output %s attempt %d", done.ProcessState, done.Output, done.Steps[0].Attempt)
	}
	if _, err := c.Resubmit(ctx, "s-1", nil); !errors.Is(err, drover.ErrNotResubmittable) {
		t.Errorf("Resubmit of a Processed task: %v", err)
	}
	three := 3
	if _, err := c.Resubmit(ctx, "s-1", &drover.ResubmitOptions{FromStep: &three}); err == nil {
		t.Error("Resubmit from a step that does not exist succeeded")
	}
	mu.Lock()
	if len(keys) != 2 || keys[0] != keys[1] {
		t.Errorf("keys %v: want the same key on both calls", keys)
	}
	mu.Unlock()
	var resubmitted *drover.Event
	for _, e := range events(t, c, "s-1") {
		if e.Type == "resubmitted" {
			resubmitted = e
		}
	}
	if resubmitted == nil || resubmitted.Actor != "alice" {
		t.Errorf("resubmitted event: %+v", resubmitted)
	}
}

// A step that fails for good under PolicyCompensate has the completed steps
// undone, last first.
func TestCompensationEndToEnd(t *testing.T) {
	t.Parallel()
	d := newStore(t)
	var (
		mu    sync.Mutex
		order []string
	)
	rec := func(name string, out string, err error) drover.Agent {
		return drover.Agent{Name: name, Func: func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) {
			mu.Lock()
			order = append(order, name+":"+string(r.StepOutput))
			mu.Unlock()
			return []byte(out), err
		}}
	}
	c := startClient(t, drover.Config{
		Store: d,
		Workflows: []drover.Workflow{{Name: "trip", OnFailure: drover.PolicyCompensate, Steps: []drover.Step{
			{Name: "flight", Agent: "air", Compensation: "air-undo"},
			{Name: "hotel", Agent: "rooms", Compensation: "rooms-undo"},
			{Name: "car", Agent: "cars"},
		}}},
		Agents: []drover.Agent{
			rec("air", `"F1"`, nil), rec("rooms", `"H1"`, nil), rec("cars", ``, drover.Permanent(errors.New("no cars"))),
			rec("air-undo", `"ok"`, nil), rec("rooms-undo", `"ok"`, nil),
		},
	})
	if _, err := c.Submit(context.Background(), "trip", []byte(`{}`), &drover.SubmitOptions{ID: "trip-1"}); err != nil {
		t.Fatal(err)
	}
	task := waitTask(t, c, "trip-1")
	if task.ProcessState != drover.Compensated {
		t.Fatalf("trip ended %s (%s)", task.ProcessState, task.LastError)
	}
	mu.Lock()
	defer mu.Unlock()
	if got := strings.Join(order, " "); got != `air: rooms: cars: rooms-undo:"H1" air-undo:"F1"` {
		t.Errorf("calls %s", got)
	}
}

// TestCompensationUndoesTimedOutStepNotDeclinedOne: with PolicyCompensate a
// step that timed out past its threshold is undone (no reply came: its call
// may have taken effect), a step whose agent failed it permanently is not
// (the agent said it did not take effect); steps that completed are undone
// in both cases, last first.
func TestCompensationUndoesTimedOutStepNotDeclinedOne(t *testing.T) {
	t.Parallel()
	d := newStore(t)
	var (
		mu    sync.Mutex
		calls = map[string][]string{} // task ID → agent:key
	)
	record := func(name string, r *drover.AgentRequest) {
		mu.Lock()
		calls[r.TaskID] = append(calls[r.TaskID], name+":"+r.IdempotencyKey)
		mu.Unlock()
	}
	agent := func(name string, f func(ctx context.Context, r *drover.AgentRequest) ([]byte, error)) drover.Agent {
		return drover.Agent{Name: name, Func: func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) {
			record(name, r)
			return f(ctx, r)
		}}
	}
	done := func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) { return []byte(`"ok"`), nil }
	c := startClient(t, drover.Config{
		Store: d,
		Workflows: []drover.Workflow{
			{Name: "declined", OnFailure: drover.PolicyCompensate, Steps: []drover.Step{
				{Name: "flight", Agent: "air", Compensation: "air-undo"},
				{Name: "car", Agent: "cars-declined", Compensation: "cars-undo"},
			}},
			{Name: "silent", OnFailure: drover.PolicyCompensate, FailureThreshold: 1, Steps: []drover.Step{
				{Name: "flight", Agent: "air", Compensation: "air-undo"},
				{Name: "car", Agent: "cars-silent", Compensation: "cars-undo", Timeout: 200 * time.Millisecond},
			}},
		},
		Agents: []drover.Agent{
			agent("air", done), agent("air-undo", done), agent("cars-undo", done),
			agent("cars-declined", func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) {
				return nil, drover.Permanent(errors.New("no cars"))
			}),
			// Never answers: the call ends at CompleteBy without a reply.
			agent("cars-silent", func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) {
				<-ctx.Done()
				return nil, ctx.Err()
			}),
		},
	})
	for _, id := range []string{"declined", "silent"} {
		if _, err := c.Submit(context.Background(), id, []byte(`{}`), &drover.SubmitOptions{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	for id, want := range map[string]string{
		"declined": "air:declined/0/flight cars-declined:declined/1/car air-undo:declined/0/flight/compensate",
		"silent":   "air:silent/0/flight cars-silent:silent/1/car cars-undo:silent/1/car/compensate air-undo:silent/0/flight/compensate",
	} {
		task := waitTask(t, c, id)
		if task.ProcessState != drover.Compensated {
			t.Fatalf("%s ended %s (%s)", id, task.ProcessState, task.LastError)
		}
		mu.Lock()
		got := strings.Join(calls[id], " ")
		mu.Unlock()
		if got != want {
			t.Errorf("%s: calls\n got %s\nwant %s", id, got, want)
		}
	}
}

// Stop lets agent calls in flight run on until they finish; the result of one
// that finishes while the client stops must not be thrown away. (Its work was
// done; dropping the reply makes a restarted instance, or the supervisor,
// redo it.)
func TestStopKeepsResultOfCallFinishingDuringStop(t *testing.T) {
	t.Parallel()
	d := newStore(t)
	release := make(chan struct{})
	var calls atomic.Int64
	var started, returned atomic.Bool
	cfg := fast(drover.Config{
		Store: d, InstanceID: "node-1", Roles: drover.Roles{Scheduler: true, Agent: true},
		Workflows: []drover.Workflow{{Name: "w", Steps: []drover.Step{{Name: "s", Agent: "a", Timeout: 20 * time.Second}}}},
		Agents: []drover.Agent{{Name: "a", Func: func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) {
			calls.Add(1)
			started.Store(true)
			<-release
			defer returned.Store(true)
			return []byte(`"done"`), nil
		}}},
	})
	c, err := drover.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Submit(ctx, "w", []byte(`{}`), &drover.SubmitOptions{ID: "t-1"}); err != nil {
		t.Fatal(err)
	}
	// The agent function itself must be running (a dispatched step whose
	// call has not started yet is not started at all once Stop begins).
	waitFor(t, "the call to start", started.Load)
	// Stop waits for calls in flight, up to its context: this one is held.
	stopCtx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	err = c.Stop(stopCtx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop returned %v while a call was in flight, want context.DeadlineExceeded", err)
	}
	close(release) // the call finishes after the roles were told to stop
	waitFor(t, "the call to return", returned.Load)

	// The roles then end and free the instance ID: the same node starts
	// again. Its scheduler applies the kept reply (applied before the
	// stop ended, or queued in the store); a lost one would make it store
	// the request again (Restore), and the agent would be called twice.
	again, err := drover.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the stopped client to free its instance ID", func() bool {
		err := again.Start(ctx)
		if err != nil && !errors.Is(err, drover.ErrInstanceInUse) {
			t.Fatalf("restart: %v", err)
		}
		return err == nil
	})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if err := again.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	tk := waitTask(t, again, "t-1")
	if tk.ProcessState != drover.Processed || tk.Steps[0].Attempt != 1 || string(tk.Output) != `"done"` || calls.Load() != 1 {
		t.Errorf("task %s, step attempt %d, output %s, %d agent calls; want Processed at attempt 1 with the call's "+
			"output, one call (the reply of the call that finished during Stop must not be lost)",
			tk.ProcessState, tk.Steps[0].Attempt, tk.Output, calls.Load())
	}
}

// The store handle a submitting application uses is the driver's own.
func TestDBIsTheStoreDatabase(t *testing.T) {
	t.Parallel()
	d := newStore(t)
	var _ *sql.DB = d.DB()
	var n int
	if err := d.DB().QueryRow(`SELECT count(*) FROM tasks`).Scan(&n); err != nil {
		t.Fatalf("DB() is not the store's database: %v", err)
	}
}

// An instance dies mid-call; another one, with its own ID, gets the
// tasks back through its supervisor once their CompleteBy passes, and
// finishes them.
func TestAnotherInstanceRecoversACrashedOnesTasks(t *testing.T) {
	t.Parallel()
	d := newStore(t)
	wf := []drover.Workflow{{Name: "w", FailureThreshold: 5, Steps: []drover.Step{
		{Name: "one", Agent: "a", Timeout: 300 * time.Millisecond},
		{Name: "two", Agent: "a", Timeout: 300 * time.Millisecond},
	}}}
	var hung atomic.Int64
	c1, err := drover.New(fast(drover.Config{Store: d, InstanceID: "dies", Workflows: wf,
		Agents: []drover.Agent{{Name: "a", Func: func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) {
			hung.Add(1)
			<-ctx.Done()
			return nil, ctx.Err()
		}}}}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c1.Start(ctx); err != nil {
		t.Fatal(err)
	}
	var taskIDs []string
	for i := range 4 {
		task, err := c1.Submit(ctx, "w", []byte(fmt.Sprintf(`{"i":%d}`, i)), nil)
		if err != nil {
			t.Fatal(err)
		}
		taskIDs = append(taskIDs, task.ID)
	}
	waitFor(t, "every first call to hang", func() bool { return hung.Load() >= 4 })
	// "Crash": stop without waiting for the calls.
	stopCtx, cancel := context.WithTimeout(ctx, time.Millisecond)
	_ = c1.Stop(stopCtx)
	cancel()
	t.Cleanup(func() { _ = c1.Stop(context.Background()) }) // it may have stopped already

	c2 := startClient(t, drover.Config{Store: d, InstanceID: "survivor", Workflows: wf, Agents: []drover.Agent{okAgent("a")}})
	for _, id := range taskIDs {
		task := waitTask(t, c2, id)
		if task.ProcessState != drover.Processed {
			t.Errorf("task %s ended %s (%s)", id, task.ProcessState, task.LastError)
			continue
		}
		if task.Steps[0].Attempt < 2 || task.Steps[0].FailureCount < 1 {
			t.Errorf("task %s step 0: attempt %d, failures %d; want a recovery", id, task.Steps[0].Attempt, task.Steps[0].FailureCount)
		}
		var recoveredBy string
		for _, e := range events(t, c2, id) {
			if e.Type == "step_timed_out" {
				recoveredBy = e.Actor
			}
		}
		if recoveredBy != "survivor/supervisor" {
			t.Errorf("task %s recovered by %q", id, recoveredBy)
		}
	}
}
