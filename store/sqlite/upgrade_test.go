package sqlite_test

import (
	"context"
	"fmt"
	"testing"

	dt "github.com/drover-run/drover/drovertype"

	"github.com/drover-run/drover/store/sqlite"
	"github.com/drover-run/drover/store/storetest"
)

// undo returns the function that runs the statements, in order, on d: it
// takes migrations away again for the upgrade checks.
func undo(d *sqlite.Driver, qs ...string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		for _, q := range qs {
			if _, err := d.DB().ExecContext(ctx, q); err != nil {
				return fmt.Errorf("%s: %w", q, err)
			}
		}
		return nil
	}
}

// The migrations after version 11 upgrade a store with tasks in place.
func TestUpgradeFrom11(t *testing.T) {
	d, _ := freshStore(t)
	storetest.CheckUpgradeFrom11(t, d, undo(d,
		`ALTER TABLE tasks DROP COLUMN callback_events`, `DELETE FROM drover_migrations WHERE version = 13`,
		`ALTER TABLE tasks DROP COLUMN wait_max`, `ALTER TABLE tasks DROP COLUMN wait_delay_us`,
		`ALTER TABLE tasks DROP COLUMN wait_multiplier`, `ALTER TABLE tasks DROP COLUMN wait_max_delay_us`,
		`ALTER TABLE steps DROP COLUMN on_failure`, `ALTER TABLE steps DROP COLUMN wait_max`,
		`ALTER TABLE steps DROP COLUMN wait_delay_us`, `ALTER TABLE steps DROP COLUMN wait_multiplier`,
		`ALTER TABLE steps DROP COLUMN wait_max_delay_us`, `DELETE FROM drover_migrations WHERE version = 12`,
	))
}

// Migration 14 upgrades a store with events in place.
func TestUpgradeTo14(t *testing.T) {
	d, _ := freshStore(t)
	storetest.CheckUpgradeTo14(t, d, undo(d,
		`DROP INDEX events_namespace`, `ALTER TABLE events DROP COLUMN namespace`, `DELETE FROM drover_migrations WHERE version = 14`))
}

// Migration 15 upgrades a store with tasks in place.
func TestUpgradeTo15(t *testing.T) {
	d, _ := freshStore(t)
	storetest.CheckUpgradeTo15(t, d, undo(d,
		`DROP INDEX tasks_submitter_active`, `ALTER TABLE tasks DROP COLUMN submitter`, `DELETE FROM drover_migrations WHERE version = 15`))
}

// Migration 16 upgrades a store with tasks in place.
func TestUpgradeTo16(t *testing.T) {
	d, _ := freshStore(t)
	storetest.CheckUpgradeTo16(t, d, undo(d,
		`DROP INDEX tasks_namespace_active`, `DELETE FROM drover_migrations WHERE version = 16`))
}

// Migration 23 (event rows) upgrades a store with events in place.
func TestUpgradeTo23(t *testing.T) {
	d, _ := freshStore(t)
	db := d.DB()
	storetest.CheckUpgradeTo23(t, d,
		undo(d, `DROP VIEW v_events`, `ALTER TABLE events DROP COLUMN more`, `ALTER TABLE events RENAME COLUMN event_type TO type`,
			`CREATE VIEW v_events AS SELECT id, task_id, step_index, type, state, alert, actor, term, attempt, message, created_at FROM events`, `DELETE FROM drover_migrations WHERE version = 23`),
		func(ctx context.Context, evs []*dt.Event) error {
			for _, ev := range evs { // as the driver wrote them before: AUTOINCREMENT, 1 apart
				var step any
				if ev.StepIndex >= 0 {
					step = ev.StepIndex
				}
				if _, err := db.ExecContext(ctx, `INSERT INTO events (task_id, step_index, type, state, alert, actor, term,
 attempt, message, created_at, namespace) VALUES (?,?,?,?,?,?,?,?,?,?,?)`, ev.TaskID, step, string(ev.Type),
					string(ev.State), ev.Alert, ev.Actor, ev.Term, ev.Attempt, ev.Message, ev.CreatedAt.UnixMicro(),
					dt.NamespaceOf(ev.TaskID)); err != nil {
					return err
				}
			}
			return nil
		},
		func(ctx context.Context) (n int, err error) {
			return n, db.QueryRowContext(ctx, `SELECT count(*) FROM events`).Scan(&n)
		},
		func(ctx context.Context) (lines []string, err error) {
			rows, err := db.QueryContext(ctx, `SELECT id || ' ' || type FROM v_events ORDER BY id`)
			if err != nil {
				return nil, err
			}
			defer rows.Close()
			for rows.Next() {
				var line string
				if err := rows.Scan(&line); err != nil {
					return nil, err
				}
				lines = append(lines, line)
			}
			return lines, rows.Err()
		})
}
