package sqlite_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/store"
	"github.com/drover-run/drover/store/sqlite"
)

// Migration 10 counts each ordering key's existing tasks and deletes the
// keys whose tasks retention already took.
func TestOrderingKeyCountsOfUpgradedStore(t *testing.T) {
	ctx := context.Background()
	d := openStore(t, filepath.Join(t.TempDir(), "drover.db"), sqlite.Options{Create: true})
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	var tasks []*dt.Task
	for i, key := range []string{"k", "k", "j", ""} {
		tasks = append(tasks, &dt.Task{ID: string(rune('a' + i)), Workflow: "w", Input: []byte("{}"), InputHash: "h",
			ProcessState: dt.Pending, StepCount: 1, FailureThreshold: 1, OnFailure: dt.PolicyError, OrderingKey: key,
			AvailableAt: now, CreatedAt: now, UpdatedAt: now})
	}
	if err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		if _, err := x.OrderingKeyReserve(ctx, &store.OrderingKeyReserveParams{Keys: []string{"k", "k", "j"}}); err != nil {
			return err
		}
		_, err := x.TaskInsertMany(ctx, &store.TaskInsertManyParams{Tasks: tasks})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	// Undo migration 10, with a key whose tasks are gone, and apply it again.
	for _, q := range []string{`DROP TRIGGER tasks_ordering_keys_added`, `DROP TRIGGER tasks_ordering_keys_removed`,
		`ALTER TABLE ordering_keys DROP COLUMN task_count`,
		`INSERT INTO ordering_keys (key, last_seq) VALUES ('gone', 7)`,
		`DELETE FROM drover_migrations WHERE version = 10`} {
		if _, err := d.DB().ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	rows, err := d.DB().QueryContext(ctx, `SELECT key, last_seq, task_count FROM ordering_keys ORDER BY key`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var (
			k           string
			last, count int64
		)
		if err := rows.Scan(&k, &last, &count); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s last %d count %d", k, last, count))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if want := "[j last 1 count 1 k last 2 count 2]"; fmt.Sprint(got) != want {
		t.Fatalf("ordering_keys after the upgrade = %v, want %s", got, want)
	}
}
