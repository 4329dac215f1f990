package drover_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/internal/notifier"
	"github.com/drover-run/drover/store/postgres"
)

// A claim passes over a task another transaction holds locked (an
// operator's signal to it, say, which leaves it claimable). While
// notifications arrive, the scheduler must not then sleep until its slow
// fallback: nothing notifies it when that transaction ends.
func TestClaimSkippingALockedTaskLooksAgainSoon(t *testing.T) {
	t.Parallel()
	d := pgStore(t)
	c := startClient(t, drover.Config{Store: d, Workflows: []drover.Workflow{{Name: "w", Steps: []drover.Step{{Name: "s", Agent: "a"}}}},
		Agents: []drover.Agent{okAgent("a")}})
	waitFor(t, "notifications", notifier.For(d).Live)
	ctx := context.Background()
	due := time.Now().Add(time.Second)
	if _, err := c.Submit(ctx, "w", []byte(`{}`), &drover.SubmitOptions{ID: "later", RunAt: due}); err != nil {
		t.Fatal(err)
	}
	// Hold the task's row locked from before it is due until well after.
	pg := d.(*postgres.Driver)
	tx, err := pg.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT 1 FROM `+pgx.Identifier{pg.Schema(), "tasks"}.Sanitize()+` WHERE id = 'later' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(due) + time.Second)
	if task, err := c.Task(ctx, "later"); err != nil || task.ProcessState != drover.Pending {
		t.Fatalf("task while locked: %+v, %v; want Pending", task, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	waitWithin(t, 5*time.Second, "the task processed soon after the lock ended", func() bool {
		task, err := c.Task(ctx, "later")
		return err == nil && task.ProcessState == drover.Processed
	})
}
