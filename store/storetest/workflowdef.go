package storetest

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/store"
)

// The workflow-definition cases: stored versions of declarative workflows,
// and the two task columns that tie a task to its version and callback.
func workflowDefCases() []testCase {
	return []testCase{
		{"PutNumbersVersionsPerName", testWorkflowDefPutVersions},
		{"GetAndList", testWorkflowDefGetList},
		{"PutRollsBack", testWorkflowDefRollback},
		{"PutWaitsForConcurrentPut", testWorkflowDefPutBlocked},
		{"ConcurrentPuts", testWorkflowDefConcurrent},
		{"TaskVersionAndCallbackRoundTrip", testTaskVersionCallbackRoundTrip},
	}
}

func newDef(name, digest string, created time.Time) *dt.WorkflowDef {
	return &dt.WorkflowDef{
		Name: name, Digest: digest, CreatedAt: created,
		Source: []byte("name: " + name + "\n# " + digest + "\nsteps: []\n"),
	}
}

// putDef runs WorkflowDefPut in its own transaction.
func putDef(t *testing.T, d store.Driver, def *dt.WorkflowDef) (*dt.WorkflowDef, bool) {
	t.Helper()
	var (
		got     *dt.WorkflowDef
		created bool
	)
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		var err error
		got, created, err = x.WorkflowDefPut(ctx, &store.WorkflowDefPutParams{Def: def})
		return err
	})
	return got, created
}

func wantDef(t *testing.T, what string, got *dt.WorkflowDef, want *dt.WorkflowDef, version int) {
	t.Helper()
	w := *want
	w.Version = version
	checkEqual(t, what, got, &w)
}

func defKeys(defs []*dt.WorkflowDef) []string {
	out := make([]string, len(defs))
	for i, w := range defs {
		out[i] = fmt.Sprintf("%s@%d=%s", w.Name, w.Version, w.Digest)
	}
	return out
}

func testWorkflowDefPutVersions(t *testing.T, d store.Driver) {
	a1 := newDef("orders", "d1", at(time.Second))
	a1.Version = 99 // ignored: the store numbers versions
	got, created := putDef(t, d, a1)
	if !created {
		t.Fatal("first Put: created = false")
	}
	wantDef(t, "first version", got, a1, 1)

	a2 := newDef("orders", "d2", at(2*time.Second))
	got, created = putDef(t, d, a2)
	if !created {
		t.Fatal("Put of a new digest: created = false")
	}
	wantDef(t, "second version", got, a2, 2)

	// The first source again (a reload of an unchanged file): its version,
	// with the row as first stored, not the new CreatedAt or Source.
	again := newDef("orders", "d1", at(3*time.Second))
	again.Source = []byte("ignored")
	got, created = putDef(t, d, again)
	if created {
		t.Fatal("Put of a stored digest: created = true")
	}
	wantDef(t, "stored digest put again", got, a1, 1)

	// Versions count per name; the same digest under another name is new.
	b := newDef("billing", "d1", at(4*time.Second))
	got, created = putDef(t, d, b)
	if !created {
		t.Fatal("Put of another name: created = false")
	}
	wantDef(t, "first version of another name", got, b, 1)

	a3 := newDef("orders", "d3", at(5*time.Second))
	a3.Source = nil // empty source is stored as empty
	got, created = putDef(t, d, a3)
	if !created || got.Version != 3 {
		t.Fatalf("third digest: version %d, created %v; want 3, true", got.Version, created)
	}
	if len(got.Source) != 0 {
		t.Fatalf("empty source read back as %q", got.Source)
	}

	// Several puts in one transaction see each other.
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		w, created, err := x.WorkflowDefPut(ctx, &store.WorkflowDefPutParams{Def: newDef("orders", "d4", base)})
		if err != nil {
			return err
		}
		if !created || w.Version != 4 {
			t.Errorf("d4 in a transaction: version %d, created %v; want 4, true", w.Version, created)
		}
		w, created, err = x.WorkflowDefPut(ctx, &store.WorkflowDefPutParams{Def: newDef("orders", "d4", base)})
		if err != nil {
			return err
		}
		if created || w.Version != 4 {
			t.Errorf("d4 again in the same transaction: version %d, created %v; want 4, false", w.Version, created)
		}
		if _, err := x.WorkflowDefGet(ctx, &store.WorkflowDefGetParams{Name: "orders", Version: 4}); err != nil {
			return fmt.Errorf("get own write: %w", err)
		}
		return nil
	})

	// Bad definitions are refused and store nothing.
	for _, bad := range []*dt.WorkflowDef{newDef("", "d9", base), newDef("orders", "", base)} {
		err := d.InTx(context.Background(), func(ctx context.Context, x store.Executor) error {
			_, _, err := x.WorkflowDefPut(ctx, &store.WorkflowDefPutParams{Def: bad})
			return err
		})
		if err == nil {
			t.Errorf("Put(name %q, digest %q) succeeded", bad.Name, bad.Digest)
		}
	}
	// The reader does not write.
	if _, _, err := d.Reader().WorkflowDefPut(context.Background(), &store.WorkflowDefPutParams{Def: newDef("orders", "d9", base)}); err == nil {
		t.Error("WorkflowDefPut on the reader succeeded")
	}
	if _, err := d.Reader().WorkflowDefGet(context.Background(), &store.WorkflowDefGetParams{Name: "orders", Version: 5}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a refused put stored version 5: err = %v", err)
	}
}

func testWorkflowDefGetList(t *testing.T, d store.Driver) {
	ctx := context.Background()
	defs := []*dt.WorkflowDef{
		newDef("orders", "o1", at(time.Second)),
		newDef("billing", "b1", at(2*time.Second)),
		newDef("orders", "o2", at(3*time.Second)),
		newDef("billing", "b2", at(4*time.Second)),
		newDef("orders", "o3", at(5*time.Second)),
	}
	defs[0].Source = []byte{0, 1, 2, 0xff} // bytes, not text
	for _, w := range defs {
		putDef(t, d, w)
	}
	r := d.Reader()
	got, err := r.WorkflowDefGet(ctx, &store.WorkflowDefGetParams{Name: "orders", Version: 2})
	if err != nil {
		t.Fatal(err)
	}
	wantDef(t, "orders version 2", got, defs[2], 2)
	got, err = r.WorkflowDefGet(ctx, &store.WorkflowDefGetParams{Name: "orders", Version: 1})
	if err != nil {
		t.Fatal(err)
	}
	wantDef(t, "orders version 1 (binary source)", got, defs[0], 1)
	for _, miss := range []struct {
		name    string
		version int
	}{{"orders", 4}, {"orders", 0}, {"missing", 1}, {"billing", -1}} {
		_, err := r.WorkflowDefGet(ctx, &store.WorkflowDefGetParams{Name: miss.name, Version: miss.version})
		wantErrIs(t, err, store.ErrNotFound, fmt.Sprintf("WorkflowDefGet(%q, %d)", miss.name, miss.version))
	}
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		got, err := x.WorkflowDefGet(ctx, &store.WorkflowDefGetParams{Name: "billing", Version: 2})
		if err != nil {
			return err
		}
		wantDef(t, "billing version 2 in a transaction", got, defs[3], 2)
		_, err = x.WorkflowDefGet(ctx, &store.WorkflowDefGetParams{Name: "billing", Version: 3})
		wantErrIs(t, err, store.ErrNotFound, "WorkflowDefGet in a transaction")
		return nil
	})

	all, err := r.WorkflowDefList(ctx, &store.WorkflowDefListParams{Name: ""})
	if err != nil {
		t.Fatal(err)
	}
	want := "[billing@1=b1 billing@2=b2 orders@1=o1 orders@2=o2 orders@3=o3]"
	if fmt.Sprint(defKeys(all)) != want {
		t.Fatalf("WorkflowDefList(\"\") = %v, want %s", defKeys(all), want)
	}
	wantDef(t, "listed orders@3", all[4], defs[4], 3)
	orders, err := r.WorkflowDefList(ctx, &store.WorkflowDefListParams{Name: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(defKeys(orders)) != "[orders@1=o1 orders@2=o2 orders@3=o3]" {
		t.Fatalf("WorkflowDefList(orders) = %v", defKeys(orders))
	}
	none, err := r.WorkflowDefList(ctx, &store.WorkflowDefListParams{Name: "missing"})
	if err != nil || len(none) != 0 {
		t.Fatalf("WorkflowDefList(missing) = %v, %v; want nothing", defKeys(none), err)
	}
}

func testWorkflowDefRollback(t *testing.T, d store.Driver) {
	ctx := context.Background()
	sentinel := errors.New("roll back")
	err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		if _, _, err := x.WorkflowDefPut(ctx, &store.WorkflowDefPutParams{Def: newDef("orders", "gone", base)}); err != nil {
			return err
		}
		return sentinel
	})
	if !errors.Is(err, sentinel) {
		t.Fatalf("InTx = %v, want the callback's error", err)
	}
	if defs, err := d.Reader().WorkflowDefList(ctx, &store.WorkflowDefListParams{Name: ""}); err != nil || len(defs) != 0 {
		t.Fatalf("after rollback: %v, %v; want nothing", defKeys(defs), err)
	}
	// The rolled-back version is handed out again.
	got, created := putDef(t, d, newDef("orders", "kept", base))
	if !created || got.Version != 1 {
		t.Fatalf("after rollback: version %d, created %v; want 1, true", got.Version, created)
	}
}

// testWorkflowDefPutBlocked holds a transaction that put version 1 of a
// name open while two more transactions put the same name: one with a new
// digest, which must become version 2, and one with the open transaction's
// digest, which must get its row — both without error, once the first
// commits. On a store with LockWaits the test first sees both blocked, so
// the path where a put waits on another's uncommitted version is taken.
func testWorkflowDefPutBlocked(t *testing.T, d store.Driver) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	release := holdOpen(ctx, t, d, func(ctx context.Context, x store.Executor) error {
		w, created, err := x.WorkflowDefPut(ctx, &store.WorkflowDefPutParams{Def: newDef("orders", "first", at(time.Second))})
		if err != nil {
			return err
		}
		if !created || w.Version != 1 {
			return fmt.Errorf("T1: version %d, created %v; want 1, true", w.Version, created)
		}
		return nil
	})
	probe, _ := d.(LockWaits)
	var waitsBefore int64
	if probe != nil {
		var err error
		if waitsBefore, err = probe.LockWaits(ctx); err != nil {
			t.Fatalf("LockWaits: %v", err)
		}
	}
	type result struct {
		def     *dt.WorkflowDef
		created bool
		err     error
	}
	put := func(def *dt.WorkflowDef, out chan<- result) {
		var r result
		r.err = d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
			var err error
			r.def, r.created, err = x.WorkflowDefPut(ctx, &store.WorkflowDefPutParams{Def: def})
			return err
		})
		out <- r
	}
	second, same := make(chan result, 1), make(chan result, 1)
	go put(newDef("orders", "second", at(2*time.Second)), second)
	go put(newDef("orders", "first", at(3*time.Second)), same)
	if probe != nil {
		tick := time.NewTicker(2 * time.Millisecond)
		for n := int64(0); n < waitsBefore+2; {
			select {
			case r := <-second:
				t.Fatalf("T2 finished while T1 held version 1 open: %+v", r)
			case r := <-same:
				t.Fatalf("T3 finished while T1 held version 1 open: %+v", r)
			case <-tick.C:
				var err error
				if n, err = probe.LockWaits(ctx); err != nil {
					t.Fatalf("LockWaits: %v", err)
				}
			case <-ctx.Done():
				t.Fatal("T2 and T3 neither finished nor waited for T1")
			}
		}
		tick.Stop()
	}
	if err := release(); err != nil {
		t.Fatalf("T1: %v", err)
	}
	r2, r3 := <-second, <-same
	if r2.err != nil || r3.err != nil {
		t.Fatalf("puts that waited for T1 failed: new digest: %v; same digest: %v", r2.err, r3.err)
	}
	if !r2.created || r2.def.Version != 2 {
		t.Errorf("new digest after T1: version %d, created %v; want 2, true", r2.def.Version, r2.created)
	}
	if r3.created || r3.def.Version != 1 || !r3.def.CreatedAt.Equal(at(time.Second)) {
		t.Errorf("T1's digest after T1: version %d, created %v, created at %s; want T1's row (1, false, %s)",
			r3.def.Version, r3.created, r3.def.CreatedAt, at(time.Second))
	}
	all, err := d.Reader().WorkflowDefList(ctx, &store.WorkflowDefListParams{Name: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(defKeys(all)) != "[orders@1=first orders@2=second]" {
		t.Fatalf("stored: %v", defKeys(all))
	}
}

// testWorkflowDefConcurrent has many transactions (think servers loading
// the same directory, some with a newer file) put a few digests of one
// name at once: none fails, each digest gets one version, versions are
// 1..n without gaps or duplicates, and every caller got the stored row.
func testWorkflowDefConcurrent(t *testing.T, d store.Driver) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const (
		writers = 8
		rounds  = 3
	)
	digests := []string{"a", "b", "c", "d"}
	type got struct {
		digest  string
		version int
		created bool
	}
	var (
		mu      sync.Mutex
		results []got
		errs    []error
		wg      sync.WaitGroup
	)
	start := make(chan struct{})
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for r := range rounds {
				digest := digests[(w+r)%len(digests)]
				err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
					def, created, err := x.WorkflowDefPut(ctx, &store.WorkflowDefPutParams{Def: newDef("shared", digest, at(time.Duration(w)*time.Second))})
					if err != nil {
						return err
					}
					if def.Digest != digest || def.Name != "shared" {
						return fmt.Errorf("put %s got the row of %s/%s", digest, def.Name, def.Digest)
					}
					mu.Lock()
					results = append(results, got{digest, def.Version, created})
					mu.Unlock()
					return nil
				})
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("writer %d round %d: %w", w, r, err))
					mu.Unlock()
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("concurrent puts failed:\n%v", errors.Join(errs...))
	}
	stored, err := d.Reader().WorkflowDefList(ctx, &store.WorkflowDefListParams{Name: "shared"})
	if err != nil {
		t.Fatal(err)
	}
	if len(stored) != len(digests) {
		t.Fatalf("stored %v; want one version per digest (%d)", defKeys(stored), len(digests))
	}
	byDigest := map[string]int{}
	for i, w := range stored {
		if w.Version != i+1 {
			t.Fatalf("stored versions %v: want 1..%d", defKeys(stored), len(digests))
		}
		byDigest[w.Digest] = w.Version
	}
	createdPer := map[string]int{}
	for _, r := range results {
		if byDigest[r.digest] != r.version {
			t.Errorf("a put of %s returned version %d; stored as %d", r.digest, r.version, byDigest[r.digest])
		}
		if r.created {
			createdPer[r.digest]++
		}
	}
	for _, dg := range digests {
		if createdPer[dg] != 1 {
			t.Errorf("digest %s reported created %d times, want once", dg, createdPer[dg])
		}
	}
}

// testTaskVersionCallbackRoundTrip checks that the two columns a task gets
// at submit come back from every read of tasks, and that updates of the
// mutable fields leave them alone.
func testTaskVersionCallbackRoundTrip(t *testing.T, d store.Driver) {
	ctx := context.Background()
	const cb = "https://hooks.example.com/drover?task=1&sig=x%2Fy"
	pending := newTask("pending")
	pending.OrderingKey = ""
	pending.WorkflowVersion, pending.CallbackURL = 7, cb
	held := fullTask("held") // Processing, locked by sched-x, CompleteBy at +42s
	held.OrderingKey = ""
	held.WorkflowVersion, held.CallbackURL = 2147483647, "http://127.0.0.1:9/"+strings.Repeat("p", 200)
	plain := newTask("plain") // neither: 0 and ""
	plain.OrderingKey = ""
	plain.ProcessState = dt.Processed
	insertTasks(t, d, pending, held, plain)
	want := map[string]*dt.Task{"pending": pending, "held": held, "plain": plain}
	check := func(what string, got []*dt.Task, ids ...string) {
		t.Helper()
		if !sameSet(taskIDs(got), ids) {
			t.Fatalf("%s returned %v, want %v", what, taskIDs(got), ids)
		}
		for _, g := range got {
			w := want[g.ID]
			if g.WorkflowVersion != w.WorkflowVersion || g.CallbackURL != w.CallbackURL {
				t.Errorf("%s: task %s has version %d, callback %q; want %d, %q", what, g.ID,
					g.WorkflowVersion, g.CallbackURL, w.WorkflowVersion, w.CallbackURL)
			}
		}
	}
	for id, w := range want {
		checkEqual(t, "TaskGet "+id, getTask(t, d, id), w)
	}
	r := d.Reader()
	many, err := r.TaskGetMany(ctx, &store.TaskGetManyParams{IDs: []string{"pending", "held", "plain"}})
	if err != nil {
		t.Fatal(err)
	}
	check("TaskGetMany", many, "pending", "held", "plain")
	list, err := r.TaskList(ctx, &store.TaskListParams{})
	if err != nil {
		t.Fatal(err)
	}
	check("TaskList", list, "pending", "held", "plain")
	list, err = r.TaskList(ctx, &store.TaskListParams{States: []dt.ProcessState{dt.Processing}, Workflow: "wf", Limit: 5})
	if err != nil {
		t.Fatal(err)
	}
	check("TaskList filtered", list, "held")
	lockedBy, err := r.TaskListLockedBy(ctx, &store.TaskListLockedByParams{Instance: "sched-x", Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	check("TaskListLockedBy", lockedBy, "held")
	expired, err := r.TaskListExpired(ctx, &store.TaskListExpiredParams{Now: at(time.Hour), Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	check("TaskListExpired", expired, "held")

	// The same reads inside a write transaction (locking variants), then
	// the claim and an update of the mutable fields.
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		g, err := x.TaskGet(ctx, &store.TaskGetParams{ID: "held"})
		if err != nil {
			return err
		}
		check("TaskGet in a transaction", []*dt.Task{g}, "held")
		many, err := x.TaskGetMany(ctx, &store.TaskGetManyParams{IDs: []string{"pending", "plain"}})
		if err != nil {
			return err
		}
		check("TaskGetMany in a transaction", many, "pending", "plain")
		expired, err := x.TaskListExpired(ctx, &store.TaskListExpiredParams{Now: at(time.Hour), Limit: 10})
		if err != nil {
			return err
		}
		check("TaskListExpired in a transaction", expired, "held")
		lockedBy, err := x.TaskListLockedBy(ctx, &store.TaskListLockedByParams{Instance: "sched-x", Limit: 10})
		if err != nil {
			return err
		}
		check("TaskListLockedBy in a transaction", lockedBy, "held")
		claimed, err := x.TaskClaim(ctx, &store.TaskClaimParams{Instance: "s1", Now: base, Limit: 10})
		if err != nil {
			return err
		}
		check("TaskClaim", claimed, "pending")
		g.ProcessState, g.LockedBy, g.CompleteBy, g.UpdatedAt = dt.Processed, "", nil, at(time.Minute)
		g.WorkflowVersion, g.CallbackURL = 0, "" // not written by TaskUpdateMany
		return x.TaskUpdateMany(ctx, &store.TaskUpdateManyParams{Tasks: []*dt.Task{g}})
	})
	after := getTask(t, d, "held")
	if after.ProcessState != dt.Processed {
		t.Fatalf("update not applied: %s", after.ProcessState)
	}
	check("TaskGet after TaskUpdateMany", []*dt.Task{after}, "held")
	keys := make([]string, 0, len(want))
	for id := range want {
		keys = append(keys, id)
	}
	sort.Strings(keys)
	list, err = r.TaskList(ctx, &store.TaskListParams{})
	if err != nil {
		t.Fatal(err)
	}
	check("TaskList at the end", list, keys...)
}
