package postgres_test

import (
	"context"
	"fmt"
	"testing"

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
