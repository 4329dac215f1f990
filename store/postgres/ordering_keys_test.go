package postgres_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/store"
	"github.com/drover-run/drover/store/postgres"
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

// retainOnce runs one retention call (TaskDeleteFinished) and returns how
// many tasks it deleted; it fails the test if the call waits 10 s.
func retainOnce(t *testing.T, d *postgres.Driver, before time.Time, limit int) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var n int
	if err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		var err error
		n, err = x.TaskDeleteFinished(ctx, &store.TaskDeleteFinishedParams{Before: before, Limit: limit})
		return err
	}); err != nil {
		t.Fatalf("retention: %v", err)
	}
	return n
}

// Migration 10 counts each ordering key's existing tasks and deletes the
// keys whose tasks retention already took.
func TestOrderingKeyCountsOfUpgradedStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := openFresh(t)
	now := time.Now().UTC().Truncate(time.Microsecond)
	tasks := keyedTasks(now, "k", "k", "j", "")
	if err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		if _, err := x.OrderingKeyReserve(ctx, &store.OrderingKeyReserveParams{Keys: []string{"k", "k", "j"}}); err != nil {
			return err
		}
		_, err := x.TaskInsertMany(ctx, &store.TaskInsertManyParams{Tasks: tasks})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	s := pgx.Identifier{d.Schema()}.Sanitize()
	// Undo migration 10, with a key whose tasks are gone, and apply it again.
	for _, q := range []string{`DROP TRIGGER tasks_ordering_keys_added ON ` + s + `.tasks`,
		`DROP TRIGGER tasks_ordering_keys_removed ON ` + s + `.tasks`,
		`DROP FUNCTION ` + s + `.ordering_keys_added()`, `DROP FUNCTION ` + s + `.ordering_keys_removed()`,
		`ALTER TABLE ` + s + `.ordering_keys DROP COLUMN task_count`,
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

// Retention never waits for a submit that holds an ordering key: it leaves
// that key's tasks for a later round. Waiting would deadlock with a submit
// that holds the key and inserts the ID of a task retention is deleting,
// or with one transaction submitting two keys in the other order, and
// would hold up every submit of the keys retention had already locked
// for as long as the submitting transaction lasts.
func TestRetentionSkipsTheKeysOfSubmits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := open(t)
	old := time.Now().UTC().Add(-time.Hour).Truncate(time.Microsecond)
	tasks := keyedTasks(old, "a", "b") // IDs a and b, keys a and b
	if err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		if _, err := x.OrderingKeyReserve(ctx, &store.OrderingKeyReserveParams{Keys: []string{"a", "b"}}); err != nil {
			return err
		}
		if _, err := x.TaskInsertMany(ctx, &store.TaskInsertManyParams{Tasks: tasks}); err != nil {
			return err
		}
		for _, tk := range tasks {
			tk.ProcessState = dt.Processed
		}
		return x.TaskUpdateMany(ctx, &store.TaskUpdateManyParams{Tasks: tasks})
	}); err != nil {
		t.Fatal(err)
	}
	retain := func() int { t.Helper(); return retainOnce(t, d, time.Now(), 10) }
	submit := func(ctx context.Context, id, key string) (int64, error) {
		tk := keyedTasks(old, key)[0]
		tk.ID = id
		var seq int64
		err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
			seqs, err := x.OrderingKeyReserve(ctx, &store.OrderingKeyReserveParams{Keys: []string{key}})
			if err != nil {
				return err
			}
			tk.OrderingSeq = seqs[0]
			_, err = x.TaskInsertMany(ctx, &store.TaskInsertManyParams{Tasks: []*dt.Task{tk}})
			seq = seqs[0]
			return err
		})
		return seq, err
	}
	// A submit of key b holds it, then inserts task b again.
	holding, insert := make(chan struct{}), make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(insert) }) }
	defer release() // a failed check must not leave the submit open
	submitted := make(chan error, 1)
	go func() {
		submitted <- d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
			if _, err := x.OrderingKeyReserve(ctx, &store.OrderingKeyReserveParams{Keys: []string{"b"}}); err != nil {
				return err
			}
			close(holding)
			<-insert
			_, err := x.TaskInsertMany(ctx, &store.TaskInsertManyParams{Tasks: keyedTasks(old, "a", "b")[1:]}) // ID b exists: nothing inserted
			return err
		})
	}()
	<-holding
	if n := retain(); n != 1 {
		t.Errorf("retention with key b held deleted %d tasks, want 1 (task a)", n)
	}
	// Key a went with its last task; its next submit is not held up.
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if seq, err := submit(sctx, "a2", "a"); err != nil || seq != 1 {
		t.Errorf("submit of key a while b is held = position %d, %v; want 1, nil", seq, err)
	}
	release()
	if err := <-submitted; err != nil {
		t.Fatalf("submit of key b: %v", err)
	}
	if n := retain(); n != 1 {
		t.Errorf("retention after the submit deleted %d tasks, want 1 (task b)", n)
	}
	var keys []string
	rows, err := d.Pool().Query(ctx, `SELECT key || ':' || task_count FROM `+pgx.Identifier{d.Schema()}.Sanitize()+`.ordering_keys ORDER BY key`)
	if err != nil {
		t.Fatal(err)
	}
	if keys, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 || keys[0] != "a:1" {
		t.Errorf("ordering keys left %v, want [a:1] (b went with its task)", keys)
	}
}

// Tasks of keys a submit holds are passed over, not waited for nor
// counted against the batch: busy keys must not stall retention of
// younger tasks (here two busy keys fill the first two picks).
func TestRetentionPassesOverABusyKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := open(t)
	now := time.Now().UTC().Truncate(time.Microsecond)
	tasks := keyedTasks(now, "hot", "hot", "warm", "warm", "", "") // e, f: no key
	for i, tk := range tasks {
		tk.ProcessState, tk.UpdatedAt = dt.Processed, now.Add(time.Duration(i-10)*time.Minute) // keyed ones oldest
	}
	if err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		if _, err := x.OrderingKeyReserve(ctx, &store.OrderingKeyReserveParams{Keys: []string{"hot", "hot", "warm", "warm"}}); err != nil {
			return err
		}
		_, err := x.TaskInsertMany(ctx, &store.TaskInsertManyParams{Tasks: tasks})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	holding, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	done := func() { once.Do(func() { close(release) }) }
	defer done()
	held := make(chan error, 1)
	go func() {
		held <- d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
			if _, err := x.OrderingKeyReserve(ctx, &store.OrderingKeyReserveParams{Keys: []string{"hot", "warm"}}); err != nil {
				return err
			}
			close(holding)
			<-release
			return nil
		})
	}()
	<-holding
	retain := func() int { t.Helper(); return retainOnce(t, d, now, 2) }
	if n := retain(); n != 2 {
		t.Errorf("retention of 2 with keys hot and warm held deleted %d, want 2 (the tasks without a key, found in a third pass)", n)
	}
	done()
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	if n := retain(); n != 2 {
		t.Errorf("retention after the submit deleted %d, want 2 (hot's)", n)
	}
	if n := retain(); n != 2 {
		t.Errorf("retention after the submit deleted %d, want 2 (warm's)", n)
	}
}
