package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/store"
)

// Remote agents: the primitives behind the HTTP API's poll/complete/fail,
// each fenced by the claim (request ID + ClaimedBy) and the deadline.
func remoteCases() []testCase {
	return []testCase{
		{"Get", testRemoteGet},
		{"Available", testRemoteAvailable},
		{"Complete", testRemoteComplete},
		{"CompleteSupersededAttempt", testRemoteCompleteSuperseded},
		{"ReleaseOne", testRemoteReleaseOne},
		{"ReleaseOneRedeliveryDelay", testRemoteRedeliveryDelay},
	}
}

// setupRemote stores task "t" with three Processed steps whose outputs are
// set and whose attempt is 1 (the attempt newRequest uses).
func setupRemote(t *testing.T, d store.Driver) *dt.Task {
	t.Helper()
	task := newTask("t")
	task.StepCount = 3
	insertTasks(t, d, task)
	var steps []*dt.StepRecord
	for i := range 3 {
		s := newStep("t", i)
		s.ProcessState = dt.Processed
		s.Attempt = 1
		s.Output = []byte(fmt.Sprintf(`{"out":%d}`, i))
		steps = append(steps, s)
	}
	insertSteps(t, d, steps...)
	return task
}

// remoteTx runs fn in a write transaction and returns its error (the
// transaction rolls back on error).
func remoteTx(d store.Driver, fn func(ctx context.Context, x store.Executor) error) error {
	return d.InTx(context.Background(), fn)
}

func testRemoteGet(t *testing.T, d store.Driver) {
	task := setupRemote(t, d)
	exp := at(time.Minute)
	r1 := newRequest("t", 1, "a", exp)
	r2 := newRequest("t", 2, "a", exp)
	r2.Kind, r2.IdempotencyKey, r2.ClaimedBy = dt.KindCompensate, "t/2/step2/compensate", "remote:x"
	insertRequests(t, d, r1, r2)

	got, err := d.Reader().RequestGet(context.Background(), &store.RequestGetParams{ID: r1.ID})
	if err != nil {
		t.Fatalf("RequestGet(%d): %v", r1.ID, err)
	}
	want := *r1
	want.Workflow, want.StepName, want.Input, want.PreviousOutput = task.Workflow, "step1", task.Input, []byte(`{"out":0}`)
	checkEqual(t, "request of step 1 (do)", got, &want)
	if got.StepOutput != nil {
		t.Errorf("do request: StepOutput %q, want none", got.StepOutput)
	}
	// Inside a transaction too, and a compensation carries the step's output.
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		got, err := x.RequestGet(ctx, &store.RequestGetParams{ID: r2.ID})
		if err != nil {
			return err
		}
		want := *r2
		want.Workflow, want.StepName, want.Input = task.Workflow, "step2", task.Input
		want.PreviousOutput, want.StepOutput = []byte(`{"out":1}`), []byte(`{"out":2}`)
		checkEqual(t, "request of step 2 (compensate, claimed)", got, &want)
		return nil
	})
	_, err = d.Reader().RequestGet(context.Background(), &store.RequestGetParams{ID: r2.ID + 1000})
	wantErrIs(t, err, store.ErrNotFound, "RequestGet of a missing ID")
}

func testRemoteAvailable(t *testing.T, d store.Driver) {
	setupRemote(t, d)
	ctx := context.Background()
	avail := func(agent string, now time.Time) bool {
		t.Helper()
		ok, err := d.Reader().RequestAvailable(ctx, &store.RequestAvailableParams{Agent: agent, Now: now})
		if err != nil {
			t.Fatalf("RequestAvailable(%s): %v", agent, err)
		}
		return ok
	}
	if avail("a", base) {
		t.Error("RequestAvailable with no requests = true")
	}
	insertRequests(t, d, newRequest("t", 0, "a", at(time.Second)))
	if !avail("a", base) {
		t.Error("RequestAvailable with an unclaimed request = false")
	}
	if avail("b", base) {
		t.Error("RequestAvailable for another agent = true")
	}
	if avail("a", at(time.Second)) {
		t.Error("RequestAvailable at the request's CompleteBy = true; it can no longer be claimed")
	}
	claimRequests(t, d, store.RequestClaimParams{Agent: "a", ClaimedBy: "rt", Now: base, Limit: 10})
	if avail("a", base) {
		t.Error("RequestAvailable with only a claimed request = true")
	}
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		ok, err := x.RequestAvailable(ctx, &store.RequestAvailableParams{Agent: "a", Now: base})
		if err != nil || ok {
			t.Errorf("RequestAvailable in a transaction = %v, %v; want false", ok, err)
		}
		return nil
	})
}

func testRemoteComplete(t *testing.T, d store.Driver) {
	setupRemote(t, d)
	exp := at(time.Minute)
	r0 := newRequest("t", 0, "a", exp)
	r1 := newRequest("t", 1, "a", exp)
	insertRequests(t, d, r0, r1)
	got := claimRequests(t, d, store.RequestClaimParams{Agent: "a", ClaimedBy: "remote:n1", Now: base, Limit: 1})
	if len(got) != 1 || got[0].ID != r0.ID {
		t.Fatalf("claim = %v, want request %d", reqKeys(got), r0.ID)
	}
	complete := func(id int64, claimedBy string, now time.Time) (*dt.AgentRequest, error) {
		var out *dt.AgentRequest
		err := remoteTx(d, func(ctx context.Context, x store.Executor) error {
			var err error
			out, err = x.RequestComplete(ctx, &store.RequestCompleteParams{ID: id, ClaimedBy: claimedBy, Now: now})
			return err
		})
		return out, err
	}
	// Wrong claim, at or past the deadline, unclaimed: stale, nothing changed.
	_, err := complete(r0.ID, "remote:other", base)
	wantErrIs(t, err, store.ErrStale, "RequestComplete with another claim")
	_, err = complete(r0.ID, "remote:n1", exp)
	wantErrIs(t, err, store.ErrStale, "RequestComplete at CompleteBy")
	_, err = complete(r0.ID, "remote:n1", exp.Add(time.Hour))
	wantErrIs(t, err, store.ErrStale, "RequestComplete past CompleteBy")
	_, err = complete(r1.ID, "", base)
	wantErrIs(t, err, store.ErrStale, "RequestComplete of an unclaimed request")
	_, err = complete(r1.ID, "remote:n1", base)
	wantErrIs(t, err, store.ErrStale, "RequestComplete of an unclaimed request with another request's claim")
	if g, err := d.Reader().RequestGet(context.Background(), &store.RequestGetParams{ID: r0.ID}); err != nil || g.ClaimedBy != "remote:n1" {
		t.Fatalf("after refused completions, request = %+v, %v; want it still claimed by remote:n1", g, err)
	}
	// Outside a transaction: refused.
	if _, err := d.Reader().RequestComplete(context.Background(), &store.RequestCompleteParams{ID: r0.ID, ClaimedBy: "remote:n1", Now: base}); err == nil {
		t.Error("RequestComplete on the Reader succeeded; want an error")
	}

	out, err := complete(r0.ID, "remote:n1", exp.Add(-time.Microsecond))
	if err != nil {
		t.Fatalf("RequestComplete with the claim before CompleteBy: %v", err)
	}
	want := *r0
	want.ClaimedBy = "remote:n1"
	checkEqual(t, "completed request", out, &want)
	_, err = d.Reader().RequestGet(context.Background(), &store.RequestGetParams{ID: r0.ID})
	wantErrIs(t, err, store.ErrNotFound, "RequestGet of the completed request")
	// A second completion with the same claim: the request is gone.
	_, err = complete(r0.ID, "remote:n1", base)
	wantErrIs(t, err, store.ErrNotFound, "second RequestComplete")
	_, err = complete(r1.ID+1000, "remote:n1", base)
	wantErrIs(t, err, store.ErrNotFound, "RequestComplete of an ID that never existed")

	// A rolled-back completion leaves the request claimed.
	claimRequests(t, d, store.RequestClaimParams{Agent: "a", ClaimedBy: "remote:n2", Now: base, Limit: 1})
	boom := errors.New("boom")
	err = remoteTx(d, func(ctx context.Context, x store.Executor) error {
		if _, err := x.RequestComplete(ctx, &store.RequestCompleteParams{ID: r1.ID, ClaimedBy: "remote:n2", Now: base}); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("rolled-back completion: %v", err)
	}
	if _, err := complete(r1.ID, "remote:n2", base); err != nil {
		t.Errorf("completion after a rolled-back one: %v", err)
	}
}

// A request whose step has moved on to a later attempt is stale even if
// its row is still there and claimed.
func testRemoteCompleteSuperseded(t *testing.T, d store.Driver) {
	setupRemote(t, d)
	steps := getSteps(t, d, "t")
	steps[0].Attempt = 2
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		return x.StepUpdateMany(ctx, &store.StepUpdateManyParams{Steps: steps[:1]})
	})
	r0 := newRequest("t", 0, "a", at(time.Minute)) // attempt 1
	insertRequests(t, d, r0)
	claimRequests(t, d, store.RequestClaimParams{Agent: "a", ClaimedBy: "remote:n", Now: base, Limit: 1})
	err := remoteTx(d, func(ctx context.Context, x store.Executor) error {
		_, err := x.RequestComplete(ctx, &store.RequestCompleteParams{ID: r0.ID, ClaimedBy: "remote:n", Now: base})
		return err
	})
	wantErrIs(t, err, store.ErrStale, "RequestComplete of a superseded attempt")
	err = remoteTx(d, func(ctx context.Context, x store.Executor) error {
		_, err := x.RequestReleaseOne(ctx, &store.RequestReleaseOneParams{ID: r0.ID, ClaimedBy: "remote:n", Now: base, Redelivery: store.Redelivery{}})
		return err
	})
	wantErrIs(t, err, store.ErrStale, "RequestReleaseOne of a superseded attempt")
}

func testRemoteReleaseOne(t *testing.T, d store.Driver) {
	setupRemote(t, d)
	exp := at(time.Minute)
	r0 := newRequest("t", 0, "a", exp)
	r1 := newRequest("t", 1, "a", exp)
	insertRequests(t, d, r0, r1)
	claimRequests(t, d, store.RequestClaimParams{Agent: "a", ClaimedBy: "remote:n1", Now: base, Limit: 2})
	release := func(id int64, claimedBy string, now time.Time) (*dt.AgentRequest, error) {
		var out *dt.AgentRequest
		err := remoteTx(d, func(ctx context.Context, x store.Executor) error {
			var err error
			out, err = x.RequestReleaseOne(ctx, &store.RequestReleaseOneParams{ID: id, ClaimedBy: claimedBy, Now: now, Redelivery: store.Redelivery{}})
			return err
		})
		return out, err
	}
	_, err := release(r0.ID, "remote:other", base)
	wantErrIs(t, err, store.ErrStale, "RequestReleaseOne with another claim")
	_, err = release(r0.ID, "remote:n1", exp)
	wantErrIs(t, err, store.ErrStale, "RequestReleaseOne at CompleteBy")
	_, err = release(r0.ID+1000, "remote:n1", base)
	wantErrIs(t, err, store.ErrNotFound, "RequestReleaseOne of a missing ID")

	out, err := release(r0.ID, "remote:n1", base)
	if err != nil {
		t.Fatalf("RequestReleaseOne with the claim: %v", err)
	}
	want := *r0
	checkEqual(t, "released request", out, &want)
	// Only that one is free again; its old claim no longer holds.
	got := claimRequests(t, d, store.RequestClaimParams{Agent: "a", ClaimedBy: "remote:n2", Now: base, Limit: 10})
	if len(got) != 1 || got[0].ID != r0.ID || got[0].Input == nil {
		t.Fatalf("claim after release = %v, want request %d with its payload", reqKeys(got), r0.ID)
	}
	_, err = release(r0.ID, "remote:n1", base)
	wantErrIs(t, err, store.ErrStale, "RequestReleaseOne with the claim given up")
	err = remoteTx(d, func(ctx context.Context, x store.Executor) error {
		_, err := x.RequestComplete(ctx, &store.RequestCompleteParams{ID: r0.ID, ClaimedBy: "remote:n1", Now: base})
		return err
	})
	wantErrIs(t, err, store.ErrStale, "RequestComplete with the claim given up")
	if g, err := d.Reader().RequestGet(context.Background(), &store.RequestGetParams{ID: r1.ID}); err != nil || g.ClaimedBy != "remote:n1" {
		t.Errorf("the other request = %+v, %v; want it still claimed by remote:n1", g, err)
	}
}

// A request given back with a redelivery delay is passed over by claims
// and RequestAvailable until the delay has passed; the delay doubles with
// each release, up to its Max, and one reaching past CompleteBy leaves
// the request unclaimable.
func testRemoteRedeliveryDelay(t *testing.T, d store.Driver) {
	setupRemote(t, d)
	exp := at(time.Minute)
	r0 := newRequest("t", 0, "a", exp)
	insertRequests(t, d, r0)
	after := store.Redelivery{First: 2 * time.Second, Max: 5 * time.Second}
	available := func(now time.Time) bool {
		t.Helper()
		ok, err := d.Reader().RequestAvailable(context.Background(), &store.RequestAvailableParams{Agent: "a", Now: now})
		if err != nil {
			t.Fatalf("RequestAvailable: %v", err)
		}
		return ok
	}
	claimAt := func(claimedBy string, now time.Time) []*dt.AgentRequest {
		t.Helper()
		return claimRequests(t, d, store.RequestClaimParams{Agent: "a", ClaimedBy: claimedBy, Now: now, Limit: 10})
	}
	release := func(claimedBy string, now time.Time) {
		t.Helper()
		err := remoteTx(d, func(ctx context.Context, x store.Executor) error {
			_, err := x.RequestReleaseOne(ctx, &store.RequestReleaseOneParams{ID: r0.ID, ClaimedBy: claimedBy, Now: now, Redelivery: after})
			return err
		})
		if err != nil {
			t.Fatalf("RequestReleaseOne by %s: %v", claimedBy, err)
		}
	}

	now := base
	for i, delay := range []time.Duration{2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second} {
		claimedBy := fmt.Sprintf("remote:n%d", i)
		if got := claimAt(claimedBy, now); len(got) != 1 || got[0].ID != r0.ID {
			t.Fatalf("release %d: claim at %s = %v, want request %d", i, now.Sub(base), reqKeys(got), r0.ID)
		}
		release(claimedBy, now)
		due := now.Add(delay)
		if available(due.Add(-time.Microsecond)) {
			t.Fatalf("release %d: RequestAvailable %s after it = true; want false until %s", i, delay-time.Microsecond, delay)
		}
		if got := claimAt("remote:early", due.Add(-time.Microsecond)); len(got) != 0 {
			t.Fatalf("release %d: claim %s after it = %v; want nothing until %s", i, delay-time.Microsecond, reqKeys(got), delay)
		}
		if !available(due) {
			t.Fatalf("release %d: RequestAvailable %s after it = false", i, delay)
		}
		now = due
	}

	// A delay past CompleteBy: the request is never claimable again.
	if got := claimAt("remote:last", now); len(got) != 1 {
		t.Fatalf("last claim = %v", reqKeys(got))
	}
	after = store.Redelivery{First: 2 * time.Minute, Max: 2 * time.Minute}
	release("remote:last", now)
	if available(exp.Add(-time.Microsecond)) {
		t.Error("RequestAvailable before CompleteBy with the delay past it = true")
	}
	if got := claimAt("remote:late", exp.Add(-time.Microsecond)); len(got) != 0 {
		t.Errorf("claim before CompleteBy with the delay past it = %v, want nothing", reqKeys(got))
	}

	// Doubling runs on until Max however far it is from First (here 32
	// doublings: 1µs to about 71 minutes, held at 1 hour). (The request
	// above is out of the way: its delay reaches past its CompleteBy.)
	r1 := newRequest("t", 1, "a", at(240*time.Hour))
	insertRequests(t, d, r1)
	long := store.Redelivery{First: time.Microsecond, Max: time.Hour}
	t1 := now
	for i := 0; i < 35; i++ {
		got := claimRequests(t, d, store.RequestClaimParams{Agent: "a", ClaimedBy: fmt.Sprintf("remote:l%d", i), Now: t1, Limit: 1})
		if len(got) != 1 || got[0].ID != r1.ID {
			t.Fatalf("long back-off, release %d: claim at %s = %v, want request %d", i, t1.Sub(base), reqKeys(got), r1.ID)
		}
		err := remoteTx(d, func(ctx context.Context, x store.Executor) error {
			_, err := x.RequestReleaseOne(ctx, &store.RequestReleaseOneParams{ID: r1.ID, ClaimedBy: fmt.Sprintf("remote:l%d", i), Now: t1, Redelivery: long})
			return err
		})
		if err != nil {
			t.Fatalf("long back-off, release %d: %v", i, err)
		}
		want := min(time.Hour, time.Microsecond<<i)
		if available(t1.Add(want - time.Microsecond)) {
			t.Fatalf("long back-off, release %d: available before %s", i, want)
		}
		t1 = t1.Add(want)
		if !available(t1) {
			t.Fatalf("long back-off, release %d: not available after %s", i, want)
		}
	}
}
