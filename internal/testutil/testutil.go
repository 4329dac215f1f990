package testutil

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/drover-run/drover/store/sqlite"
)

// SQLite opens a fresh, migrated SQLite store in t's temporary directory and
// closes it when the test ends.
func SQLite(t testing.TB) *sqlite.Driver {
	t.Helper()
	ctx := context.Background()
	d, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "drover.db"), sqlite.Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return d
}
