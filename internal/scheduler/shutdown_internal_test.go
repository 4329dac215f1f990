package scheduler

import (
	"context"
	"testing"
	"time"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/store"
)

// A reply delivered to the inbox just before Run exits is applied by the
// shutdown, promptly (it once spun on empty transactions for 5s and dropped it).
func TestShutdownAppliesInboxReplies(t *testing.T) {
	ctx := context.Background()
	d, s := oneTask(t, 1, time.Minute)
	if !s.Deliver(&dt.AgentReply{TaskID: "t1", StepIndex: 0, Attempt: 1, Kind: dt.KindDo, Output: []byte(`"ok"`), CreatedAt: time.Now()}) {
		t.Fatal("deliver")
	}
	start := time.Now()
	s.shutdown()
	took := time.Since(start)
	task, _ := d.Reader().TaskGet(ctx, &store.TaskGetParams{ID: "t1"})
	t.Logf("shutdown took %s; inbox left %d; task state %s", took, len(s.inbox), task.ProcessState)
	if task.ProcessState != dt.Processed {
		t.Errorf("reply in inbox at shutdown was not applied (task %s, shutdown took %s)", task.ProcessState, took)
	}
	if took > 2*time.Second {
		t.Errorf("shutdown took %s", took)
	}
}
