package postgres_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/flow"
	"github.com/drover-run/drover/internal/testutil"
	"github.com/drover-run/drover/store"
	"github.com/drover-run/drover/store/postgres"
	"github.com/drover-run/drover/store/storetest"
)

// The tests need a PostgreSQL server (see testutil.PostgresURL). Every
// test's store lives in a schema of its own: one of schemas, emptied for
// the next test when the test ends, or a fresh schema (freshSchema,
// openFresh) for the tests that migrate or change a schema's structure,
// dropped when the test ends.

// schemas hands out migrated schemas to the tests of the package.
var schemas = testutil.NewSchemaPool()

func TestMain(m *testing.M) {
	code := m.Run()
	if err := schemas.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = max(code, 1)
	}
	os.Exit(code)
}

func testURL(t testing.TB) string { t.Helper(); return testutil.PostgresURL(t) }

func freshSchema(t testing.TB) string { t.Helper(); return testutil.FreshSchema(t) }

// openSchema opens a driver on schema, closed when the test ends.
func openSchema(t testing.TB, schema string) *postgres.Driver {
	t.Helper()
	d, err := postgres.Open(context.Background(), testURL(t), postgres.Options{Schema: schema})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// open returns a migrated driver on a schema no other running test uses.
func open(t testing.TB) *postgres.Driver {
	t.Helper()
	return openSchema(t, schemas.Take(t))
}

// openFresh returns a migrated driver on a fresh schema, for tests that
// change its structure.
func openFresh(t testing.TB) *postgres.Driver {
	t.Helper()
	d := openSchema(t, freshSchema(t))
	if err := d.Migrate(context.Background()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return d
}

// lockWaits counts the sessions waiting for a lock while running a statement
// on d's schema (storetest.LockWaits). Schemas are unique per test, so other
// tests' waits do not count.
func lockWaits(ctx context.Context, d *postgres.Driver) (int64, error) {
	var n int64
	err := d.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
 WHERE wait_event_type = 'Lock' AND strpos(query, $1) > 0`, pgx.Identifier{d.Schema()}.Sanitize()+".").Scan(&n)
	return n, err
}

// withWaits is the driver with storetest.LockWaits.
type withWaits struct{ *postgres.Driver }

func (w withWaits) LockWaits(ctx context.Context) (int64, error) { return lockWaits(ctx, w.Driver) }

// OpenSameStore opens another driver, with its own pool, on the schema
// (storetest.SameStore).
func (w withWaits) OpenSameStore(t *testing.T) store.Driver {
	return withWaits{openSchema(t, w.Schema())}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	testURL(t)
	storetest.Run(t, func(t *testing.T) store.Driver { return withWaits{open(t)} })
}

// viaSQL is a driver whose transactions are database/sql transactions of
// the pgx stdlib driver, run through InExternalTx: the conformance suite on
// it checks every primitive on the *sql.Tx path (arrays in, nullable columns
// and times out through database/sql's conversions).
type viaSQL struct {
	*postgres.Driver
	db *sql.DB
}

func (v viaSQL) LockWaits(ctx context.Context) (int64, error) { return lockWaits(ctx, v.Driver) }

func (v viaSQL) OpenSameStore(t *testing.T) store.Driver {
	return openViaSQL(t, openSchema(t, v.Schema()))
}

// openViaSQL is d with transactions of a database/sql pool of its own,
// closed when t ends.
func openViaSQL(t *testing.T, d *postgres.Driver) viaSQL {
	t.Helper()
	db, err := sql.Open("pgx", testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	// database/sql keeps 2 idle connections by default: concurrent cases
	// would open a connection (and prepare every statement anew) per
	// transaction.
	db.SetMaxIdleConns(16)
	return viaSQL{d, db}
}

func (v viaSQL) InTx(ctx context.Context, fn func(context.Context, store.Executor) error) error {
	tx, err := v.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := v.InExternalTx(ctx, tx, fn); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

func TestConformanceDatabaseSQL(t *testing.T) {
	t.Parallel()
	testURL(t)
	storetest.Run(t, func(t *testing.T) store.Driver { return openViaSQL(t, open(t)) })
}

func task(id string, now time.Time) *dt.Task {
	return &dt.Task{ID: id, Workflow: "wf", Input: []byte(`{}`), InputHash: "h", ProcessState: dt.Pending, StepCount: 1,
		FailureThreshold: 3, OnFailure: dt.PolicyError, AvailableAt: now, CreatedAt: now, UpdatedAt: now}
}

func insert(t *testing.T, d store.Driver, tasks ...*dt.Task) {
	t.Helper()
	if err := d.InTx(context.Background(), func(ctx context.Context, x store.Executor) error {
		_, err := x.TaskInsertMany(ctx, &store.TaskInsertManyParams{Tasks: tasks})
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

func TestOpenOptions(t *testing.T) {
	t.Parallel()
	url := testURL(t)
	ctx := context.Background()
	for _, bad := range []string{"Drover", "1abc", "a-b", "a b", `x"y`, "public.x", string(make([]byte, 64))} {
		if d, err := postgres.Open(ctx, url, postgres.Options{Schema: bad}); err == nil {
			d.Close()
			t.Errorf("Open with schema %q succeeded", bad)
		}
	}
	d, err := postgres.Open(ctx, url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.Schema() != "drover" || d.Name() != "postgres" {
		t.Errorf("Schema %q Name %q; want drover, postgres", d.Schema(), d.Name())
	}
	if _, err := postgres.New(nil, postgres.Options{}); err == nil {
		t.Error("New(nil pool) succeeded")
	}
}

func TestOpenUnreachable(t *testing.T) {
	t.Parallel()
	testURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	d, err := postgres.Open(ctx, "postgres://postgres@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=5", postgres.Options{})
	if err == nil {
		d.Close()
		t.Fatal("Open of a closed port succeeded")
	}
	t.Logf("Open of a closed port: %v", err)
	if _, err := postgres.Open(ctx, "postgres://%zz", postgres.Options{}); err == nil {
		t.Error("Open of a malformed URL succeeded")
	}
}

func TestSchemaVersionAndNotMigrated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := openSchema(t, freshSchema(t))
	applied, latest, err := d.SchemaVersion(ctx)
	if err != nil || applied != 0 || latest < 1 {
		t.Fatalf("SchemaVersion of a missing schema = %d, %d, %v; want 0, >=1, nil", applied, latest, err)
	}
	if _, err := d.Reader().TaskGet(ctx, &store.TaskGetParams{ID: "x"}); !errors.Is(err, store.ErrNotMigrated) {
		t.Errorf("TaskGet before Migrate: err = %v, want ErrNotMigrated", err)
	}
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	applied, latest2, err := d.SchemaVersion(ctx)
	if err != nil || applied != latest || latest2 != latest {
		t.Fatalf("after Migrate: %d, %d, %v; want %d, %d", applied, latest2, err, latest, latest)
	}
	// A newer drover migrated it: refuse.
	if _, err := d.Pool().Exec(ctx, `INSERT INTO `+pgx.Identifier{d.Schema(), "drover_migrations"}.Sanitize()+
		` (version, name) VALUES (9999, '9999_future.sql')`); err != nil {
		t.Fatal(err)
	}
	if err := d.Migrate(ctx); !errors.Is(err, store.ErrSchemaTooNew) {
		t.Errorf("Migrate of a newer schema: err = %v, want ErrSchemaTooNew", err)
	}
}

// Processes starting together all migrate one fresh schema.
func TestConcurrentMigrate(t *testing.T) {
	t.Parallel()
	schema := freshSchema(t)
	var drivers []*postgres.Driver
	for range 4 {
		drivers = append(drivers, openSchema(t, schema))
	}
	var wg sync.WaitGroup
	errs := make([]error, len(drivers))
	for i, d := range drivers {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = d.Migrate(context.Background()) }()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("concurrent Migrate: %v", err)
	}
	for _, d := range drivers {
		applied, latest, err := d.SchemaVersion(context.Background())
		if err != nil || applied != latest {
			t.Errorf("SchemaVersion = %d, %d, %v", applied, latest, err)
		}
	}
	insert(t, drivers[0], task("t", time.Now()))
	if _, err := drivers[3].Reader().TaskGet(context.Background(), &store.TaskGetParams{ID: "t"}); err != nil {
		t.Error(err)
	}
}

// Two schemas of one database are two independent stores.
func TestSchemaIsolation(t *testing.T) {
	t.Parallel()
	a, b := open(t), open(t)
	ctx := context.Background()
	now := time.Now()
	ta := task("same", now)
	tb := task("same", now)
	tb.Workflow = "other"
	insert(t, a, ta, task("only-a", now))
	insert(t, b, tb)
	for _, d := range []*postgres.Driver{a, b} {
		if err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
			return x.EventInsertMany(ctx, &store.EventInsertManyParams{Events: []*dt.Event{{TaskID: "same", StepIndex: -1, Type: dt.EventSubmitted, Actor: d.Schema(), CreatedAt: now}}})
		}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := b.Reader().TaskGet(ctx, &store.TaskGetParams{ID: "same"})
	if err != nil || got.Workflow != "other" {
		t.Errorf("schema b task = %+v, %v; want its own", got, err)
	}
	if _, err := b.Reader().TaskGet(ctx, &store.TaskGetParams{ID: "only-a"}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("schema b sees schema a's task: %v", err)
	}
	counts, err := a.Reader().TaskCountByState(ctx, &store.TaskCountByStateParams{})
	if err != nil || counts[dt.Pending] != 2 {
		t.Errorf("schema a counts %v, %v; want 2 Pending", counts, err)
	}
	for _, d := range []*postgres.Driver{a, b} {
		evs, err := d.Reader().EventList(ctx, &store.EventListParams{})
		if err != nil || len(evs) != 1 || evs[0].Actor != d.Schema() {
			t.Errorf("events of %s: %v, %v", d.Schema(), evs, err)
		}
	}
	// Claiming in one schema leaves the other alone.
	if err := a.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		got, err := x.TaskClaim(ctx, &store.TaskClaimParams{Instance: "s", Now: now, Limit: 10})
		if len(got) != 2 {
			t.Errorf("claimed %d in a, want 2", len(got))
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if got, _ := b.Reader().TaskGet(ctx, &store.TaskGetParams{ID: "same"}); got.LockedBy != "" {
		t.Errorf("claim in schema a locked schema b's task")
	}
}

// extApp is an application table next to drover's, written in the same
// transaction as a submit.
func extApp(t *testing.T, d *postgres.Driver) string {
	t.Helper()
	table := pgx.Identifier{d.Schema(), "app_orders"}.Sanitize()
	if _, err := d.Pool().Exec(context.Background(), `CREATE TABLE `+table+` (id text PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	return table
}

func submitIn(ctx context.Context, d *postgres.Driver, tx any, id string) error {
	return d.InExternalTx(ctx, tx, func(ctx context.Context, x store.Executor) error {
		now := time.Now()
		_, err := flow.Submit(ctx, x, []flow.Submission{{Task: task(id, now), Steps: []*dt.StepRecord{{TaskID: id, Name: "s", Agent: "a",
			Timeout: time.Second, ProcessState: dt.Pending, IdempotencyKey: flow.IdempotencyKey(id, 0, "s"), UpdatedAt: now}}}})
		return err
	})
}

// checkExternal verifies that the app row and the task both exist, or both not.
func checkExternal(t *testing.T, d *postgres.Driver, table, id string, want bool) {
	t.Helper()
	ctx := context.Background()
	var n int
	if err := d.Pool().QueryRow(ctx, `SELECT count(*) FROM `+table+` WHERE id = $1`, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	_, err := d.Reader().TaskGet(ctx, &store.TaskGetParams{ID: id})
	steps, serr := d.Reader().StepListByTasks(ctx, &store.StepListByTasksParams{TaskIDs: []string{id}})
	evs, eerr := d.Reader().EventList(ctx, &store.EventListParams{TaskID: id})
	if serr != nil || eerr != nil {
		t.Fatal(serr, eerr)
	}
	if want && (n != 1 || err != nil || len(steps) != 1 || len(evs) != 1) {
		t.Errorf("%s committed: app rows %d, task err %v, %d steps, %d events; want all there", id, n, err, len(steps), len(evs))
	}
	if !want && (n != 0 || !errors.Is(err, store.ErrNotFound) || len(steps) != 0 || len(evs) != 0) {
		t.Errorf("%s rolled back: app rows %d, task err %v, %d steps, %d events; want none", id, n, err, len(steps), len(evs))
	}
}

func TestInExternalTxPgx(t *testing.T) {
	t.Parallel()
	d := openFresh(t)
	table := extApp(t, d)
	ctx := context.Background()
	// The caller's own pool, with the default search_path.
	pool, err := pgxpool.New(ctx, testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for _, commit := range []bool{true, false} {
		id := fmt.Sprintf("pgx-%v", commit)
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+table+` (id) VALUES ($1)`, id); err != nil {
			t.Fatal(err)
		}
		if err := submitIn(ctx, d, tx, id); err != nil {
			tx.Rollback(ctx)
			t.Fatal(err)
		}
		var sp string
		if err := tx.QueryRow(ctx, `SHOW search_path`).Scan(&sp); err != nil || sp != `"$user", public` {
			t.Errorf("the caller's search_path became %q (%v)", sp, err)
		}
		if commit {
			err = tx.Commit(ctx)
		} else {
			err = tx.Rollback(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		checkExternal(t, d, table, id, commit)
	}
}

func TestInExternalTxDatabaseSQL(t *testing.T) {
	t.Parallel()
	d := openFresh(t)
	table := extApp(t, d)
	ctx := context.Background()
	db, err := sql.Open("pgx", testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, commit := range []bool{true, false} {
		id := fmt.Sprintf("sql-%v", commit)
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO `+table+` (id) VALUES ($1)`, id); err != nil {
			t.Fatal(err)
		}
		if err := submitIn(ctx, d, tx, id); err != nil {
			tx.Rollback()
			t.Fatal(err)
		}
		// Reads through the caller's transaction see its own writes.
		if err := d.InExternalTx(ctx, tx, func(ctx context.Context, x store.Executor) error {
			got, err := x.TaskGet(ctx, &store.TaskGetParams{ID: id})
			if err == nil && (got.ID != id || got.CreatedAt.Location() != time.UTC) {
				t.Errorf("TaskGet through *sql.Tx = %+v", got)
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if commit {
			err = tx.Commit()
		} else {
			err = tx.Rollback()
		}
		if err != nil {
			t.Fatal(err)
		}
		checkExternal(t, d, table, id, commit)
	}
}

func TestInExternalTxWrongType(t *testing.T) {
	t.Parallel()
	d := open(t)
	called := false
	fn := func(context.Context, store.Executor) error { called = true; return nil }
	var (
		nilSQL  *sql.Tx
		nilPool *pgxpool.Tx
		nilPgx  pgx.Tx
	)
	for _, tx := range []any{nil, "tx", d.Pool(), nilSQL, nilPool, nilPgx, &struct{}{}} {
		err := d.InExternalTx(context.Background(), tx, fn)
		if !errors.Is(err, store.ErrUnsupportedTx) {
			t.Errorf("InExternalTx(%T): err = %v, want ErrUnsupportedTx", tx, err)
		}
	}
	if called {
		t.Error("the callback ran with an unsupported transaction")
	}
}

func TestReaderRefusesWrites(t *testing.T) {
	t.Parallel()
	d := open(t)
	ctx := context.Background()
	if _, err := d.Reader().TaskInsertMany(ctx, &store.TaskInsertManyParams{Tasks: []*dt.Task{task("t", time.Now())}}); err == nil {
		t.Error("TaskInsertMany on the Reader succeeded")
	}
	if _, err := d.Reader().TaskClaim(ctx, &store.TaskClaimParams{Instance: "s", Now: time.Now(), Limit: 1}); err == nil {
		t.Error("TaskClaim on the Reader succeeded")
	}
	if _, err := d.Reader().TaskGet(ctx, &store.TaskGetParams{ID: "t"}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the refused insert wrote: %v", err)
	}
}

// The locking rule: inside InTx the engine's reads lock what they return
// until the transaction ends; the same reads on the Reader lock nothing.
func TestReadsInTxLockRows(t *testing.T) {
	t.Parallel()
	d := open(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	held := task("held", now)
	held.ProcessState, held.LockedBy, held.CompleteBy = dt.Processing, "s", &now
	insert(t, d, held)
	if err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		if err := x.StepInsertMany(ctx, &store.StepInsertManyParams{Steps: []*dt.StepRecord{{TaskID: "held", Name: "s", Agent: "a", ProcessState: dt.Processing,
			IdempotencyKey: "k", UpdatedAt: now}}}); err != nil {
			return err
		}
		_, _, err := x.LeaseAcquire(ctx, &store.LeaseAcquireParams{Name: "sup", Holder: "A", Now: now, TTL: time.Minute})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	reads := map[string]func(ctx context.Context, x store.Executor) error{
		"TaskGet": func(ctx context.Context, x store.Executor) error {
			_, err := x.TaskGet(ctx, &store.TaskGetParams{ID: "held"})
			return err
		},
		"TaskGetMany": func(ctx context.Context, x store.Executor) error {
			_, err := x.TaskGetMany(ctx, &store.TaskGetManyParams{IDs: []string{"held"}})
			return err
		},
		"TaskListExpired": func(ctx context.Context, x store.Executor) error {
			got, err := x.TaskListExpired(ctx, &store.TaskListExpiredParams{Now: now.Add(time.Second), Limit: 10})
			if err == nil && len(got) != 1 {
				err = fmt.Errorf("TaskListExpired = %d tasks, want 1", len(got))
			}
			return err
		},
		"StepListByTasks": func(ctx context.Context, x store.Executor) error {
			_, err := x.StepListByTasks(ctx, &store.StepListByTasksParams{TaskIDs: []string{"held"}})
			return err
		},
		"LeaseGet": func(ctx context.Context, x store.Executor) error {
			_, err := x.LeaseGet(ctx, &store.LeaseGetParams{Name: "sup"})
			return err
		},
		"TaskGetManyWithSteps": func(ctx context.Context, x store.Executor) error {
			tasks, steps, err := x.TaskGetManyWithSteps(ctx, &store.TaskGetManyWithStepsParams{IDs: []string{"held"}})
			if err == nil && (len(tasks) != 1 || len(steps) != 1) {
				err = fmt.Errorf("TaskGetManyWithSteps = %d tasks, %d steps; want 1, 1", len(tasks), len(steps))
			}
			return err
		},
	}
	for name, read := range reads {
		t.Run(name, func(t *testing.T) {
			release := testutil.HoldTx(t, d, read)
			// The Reader is not blocked.
			if err := read(ctx, d.Reader()); err != nil {
				t.Errorf("%s on the Reader while locked: %v", name, err)
			}
			// A second transaction waits for the lock.
			wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			err := d.InTx(wctx, read)
			cancel()
			if err == nil {
				t.Errorf("%s in a second transaction did not wait for the first one's lock", name)
			}
			if err := release(); err != nil {
				t.Fatal(err)
			}
			// Once released, it goes through.
			if err := d.InTx(ctx, read); err != nil {
				t.Errorf("%s after release: %v", name, err)
			}
		})
	}
	// TaskListExpired with Peek locks nothing, in a transaction too: it
	// neither waits for a lock nor holds one.
	peek := func(ctx context.Context, x store.Executor) error {
		got, err := x.TaskListExpired(ctx, &store.TaskListExpiredParams{Now: now.Add(time.Second), Limit: 10, Peek: true})
		if err == nil && len(got) != 1 {
			err = fmt.Errorf("TaskListExpired with Peek = %d tasks, want 1", len(got))
		}
		return err
	}
	release := testutil.HoldTx(t, d, reads["TaskListExpired"])
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	if err := d.InTx(wctx, peek); err != nil {
		t.Errorf("TaskListExpired with Peek in a transaction while the task is locked: %v", err)
	}
	cancel()
	if err := release(); err != nil {
		t.Fatal(err)
	}
	release = testutil.HoldTx(t, d, peek)
	wctx, cancel = context.WithTimeout(ctx, 5*time.Second)
	if err := d.InTx(wctx, reads["TaskListExpired"]); err != nil {
		t.Errorf("TaskListExpired in a transaction while another peeks: %v", err)
	}
	cancel()
	if err := release(); err != nil {
		t.Fatal(err)
	}
}

// LeaseCheck fences a transaction against a takeover of the lease without
// making the holder's own transactions queue behind one another: checks
// share the lease, writers of the lease wait for every check, and a check
// waiting for a writer sees what the writer committed.
func TestLeaseCheckSharedWithChecksExclusiveWithWriters(t *testing.T) {
	t.Parallel()
	d := open(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	acquire := func(ctx context.Context, x store.Executor, holder string, at time.Time) error {
		_, ok, err := x.LeaseAcquire(ctx, &store.LeaseAcquireParams{Name: "inst", Holder: holder, Now: at, TTL: time.Minute})
		if err == nil && !ok {
			err = fmt.Errorf("%s did not get the lease", holder)
		}
		return err
	}
	check := func(ctx context.Context, x store.Executor) error {
		if err := x.LeaseCheck(ctx, &store.LeaseCheckParams{Name: "inst", Holder: "A", Now: now}); err != nil {
			return err
		}
		_, err := x.TaskCountActive(ctx, &store.TaskCountActiveParams{}) // sends the queued check
		return err
	}
	if err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error { return acquire(ctx, x, "A", now) }); err != nil {
		t.Fatal(err)
	}
	waits := func(what string, fn func(context.Context, store.Executor) error) {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		if err := d.InTx(wctx, fn); err == nil {
			t.Errorf("%s did not wait for the open check", what)
		}
	}

	release := testutil.HoldTx(t, d, check)
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	if err := d.InTx(sctx, check); err != nil {
		t.Errorf("a second check while the first is open: %v", err)
	}
	cancel()
	waits("a takeover", func(ctx context.Context, x store.Executor) error { return acquire(ctx, x, "B", now.Add(time.Hour)) })
	waits("a release", func(ctx context.Context, x store.Executor) error {
		return x.LeaseRelease(ctx, &store.LeaseReleaseParams{Name: "inst", Holder: "A", Term: 1})
	})
	waits("a renewal", func(ctx context.Context, x store.Executor) error { return acquire(ctx, x, "A", now) })
	if err := release(); err != nil {
		t.Fatal(err)
	}

	// A check that waits for a takeover sees it once it commits.
	release = testutil.HoldTx(t, d, func(ctx context.Context, x store.Executor) error { return acquire(ctx, x, "B", now.Add(time.Hour)) })
	checked := make(chan error, 1)
	go func() { checked <- d.InTx(ctx, check) }()
	select {
	case err := <-checked:
		t.Fatalf("a check did not wait for an open takeover: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := release(); err != nil {
		t.Fatal(err)
	}
	if err := <-checked; !errors.Is(err, store.ErrLeaseNotHeld) {
		t.Errorf("check after B took the lease over = %v, want ErrLeaseNotHeld", err)
	}
}

// A scheduler's read of the tasks it holds does not wait for one that
// another transaction has locked (such as a claim elsewhere that touched
// it by chance): TaskGetAndClaim leaves it out, with its steps, and
// reports it busy; a task that does not exist is not busy.
func TestTaskGetAndClaimSkipsLockedTasks(t *testing.T) {
	t.Parallel()
	d := open(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	var tasks []*dt.Task
	for _, id := range []string{"free", "locked"} {
		tk := task(id, now)
		tk.ProcessState, tk.LockedBy, tk.CompleteBy = dt.Processing, "s", &now
		tasks = append(tasks, tk)
	}
	insert(t, d, append(tasks, task("pending", now))...)
	if err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		return x.StepInsertMany(ctx, &store.StepInsertManyParams{Steps: []*dt.StepRecord{
			{TaskID: "free", Name: "s", Agent: "a", ProcessState: dt.Processing, IdempotencyKey: "k1", UpdatedAt: now},
			{TaskID: "locked", Name: "s", Agent: "a", ProcessState: dt.Processing, IdempotencyKey: "k2", UpdatedAt: now},
			{TaskID: "pending", Name: "s", Agent: "a", ProcessState: dt.Pending, IdempotencyKey: "k3", UpdatedAt: now},
		}})
	}); err != nil {
		t.Fatal(err)
	}
	testutil.HoldTx(t, d, func(ctx context.Context, x store.Executor) error {
		_, err := x.TaskGet(ctx, &store.TaskGetParams{ID: "locked"})
		return err
	})
	for _, limit := range []int{0, 10} {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := d.InTx(wctx, func(ctx context.Context, x store.Executor) error {
			r, err := store.TaskGetAndClaim(ctx, x, &store.TaskGetAndClaimParams{IDs: []string{"free", "locked", "missing"}, Claim: store.TaskClaimParams{Instance: "s", Now: now, Limit: limit, WriteLater: true}})
			if err != nil {
				return err
			}
			if ids := taskIDs(r.Got); !slices.Equal(ids, []string{"free"}) {
				t.Errorf("limit %d: got %v, want [free]", limit, ids)
			}
			if !slices.Equal(r.Busy, []string{"locked"}) {
				t.Errorf("limit %d: busy %v, want [locked]", limit, r.Busy)
			}
			var stepsOf []string
			for _, s := range r.Steps {
				stepsOf = append(stepsOf, s.TaskID)
			}
			want := []string{"free"}
			if limit > 0 {
				want = append(want, "pending")
				if ids := taskIDs(r.Claimed); !slices.Equal(ids, []string{"pending"}) {
					t.Errorf("limit %d: claimed %v, want [pending]", limit, ids)
				}
			}
			if !slices.Equal(stepsOf, want) {
				t.Errorf("limit %d: steps of %v, want %v", limit, stepsOf, want)
			}
			return errors.New("roll back")
		})
		cancel()
		if err == nil || err.Error() != "roll back" {
			t.Fatalf("limit %d: %v", limit, err)
		}
	}
}

// A held task another transaction has locked (here the supervisor's
// recovery, which locks it and its steps and makes it claimable) is
// reported busy at once: the read neither waits for the task nor for its
// steps, and its claim skips the locked task. Once the recovery commits,
// a claim takes the task with its steps (without them it would be advanced
// as if it had none left).
func TestTaskGetAndClaimSkipsLockedTaskAndClaimsItWithSteps(t *testing.T) {
	t.Parallel()
	d := open(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	tk := task("t", now)
	tk.ProcessState, tk.LockedBy, tk.CompleteBy = dt.Processing, "s", &now
	insert(t, d, tk)
	if err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		return x.StepInsertMany(ctx, &store.StepInsertManyParams{Steps: []*dt.StepRecord{{TaskID: "t", Name: "s", Agent: "a", ProcessState: dt.Processing, IdempotencyKey: "k", UpdatedAt: now}}})
	}); err != nil {
		t.Fatal(err)
	}
	// The recovery: lock the task and its steps, make the task claimable.
	release := testutil.HoldTx(t, d, func(ctx context.Context, x store.Executor) error {
		got, err := x.TaskGet(ctx, &store.TaskGetParams{ID: "t"})
		if err != nil {
			return err
		}
		if _, err := x.StepListByTasks(ctx, &store.StepListByTasksParams{TaskIDs: []string{"t"}}); err != nil {
			return err
		}
		got.ProcessState, got.LockedBy, got.CompleteBy = dt.Pending, "", nil
		return x.TaskUpdateMany(ctx, &store.TaskUpdateManyParams{Tasks: []*dt.Task{got}})
	})
	read := func(ids []string) store.GetAndClaim {
		t.Helper()
		var r store.GetAndClaim
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		err := d.InTx(rctx, func(ctx context.Context, x store.Executor) error {
			var err error
			r, err = store.TaskGetAndClaim(ctx, x, &store.TaskGetAndClaimParams{IDs: ids, Claim: store.TaskClaimParams{Instance: "s", Now: now.Add(time.Second), Limit: 10, WriteLater: true}})
			if err != nil {
				return err
			}
			return errors.New("roll back")
		})
		if err == nil || err.Error() != "roll back" {
			t.Fatalf("TaskGetAndClaim while the recovery holds t: %v (it must not wait for the recovery's locks)", err)
		}
		return r
	}
	r := read([]string{"t"})
	if !slices.Equal(r.Busy, []string{"t"}) || len(r.Got) != 0 || len(r.Claimed) != 0 || len(r.Steps) != 0 {
		t.Fatalf("busy %v, got %v, claimed %v, steps %v; want only t busy", r.Busy, taskIDs(r.Got), taskIDs(r.Claimed), r.Steps)
	}
	if err := release(); err != nil {
		t.Fatal(err)
	}
	r = read(nil)
	if len(r.Busy) != 0 || !slices.Equal(taskIDs(r.Claimed), []string{"t"}) {
		t.Fatalf("busy %v, claimed %v; want t claimed", r.Busy, taskIDs(r.Claimed))
	}
	if len(r.Steps) != 1 || r.Steps[0].TaskID != "t" {
		t.Errorf("steps %v, want the claimed task's one step", r.Steps)
	}
}

func taskIDs(ts []*dt.Task) []string {
	var ids []string
	for _, t := range ts {
		ids = append(ids, t.ID)
	}
	return ids
}

// New wraps the caller's pool and leaves it open on Close.
func TestNewKeepsCallerPool(t *testing.T) {
	t.Parallel()
	schema := freshSchema(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	d, err := postgres.New(pool, postgres.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	insert(t, d, task("t", time.Now()))
	d.Close()
	if err := pool.Ping(ctx); err != nil {
		t.Errorf("the caller's pool was closed by Driver.Close: %v", err)
	}
}

// BenchmarkClaimApplyCycle measures the scheduler's hot loop on PostgreSQL, as
// the SQLite perf harness does: 20k single-step tasks, then transactions that
// each apply the replies to the previous batch and claim the next 256. It
// reports tasks/s (one claim and one reply applied per task). procs=1 is one
// scheduler; procs=4 is four drivers (four pools, as four processes would
// have) sharing the schema, each with its own scheduler instance.
//
//	DROVER_TEST_DATABASE_URL=... go test -run '^$' -bench ClaimApplyCycle -benchtime 3x ./store/postgres/
func BenchmarkClaimApplyCycle(b *testing.B) {
	if os.Getenv(testutil.PostgresURLEnv) == "" {
		b.Skipf("%s is not set", testutil.PostgresURLEnv)
	}
	for _, procs := range []int{1, 4} {
		b.Run(fmt.Sprintf("procs=%d", procs), func(b *testing.B) { benchCycle(b, procs) })
	}
}

func benchCycle(b *testing.B, procs int) {
	const (
		n     = 20000
		batch = 256
	)
	ctx := context.Background()
	var total time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		d := open(b)
		drivers := []*postgres.Driver{d}
		for len(drivers) < procs {
			drivers = append(drivers, openSchema(b, d.Schema()))
		}
		now := time.Now()
		for first := 0; first < n; first += 1000 {
			var subs []flow.Submission
			for j := first; j < min(n, first+1000); j++ {
				id := fmt.Sprintf("b%06d", j)
				tk := task(id, now)
				tk.Input = []byte(fmt.Sprintf(`{"i":%d}`, j))
				subs = append(subs, flow.Submission{Task: tk, Steps: []*dt.StepRecord{{TaskID: id, Name: "a", Agent: "noop",
					Timeout: time.Minute, ProcessState: dt.Pending, IdempotencyKey: flow.IdempotencyKey(id, 0, "a"), UpdatedAt: now}}})
			}
			if err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
				_, err := flow.Submit(ctx, x, subs)
				return err
			}); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		start := time.Now()
		var wg sync.WaitGroup
		errs := make([]error, procs)
		for p, d := range drivers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[p] = cycleUntilDone(ctx, d, &flow.Machine{Instance: fmt.Sprintf("s%d", p)}, batch)
			}()
		}
		wg.Wait()
		total += time.Since(start)
		b.StopTimer()
		if err := errors.Join(errs...); err != nil {
			b.Fatal(err)
		}
		counts, err := d.Reader().TaskCountByState(ctx, &store.TaskCountByStateParams{})
		if err != nil || counts[dt.Processed] != n {
			b.Fatalf("after the run: %v, %v; want %d Processed", counts, err, n)
		}
		for _, d := range drivers {
			d.Close()
		}
		b.StartTimer()
	}
	rate := float64(n*b.N) / total.Seconds()
	b.ReportMetric(rate, "tasks/s")
	b.Logf("procs=%d: %d tasks in %s: %.0f tasks/s", procs, n*b.N, total, rate)
}

// cycleUntilDone runs apply-then-claim transactions until nothing is left
// to claim and every reply is applied.
func cycleUntilDone(ctx context.Context, d *postgres.Driver, m *flow.Machine, batch int) error {
	var pending []*dt.AgentRequest
	for {
		var next []*dt.AgentRequest
		err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
			replies := make([]*dt.AgentReply, len(pending))
			for k, r := range pending {
				replies[k] = &dt.AgentReply{TaskID: r.TaskID, StepIndex: r.StepIndex, Attempt: r.Attempt, Kind: r.Kind, Output: []byte("null")}
			}
			if _, _, err := m.ApplyReplies(ctx, x, time.Now(), replies); err != nil {
				return err
			}
			var err error
			next, _, _, err = m.Claim(ctx, x, time.Now(), batch)
			return err
		})
		if err != nil {
			return err
		}
		if len(pending) == 0 && len(next) == 0 {
			return nil
		}
		pending = next
	}
}

// Notifications reach a listener when the transaction commits, never when it
// rolls back; the listener says when it listens and when it stops (a lost
// connection), and listens again.
func TestListenNotify(t *testing.T) {
	t.Parallel()
	d := open(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan string, 16)
	done := make(chan struct{})
	go func() { defer close(done); _ = d.Listen(ctx, func(topic string) { got <- topic }) }()
	defer func() { cancel(); <-done }()

	select {
	case topic := <-got:
		if topic != store.TopicListening {
			t.Fatalf("first topic %q, want TopicListening", topic)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the listener did not say it listens")
	}
	// The listener may not be LISTENing yet: notify until one arrives.
	deadline := time.After(10 * time.Second)
	for ready := false; !ready; {
		if err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
			return store.Notify(ctx, x, &store.NotifyParams{Topic: "ping"})
		}); err != nil {
			t.Fatal(err)
		}
		select {
		case topic := <-got:
			ready = topic == "ping"
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatal("no notification reached the listener")
		}
	}
	for len(got) > 0 {
		<-got
	}
	rollback := errors.New("rollback")
	if err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		if err := store.Notify(ctx, x, &store.NotifyParams{Topic: "rolled-back"}); err != nil {
			return err
		}
		return rollback
	}); !errors.Is(err, rollback) {
		t.Fatal(err)
	}
	if err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		return store.Notify(ctx, x, &store.NotifyParams{Topic: store.TopicTasks})
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case topic := <-got:
		if topic != store.TopicTasks {
			t.Errorf("got %q, want %q (a rolled-back notify must not arrive)", topic, store.TopicTasks)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("committed notification did not arrive")
	}
	if err := store.Notify(ctx, d.Reader(), &store.NotifyParams{Topic: "x"}); err == nil {
		t.Error("Notify outside a transaction succeeded")
	}

	// The listening connection dies: the listener says it stopped, then
	// listens again.
	conn, err := pgx.Connect(ctx, testutil.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var killed int
	if err := conn.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE query = $1`,
		"LISTEN "+pgx.Identifier{postgres.Channel(d)}.Sanitize()).Scan(&killed); err != nil || killed != 1 {
		t.Fatalf("terminate the listening connection: %d terminated, %v", killed, err)
	}
	for _, want := range []string{store.TopicNotListening, store.TopicListening} {
		select {
		case topic := <-got:
			if topic != want {
				t.Fatalf("after the connection died: %q, want %q", topic, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("after the connection died: no %q", want)
		}
	}
}
