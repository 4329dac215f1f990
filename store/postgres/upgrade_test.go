package postgres_test

import (
	"context"
	"fmt"
	"testing"

	dt "github.com/drover-run/drover/drovertype"

	"github.com/jackc/pgx/v5"

	"github.com/drover-run/drover/store/postgres"
	"github.com/drover-run/drover/store/storetest"
)

// undo returns the function that runs the statements, in order, on d: it
// takes migrations away again for the upgrade checks.
func undo(d *postgres.Driver, qs ...string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		for _, q := range qs {
			if _, err := d.Pool().Exec(ctx, q); err != nil {
				return fmt.Errorf("%s: %w", q, err)
			}
		}
		return nil
	}
}

// upgradeStore opens a fresh migrated store for an upgrade check, and
// returns it and its quoted schema; the test runs in parallel.
func upgradeStore(t *testing.T) (*postgres.Driver, string) {
	t.Parallel()
	d := openFresh(t)
	return d, pgx.Identifier{d.Schema()}.Sanitize()
}

// The migrations after version 11 upgrade a store with tasks in place.
func TestUpgradeFrom11(t *testing.T) {
	d, s := upgradeStore(t)
	storetest.CheckUpgradeFrom11(t, d, undo(d,
		`ALTER TABLE `+s+`.tasks DROP COLUMN callback_events`, `DELETE FROM `+s+`.drover_migrations WHERE version = 13`,
		`ALTER TABLE `+s+`.tasks DROP COLUMN wait_max, DROP COLUMN wait_delay_us, DROP COLUMN wait_multiplier, DROP COLUMN wait_max_delay_us`,
		`ALTER TABLE `+s+`.steps DROP COLUMN on_failure, DROP COLUMN wait_max, DROP COLUMN wait_delay_us, DROP COLUMN wait_multiplier, DROP COLUMN wait_max_delay_us`,
		`DELETE FROM `+s+`.drover_migrations WHERE version = 12`,
	))
}

// Migration 14 upgrades a store with events in place.
func TestUpgradeTo14(t *testing.T) {
	d, s := upgradeStore(t)
	storetest.CheckUpgradeTo14(t, d, undo(d,
		`ALTER TABLE `+s+`.events DROP COLUMN namespace`, `DELETE FROM `+s+`.drover_migrations WHERE version = 14`))
}

// Migration 15 upgrades a store with tasks in place.
func TestUpgradeTo15(t *testing.T) {
	d, s := upgradeStore(t)
	storetest.CheckUpgradeTo15(t, d, undo(d,
		`ALTER TABLE `+s+`.tasks DROP COLUMN submitter`, `DELETE FROM `+s+`.drover_migrations WHERE version = 15`))
}

// Migration 16 upgrades a store with tasks in place.
func TestUpgradeTo16(t *testing.T) {
	d, s := upgradeStore(t)
	storetest.CheckUpgradeTo16(t, d, undo(d,
		`DROP INDEX `+s+`.tasks_namespace_active`, `DELETE FROM `+s+`.drover_migrations WHERE version = 16`))
}

// Migration 23 (event rows) upgrades a store with events in place.
func TestUpgradeTo23(t *testing.T) {
	d, s := upgradeStore(t)
	storetest.CheckUpgradeTo23(t, d,
		undo(d, `DROP VIEW `+s+`.v_events`, `ALTER TABLE `+s+`.events DROP COLUMN more`, `ALTER TABLE `+s+`.events RENAME COLUMN event_type TO type`,
			`CREATE VIEW `+s+`.v_events AS SELECT id, task_id, step_index, type, state, alert, actor, term, attempt, message, created_at FROM `+s+`.events`,
			`ALTER SEQUENCE `+s+`.events_id_seq INCREMENT BY 1`,
			`DELETE FROM `+s+`.drover_migrations WHERE version = 23`),
		func(ctx context.Context, evs []*dt.Event) error {
			for _, ev := range evs { // as the driver wrote them before: the sequence, 1 apart
				var step *int
				if ev.StepIndex >= 0 {
					step = &ev.StepIndex
				}
				if _, err := d.Pool().Exec(ctx, `INSERT INTO `+s+`.events (task_id, step_index, type, state, alert, actor, term,
 attempt, message, created_at, namespace) VALUES ($1,$2,$3,nullif($4,''),$5,nullif($6,''),$7,$8,nullif($9,''),$10,$11)`,
					ev.TaskID, step, string(ev.Type), string(ev.State), ev.Alert, ev.Actor, ev.Term, ev.Attempt, ev.Message,
					ev.CreatedAt, dt.NamespaceOf(ev.TaskID)); err != nil {
					return err
				}
			}
			return nil
		},
		func(ctx context.Context) (n int, err error) {
			return n, d.Pool().QueryRow(ctx, `SELECT count(*) FROM `+s+`.events`).Scan(&n)
		},
		func(ctx context.Context) ([]string, error) {
			rows, _ := d.Pool().Query(ctx, `SELECT id || ' ' || type FROM `+s+`.v_events ORDER BY id`)
			return pgx.CollectRows(rows, pgx.RowTo[string])
		})
}
