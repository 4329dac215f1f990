package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/agentrt"
	"github.com/drover-run/drover/internal/clock"
	"github.com/drover-run/drover/internal/fault"
	"github.com/drover-run/drover/internal/flow"
	"github.com/drover-run/drover/internal/scheduler"
	"github.com/drover-run/drover/store"
)

// The isolation cases: one bad item never fails another's work. Text from
// outside is made storable before it reaches the driver (the same on every
// driver), and a batched transaction that the store refuses because of one
// item commits the others and records that one as failed.
func isolationCases() []testCase {
	return []testCase{
		{"HostileAgentErrorAmongHealthyReplies", testIsolationHostileAgentError},
		{"RefusedReplyAmongHealthyReplies", testIsolationRefusedReply},
		{"UnsanitizedReplyAmongHealthyReplies", testIsolationUnsanitizedReply},
	}
}

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// hostileError is an agent's permanent error whose text is s.
type hostileError struct{ s string }

func (e *hostileError) Error() string { return e.s }

// claimedTasks submits the one-step tasks ids and has a scheduler
// "sched-1" claim them all in one tick; it returns the scheduler, its clock
// and the requests it dispatched, in claim order.
func claimedTasks(ctx context.Context, t *testing.T, e *env, ids ...string) (*scheduler.Scheduler, *clock.Fake, []*dt.AgentRequest) {
	t.Helper()
	for _, id := range ids {
		e.submit(oneStepWF(), id)
	}
	clk := clock.NewFake(base.Add(time.Millisecond))
	var dispatched []*dt.AgentRequest
	s := scheduler.New(e.d, clk, &flow.Machine{Instance: "sched-1", Counters: &flow.Counters{}}, quietLog)
	s.OnDispatch = func(r []*dt.AgentRequest) { dispatched = append(dispatched, r...) }
	if _, err := s.Tick(ctx, false); err != nil {
		t.Fatalf("claim: %v", err)
	}
	if len(dispatched) != len(ids) {
		t.Fatalf("the claim dispatched %d requests, want %d", len(dispatched), len(ids))
	}
	return s, clk, dispatched
}

// ids returns n task IDs made with format.
func ids(format string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf(format, i)
	}
	return out
}

// testIsolationHostileAgentError: an agent of the runtime fails with an
// error text holding a NUL character and invalid UTF-8 while eight others
// succeed; the nine replies are applied in one scheduler transaction. The
// healthy tasks are Processed and the hostile one is Error, with its text
// made storable and marked as such, on every driver alike.
func testIsolationHostileAgentError(t *testing.T, d store.Driver) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := newEnv(t, d)
	const n = 9
	hostile := "t4"
	sched, clk, _ := claimedTasks(ctx, t, e, ids("t%d", n)...)

	// The agent runtime calls the agents and hands their replies over in
	// memory; the test collects them all before the scheduler applies any.
	replies := make(chan *dt.AgentReply, n)
	rt := agentrt.New(d, clk, "agents-1", quietLog, []agentrt.Spec{{Name: "worker", Func: func(ctx context.Context, r *dt.AgentRequest) ([]byte, error) {
		if r.TaskID == hostile {
			return nil, &hostileError{"x\x00y\xff"}
		}
		return []byte(`{"ok":true}`), nil
	}}})
	rt.IsPermanent = func(err error) bool { var h *hostileError; return errors.As(err, &h) }
	rt.Deliver = func(r *dt.AgentReply, _ string) bool { replies <- r; return true }
	rctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = rt.Run(rctx) }()
	defer func() { stop(); wg.Wait() }()
	var got []*dt.AgentReply
	for len(got) < n {
		select {
		case r := <-replies:
			got = append(got, r)
		case <-ctx.Done():
			t.Fatalf("%d of %d replies after 30s", len(got), n)
		}
	}
	for _, r := range got {
		if !sched.Deliver(r) {
			t.Fatal("the scheduler's inbox refused a reply")
		}
	}
	// One tick applies all nine in one transaction.
	if _, err := sched.Tick(ctx, false); err != nil {
		t.Fatalf("the tick applying the replies failed: %v", err)
	}
	for i := range n {
		id := fmt.Sprintf("t%d", i)
		task, steps := e.task(id)
		if id != hostile {
			if task.ProcessState != dt.Processed {
				t.Errorf("healthy task %s is %s (%q), want Processed", id, task.ProcessState, task.LastError)
			}
			continue
		}
		if task.ProcessState != dt.Error {
			t.Errorf("hostile task %s is %s, want Error", id, task.ProcessState)
		}
		for what, s := range map[string]string{"task's LastError": task.LastError, "step's LastError": steps[0].LastError} {
			if !utf8.ValidString(s) || strings.ContainsRune(s, 0) || !strings.HasPrefix(s, "x\uFFFDy\uFFFD") || !strings.Contains(s, "replaced") {
				t.Errorf("hostile task's %s = %q, want the agent's text made storable (NUL and invalid byte as U+FFFD) and marked", what, s)
			}
		}
	}
}

// testIsolationRefusedReply: the store refuses a value of one reply among
// many in a scheduler transaction (the fault point fault.RefuseText stands
// in for a database refusing a value, as PostgreSQL refuses a NUL
// character), once in the replies handed over in memory and once in the
// store's reply queue. Every other reply commits, and the step of each
// refused one fails for good with a readable reason, so its task follows
// its failure policy.
func testIsolationRefusedReply(t *testing.T, d store.Driver) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	marker := uniqueMarker(t)
	undo := fault.RefuseText(marker)
	defer undo()
	e := newEnv(t, d)
	sched, _, dispatched := claimedTasks(ctx, t, e, ids("t%02d", 12)...)
	// t03 (in memory) and t09 (queued in the store) fail with a text the
	// store refuses; the others succeed or fail with a text it keeps.
	refused := map[string]bool{"t03": true, "t09": true}
	var queued []*dt.AgentReply
	for i, r := range dispatched {
		var rp *dt.AgentReply
		switch {
		case refused[r.TaskID]:
			rp = failed(r, "boom "+marker)
		case i%4 == 1:
			rp = failed(r, "declined")
		default:
			rp = ok(r, `{"ok":true}`)
		}
		rp.Scheduler = "sched-1"
		if i >= 8 {
			queued = append(queued, rp)
			continue
		}
		if !sched.Deliver(rp) {
			t.Fatal("the scheduler's inbox refused a reply")
		}
	}
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		return x.ReplyInsertMany(ctx, &store.ReplyInsertManyParams{Replies: queued})
	})

	// One tick: the inbox replies, the store's queue and a claim together.
	if _, err := sched.Tick(ctx, true); err != nil {
		t.Fatalf("tick: %v", err)
	}
	for i, r := range dispatched {
		task, steps := e.task(r.TaskID)
		switch {
		case refused[r.TaskID]:
			if task.ProcessState != dt.Error || !strings.HasPrefix(task.LastError, flow.UnstorablePrefix) ||
				!strings.Contains(task.LastError, "refused") || steps[0].ProcessState != dt.Error {
				t.Errorf("task %s with the refused reply: %s, step %s, LastError %q; want Error, the step Error, and a reason starting %q",
					r.TaskID, task.ProcessState, steps[0].ProcessState, task.LastError, flow.UnstorablePrefix)
			}
		case i%4 == 1:
			if task.ProcessState != dt.Error || task.LastError != "declined" {
				t.Errorf("task %s: %s, LastError %q; want Error, \"declined\"", r.TaskID, task.ProcessState, task.LastError)
			}
		default:
			if task.ProcessState != dt.Processed {
				t.Errorf("healthy task %s is %s (%q), want Processed", r.TaskID, task.ProcessState, task.LastError)
			}
		}
	}
	alerts := listEvents(t, d, store.EventListParams{TaskID: "t03", AlertsOnly: true, Limit: 10})
	if len(alerts) == 0 || !strings.Contains(alerts[0].Message, flow.UnstorablePrefix) {
		t.Errorf("alerts of t03 = %v, want a step_failed alert naming the reason", alerts)
	}
	// Nothing is left in the reply queue.
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		left, err := x.ReplyTake(ctx, &store.ReplyTakeParams{Scheduler: "sched-1", Limit: 100})
		if err == nil && len(left) > 0 {
			t.Errorf("%d replies left in the queue", len(left))
		}
		return err
	})
}

// testIsolationUnsanitizedReply: a reply whose error holds a NUL character
// reaches the scheduler without passing the agent runtime (which would
// make it storable). A driver may keep the text (SQLite) or refuse it
// (PostgreSQL: "invalid byte sequence for encoding"); either way the other
// replies of the transaction commit and that task ends in Error.
func testIsolationUnsanitizedReply(t *testing.T, d store.Driver) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := newEnv(t, d)
	sched, _, dispatched := claimedTasks(ctx, t, e, ids("t%d", 6)...)
	for _, r := range dispatched {
		rp := ok(r, `{"ok":true}`)
		if r.TaskID == "t2" {
			rp = failed(r, "x\x00y")
		}
		sched.Deliver(rp)
	}
	if _, err := sched.Tick(ctx, false); err != nil {
		t.Fatalf("tick: %v", err)
	}
	for _, r := range dispatched {
		task, _ := e.task(r.TaskID)
		want := dt.Processed
		if r.TaskID == "t2" {
			want = dt.Error
		}
		if task.ProcessState != want {
			t.Errorf("task %s is %s (%q), want %s", r.TaskID, task.ProcessState, task.LastError, want)
		}
	}
}

// uniqueMarker returns a text no other test uses, to arm the fault point
// with.
func uniqueMarker(t *testing.T) string {
	t.Helper()
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "refuse-" + hex.EncodeToString(b)
}
