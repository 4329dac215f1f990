package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/store"
)

// keyedTasks are Pending tasks with the given ordering keys ("" for none),
// with IDs a, b, c, ...
func keyedTasks(now time.Time, keys ...string) []*dt.Task {
	var tasks []*dt.Task
	for i, key := range keys {
		tasks = append(tasks, &dt.Task{ID: string(rune('a' + i)), Workflow: "w", Input: []byte("{}"), InputHash: "h",
			ProcessState: dt.Pending, StepCount: 1, FailureThreshold: 1, OnFailure: dt.PolicyError, OrderingKey: key,
			AvailableAt: now, CreatedAt: now, UpdatedAt: now})
	}
	return tasks
}

// Migration 10 counts each ordering key's existing tasks and deletes the
// keys whose tasks retention already took.
func TestOrderingKeyCountsOfUpgradedStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := open(t)
	now := time.Now().UTC().Truncate(time.Microsecond)
	tasks := keyedTasks(now, "k", "k", "j", "")
	if err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		if _, err := x.OrderingSeqReserve(ctx, []string{"k", "k", "j"}); err != nil {
			return err
		}
		_, err := x.TaskInsertMany(ctx, tasks)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	s := pgx.Identifier{d.Schema()}.Sanitize()
	// Undo migration 10, with a key whose tasks are gone, and apply it again.
	for _, q := range []string{`ALTER TABLE ` + s + `.ordering_keys DROP COLUMN task_count`,
		`INSERT INTO ` + s + `.ordering_keys (key, last_seq) VALUES ('gone', 7)`,
		`DELETE FROM ` + s + `.drover_migrations WHERE version = 10`} {
		if _, err := d.Pool().Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	rows, err := d.Pool().Query(ctx, `SELECT key, last_seq, task_count FROM `+s+`.ordering_keys ORDER BY key`)
	if err != nil {
		t.Fatal(err)
	}
	type key struct {
		Key         string
		Last, Count int64
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[key])
	if err != nil {
		t.Fatal(err)
	}
	want := []key{{"j", 1, 1}, {"k", 2, 2}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("ordering_keys after the upgrade = %v, want %v", got, want)
	}
}

// Retention locks the ordering keys of the tasks it deletes before the
// tasks, as a submit does. The other order deadlocks with a submit that
// holds the key and inserts the ID of a task retention is deleting: the
// insert waits for the deletion, the deletion's count for the key.
func TestRetentionAndSubmitOfOneKeyDoNotDeadlock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := open(t)
	old := time.Now().UTC().Add(-time.Hour).Truncate(time.Microsecond)
	task := keyedTasks(old, "k")[0]
	if err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		if _, err := x.OrderingSeqReserve(ctx, []string{"k"}); err != nil {
			return err
		}
		if _, err := x.TaskInsertMany(ctx, []*dt.Task{task}); err != nil {
			return err
		}
		task.ProcessState = dt.Processed
		return x.TaskUpdateMany(ctx, []*dt.Task{task})
	}); err != nil {
		t.Fatal(err)
	}
	reserved, insert := make(chan struct{}), make(chan struct{})
	submitted := make(chan error, 1)
	go func() {
		submitted <- d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
			if _, err := x.OrderingSeqReserve(ctx, []string{"k"}); err != nil {
				return err
			}
			close(reserved)
			<-insert
			again := keyedTasks(old, "k")[0] // the same ID
			_, err := x.TaskInsertMany(ctx, []*dt.Task{again})
			return err
		})
	}()
	<-reserved
	type result struct {
		n   int
		err error
	}
	retained := make(chan result, 1)
	go func() {
		var r result
		r.err = d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
			var err error
			r.n, err = x.TaskDeleteFinished(ctx, time.Now(), 10)
			return err
		})
		retained <- r
	}()
	// Retention waits for the submit's key.
	for deadline := time.Now().Add(10 * time.Second); ; {
		n, err := lockWaits(ctx, d)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("retention never waited for the key the submit holds")
		}
		time.Sleep(time.Millisecond)
	}
	close(insert)
	if err := <-submitted; err != nil {
		t.Errorf("submit: %v", err)
	}
	r := <-retained
	if r.err != nil || r.n != 1 {
		t.Errorf("retention = %d, %v; want 1 task deleted", r.n, r.err)
	}
	var keys int
	if err := d.Pool().QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{d.Schema()}.Sanitize()+`.ordering_keys`).Scan(&keys); err != nil {
		t.Fatal(err)
	}
	if keys != 0 {
		t.Errorf("%d ordering keys left, want 0 (k's only task was deleted; the submit inserted nothing)", keys)
	}
}
