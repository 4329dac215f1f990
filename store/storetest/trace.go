package storetest

import (
	"context"
	"testing"
	"time"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/store"
)

// The trace context stored with a task and a session message: every read
// that hands a task, an agent request or a message to another process
// carries it, so that process continues the trace.
func traceCases() []testCase {
	return []testCase{
		{"TaskAndRequests", testTraceTaskAndRequests},
		{"Messages", testTraceMessages},
	}
}

const (
	traceA = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01 vendor=a"
	traceB = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
)

func testTraceTaskAndRequests(t *testing.T, d store.Driver) {
	ctx := context.Background()
	task := setupRemote(t, d) // task "t", untraced
	traced := newTask("traced")
	traced.TraceContext = traceA
	insertTasks(t, d, traced)
	insertSteps(t, d, newStep("traced", 0))
	if got := getTask(t, d, "traced").TraceContext; got != traceA {
		t.Errorf("TaskGet: trace context %q, want %q", got, traceA)
	}
	if got := getTask(t, d, task.ID).TraceContext; got != "" {
		t.Errorf("TaskGet of an untraced task: trace context %q, want none", got)
	}
	// The claim hands it to the scheduler.
	var claimed []*dt.Task
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		var err error
		claimed, err = x.TaskClaim(ctx, &store.TaskClaimParams{Instance: "s", Now: at(time.Second), Limit: 10})
		return err
	})
	for _, c := range claimed {
		if want := map[string]string{"traced": traceA}[c.ID]; c.TraceContext != want {
			t.Errorf("TaskClaim of %s: trace context %q, want %q", c.ID, c.TraceContext, want)
		}
	}
	// A request's payload carries its task's, to a local agent (claim)
	// and to a remote one (get).
	exp := at(time.Minute)
	r1, r2 := newRequest("traced", 0, "a", exp), newRequest("t", 1, "a", exp)
	insertRequests(t, d, r1, r2)
	for _, r := range claimRequests(t, d, store.RequestClaimParams{Agent: "a", ClaimedBy: "rt", Now: base, Limit: 10}) {
		if want := map[string]string{"traced": traceA}[r.TaskID]; r.TraceContext != want {
			t.Errorf("RequestClaim of %s: trace context %q, want %q", r.TaskID, r.TraceContext, want)
		}
	}
	for _, r := range []*dt.AgentRequest{r1, r2} {
		got, err := d.Reader().RequestGet(ctx, &store.RequestGetParams{ID: r.ID})
		if err != nil {
			t.Fatal(err)
		}
		if want := map[string]string{"traced": traceA}[r.TaskID]; got.TraceContext != want {
			t.Errorf("RequestGet of %s: trace context %q, want %q", r.TaskID, got.TraceContext, want)
		}
	}
}

func testTraceMessages(t *testing.T, d store.Driver) {
	traced := func(m store.PublishMessage, tc string) store.PublishMessage { m.TraceContext = tc; return m }
	publishAt(t, d, base, traced(pub("q", "a", "1"), traceA), pub("q", "a", "2"), traced(pub("q", "a", "3"), traceB))
	wantTC := func(what string, m *dt.Message, want string) {
		t.Helper()
		if m == nil {
			t.Fatalf("%s: no message", what)
		}
		if m.TraceContext != want {
			t.Errorf("%s: seq %d trace context %q, want %q", what, m.Seq, m.TraceContext, want)
		}
	}
	p := peekAll(t, d, "q", "a")
	wantSeqs(t, "peek", p, 1, 2, 3)
	for i, want := range []string{traceA, "", traceB} {
		wantTC("peek", p[i], want)
	}
	now := at(time.Second)
	a := acceptNamed(t, d, "q", "a", "h", now)
	wantTC("receive", receiveOne(t, d, now, a), traceA)
	msgs, errs := settleReceiveAt(t, d, now, next(complete(a, 1)))
	wantErrs(t, "complete 1", errs, nil)
	wantTC("settle and receive", msgs[0], "")
	msgs, errs = settleReceiveAt(t, d, now, next(abandon(a, 2, now)))
	wantErrs(t, "abandon 2", errs, nil)
	wantTC("abandon and receive again", msgs[0], "")
	msgs, errs = settleReceiveAt(t, d, now, next(complete(a, 2)))
	wantErrs(t, "complete 2", errs, nil)
	wantTC("settle and receive", msgs[0], traceB)
	// A dead letter keeps it.
	wantErrs(t, "dead-letter 3", settleAt(t, d, now, deadLetter(a, 3, "poison", false)), nil)
	var dead []*dt.Message
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		var err error
		dead, err = x.DeadLetterList(ctx, &store.DeadLetterListParams{Queue: "q", Limit: 10})
		return err
	})
	if len(dead) != 1 {
		t.Fatalf("dead letters: %d, want 1", len(dead))
	}
	wantTC("dead letter", dead[0], traceB)
}
