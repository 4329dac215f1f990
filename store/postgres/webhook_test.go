package postgres_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/store"
)

// An upgraded store's webhook cursor starts at its latest event (its
// history is not sent); a missing cursor row is remade there too.
func TestWebhookCursorOfUpgradedStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := openFresh(t)
	// Two events of one task or of two: one event row or two (the store
	// keeps a run of one task's events in one row, since migration 23; a
	// store that applies migration 8 has none such).
	addEvents := func(task1, task2 string) int64 {
		evs := []*dt.Event{{TaskID: task1, StepIndex: -1, Type: dt.EventProcessed}, {TaskID: task2, StepIndex: -1, Type: dt.EventCancelled}}
		if err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
			return x.EventInsertMany(ctx, &store.EventInsertManyParams{Events: evs})
		}); err != nil {
			t.Fatal(err)
		}
		return evs[1].ID
	}
	cursor := func() int64 {
		var after int64
		if err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
			var err error
			after, _, err = x.WebhookCursorLock(ctx, &store.WebhookCursorLockParams{})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return after
	}
	s := pgx.Identifier{d.Schema()}.Sanitize()
	// Undo migration 8 and apply it again on a store with history.
	last := addEvents("t", "u")
	for _, q := range []string{`DROP VIEW ` + s + `.v_webhook_deliveries`, `DROP TABLE ` + s + `.webhook_deliveries`,
		`DROP TABLE ` + s + `.webhook_cursor`, `DELETE FROM ` + s + `.drover_migrations WHERE version = 8`} {
		if _, err := d.Pool().Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if got := cursor(); got != last {
		t.Fatalf("cursor after the upgrade = %d, want the latest event %d", got, last)
	}
	last = addEvents("t", "t")
	if _, err := d.Pool().Exec(ctx, `DELETE FROM `+s+`.webhook_cursor`); err != nil {
		t.Fatal(err)
	}
	if got := cursor(); got != last {
		t.Fatalf("remade cursor = %d, want the latest event %d", got, last)
	}
}
