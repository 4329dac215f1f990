package scheduler

import (
	"context"
	"testing"
	"time"

	dt "github.com/drover-run/drover/drovertype"
)

// The scheduler reads the clock once it holds the write lock: waiting for the
// lock must not let a reply be applied after its CompleteBy, nor dispatch the
// next step with a CompleteBy already in the past. Timing-based by nature: it
// holds the lock across a step's deadline.
func TestTickReadsClockUnderWriteLock(t *testing.T) {
	ctx := context.Background()
	d, s := oneTask(t, 2, 800*time.Millisecond)
	st, _ := d.Reader().StepListByTasks(ctx, []string{"t1"})
	cb0 := *st[0].CompleteBy
	time.Sleep(time.Until(cb0.Add(-100 * time.Millisecond)))
	// The agent answers 100ms before CompleteBy.
	s.Deliver(&dt.AgentReply{TaskID: "t1", StepIndex: 0, Attempt: 1, Kind: dt.KindDo, Output: []byte(`1`)})
	// Another writer (here an application's SubmitTx-style transaction) holds the write connection for 1.5s.
	tx, err := d.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { s.Tick(ctx, false); close(done) }()
	time.Sleep(1500 * time.Millisecond)
	tx.Commit()
	<-done
	applied := time.Now()
	st, _ = d.Reader().StepListByTasks(ctx, []string{"t1"})
	t.Logf("step0 CompleteBy %s, applied at %s (%s late): step0 %s", cb0.Format("15:04:05.000"), applied.Format("15:04:05.000"), applied.Sub(cb0).Round(time.Millisecond), st[0].ProcessState)
	if st[1].CompleteBy != nil {
		t.Logf("step1 dispatched with CompleteBy %s, already %s in the past when committed", st[1].CompleteBy.Format("15:04:05.000"), applied.Sub(*st[1].CompleteBy).Round(time.Millisecond))
	}
	if st[0].ProcessState == dt.Processed && applied.After(cb0) {
		t.Errorf("reply applied %s after its CompleteBy", applied.Sub(cb0).Round(time.Millisecond))
	}
	if st[1].CompleteBy != nil && st[1].CompleteBy.Before(applied) {
		t.Errorf("next step born expired")
	}
}
