package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/store"
)

// Statements of the remote-agent primitives (store.RemoteAgentExecutor).
const (
	remoteReqCols = `r.id, r.agent, r.task_id, r.step_index, r.attempt, r.kind, r.idempotency_key, r.complete_by,
 r.scheduler, r.claimed_by, r.created_at`

	// remoteRetCols: SQLite's RETURNING takes no table alias.
	remoteRetCols = `id, agent, task_id, step_index, attempt, kind, idempotency_key, complete_by,
 scheduler, claimed_by, created_at`

	qRemoteGet = `SELECT ` + remoteReqCols + `, t.workflow, t.input, s.name, s.output, ` + previousOutput + `, coalesce(t.trace_context, '')
 FROM agent_requests r
 LEFT JOIN tasks t ON t.id = r.task_id
 LEFT JOIN steps s ON s.task_id = r.task_id AND s.step_index = r.step_index
 LEFT JOIN steps p ON p.task_id = r.task_id AND p.step_index = r.step_index - 1
 WHERE r.id = ?`

	qRemoteAvailable = `SELECT EXISTS (SELECT 1 FROM agent_requests
 WHERE agent = ?1 AND claimed_by IS NULL AND complete_by > ?2 AND (available_at IS NULL OR available_at <= ?2))`

	// The claim holds while the row is claimed by the caller, before its
	// CompleteBy, and its step still runs the request's attempt.
	remoteClaimHolds = `r.id = ?1 AND r.claimed_by = ?2 AND r.complete_by > ?3
 AND EXISTS (SELECT 1 FROM steps s WHERE s.task_id = r.task_id AND s.step_index = r.step_index AND s.attempt = r.attempt)`

	qRemoteComplete = `DELETE FROM agent_requests AS r WHERE ` + remoteClaimHolds + `
 RETURNING ` + remoteRetCols

	// The delay (?4 after the first release, doubling, at most ?5; in
	// microseconds) counts this release: releases is read before the update.
	// ?6 caps the doubling where it has passed ?5, so it cannot overflow.
	qRemoteRelease = `UPDATE agent_requests AS r SET claimed_by = NULL, releases = r.releases + 1,
 available_at = ?3 + min(?5, ?4 * (1 << min(r.releases, ?6)))
 WHERE ` + remoteClaimHolds + `
 RETURNING ` + remoteRetCols

	qRemoteExists = `SELECT 1 FROM agent_requests WHERE id = ?`
)

// scanRemoteRequest scans the columns of remoteReqCols (or remoteRetCols),
// then extra.
func scanRemoteRequest(rows *sql.Rows, extra ...any) (*dt.AgentRequest, error) {
	var (
		r                   dt.AgentRequest
		kind                string
		claimedBy           sql.NullString
		completeBy, created int64
	)
	dest := append([]any{&r.ID, &r.Agent, &r.TaskID, &r.StepIndex, &r.Attempt, &kind, &r.IdempotencyKey,
		&completeBy, &r.Scheduler, &claimedBy, &created}, extra...)
	if err := rows.Scan(dest...); err != nil {
		return nil, translate(err)
	}
	r.Kind = dt.RequestKind(kind)
	r.CompleteBy = fromUS(completeBy)
	r.CreatedAt = fromUS(created)
	r.ClaimedBy = claimedBy.String
	return &r, nil
}

func (e *executor) RequestGet(ctx context.Context, params *store.RequestGetParams) (*dt.AgentRequest, error) {
	id := params.ID
	rows, err := e.query(ctx, qRemoteGet, id)
	if err != nil {
		return nil, fmt.Errorf("sqlite: get request: %w", err)
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("sqlite: get request: %w", translate(err))
		}
		return nil, fmt.Errorf("request %d: %w", id, store.ErrNotFound)
	}
	var (
		workflow, name       sql.NullString
		input, own, previous []byte
		tc                   string
	)
	r, err := scanRemoteRequest(rows, &workflow, &input, &name, &own, &previous, &tc)
	if err != nil {
		return nil, fmt.Errorf("sqlite: get request: %w", err)
	}
	r.Workflow, r.StepName, r.Input, r.PreviousOutput, r.TraceContext = workflow.String, name.String, input, previous, tc
	if r.Kind == dt.KindCompensate {
		r.StepOutput = own
	}
	return r, nil
}

func (e *executor) RequestAvailable(ctx context.Context, params *store.RequestAvailableParams) (bool, error) {
	agent, now := params.Agent, params.Now
	rows, err := e.query(ctx, qRemoteAvailable, agent, us(now))
	if err != nil {
		return false, fmt.Errorf("sqlite: requests available: %w", err)
	}
	defer rows.Close()
	var ok bool
	if rows.Next() {
		if err := rows.Scan(&ok); err != nil {
			return false, fmt.Errorf("sqlite: requests available: %w", translate(err))
		}
	}
	return ok, translate(rows.Err())
}

func (e *executor) RequestComplete(ctx context.Context, params *store.RequestCompleteParams) (*dt.AgentRequest, error) {
	id, claimedBy, now := params.ID, params.ClaimedBy, params.Now
	return e.remoteFenced(ctx, "complete request", qRemoteComplete, id, claimedBy, now)
}

func (e *executor) RequestReleaseOne(ctx context.Context, params *store.RequestReleaseOneParams) (*dt.AgentRequest, error) {
	id, claimedBy, now, after := params.ID, params.ClaimedBy, params.Now, params.Redelivery
	return e.remoteFenced(ctx, "release request", qRemoteRelease, id, claimedBy, now,
		after.First.Microseconds(), after.Max.Microseconds(), after.Doublings())
}

// remoteFenced runs a statement that changes request id only while the
// caller's claim holds, and tells a stale claim from a missing request.
// extra are the statement's parameters after the first three.
func (e *executor) remoteFenced(ctx context.Context, what, query string, id int64, claimedBy string, now time.Time, extra ...any) (*dt.AgentRequest, error) {
	if e.tx == nil {
		return nil, fmt.Errorf("sqlite: %s: %w", what, errors.New("write outside a transaction"))
	}
	rows, err := e.query(ctx, query, append([]any{id, claimedBy, us(now)}, extra...)...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: %s: %w", what, err)
	}
	var r *dt.AgentRequest
	if rows.Next() {
		r, err = scanRemoteRequest(rows)
	}
	closeErr := rows.Close()
	if err == nil {
		err = rows.Err()
	}
	if err == nil {
		err = closeErr
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: %s: %w", what, translate(err))
	}
	if r != nil {
		return r, nil
	}
	exists, err := e.query(ctx, qRemoteExists, id)
	if err != nil {
		return nil, fmt.Errorf("sqlite: %s: %w", what, err)
	}
	found := exists.Next()
	_ = exists.Close()
	if err := exists.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: %s: %w", what, translate(err))
	}
	if found {
		return nil, fmt.Errorf("request %d: %w", id, store.ErrStale)
	}
	return nil, fmt.Errorf("request %d: %w", id, store.ErrNotFound)
}
