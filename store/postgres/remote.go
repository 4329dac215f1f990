package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/store"
)

// Statements of the remote-agent primitives (store.RemoteAgentExecutor);
// {s} is the quoted schema.
const (
	remoteReqCols = `r.id, r.agent, r.task_id, r.step_index, r.attempt, r.kind, r.idempotency_key, r.complete_by,
 r.scheduler, r.claimed_by, r.created_at`

	tRemoteGet = `SELECT ` + remoteReqCols + `, t.workflow, t.input, s.name, s.output,
 CASE WHEN r.previous_own THEN r.previous_output ELSE p.output END, coalesce(t.trace_context, '')
 FROM {s}.agent_requests r
 LEFT JOIN {s}.tasks t ON t.id = r.task_id
 LEFT JOIN {s}.steps s ON s.task_id = r.task_id AND s.step_index = r.step_index
 LEFT JOIN {s}.steps p ON p.task_id = r.task_id AND p.step_index = r.step_index - 1
 WHERE r.id = $1`

	tRemoteAvailable = `SELECT EXISTS (SELECT 1 FROM {s}.agent_requests
 WHERE agent = $1 AND claimed_by IS NULL AND complete_by > $2 AND (available_at IS NULL OR available_at <= $2))`

	// The claim holds while the row is claimed by the caller, before its
	// CompleteBy, and its step still runs the request's attempt. Two
	// callers racing on one row: the second waits for the first's row
	// lock, then re-checks and finds the row gone or changed.
	remoteClaimHolds = `r.id = $1 AND r.claimed_by = $2 AND r.complete_by > $3
 AND EXISTS (SELECT 1 FROM {s}.steps s WHERE s.task_id = r.task_id AND s.step_index = r.step_index AND s.attempt = r.attempt)`

	tRemoteComplete = `DELETE FROM {s}.agent_requests AS r WHERE ` + remoteClaimHolds + `
 RETURNING ` + remoteReqCols

	// The delay ($4 after the first release, doubling, at most $5; in
	// microseconds) counts this release: releases is read before the update.
	// $6 caps the doubling where it has passed $5, so it cannot overflow.
	tRemoteRelease = `UPDATE {s}.agent_requests AS r SET claimed_by = NULL, releases = r.releases + 1,
 available_at = $3 + LEAST($5::bigint, $4::bigint * (1::bigint << LEAST(r.releases, $6::int))) * interval '1 microsecond'
 WHERE ` + remoteClaimHolds + `
 RETURNING ` + remoteReqCols

	tRemoteExists = `SELECT EXISTS (SELECT 1 FROM {s}.agent_requests WHERE id = $1)`
)

type remoteQueries struct{ get, available, complete, release, exists string }

// scanRemoteRequest scans the columns of remoteReqCols, then extra.
func scanRemoteRequest(rs rows, extra ...any) (*dt.AgentRequest, error) {
	var (
		r         dt.AgentRequest
		kind      string
		claimedBy pgtype.Text
	)
	dest := append([]any{&r.ID, &r.Agent, &r.TaskID, &r.StepIndex, &r.Attempt, &kind, &r.IdempotencyKey,
		&r.CompleteBy, &r.Scheduler, &claimedBy, &r.CreatedAt}, extra...)
	if err := rs.Scan(dest...); err != nil {
		return nil, err
	}
	r.Kind = dt.RequestKind(kind)
	r.CompleteBy = r.CompleteBy.UTC()
	r.CreatedAt = r.CreatedAt.UTC()
	r.ClaimedBy = claimedBy.String
	return &r, nil
}

func (e *executor) RequestGet(ctx context.Context, params *store.RequestGetParams) (*dt.AgentRequest, error) {
	id := params.ID
	var out *dt.AgentRequest
	err := e.each(ctx, "get request", e.d.q.remote.get, []any{id}, func(rs rows) error {
		var (
			workflow, name pgtype.Text
			own            []byte
			input, prev    []byte
			tc             string
		)
		r, err := scanRemoteRequest(rs, &workflow, &input, &name, &own, &prev, &tc)
		if err != nil {
			return err
		}
		r.Workflow, r.StepName, r.Input, r.PreviousOutput, r.TraceContext = workflow.String, name.String, input, prev, tc
		if r.Kind == dt.KindCompensate {
			r.StepOutput = own
		}
		out = r
		return nil
	})
	if err != nil {
		return nil, err
	}
	if out == nil {
		return nil, fmt.Errorf("request %d: %w", id, store.ErrNotFound)
	}
	return out, nil
}

func (e *executor) RequestAvailable(ctx context.Context, params *store.RequestAvailableParams) (bool, error) {
	agent, now := params.Agent, params.Now
	var ok bool
	err := e.each(ctx, "requests available", e.d.q.remote.available, []any{agent, now}, func(rs rows) error {
		return rs.Scan(&ok)
	})
	return ok, err
}

func (e *executor) RequestComplete(ctx context.Context, params *store.RequestCompleteParams) (*dt.AgentRequest, error) {
	id, claimedBy, now := params.ID, params.ClaimedBy, params.Now
	return e.remoteFenced(ctx, "complete request", e.d.q.remote.complete, id, claimedBy, now)
}

func (e *executor) RequestReleaseOne(ctx context.Context, params *store.RequestReleaseOneParams) (*dt.AgentRequest, error) {
	id, claimedBy, now, after := params.ID, params.ClaimedBy, params.Now, params.Redelivery
	return e.remoteFenced(ctx, "release request", e.d.q.remote.release, id, claimedBy, now,
		after.First.Microseconds(), after.Max.Microseconds(), after.Doublings())
}

// remoteFenced runs a statement that changes request id only while the
// caller's claim holds, and tells a stale claim from a missing request.
// extra are the statement's parameters after the first three.
func (e *executor) remoteFenced(ctx context.Context, what, query string, id int64, claimedBy string, now time.Time, extra ...any) (*dt.AgentRequest, error) {
	if err := e.write(what); err != nil {
		return nil, err
	}
	var out *dt.AgentRequest
	if err := e.each(ctx, what, query, append([]any{id, claimedBy, now}, extra...), func(rs rows) error {
		r, err := scanRemoteRequest(rs)
		out = r
		return err
	}); err != nil {
		return nil, err
	}
	if out != nil {
		return out, nil
	}
	var exists bool
	if err := e.each(ctx, what, e.d.q.remote.exists, []any{id}, func(rs rows) error { return rs.Scan(&exists) }); err != nil {
		return nil, err
	}
	if exists {
		return nil, fmt.Errorf("request %d: %w", id, store.ErrStale)
	}
	return nil, fmt.Errorf("request %d: %w", id, store.ErrNotFound)
}
