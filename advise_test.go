package drover_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/internal/testutil"
	"github.com/drover-run/drover/store/postgres"
)

// A process that runs a scheduler warns, when it starts, about a database
// setting that slows its claims down: here the tasks table's autovacuum,
// disabled.
func TestStartWarnsAboutDatabaseSettings(t *testing.T) {
	t.Parallel()
	d := pgStore(t)
	pg := d.(*postgres.Driver)
	tasks := pgx.Identifier{pg.Schema(), "tasks"}.Sanitize()
	if _, err := pg.Pool().Exec(context.Background(), "ALTER TABLE "+tasks+" SET (autovacuum_enabled = false)"); err != nil {
		t.Fatal(err)
	}
	var logs testutil.Buffer
	startClient(t, drover.Config{Store: d, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		Workflows: []drover.Workflow{{Name: "w", Steps: []drover.Step{{Name: "s", Agent: "a"}}}}, Agents: []drover.Agent{okAgent("a")}})
	want := "autovacuum is disabled on table " + pg.Schema() + ".tasks"
	if !strings.Contains(logs.String(), want) || !strings.Contains(logs.String(), "level=WARN") {
		t.Errorf("log after Start:\n%s\nwant a warning with %q", logs.String(), want)
	}
}
