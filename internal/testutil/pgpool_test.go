package testutil_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/flow"
	"github.com/drover-run/drover/internal/testutil"
	"github.com/drover-run/drover/store"
	"github.com/drover-run/drover/store/postgres"
)

func openOn(t *testing.T, schema string) *postgres.Driver {
	t.Helper()
	d, err := postgres.Open(context.Background(), testutil.PostgresURL(t), postgres.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// contents is what a schema holds: every table's rows (of
// drover_migrations only the versions, its times differ) and every
// sequence's next value. It advances the sequences.
func contents(t *testing.T, d *postgres.Driver) map[string]string {
	t.Helper()
	ctx := context.Background()
	rows, err := d.Pool().Query(ctx, `SELECT relname, relkind = 'S' FROM pg_catalog.pg_class
 WHERE relnamespace = $1::text::regnamespace AND relkind IN ('r', 'S')`, d.Schema())
	if err != nil {
		t.Fatal(err)
	}
	type rel struct {
		Name  string
		IsSeq bool
	}
	rels, err := pgx.CollectRows(rows, pgx.RowToStructByPos[rel])
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, r := range rels {
		id := pgx.Identifier{d.Schema(), r.Name}.Sanitize()
		q := `SELECT coalesce(json_agg(t ORDER BY t)::text, '') FROM ` + id + ` AS t`
		switch {
		case r.IsSeq:
			q = `SELECT nextval('` + id + `')::text`
		case r.Name == "drover_migrations":
			q = `SELECT string_agg(version::text, ',' ORDER BY version) FROM ` + id
		}
		var v string
		if err := d.Pool().QueryRow(ctx, q).Scan(&v); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		got[r.Name] = v
	}
	return got
}

// dirty writes to the store's tables and sequences as tests do: a task
// with an ordering key (its steps, events and key position), a lease, the
// webhook cursor, and a value taken from every sequence.
func dirty(t *testing.T, d *postgres.Driver) {
	t.Helper()
	ctx := context.Background()
	now := time.Now()
	err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		in := []byte(`{}`)
		task := &dt.Task{ID: "t1", Workflow: "wf", Input: in, InputHash: flow.InputHash("wf", in), ProcessState: dt.Pending,
			StepCount: 1, OrderingKey: "k", FailureThreshold: 3, OnFailure: dt.PolicyError, AvailableAt: now, CreatedAt: now, UpdatedAt: now}
		step := &dt.StepRecord{TaskID: "t1", Name: "s", Agent: "a", Timeout: time.Second, ProcessState: dt.Pending,
			IdempotencyKey: flow.IdempotencyKey("t1", 0, "s"), UpdatedAt: now}
		if _, err := flow.Submit(ctx, x, []flow.Submission{{Task: task, Steps: []*dt.StepRecord{step}}}); err != nil {
			return err
		}
		_, _, err := x.LeaseAcquire(ctx, &store.LeaseAcquireParams{Name: "l", Holder: "h", Now: now, TTL: time.Minute})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	s := pgx.Identifier{d.Schema()}.Sanitize()
	if _, err := d.Pool().Exec(ctx, `UPDATE `+s+`.webhook_cursor SET last_event_id = 42`); err != nil {
		t.Fatal(err)
	}
	for name, v := range contents(t, d) { // takes a value of every sequence
		if name == "tasks" && v == "" {
			t.Fatal("the task was not stored")
		}
	}
}

// A schema given back holds what a freshly migrated one holds, and the
// next test gets it.
func TestSchemaPoolEmptiesSchemasForTheNextTest(t *testing.T) {
	t.Parallel()
	fresh := contents(t, testutil.Postgres(t))
	if len(fresh) < 10 {
		t.Fatalf("a migrated schema has %d tables and sequences: %v", len(fresh), fresh)
	}
	pool := testutil.NewSchemaPool()
	t.Cleanup(func() {
		if err := pool.Close(); err != nil {
			t.Error(err)
		}
	})
	var first string
	for i := range 3 {
		t.Run(fmt.Sprint("test", i), func(t *testing.T) {
			schema := pool.Take(t)
			if first == "" {
				first = schema
			} else if schema != first {
				t.Errorf("took %s, want %s again: the pool has no other schema", schema, first)
			}
			d := openOn(t, schema)
			got := contents(t, d) // advances the sequences
			for name, want := range fresh {
				if got[name] != want {
					t.Errorf("%s: %q, want %q as in a freshly migrated schema", name, got[name], want)
				}
			}
			if len(got) != len(fresh) {
				t.Errorf("%d tables and sequences, want %d", len(got), len(fresh))
			}
			dirty(t, d)
		})
	}
}

func schemaExists(t *testing.T, schema string) bool {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), testutil.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_catalog.pg_namespace WHERE nspname = $1`, schema).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// A schema whose structure a test changed is dropped, not handed out
// again.
func TestSchemaPoolDropsChangedSchemas(t *testing.T) {
	t.Parallel()
	pool := testutil.NewSchemaPool()
	defer pool.Close()
	for _, change := range []string{
		`ALTER TABLE %s.tasks ADD COLUMN extra int`,
		`CREATE TABLE %s.app_orders (id text)`,
		`CREATE INDEX ON %s.steps (name)`,
		`DROP TRIGGER tasks_ordering_keys_added ON %s.tasks`,
		`ALTER TABLE %s.steps ALTER COLUMN name SET DEFAULT 'x'`,
		`DELETE FROM %s.drover_migrations WHERE version = 13`,
	} {
		var schema string
		t.Run(change, func(t *testing.T) {
			schema = pool.Take(t)
			d := openOn(t, schema)
			if _, err := d.Pool().Exec(context.Background(), fmt.Sprintf(change, pgx.Identifier{schema}.Sanitize())); err != nil {
				t.Fatal(err)
			}
		})
		if schemaExists(t, schema) {
			t.Errorf("after %q the schema %s is still there", change, schema)
		}
		t.Run("next", func(t *testing.T) {
			if next := pool.Take(t); next == schema {
				t.Errorf("after %q the pool handed out %s again", change, schema)
			}
		})
	}
}

// A schema held by a test is not handed out to another, and Close drops
// every schema of the pool.
func TestSchemaPoolHeldSchemasAndClose(t *testing.T) {
	t.Parallel()
	pool := testutil.NewSchemaPool()
	var first string
	t.Run("give one back", func(t *testing.T) { first = pool.Take(t) })
	var names []string
	t.Run("hold three", func(t *testing.T) {
		for range 3 {
			names = append(names, pool.Take(t))
		}
	})
	if len(slices.Compact(slices.Sorted(slices.Values(names)))) != 3 || !slices.Contains(names, first) {
		t.Fatalf("three schemas held at once: %v, want three different ones, %s among them", names, first)
	}
	if err := pool.Close(); err != nil {
		t.Fatal(err)
	}
	for _, s := range names {
		if schemaExists(t, s) {
			t.Errorf("schema %s is still there after Close", s)
		}
	}
}
