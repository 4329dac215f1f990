package sqlite

import (
	"context"
	"errors"
	"fmt"

	"github.com/drover-run/drover/store"
)

// The console's sign-out statements.
const (
	qSignOutInsert        = `INSERT INTO console_signouts (session_id, expires_at) VALUES (?, ?) ON CONFLICT (session_id) DO NOTHING`
	qSignOutExists        = `SELECT count(*) FROM console_signouts WHERE session_id = ? AND expires_at > ?`
	qSignOutDeleteExpired = `DELETE FROM console_signouts WHERE session_id IN (
 SELECT session_id FROM console_signouts WHERE expires_at <= ? ORDER BY expires_at LIMIT ?)`
)

// SignOutInsert implements store.ConsoleExecutor.
func (e *executor) SignOutInsert(ctx context.Context, params *store.SignOutInsertParams) error {
	if _, err := e.exec(ctx, qSignOutInsert, params.SessionID, us(params.ExpiresAt)); err != nil {
		return fmt.Errorf("sqlite: record a sign-out: %w", err)
	}
	return nil
}

// SignOutExists implements store.ConsoleExecutor.
func (e *executor) SignOutExists(ctx context.Context, params *store.SignOutExistsParams) (bool, error) {
	rows, err := e.query(ctx, qSignOutExists, params.SessionID, us(params.Now))
	if err != nil {
		return false, fmt.Errorf("sqlite: read a sign-out: %w", err)
	}
	defer rows.Close()
	var n int64
	if rows.Next() {
		if err := rows.Scan(&n); err != nil {
			return false, fmt.Errorf("sqlite: read a sign-out: %w", translate(err))
		}
	}
	return n > 0, translate(rows.Err())
}

// SignOutDeleteExpired implements store.ConsoleExecutor.
func (e *executor) SignOutDeleteExpired(ctx context.Context, params *store.SignOutDeleteExpiredParams) (int, error) {
	if e.tx == nil {
		return 0, errors.New("sqlite: delete expired sign-outs: write outside a transaction")
	}
	if params.Limit <= 0 {
		return 0, nil
	}
	r, err := e.exec(ctx, qSignOutDeleteExpired, us(params.Before), params.Limit)
	if err != nil {
		return 0, fmt.Errorf("sqlite: delete expired sign-outs: %w", err)
	}
	n, err := r.RowsAffected()
	return int(n), translate(err)
}
