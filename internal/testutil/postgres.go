package testutil

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/drover-run/drover/store/postgres"
)

// The PostgreSQL tests need a server: DROVER_TEST_DATABASE_URL, for example
// postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable. Without it they
// fail, unless DROVER_TEST_POSTGRES=skip says to skip them (for a quick local
// go test; scripts/test, the suite's command in CI, refuses to run with it).
const (
	PostgresURLEnv  = "DROVER_TEST_DATABASE_URL"
	PostgresSkipEnv = "DROVER_TEST_POSTGRES"
)

// PostgresURL returns the test server's URL. Without one it fails the test,
// or skips it when DROVER_TEST_POSTGRES=skip.
func PostgresURL(t testing.TB) string {
	t.Helper()
	url := os.Getenv(PostgresURLEnv)
	if url == "" {
		if os.Getenv(PostgresSkipEnv) == "skip" {
			t.Skipf("%s is not set and %s=skip", PostgresURLEnv, PostgresSkipEnv)
		}
		t.Fatalf("%s is not set: these tests need a PostgreSQL server, e.g. %s='postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable' "+
			"(set %s=skip to skip them)", PostgresURLEnv, PostgresURLEnv, PostgresSkipEnv)
	}
	return url
}

// FreshSchema returns an unused schema name drover_test_<random> on the
// test server and drops that schema, with everything in it, when the test
// ends.
func FreshSchema(t testing.TB) string {
	t.Helper()
	url := PostgresURL(t)
	schema := schemaName()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	return schema
}

// schemaName returns a new schema name, drover_test_<random>.
func schemaName() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b) // never fails
	return "drover_test_" + hex.EncodeToString(b)
}

// Postgres opens a migrated store in a FreshSchema of the test server; the
// driver is closed and the schema dropped when the test ends.
func Postgres(t testing.TB) *postgres.Driver {
	t.Helper()
	url := PostgresURL(t)
	schema := FreshSchema(t)
	ctx := context.Background()
	d, err := postgres.Open(ctx, url, postgres.Options{Schema: schema})
	if err != nil {
		t.Fatalf("open PostgreSQL store: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	if err := d.Migrate(ctx); err != nil {
		t.Fatalf("migrate PostgreSQL store: %v", err)
	}
	return d
}
