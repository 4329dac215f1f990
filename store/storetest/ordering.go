package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/flow"
	"github.com/drover-run/drover/store"
)

// LockWaits is optionally implemented by the store.Driver an Opener returns,
// for the tests of blocking behaviour. LockWaits returns a number that rises
// when a transaction of this store starts waiting for a lock that another
// transaction of the store holds: the number of transactions waiting now, or
// a running total of waits. The racing-submitters test uses it to know that
// its second transaction is blocked; without it, that test gives the second
// transaction a grace period to (wrongly) commit before it releases the first.
type LockWaits interface {
	LockWaits(ctx context.Context) (int64, error)
}

// The ordering cases: positions within an ordering key, and the claim that
// starts a keyed task only after every earlier task of its key is final.
func orderingCases() []testCase {
	return []testCase{
		{"ReservePositions", testOrderingReserve},
		{"SubmitAssignsPositions", testOrderingSubmit},
		{"ClaimWaitsForEarlierTasks", testOrderingClaimStates},
		{"KeysAreIndependent", testOrderingKeysIndependent},
		{"ReleaseWhenPredecessorFinal", testOrderingRelease},
		{"SupervisorRecoveryKeepsSuccessorWaiting", testOrderingRecovery},
		{"RacingSubmittersFollowCommitOrder", testOrderingRacingSubmitters},
		{"RetentionPrunesKeyWithItsLastTask", testOrderingKeyPruned},
		{"SubmitOfAnExistingTaskWithAnotherKey", testOrderingExistingTaskNewKey},
	}
}

// oneStepWF is a workflow of one step, agent "worker", no compensation.
func oneStepWF() workflow {
	return workflow{
		name:   "one",
		steps:  []wfStep{{"work", "worker", ""}},
		policy: dt.PolicyError, threshold: 2, retryDelay: time.Second, timeout: 10 * time.Second,
	}
}

// keyed is a submission of w with an ordering key.
func keyed(w workflow, id, key string) flow.Submission {
	s := w.submission(id, `{"id":"`+id+`"}`, base)
	s.Task.OrderingKey = key
	return s
}

func (e *env) submitAll(subs ...flow.Submission) []*dt.Task {
	e.t.Helper()
	var out []*dt.Task
	inTx(e.t, e.d, func(ctx context.Context, x store.Executor) error {
		var err error
		out, err = flow.Submit(ctx, x, subs)
		return err
	})
	return out
}

// claimIDs claims at now and returns the IDs of the claimed tasks, sorted.
func (e *env) claimIDs(now time.Time) []string {
	e.t.Helper()
	var ids []string
	for _, r := range e.claim(now) {
		ids = append(ids, r.TaskID)
	}
	return sorted(ids)
}

// notifyLog records the topics a transaction notifies.
type notifyLog struct {
	store.Executor
	topics *[]string
}

func (n notifyLog) Notify(ctx context.Context, params *store.NotifyParams) error {
	*n.topics = append(*n.topics, params.Topic)
	return store.Notify(ctx, n.Executor, params)
}

// inTxNotes runs fn in a transaction and returns the topics it notified.
func inTxNotes(t *testing.T, d store.Driver, fn func(ctx context.Context, x store.Executor) error) []string {
	t.Helper()
	var topics []string
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		topics = nil
		return fn(ctx, notifyLog{x, &topics})
	})
	return topics
}

func notifiesTasks(topics []string) bool { return contains(topics, store.TopicTasks) }

// ---- cases ----

func testOrderingReserve(t *testing.T, d store.Driver) {
	ctx := context.Background()
	reserve := func(keys ...string) []int64 {
		t.Helper()
		var got []int64
		inTx(t, d, func(ctx context.Context, x store.Executor) error {
			var err error
			got, err = x.OrderingKeyReserve(ctx, &store.OrderingKeyReserveParams{Keys: keys})
			return err
		})
		return got
	}
	long := strings.Repeat("κ", 128) // 256 bytes
	if got := fmt.Sprint(reserve("b", "a", "b", "c d", "b", long)); got != "[1 1 2 1 3 1]" {
		t.Errorf("first reservation = %s, want [1 1 2 1 3 1] (per key, consecutive, in input order)", got)
	}
	if got := fmt.Sprint(reserve("a", "b", long, "new")); got != "[2 4 2 1]" {
		t.Errorf("second reservation = %s, want [2 4 2 1]", got)
	}
	if got := reserve(); len(got) != 0 {
		t.Errorf("empty reservation = %v, want nothing", got)
	}
	// Keys compare exactly: no case folding, no trimming.
	if got := fmt.Sprint(reserve("A", "a ", "a")); got != "[1 1 3]" {
		t.Errorf("reservation of A, \"a \", a = %s, want [1 1 3]", got)
	}
	// A rolled-back reservation takes nothing.
	sentinel := errors.New("roll back")
	err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		got, err := x.OrderingKeyReserve(ctx, &store.OrderingKeyReserveParams{Keys: []string{"a", "a"}})
		if err != nil {
			return err
		}
		if fmt.Sprint(got) != "[4 5]" {
			t.Errorf("reservation in the rolled-back transaction = %v, want [4 5]", got)
		}
		return sentinel
	})
	if !errors.Is(err, sentinel) {
		t.Fatalf("InTx = %v, want the callback's error", err)
	}
	if got := fmt.Sprint(reserve("a")); got != "[4]" {
		t.Errorf("reservation after a rollback = %s, want [4]", got)
	}
	// Outside a transaction it is refused.
	if _, err := d.Reader().OrderingKeyReserve(ctx, &store.OrderingKeyReserveParams{Keys: []string{"a"}}); err == nil {
		t.Error("OrderingKeyReserve on the Reader succeeded, want an error")
	}
}

func testOrderingSubmit(t *testing.T, d store.Driver) {
	e := newEnv(t, d)
	w := oneStepWF()
	out := e.submitAll(keyed(w, "a1", "k"), keyed(w, "x1", "other"), w.submission("free", `{}`, base),
		keyed(w, "a2", "k"), keyed(w, "a1", "k"), keyed(w, "a3", "k"))
	want := map[string]int64{"a1": 1, "x1": 1, "free": 0, "a2": 2, "a3": 3}
	for _, tk := range out {
		if tk.OrderingSeq != want[tk.ID] {
			t.Errorf("Submit returned %s at position %d, want %d", tk.ID, tk.OrderingSeq, want[tk.ID])
		}
	}
	for id, seq := range want {
		tk := getTask(t, d, id)
		if tk.OrderingSeq != seq {
			t.Errorf("stored %s at position %d, want %d", id, tk.OrderingSeq, seq)
		}
		if wantKey := map[string]string{"a1": "k", "a2": "k", "a3": "k", "x1": "other"}[id]; tk.OrderingKey != wantKey {
			t.Errorf("stored %s with key %q, want %q", id, tk.OrderingKey, wantKey)
		}
	}
	// Submitting an existing task again keeps its position; a new one goes last.
	out = e.submitAll(keyed(w, "a2", "k"), keyed(w, "a4", "k"))
	if out[0].OrderingSeq != 2 || out[1].OrderingSeq <= 3 {
		t.Errorf("resubmitted a2 at %d (want 2), new a4 at %d (want > 3)", out[0].OrderingSeq, out[1].OrderingSeq)
	}
	// Every read returns the position.
	ctx := context.Background()
	many, err := d.Reader().TaskGetMany(ctx, &store.TaskGetManyParams{IDs: []string{"a1", "a2", "free"}})
	if err != nil {
		t.Fatal(err)
	}
	listed, err := d.Reader().TaskList(ctx, &store.TaskListParams{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range append(many, listed...) {
		if seq, found := want[tk.ID]; found && tk.OrderingSeq != seq {
			t.Errorf("read %s at position %d, want %d", tk.ID, tk.OrderingSeq, seq)
		}
	}
	// A task inserted with every field set round-trips its position.
	full := fullTask("full")
	full.OrderingSeq = 1 << 40
	insertTasks(t, d, full)
	checkEqual(t, "task with a position", getTask(t, d, "full"), full)
}

// testOrderingClaimStates runs the claim against an earlier task of the same
// key in every state.
func testOrderingClaimStates(t *testing.T, d store.Driver) {
	mk := func(id, key string, seq int64, state dt.ProcessState) *dt.Task {
		tk := newTask(id)
		tk.OrderingKey, tk.OrderingSeq, tk.ProcessState = key, seq, state
		switch state {
		case dt.Processing, dt.Compensating:
			tk.LockedBy, tk.CompleteBy = "other", tp(at(time.Hour))
		}
		return tk
	}
	var (
		tasks []*dt.Task
		want  []string
	)
	for _, s := range dt.AllStates {
		key := "k-" + string(s)
		first := mk("first-"+string(s), key, 1, s)
		if s == dt.Pending {
			first.AvailableAt = at(time.Hour) // waiting out a back-off: not claimable itself
		}
		tasks = append(tasks, first, mk("next-"+string(s), key, 2, dt.Pending))
		if s.Final() {
			want = append(want, "next-"+string(s))
		}
	}
	// An unheld Compensating task has started: it is never held back.
	comp := mk("comp", "k-Processing", 3, dt.Compensating)
	comp.LockedBy, comp.CompleteBy = "", nil
	want = append(want, "comp")
	// Positions may have gaps; a later unfinished task holds nothing back.
	tasks = append(tasks, comp,
		mk("gap-1", "k-gap", 1, dt.Processed), mk("gap-5", "k-gap", 5, dt.Pending),
		mk("late-2", "k-late", 2, dt.Processing), mk("late-1", "k-late", 1, dt.Pending))
	want = append(want, "gap-5", "late-1")
	insertTasks(t, d, tasks...)

	var claimed []*dt.Task
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		var err error
		claimed, err = x.TaskClaim(ctx, &store.TaskClaimParams{Instance: "s1", Now: base, Limit: 100})
		return err
	})
	if got := sorted(taskIDs(claimed)); !sameSet(got, want) {
		t.Fatalf("TaskClaim = %v\nwant %v\n(a Pending task waits while an earlier task of its key is Pending, Processing or Compensating)", got, sorted(want))
	}
	for _, c := range claimed {
		var orig *dt.Task
		for _, tk := range tasks {
			if tk.ID == c.ID {
				orig = tk
			}
		}
		if c.OrderingKey != orig.OrderingKey || c.OrderingSeq != orig.OrderingSeq {
			t.Errorf("claimed %s returned with key %q position %d, want %q %d", c.ID, c.OrderingKey, c.OrderingSeq, orig.OrderingKey, orig.OrderingSeq)
		}
	}
	// The waiting ones come once their predecessors are final; the
	// predecessors that are Pending come at their own time first.
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		got, err := x.TaskClaim(ctx, &store.TaskClaimParams{Instance: "s1", Now: at(time.Hour), Limit: 100})
		if err != nil {
			return err
		}
		if ids := taskIDs(got); !sameSet(ids, []string{"first-Pending"}) {
			t.Errorf("claim an hour later = %v, want first-Pending only (next-Pending waits for it)", sorted(ids))
		}
		return nil
	})
}

func testOrderingKeysIndependent(t *testing.T, d store.Driver) {
	e := newEnv(t, d)
	w := oneStepWF()
	e.submitAll(keyed(w, "a1", "a"), keyed(w, "a2", "a"), keyed(w, "b1", "b"), keyed(w, "b2", "b"),
		w.submission("n1", `{"n":1}`, base), w.submission("n2", `{"n":2}`, base))
	if got := e.claimIDs(base); fmt.Sprint(got) != "[a1 b1 n1 n2]" {
		t.Fatalf("first claim = %v, want the head of each key and every unkeyed task: [a1 b1 n1 n2]", got)
	}
	if got := e.claimIDs(base); len(got) != 0 {
		t.Fatalf("second claim = %v, want nothing while a1 and b1 run", got)
	}
}

// testOrderingRelease finishes the head of a key in each final state the state
// machine reaches and checks the next task becomes claimable, and that the
// transaction notifies TopicTasks.
func testOrderingRelease(t *testing.T, d store.Driver) {
	e := newEnv(t, d)
	w := oneStepWF()
	comp := orderWF()
	comp.policy = dt.PolicyCompensate
	e.submitAll(
		keyed(w, "p1", "p"), keyed(w, "p2", "p"), // p1 Processed
		keyed(w, "e1", "e"), keyed(w, "e2", "e"), // e1 Error (permanent failure)
		keyed(w, "c1", "c"), keyed(w, "c2", "c"), // c1 Cancelled while Processing
		keyed(w, "q1", "q"), keyed(w, "q2", "q"), // q1 Cancelled while Pending
		keyed(comp, "m1", "m"), keyed(w, "m2", "m"), // m1 Compensating, then Compensated
		w.submission("free", `{}`, base),
	)
	// q1 is not available yet, so nothing of key q is claimed.
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		tk, err := x.TaskGet(ctx, &store.TaskGetParams{ID: "q1"})
		if err != nil {
			return err
		}
		tk.AvailableAt = at(time.Hour)
		return x.TaskUpdateMany(ctx, &store.TaskUpdateManyParams{Tasks: []*dt.Task{tk}})
	})
	reqs := e.claim(base)
	byTask := map[string]*dt.AgentRequest{}
	for _, r := range reqs {
		byTask[r.TaskID] = r
	}
	if got := sorted(keysOf(byTask)); fmt.Sprint(got) != "[c1 e1 free m1 p1]" {
		t.Fatalf("first claim = %v, want [c1 e1 free m1 p1]", got)
	}
	apply := func(now time.Time, r *dt.AgentReply) ([]*dt.AgentRequest, []string) {
		t.Helper()
		var next []*dt.AgentRequest
		topics := inTxNotes(t, d, func(ctx context.Context, x store.Executor) error {
			var err error
			next, _, err = e.m.ApplyReplies(ctx, x, now, []*dt.AgentReply{r})
			return err
		})
		e.m.Commit()
		return next, topics
	}
	claimNow := func(want string) {
		t.Helper()
		if got := fmt.Sprint(e.claimIDs(at(time.Second))); got != want {
			t.Fatalf("claim = %s, want %s", got, want)
		}
	}

	// An unkeyed task finishing wakes nobody: nothing waits for it.
	if _, topics := apply(at(time.Second), ok(byTask["free"], `"x"`)); notifiesTasks(topics) {
		t.Errorf("finishing an unkeyed task notified %v", topics)
	}
	claimNow("[]")

	// Processed.
	if _, topics := apply(at(time.Second), ok(byTask["p1"], `"x"`)); !notifiesTasks(topics) {
		t.Errorf("p1 Processed: notified %v, want %s", topics, store.TopicTasks)
	}
	e.wantState("p1", dt.Processed, dt.Processed)
	claimNow("[p2]")

	// Error (permanent failure, policy error).
	if _, topics := apply(at(time.Second), failed(byTask["e1"], "no")); !notifiesTasks(topics) {
		t.Errorf("e1 Error: notified %v, want %s", topics, store.TopicTasks)
	}
	e.wantState("e1", dt.Error, dt.Error)
	claimNow("[e2]")

	// Cancelled, held and not.
	for _, id := range []string{"c1", "q1"} {
		topics := inTxNotes(t, d, func(ctx context.Context, x store.Executor) error {
			_, err := flow.Cancel(ctx, x, id, "operator", "test", at(time.Second))
			return err
		})
		if !notifiesTasks(topics) {
			t.Errorf("%s Cancelled: notified %v, want %s", id, topics, store.TopicTasks)
		}
	}
	claimNow("[c2 q2]")

	// Compensating holds the key; Compensated releases it.
	next, _ := apply(at(time.Second), ok(byTask["m1"], `"R"`))
	if len(next) != 1 {
		t.Fatalf("m1 step 0 done: dispatched %v, want step 1", reqKeys(next))
	}
	next, _ = apply(at(time.Second), failed(next[0], "card declined"))
	if len(next) != 1 || next[0].Kind != dt.KindCompensate {
		t.Fatalf("after the failure: %v, want one compensation", reqKeys(next))
	}
	e.wantState("m1", dt.Compensating, compState(dt.Processed, dt.Processing), dt.Error, dt.Pending)
	claimNow("[]")
	next, topics := apply(at(time.Second), ok(next[0], `"undone"`))
	if len(next) != 0 || !notifiesTasks(topics) {
		t.Errorf("m1 Compensated: dispatched %v, notified %v; want nothing and %s", reqKeys(next), topics, store.TopicTasks)
	}
	e.wantState("m1", dt.Compensated, compState(dt.Processed, dt.Compensated), dt.Error, dt.Pending)
	claimNow("[m2]")
}

func keysOf[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// testOrderingRecovery: a head whose step times out goes back to Pending
// (after a back-off) and stays at the head of its key.
func testOrderingRecovery(t *testing.T, d store.Driver) {
	e := newEnv(t, d)
	w := oneStepWF() // timeout 10s, threshold 2, retry delay 1s
	e.submitAll(keyed(w, "h", "k"), keyed(w, "s", "k"))
	sv := e.leader("sup", base, time.Hour)

	if got := e.claimIDs(base); fmt.Sprint(got) != "[h]" {
		t.Fatalf("first claim = %v, want [h]", got)
	}
	var topics []string
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		topics = nil
		_, err := sv.Sweep(ctx, notifyLog{x, &topics}, at(11*time.Second), 100)
		return err
	})
	sv.Commit()
	e.wantState("h", dt.Pending, dt.Pending)
	if !notifiesTasks(topics) {
		t.Errorf("recovery notified %v, want %s", topics, store.TopicTasks)
	}
	// During the back-off neither runs: h is not available, s waits for h.
	if got := e.claimIDs(at(11 * time.Second)); len(got) != 0 {
		t.Fatalf("claim during h's back-off = %v, want nothing (s must wait for h)", got)
	}
	// After it, h again, still not s.
	if got := e.claimIDs(at(12 * time.Second)); fmt.Sprint(got) != "[h]" {
		t.Fatalf("claim after the back-off = %v, want [h]", got)
	}
	if got := e.claimIDs(at(12 * time.Second)); len(got) != 0 {
		t.Fatalf("claim while h runs again = %v, want nothing", got)
	}
	// At the threshold h ends in Error: s may start.
	e.mustSweep(sv, at(23*time.Second), 1)
	e.wantState("h", dt.Error, dt.Error)
	if got := e.claimIDs(at(23 * time.Second)); fmt.Sprint(got) != "[s]" {
		t.Fatalf("claim after h's Error = %v, want [s]", got)
	}
}

// testOrderingRacingSubmitters: T1 submits with key k and keeps its
// transaction open; T2 submits with k meanwhile. T2 must wait for T1 (the
// write lock on SQLite, the key's row on PostgreSQL), so it commits after T1,
// and its task gets the later position. A store that handed out positions
// without that wait would let T2's task become visible, and claimable, while
// the task before it in its key is not committed yet.
func testOrderingRacingSubmitters(t *testing.T, d store.Driver) {
	// First on a new key (on PostgreSQL T2 waits on T1's uncommitted insert
	// of the key's row), then on the same key again (T2 waits on the row's
	// lock).
	raceSubmitters(t, d, "t1", "t2", 1)
	raceSubmitters(t, d, "t3", "t4", 3)
	e := newEnv(t, d)
	if got := e.claimIDs(base); fmt.Sprint(got) != "[t1]" {
		t.Fatalf("claim = %v, want [t1] (the others wait for it)", got)
	}
}

// raceSubmitters runs T1 (submitting id1) and T2 (id2) on key k as described
// above; id1 must get position want and id2 want+1.
func raceSubmitters(t *testing.T, d store.Driver, id1, id2 string, want int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w := oneStepWF()
	var (
		t2Done     = make(chan error, 1)
		seq1, seq2 atomic.Int64
		released   atomic.Bool
		t2Early    atomic.Bool
	)
	release := holdOpen(ctx, t, d, func(ctx context.Context, x store.Executor) error {
		out, err := flow.Submit(ctx, x, []flow.Submission{keyed(w, id1, "k")})
		if err == nil {
			seq1.Store(out[0].OrderingSeq)
		}
		return err
	})

	probe, _ := d.(LockWaits)
	var waitsBefore int64
	if probe != nil {
		var err error
		if waitsBefore, err = probe.LockWaits(ctx); err != nil {
			t.Fatalf("LockWaits: %v", err)
		}
	}
	go func() {
		err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
			out, err := flow.Submit(ctx, x, []flow.Submission{keyed(w, id2, "k")})
			if err == nil {
				seq2.Store(out[0].OrderingSeq)
			}
			return err
		})
		t2Early.Store(!released.Load())
		t2Done <- err
	}()

	// Wait until T2 is blocked behind T1 or, without a probe, give it time
	// to commit if it is not. Either way T2 must not finish first.
	var t2Err error
	t2Finished := false
	if probe != nil {
		tick := time.NewTicker(2 * time.Millisecond)
	wait:
		for {
			select {
			case t2Err = <-t2Done:
				t2Finished = true
				break wait
			case <-tick.C:
				n, err := probe.LockWaits(ctx)
				if err != nil {
					t.Fatalf("LockWaits: %v", err)
				}
				if n > waitsBefore {
					break wait
				}
			case <-ctx.Done():
				t.Fatal("T2 neither finished nor waited for a lock")
			}
		}
		tick.Stop()
	} else {
		select {
		case t2Err = <-t2Done:
			t2Finished = true
		case <-time.After(300 * time.Millisecond):
		}
	}
	if t2Finished {
		_ = release()
		t.Fatalf("T2 submitted with key k and ended (err %v, position %d) while T1, which holds position %d of k, was still open: "+
			"positions would not follow commit order", t2Err, seq2.Load(), seq1.Load())
	}
	// While T1 is open, neither task is visible.
	for _, id := range []string{id1, id2} {
		if _, err := d.Reader().TaskGet(ctx, &store.TaskGetParams{ID: id}); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s visible before T1 committed: err = %v", id, err)
		}
	}
	released.Store(true)
	if err := release(); err != nil {
		t.Fatalf("T1: %v", err)
	}
	if err := <-t2Done; err != nil {
		t.Fatalf("T2: %v", err)
	}
	if t2Early.Load() {
		t.Fatal("T2 committed before T1 was released")
	}
	if seq1.Load() != want || seq2.Load() != want+1 {
		t.Fatalf("positions: T1 (committed first) %d, T2 %d; want %d and %d", seq1.Load(), seq2.Load(), want, want+1)
	}
	if a, b := getTask(t, d, id1), getTask(t, d, id2); a.OrderingSeq >= b.OrderingSeq {
		t.Fatalf("stored positions %s %d, %s %d: the later commit has the smaller position", id1, a.OrderingSeq, id2, b.OrderingSeq)
	}
}

// testOrderingKeyPruned: retention deletes a key's row with the key's last
// task, so the key starts again at position 1, and not before: a key with
// a task left keeps counting. A submission whose ID existed reserved a
// position but inserted nothing, and must not keep the key alive.
func testOrderingKeyPruned(t *testing.T, d store.Driver) {
	e := newEnv(t, d)
	w := oneStepWF()
	seqs := func(out []*dt.Task) string {
		var s []string
		for _, tk := range out {
			s = append(s, fmt.Sprintf("%s=%d", tk.ID, tk.OrderingSeq))
		}
		return strings.Join(s, " ")
	}
	if got := seqs(e.submitAll(keyed(w, "p1", "k"), keyed(w, "p2", "k"), keyed(w, "q1", "other"))); got != "p1=1 p2=2 q1=1" {
		t.Fatalf("first submit: %s", got)
	}
	e.submitAll(keyed(w, "p1", "k")) // exists: nothing inserted
	// finish makes tasks final, last updated at base, and retention deletes
	// up to limit of them with a cutoff after base.
	finish := func(ids ...string) {
		t.Helper()
		inTx(t, d, func(ctx context.Context, x store.Executor) error {
			ts, err := x.TaskGetMany(ctx, &store.TaskGetManyParams{IDs: ids})
			if err != nil {
				return err
			}
			for _, tk := range ts {
				tk.ProcessState, tk.UpdatedAt = dt.Processed, base
			}
			return x.TaskUpdateMany(ctx, &store.TaskUpdateManyParams{Tasks: ts})
		})
	}
	retain := func(limit int) int {
		t.Helper()
		var n int
		inTx(t, d, func(ctx context.Context, x store.Executor) error {
			var err error
			n, err = x.TaskDeleteFinished(ctx, &store.TaskDeleteFinishedParams{Before: at(time.Minute), Limit: limit})
			return err
		})
		return n
	}
	finish("p1", "p2")
	if n := retain(1); n != 1 {
		t.Fatalf("retention deleted %d, want 1", n)
	}
	if got := seqs(e.submitAll(keyed(w, "p3", "k"))); got != "p3=4" {
		t.Fatalf("with one task of k left: %s, want p3=4 (positions 1-3 taken)", got)
	}
	finish("p3")
	if n := retain(10); n != 2 {
		t.Fatalf("retention deleted %d, want 2", n)
	}
	if got := seqs(e.submitAll(keyed(w, "p4", "k"), keyed(w, "q2", "other"))); got != "p4=1 q2=2" {
		t.Errorf("after k's last task went: %s, want p4=1 (k starts again) q2=2 (other keeps its task)", got)
	}
	// Ordered as before: p5 waits for p4, q2 for q1.
	e.submitAll(keyed(w, "p5", "k"))
	if got := e.claimIDs(at(2 * time.Minute)); strings.Join(got, ",") != "p4,q1" {
		t.Errorf("claimed %v, want [p4 q1] (p5 waits for p4, q2 for q1)", got)
	}
}

// A submission whose task exists already with another key is a conflict
// and leaves no row for that key (no task of it would ever be deleted to
// prune it): the key's first real task gets position 1. Submitted again
// with its own key, beside a new task of that key, the existing task keeps
// its position and the new one comes after the position reserved in vain.
func testOrderingExistingTaskNewKey(t *testing.T, d store.Driver) {
	e := newEnv(t, d)
	w := oneStepWF()
	e.submitAll(keyed(w, "a1", "k"), keyed(w, "c1", "k2"))
	err := d.InTx(context.Background(), func(ctx context.Context, x store.Executor) error {
		_, err := flow.Submit(ctx, x, []flow.Submission{keyed(w, "b1", "shared"), keyed(w, "a1", "fresh")})
		return err
	})
	wantErrIs(t, err, flow.ErrTaskConflict, "an existing task with another key")
	out := e.submitAll(keyed(w, "b1", "shared"), keyed(w, "c1", "k2"), keyed(w, "d1", "k2"))
	if out[0].OrderingSeq != 1 || out[1].OrderingSeq != 1 || out[2].OrderingSeq != 3 {
		t.Fatalf("submit: b1, c1, d1 at %d, %d, %d; want 1, 1 (c1 keeps its position), 3", out[0].OrderingSeq, out[1].OrderingSeq, out[2].OrderingSeq)
	}
	var seqs []int64
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		var err error
		seqs, err = x.OrderingKeyReserve(ctx, &store.OrderingKeyReserveParams{Keys: []string{"fresh", "shared", "k"}})
		return err
	})
	if fmt.Sprint(seqs) != "[1 2 2]" {
		t.Errorf("next positions of fresh, shared, k = %v, want [1 2 2] (no row for fresh; shared and k kept)", seqs)
	}
	// Pruning a key that has tasks, or no row, changes nothing.
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		if err := x.OrderingKeyPrune(ctx, &store.OrderingKeyPruneParams{Keys: []string{"k", "k", "nope"}}); err != nil {
			return err
		}
		var err error
		seqs, err = x.OrderingKeyReserve(ctx, &store.OrderingKeyReserveParams{Keys: []string{"k"}})
		return err
	})
	if fmt.Sprint(seqs) != "[3]" {
		t.Errorf("k after a prune of keys with tasks = %v, want [3] (the row kept: 2 was reserved above)", seqs)
	}
}
