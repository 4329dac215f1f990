package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/store"
)

// CheckUpgradeFrom11 checks that the migrations after version 11 upgrade a
// store holding tasks in place: 12 (steps' own failure policies, the
// extended wait) and 13 (a task's callback events). undo (driver-specific
// SQL) takes them away again from d, a migrated store holding a task, and
// Migrate applies them again; the task and its steps keep everything else
// and read as they did before (no extended waits, the task's policy, final
// states to the callback), and new tasks store the new fields.
func CheckUpgradeFrom11(t *testing.T, d store.Driver, undo func(ctx context.Context) error) {
	t.Helper()
	ctx := context.Background()
	old, oldSteps := fullTask("old"), []*dt.StepRecord{newStep("old", 0), fullStep("old", 1)}
	old.Wait, old.CallbackEvents = dt.WaitPolicy{}, nil
	oldSteps[1].OnFailure, oldSteps[1].Wait = "", nil
	insertTasks(t, d, old)
	insertSteps(t, d, oldSteps...)
	if err := undo(ctx); err != nil {
		t.Fatalf("undo migrations 12 and 13: %v", err)
	}
	if err := d.Migrate(ctx); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	checkEqual(t, "task stored before the upgrade", getTask(t, d, "old"), old)
	steps := getSteps(t, d, "old")
	if len(steps) != 2 {
		t.Fatalf("%d steps after the upgrade, want 2", len(steps))
	}
	checkEqual(t, "step stored before the upgrade", steps[1], oldSteps[1])

	fresh, freshSteps := fullTask("new"), []*dt.StepRecord{fullStep("new", 0)}
	insertTasks(t, d, fresh)
	insertSteps(t, d, freshSteps...)
	checkEqual(t, "task stored after the upgrade", getTask(t, d, "new"), fresh)
	checkEqual(t, "step stored after the upgrade", getSteps(t, d, "new")[0], freshSteps[0])
}

// CheckUpgradeTo14 checks that migration 14 (the events' namespace)
// upgrades a store holding events in place: undo (driver-specific SQL)
// takes it away again from d, a migrated store holding events, and Migrate
// applies it again; the events stored before are the default namespace's,
// and new events of a namespace are listed under it.
func CheckUpgradeTo14(t *testing.T, d store.Driver, undo func(ctx context.Context) error) {
	t.Helper()
	ctx := context.Background()
	insertTasks(t, d, newTask("old"))
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		return x.EventInsertMany(ctx, &store.EventInsertManyParams{Events: []*dt.Event{{TaskID: "old", StepIndex: -1, Type: dt.EventSubmitted, State: dt.Pending, CreatedAt: base}}})
	})
	if err := undo(ctx); err != nil {
		t.Fatalf("undo migration 14: %v", err)
	}
	if err := d.Migrate(ctx); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	insertTasks(t, d, newTask("a/new"))
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		return x.EventInsertMany(ctx, &store.EventInsertManyParams{Events: []*dt.Event{{TaskID: "a/new", StepIndex: -1, Type: dt.EventSubmitted, State: dt.Pending, CreatedAt: base}}})
	})
	for ns, want := range map[string]string{"": "old,a/new", dt.DefaultNamespace: "old", "a": "a/new"} {
		evs := listEvents(t, d, store.EventListParams{Namespace: ns, Lookup: true})
		got := ""
		for i, e := range evs {
			if i > 0 {
				got += ","
			}
			got += e.TaskID
		}
		if got != want {
			t.Errorf("events of namespace %q after the upgrade: %s, want %s", ns, got, want)
		}
	}
}

// CheckUpgradeTo15 checks that migration 15 (the tasks' submitter)
// upgrades a store holding tasks in place: undo (driver-specific SQL)
// takes it away again from d, a migrated store holding a task, and
// Migrate applies it again; the task stored before has no submitter and
// counts for none, and new tasks store theirs and are counted.
func CheckUpgradeTo15(t *testing.T, d store.Driver, undo func(ctx context.Context) error) {
	t.Helper()
	ctx := context.Background()
	old := newTask("old")
	insertTasks(t, d, old)
	if err := undo(ctx); err != nil {
		t.Fatalf("undo migration 15: %v", err)
	}
	if err := d.Migrate(ctx); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	checkEqual(t, "task stored before the upgrade", getTask(t, d, "old"), old)
	fresh := newTask("new")
	fresh.Submitter = "http:ci"
	insertTasks(t, d, fresh)
	checkEqual(t, "task stored after the upgrade", getTask(t, d, "new"), fresh)
	if n, err := d.Reader().TaskCountActiveBySubmitter(ctx, &store.TaskCountActiveBySubmitterParams{Submitter: "http:ci"}); err != nil || n != 1 {
		t.Errorf("active tasks of http:ci after the upgrade: %d, %v; want 1", n, err)
	}
}

// CheckUpgradeTo16 checks that migration 16 (the index of the namespaces'
// unfinished tasks) upgrades a store holding tasks in place: undo
// (driver-specific SQL) takes it away again from d, a migrated store
// holding tasks, and Migrate applies it again; the namespace's tasks
// stored before count, with those stored after, and final ones do not.
func CheckUpgradeTo16(t *testing.T, d store.Driver, undo func(ctx context.Context) error) {
	t.Helper()
	ctx := context.Background()
	done := newTask("a/done")
	done.ProcessState = dt.Processed
	insertTasks(t, d, newTask("a/old"), newTask("old"), done)
	if err := undo(ctx); err != nil {
		t.Fatalf("undo migration 16: %v", err)
	}
	if err := d.Migrate(ctx); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	insertTasks(t, d, newTask("a/new"))
	if n, err := d.Reader().TaskCountActive(ctx, &store.TaskCountActiveParams{Namespace: "a"}); err != nil || n != 2 {
		t.Errorf("active tasks of namespace a after the upgrade: %d, %v; want 2", n, err)
	}
}

// CheckUpgradeTo23 checks that migration 23 (event rows) upgrades a store
// holding events in place. undo (driver-specific SQL) takes it away again
// from d, a migrated store; insertOld then writes events as a store before
// it did, a row each with IDs taken 1 apart, and Migrate applies it again.
// After it, insertOld (an earlier release still running) fails.
// The old events read as they were written, events written after the
// upgrade (some in rows of several, as rows counts) get IDs above them, and
// a reader resuming after any event, old or new, reads exactly the rest.
// view lists the view v_events as "ID type" lines in ID order: one per
// event, as EventList reads them.
func CheckUpgradeTo23(t *testing.T, d store.Driver, undo func(ctx context.Context) error,
	insertOld func(ctx context.Context, evs []*dt.Event) error, rows func(ctx context.Context) (int, error),
	view func(ctx context.Context) ([]string, error)) {
	t.Helper()
	ctx := context.Background()
	insertTasks(t, d, newTask("old"), newTask("new"), newTask("team/new"))
	if err := undo(ctx); err != nil {
		t.Fatalf("undo migration 23: %v", err)
	}
	old := []*dt.Event{
		{TaskID: "old", StepIndex: -1, Type: dt.EventSubmitted, State: dt.Pending, CreatedAt: base},
		{TaskID: "old", StepIndex: 0, Type: dt.EventStepStarted, State: dt.Processing, Actor: "s1", Attempt: 1, CreatedAt: at(time.Second)},
		{TaskID: "old", StepIndex: 0, Type: dt.EventStepProcessed, State: dt.Processing, Actor: "s1", Attempt: 1, CreatedAt: at(2 * time.Second)},
		{TaskID: "new", StepIndex: -1, Type: dt.EventSubmitted, State: dt.Pending, CreatedAt: at(3 * time.Second)},
	}
	if err := insertOld(ctx, old); err != nil {
		t.Fatalf("write events as before migration 23: %v", err)
	}
	before, err := rows(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Migrate(ctx); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	// A process of the earlier release still running fails to write
	// events, rather than write what this release cannot place.
	if err := insertOld(ctx, old[:1]); err == nil {
		t.Errorf("events written as before migration 23 after it: no error, want the earlier release to fail")
	}
	fresh := []*dt.Event{
		{TaskID: "old", StepIndex: 0, Type: dt.EventStepProcessed, State: dt.Processing, Actor: "s2", Attempt: 2, CreatedAt: at(4 * time.Second)},
		{TaskID: "old", StepIndex: -1, Type: dt.EventProcessed, State: dt.Processed, Actor: "s2", CreatedAt: at(4 * time.Second)},
		{TaskID: "new", StepIndex: 0, Type: dt.EventStepStarted, State: dt.Processing, Actor: "s2", Attempt: 1, CreatedAt: at(5 * time.Second)},
		{TaskID: "team/new", StepIndex: -1, Type: dt.EventSubmitted, State: dt.Pending, CreatedAt: at(5 * time.Second)},
		{TaskID: "team/new", StepIndex: 0, Type: dt.EventStepStarted, State: dt.Processing, Actor: "s2", Attempt: 1, CreatedAt: at(5 * time.Second)},
		{TaskID: "team/new", StepIndex: 0, Type: dt.EventStepProcessed, State: dt.Processing, Actor: "s2", Attempt: 1, CreatedAt: at(6 * time.Second)},
	}
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		return x.EventInsertMany(ctx, &store.EventInsertManyParams{Events: fresh})
	})
	after, err := rows(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := after-before, 3; got != want {
		t.Errorf("%d events written after the upgrade took %d rows, want %d (one per run of a task's events)", len(fresh), got, want)
	}
	written := append(append([]*dt.Event(nil), old...), fresh...)
	all := listEvents(t, d, store.EventListParams{})
	if len(all) != len(written) {
		t.Fatalf("EventList = %d events, want %d", len(all), len(written))
	}
	for i, e := range all {
		checkEqual(t, fmt.Sprintf("event %d", i), e, written[i], "ID")
		written[i].ID = e.ID
		if i > 0 && e.ID <= all[i-1].ID {
			t.Errorf("event IDs %v not increasing across the upgrade", eventIDs(all))
		}
	}
	if old[len(old)-1].ID-old[0].ID != int64(len(old)-1) {
		t.Errorf("the old events' IDs %v changed", eventIDs(all[:len(old)]))
	}
	checkEventsResume(t, d, written)
	var want []string
	for _, ev := range all {
		want = append(want, fmt.Sprint(ev.ID, " ", ev.Type))
	}
	got, err := view(ctx)
	if err != nil {
		t.Fatalf("read v_events: %v", err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("v_events = %v, want %v", got, want)
	}
}
