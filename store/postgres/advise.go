package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// tAdvise reads the settings Advise checks: the server's autovacuum and
// track_counts (autovacuum needs both), and the tasks table's own
// autovacuum_enabled.
const tAdvise = `SELECT current_setting('autovacuum')::bool, current_setting('track_counts')::bool,
  coalesce((SELECT o.option_value::bool FROM pg_class c, pg_options_to_table(c.reloptions) o
    WHERE c.oid = to_regclass($1) AND o.option_name = 'autovacuum_enabled'), true)`

// Advise implements store.Advisor. It names what keeps autovacuum from
// the tasks table: without it, a claimed task's entry in the index of
// claimable tasks stays until a VACUUM, and every claim walks past all
// of them: after a backlog of a million tasks, 77 ms an empty claim
// against 0.06 ms vacuumed (docs/benchmarks.md, "PostgreSQL: latency").
func (d *Driver) Advise(ctx context.Context) ([]string, error) {
	const cost = "every claim then walks past the index entries of each task claimed since the last VACUUM, so claims, and with them every task, slow down after a backlog"
	var server, counts, table bool
	err := d.bounded(ctx, func(c Tx) error {
		return c.QueryRow(ctx, tAdvise, pgx.Identifier{d.schema, "tasks"}.Sanitize()).Scan(&server, &counts, &table)
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: advise: %w", translate(err))
	}
	var advice []string
	switch {
	case !server:
		advice = append(advice, "PostgreSQL's autovacuum is off: "+cost+"; turn it on (autovacuum = on), or VACUUM the tables of schema "+d.schema+" regularly")
	case !counts:
		advice = append(advice, "PostgreSQL's track_counts is off, so autovacuum never runs: "+cost+"; turn it on (track_counts = on)")
	}
	if !table {
		advice = append(advice, "autovacuum is disabled on table "+d.schema+".tasks (autovacuum_enabled = false): "+cost+"; ALTER TABLE "+d.schema+".tasks RESET (autovacuum_enabled)")
	}
	return advice, nil
}
