package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/store"
)

// The webhook primitives (store.WebhookExecutor). SQLite has one writer: a
// write transaction holds the database until it ends, so the cursor "lock"
// is the write lock itself, and claims never compete inside the database.

const whCols = `id, event_id, url, task_id, event_type, payload, attempts, next_attempt_at, claimed_by,
 delivered_at, failed_at, last_error, last_status, created_at, updated_at`

const (
	// qWebhookCursorLock writes the cursor row unchanged (recreating it at
	// the highest event ID if it is missing): a write, so even a
	// caller's deferred transaction takes the write lock here, before it
	// reads the events.
	qWebhookCursorLock = `INSERT INTO webhook_cursor (id, last_event_id)
 SELECT 1, coalesce((SELECT id + coalesce(json_array_length(more), 0) FROM events ORDER BY id DESC LIMIT 1), 0) WHERE true
 ON CONFLICT (id) DO UPDATE SET last_event_id = last_event_id
 RETURNING last_event_id`
	qWebhookCursorSet = `UPDATE webhook_cursor SET last_event_id = ? WHERE id = 1`

	qWebhookClaim = `UPDATE webhook_deliveries
 SET claimed_by = ?1, attempts = attempts + 1, next_attempt_at = ?2, updated_at = ?3
 WHERE id IN (SELECT id FROM webhook_deliveries
   WHERE delivered_at IS NULL AND failed_at IS NULL AND next_attempt_at <= ?3
   ORDER BY next_attempt_at, id LIMIT ?4)
 RETURNING ` + whCols

	qWebhookFinish = `UPDATE webhook_deliveries
 SET claimed_by = NULL, next_attempt_at = ?, delivered_at = ?, failed_at = ?, last_error = ?, last_status = ?, updated_at = ?,
   attempts = attempts - ?
 WHERE id = ? AND claimed_by = ? AND attempts = ? AND delivered_at IS NULL AND failed_at IS NULL`

	qWebhookRelease = `UPDATE webhook_deliveries SET claimed_by = NULL, next_attempt_at = ?2, updated_at = ?2
 WHERE claimed_by = ?1 AND delivered_at IS NULL AND failed_at IS NULL`

	qWebhookDeleteFinished = `DELETE FROM webhook_deliveries WHERE id IN (
   SELECT id FROM webhook_deliveries
   WHERE (delivered_at IS NOT NULL OR failed_at IS NOT NULL) AND updated_at < ?
   ORDER BY updated_at LIMIT ?)`
)

var mWebhookInsert = newMultiRow(`INSERT INTO webhook_deliveries (event_id, url, task_id, event_type, payload,
 attempts, next_attempt_at, claimed_by, delivered_at, failed_at, last_error, last_status, created_at, updated_at) VALUES `,
	`(?,?,?,?,?,?,?,?,?,?,?,?,?,?)`, ` ON CONFLICT (event_id, url) DO NOTHING RETURNING id, event_id, url`)

func scanDelivery(r *sql.Rows) (*dt.WebhookDelivery, error) {
	var (
		w                        dt.WebhookDelivery
		typ                      string
		claimedBy                sql.NullString
		delivered, failed        sql.NullInt64
		next, created, updatedAt int64
	)
	if err := r.Scan(&w.ID, &w.EventID, &w.URL, &w.TaskID, &typ, &w.Payload, &w.Attempts, &next, &claimedBy,
		&delivered, &failed, &w.LastError, &w.LastStatus, &created, &updatedAt); err != nil {
		return nil, translate(err)
	}
	w.EventType = dt.EventType(typ)
	w.NextAttemptAt = fromUS(next)
	w.ClaimedBy = claimedBy.String
	w.DeliveredAt, w.FailedAt = fromNullUS(delivered), fromNullUS(failed)
	w.CreatedAt, w.UpdatedAt = fromUS(created), fromUS(updatedAt)
	return &w, nil
}

// WebhookCursorLock implements store.WebhookExecutor.
func (e *executor) WebhookCursorLock(ctx context.Context, _ *store.WebhookCursorLockParams) (int64, bool, error) {
	if e.tx == nil {
		return 0, false, fmt.Errorf("sqlite: lock webhook cursor: write outside a transaction")
	}
	var after int64
	rows, err := e.query(ctx, qWebhookCursorLock)
	if err != nil {
		return 0, false, fmt.Errorf("sqlite: lock webhook cursor: %w", err)
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return 0, false, fmt.Errorf("sqlite: lock webhook cursor: %w", translate(err))
		}
		return 0, false, fmt.Errorf("sqlite: lock webhook cursor: no row returned")
	}
	if err := rows.Scan(&after); err != nil {
		return 0, false, fmt.Errorf("sqlite: lock webhook cursor: %w", translate(err))
	}
	return after, true, nil
}

// WebhookCursorSet implements store.WebhookExecutor.
func (e *executor) WebhookCursorSet(ctx context.Context, params *store.WebhookCursorSetParams) error {
	after := params.After
	res, err := e.exec(ctx, qWebhookCursorSet, after)
	if err != nil {
		return fmt.Errorf("sqlite: set webhook cursor: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return fmt.Errorf("sqlite: set webhook cursor: %d rows changed (lock the cursor first): %w", n, translate(err))
	}
	return nil
}

// WebhookDeliveryInsertMany implements store.WebhookExecutor.
func (e *executor) WebhookDeliveryInsertMany(ctx context.Context, params *store.WebhookDeliveryInsertManyParams) ([]bool, error) {
	ds := params.Deliveries
	inserted := make([]bool, len(ds))
	if len(ds) == 0 {
		return inserted, nil
	}
	type pair struct {
		event int64
		url   string
	}
	index := make(map[pair]int, len(ds))
	rows := make([][]any, len(ds))
	for i, w := range ds {
		index[pair{w.EventID, w.URL}] = i
		rows[i] = []any{w.EventID, w.URL, w.TaskID, string(w.EventType), nonNilBlob(w.Payload), w.Attempts,
			us(w.NextAttemptAt), nullStr(w.ClaimedBy), usPtr(w.DeliveredAt), usPtr(w.FailedAt), w.LastError,
			w.LastStatus, us(w.CreatedAt), us(w.UpdatedAt)}
	}
	err := e.queryRows(ctx, "insert webhook deliveries", mWebhookInsert, rows, func(r *sql.Rows) error {
		var p pair
		var id int64
		if err := r.Scan(&id, &p.event, &p.url); err != nil {
			return err
		}
		i, ok := index[p]
		if !ok {
			return fmt.Errorf("inserted delivery (%d, %q) was not asked for", p.event, p.url)
		}
		ds[i].ID, inserted[i] = id, true
		return nil
	})
	if err != nil {
		return nil, err
	}
	return inserted, nil
}

func nonNilBlob(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// WebhookDeliveryClaim implements store.WebhookExecutor.
func (e *executor) WebhookDeliveryClaim(ctx context.Context, p *store.WebhookDeliveryClaimParams) ([]*dt.WebhookDelivery, error) {
	if e.tx == nil {
		return nil, fmt.Errorf("sqlite: claim webhook deliveries: write outside a transaction")
	}
	out, err := all(e, ctx, "claim webhook deliveries", qWebhookClaim,
		[]any{p.ClaimedBy, us(p.Now.Add(p.Lease)), us(p.Now), p.Limit}, scanDelivery)
	if err != nil {
		return nil, err
	}
	// RETURNING has no order; hand them out as picked, earliest due first.
	// The new NextAttemptAt is the same for all, so that order is lost:
	// ID order is the closest stable one.
	slices.SortFunc(out, func(a, b *dt.WebhookDelivery) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// WebhookDeliveryFinishMany implements store.WebhookExecutor.
func (e *executor) WebhookDeliveryFinishMany(ctx context.Context, params *store.WebhookDeliveryFinishManyParams) ([]bool, error) {
	rs := params.Results
	applied := make([]bool, len(rs))
	for i, r := range rs {
		var delivered, failed any
		next := r.NextAttemptAt
		undo := 0
		if r.Postponed {
			if r.Status != dt.WebhookPending {
				return nil, fmt.Errorf("sqlite: finish webhook delivery %d: a postponed attempt must stay pending, not %q", r.ID, r.Status)
			}
			undo = 1
		}
		switch r.Status {
		case dt.WebhookDelivered:
			delivered, next = us(r.Now), r.Now
		case dt.WebhookFailed:
			failed, next = us(r.Now), r.Now
		case dt.WebhookPending:
		default:
			return nil, fmt.Errorf("sqlite: finish webhook delivery %d: status %q is not pending, delivered or failed", r.ID, r.Status)
		}
		res, err := e.exec(ctx, qWebhookFinish, us(next), delivered, failed, r.LastError, r.LastStatus, us(r.Now), undo,
			r.ID, r.ClaimedBy, r.Attempt)
		if err != nil {
			return nil, fmt.Errorf("sqlite: finish webhook delivery %d: %w", r.ID, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return nil, fmt.Errorf("sqlite: finish webhook delivery %d: %w", r.ID, translate(err))
		}
		applied[i] = n == 1
	}
	return applied, nil
}

// WebhookDeliveryRelease implements store.WebhookExecutor.
func (e *executor) WebhookDeliveryRelease(ctx context.Context, params *store.WebhookDeliveryReleaseParams) (int, error) {
	claimedBy, now := params.ClaimedBy, params.Now
	res, err := e.exec(ctx, qWebhookRelease, claimedBy, us(now))
	if err != nil {
		return 0, fmt.Errorf("sqlite: release webhook deliveries: %w", err)
	}
	n, err := res.RowsAffected()
	return int(n), translate(err)
}

// WebhookDeliveryList implements store.WebhookExecutor.
func (e *executor) WebhookDeliveryList(ctx context.Context, p *store.WebhookDeliveryListParams) ([]*dt.WebhookDelivery, error) {
	var (
		where = []string{`id > ?`}
		args  = []any{p.AfterID}
	)
	if p.TaskID != "" {
		where, args = append(where, `task_id = ?`), append(args, p.TaskID)
	}
	if p.EventID != 0 {
		where, args = append(where, `event_id = ?`), append(args, p.EventID)
	}
	switch p.Status {
	case "":
	case dt.WebhookPending:
		where = append(where, `delivered_at IS NULL AND failed_at IS NULL`)
	case dt.WebhookDelivered:
		where = append(where, `delivered_at IS NOT NULL`)
	case dt.WebhookFailed:
		where = append(where, `failed_at IS NOT NULL`)
	default:
		return nil, fmt.Errorf("sqlite: list webhook deliveries: status %q is not pending, delivered or failed", p.Status)
	}
	q := `SELECT ` + whCols + ` FROM webhook_deliveries WHERE ` + strings.Join(where, ` AND `) + ` ORDER BY id`
	if p.Limit > 0 {
		q += ` LIMIT ?`
		args = append(args, p.Limit)
	}
	return all(e, ctx, "list webhook deliveries", q, args, scanDelivery)
}

// WebhookDeliveryDeleteFinished implements store.WebhookExecutor.
func (e *executor) WebhookDeliveryDeleteFinished(ctx context.Context, params *store.WebhookDeliveryDeleteFinishedParams) (int, error) {
	before, limit := params.Before, params.Limit
	res, err := e.exec(ctx, qWebhookDeleteFinished, us(before), limit)
	if err != nil {
		return 0, fmt.Errorf("sqlite: delete finished webhook deliveries: %w", err)
	}
	n, err := res.RowsAffected()
	return int(n), translate(err)
}
