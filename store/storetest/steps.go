package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/store"
)

func stepCases() []testCase {
	return []testCase{
		{"InsertListRoundTrip", testStepInsertList},
		{"ListOrder", testStepListOrder},
		{"UpdateManyRoundTrip", testStepUpdateMany},
	}
}

func fullStep(taskID string, i int) *dt.StepRecord {
	s := newStep(taskID, i)
	s.Compensation = "undo-" + s.Name
	s.ProcessState = dt.Processed
	s.CompensationState = dt.Processing
	s.LockedBy = "sched-x"
	s.CompleteBy = tp(at(time.Minute))
	s.FailureCount = 2
	s.Attempt = 5
	s.Output = []byte(`{"step":` + fmt.Sprint(i) + `}`)
	s.LastError = "flaky"
	s.StartedAt = tp(at(-time.Minute))
	s.FinishedAt = tp(at(-time.Second))
	s.UpdatedAt = at(time.Second)
	s.OnFailure = dt.PolicyError
	s.Wait = &dt.WaitPolicy{MaxWaits: 2, Delay: time.Hour, Multiplier: 3, MaxDelay: 5 * time.Hour}
	s.Signal = "approved"
	s.SignalDefault = []byte(`{"default":true}`)
	s.Group = "group-x"
	s.FinishSeq = 4
	return s
}

func testStepInsertList(t *testing.T, d store.Driver) {
	insertTasks(t, d, newTask("t"))
	s0, s1 := newStep("t", 0), fullStep("t", 1)
	insertSteps(t, d, s0, s1)
	got := getSteps(t, d, "t")
	if len(got) != 2 {
		t.Fatalf("StepListByTasks = %d steps, want 2", len(got))
	}
	checkEqual(t, "fresh step", got[0], s0)
	checkEqual(t, "step with every field set", got[1], s1)

	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		got, err := x.StepListByTasks(ctx, &store.StepListByTasksParams{TaskIDs: []string{"t"}})
		if err != nil {
			return err
		}
		if len(got) != 2 {
			t.Fatalf("StepListByTasks in a transaction = %d steps", len(got))
		}
		checkEqual(t, "step read in a transaction", got[1], s1)
		return x.StepInsertMany(ctx, &store.StepInsertManyParams{Steps: nil})
	})
	for _, ids := range [][]string{nil, {"missing"}, {"missing", "other"}} {
		got, err := d.Reader().StepListByTasks(context.Background(), &store.StepListByTasksParams{TaskIDs: ids})
		if err != nil || len(got) != 0 {
			t.Errorf("StepListByTasks(%v) = %d steps, %v; want none", ids, len(got), err)
		}
	}
}

func testStepListOrder(t *testing.T, d store.Driver) {
	insertTasks(t, d, newTask("a"), newTask("b"), newTask("c"))
	// Inserted out of order, across tasks.
	insertSteps(t, d, newStep("b", 2), newStep("a", 1), newStep("c", 0), newStep("b", 0), newStep("a", 0), newStep("b", 1))
	got, err := d.Reader().StepListByTasks(context.Background(), &store.StepListByTasksParams{TaskIDs: []string{"b", "a", "missing"}})
	if err != nil {
		t.Fatal(err)
	}
	// Ordered by task, then index: each task's steps are contiguous and in
	// index order. Which task comes first is not promised.
	var keys []string
	for _, s := range got {
		keys = append(keys, fmt.Sprintf("%s%d", s.TaskID, s.Index))
	}
	k := fmt.Sprint(keys)
	if k != "[a0 a1 b0 b1 b2]" && k != "[b0 b1 b2 a0 a1]" {
		t.Errorf("StepListByTasks(b, a) = %s, want each task's steps together in index order", k)
	}
	for _, s := range got {
		checkEqual(t, "listed step", s, newStep(s.TaskID, s.Index))
	}
	one := getSteps(t, d, "b")
	if len(one) != 3 || one[0].Index != 0 || one[1].Index != 1 || one[2].Index != 2 {
		t.Errorf("StepListByTasks(b) not in index order: %v", one)
	}
}

func testStepUpdateMany(t *testing.T, d store.Driver) {
	insertTasks(t, d, newTask("t"), newTask("u"))
	a, b, other := newStep("t", 0), fullStep("t", 1), newStep("u", 0)
	insertSteps(t, d, a, b, other)

	a2 := *a
	a2.ProcessState = dt.Processed
	a2.CompensationState = dt.Compensated
	a2.LockedBy = "sched"
	a2.CompleteBy = tp(at(time.Hour))
	a2.FailureCount = 3
	a2.Attempt = 7
	a2.Output = []byte(`"o"`)
	a2.LastError = "err"
	a2.StartedAt = tp(at(time.Second))
	a2.FinishedAt = tp(at(2 * time.Second))
	a2.UpdatedAt = at(3 * time.Second)
	a2.FinishSeq = 9
	b2 := *b
	b2.ProcessState = dt.Pending
	b2.CompensationState = ""
	b2.LockedBy = ""
	b2.CompleteBy = nil
	b2.FailureCount = 0
	b2.Attempt = 6
	b2.Output = nil
	b2.LastError = ""
	b2.StartedAt = nil
	b2.FinishedAt = nil
	b2.UpdatedAt = at(4 * time.Second)
	b2.FinishSeq = 0
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		return x.StepUpdateMany(ctx, &store.StepUpdateManyParams{Steps: []*dt.StepRecord{&a2, &b2}})
	})
	got := getSteps(t, d, "t")
	checkEqual(t, "step 0 updated", got[0], &a2)
	checkEqual(t, "step 1 updated to nulls", got[1], &b2)
	checkEqual(t, "step of another task", getSteps(t, d, "u")[0], other)

	a3, b3 := a2, b2
	a3.LockedBy, a3.CompleteBy, a3.Output, a3.LastError, a3.StartedAt, a3.FinishedAt = "", nil, nil, "", nil, nil
	b3.LockedBy, b3.CompleteBy, b3.Output, b3.LastError = "sched-2", tp(at(time.Hour)), []byte(`[1]`), "e2"
	b3.StartedAt, b3.FinishedAt, b3.CompensationState = tp(at(5*time.Second)), tp(at(6*time.Second)), dt.Error
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		return x.StepUpdateMany(ctx, &store.StepUpdateManyParams{Steps: []*dt.StepRecord{&b3, &a3}})
	})
	got = getSteps(t, d, "t")
	checkEqual(t, "step 0 back to nulls", got[0], &a3)
	checkEqual(t, "step 1 back from nulls", got[1], &b3)

	// The definition of a step never changes; its idempotency key changes
	// when a compensated task starts a new run.
	a4 := a3
	a4.Name, a4.Agent, a4.Timeout, a4.Compensation, a4.IdempotencyKey = "x", "x", time.Hour, "x", a.IdempotencyKey+"/run-2"
	a4.Group = "x"
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		return x.StepUpdateMany(ctx, &store.StepUpdateManyParams{Steps: []*dt.StepRecord{&a4}})
	})
	g := getSteps(t, d, "t")[0]
	if g.Name != a.Name || g.Agent != a.Agent || g.Timeout != a.Timeout || g.Compensation != a.Compensation || g.Group != a.Group {
		t.Errorf("StepUpdateMany changed immutable fields: %+v", g)
	}
	if g.IdempotencyKey != a.IdempotencyKey+"/run-2" {
		t.Errorf("StepUpdateMany: idempotency key %q, want %q", g.IdempotencyKey, a.IdempotencyKey+"/run-2")
	}
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		return x.StepUpdateMany(ctx, &store.StepUpdateManyParams{Steps: nil})
	})
}
