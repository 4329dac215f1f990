package sqlite_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/store"
	"github.com/drover-run/drover/store/sqlite"
	"github.com/drover-run/drover/store/storetest"
)

func openStore(t *testing.T, path string, opts sqlite.Options) *sqlite.Driver {
	t.Helper()
	d, err := sqlite.Open(context.Background(), path, opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func freshStore(t *testing.T) (*sqlite.Driver, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "drover.db")
	d := openStore(t, path, sqlite.Options{Create: true})
	if err := d.Migrate(context.Background()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return d, path
}

// withWaits is a driver whose write-lock waits the conformance suite can see
// (storetest.LockWaits): drover's transactions queue for the single write
// connection, so the pool's running total of waits is the count.
type withWaits struct{ *sqlite.Driver }

func (w withWaits) LockWaits(context.Context) (int64, error) { return w.DB().Stats().WaitCount, nil }

// OpenSameStore opens another driver on the file, as a second process
// would (storetest.SameStore).
func (w withWaits) OpenSameStore(t *testing.T) store.Driver {
	return withWaits{openStore(t, w.Path(), sqlite.Options{})}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) store.Driver {
		d, _ := freshStore(t)
		return withWaits{d}
	})
}

func TestOpenMissingFileWithoutCreate(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "missing.db")
	d, err := sqlite.Open(context.Background(), path, sqlite.Options{})
	if err == nil {
		d.Close()
		t.Fatal("Open without Create on a missing file succeeded")
	}
	if _, serr := os.Stat(path); !errors.Is(serr, os.ErrNotExist) {
		t.Errorf("Open without Create created %s (stat: %v)", path, serr)
	}
	// Nor in a missing directory with Create.
	if d, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "no", "such", "dir.db"), sqlite.Options{Create: true}); err == nil {
		d.Close()
		t.Error("Open with Create in a missing directory succeeded")
	}
}

func TestOpenCorruptFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "corrupt.db")
	junk := make([]byte, 8192)
	if _, err := rand.Read(junk); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, junk, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, create := range []bool{false, true} {
		d, err := sqlite.Open(context.Background(), path, sqlite.Options{Create: create})
		if err == nil {
			d.Close()
			t.Fatalf("Open(Create=%v) of random bytes succeeded", create)
		}
		if !errors.Is(err, store.ErrCorrupt) {
			t.Errorf("Open(Create=%v) of random bytes: err = %v, want errors.Is(err, store.ErrCorrupt)", create, err)
		}
	}
}

func TestOpenBadOptions(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "x.db")
	if d, err := sqlite.Open(context.Background(), path, sqlite.Options{Create: true, Synchronous: "sometimes"}); err == nil {
		d.Close()
		t.Error("Open with Synchronous=sometimes succeeded")
	}
	if d, err := sqlite.Open(context.Background(), "", sqlite.Options{Create: true}); err == nil {
		d.Close()
		t.Error("Open with an empty path succeeded")
	}
}

func TestSchemaVersionBeforeMigrate(t *testing.T) {
	t.Parallel()
	d := openStore(t, filepath.Join(t.TempDir(), "new.db"), sqlite.Options{Create: true})
	applied, latest, err := d.SchemaVersion(context.Background())
	if err != nil || applied != 0 || latest < 1 {
		t.Fatalf("SchemaVersion of an empty file = %d, %d, %v; want 0, >=1, nil", applied, latest, err)
	}
	if err := d.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	applied, latest2, err := d.SchemaVersion(context.Background())
	if err != nil || applied != latest || latest2 != latest {
		t.Fatalf("after Migrate: %d, %d, %v; want %d, %d", applied, latest2, err, latest, latest)
	}
	if d.Name() != "sqlite" {
		t.Errorf("Name = %q", d.Name())
	}
}

func TestInExternalTxWrongType(t *testing.T) {
	t.Parallel()
	d, _ := freshStore(t)
	called := false
	fn := func(context.Context, store.Executor) error { called = true; return nil }
	var nilTx *sql.Tx
	for _, tx := range []any{nil, "tx", d.DB(), nilTx, &struct{}{}} {
		err := d.InExternalTx(context.Background(), tx, fn)
		if !errors.Is(err, store.ErrUnsupportedTx) {
			t.Errorf("InExternalTx(%T): err = %v, want ErrUnsupportedTx", tx, err)
		}
	}
	if called {
		t.Error("the callback ran with an unsupported transaction")
	}
}

func TestInExternalTxCommitAndRollback(t *testing.T) {
	t.Parallel()
	d, _ := freshStore(t)
	ctx := context.Background()
	for _, commit := range []bool{true, false} {
		id := fmt.Sprintf("ext-%v", commit)
		tx, err := d.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		err = d.InExternalTx(ctx, tx, func(ctx context.Context, x store.Executor) error {
			_, err := x.TaskInsertMany(ctx, &store.TaskInsertManyParams{Tasks: []*dt.Task{task(id, time.Now())}})
			return err
		})
		if err != nil {
			tx.Rollback()
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
		_, err = d.Reader().TaskGet(ctx, &store.TaskGetParams{ID: id})
		if commit && err != nil {
			t.Errorf("committed external tx: %v", err)
		}
		if !commit && !errors.Is(err, store.ErrNotFound) {
			t.Errorf("rolled back external tx: err = %v, want ErrNotFound", err)
		}
	}
}

func task(id string, now time.Time) *dt.Task {
	return &dt.Task{ID: id, Workflow: "wf", Input: []byte(`{}`), InputHash: "h", ProcessState: dt.Pending, StepCount: 1,
		FailureThreshold: 3, OnFailure: dt.PolicyError, AvailableAt: now, CreatedAt: now, UpdatedAt: now}
}

func TestLockedStore(t *testing.T) {
	t.Parallel()
	_, path := freshStore(t)
	d := openStore(t, path, sqlite.Options{BusyTimeout: 100 * time.Millisecond})
	ctx := context.Background()

	// Another process holds the write lock.
	other, err := sql.Open(sqlite.DriverName, path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	conn, err := other.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN EXCLUSIVE"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		_, err := x.TaskInsertMany(ctx, &store.TaskInsertManyParams{Tasks: []*dt.Task{task("t", time.Now())}})
		return err
	})
	if !errors.Is(err, store.ErrLocked) {
		t.Fatalf("InTx while another connection holds BEGIN EXCLUSIVE: err = %v, want ErrLocked", err)
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Errorf("waited %s for a 100ms busy timeout", waited)
	}
	if err := d.Migrate(ctx); err != nil && !errors.Is(err, store.ErrLocked) {
		t.Errorf("Migrate while locked: err = %v, want nil or ErrLocked", err)
	}
	// Readers are not blocked (WAL).
	if _, err := d.Reader().TaskCountByState(ctx, &store.TaskCountByStateParams{}); err != nil {
		t.Errorf("read while locked: %v", err)
	}
	if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	// Once released, writes go through.
	if err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		_, err := x.TaskInsertMany(ctx, &store.TaskInsertManyParams{Tasks: []*dt.Task{task("t", time.Now())}})
		return err
	}); err != nil {
		t.Fatalf("InTx after the lock was released: %v", err)
	}
}

// File names with URI-special characters open the file they name.
func TestOpenPathWithSpecialCharacters(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "my dir#1")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "drover?v=1&x=%20.db")
	d := openStore(t, path, sqlite.Options{Create: true})
	if err := d.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := d.InTx(context.Background(), func(ctx context.Context, x store.Executor) error {
		_, err := x.TaskInsertMany(ctx, &store.TaskInsertManyParams{Tasks: []*dt.Task{task("t", time.Now())}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the database is not at the path given: %v", err)
	}
	again := openStore(t, path, sqlite.Options{})
	if _, err := again.Reader().TaskGet(context.Background(), &store.TaskGetParams{ID: "t"}); err != nil {
		t.Errorf("reopened store: %v", err)
	}
}

// Two processes starting at once both migrate a fresh file.
func TestConcurrentMigrate(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "fresh.db")
	first := openStore(t, path, sqlite.Options{Create: true})
	var drivers []*sqlite.Driver
	for range 4 {
		drivers = append(drivers, openStore(t, path, sqlite.Options{}))
	}
	drivers = append(drivers, first)
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
}

// A context that ends before the commit makes InTx report it: database/sql
// may already have rolled the transaction back by then, and its "already
// committed or rolled back" says neither which nor why.
func TestInTxReportsTheContextThatEndedBeforeCommit(t *testing.T) {
	d, _ := freshStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	err := d.InTx(ctx, func(_ context.Context, x store.Executor) error {
		cancel()
		// Wait until database/sql has rolled the transaction back.
		for {
			_, err := x.TaskGet(context.Background(), &store.TaskGetParams{ID: "none"})
			// Done: the transaction, or (when the rollback lands between
			// the statement's lookup and its use) its prepared statement,
			// is closed; database/sql has no sentinel for the latter.
			if errors.Is(err, sql.ErrTxDone) || (err != nil && strings.Contains(err.Error(), "sql: statement is closed")) {
				return nil
			}
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				return err
			}
			time.Sleep(time.Millisecond)
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("InTx after its context ended: %v, want context.Canceled", err)
	}
}

// A driver's first transaction does not pay for preparing the hot
// statements inside the caller's context: they were all prepared there
// once, which took some 200ms on a fresh store and failed a caller with a
// short deadline ("sqlite: begin: context deadline exceeded"), such as a
// consumer waiting 300ms for a session.
func TestFirstTxFitsAShortDeadline(t *testing.T) {
	d, _ := freshStore(t)
	for i := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		start := time.Now()
		err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
			_, err := x.TaskGet(ctx, &store.TaskGetParams{ID: "none"})
			if errors.Is(err, store.ErrNotFound) {
				err = nil
			}
			return err
		})
		cancel()
		if err != nil {
			t.Fatalf("transaction %d with a 100ms deadline: %v (after %s)", i+1, err, time.Since(start))
		}
	}
}
