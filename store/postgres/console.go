package postgres

import (
	"context"

	"github.com/drover-run/drover/store"
)

// The console's sign-out statements.
const (
	tSignOutInsert = `INSERT INTO {s}.console_signouts (session_id, expires_at) VALUES ($1, $2)
 ON CONFLICT (session_id) DO NOTHING`
	tSignOutExists        = `SELECT count(*) FROM {s}.console_signouts WHERE session_id = $1 AND expires_at > $2`
	tSignOutDeleteExpired = `DELETE FROM {s}.console_signouts WHERE session_id IN (
 SELECT session_id FROM {s}.console_signouts WHERE expires_at <= $1 ORDER BY expires_at LIMIT $2)`
)

// consoleQueries holds the console's statements.
type consoleQueries struct{ insert, exists, deleteExpired string }

// SignOutInsert implements store.ConsoleExecutor.
func (e *executor) SignOutInsert(ctx context.Context, params *store.SignOutInsertParams) error {
	const what = "record a sign-out"
	if err := e.write(what); err != nil {
		return err
	}
	_, err := e.exec(ctx, what, e.d.q.console.insert, params.SessionID, params.ExpiresAt)
	return err
}

// SignOutExists implements store.ConsoleExecutor.
func (e *executor) SignOutExists(ctx context.Context, params *store.SignOutExistsParams) (bool, error) {
	n, err := e.count(ctx, "read a sign-out", e.d.q.console.exists, params.SessionID, params.Now)
	return n > 0, err
}

// SignOutDeleteExpired implements store.ConsoleExecutor.
func (e *executor) SignOutDeleteExpired(ctx context.Context, params *store.SignOutDeleteExpiredParams) (int, error) {
	const what = "delete expired sign-outs"
	if err := e.write(what); err != nil {
		return 0, err
	}
	if params.Limit <= 0 {
		return 0, nil
	}
	n, err := e.exec(ctx, what, e.d.q.console.deleteExpired, params.Before, params.Limit)
	return int(n), err
}
