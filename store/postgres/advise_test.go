package postgres_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/drover-run/drover/store"
)

// Advise names what keeps autovacuum from the tasks table: the server's
// setting (as this server has it) and the table's own.
func TestAdviseNamesWhatKeepsAutovacuumAway(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := openFresh(t)
	var server string
	if err := d.Pool().QueryRow(ctx, "SHOW autovacuum").Scan(&server); err != nil {
		t.Fatal(err)
	}
	has := func(advice []string, part string) bool {
		return strings.Contains(strings.Join(advice, "\n"), part)
	}
	advice, err := store.Advise(ctx, d)
	if err != nil {
		t.Fatalf("Advise: %v", err)
	}
	if got, want := has(advice, "autovacuum is off"), server == "off"; got != want {
		t.Errorf("server autovacuum %s: advice %q, want it named: %v", server, advice, want)
	}
	if has(advice, "disabled on table") {
		t.Errorf("advice %q names the tasks table, whose autovacuum is on", advice)
	}

	tasks := pgx.Identifier{d.Schema(), "tasks"}.Sanitize()
	if _, err := d.Pool().Exec(ctx, "ALTER TABLE "+tasks+" SET (autovacuum_enabled = false)"); err != nil {
		t.Fatal(err)
	}
	advice, err = store.Advise(ctx, d)
	if err != nil {
		t.Fatalf("Advise: %v", err)
	}
	want := "autovacuum is disabled on table " + d.Schema() + ".tasks"
	if !has(advice, want) || !has(advice, "RESET (autovacuum_enabled)") {
		t.Errorf("tasks table's autovacuum disabled: advice %q, want %q and how to reset it", advice, want)
	}

	if _, err := d.Pool().Exec(ctx, "ALTER TABLE "+tasks+" RESET (autovacuum_enabled)"); err != nil {
		t.Fatal(err)
	}
	if advice, err = store.Advise(ctx, d); err != nil || has(advice, "disabled on table") {
		t.Errorf("after RESET: advice %q, err %v; want the table not named", advice, err)
	}
}
