package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/drover-run/drover/store"
)

// TestConnSettings reads back, through SQLite itself, the settings of both
// pools: whichever library the build links must set the same ones.
func TestConnSettings(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "drover.db")
	d, err := Open(ctx, path, Options{Create: true, BusyTimeout: 1234 * time.Millisecond, Synchronous: "normal"})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	check := func(pool string, db *sql.DB, want map[string]string) {
		t.Helper()
		for name, value := range want {
			var got string
			if err := db.QueryRowContext(ctx, "PRAGMA "+name).Scan(&got); err != nil {
				t.Fatalf("%s pool: PRAGMA %s: %v", pool, name, err)
			}
			if got != value {
				t.Errorf("%s pool: PRAGMA %s = %s, want %s", pool, name, got, value)
			}
		}
	}
	check("write", d.write, map[string]string{"journal_mode": "wal", "synchronous": "1", "busy_timeout": "1234",
		"cache_size": "-32000", "query_only": "0", "foreign_keys": "0"})
	check("read", d.read, map[string]string{"journal_mode": "wal", "busy_timeout": "1234", "query_only": "1", "foreign_keys": "0"})
	if _, err := d.read.ExecContext(ctx, "CREATE TABLE t (x)"); err == nil {
		t.Error("the read pool created a table")
	}

	full, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer full.Close()
	check("write (default)", full.write, map[string]string{"synchronous": "2", "busy_timeout": "10000"})

	// A transaction holds the write lock from its start (BEGIN IMMEDIATE),
	// before it writes anything.
	other := otherConn(t, path)
	err = d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		_, err := other.ExecContext(ctx, "BEGIN IMMEDIATE")
		if err == nil {
			_, _ = other.ExecContext(ctx, "ROLLBACK")
		}
		return err
	})
	if !errors.Is(err, store.ErrLocked) && !errors.Is(translate(err), store.ErrLocked) {
		t.Errorf("BEGIN IMMEDIATE beside an empty transaction of InTx: err = %v, want SQLITE_BUSY", err)
	}
}

// otherConn is a connection of another writer on path that does not wait
// for a lock.
func otherConn(t *testing.T, path string) *sql.Conn {
	t.Helper()
	db, err := sql.Open(DriverName, dsn(path, connConfig{write: true, synchronous: "FULL"}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	c, err := db.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestTranslate makes SQLite fail for real in each way translate tells
// apart and checks the sentinel each error maps to.
func TestTranslate(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := t.TempDir()
	path := filepath.Join(dir, "drover.db")
	d, err := Open(ctx, path, Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	junk := filepath.Join(dir, "junk.db")
	if err := os.WriteFile(junk, []byte("this is not a SQLite database, not at all; it is long enough to have a header"), 0o600); err != nil {
		t.Fatal(err)
	}
	junkDB, err := sql.Open(DriverName, dsn(junk, connConfig{busyTimeout: time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	defer junkDB.Close()
	holder := otherConn(t, path)

	sentinels := []error{store.ErrLocked, store.ErrCorrupt, store.ErrBadData, store.ErrNotMigrated}
	for _, c := range []struct {
		name string
		run  func() error
		want error // nil: none of the sentinels
	}{
		{"busy", func() error {
			if _, err := holder.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
				t.Fatal(err)
			}
			defer holder.ExecContext(ctx, "ROLLBACK") //nolint:errcheck // the error tested is the one below
			_, err := otherConn(t, path).ExecContext(ctx, "BEGIN IMMEDIATE")
			return err
		}, store.ErrLocked},
		{"not a database", func() error {
			_, err := junkDB.ExecContext(ctx, "SELECT count(*) FROM sqlite_master")
			return err
		}, store.ErrCorrupt},
		{"too big", func() error {
			_, err := d.write.ExecContext(ctx, "SELECT zeroblob(2000000000)")
			return err
		}, store.ErrBadData},
		{"no such table", func() error {
			_, err := d.write.ExecContext(ctx, "SELECT * FROM no_such_table")
			return err
		}, store.ErrNotMigrated},
		{"syntax", func() error {
			_, err := d.write.ExecContext(ctx, "SELEC 1")
			return err
		}, nil},
		{"not from SQLite", func() error { return context.Canceled }, nil},
	} {
		err := c.run()
		if err == nil {
			t.Errorf("%s: no error", c.name)
			continue
		}
		got := translate(err)
		if !errors.Is(got, err) {
			t.Errorf("%s: translate(%v) = %v lost the original", c.name, err, got)
		}
		for _, s := range sentinels {
			if errors.Is(got, s) != (s == c.want) {
				t.Errorf("%s: translate(%v) = %v; errors.Is(%v) = %t", c.name, err, got, s, errors.Is(got, s))
			}
		}
	}
}
