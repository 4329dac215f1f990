package sqlite_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/store"
	"github.com/drover-run/drover/store/sqlite"
)

// TxOf runs the application's statements in drover's transaction,
// committing and rolling back with it.
func TestTxOf(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "db"), sqlite.Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2031, 1, 2, 3, 4, 5, 0, time.UTC)
	run := func(fn func(ctx context.Context, x store.Executor) error) error {
		return d.InTx(ctx, fn)
	}
	if err := run(func(ctx context.Context, x store.Executor) error {
		tx, err := sqlite.TxOf(x)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `CREATE TABLE app_effects (n int)`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	count := func(q string) int {
		var n int
		if err := d.DB().QueryRowContext(ctx, q).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, fail := range []bool{true, false} {
		err := run(func(ctx context.Context, x store.Executor) error {
			if err := x.EventInsertMany(ctx, &store.EventInsertManyParams{Events: []*dt.Event{{TaskID: "a", StepIndex: -1, Type: dt.EventSubmitted, CreatedAt: now}}}); err != nil {
				return err
			}
			tx, err := sqlite.TxOf(x)
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO app_effects VALUES (1)`); err != nil {
				return err
			}
			if fail {
				return errors.New("handler failed")
			}
			return nil
		})
		if fail != (err != nil) {
			t.Fatalf("fail=%v: InTx error %v", fail, err)
		}
		want := 1
		if fail {
			want = 0
		}
		if got := count(`SELECT count(*) FROM app_effects`); got != want {
			t.Errorf("fail=%v: %d application rows, want %d", fail, got, want)
		}
		if got := count(`SELECT count(*) FROM events`); got != want {
			t.Errorf("fail=%v: %d events, want %d", fail, got, want)
		}
	}
	if _, err := sqlite.TxOf(d.Reader()); !errors.Is(err, store.ErrUnsupportedTx) {
		t.Errorf("TxOf(Reader) error %v, want ErrUnsupportedTx", err)
	}
}
