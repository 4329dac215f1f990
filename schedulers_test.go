package drover_test

import (
	"context"
	"testing"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/internal/testutil"
)

func TestDefaultSchedulers(t *testing.T) {
	if n := drover.DefaultSchedulers(testutil.SQLite(t)); n != 1 {
		t.Errorf("DefaultSchedulers(SQLite) = %d, want 1", n)
	}
	if n := drover.DefaultSchedulers(testutil.Postgres(t)); n != 2 {
		t.Errorf("DefaultSchedulers(PostgreSQL) = %d, want 2", n)
	}
}

// A submit wakes one scheduler; one whose claim comes back full wakes the
// next, so a burst is shared by all of them without waiting for a poll
// (the poll interval here is longer than the test). SQLite: no
// notifications from the store wake the schedulers besides.
func TestBurstSpreadsOverSchedulers(t *testing.T) {
	d := testutil.SQLite(t)
	wf := drover.Workflow{Name: "w", Steps: []drover.Step{{Name: "s", Agent: "a", Timeout: time.Minute}}}
	slow := drover.Agent{Name: "a", Concurrency: 64, Func: func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) {
		time.Sleep(time.Millisecond)
		return []byte("null"), nil
	}}
	c, err := drover.New(drover.Config{Store: d, Workflows: []drover.Workflow{wf}, Agents: []drover.Agent{slow},
		Schedulers: 2, ClaimBatch: 8, MaxInFlight: 32, PollInterval: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	const n = 400
	ps := make([]drover.SubmitParams, n)
	for i := range ps {
		ps[i] = drover.SubmitParams{Workflow: "w"}
	}
	if _, err := c.SubmitMany(ctx, ps); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every task finished", func() bool { return c.Stats().TasksFinished == n })
	claimers := map[string]int{}
	for after := int64(0); ; {
		evs, err := c.Events(ctx, drover.EventQuery{AfterID: after})
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 0 {
			break
		}
		for _, e := range evs {
			if e.Type == drover.EventStepStarted {
				claimers[e.Actor]++
			}
		}
		after = evs[len(evs)-1].ID
	}
	if len(claimers) != 2 {
		t.Fatalf("steps started by %v; want both schedulers", claimers)
	}
}
