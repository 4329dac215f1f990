package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/store"
)

func taskCases() []testCase {
	return []testCase{
		{"InsertRoundTrip", testTaskInsertRoundTrip},
		{"InsertConflict", testTaskInsertConflict},
		{"GetNotFound", testTaskGetNotFound},
		{"GetMany", testTaskGetMany},
		{"GetManyWithSteps", testTaskGetManyWithSteps},
		{"GetManyWithStepsOneSnapshot", testTaskGetManyWithStepsOneSnapshot},
		{"List", testTaskList},
		{"CountByState", testTaskCountByState},
		{"FinishedSince", testTaskFinishedSince},
		{"CountActiveBySubmitter", testTaskCountActiveBySubmitter},
		{"CountActiveByNamespace", testTaskCountActiveByNamespace},
		{"ClaimClaimable", func(t *testing.T, d store.Driver) { testTaskClaimClaimable(t, d, plainClaim) }},
		{"ClaimClaimableWriteLater", func(t *testing.T, d store.Driver) { testTaskClaimClaimable(t, d, writeLater) }},
		{"ClaimClaimableWithSteps", func(t *testing.T, d store.Driver) { testTaskClaimClaimable(t, d, withSteps) }},
		{"ClaimOldestFirstAndLimit", testTaskClaimOldestFirst},
		{"ClaimByPriority", func(t *testing.T, d store.Driver) { testTaskClaimByPriority(t, d, plainClaim) }},
		{"ClaimByPriorityWriteLater", func(t *testing.T, d store.Driver) { testTaskClaimByPriority(t, d, writeLater) }},
		{"ClaimByPriorityWithSteps", func(t *testing.T, d store.Driver) { testTaskClaimByPriority(t, d, withSteps) }},
		{"ClaimAfter", func(t *testing.T, d store.Driver) { testTaskClaimAfter(t, d, plainClaim) }},
		{"ClaimAfterWriteLater", func(t *testing.T, d store.Driver) { testTaskClaimAfter(t, d, writeLater) }},
		{"ClaimAfterWithSteps", func(t *testing.T, d store.Driver) { testTaskClaimAfter(t, d, withSteps) }},
		{"ClaimConcurrent", func(t *testing.T, d store.Driver) { testTaskClaimConcurrent(t, d, plainClaim) }},
		{"ClaimConcurrentWriteLater", func(t *testing.T, d store.Driver) { testTaskClaimConcurrent(t, d, writeLater) }},
		{"ClaimConcurrentWithSteps", func(t *testing.T, d store.Driver) { testTaskClaimConcurrent(t, d, withSteps) }},
		{"ClaimConcurrentTwoProcesses", func(t *testing.T, d store.Driver) {
			testTaskClaimConcurrent(t, d, plainClaim, openSameStore(t, d))
		}},
		{"ClaimWithSteps", testTaskClaimWithSteps},
		{"GetAndClaim", testTaskGetAndClaim},
		{"ListLockedBy", testTaskListLockedBy},
		{"ListExpired", testTaskListExpired},
		{"NextAvailable", testTaskNextAvailable},
		{"UpdateManyRoundTrip", testTaskUpdateMany},
		{"DeleteFinished", testTaskDeleteFinished},
	}
}

func testTaskInsertRoundTrip(t *testing.T, d store.Driver) {
	fresh, full := newTask("fresh"), fullTask("full")
	insertTasks(t, d, fresh, full)
	checkEqual(t, "fresh task", getTask(t, d, "fresh"), fresh)
	checkEqual(t, "task with every field set", getTask(t, d, "full"), full)

	// Reading inside a write transaction gives the same.
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		got, err := x.TaskGet(ctx, &store.TaskGetParams{ID: "full"})
		if err != nil {
			return err
		}
		checkEqual(t, "task read in a transaction", got, full)
		return nil
	})

	// An empty call inserts nothing and does not fail.
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		ins, err := x.TaskInsertMany(ctx, &store.TaskInsertManyParams{Tasks: nil})
		if err != nil {
			return err
		}
		if len(ins) != 0 {
			t.Errorf("TaskInsertMany(nil) = %v, want empty", ins)
		}
		return nil
	})
}

func testTaskInsertConflict(t *testing.T, d store.Driver) {
	orig := newTask("dup")
	insertTasks(t, d, orig)

	other := fullTask("dup")
	other.Workflow = "other"
	other.Input = []byte(`{"other":true}`)
	other.InputHash = "different"
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		ins, err := x.TaskInsertMany(ctx, &store.TaskInsertManyParams{Tasks: []*dt.Task{newTask("new1"), other, newTask("new2")}})
		if err != nil {
			return err
		}
		if fmt.Sprint(ins) != "[true false true]" {
			t.Errorf("inserted = %v, want [true false true]", ins)
		}
		return nil
	})
	checkEqual(t, "task after a conflicting insert", getTask(t, d, "dup"), orig)
	getTask(t, d, "new1")
	getTask(t, d, "new2")
}

func testTaskGetNotFound(t *testing.T, d store.Driver) {
	_, err := d.Reader().TaskGet(context.Background(), &store.TaskGetParams{ID: "missing"})
	wantErrIs(t, err, store.ErrNotFound, "TaskGet on the reader")
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		_, err := x.TaskGet(ctx, &store.TaskGetParams{ID: "missing"})
		wantErrIs(t, err, store.ErrNotFound, "TaskGet in a transaction")
		return nil
	})
}

func testTaskGetMany(t *testing.T, d store.Driver) {
	a, b, c := newTask("a"), fullTask("b"), newTask("c")
	insertTasks(t, d, a, b, c)
	got, err := d.Reader().TaskGetMany(context.Background(), &store.TaskGetManyParams{IDs: []string{"c", "missing", "b"}})
	if err != nil {
		t.Fatal(err)
	}
	if !sameSet(taskIDs(got), []string{"b", "c"}) {
		t.Fatalf("TaskGetMany = %v, want b and c", taskIDs(got))
	}
	for _, g := range got {
		want := c
		if g.ID == "b" {
			want = b
		}
		checkEqual(t, "task "+g.ID, g, want)
	}
	got, err = d.Reader().TaskGetMany(context.Background(), &store.TaskGetManyParams{IDs: nil})
	if err != nil || len(got) != 0 {
		t.Fatalf("TaskGetMany(nil) = %v, %v; want nothing", taskIDs(got), err)
	}
}

func testTaskGetManyWithSteps(t *testing.T, d store.Driver) {
	a, b, c := newTask("a"), fullTask("b"), newTask("c")
	insertTasks(t, d, a, b, c)
	insertSteps(t, d, newStep("a", 1), newStep("b", 0), newStep("a", 0))
	ids := []string{"c", "missing", "b", "a"}
	check := func(what string, x store.Executor) {
		tasks, steps, err := x.TaskGetManyWithSteps(context.Background(), &store.TaskGetManyWithStepsParams{IDs: ids})
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		wantTasks, err := x.TaskGetMany(context.Background(), &store.TaskGetManyParams{IDs: ids})
		if err != nil {
			t.Fatal(err)
		}
		wantSteps, err := x.StepListByTasks(context.Background(), &store.StepListByTasksParams{TaskIDs: ids})
		if err != nil {
			t.Fatal(err)
		}
		if !sameSet(taskIDs(tasks), []string{"a", "b", "c"}) {
			t.Fatalf("%s: tasks %v, want a, b, c", what, taskIDs(tasks))
		}
		for _, g := range tasks {
			for _, w := range wantTasks {
				if w.ID == g.ID {
					checkEqual(t, what+": task "+g.ID, g, w)
				}
			}
		}
		if len(steps) != 3 || len(wantSteps) != 3 {
			t.Fatalf("%s: %d steps (StepListByTasks: %d), want 3", what, len(steps), len(wantSteps))
		}
		for i := range steps {
			checkEqual(t, fmt.Sprintf("%s: step %d", what, i), steps[i], wantSteps[i])
		}
		if tasks, steps, err := x.TaskGetManyWithSteps(context.Background(), &store.TaskGetManyWithStepsParams{IDs: nil}); err != nil || len(tasks)+len(steps) != 0 {
			t.Fatalf("%s: of no IDs = %v, %d steps, %v; want nothing", what, taskIDs(tasks), len(steps), err)
		}
	}
	check("Reader", d.Reader())
	inTx(t, d, func(ctx context.Context, x store.Executor) error { check("in a transaction", x); return nil })
}

// TaskGetAndClaim returns what TaskGetManyWithSteps and TaskClaimWithSteps
// would, the steps of both sets together, each once.
func testTaskGetAndClaim(t *testing.T, d store.Driver) {
	held, late := newTask("held"), newTask("late")
	held.ProcessState, held.LockedBy, held.CompleteBy = dt.Processing, "s", tp(at(time.Hour))
	late.AvailableAt = at(-time.Minute)
	c1, c2 := newTask("c1"), newTask("c2")
	insertTasks(t, d, held, late, c1, c2)
	insertSteps(t, d, newStep("held", 0), newStep("late", 0), newStep("c1", 0), newStep("c1", 1), newStep("c2", 0))
	stepKeys := func(steps []*dt.StepRecord) []string {
		var out []string
		for _, s := range steps {
			out = append(out, fmt.Sprintf("%s/%d", s.TaskID, s.Index))
		}
		return out
	}
	for _, c := range []struct {
		what        string
		ids         []string
		limit       int
		writeLater  bool
		wantGot     []string
		wantClaimed []string // at least these
		wantSteps   []string // at least these
	}{
		{"both", []string{"held", "late", "missing"}, 10, true, []string{"held", "late"}, []string{"c1", "c2"},
			[]string{"held/0", "late/0", "c1/0", "c1/1", "c2/0"}},
		{"both, claim written at once", []string{"held"}, 10, false, []string{"held"}, []string{"late", "c1", "c2"},
			[]string{"held/0", "late/0", "c1/0", "c1/1", "c2/0"}},
		{"get only", []string{"held", "c1"}, 0, true, []string{"held", "c1"}, nil, []string{"held/0", "c1/0", "c1/1"}},
		{"claim only", nil, 10, true, nil, []string{"late", "c1", "c2"}, []string{"late/0", "c1/0", "c1/1", "c2/0"}},
	} {
		err := d.InTx(context.Background(), func(ctx context.Context, x store.Executor) error {
			r, err := store.TaskGetAndClaim(ctx, x, &store.TaskGetAndClaimParams{IDs: c.ids, Claim: store.TaskClaimParams{Instance: "s2", Now: base, Limit: c.limit, WriteLater: c.writeLater}})
			if err != nil {
				return err
			}
			got, claimed, steps := r.Got, r.Claimed, r.Steps
			if len(r.Busy) != 0 {
				t.Errorf("%s: busy %v with no other transaction open (a missing task is not busy)", c.what, r.Busy)
			}
			if !sameSet(taskIDs(got), c.wantGot) {
				t.Errorf("%s: got %v, want %v", c.what, taskIDs(got), c.wantGot)
			}
			for _, id := range c.wantClaimed {
				if !contains(taskIDs(claimed), id) {
					t.Errorf("%s: claimed %v, want %s among them", c.what, taskIDs(claimed), id)
				}
			}
			for _, tk := range claimed {
				if tk.LockedBy != "s2" {
					t.Errorf("%s: claimed %s locked by %q, want s2", c.what, tk.ID, tk.LockedBy)
				}
			}
			if c.limit == 0 && len(claimed) != 0 {
				t.Errorf("%s: claimed %v with limit 0", c.what, taskIDs(claimed))
			}
			ids := taskIDs(got)
			for _, id := range taskIDs(claimed) {
				if !contains(ids, id) {
					ids = append(ids, id)
				}
			}
			want, err := x.StepListByTasks(ctx, &store.StepListByTasksParams{TaskIDs: ids})
			if err != nil {
				return err
			}
			if len(steps) != len(want) || !sameSet(stepKeys(steps), stepKeys(want)) {
				t.Errorf("%s: steps %v, want %v (StepListByTasks of both sets)", c.what, stepKeys(steps), stepKeys(want))
			}
			for _, k := range c.wantSteps {
				if !contains(stepKeys(steps), k) {
					t.Errorf("%s: steps %v, want %s among them", c.what, stepKeys(steps), k)
				}
			}
			return errors.New("roll back")
		})
		if err == nil || err.Error() != "roll back" {
			t.Fatalf("%s: %v", c.what, err)
		}
	}
}

func testTaskList(t *testing.T, d store.Driver) {
	var tasks []*dt.Task
	for i := range 10 {
		tk := newTask(fmt.Sprintf("t%02d", i))
		if i%2 == 1 {
			tk.Workflow = "odd"
		}
		switch i % 3 {
		case 1:
			tk.ProcessState = dt.Error
		case 2:
			tk.ProcessState = dt.Processed
		}
		tk.UpdatedAt = at(time.Duration(i) * time.Minute)
		if i%4 == 0 {
			tk.OrderingKey, tk.OrderingSeq = "k4", int64(i+1)
		}
		tasks = append(tasks, tk)
	}
	// Insert out of ID order.
	insertTasks(t, d, append(tasks[5:], tasks[:5]...)...)
	ctx := context.Background()
	list := func(p store.TaskListParams) []string {
		t.Helper()
		got, err := d.Reader().TaskList(ctx, &p)
		if err != nil {
			t.Fatalf("TaskList(%+v): %v", p, err)
		}
		return taskIDs(got)
	}
	cases := []struct {
		p    store.TaskListParams
		want string
	}{
		{store.TaskListParams{}, "[t00 t01 t02 t03 t04 t05 t06 t07 t08 t09]"},
		{store.TaskListParams{Limit: 3}, "[t00 t01 t02]"},
		{store.TaskListParams{AfterID: "t02", Limit: 3}, "[t03 t04 t05]"},
		{store.TaskListParams{AfterID: "t08"}, "[t09]"},
		{store.TaskListParams{AfterID: "t09"}, "[]"},
		{store.TaskListParams{Workflow: "odd"}, "[t01 t03 t05 t07 t09]"},
		{store.TaskListParams{States: []dt.ProcessState{dt.Error}}, "[t01 t04 t07]"},
		{store.TaskListParams{States: []dt.ProcessState{dt.Error, dt.Processed}}, "[t01 t02 t04 t05 t07 t08]"},
		{store.TaskListParams{States: []dt.ProcessState{dt.Error, dt.Processed}, Workflow: "wf", AfterID: "t02", Limit: 2}, "[t04 t08]"},
		{store.TaskListParams{States: []dt.ProcessState{dt.Compensating}}, "[]"},
		{store.TaskListParams{Workflow: "none"}, "[]"},
		{store.TaskListParams{OrderingKey: "k4"}, "[t00 t04 t08]"},
		{store.TaskListParams{OrderingKey: "k4", AfterID: "t00", Limit: 1}, "[t04]"},
		{store.TaskListParams{OrderingKey: "key-t03"}, "[t03]"},
		{store.TaskListParams{UpdatedFrom: at(3 * time.Minute)}, "[t03 t04 t05 t06 t07 t08 t09]"},
		{store.TaskListParams{UpdatedBefore: at(3 * time.Minute)}, "[t00 t01 t02]"},
		{store.TaskListParams{UpdatedFrom: at(2 * time.Minute), UpdatedBefore: at(7*time.Minute + time.Microsecond), States: []dt.ProcessState{dt.Error}, AfterID: "t02"}, "[t04 t07]"},
		{store.TaskListParams{UpdatedFrom: at(time.Hour)}, "[]"},
		// A range reads final and unfinished tasks apart: a page mixes them.
		{store.TaskListParams{UpdatedFrom: at(time.Minute), Limit: 3}, "[t01 t02 t03]"},
		{store.TaskListParams{UpdatedFrom: at(time.Minute), AfterID: "t03", Limit: 2}, "[t04 t05]"},
		{store.TaskListParams{UpdatedBefore: at(9 * time.Minute), Workflow: "wf", Limit: 2}, "[t00 t02]"},
		{store.TaskListParams{OrderingKey: "k4", UpdatedFrom: at(time.Minute)}, "[t04 t08]"},
		{store.TaskListParams{OrderingKey: "k4", States: []dt.ProcessState{dt.Pending}}, "[t00]"},
	}
	for _, c := range cases {
		if got := fmt.Sprint(list(c.p)); got != c.want {
			t.Errorf("TaskList(%+v) = %s, want %s (in ID order)", c.p, got, c.want)
		}
	}
	// Keyset pagination walks every task exactly once.
	var all []string
	after := ""
	for {
		page := list(store.TaskListParams{AfterID: after, Limit: 4})
		if len(page) == 0 {
			break
		}
		all = append(all, page...)
		after = page[len(page)-1]
	}
	if fmt.Sprint(all) != cases[0].want {
		t.Errorf("paginated walk = %v", all)
	}
	// So does it within a time range, across final and unfinished tasks.
	all, after = nil, ""
	for {
		page := list(store.TaskListParams{AfterID: after, Limit: 2, UpdatedFrom: at(time.Minute), UpdatedBefore: at(9 * time.Minute)})
		if len(page) == 0 {
			break
		}
		all = append(all, page...)
		after = page[len(page)-1]
	}
	if got := fmt.Sprint(all); got != "[t01 t02 t03 t04 t05 t06 t07 t08]" {
		t.Errorf("paginated walk of a time range = %s", got)
	}
	// Fields survive listing.
	got, err := d.Reader().TaskList(ctx, &store.TaskListParams{AfterID: "t04", Limit: 1})
	if err != nil || len(got) != 1 {
		t.Fatalf("TaskList: %v %v", taskIDs(got), err)
	}
	checkEqual(t, "listed task", got[0], tasks[5])
}

// TaskFinishedSince lists final tasks only, from since on, newest first,
// with their times to the microsecond.
func testTaskFinishedSince(t *testing.T, d store.Driver) {
	ctx := context.Background()
	states := []dt.ProcessState{dt.Processed, dt.Pending, dt.Error, dt.Processing, dt.Compensated, dt.Cancelled, dt.Processed}
	for i, s := range states {
		tk := newTask(fmt.Sprintf("f%d", i))
		tk.ProcessState = s
		tk.CreatedAt = at(time.Duration(i) * time.Second)
		tk.UpdatedAt = at(time.Duration(i)*time.Minute + time.Microsecond)
		if s == dt.Processing {
			tk.LockedBy, tk.CompleteBy = "sched", tp(at(time.Hour))
		}
		insertTasks(t, d, tk)
	}
	show := func(fs []store.FinishedTask) string {
		var out []string
		for _, f := range fs {
			out = append(out, fmt.Sprintf("%s %v %v", f.State, f.CreatedAt.Sub(base), f.UpdatedAt.Sub(base)))
		}
		return fmt.Sprint(out)
	}
	for _, c := range []struct {
		since time.Time
		limit int
		want  string
	}{
		{base, 10, "[Processed 6s 6m0.000001s Cancelled 5s 5m0.000001s Compensated 4s 4m0.000001s Error 2s 2m0.000001s Processed 0s 1µs]"},
		{base, 2, "[Processed 6s 6m0.000001s Cancelled 5s 5m0.000001s]"},
		{at(4*time.Minute + time.Microsecond), 10, "[Processed 6s 6m0.000001s Cancelled 5s 5m0.000001s Compensated 4s 4m0.000001s]"},
		{at(4*time.Minute + 2*time.Microsecond), 10, "[Processed 6s 6m0.000001s Cancelled 5s 5m0.000001s]"},
		{at(time.Hour), 10, "[]"},
	} {
		got, err := d.Reader().TaskFinishedSince(ctx, &store.TaskFinishedSinceParams{Since: c.since, Limit: c.limit})
		if err != nil {
			t.Fatalf("TaskFinishedSince(%v, %d): %v", c.since.Sub(base), c.limit, err)
		}
		if s := show(got); s != c.want {
			t.Errorf("TaskFinishedSince(%v, %d) = %s, want %s", c.since.Sub(base), c.limit, s, c.want)
		}
	}
}

func testTaskCountByState(t *testing.T, d store.Driver) {
	ctx := context.Background()
	counts, err := d.Reader().TaskCountByState(ctx, &store.TaskCountByStateParams{})
	if err != nil {
		t.Fatal(err)
	}
	for s, n := range counts {
		if n != 0 {
			t.Errorf("empty store: count[%s] = %d", s, n)
		}
	}
	if n, err := d.Reader().TaskCountActive(ctx, &store.TaskCountActiveParams{}); err != nil || n != 0 {
		t.Errorf("empty store: TaskCountActive = %d, %v", n, err)
	}
	want := map[dt.ProcessState]int{dt.Pending: 3, dt.Processing: 1, dt.Error: 2, dt.Cancelled: 1,
		dt.Compensating: 2, dt.Processed: 4, dt.Compensated: 1}
	i := 0
	for s, n := range want {
		for j := range n {
			tk := newTask(fmt.Sprintf("t%d", i))
			tk.ProcessState = s
			// As the state machine keeps them: Processing tasks are held,
			// Compensating ones held or waiting for a scheduler.
			if s == dt.Processing || (s == dt.Compensating && j == 0) {
				tk.LockedBy, tk.CompleteBy = "sched", tp(at(time.Minute))
			}
			insertTasks(t, d, tk)
			i++
		}
	}
	counts, err = d.Reader().TaskCountByState(ctx, &store.TaskCountByStateParams{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range dt.AllStates {
		if counts[s] != want[s] {
			t.Errorf("count[%s] = %d, want %d", s, counts[s], want[s])
		}
	}
	// Active: not final (Pending, Processing, Compensating), held or not.
	if n, err := d.Reader().TaskCountActive(ctx, &store.TaskCountActiveParams{}); err != nil || n != 6 {
		t.Errorf("TaskCountActive = %d, %v; want 6", n, err)
	}
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		n, err := x.TaskCountActive(ctx, &store.TaskCountActiveParams{})
		if err != nil || n != 6 {
			t.Errorf("TaskCountActive in a transaction = %d, %v; want 6", n, err)
		}
		return err
	})
}

// testTaskCountActiveBySubmitter: a submitter's tasks not yet final are
// counted, not another's nor those without a submitter; a task that
// becomes final no longer counts.
func testTaskCountActiveBySubmitter(t *testing.T, d store.Driver) {
	ctx := context.Background()
	count := func(who string) int {
		t.Helper()
		n, err := d.Reader().TaskCountActiveBySubmitter(ctx, &store.TaskCountActiveBySubmitterParams{Submitter: who})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count("http:a"); n != 0 {
		t.Fatalf("empty store: %d", n)
	}
	insertInStates(t, d, map[string][]dt.ProcessState{
		"http:a": {dt.Pending, dt.Pending, dt.Processing, dt.Compensating, dt.Processed, dt.Error, dt.Compensated, dt.Cancelled},
		"http:b": {dt.Pending},
		"":       {dt.Pending, dt.Processing},
	}, func(who string, i int) *dt.Task {
		tk := newTask(fmt.Sprintf("s%d", i))
		tk.Submitter = who
		return tk
	})
	if a, b := count("http:a"), count("http:b"); a != 4 || b != 1 {
		t.Fatalf("http:a %d (want 4), http:b %d (want 1)", a, b)
	}
	// One of a's tasks ends; read in a transaction, too.
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		ts, err := x.TaskList(ctx, &store.TaskListParams{States: []dt.ProcessState{dt.Processing}, Limit: 10})
		if err != nil {
			return err
		}
		for _, tk := range ts {
			if tk.Submitter == "http:a" {
				tk.ProcessState, tk.LockedBy, tk.CompleteBy = dt.Processed, "", nil
				if err := x.TaskUpdateMany(ctx, &store.TaskUpdateManyParams{Tasks: []*dt.Task{tk}}); err != nil {
					return err
				}
			}
		}
		n, err := x.TaskCountActiveBySubmitter(ctx, &store.TaskCountActiveBySubmitterParams{Submitter: "http:a"})
		if err == nil && n != 3 {
			t.Errorf("http:a in the transaction: %d, want 3", n)
		}
		return err
	})
	if n := count("http:a"); n != 3 {
		t.Errorf("http:a after a task ended: %d, want 3", n)
	}
}

// insertInStates inserts a task in each state listed under each key, made
// by task from the key and a counter; Processing tasks are held, as the
// state machine keeps them.
func insertInStates(t *testing.T, d store.Driver, groups map[string][]dt.ProcessState, task func(key string, i int) *dt.Task) {
	t.Helper()
	i := 0
	for key, states := range groups {
		for _, s := range states {
			tk := task(key, i)
			tk.ProcessState = s
			if s == dt.Processing {
				tk.LockedBy, tk.CompleteBy = "sched", tp(at(time.Minute))
			}
			insertTasks(t, d, tk)
			i++
		}
	}
}

// testTaskCountActiveByNamespace: a namespace's tasks not yet final are
// counted, not those of the default namespace nor of namespaces whose
// name sorts next to it; a task that becomes final no longer counts; the
// default namespace is refused, and no namespace counts every one.
func testTaskCountActiveByNamespace(t *testing.T, d store.Driver) {
	ctx := context.Background()
	count := func(ns string) int {
		t.Helper()
		n, err := d.Reader().TaskCountActive(ctx, &store.TaskCountActiveParams{Namespace: ns})
		if err != nil {
			t.Fatalf("namespace %q: %v", ns, err)
		}
		return n
	}
	if n := count("a"); n != 0 {
		t.Fatalf("empty store: %d", n)
	}
	// "a-b" and "ab" sort on either side of "a/"; "a" is never a prefix.
	insertInStates(t, d, map[string][]dt.ProcessState{
		"a/":   {dt.Pending, dt.Pending, dt.Processing, dt.Compensating, dt.Processed, dt.Error, dt.Compensated, dt.Cancelled},
		"ab/":  {dt.Pending},
		"a-b/": {dt.Pending, dt.Processing},
		"":     {dt.Pending, dt.Processing, dt.Processed},
	}, func(prefix string, i int) *dt.Task { return newTask(fmt.Sprintf("%sn%d", prefix, i)) })
	if a, ab, amb, b := count("a"), count("ab"), count("a-b"), count("b"); a != 4 || ab != 1 || amb != 2 || b != 0 {
		t.Fatalf("a %d (want 4), ab %d (want 1), a-b %d (want 2), b %d (want 0)", a, ab, amb, b)
	}
	if n := count(""); n != 9 {
		t.Errorf("every namespace: %d, want 9", n)
	}
	if _, err := d.Reader().TaskCountActive(ctx, &store.TaskCountActiveParams{Namespace: dt.DefaultNamespace}); err == nil {
		t.Error("the default namespace was counted apart")
	}
	// One of a's tasks ends; read in a transaction, too.
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		ts, err := x.TaskList(ctx, &store.TaskListParams{Namespace: "a", States: []dt.ProcessState{dt.Processing}, Limit: 10})
		if err != nil {
			return err
		}
		if len(ts) != 1 {
			t.Fatalf("a's Processing tasks: %d, want 1", len(ts))
		}
		ts[0].ProcessState, ts[0].LockedBy, ts[0].CompleteBy = dt.Processed, "", nil
		if err := x.TaskUpdateMany(ctx, &store.TaskUpdateManyParams{Tasks: ts}); err != nil {
			return err
		}
		n, err := x.TaskCountActive(ctx, &store.TaskCountActiveParams{Namespace: "a"})
		if err == nil && n != 3 {
			t.Errorf("a in the transaction: %d, want 3", n)
		}
		return err
	})
	if a, amb := count("a"), count("a-b"); a != 3 || amb != 2 {
		t.Errorf("after a's task ended: a %d (want 3), a-b %d (want 2)", a, amb)
	}
}

// claimMode picks how claimTasks claims.
type claimMode int

const (
	plainClaim claimMode = iota
	writeLater           // TaskClaim with WriteLater, then the caller's write
	withSteps            // TaskClaimWithSteps with WriteLater, then the caller's write
)

// claimTasks claims in x; with WriteLater it keeps TaskClaimParams'
// promise and writes the claimed tasks back, as the scheduler does. With
// steps, it checks they are the claimed tasks' steps (StepListByTasks).
func claimTasks(ctx context.Context, x store.Executor, p store.TaskClaimParams, mode claimMode) ([]*dt.Task, error) {
	p.WriteLater = mode != plainClaim
	var (
		got   []*dt.Task
		steps []*dt.StepRecord
		err   error
	)
	if mode == withSteps {
		got, steps, err = store.TaskClaimWithSteps(ctx, x, &p)
	} else {
		got, err = x.TaskClaim(ctx, &p)
	}
	if err != nil || mode == plainClaim || len(got) == 0 {
		return got, err
	}
	if mode == withSteps {
		want, err := x.StepListByTasks(ctx, &store.StepListByTasksParams{TaskIDs: taskIDs(got)})
		if err != nil {
			return nil, err
		}
		if len(steps) != len(want) {
			return nil, fmt.Errorf("TaskClaimWithSteps returned %d steps, StepListByTasks %d", len(steps), len(want))
		}
		for i := range steps {
			if steps[i].TaskID != want[i].TaskID || steps[i].Index != want[i].Index || steps[i].Attempt != want[i].Attempt {
				return nil, fmt.Errorf("TaskClaimWithSteps step %d is %s/%d, want %s/%d", i, steps[i].TaskID, steps[i].Index, want[i].TaskID, want[i].Index)
			}
		}
	}
	return got, x.TaskUpdateMany(ctx, &store.TaskUpdateManyParams{Tasks: got})
}

// TaskClaimWithSteps claims the tasks TaskClaim would, and returns all
// their steps, equal to StepListByTasks's, in task and index
// order; tasks without steps are claimed too.
func testTaskClaimWithSteps(t *testing.T, d store.Driver) {
	var tasks []*dt.Task
	for i := range 4 {
		tk := newTask(fmt.Sprintf("t%d", 9-i)) // IDs sort against age
		tk.AvailableAt = at(time.Duration(i) * time.Second)
		tasks = append(tasks, tk)
	}
	insertTasks(t, d, tasks...)
	insertSteps(t, d, newStep("t9", 1), newStep("t9", 0), newStep("t7", 0), newStep("t6", 2), newStep("t6", 0), newStep("t6", 1))
	for _, writeLater := range []bool{true, false} {
		var (
			got   []*dt.Task
			steps []*dt.StepRecord
			want  []*dt.StepRecord
		)
		err := d.InTx(context.Background(), func(ctx context.Context, x store.Executor) error {
			var err error
			got, steps, err = store.TaskClaimWithSteps(ctx, x, &store.TaskClaimParams{Instance: "s", Now: at(time.Hour), Limit: 3, WriteLater: writeLater})
			if err != nil {
				return err
			}
			if want, err = x.StepListByTasks(ctx, &store.StepListByTasksParams{TaskIDs: taskIDs(got)}); err != nil {
				return err
			}
			return errors.New("roll back") // claim again in the next round
		})
		if err == nil || err.Error() != "roll back" {
			t.Fatalf("WriteLater %v: %v", writeLater, err)
		}
		if ids := taskIDs(got); !sameSet(ids, []string{"t9", "t8", "t7"}) {
			t.Errorf("WriteLater %v: claimed %v, want the three oldest t9, t8, t7", writeLater, ids)
		}
		for _, tk := range got {
			if tk.LockedBy != "s" || tk.ProcessState != dt.Processing || !tk.UpdatedAt.Equal(at(time.Hour)) {
				t.Errorf("WriteLater %v: %s returned %s locked by %q updated %s; want Processing locked by s at Now", writeLater, tk.ID, tk.ProcessState, tk.LockedBy, tk.UpdatedAt)
			}
		}
		if len(steps) != 3 || len(want) != 3 {
			t.Fatalf("WriteLater %v: %d steps (StepListByTasks %d), want 3 (t7's and t9's)", writeLater, len(steps), len(want))
		}
		for i := range steps {
			checkEqual(t, fmt.Sprintf("WriteLater %v: step %d", writeLater, i), steps[i], want[i])
		}
	}
}

// testTaskClaimClaimable: with WriteLater the claim is followed by the
// caller's write of the claimed tasks in the same transaction.
func testTaskClaimClaimable(t *testing.T, d store.Driver, writeLater claimMode) {
	ctx := context.Background()
	mk := func(id string, state dt.ProcessState, lockedBy string, avail time.Duration) *dt.Task {
		tk := newTask(id)
		tk.ProcessState, tk.LockedBy, tk.AvailableAt = state, lockedBy, at(avail)
		if lockedBy != "" {
			tk.CompleteBy = tp(at(time.Hour))
		}
		return tk
	}
	tasks := []*dt.Task{
		mk("pending", dt.Pending, "", -time.Second),
		mk("pending-now", dt.Pending, "", 0), // available exactly at Now
		mk("pending-later", dt.Pending, "", time.Microsecond),
		mk("comp-free", dt.Compensating, "", -time.Second),
		mk("comp-held", dt.Compensating, "other", -time.Second),
		mk("comp-later", dt.Compensating, "", time.Second),
		mk("processing", dt.Processing, "other", -time.Second),
		mk("processed", dt.Processed, "", -time.Second),
		mk("error", dt.Error, "", -time.Second),
		mk("compensated", dt.Compensated, "", -time.Second),
		mk("cancelled", dt.Cancelled, "", -time.Second),
	}
	insertTasks(t, d, tasks...)
	var claimed []*dt.Task
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		var err error
		claimed, err = claimTasks(ctx, x, store.TaskClaimParams{Instance: "s1", Now: base, Limit: 100}, writeLater)
		return err
	})
	if !sameSet(taskIDs(claimed), []string{"pending", "pending-now", "comp-free"}) {
		t.Fatalf("TaskClaim = %v, want pending, pending-now, comp-free", sorted(taskIDs(claimed)))
	}
	for _, c := range claimed {
		want := dt.Processing
		if c.ID == "comp-free" {
			want = dt.Compensating
		}
		if c.ProcessState != want || c.LockedBy != "s1" {
			t.Errorf("claimed %s returned as %s locked by %q, want %s locked by s1", c.ID, c.ProcessState, c.LockedBy, want)
		}
		stored := getTask(t, d, c.ID)
		if stored.ProcessState != want || stored.LockedBy != "s1" {
			t.Errorf("claimed %s stored as %s locked by %q, want %s locked by s1", c.ID, stored.ProcessState, stored.LockedBy, want)
		}
		checkEqual(t, "claimed task "+c.ID+" as returned vs stored", c, stored, "UpdatedAt")
	}
	// Nothing else changed.
	for _, tk := range tasks {
		if contains(taskIDs(claimed), tk.ID) {
			continue
		}
		checkEqual(t, "unclaimed task "+tk.ID, getTask(t, d, tk.ID), tk)
	}
	// Already locked: a second claim, even by the same instance, gets nothing.
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		for _, inst := range []string{"s2", "s1"} {
			again, err := claimTasks(ctx, x, store.TaskClaimParams{Instance: inst, Now: base, Limit: 100}, writeLater)
			if err != nil {
				return err
			}
			if len(again) != 0 {
				t.Errorf("second claim by %s got %v", inst, taskIDs(again))
			}
		}
		return nil
	})
	// Later, the later ones come.
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		later, err := claimTasks(ctx, x, store.TaskClaimParams{Instance: "s2", Now: at(time.Second), Limit: 100}, writeLater)
		if err != nil {
			return err
		}
		if !sameSet(taskIDs(later), []string{"pending-later", "comp-later"}) {
			t.Errorf("claim at +1s = %v, want pending-later, comp-later", taskIDs(later))
		}
		return nil
	})
	_ = ctx
}

func testTaskClaimOldestFirst(t *testing.T, d store.Driver) {
	// IDs sort the opposite way from availability.
	var tasks []*dt.Task
	for i := range 6 {
		tk := newTask(fmt.Sprintf("t%d", 9-i))
		tk.AvailableAt = at(time.Duration(i) * time.Second)
		tasks = append(tasks, tk)
	}
	insertTasks(t, d, tasks[3], tasks[0], tasks[5], tasks[1], tasks[4], tasks[2])
	claim := func(limit int) []string {
		var got []*dt.Task
		inTx(t, d, func(ctx context.Context, x store.Executor) error {
			var err error
			got, err = x.TaskClaim(ctx, &store.TaskClaimParams{Instance: "s", Now: at(time.Hour), Limit: limit})
			return err
		})
		return taskIDs(got)
	}
	if got := claim(2); !sameSet(got, []string{"t9", "t8"}) {
		t.Errorf("first claim of 2 = %v, want the two oldest t9, t8", got)
	}
	if got := claim(3); !sameSet(got, []string{"t7", "t6", "t5"}) {
		t.Errorf("second claim of 3 = %v, want t7, t6, t5", got)
	}
	if got := claim(3); !sameSet(got, []string{"t4"}) {
		t.Errorf("third claim = %v, want t4", got)
	}
	if got := claim(3); len(got) != 0 {
		t.Errorf("fourth claim = %v, want nothing", got)
	}
}

// testTaskClaimByPriority: claimable tasks are claimed by ClaimAt, their
// AvailableAt moved earlier by PriorityAging per level, then ID: a higher
// priority goes first unless a lower one has waited longer than the
// difference; a delayed task of high priority still waits for its time;
// a task made available again (TaskUpdateMany, as the supervisor's
// back-off does) keeps its priority's lead; After positions by ClaimAt.
func testTaskClaimByPriority(t *testing.T, d store.Driver, mode claimMode) {
	now := at(time.Hour)
	mk := func(id string, priority int, avail time.Duration) *dt.Task {
		tk := newTask(id)
		tk.OrderingKey = ""
		tk.Priority, tk.AvailableAt = priority, now.Add(avail)
		return tk
	}
	step := dt.PriorityAging
	insertTasks(t, d,
		mk("a", 0, -step/2),                  // claims at now-30s
		mk("b", 1, 0),                        // now-1m
		mk("c", dt.MaxPriority, time.Second), // not available yet
		mk("d", 0, -2*step),                  // now-2m
		mk("e", 2, 0),                        // now-2m: a tie with d, broken by ID
		mk("f", 3, -step/2),                  // now-3m30s
	)
	if got := getTask(t, d, "f"); got.Priority != 3 {
		t.Fatalf("stored priority %d, want 3", got.Priority)
	}
	claim := func(limit int, after *store.ClaimPosition) []string {
		t.Helper()
		var got []*dt.Task
		inTx(t, d, func(ctx context.Context, x store.Executor) error {
			var err error
			got, err = claimTasks(ctx, x, store.TaskClaimParams{Instance: "s", Now: now, Limit: limit, After: after}, mode)
			return err
		})
		return taskIDs(got)
	}
	// After the position of d (now-2m, "d"): e, b, a in that order.
	if got := claim(1, &store.ClaimPosition{ClaimAt: now.Add(-2 * step), ID: "d"}); !slices.Equal(got, []string{"e"}) {
		t.Fatalf("claim after d = %v, want e", got)
	}
	for _, want := range []string{"f", "d", "b", "a"} {
		if got := claim(1, nil); !slices.Equal(got, []string{want}) {
			t.Fatalf("claim = %v, want %s", got, want)
		}
	}
	if got := claim(5, nil); len(got) != 0 {
		t.Fatalf("claim = %v; c is not available until now+1s", got)
	}
	// Let f go again, available since now-1m: priority 3 still leads it by
	// 3m, so it goes before g, of priority 0, available a second earlier.
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		f, err := x.TaskGet(ctx, &store.TaskGetParams{ID: "f"})
		if err != nil {
			return err
		}
		f.LockedBy, f.ProcessState, f.AvailableAt = "", dt.Pending, now.Add(-step)
		if err := x.TaskUpdateMany(ctx, &store.TaskUpdateManyParams{Tasks: []*dt.Task{f}}); err != nil {
			return err
		}
		_, err = x.TaskInsertMany(ctx, &store.TaskInsertManyParams{Tasks: []*dt.Task{mk("g", 0, -step-time.Second)}})
		return err
	})
	if got := claim(1, nil); !slices.Equal(got, []string{"f"}) {
		t.Fatalf("after f's back-off, claim = %v, want f (it keeps its priority's lead)", got)
	}
}

// testTaskClaimAfter: TaskClaimParams.After starts the claim after a
// position in claim order (ClaimAt, then ID), ties included.
func testTaskClaimAfter(t *testing.T, d store.Driver, mode claimMode) {
	mk := func(id string, avail time.Duration) *dt.Task {
		tk := newTask(id)
		tk.AvailableAt = at(avail)
		return tk
	}
	insertTasks(t, d, mk("a", 0), mk("b", time.Second), mk("c", time.Second), mk("d", 2*time.Second), mk("e", -time.Second))
	for _, tk := range []string{"a", "b", "c", "d", "e"} {
		insertSteps(t, d, newStep(tk, 0))
	}
	claim := func(after *store.ClaimPosition) []string {
		t.Helper()
		var got []*dt.Task
		err := d.InTx(context.Background(), func(ctx context.Context, x store.Executor) error {
			var err error
			got, err = claimTasks(ctx, x, store.TaskClaimParams{Instance: "s", Now: at(time.Hour), Limit: 10, After: after}, mode)
			if err != nil {
				return err
			}
			return errors.New("roll back") // every case claims from the same tasks
		})
		if err == nil || err.Error() != "roll back" {
			t.Fatalf("claim after %+v: %v", after, err)
		}
		return taskIDs(got)
	}
	for _, c := range []struct {
		after *store.ClaimPosition
		want  []string
	}{
		{nil, []string{"e", "a", "b", "c", "d"}},
		{&store.ClaimPosition{ClaimAt: at(time.Second), ID: "b"}, []string{"c", "d"}},
		{&store.ClaimPosition{ClaimAt: at(time.Second), ID: ""}, []string{"b", "c", "d"}},
		{&store.ClaimPosition{ClaimAt: at(-time.Minute), ID: "z"}, []string{"e", "a", "b", "c", "d"}},
		{&store.ClaimPosition{ClaimAt: at(2 * time.Second), ID: "d"}, nil},
	} {
		if got := claim(c.after); !sameSet(got, c.want) {
			t.Errorf("claim after %+v = %v, want %v", c.after, got, c.want)
		}
	}
}

// testTaskClaimConcurrent has eight claimers race for 500 tasks, each
// claim its own transaction: every task is claimed once, and stored as
// held by the claimer that got it. The claimers take turns on d and the
// other drivers of the same store given (other processes, with their own
// connections).
func testTaskClaimConcurrent(t *testing.T, d store.Driver, writeLater claimMode, others ...store.Driver) {
	const (
		total    = 500
		claimers = 8
		batch    = 10
	)
	drivers := append([]store.Driver{d}, others...)
	tasks := make([]*dt.Task, total)
	for i := range tasks {
		tasks[i] = newTask(fmt.Sprintf("t%04d", i))
		tasks[i].AvailableAt = at(time.Duration(i%7) * time.Millisecond)
	}
	insertTasks(t, d, tasks...)

	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		by   = map[string]string{} // task → claimer
		dups []string
		errs []error
	)
	driverOf := map[string]int{} // claimer → index in drivers
	for c := range claimers {
		inst := fmt.Sprintf("claimer-%d", c)
		driverOf[inst] = c % len(drivers)
		d := drivers[driverOf[inst]]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				var got []*dt.Task
				err := d.InTx(context.Background(), func(ctx context.Context, x store.Executor) error {
					var err error
					got, err = claimTasks(ctx, x, store.TaskClaimParams{Instance: inst, Now: at(time.Second), Limit: batch}, writeLater)
					return err
				})
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("%s: %w", inst, err))
					mu.Unlock()
					return
				}
				if len(got) > batch {
					mu.Lock()
					errs = append(errs, fmt.Errorf("%s claimed %d > limit %d", inst, len(got), batch))
					mu.Unlock()
				}
				mu.Lock()
				for _, tk := range got {
					if prev, ok := by[tk.ID]; ok {
						dups = append(dups, fmt.Sprintf("%s by %s and %s", tk.ID, prev, inst))
					}
					by[tk.ID] = inst
				}
				mu.Unlock()
				if len(got) == 0 {
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("claimers failed: %v", err)
	}
	if len(dups) > 0 {
		t.Fatalf("tasks claimed twice: %v", dups)
	}
	if len(by) != total {
		t.Fatalf("claimed %d distinct tasks, want all %d", len(by), total)
	}
	if len(drivers) > 1 {
		perDriver := make([]int, len(drivers))
		for _, inst := range by {
			perDriver[driverOf[inst]]++
		}
		t.Logf("tasks claimed through each driver: %v", perDriver)
	}
	stored, err := drivers[len(drivers)-1].Reader().TaskList(context.Background(), &store.TaskListParams{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range stored {
		if tk.ProcessState != dt.Processing || tk.LockedBy != by[tk.ID] {
			t.Errorf("task %s stored %s locked by %q, claimed by %q", tk.ID, tk.ProcessState, tk.LockedBy, by[tk.ID])
		}
	}
}

func testTaskListLockedBy(t *testing.T, d store.Driver) {
	mk := func(id, lockedBy string, state dt.ProcessState) *dt.Task {
		tk := newTask(id)
		tk.ProcessState, tk.LockedBy = state, lockedBy
		if lockedBy != "" {
			tk.CompleteBy = tp(at(time.Minute))
		}
		return tk
	}
	insertTasks(t, d,
		mk("a1", "A", dt.Processing), mk("a2", "A", dt.Compensating), mk("a3", "A", dt.Processing),
		mk("b1", "B", dt.Processing), mk("free", "", dt.Pending), mk("done", "", dt.Processed))
	ctx := context.Background()
	got, err := d.Reader().TaskListLockedBy(ctx, &store.TaskListLockedByParams{Instance: "A", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if !sameSet(taskIDs(got), []string{"a1", "a2", "a3"}) {
		t.Errorf("TaskListLockedBy(A) = %v, want a1 a2 a3", taskIDs(got))
	}
	for _, g := range got {
		checkEqual(t, "held task "+g.ID, g, getTask(t, d, g.ID))
	}
	got, err = d.Reader().TaskListLockedBy(ctx, &store.TaskListLockedByParams{Instance: "A", Limit: 2})
	if err != nil || len(got) != 2 {
		t.Errorf("TaskListLockedBy(A, limit 2) = %v, %v; want 2 tasks", taskIDs(got), err)
	}
	got, err = d.Reader().TaskListLockedBy(ctx, &store.TaskListLockedByParams{Instance: "nobody", Limit: 10})
	if err != nil || len(got) != 0 {
		t.Errorf("TaskListLockedBy(nobody) = %v, %v", taskIDs(got), err)
	}
	for inst, want := range map[string]int{"A": 3, "B": 1, "nobody": 0} {
		n, err := d.Reader().TaskCountLockedBy(ctx, &store.TaskCountLockedByParams{Instance: inst})
		if err != nil || n != want {
			t.Errorf("TaskCountLockedBy(%s) = %d, %v; want %d", inst, n, err, want)
		}
	}
}

// TaskNextAvailable is the earliest AvailableAt after Now of the claimable
// tasks, also when a higher priority puts a later one first in claim order,
// and with a Limit it stops at, never after that answer.
func testTaskNextAvailable(t *testing.T, d store.Driver) {
	ctx := context.Background()
	now := at(time.Hour)
	next := func(x store.Executor, limit int) time.Time {
		t.Helper()
		got, err := x.TaskNextAvailable(ctx, &store.TaskNextAvailableParams{Now: now, Limit: limit})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := next(d.Reader(), 100); !got.IsZero() {
		t.Fatalf("empty store: %v, want the zero time", got)
	}
	mk := func(id string, state dt.ProcessState, lockedBy string, priority int, avail time.Duration) *dt.Task {
		tk := newTask(id)
		tk.OrderingKey, tk.ProcessState, tk.LockedBy, tk.Priority, tk.AvailableAt = "", state, lockedBy, priority, now.Add(avail)
		return tk
	}
	insertTasks(t, d,
		mk("ready", dt.Pending, "", 0, -time.Second),                       // available already
		mk("held", dt.Processing, "s", 0, 2*time.Second),                   // held: not claimable
		mk("done", dt.Processed, "", 0, 3*time.Second),                     // final
		mk("high", dt.Pending, "", dt.MaxPriority, 5*time.Minute),          // first in claim order
		mk("low", dt.Pending, "", 0, 30*time.Second),                       // the answer
		mk("later", dt.Pending, "", 0, time.Hour),                          // after it
		mk("undo", dt.Compensating, "", 0, 10*time.Minute+30*time.Second),  // nobody holds it
		mk("undoing", dt.Compensating, "s", 0, 10*time.Minute+time.Second), // held
	)
	if got, want := next(d.Reader(), 100), now.Add(30*time.Second); !got.Equal(want) {
		t.Errorf("next = %v, want %v (task low)", got, want)
	}
	// Limit 1 stops at high, first in claim order: its ClaimAt, earlier
	// than the answer.
	if got, want := next(d.Reader(), 1), dt.ClaimAt(now.Add(5*time.Minute), dt.MaxPriority); !got.Equal(want) {
		t.Errorf("next with limit 1 = %v, want %v (high's ClaimAt)", got, want)
	}
	// Due: ready, claimable now, makes the answer now; a task its key holds
	// back does not.
	due := func(x store.Executor) time.Time {
		t.Helper()
		got, err := x.TaskNextAvailable(ctx, &store.TaskNextAvailableParams{Now: now, Limit: 100, Due: true})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := due(d.Reader()); !got.Equal(now) {
		t.Errorf("next with Due, task ready claimable = %v, want now %v", got, now)
	}
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		ready, err := x.TaskGetMany(ctx, &store.TaskGetManyParams{IDs: []string{"ready"}})
		if err != nil {
			return err
		}
		ready[0].ProcessState, ready[0].LockedBy = dt.Processing, "s"
		return x.TaskUpdateMany(ctx, &store.TaskUpdateManyParams{Tasks: ready})
	})
	first := mk("first", dt.Processing, "s", 0, -time.Minute)
	waiting := mk("waiting", dt.Pending, "", 0, -time.Second)
	first.OrderingKey, first.OrderingSeq = "k", 1
	waiting.OrderingKey, waiting.OrderingSeq = "k", 2
	insertTasks(t, d, first, waiting)
	if got, want := due(d.Reader()), now.Add(30*time.Second); !got.Equal(want) {
		t.Errorf("next with Due, ready held and waiting held back by its key = %v, want %v (task low)", got, want)
	}
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		done, err := x.TaskGetMany(ctx, &store.TaskGetManyParams{IDs: []string{"low", "high"}})
		if err != nil {
			return err
		}
		for _, tk := range done {
			tk.ProcessState = dt.Processed
		}
		if err := x.TaskUpdateMany(ctx, &store.TaskUpdateManyParams{Tasks: done}); err != nil {
			return err
		}
		if got, want := next(x, 100), now.Add(10*time.Minute+30*time.Second); !got.Equal(want) {
			t.Errorf("in a transaction, with low and high done: next = %v, want %v (task undo)", got, want)
		}
		return nil
	})
}

func testTaskListExpired(t *testing.T, d store.Driver) {
	mk := func(id, lockedBy string, completeBy time.Duration) *dt.Task {
		tk := newTask(id)
		tk.ProcessState, tk.LockedBy, tk.CompleteBy = dt.Processing, lockedBy, tp(at(completeBy))
		return tk
	}
	free := newTask("free") // not held: never expired
	free.CompleteBy = tp(at(-time.Hour))
	insertTasks(t, d, mk("e1", "A", -3*time.Second), mk("e2", "B", -2*time.Second), mk("e3", "A", -time.Microsecond),
		mk("live", "A", time.Second), free)
	ctx := context.Background()
	got, err := d.Reader().TaskListExpired(ctx, &store.TaskListExpiredParams{Now: base, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if !sameSet(taskIDs(got), []string{"e1", "e2", "e3"}) {
		t.Errorf("TaskListExpired = %v, want e1 e2 e3", taskIDs(got))
	}
	got, err = d.Reader().TaskListExpired(ctx, &store.TaskListExpiredParams{Now: base, Limit: 2})
	if err != nil || len(got) != 2 {
		t.Errorf("TaskListExpired(limit 2) = %v, %v", taskIDs(got), err)
	}
	got, err = d.Reader().TaskListExpired(ctx, &store.TaskListExpiredParams{Now: at(-time.Hour), Limit: 100})
	if err != nil || len(got) != 0 {
		t.Errorf("TaskListExpired an hour earlier = %v, %v; want none", taskIDs(got), err)
	}
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		got, err := x.TaskListExpired(ctx, &store.TaskListExpiredParams{Now: at(2 * time.Second), Limit: 100})
		if err != nil {
			return err
		}
		if !sameSet(taskIDs(got), []string{"e1", "e2", "e3", "live"}) {
			t.Errorf("TaskListExpired at +2s in a transaction = %v", taskIDs(got))
		}
		return nil
	})
}

func testTaskUpdateMany(t *testing.T, d store.Driver) {
	a, b := newTask("a"), fullTask("b")
	insertTasks(t, d, a, b)

	// a: every mutable field from empty to set; b: every nullable one to null.
	a2 := *a
	a2.ProcessState = dt.Compensating
	a2.LockedBy = "sched-1"
	a2.CompleteBy = tp(at(time.Minute))
	a2.FailureCount = 4
	a2.CurrentStep = 1
	a2.Output = []byte(`"out"`)
	a2.LastError = "why"
	a2.AvailableAt = at(time.Hour)
	a2.UpdatedAt = at(2 * time.Hour)
	b2 := *b
	b2.ProcessState = dt.Error
	b2.LockedBy = ""
	b2.CompleteBy = nil
	b2.FailureCount = 0
	b2.CurrentStep = 0
	b2.Output = nil
	b2.LastError = ""
	b2.AvailableAt = at(3 * time.Hour)
	b2.UpdatedAt = at(4 * time.Hour)
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		return x.TaskUpdateMany(ctx, &store.TaskUpdateManyParams{Tasks: []*dt.Task{&a2, &b2}})
	})
	checkEqual(t, "task a updated", getTask(t, d, "a"), &a2)
	checkEqual(t, "task b updated to nulls", getTask(t, d, "b"), &b2)

	// And back: null to set, set to null.
	b3 := b2
	b3.ProcessState = dt.Processing
	b3.LockedBy = "sched-2"
	b3.CompleteBy = tp(at(5 * time.Hour))
	b3.Output = []byte(`{"again":1}`)
	b3.LastError = "again"
	a3 := a2
	a3.LockedBy, a3.CompleteBy, a3.Output, a3.LastError = "", nil, nil, ""
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		return x.TaskUpdateMany(ctx, &store.TaskUpdateManyParams{Tasks: []*dt.Task{&b3, &a3}})
	})
	checkEqual(t, "task a back to nulls", getTask(t, d, "a"), &a3)
	checkEqual(t, "task b back from nulls", getTask(t, d, "b"), &b3)

	// The identity of a task is not mutable.
	a4 := a3
	a4.Workflow, a4.Input, a4.InputHash, a4.CreatedAt, a4.StepCount = "changed", []byte(`1`), "changed", at(9*time.Hour), 9
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		return x.TaskUpdateMany(ctx, &store.TaskUpdateManyParams{Tasks: []*dt.Task{&a4}})
	})
	got := getTask(t, d, "a")
	if got.Workflow != a.Workflow || !eqBytes(got.Input, a.Input) || got.InputHash != a.InputHash ||
		!got.CreatedAt.Equal(a.CreatedAt) || got.StepCount != a.StepCount {
		t.Errorf("TaskUpdateMany changed immutable fields: %+v", got)
	}
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		return x.TaskUpdateMany(ctx, &store.TaskUpdateManyParams{Tasks: nil})
	})
}

// On the Reader, TaskGetManyWithSteps reads tasks and steps as of one
// moment: while a writer keeps moving a task and its step on together
// (same FailureCount, one transaction each time), every read finds them
// equal. Read apart, a commit between the two reads shows a step newer
// than its task.
func testTaskGetManyWithStepsOneSnapshot(t *testing.T, d store.Driver) {
	task := newTask("snap")
	task.StepCount = 1
	insertTasks(t, d, task)
	insertSteps(t, d, newStep("snap", 0))

	const minReads, minWrites = 300, 50
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var writes atomic.Int64
	writerDone := make(chan error, 1)
	go func() {
		for ctx.Err() == nil {
			err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
				tasks, steps, err := x.TaskGetManyWithSteps(ctx, &store.TaskGetManyWithStepsParams{IDs: []string{"snap"}})
				if err != nil || len(tasks) != 1 || len(steps) != 1 {
					return fmt.Errorf("writer read: %d tasks, %d steps, %v", len(tasks), len(steps), err)
				}
				tasks[0].FailureCount++
				steps[0].FailureCount = tasks[0].FailureCount
				if err := x.StepUpdateMany(ctx, &store.StepUpdateManyParams{Steps: steps}); err != nil {
					return err
				}
				return x.TaskUpdateMany(ctx, &store.TaskUpdateManyParams{Tasks: tasks})
			})
			if err != nil && ctx.Err() == nil {
				writerDone <- err
				return
			}
			writes.Add(1)
		}
		writerDone <- nil
	}()
	reads := 0
	for reads < minReads || writes.Load() < minWrites {
		tasks, steps, err := d.Reader().TaskGetManyWithSteps(context.Background(), &store.TaskGetManyWithStepsParams{IDs: []string{"snap"}})
		if err != nil || len(tasks) != 1 || len(steps) != 1 {
			t.Fatalf("read %d: %d tasks, %d steps, %v", reads, len(tasks), len(steps), err)
		}
		if tasks[0].FailureCount != steps[0].FailureCount {
			t.Fatalf("read %d (after %d writes): task FailureCount %d, its step's %d; want one snapshot",
				reads, writes.Load(), tasks[0].FailureCount, steps[0].FailureCount)
		}
		reads++
		if reads > 200*minReads {
			t.Fatalf("the writer made %d writes in %d reads", writes.Load(), reads)
		}
	}
	cancel()
	if err := <-writerDone; err != nil {
		t.Fatal(err)
	}
}
