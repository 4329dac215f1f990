// Package storetest is the conformance suite every store driver runs in full.
//
// A driver's own test calls Run with a function that opens a fresh, migrated
// and isolated store for one test:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) store.Driver {
//			d, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "db"), sqlite.Options{Create: true})
//			...
//			t.Cleanup(func() { d.Close() })
//			return d
//		})
//	}
//
// Some cases need more of the driver under test, through optional
// interfaces its test implements: LockWaits (to see a transaction blocked)
// and SameStore (a second driver on the same store, as another process).
//
// The suite uses only the store.Driver and store.Executor contract (and the
// state machine of internal/flow on top of it), so it makes no assumption about
// the database: every time it stores is truncated to microseconds, every time a
// primitive needs is passed as a parameter, and results are compared without
// regard to order wherever the contract does not promise one.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/flow"
	"github.com/drover-run/drover/store"
)

// Opener returns a fresh, migrated store that no other test uses. It registers
// its own cleanup on t.
type Opener func(t *testing.T) store.Driver

// SameStore is optionally implemented by the store.Driver an Opener
// returns, for the cases of processes sharing a store: OpenSameStore opens
// another driver on the same store, with connections of its own, as a
// second process would, and closes it when t ends.
type SameStore interface {
	OpenSameStore(t *testing.T) store.Driver
}

// openSameStore is d's OpenSameStore; the test fails if d has none.
func openSameStore(t *testing.T, d store.Driver) store.Driver {
	t.Helper()
	s, ok := d.(SameStore)
	if !ok {
		t.Fatalf("driver %T does not implement storetest.SameStore, which this case needs", d)
	}
	return s.OpenSameStore(t)
}

type testCase struct {
	name string
	fn   func(t *testing.T, d store.Driver)
}

// Run runs the whole conformance suite against the driver open returns. Every
// subtest runs in parallel on its own store.
func Run(t *testing.T, open func(t *testing.T) store.Driver) {
	t.Helper()
	groups := []struct {
		name  string
		cases []testCase
	}{
		{"Driver", driverCases()},
		{"Task", taskCases()},
		{"Step", stepCases()},
		{"Request", requestCases()},
		{"RemoteAgent", remoteCases()},
		{"Reply", replyCases()},
		{"Event", eventCases()},
		{"Lease", leaseCases()},
		{"Flow", flowCases()},
		{"Queue", queueCases()},
		{"Ordering", orderingCases()},
		{"WorkflowDef", workflowDefCases()},
		{"Schedule", scheduleCases()},
		{"Webhook", webhookCases()},
		{"Isolation", isolationCases()},
		{"Namespace", namespaceCases()},
		{"Trace", traceCases()},
		{"Signal", signalCases()},
		{"Console", consoleCases()},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			for _, tc := range g.cases {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					tc.fn(t, open(t))
				})
			}
		})
	}
}

// base is the suite's "now": far from the real clock, with microseconds, so a
// driver that reads the wall clock instead of its parameters, or drops
// sub-second precision, fails.
var base = time.Date(2031, time.March, 4, 5, 6, 7, 891011000, time.UTC)

func at(d time.Duration) time.Time { return base.Add(d) }

func tp(t time.Time) *time.Time { return &t }

// holdOpen runs fn in a transaction of d and keeps the transaction open,
// after fn, until release is called; release returns the transaction's
// error. The test fails if the transaction ends before fn has returned.
func holdOpen(ctx context.Context, t *testing.T, d store.Driver, fn func(ctx context.Context, x store.Executor) error) (release func() error) {
	t.Helper()
	held, stop, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		done <- d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
			if err := fn(ctx, x); err != nil {
				return err
			}
			close(held)
			select {
			case <-stop:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	}()
	select {
	case <-held:
	case err := <-done:
		t.Fatalf("the transaction to hold open ended first: %v", err)
	}
	return func() error {
		close(stop)
		return <-done
	}
}

// inTx runs fn in a write transaction and fails the test on error.
func inTx(t *testing.T, d store.Driver, fn func(ctx context.Context, x store.Executor) error) {
	t.Helper()
	if err := d.InTx(context.Background(), fn); err != nil {
		t.Fatalf("InTx: %v", err)
	}
}

// ---- fixtures ----

// newTask returns a Pending task with every field set to a non-zero value,
// except the ones a fresh task has empty.
func newTask(id string) *dt.Task {
	input := []byte(`{"id":"` + id + `"}`)
	return &dt.Task{
		ID: id, Workflow: "wf", Input: input, InputHash: flow.InputHash("wf", input),
		ProcessState: dt.Pending, StepCount: 2, OrderingKey: "key-" + id,
		FailureThreshold: 3, OnFailure: dt.PolicyError, RetryDelay: 1500 * time.Microsecond,
		AvailableAt: base, CreatedAt: base, UpdatedAt: base,
	}
}

// fullTask returns a task with every field, nullable ones included, set.
func fullTask(id string) *dt.Task {
	t := newTask(id)
	t.ProcessState = dt.Processing
	t.LockedBy = "sched-x"
	t.CompleteBy = tp(at(42 * time.Second))
	t.FailureCount = 2
	t.CurrentStep = 1
	t.Output = []byte(`{"out":1}`)
	t.LastError = "boom"
	t.OnFailure = dt.PolicyCompensate
	t.Wait = dt.WaitPolicy{MaxWaits: 4, Delay: 90 * time.Second, Multiplier: 1.5, MaxDelay: 2*time.Hour + time.Microsecond}
	t.CallbackURL = "https://hooks.example.com/t?k=1"
	t.CallbackEvents = dt.WebhookEventSet{"alerts", "final"}
	t.Submitter = "http:ci"
	t.TraceContext = traceA
	t.Priority = 7
	t.AvailableAt = at(-time.Second)
	t.CreatedAt = at(-time.Hour)
	t.UpdatedAt = at(time.Minute)
	return t
}

func newStep(taskID string, i int) *dt.StepRecord {
	name := fmt.Sprintf("step%d", i)
	return &dt.StepRecord{
		TaskID: taskID, Index: i, Name: name, Agent: "agent-" + name, Timeout: 1500 * time.Millisecond,
		ProcessState: dt.Pending, IdempotencyKey: flow.IdempotencyKey(taskID, i, name), UpdatedAt: base,
	}
}

func insertTasks(t *testing.T, d store.Driver, tasks ...*dt.Task) {
	t.Helper()
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		ins, err := x.TaskInsertMany(ctx, &store.TaskInsertManyParams{Tasks: tasks})
		if err != nil {
			return err
		}
		for i, ok := range ins {
			if !ok {
				return fmt.Errorf("task %s not inserted", tasks[i].ID)
			}
		}
		return nil
	})
}

func insertSteps(t *testing.T, d store.Driver, steps ...*dt.StepRecord) {
	t.Helper()
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		return x.StepInsertMany(ctx, &store.StepInsertManyParams{Steps: steps})
	})
}

func getTask(t *testing.T, d store.Driver, id string) *dt.Task {
	t.Helper()
	got, err := d.Reader().TaskGet(context.Background(), &store.TaskGetParams{ID: id})
	if err != nil {
		t.Fatalf("TaskGet(%s): %v", id, err)
	}
	return got
}

func getSteps(t *testing.T, d store.Driver, id string) []*dt.StepRecord {
	t.Helper()
	got, err := d.Reader().StepListByTasks(context.Background(), &store.StepListByTasksParams{TaskIDs: []string{id}})
	if err != nil {
		t.Fatalf("StepListByTasks(%s): %v", id, err)
	}
	return got
}

func listEvents(t *testing.T, d store.Driver, p store.EventListParams) []*dt.Event {
	t.Helper()
	got, err := d.Reader().EventList(context.Background(), &p)
	if err != nil {
		t.Fatalf("EventList(%+v): %v", p, err)
	}
	return got
}

// ---- comparison ----

// norm returns a copy of v (a struct or pointer to struct) in a canonical form:
// times in UTC without monotonic reading, empty byte slices as nil.
func norm(v any) reflect.Value {
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Pointer {
		rv = rv.Elem()
	}
	out := reflect.New(rv.Type()).Elem()
	out.Set(rv)
	for i := 0; i < out.NumField(); i++ {
		f := out.Field(i)
		if !f.CanSet() {
			continue
		}
		switch x := f.Interface().(type) {
		case time.Time:
			f.Set(reflect.ValueOf(normTime(x)))
		case *time.Time:
			if x != nil {
				n := normTime(*x)
				f.Set(reflect.ValueOf(&n))
			}
		case []byte:
			if len(x) == 0 {
				f.Set(reflect.Zero(f.Type()))
			}
		}
	}
	return out
}

func normTime(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return time.UnixMicro(t.UnixMicro()).UTC()
}

func show(v reflect.Value) string {
	switch x := v.Interface().(type) {
	case *time.Time:
		if x == nil {
			return "<nil>"
		}
		return x.Format(time.RFC3339Nano)
	case time.Time:
		return x.Format(time.RFC3339Nano)
	case []byte:
		if x == nil {
			return "<nil>"
		}
		return fmt.Sprintf("%q", x)
	}
	return fmt.Sprintf("%#v", v.Interface())
}

// diff lists the fields of two structs of the same type that differ, skipping
// the named ones.
func diff(got, want any, skip ...string) []string {
	g, w := norm(got), norm(want)
	var out []string
	for i := 0; i < g.NumField(); i++ {
		name := g.Type().Field(i).Name
		if contains(skip, name) {
			continue
		}
		if !reflect.DeepEqual(g.Field(i).Interface(), w.Field(i).Interface()) {
			out = append(out, fmt.Sprintf("%s: got %s, want %s", name, show(g.Field(i)), show(w.Field(i))))
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func checkEqual(t *testing.T, what string, got, want any, skip ...string) {
	t.Helper()
	if d := diff(got, want, skip...); len(d) > 0 {
		t.Errorf("%s differs:\n  %s", what, strings.Join(d, "\n  "))
	}
}

func taskIDs(ts []*dt.Task) []string {
	ids := make([]string, len(ts))
	for i, t := range ts {
		ids[i] = t.ID
	}
	return ids
}

func sorted(s []string) []string {
	c := append([]string(nil), s...)
	sort.Strings(c)
	return c
}

func sameSet(a, b []string) bool {
	return reflect.DeepEqual(sorted(a), sorted(b))
}

func wantErrIs(t *testing.T, err, target error, what string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: err = %v, want errors.Is(err, %v)", what, err, target)
	}
}

func eqBytes(a, b []byte) bool { return bytes.Equal(a, b) }

// ---- cases: driver ----

func driverCases() []testCase {
	return []testCase{
		{"MigrateIdempotent", testMigrateIdempotent},
		{"InTxRollback", testInTxRollback},
		{"InTxCommitVisibleToReader", testInTxCommitVisible},
	}
}

func testMigrateIdempotent(t *testing.T, d store.Driver) {
	ctx := context.Background()
	insertTasks(t, d, newTask("keep"))
	for i := range 2 {
		if err := d.Migrate(ctx); err != nil {
			t.Fatalf("Migrate #%d on a migrated store: %v", i+1, err)
		}
	}
	applied, latest, err := d.SchemaVersion(ctx)
	if err != nil {
		t.Fatalf("SchemaVersion: %v", err)
	}
	if latest <= 0 || applied != latest {
		t.Fatalf("SchemaVersion = applied %d, latest %d; want applied == latest > 0", applied, latest)
	}
	getTask(t, d, "keep") // data survives a second migration
	if d.Name() == "" {
		t.Error("Name() is empty")
	}
}

func testInTxRollback(t *testing.T, d store.Driver) {
	ctx := context.Background()
	sentinel := errors.New("roll me back")
	err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		if _, err := x.TaskInsertMany(ctx, &store.TaskInsertManyParams{Tasks: []*dt.Task{newTask("t1")}}); err != nil {
			return err
		}
		if err := x.StepInsertMany(ctx, &store.StepInsertManyParams{Steps: []*dt.StepRecord{newStep("t1", 0)}}); err != nil {
			return err
		}
		if err := x.RequestInsertMany(ctx, &store.RequestInsertManyParams{Requests: []*dt.AgentRequest{newRequest("t1", 0, "a", at(time.Minute))}}); err != nil {
			return err
		}
		if err := x.ReplyInsertMany(ctx, &store.ReplyInsertManyParams{Replies: []*dt.AgentReply{{TaskID: "t1", Attempt: 1, Kind: dt.KindDo, CreatedAt: base}}}); err != nil {
			return err
		}
		if err := x.EventInsertMany(ctx, &store.EventInsertManyParams{Events: []*dt.Event{{TaskID: "t1", StepIndex: -1, Type: dt.EventSubmitted, CreatedAt: base}}}); err != nil {
			return err
		}
		if _, _, err := x.LeaseAcquire(ctx, &store.LeaseAcquireParams{Name: "l", Holder: "h", Now: base, TTL: time.Minute}); err != nil {
			return err
		}
		// Reads inside the transaction see its own writes.
		if _, err := x.TaskGet(ctx, &store.TaskGetParams{ID: "t1"}); err != nil {
			return fmt.Errorf("read own write: %w", err)
		}
		return sentinel
	})
	if !errors.Is(err, sentinel) {
		t.Fatalf("InTx returned %v, want the callback's error", err)
	}
	r := d.Reader()
	if _, err := r.TaskGet(ctx, &store.TaskGetParams{ID: "t1"}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("task after rollback: err = %v, want ErrNotFound", err)
	}
	if s := getSteps(t, d, "t1"); len(s) != 0 {
		t.Errorf("steps after rollback: %d", len(s))
	}
	if e := listEvents(t, d, store.EventListParams{}); len(e) != 0 {
		t.Errorf("events after rollback: %d", len(e))
	}
	if _, err := r.LeaseGet(ctx, &store.LeaseGetParams{Name: "l"}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("lease after rollback: err = %v, want ErrNotFound", err)
	}
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		reqs, err := x.RequestClaim(ctx, &store.RequestClaimParams{Agent: "a", ClaimedBy: "rt", Now: base, Limit: 10})
		if err != nil {
			return err
		}
		if len(reqs) != 0 {
			t.Errorf("requests after rollback: %d", len(reqs))
		}
		reps, err := x.ReplyTake(ctx, &store.ReplyTakeParams{Scheduler: "s", Limit: 10})
		if err != nil {
			return err
		}
		if len(reps) != 0 {
			t.Errorf("replies after rollback: %d", len(reps))
		}
		return nil
	})
}

func testInTxCommitVisible(t *testing.T, d store.Driver) {
	insertTasks(t, d, newTask("t1"))
	got := getTask(t, d, "t1")
	checkEqual(t, "task", got, newTask("t1"))
}

// render prints every field of a struct (or pointer to one) readably, for
// snapshots compared as strings.
func render(v any) string {
	n := norm(v)
	parts := make([]string, 0, n.NumField())
	for i := 0; i < n.NumField(); i++ {
		f := n.Type().Field(i)
		if f.Name == "Steps" {
			continue
		}
		parts = append(parts, f.Name+"="+show(n.Field(i)))
	}
	return "{" + strings.Join(parts, " ") + "}"
}
