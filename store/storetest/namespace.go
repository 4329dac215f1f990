package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/store"
)

func namespaceCases() []testCase {
	return []testCase{
		{"ListsFilterByNamespace", testNamespaceLists},
	}
}

// testNamespaceLists: tasks, events (of tasks and of sessions) and queues
// stored under qualified names (drovertype.QualifyName) are listed per
// namespace, the default namespace's being those without one; without a
// Namespace every one is listed, as before namespaces.
func testNamespaceLists(t *testing.T, d store.Driver) {
	// "a0" and "a-x" sort right after "a/..." and "a": a prefix filter
	// that were off by one would take them in.
	ids := []string{"a", "a-x", "a/1", "a/2", "a0", "ab/1", "b/1", "z"}
	var tasks []*dt.Task
	for _, id := range ids {
		tasks = append(tasks, newTask(id))
	}
	insertTasks(t, d, tasks...)
	var evs []*dt.Event
	for _, id := range ids {
		evs = append(evs, &dt.Event{TaskID: id, StepIndex: -1, Type: dt.EventSubmitted, State: dt.Pending, Alert: id != "z", CreatedAt: base})
	}
	evs = append(evs,
		&dt.Event{TaskID: dt.SessionSubject("q", "s/1"), StepIndex: -1, Type: dt.EventSessionBlocked, Alert: true, CreatedAt: base},
		&dt.Event{TaskID: dt.SessionSubject(dt.QualifyName("a", "q"), "s/1"), StepIndex: -1, Type: dt.EventSessionBlocked, Alert: true, CreatedAt: base})
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		return x.EventInsertMany(ctx, &store.EventInsertManyParams{Events: evs})
	})
	for _, name := range []string{"q", "a/q", "a/r", "b/q", "a0"} {
		inTx(t, d, func(ctx context.Context, x store.Executor) error {
			return x.QueuePut(ctx, &store.QueuePutParams{Queue: &dt.Queue{Name: name, MaxDeliveryCount: 1, PoisonPolicy: dt.PoisonBlock,
				LockDuration: time.Second, CreatedAt: base, UpdatedAt: base}})
		})
	}
	ctx := context.Background()
	r := d.Reader()
	taskIDs := func(p store.TaskListParams) string {
		ts, err := r.TaskList(ctx, &p)
		return namesOf(t, ts, err, func(t *dt.Task) string { return t.ID })
	}
	eventSubjects := func(p store.EventListParams) string {
		p.Lookup = true
		es, err := r.EventList(ctx, &p)
		return namesOf(t, es, err, func(e *dt.Event) string { return e.TaskID })
	}
	queueNames := func(p store.QueueListParams) string {
		qs, err := r.QueueList(ctx, &p)
		return namesOf(t, qs, err, func(q *dt.Queue) string { return q.Name })
	}
	for _, c := range []struct{ got, want string }{
		{taskIDs(store.TaskListParams{}), "[a a-x a/1 a/2 a0 ab/1 b/1 z]"},
		{taskIDs(store.TaskListParams{Namespace: "a"}), "[a/1 a/2]"},
		{taskIDs(store.TaskListParams{Namespace: "a", AfterID: "a/1"}), "[a/2]"},
		{taskIDs(store.TaskListParams{Namespace: "a", Limit: 1}), "[a/1]"},
		{taskIDs(store.TaskListParams{Namespace: "ab"}), "[ab/1]"},
		{taskIDs(store.TaskListParams{Namespace: "c"}), "[]"},
		{taskIDs(store.TaskListParams{Namespace: dt.DefaultNamespace}), "[a a-x a0 z]"},
		{taskIDs(store.TaskListParams{Namespace: dt.DefaultNamespace, States: []dt.ProcessState{dt.Pending}, AfterID: "a0"}), "[z]"},
		{eventSubjects(store.EventListParams{Namespace: "a"}), "[a/1 a/2 a/session:q/s/1]"},
		{eventSubjects(store.EventListParams{Namespace: "a", AlertsOnly: true, Limit: 2}), "[a/1 a/2]"},
		{eventSubjects(store.EventListParams{Namespace: "b"}), "[b/1]"},
		{eventSubjects(store.EventListParams{Namespace: dt.DefaultNamespace}), "[a a-x a0 z session:q/s/1]"},
		{eventSubjects(store.EventListParams{Namespace: dt.DefaultNamespace, AlertsOnly: true}), "[a a-x a0 session:q/s/1]"},
		{eventSubjects(store.EventListParams{Namespace: "a", TaskID: "a/2"}), "[a/2]"},
		{eventSubjects(store.EventListParams{Namespace: "b", TaskID: "a/2"}), "[]"},
		{queueNames(store.QueueListParams{}), "[a/q a/r a0 b/q q]"},
		{queueNames(store.QueueListParams{Namespace: "a"}), "[a/q a/r]"},
		{queueNames(store.QueueListParams{Namespace: "a", AfterName: "a/q", Limit: 5}), "[a/r]"},
		{queueNames(store.QueueListParams{Namespace: dt.DefaultNamespace}), "[a0 q]"},
	} {
		if c.got != c.want {
			t.Errorf("got %s, want %s", c.got, c.want)
		}
	}
}

// namesOf lists the names of a listing's items, failing t on its error.
func namesOf[T any](t *testing.T, items []T, err error, name func(T) string) string {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(items))
	for i, x := range items {
		out[i] = name(x)
	}
	return fmt.Sprint(out)
}
