package drover

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drover-run/drover/internal/testutil"
	"github.com/drover-run/drover/store"
)

// gatedDriver is a real driver whose InTx calls are counted and, while the
// gate is closed, held before they start, so a test can line up Submit
// calls behind a group that is committing.
type gatedDriver struct {
	store.Driver
	txs     atomic.Int64
	mu      sync.Mutex
	gate    chan struct{} // nil: open
	entered chan struct{} // receives once per InTx that reached the gate
}

func (g *gatedDriver) InTx(ctx context.Context, fn func(context.Context, store.Executor) error) error {
	g.txs.Add(1)
	g.mu.Lock()
	gate := g.gate
	g.mu.Unlock()
	if gate != nil {
		g.entered <- struct{}{}
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return g.Driver.InTx(ctx, fn)
}

func (g *gatedDriver) close() { g.swap(nil) }

// swap closes the gate (releasing the transactions waiting at it) and puts
// next in its place.
func (g *gatedDriver) swap(next chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gate != nil {
		close(g.gate)
	}
	g.gate = next
}

// fillSlots starts maxGroupsInFlight submits that wait at the gate, so
// that the calls made next queue up; it returns their results.
func fillSlots(t *testing.T, c *Client, g *gatedDriver) []chan submitResult {
	t.Helper()
	var held []chan submitResult
	for i := range maxGroupsInFlight {
		held = append(held, submitAsync(c, context.Background(), fmt.Sprintf("held%d", i), `0`))
		<-g.entered
	}
	return held
}

func wantSubmitted(t *testing.T, held []chan submitResult) {
	t.Helper()
	for _, ch := range held {
		if r := <-ch; r.err != nil {
			t.Fatalf("a submit holding a slot: %v", r.err)
		}
	}
}

// groupTestClient returns a client on each driver whose InTx is gated, so
// the first Submit holds the group commit while others queue.
func groupTestClients(t *testing.T) map[string]func(t *testing.T) (*Client, *gatedDriver) {
	mk := func(open func(testing.TB) store.Driver) func(t *testing.T) (*Client, *gatedDriver) {
		return func(t *testing.T) (*Client, *gatedDriver) {
			g := &gatedDriver{Driver: open(t), gate: make(chan struct{}), entered: make(chan struct{}, 1024)}
			t.Cleanup(g.close)
			c, err := New(Config{Store: g, Workflows: []Workflow{{Name: "w", Steps: []Step{{Name: "s", Agent: "a", Timeout: time.Second}}}}})
			if err != nil {
				t.Fatal(err)
			}
			return c, g
		}
	}
	return map[string]func(t *testing.T) (*Client, *gatedDriver){
		"sqlite":   mk(func(t testing.TB) store.Driver { return testutil.SQLite(t) }),
		"postgres": mk(func(t testing.TB) store.Driver { return testutil.Postgres(t) }),
	}
}

// queued waits until n Submit calls wait in the group-commit queue.
func queued(t *testing.T, c *Client, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c.groups.mu.Lock()
		got := len(c.groups.queue)
		c.groups.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d calls queued, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

type submitResult struct {
	task *Task
	err  error
}

func submitAsync(c *Client, ctx context.Context, id string, input string) chan submitResult {
	ch := make(chan submitResult, 1)
	go func() {
		t, err := c.Submit(ctx, "w", []byte(input), &SubmitOptions{ID: id})
		ch <- submitResult{t, err}
	}()
	return ch
}

// Submit calls made while a group commits go together in the next
// transaction, and each gets its own task.
func TestSubmitGroupCommit(t *testing.T) {
	for name, mk := range groupTestClients(t) {
		t.Run(name, func(t *testing.T) {
			c, g := mk(t)
			ctx := context.Background()
			held := fillSlots(t, c, g) // every group slot busy at the gate
			var rest []chan submitResult
			for i := range 10 {
				rest = append(rest, submitAsync(c, ctx, fmt.Sprintf("t%d", i), fmt.Sprint(i)))
			}
			queued(t, c, 10)
			g.close()
			wantSubmitted(t, held)
			for i, ch := range rest {
				r := <-ch
				if r.err != nil || r.task.ID != fmt.Sprintf("t%d", i) || string(r.task.Input) != fmt.Sprint(i) {
					t.Fatalf("call %d: %+v, %v", i, r.task, r.err)
				}
			}
			if n, want := g.txs.Load(), int64(maxGroupsInFlight+1); n != want {
				t.Errorf("%d transactions for %d concurrent submits, want %d (one per slot, then a group of 10)", n, maxGroupsInFlight+10, want)
			}
			for i := range 10 {
				if _, err := c.Task(ctx, fmt.Sprintf("t%d", i)); err != nil {
					t.Errorf("task t%d not stored: %v", i, err)
				}
			}
		})
	}
}

// A group whose transaction fails does not fail its calls together: each
// runs alone and gets its own result.
func TestSubmitGroupFailureIsPerCall(t *testing.T) {
	for name, mk := range groupTestClients(t) {
		t.Run(name, func(t *testing.T) {
			c, g := mk(t)
			ctx := context.Background()
			g.close()
			if _, err := c.Submit(ctx, "w", []byte(`"original"`), &SubmitOptions{ID: "taken"}); err != nil {
				t.Fatal(err)
			}
			g.mu.Lock()
			g.gate = make(chan struct{})
			g.mu.Unlock()
			held := fillSlots(t, c, g)
			ok1 := submitAsync(c, ctx, "ok1", `1`)
			queued(t, c, 1)
			bad := submitAsync(c, ctx, "taken", `"different"`)
			queued(t, c, 2)
			same := submitAsync(c, ctx, "taken", `"original"`) // idempotent resubmit
			queued(t, c, 3)
			ok2 := submitAsync(c, ctx, "ok2", `2`)
			queued(t, c, 4)
			g.close()
			wantSubmitted(t, held)
			for name, ch := range map[string]chan submitResult{"ok1": ok1, "ok2": ok2} {
				if r := <-ch; r.err != nil || r.task.ID != name {
					t.Errorf("%s: %+v, %v; a conflicting call in its group must not fail it", name, r.task, r.err)
				}
			}
			if r := <-bad; !errors.Is(r.err, ErrTaskConflict) {
				t.Errorf("conflicting resubmit: %v, want ErrTaskConflict", r.err)
			}
			if r := <-same; r.err != nil || string(r.task.Input) != `"original"` {
				t.Errorf("idempotent resubmit: %+v, %v", r.task, r.err)
			}
		})
	}
}

// A call whose context ends while it waits in the queue returns the
// context's error and its task is not submitted; the rest of its group is.
func TestSubmitGroupCancelledWhileQueued(t *testing.T) {
	for name, mk := range groupTestClients(t) {
		t.Run(name, func(t *testing.T) {
			c, g := mk(t)
			held := fillSlots(t, c, g)
			gone, kept, cancel := queueGoneAndKept(t, c)
			cancel()
			wantCancelled(t, gone)
			queued(t, c, 1) // it left the queue
			g.close()
			wantSubmitted(t, held)
			wantKeptNotGone(t, c, kept)
		})
	}
}

// A call whose context ends while its group's transaction runs cancels
// that transaction: it returns the context's error and is not submitted;
// the others of the group then run alone and are.
func TestSubmitGroupCancelledInFlight(t *testing.T) {
	for name, mk := range groupTestClients(t) {
		t.Run(name, func(t *testing.T) {
			c, g := mk(t)
			held := fillSlots(t, c, g)
			gone, kept, cancel := queueGoneAndKept(t, c)
			g.swap(make(chan struct{})) // the held calls go on; the group waits at the new gate
			wantSubmitted(t, held)
			<-g.entered // the group's transaction
			cancel()
			wantCancelled(t, gone)
			<-g.entered // kept, alone
			g.close()
			wantKeptNotGone(t, c, kept)
		})
	}
}

// Two calls of one group with the same ID and input each get their own
// copy of the stored task.
func TestSubmitGroupSameIDTwice(t *testing.T) {
	for name, mk := range groupTestClients(t) {
		t.Run(name, func(t *testing.T) {
			c, g := mk(t)
			ctx := context.Background()
			held := fillSlots(t, c, g)
			a := submitAsync(c, ctx, "same", `1`)
			queued(t, c, 1)
			b := submitAsync(c, ctx, "same", `1`)
			queued(t, c, 2)
			g.close()
			wantSubmitted(t, held)
			ra, rb := <-a, <-b
			if ra.err != nil || rb.err != nil {
				t.Fatalf("submits: %v, %v", ra.err, rb.err)
			}
			if ra.task == rb.task || ra.task.ID != "same" || rb.task.ID != "same" {
				t.Errorf("both callers got %p and %p; want two copies of task same", ra.task, rb.task)
			}
		})
	}
}

// queueGoneAndKept queues two submits, "gone" with a context that cancel
// ends and "kept", behind the busy slots.
func queueGoneAndKept(t *testing.T, c *Client) (gone, kept chan submitResult, cancel func()) {
	t.Helper()
	cctx, cancel := context.WithCancel(context.Background())
	gone = submitAsync(c, cctx, "gone", `1`)
	queued(t, c, 1)
	kept = submitAsync(c, context.Background(), "kept", `1`)
	queued(t, c, 2)
	return gone, kept, cancel
}

func wantCancelled(t *testing.T, gone chan submitResult) {
	t.Helper()
	if r := <-gone; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("cancelled call: %v, want context.Canceled", r.err)
	}
}

// wantKeptNotGone checks that "kept" was submitted and "gone" was not.
func wantKeptNotGone(t *testing.T, c *Client, kept chan submitResult) {
	t.Helper()
	if r := <-kept; r.err != nil {
		t.Fatalf("kept: %v", r.err)
	}
	if _, err := c.Task(context.Background(), "gone"); !errors.Is(err, ErrTaskNotFound) {
		t.Errorf("the cancelled call's task: %v, want ErrTaskNotFound", err)
	}
}
