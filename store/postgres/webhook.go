package postgres

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/store"
)

// The webhook primitives (store.WebhookExecutor).
//
// Locking: enqueuers lock the single cursor row with FOR UPDATE SKIP LOCKED,
// so one enqueues at a time and the others skip their round instead of
// queueing behind it; the (event_id, url) unique constraint backs that up.
// Claims pick due rows with FOR UPDATE SKIP LOCKED in a MATERIALIZED CTE and
// move next_attempt_at to the end of the claim's lease in the same
// statement, so a row another claimer just took (and committed) no longer
// matches when re-checked, and one not yet committed is skipped: two
// dispatchers never hold the same delivery. Results are fenced by
// (claimed_by, attempts).

const whCols = `id, event_id, url, task_id, event_type, payload, attempts, next_attempt_at, claimed_by,
 delivered_at, failed_at, last_error, last_status, created_at, updated_at`

const whInsCols = `event_id, url, task_id, event_type, payload, attempts, next_attempt_at, claimed_by,
 delivered_at, failed_at, last_error, last_status, created_at, updated_at`

const (
	// tWebhookCursorLock returns the cursor locked (NULL: not locked) and
	// whether it exists, in one round trip; the existence check is a
	// plain read, which waits for no lock.
	tWebhookCursorLock = `WITH l AS (SELECT last_event_id FROM {s}.webhook_cursor WHERE id = 1 FOR UPDATE SKIP LOCKED)
 SELECT (SELECT last_event_id FROM l), EXISTS (SELECT 1 FROM {s}.webhook_cursor WHERE id = 1)`
	// tWebhookCursorCreate remakes a missing cursor (migration 8 makes it),
	// at the highest event ID of the rows up to $1, a row ID at or below
	// which every event is final (eventsFinal): a later event has a higher
	// ID. A row's last event is its ID plus its more events. The inserted
	// row stays locked by this transaction.
	tWebhookCursorCreate = `INSERT INTO {s}.webhook_cursor (id, last_event_id)
 SELECT 1, coalesce((SELECT id + coalesce(json_array_length(more::json), 0) FROM {s}.events
   WHERE id <= $1 ORDER BY id DESC LIMIT 1), 0)
 ON CONFLICT (id) DO NOTHING RETURNING last_event_id`
	tWebhookCursorSet = `UPDATE {s}.webhook_cursor SET last_event_id = $1 WHERE id = 1`

	tWebhookInsert = `INSERT INTO {s}.webhook_deliveries (` + whInsCols + `)
 SELECT ` + whInsCols + ` FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::bytea[], $6::int[],
   $7::timestamptz[], $8::text[], $9::timestamptz[], $10::timestamptz[], $11::text[], $12::int[],
   $13::timestamptz[], $14::timestamptz[])
   WITH ORDINALITY AS u(` + whInsCols + `, ord)
 ORDER BY ord
 ON CONFLICT (event_id, url) DO NOTHING
 RETURNING id, event_id, url`

	tWebhookClaim = `WITH pick AS MATERIALIZED (
   SELECT id FROM {s}.webhook_deliveries
   WHERE delivered_at IS NULL AND failed_at IS NULL AND next_attempt_at <= $3
   ORDER BY next_attempt_at, id LIMIT $4
   FOR UPDATE SKIP LOCKED)
 UPDATE {s}.webhook_deliveries w
 SET claimed_by = $1, attempts = w.attempts + 1, next_attempt_at = $2, updated_at = $3
 FROM pick WHERE w.id = pick.id
 RETURNING w.id, w.event_id, w.url, w.task_id, w.event_type, w.payload, w.attempts, w.next_attempt_at, w.claimed_by,
   w.delivered_at, w.failed_at, w.last_error, w.last_status, w.created_at, w.updated_at`

	tWebhookFinish = `UPDATE {s}.webhook_deliveries w
 SET claimed_by = NULL, next_attempt_at = u.next, delivered_at = u.delivered, failed_at = u.failed,
   last_error = u.err, last_status = u.status, updated_at = u.now, attempts = w.attempts - u.undo
 FROM unnest($1::bigint[], $2::text[], $3::int[], $4::timestamptz[], $5::timestamptz[], $6::timestamptz[],
   $7::text[], $8::int[], $9::timestamptz[], $10::int[]) AS u(id, claimed_by, attempt, next, delivered, failed, err, status, now, undo)
 WHERE w.id = u.id AND w.claimed_by = u.claimed_by AND w.attempts = u.attempt
   AND w.delivered_at IS NULL AND w.failed_at IS NULL
 RETURNING w.id`

	tWebhookRelease = `UPDATE {s}.webhook_deliveries SET claimed_by = NULL, next_attempt_at = $2, updated_at = $2
 WHERE claimed_by = $1 AND delivered_at IS NULL AND failed_at IS NULL`

	tWebhookList = `SELECT ` + whCols + ` FROM {s}.webhook_deliveries WHERE id > $1`

	tWebhookDeleteFinished = `WITH pick AS MATERIALIZED (
   SELECT id FROM {s}.webhook_deliveries
   WHERE (delivered_at IS NOT NULL OR failed_at IS NOT NULL) AND updated_at < $1
   ORDER BY updated_at LIMIT $2
   FOR UPDATE SKIP LOCKED)
 DELETE FROM {s}.webhook_deliveries WHERE id IN (SELECT id FROM pick)`
)

// webhookQueries holds the webhook statements with a schema filled in.
type webhookQueries struct {
	cursorLock, cursorCreate, cursorSet, insert, claim, finish, release, list, deleteFinished string
}

func scanDelivery(out *[]*dt.WebhookDelivery) func(rows) error {
	return func(r rows) error {
		var (
			w                 dt.WebhookDelivery
			typ               string
			claimedBy         pgtype.Text
			delivered, failed pgtype.Timestamptz
		)
		if err := r.Scan(&w.ID, &w.EventID, &w.URL, &w.TaskID, &typ, &w.Payload, &w.Attempts, &w.NextAttemptAt,
			&claimedBy, &delivered, &failed, &w.LastError, &w.LastStatus, &w.CreatedAt, &w.UpdatedAt); err != nil {
			return err
		}
		w.EventType = dt.EventType(typ)
		w.ClaimedBy = claimedBy.String
		w.DeliveredAt, w.FailedAt = fromTS(delivered), fromTS(failed)
		w.NextAttemptAt, w.CreatedAt, w.UpdatedAt = w.NextAttemptAt.UTC(), w.CreatedAt.UTC(), w.UpdatedAt.UTC()
		*out = append(*out, &w)
		return nil
	}
}

// WebhookCursorLock implements store.WebhookExecutor.
func (e *executor) WebhookCursorLock(ctx context.Context, _ *store.WebhookCursorLockParams) (int64, bool, error) {
	if err := e.write("lock webhook cursor"); err != nil {
		return 0, false, err
	}
	q := &e.d.q.webhook
	var (
		locked pgtype.Int8
		exists bool
	)
	if err := e.each(ctx, "lock webhook cursor", q.cursorLock, nil, func(r rows) error {
		return r.Scan(&locked, &exists)
	}); err != nil {
		return 0, false, err
	}
	switch {
	case locked.Valid:
		return locked.Int64, true, nil
	case exists:
		return 0, false, nil // another transaction holds it
	}
	// Missing (migration 8 makes it): remake it, locked by the insert. A
	// concurrent remaker wins the conflict, and this call reports !ok.
	var (
		after int64
		found bool
	)
	e.sendTail()
	final, current, err := e.eventsFinal(ctx, 0)
	if err != nil || !current {
		return 0, false, err // try in a later round
	}
	if err := e.each(ctx, "create webhook cursor", q.cursorCreate, []any{final}, func(r rows) error {
		found = true
		return r.Scan(&after)
	}); err != nil {
		return 0, false, err
	}
	return after, found, nil
}

// WebhookCursorSet implements store.WebhookExecutor.
func (e *executor) WebhookCursorSet(ctx context.Context, params *store.WebhookCursorSetParams) error {
	after := params.After
	if err := e.write("set webhook cursor"); err != nil {
		return err
	}
	return e.later(ctx, "set webhook cursor", e.d.q.webhook.cursorSet, []any{after}, nil, nil)
}

// WebhookDeliveryInsertMany implements store.WebhookExecutor: one
// statement, ON CONFLICT (event_id, url) DO NOTHING.
func (e *executor) WebhookDeliveryInsertMany(ctx context.Context, params *store.WebhookDeliveryInsertManyParams) ([]bool, error) {
	ds := params.Deliveries
	inserted := make([]bool, len(ds))
	if len(ds) == 0 {
		return inserted, nil
	}
	if err := e.write("insert webhook deliveries"); err != nil {
		return nil, err
	}
	n := len(ds)
	var (
		events                        = make([]int64, n)
		urls, taskIDs, types, lastErr = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		payloads                      = make([][]byte, n)
		attempts, statuses            = make([]int32, n), make([]int32, n)
		next, created, updated        = make([]time.Time, n), make([]time.Time, n), make([]time.Time, n)
		claimedBy                     = make([]*string, n)
		delivered, failed             = make([]*time.Time, n), make([]*time.Time, n)
	)
	type pair struct {
		event int64
		url   string
	}
	index := make(map[pair]int, n)
	for i, w := range ds {
		index[pair{w.EventID, w.URL}] = i
		events[i], urls[i], taskIDs[i], types[i], payloads[i] = w.EventID, w.URL, w.TaskID, string(w.EventType), nonNil(w.Payload)
		attempts[i], next[i], claimedBy[i], delivered[i], failed[i] = int32(w.Attempts), w.NextAttemptAt, nullStr(w.ClaimedBy), w.DeliveredAt, w.FailedAt
		lastErr[i], statuses[i], created[i], updated[i] = w.LastError, int32(w.LastStatus), w.CreatedAt, w.UpdatedAt
	}
	err := e.each(ctx, "insert webhook deliveries", e.d.q.webhook.insert, []any{events, urls, taskIDs, types, payloads,
		attempts, next, claimedBy, delivered, failed, lastErr, statuses, created, updated}, func(r rows) error {
		var (
			id int64
			p  pair
		)
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

// WebhookDeliveryClaim implements store.WebhookExecutor (SKIP LOCKED).
func (e *executor) WebhookDeliveryClaim(ctx context.Context, p *store.WebhookDeliveryClaimParams) ([]*dt.WebhookDelivery, error) {
	if err := e.write("claim webhook deliveries"); err != nil {
		return nil, err
	}
	var out []*dt.WebhookDelivery
	if err := e.each(ctx, "claim webhook deliveries", e.d.q.webhook.claim,
		[]any{p.ClaimedBy, p.Now.Add(p.Lease), p.Now, p.Limit}, scanDelivery(&out)); err != nil {
		return nil, err
	}
	// RETURNING has no order, and the new next_attempt_at is the same for
	// all: ID order is the closest stable one.
	slices.SortFunc(out, func(a, b *dt.WebhookDelivery) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// WebhookDeliveryFinishMany implements store.WebhookExecutor: one statement
// for the batch, fenced by (claimed_by, attempts).
func (e *executor) WebhookDeliveryFinishMany(ctx context.Context, params *store.WebhookDeliveryFinishManyParams) ([]bool, error) {
	rs := params.Results
	applied := make([]bool, len(rs))
	if len(rs) == 0 {
		return applied, nil
	}
	if err := e.write("finish webhook deliveries"); err != nil {
		return nil, err
	}
	n := len(rs)
	var (
		ids                = make([]int64, n)
		claimedBy, errs    = make([]string, n), make([]string, n)
		attempts, statuses = make([]int32, n), make([]int32, n)
		next, now          = make([]time.Time, n), make([]time.Time, n)
		delivered, failed  = make([]*time.Time, n), make([]*time.Time, n)
		undo               = make([]int32, n)
		index              = make(map[int64]int, n)
	)
	for i, r := range rs {
		index[r.ID] = i
		ids[i], claimedBy[i], attempts[i], errs[i], statuses[i], now[i] = r.ID, r.ClaimedBy, int32(r.Attempt), r.LastError, int32(r.LastStatus), r.Now
		next[i] = r.NextAttemptAt
		if r.Postponed {
			if r.Status != dt.WebhookPending {
				return nil, fmt.Errorf("postgres: finish webhook delivery %d: a postponed attempt must stay pending, not %q", r.ID, r.Status)
			}
			undo[i] = 1
		}
		switch r.Status {
		case dt.WebhookDelivered:
			delivered[i], next[i] = &now[i], r.Now
		case dt.WebhookFailed:
			failed[i], next[i] = &now[i], r.Now
		case dt.WebhookPending:
		default:
			return nil, fmt.Errorf("postgres: finish webhook delivery %d: status %q is not pending, delivered or failed", r.ID, r.Status)
		}
	}
	err := e.each(ctx, "finish webhook deliveries", e.d.q.webhook.finish, []any{ids, claimedBy, attempts, next, delivered,
		failed, errs, statuses, now, undo}, func(r rows) error {
		var id int64
		if err := r.Scan(&id); err != nil {
			return err
		}
		if i, ok := index[id]; ok {
			applied[i] = true
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return applied, nil
}

// WebhookDeliveryRelease implements store.WebhookExecutor.
func (e *executor) WebhookDeliveryRelease(ctx context.Context, params *store.WebhookDeliveryReleaseParams) (int, error) {
	claimedBy, now := params.ClaimedBy, params.Now
	if err := e.write("release webhook deliveries"); err != nil {
		return 0, err
	}
	n, err := e.exec(ctx, "release webhook deliveries", e.d.q.webhook.release, claimedBy, now)
	return int(n), err
}

// WebhookDeliveryList implements store.WebhookExecutor.
func (e *executor) WebhookDeliveryList(ctx context.Context, p *store.WebhookDeliveryListParams) ([]*dt.WebhookDelivery, error) {
	q := e.d.q.webhook.list
	args := []any{p.AfterID}
	if p.TaskID != "" {
		args = append(args, p.TaskID)
		q += fmt.Sprintf(` AND task_id = $%d`, len(args))
	}
	if p.EventID != 0 {
		args = append(args, p.EventID)
		q += fmt.Sprintf(` AND event_id = $%d`, len(args))
	}
	switch p.Status {
	case "":
	case dt.WebhookPending:
		q += ` AND delivered_at IS NULL AND failed_at IS NULL`
	case dt.WebhookDelivered:
		q += ` AND delivered_at IS NOT NULL`
	case dt.WebhookFailed:
		q += ` AND failed_at IS NOT NULL`
	default:
		return nil, fmt.Errorf("postgres: list webhook deliveries: status %q is not pending, delivered or failed", p.Status)
	}
	q += ` ORDER BY id`
	if p.Limit > 0 {
		args = append(args, p.Limit)
		q += fmt.Sprintf(` LIMIT $%d`, len(args))
	}
	var out []*dt.WebhookDelivery
	if err := e.each(ctx, "list webhook deliveries", q, args, scanDelivery(&out)); err != nil {
		return nil, err
	}
	return out, nil
}

// WebhookDeliveryDeleteFinished implements store.WebhookExecutor.
func (e *executor) WebhookDeliveryDeleteFinished(ctx context.Context, params *store.WebhookDeliveryDeleteFinishedParams) (int, error) {
	before, limit := params.Before, params.Limit
	if err := e.write("delete finished webhook deliveries"); err != nil {
		return 0, err
	}
	n, err := e.exec(ctx, "delete finished webhook deliveries", e.d.q.webhook.deleteFinished, before, limit)
	return int(n), err
}
