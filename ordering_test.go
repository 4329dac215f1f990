package drover_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/internal/testutil"
	"github.com/drover-run/drover/store"
)

// pgStore opens a migrated PostgreSQL store in a fresh schema, dropped when
// the test ends. Like the driver's own tests it needs
// DROVER_TEST_DATABASE_URL and fails without it, unless
// DROVER_TEST_POSTGRES=skip.
func pgStore(t *testing.T) store.Driver {
	t.Helper()
	return testutil.Postgres(t)
}

// bothStores runs fn on SQLite and on PostgreSQL.
func bothStores(t *testing.T, fn func(t *testing.T, d store.Driver)) {
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		fn(t, newStore(t))
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		fn(t, pgStore(t))
	})
}

// TestOrderedTasksRunOneAtATimePerKey submits many tasks over a few ordering
// keys (some keys from several producers at once) and checks that, per key,
// the tasks ran one at a time in the order of their positions, that positions
// follow each producer's submit order, and that different keys ran at the
// same time — with transient agent failures and supervisor recoveries on the
// way.
func TestOrderedTasksRunOneAtATimePerKey(t *testing.T) {
	t.Parallel()
	bothStores(t, testOrderedTasks)
}

type orderedInput struct {
	Key      string `json:"key"`
	Producer int    `json:"producer"`
	N        int    `json:"n"` // submit order within the producer
}

// orderedCall is one agent call: ticks of a process-wide counter at its
// start and end, so calls compare without clock resolution.
type orderedCall struct {
	task       string
	in         orderedInput
	start, end int64
	abandoned  bool // ended by its deadline (CompleteBy): over by contract
}

func testOrderedTasks(t *testing.T, d store.Driver) {
	const (
		perKey    = 8 // tasks per key
		producers = 2 // producers submitting to the "shared" key at once
	)
	keys := []string{"alpha", "beta", "gamma", "delta"} // one producer each
	allKeys := append(append([]string(nil), keys...), "shared")

	var (
		tick     atomic.Int64
		mu       sync.Mutex
		calls    []*orderedCall
		tries    = map[string]int{} // idempotency key → calls so far
		heads    = map[string]bool{}
		allHeads = make(chan struct{})
		barrier  atomic.Bool // a head gave up waiting for the other heads
	)
	record := func(r *drover.AgentRequest) (*orderedCall, int) {
		var in orderedInput
		_ = json.Unmarshal(r.Input, &in)
		c := &orderedCall{task: r.TaskID, in: in, start: tick.Add(1)}
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, c)
		tries[r.IdempotencyKey]++
		return c, tries[r.IdempotencyKey]
	}
	finish := func(c *orderedCall, ctx context.Context) {
		end := tick.Add(1)
		mu.Lock()
		c.end, c.abandoned = end, ctx.Err() != nil
		mu.Unlock()
	}
	// Step one: the first call of every key (its head: the tasks of a key
	// run one at a time) waits until every key's head has started — keys
	// run in parallel, or this times out. Every third task fails once,
	// transiently (the agent runtime retries it).
	stepOne := func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) {
		c, try := record(r)
		defer finish(c, ctx)
		mu.Lock()
		head := c.in.Key != "" && !heads[c.in.Key]
		if head {
			heads[c.in.Key] = true
			if len(heads) == len(allKeys) {
				close(allHeads)
			}
		}
		mu.Unlock()
		if head {
			select {
			case <-allHeads:
			case <-time.After(5 * time.Second):
				barrier.Store(true)
			}
		}
		time.Sleep(time.Millisecond)
		if c.in.N%3 == 1 && try == 1 {
			return nil, errors.New("connection reset")
		}
		return []byte(`"one"`), nil
	}
	// Step two: the third task of every producer hangs past its deadline on
	// its first attempt, so the supervisor recovers it and it runs again.
	stepTwo := func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) {
		c, try := record(r)
		defer finish(c, ctx)
		if c.in.N == 2 && try == 1 {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		time.Sleep(time.Millisecond)
		return []byte(`"two"`), nil
	}
	c, err := drover.New(fast(drover.Config{
		Store:      d,
		Schedulers: 2,
		Workflows: []drover.Workflow{{Name: "ordered", FailureThreshold: 10, RetryDelay: 10 * time.Millisecond, Steps: []drover.Step{
			{Name: "one", Agent: "step-one", Timeout: 10 * time.Second},
			{Name: "two", Agent: "step-two", Timeout: 500 * time.Millisecond},
		}}},
		Agents: []drover.Agent{
			{Name: "step-one", Func: stepOne, Retry: drover.RetryPolicy{InitialInterval: time.Millisecond, MaxInterval: 5 * time.Millisecond}},
			{Name: "step-two", Func: stepTwo, Retry: drover.RetryPolicy{InitialInterval: time.Millisecond, MaxInterval: 5 * time.Millisecond}},
		},
	}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	// Submit everything before starting, from several producers at once:
	// one per key, two on "shared" (alternating Submit and SubmitMany),
	// plus a few tasks without a key.
	type submitted struct {
		in   orderedInput
		task *drover.Task
	}
	var (
		smu  sync.Mutex
		subs []submitted
		wg   sync.WaitGroup
		errs = make(chan error, 16)
	)
	produce := func(key string, producer int) {
		defer wg.Done()
		for n := 0; n < perKey; n++ {
			in := orderedInput{Key: key, Producer: producer, N: n}
			b, _ := json.Marshal(in)
			var task *drover.Task
			if n%2 == 1 && key == "shared" {
				ts, err := c.SubmitMany(ctx, []drover.SubmitParams{{Workflow: "ordered", Input: b, Options: drover.SubmitOptions{OrderingKey: key}}})
				if err != nil {
					errs <- err
					return
				}
				task = ts[0]
			} else {
				var err error
				if task, err = c.Submit(ctx, "ordered", b, &drover.SubmitOptions{OrderingKey: key}); err != nil {
					errs <- err
					return
				}
			}
			smu.Lock()
			subs = append(subs, submitted{in, task})
			smu.Unlock()
		}
	}
	for _, k := range keys {
		wg.Add(1)
		go produce(k, 0)
	}
	for p := range producers {
		wg.Add(1)
		go produce("shared", p)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("submit: %v", err)
	}
	for n := range 4 {
		b, _ := json.Marshal(orderedInput{N: 100 + n})
		task, err := c.Submit(ctx, "ordered", b, nil)
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, submitted{orderedInput{N: 100 + n}, task})
	}

	// Positions: per key 1..count, and increasing in each producer's order.
	byKey := map[string][]submitted{}
	for _, s := range subs {
		if s.task.OrderingKey != s.in.Key {
			t.Fatalf("task %s stored with key %q, want %q", s.task.ID, s.task.OrderingKey, s.in.Key)
		}
		if s.in.Key == "" {
			if s.task.OrderingSeq != 0 {
				t.Errorf("unkeyed task %s has position %d", s.task.ID, s.task.OrderingSeq)
			}
			continue
		}
		byKey[s.in.Key] = append(byKey[s.in.Key], s)
	}
	for key, ss := range byKey {
		sort.Slice(ss, func(i, j int) bool { return ss[i].task.OrderingSeq < ss[j].task.OrderingSeq })
		last := map[int]int{} // producer → last N seen in position order
		for i, s := range ss {
			if s.task.OrderingSeq != int64(i+1) {
				t.Errorf("key %s: positions %d at index %d, want 1..%d without gaps", key, s.task.OrderingSeq, i, len(ss))
			}
			if n, ok := last[s.in.Producer]; ok && s.in.N <= n {
				t.Errorf("key %s: producer %d's task %d got a position after its task %d", key, s.in.Producer, n, s.in.N)
			}
			last[s.in.Producer] = s.in.N
		}
	}

	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if err := c.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	waitCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for _, s := range subs {
		done, err := c.Wait(waitCtx, s.task.ID)
		if err != nil {
			t.Fatalf("Wait(%s): %v", s.task.ID, err)
		}
		if done.ProcessState != drover.Processed {
			t.Fatalf("task %s (%+v) ended %s: %s", done.ID, s.in, done.ProcessState, done.LastError)
		}
	}
	if barrier.Load() {
		t.Fatal("the first tasks of the keys did not all run at the same time: keys are not independent")
	}

	// Per task: its first call's start and its last (not abandoned) call's end.
	mu.Lock()
	defer mu.Unlock()
	type span struct{ start, end int64 }
	spans := map[string]*span{}
	for _, cl := range calls {
		sp := spans[cl.task]
		if sp == nil {
			sp = &span{start: cl.start}
			spans[cl.task] = sp
		}
		sp.start = min(sp.start, cl.start)
		if !cl.abandoned {
			sp.end = max(sp.end, cl.end)
		}
	}
	for key, ss := range byKey {
		for i := 1; i < len(ss); i++ {
			prev, next := spans[ss[i-1].task.ID], spans[ss[i].task.ID]
			if prev == nil || next == nil {
				t.Fatalf("key %s: no calls recorded for position %d or %d", key, i, i+1)
			}
			if next.start < prev.end {
				t.Errorf("key %s: position %d (task %s) started at tick %d, before position %d (task %s) ended at tick %d",
					key, i+1, ss[i].task.ID, next.start, i, ss[i-1].task.ID, prev.end)
			}
		}
	}
	// Different keys overlapped (the barrier made sure; count it anyway).
	overlaps := 0
	for a, sa := range byKey {
		for b, sb := range byKey {
			if a >= b {
				continue
			}
			for _, x := range sa {
				for _, y := range sb {
					px, py := spans[x.task.ID], spans[y.task.ID]
					if px.start < py.end && py.start < px.end {
						overlaps++
					}
				}
			}
		}
	}
	if overlaps == 0 {
		t.Error("no two tasks of different keys ran at the same time")
	}
	st := c.Stats()
	if st.AgentRetries < 1 || st.SupervisorRecoveries < int64(len(allKeys)) {
		t.Errorf("stats %+v: want agent retries and a supervisor recovery per key", st)
	}
	t.Logf("%d tasks, %d calls, %d cross-key overlaps, stats %+v", len(subs), len(calls), overlaps, st)
}

func TestOrderingKeyValidation(t *testing.T) {
	t.Parallel()
	d := newStore(t)
	c, err := drover.New(drover.Config{
		Store:     d,
		Workflows: []drover.Workflow{{Name: "order", Steps: []drover.Step{{Name: "charge", Agent: "payments"}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, tc := range []struct{ name, key, want string }{
		{"too long", strings.Repeat("k", drover.MaxOrderingKeyBytes+1), "257 bytes"},
		{"newline", "customer\n42", "control character"},
		{"NUL", "a\x00b", "control character"},
		{"DEL", "a\x7fb", "control character"},
		{"C1 control", "a\u0085b", "control character"},
		{"invalid UTF-8", "a\xffb", "not valid UTF-8"},
	} {
		_, err := c.Submit(ctx, "order", []byte(`{}`), &drover.SubmitOptions{OrderingKey: tc.key})
		if !errors.Is(err, drover.ErrInvalidInput) || !strings.Contains(err.Error(), "OrderingKey") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want ErrInvalidInput naming OrderingKey and %q", tc.name, err, tc.want)
		}
	}
	_, err = c.SubmitMany(ctx, []drover.SubmitParams{
		{Workflow: "order", Input: []byte(`{}`), Options: drover.SubmitOptions{OrderingKey: "fine"}},
		{Workflow: "order", Input: []byte(`{}`), Options: drover.SubmitOptions{OrderingKey: "bad\tkey"}},
	})
	if !errors.Is(err, drover.ErrInvalidInput) || !strings.Contains(err.Error(), "task 1") {
		t.Errorf("SubmitMany with a bad key: err = %v, want ErrInvalidInput for task 1", err)
	}
	wantNothingStored(t, c)

	// The longest key, and any printable text, is fine; "" is no key.
	long := strings.Repeat("é", drover.MaxOrderingKeyBytes/2)
	for i, key := range []string{long, "customer 42 / eu-west", ""} {
		task, err := c.Submit(ctx, "order", []byte(fmt.Sprintf(`{"n":%d}`, i)), &drover.SubmitOptions{OrderingKey: key})
		if err != nil {
			t.Fatalf("key %q: %v", key, err)
		}
		got, err := c.Task(ctx, task.ID)
		if err != nil {
			t.Fatal(err)
		}
		wantSeq := int64(1)
		if key == "" {
			wantSeq = 0
		}
		if got.OrderingKey != key || got.OrderingSeq != wantSeq || task.OrderingSeq != wantSeq {
			t.Errorf("key %q: stored %q at %d (returned %d), want position %d", key, got.OrderingKey, got.OrderingSeq, task.OrderingSeq, wantSeq)
		}
	}
}

// TestCancelStartsNextTaskOfKey: cancelling the task at the head of a key
// lets the next one start at once. The schedulers poll once an hour here,
// and SQLite has no notifications: only Cancel waking them gets it going.
func TestCancelStartsNextTaskOfKey(t *testing.T) {
	t.Parallel()
	d := newStore(t)
	started := make(chan string, 4)
	release := make(chan struct{})
	c, err := drover.New(fast(drover.Config{
		Store:              d,
		PollInterval:       time.Hour,
		SupervisorInterval: time.Hour,
		Workflows:          []drover.Workflow{{Name: "w", Steps: []drover.Step{{Name: "s", Agent: "a", Timeout: time.Minute}}}},
		Agents: []drover.Agent{{Name: "a", Func: func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) {
			started <- r.TaskID
			if r.TaskID == "head" {
				select {
				case <-release:
				case <-ctx.Done():
				}
				return nil, drover.Permanent(errors.New("released"))
			}
			return []byte(`"ok"`), nil
		}}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer close(release)
	// Both submitted before the start, so no wake-up from a submission is
	// still pending once head runs.
	ctx := context.Background()
	for _, id := range []string{"head", "next"} {
		if _, err := c.Submit(ctx, "w", []byte(`{}`), &drover.SubmitOptions{ID: id, OrderingKey: "k"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if err := c.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	select {
	case id := <-started:
		if id != "head" {
			t.Fatalf("%s started first, want head", id)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("head never started")
	}
	if _, err := c.Cancel(ctx, "head", "test"); err != nil {
		t.Fatal(err)
	}
	if next := waitTask(t, c, "next"); next.ProcessState != drover.Processed {
		t.Fatalf("next ended %s", next.ProcessState)
	}
}
