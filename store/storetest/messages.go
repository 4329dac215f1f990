package storetest

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/store"
)

func newRequest(taskID string, step int, agent string, completeBy time.Time) *dt.AgentRequest {
	return &dt.AgentRequest{
		Agent: agent, TaskID: taskID, StepIndex: step, Attempt: 1, Kind: dt.KindDo,
		IdempotencyKey: fmt.Sprintf("%s/%d/step%d", taskID, step, step), CompleteBy: completeBy,
		Scheduler: "sched", CreatedAt: base,
	}
}

func insertRequests(t *testing.T, d store.Driver, reqs ...*dt.AgentRequest) {
	t.Helper()
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		return x.RequestInsertMany(ctx, &store.RequestInsertManyParams{Requests: reqs})
	})
}

func claimRequests(t *testing.T, d store.Driver, p store.RequestClaimParams) []*dt.AgentRequest {
	t.Helper()
	var got []*dt.AgentRequest
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		var err error
		got, err = x.RequestClaim(ctx, &p)
		return err
	})
	return got
}

// reqKeys names requests by task, step and attempt, sorted.
func reqKeys(reqs []*dt.AgentRequest) []string {
	var out []string
	for _, r := range reqs {
		out = append(out, fmt.Sprintf("%s/%d/%d", r.TaskID, r.StepIndex, r.Attempt))
	}
	sort.Strings(out)
	return out
}

func requestCases() []testCase {
	return []testCase{
		{"ClaimPayloadAndOrder", testRequestClaim},
		{"OwnPreviousOutput", testRequestOwnPrevious},
		{"ClaimSkipsExpired", testRequestClaimExpired},
		{"DeleteByStep", testRequestDeleteByStep},
		{"StepMessagesExist", testStepMessagesExist},
		{"Release", testRequestRelease},
		{"DeleteExpired", testRequestDeleteExpired},
	}
}

// setupPayload stores task "t" with three steps whose outputs are set.
func setupPayload(t *testing.T, d store.Driver) *dt.Task {
	task := newTask("t")
	task.StepCount = 3
	insertTasks(t, d, task)
	var steps []*dt.StepRecord
	for i := range 3 {
		s := newStep("t", i)
		s.ProcessState = dt.Processed
		s.Output = []byte(fmt.Sprintf(`{"out":%d}`, i))
		steps = append(steps, s)
	}
	insertSteps(t, d, steps...)
	return task
}

func testRequestClaim(t *testing.T, d store.Driver) {
	task := setupPayload(t, d)
	exp := at(time.Minute)
	r0 := newRequest("t", 0, "a", exp)
	r1 := newRequest("t", 1, "a", exp)
	r1.Attempt, r1.CreatedAt = 2, at(time.Second)
	r2 := newRequest("t", 2, "a", exp)
	r2.Kind, r2.IdempotencyKey, r2.CreatedAt = dt.KindCompensate, "t/2/step2/compensate", at(2*time.Second)
	rb := newRequest("t", 1, "b", exp)
	insertRequests(t, d, r0, r1)
	insertRequests(t, d, r2, rb)

	// Oldest first, limit respected.
	got := claimRequests(t, d, store.RequestClaimParams{Agent: "a", ClaimedBy: "rt1", Now: base, Limit: 1})
	if len(got) != 1 {
		t.Fatalf("RequestClaim(limit 1) = %v, want 1 request", reqKeys(got))
	}
	g := got[0]
	want := *r0
	want.ClaimedBy, want.Workflow, want.StepName, want.Input = "rt1", task.Workflow, "step0", task.Input
	checkEqual(t, "first claimed request (step 0, do)", g, &want, "ID")
	if g.PreviousOutput != nil || g.StepOutput != nil {
		t.Errorf("step 0 do request: PreviousOutput %q, StepOutput %q; want none", g.PreviousOutput, g.StepOutput)
	}

	got = claimRequests(t, d, store.RequestClaimParams{Agent: "a", ClaimedBy: "rt2", Now: base, Limit: 10})
	if fmt.Sprint(reqKeys(got)) != "[t/1/2 t/2/1]" {
		t.Fatalf("second RequestClaim = %v, want t/1/2 and t/2/1 (the claimed one skipped)", reqKeys(got))
	}
	for _, g := range got {
		switch g.StepIndex {
		case 1:
			w := *r1
			w.ClaimedBy, w.Workflow, w.StepName, w.Input, w.PreviousOutput = "rt2", "wf", "step1", task.Input, []byte(`{"out":0}`)
			checkEqual(t, "step 1 do request", g, &w, "ID")
		case 2:
			w := *r2
			w.ClaimedBy, w.Workflow, w.StepName, w.Input = "rt2", "wf", "step2", task.Input
			w.PreviousOutput, w.StepOutput = []byte(`{"out":1}`), []byte(`{"out":2}`)
			checkEqual(t, "step 2 compensate request", g, &w, "ID")
		}
	}
	got = claimRequests(t, d, store.RequestClaimParams{Agent: "a", ClaimedBy: "rt3", Now: base, Limit: 10})
	if len(got) != 0 {
		t.Errorf("third RequestClaim for a = %v, want nothing left", reqKeys(got))
	}
	got = claimRequests(t, d, store.RequestClaimParams{Agent: "b", ClaimedBy: "rt3", Now: base, Limit: 10})
	if len(got) != 1 || got[0].Agent != "b" || got[0].StepIndex != 1 {
		t.Errorf("RequestClaim for b = %v, want the one request of agent b", reqKeys(got))
	}
	got = claimRequests(t, d, store.RequestClaimParams{Agent: "nobody", ClaimedBy: "rt3", Now: base, Limit: 10})
	if len(got) != 0 {
		t.Errorf("RequestClaim for an agent without requests = %v", reqKeys(got))
	}
}

func testRequestClaimExpired(t *testing.T, d store.Driver) {
	setupPayload(t, d)
	old := newRequest("t", 0, "a", at(-time.Microsecond))
	live := newRequest("t", 1, "a", at(time.Microsecond))
	insertRequests(t, d, old, live)
	got := claimRequests(t, d, store.RequestClaimParams{Agent: "a", ClaimedBy: "rt", Now: base, Limit: 10})
	if fmt.Sprint(reqKeys(got)) != "[t/1/1]" {
		t.Errorf("RequestClaim = %v, want only the unexpired t/1/1", reqKeys(got))
	}
}

func testStepMessagesExist(t *testing.T, d store.Driver) {
	setupPayload(t, d)
	exp := at(time.Minute)
	claimed := newRequest("t", 2, "a", exp)
	claimed.ClaimedBy = "rt" // claimed ones count too
	insertRequests(t, d, newRequest("t", 0, "a", exp), newRequest("t", 0, "b", exp), claimed)
	insertTasks(t, d, newTask("u"))
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		// A reply waiting for its scheduler: its request row is gone.
		return x.ReplyInsertMany(ctx, &store.ReplyInsertManyParams{Replies: []*dt.AgentReply{{TaskID: "u", StepIndex: 0, Attempt: 1, Kind: dt.KindDo, CreatedAt: base}}})
	})
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		do := func(task string, step, attempt int) store.StepAttempt {
			return store.StepAttempt{TaskID: task, Index: step, Attempt: attempt, Kind: dt.KindDo}
		}
		undo := do("t", 0, 1)
		undo.Kind = dt.KindCompensate
		got, err := x.StepMessagesExist(ctx, &store.StepMessagesExistParams{Attempts: []store.StepAttempt{do("t", 1, 1), do("t", 0, 1),
			do("missing", 0, 1), do("t", 2, 1), do("t", 0, 1), do("u", 0, 1), do("u", 1, 1),
			// Another attempt's or kind's messages do not count: a late
			// reply of attempt 1 says nothing of attempt 2.
			do("t", 0, 2), undo, do("u", 0, 2)}})
		if err != nil {
			return err
		}
		if want := []bool{false, true, false, true, true, true, false, false, false, false}; !slices.Equal(got, want) {
			t.Errorf("StepMessagesExist = %v, want %v", got, want)
		}
		none, err := x.StepMessagesExist(ctx, &store.StepMessagesExistParams{Attempts: nil})
		if err != nil || len(none) != 0 {
			t.Errorf("StepMessagesExist(nil) = %v, %v; want empty, nil", none, err)
		}
		return nil
	})
}

func testRequestDeleteByStep(t *testing.T, d store.Driver) {
	setupPayload(t, d)
	insertTasks(t, d, newTask("u"))
	insertSteps(t, d, newStep("u", 0))
	exp := at(time.Minute)
	t0a, t0b := newRequest("t", 0, "a", exp), newRequest("t", 0, "a", exp)
	t0b.Attempt = 2
	t0b.ClaimedBy = "rt" // claimed ones go too
	insertRequests(t, d, t0a, t0b, newRequest("t", 1, "a", exp), newRequest("t", 2, "a", exp), newRequest("u", 0, "a", exp))
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		if err := x.RequestDeleteByStep(ctx, &store.RequestDeleteByStepParams{Refs: []store.StepRef{{TaskID: "t", Index: 0}, {TaskID: "t", Index: 2}, {TaskID: "missing", Index: 0}}}); err != nil {
			return err
		}
		return x.RequestDeleteByStep(ctx, &store.RequestDeleteByStepParams{Refs: nil})
	})
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		if _, err := x.RequestRelease(ctx, &store.RequestReleaseParams{ClaimedBy: "rt"}); err != nil {
			return err
		}
		got, err := x.RequestClaim(ctx, &store.RequestClaimParams{Agent: "a", ClaimedBy: "x", Now: base, Limit: 100})
		if err != nil {
			return err
		}
		if fmt.Sprint(reqKeys(got)) != "[t/1/1 u/0/1]" {
			t.Errorf("requests left = %v, want t/1/1 u/0/1", reqKeys(got))
		}
		return nil
	})
}

func testRequestRelease(t *testing.T, d store.Driver) {
	setupPayload(t, d)
	exp := at(time.Minute)
	insertRequests(t, d, newRequest("t", 0, "a", exp), newRequest("t", 1, "a", exp), newRequest("t", 2, "a", exp))
	if got := claimRequests(t, d, store.RequestClaimParams{Agent: "a", ClaimedBy: "rt1", Now: base, Limit: 2}); len(got) != 2 {
		t.Fatalf("claim 2: got %d", len(got))
	}
	if got := claimRequests(t, d, store.RequestClaimParams{Agent: "a", ClaimedBy: "rt2", Now: base, Limit: 2}); len(got) != 1 {
		t.Fatalf("claim rest: got %d", len(got))
	}
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		n, err := x.RequestRelease(ctx, &store.RequestReleaseParams{ClaimedBy: "rt1"})
		if err != nil {
			return err
		}
		if n != 2 {
			t.Errorf("RequestRelease(rt1) = %d, want 2", n)
		}
		n, err = x.RequestRelease(ctx, &store.RequestReleaseParams{ClaimedBy: "nobody"})
		if err != nil || n != 0 {
			t.Errorf("RequestRelease(nobody) = %d, %v", n, err)
		}
		return nil
	})
	got := claimRequests(t, d, store.RequestClaimParams{Agent: "a", ClaimedBy: "rt3", Now: base, Limit: 10})
	if fmt.Sprint(reqKeys(got)) != "[t/0/1 t/1/1]" {
		t.Errorf("after release, claim = %v, want the two rt1 had (rt2's stays claimed)", reqKeys(got))
	}
	for _, g := range got {
		if g.ClaimedBy != "rt3" || g.Input == nil || g.StepName == "" {
			t.Errorf("re-claimed request lacks claim or payload: %+v", g)
		}
	}
}

func testRequestDeleteExpired(t *testing.T, d store.Driver) {
	setupPayload(t, d)
	insertRequests(t, d,
		newRequest("t", 0, "a", at(-3*time.Second)), newRequest("t", 1, "a", at(-2*time.Second)),
		newRequest("t", 2, "a", at(-time.Second)), newRequest("t", 0, "b", at(time.Second)))
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		n, err := x.RequestDeleteExpired(ctx, &store.RequestDeleteExpiredParams{Now: base, Limit: 2})
		if err != nil {
			return err
		}
		if n != 2 {
			t.Errorf("RequestDeleteExpired(limit 2) = %d, want 2", n)
		}
		n, err = x.RequestDeleteExpired(ctx, &store.RequestDeleteExpiredParams{Now: base, Limit: 100})
		if err != nil {
			return err
		}
		if n != 1 {
			t.Errorf("second RequestDeleteExpired = %d, want 1", n)
		}
		n, err = x.RequestDeleteExpired(ctx, &store.RequestDeleteExpiredParams{Now: base, Limit: 100})
		if err != nil || n != 0 {
			t.Errorf("third RequestDeleteExpired = %d, %v; want 0", n, err)
		}
		return nil
	})
	got := claimRequests(t, d, store.RequestClaimParams{Agent: "b", ClaimedBy: "rt", Now: base, Limit: 10})
	if len(got) != 1 {
		t.Errorf("the unexpired request is gone: claim got %v", reqKeys(got))
	}
}

// ---- replies ----

func replyCases() []testCase {
	return []testCase{
		{"TakeByHolder", testReplyTake},
		{"TakeLimitAndRoundTrip", testReplyTakeLimit},
	}
}

func takeReplies(t *testing.T, d store.Driver, sched string, limit int) []*dt.AgentReply {
	t.Helper()
	var got []*dt.AgentReply
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		var err error
		got, err = x.ReplyTake(ctx, &store.ReplyTakeParams{Scheduler: sched, Limit: limit})
		return err
	})
	return got
}

func replyTasks(rs []*dt.AgentReply) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.TaskID)
	}
	sort.Strings(out)
	return out
}

func testReplyTake(t *testing.T, d store.Driver) {
	held := func(id, by string) *dt.Task {
		tk := newTask(id)
		tk.ProcessState, tk.LockedBy, tk.CompleteBy = dt.Processing, by, tp(at(time.Minute))
		return tk
	}
	insertTasks(t, d, held("mine", "s1"), held("theirs", "s2"), newTask("free"))
	var replies []*dt.AgentReply
	for _, id := range []string{"mine", "theirs", "free", "missing"} {
		replies = append(replies, &dt.AgentReply{TaskID: id, Attempt: 1, Kind: dt.KindDo, CreatedAt: base})
	}
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		return x.ReplyInsertMany(ctx, &store.ReplyInsertManyParams{Replies: replies})
	})

	got := takeReplies(t, d, "s1", 100)
	if fmt.Sprint(replyTasks(got)) != "[free mine missing]" {
		t.Errorf("ReplyTake(s1) = %v, want mine, free and missing (not theirs)", replyTasks(got))
	}
	if got := takeReplies(t, d, "s1", 100); len(got) != 0 {
		t.Errorf("taken replies came back: %v", replyTasks(got))
	}
	if got := takeReplies(t, d, "s2", 100); fmt.Sprint(replyTasks(got)) != "[theirs]" {
		t.Errorf("ReplyTake(s2) = %v, want theirs", replyTasks(got))
	}
	if got := takeReplies(t, d, "s2", 100); len(got) != 0 {
		t.Errorf("ReplyTake(s2) again = %v", replyTasks(got))
	}
}

func testReplyTakeLimit(t *testing.T, d store.Driver) {
	insertTasks(t, d, newTask("t"))
	want := map[int]*dt.AgentReply{}
	var replies []*dt.AgentReply
	for i := range 5 {
		r := &dt.AgentReply{TaskID: "t", StepIndex: i, Attempt: i + 1, Kind: dt.KindDo, Output: []byte(fmt.Sprintf(`{"i":%d}`, i)), CreatedAt: at(time.Duration(i) * time.Second)}
		switch i {
		case 1:
			r.Failed, r.Error, r.Output = true, "permanent: no such card", nil
		case 2:
			r.Kind = dt.KindCompensate
		}
		want[i] = r
		replies = append(replies, r)
	}
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		return x.ReplyInsertMany(ctx, &store.ReplyInsertManyParams{Replies: replies})
	})
	var all []*dt.AgentReply
	for _, n := range []int{2, 2, 1, 0} {
		got := takeReplies(t, d, "s", 2)
		if len(got) != n {
			t.Errorf("ReplyTake(limit 2) = %d replies, want %d", len(got), n)
		}
		all = append(all, got...)
	}
	seen := map[int]bool{}
	for _, g := range all {
		if seen[g.StepIndex] {
			t.Errorf("reply for step %d taken twice", g.StepIndex)
		}
		seen[g.StepIndex] = true
		checkEqual(t, fmt.Sprintf("reply %d", g.StepIndex), g, want[g.StepIndex], "ID")
	}
	if len(seen) != 5 {
		t.Errorf("took %d distinct replies, want 5", len(seen))
	}
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		return x.ReplyInsertMany(ctx, &store.ReplyInsertManyParams{Replies: nil})
	})
}

// testRequestOwnPrevious: a request that carries its previous output (a
// parallel group's branch, the step after a group) gets it, or none,
// instead of the output of the step before, through RequestClaim and
// RequestGet; a request that carries none gets the step before's.
func testRequestOwnPrevious(t *testing.T, d store.Driver) {
	setupPayload(t, d)
	exp := at(time.Minute)
	own := newRequest("t", 2, "a", exp)
	own.PreviousOwn, own.PreviousOutput = true, []byte(`{"step0":{"out":0},"step1":{"out":1}}`)
	none := newRequest("t", 1, "a", exp)
	none.PreviousOwn, none.Attempt, none.CreatedAt = true, 2, at(time.Second)
	plain := newRequest("t", 1, "b", exp)
	insertRequests(t, d, own, none, plain)
	want := map[int][]byte{2: own.PreviousOutput, 1: nil}
	got := claimRequests(t, d, store.RequestClaimParams{Agent: "a", ClaimedBy: "rt", Now: base, Limit: 10})
	if len(got) != 2 {
		t.Fatalf("RequestClaim = %v, want 2 requests", reqKeys(got))
	}
	for _, g := range got {
		if string(g.PreviousOutput) != string(want[g.StepIndex]) || (want[g.StepIndex] == nil) != (g.PreviousOutput == nil) {
			t.Errorf("claimed request of step %d: PreviousOutput %q, want %q", g.StepIndex, g.PreviousOutput, want[g.StepIndex])
		}
	}
	for _, r := range []*dt.AgentRequest{own, none, plain} {
		g, err := d.Reader().RequestGet(context.Background(), &store.RequestGetParams{ID: r.ID})
		if err != nil {
			t.Fatal(err)
		}
		w := []byte(`{"out":0}`) // the step before's
		if r.PreviousOwn {
			w = r.PreviousOutput
		}
		if string(g.PreviousOutput) != string(w) || (w == nil) != (g.PreviousOutput == nil) {
			t.Errorf("RequestGet of step %d (own %v): PreviousOutput %q, want %q", r.StepIndex, r.PreviousOwn, g.PreviousOutput, w)
		}
	}
}
