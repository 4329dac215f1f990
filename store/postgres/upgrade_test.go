package postgres_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/drover-run/drover/store/storetest"
)

// The migrations after version 11 upgrade a store with tasks in place.
func TestUpgradeFrom11(t *testing.T) {
	t.Parallel()
	d := openFresh(t)
	s := pgx.Identifier{d.Schema()}.Sanitize()
	storetest.CheckUpgradeFrom11(t, d, func(ctx context.Context) error {
		for _, q := range []string{
			`ALTER TABLE ` + s + `.tasks DROP COLUMN callback_events`, `DELETE FROM ` + s + `.drover_migrations WHERE version = 13`,
			`ALTER TABLE ` + s + `.tasks DROP COLUMN wait_max, DROP COLUMN wait_delay_us, DROP COLUMN wait_multiplier, DROP COLUMN wait_max_delay_us`,
			`ALTER TABLE ` + s + `.steps DROP COLUMN on_failure, DROP COLUMN wait_max, DROP COLUMN wait_delay_us, DROP COLUMN wait_multiplier, DROP COLUMN wait_max_delay_us`,
			`DELETE FROM ` + s + `.drover_migrations WHERE version = 12`,
		} {
			if _, err := d.Pool().Exec(ctx, q); err != nil {
				return fmt.Errorf("%s: %w", q, err)
			}
		}
		return nil
	})
}

// Migration 14 upgrades a store with events in place.
func TestUpgradeTo14(t *testing.T) {
	t.Parallel()
	d := openFresh(t)
	s := pgx.Identifier{d.Schema()}.Sanitize()
	storetest.CheckUpgradeTo14(t, d, func(ctx context.Context) error {
		for _, q := range []string{
			`ALTER TABLE ` + s + `.events DROP COLUMN namespace`, `DELETE FROM ` + s + `.drover_migrations WHERE version = 14`,
		} {
			if _, err := d.Pool().Exec(ctx, q); err != nil {
				return fmt.Errorf("%s: %w", q, err)
			}
		}
		return nil
	})
}
