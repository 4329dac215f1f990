package postgres

import (
	"context"
	"fmt"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/store"
)

const wdCols = `name, version, digest, source, created_at`

const (
	// tWorkflowDefPut inserts the next version of a name unless its digest
	// is stored already. Two transactions putting the same name at once
	// may compute the same version: the unique constraints make the second
	// wait for the first, and then (ON CONFLICT DO NOTHING, on either
	// constraint) insert nothing rather than fail, which would abort a
	// caller's transaction. WorkflowDefPut then reads again with a fresh
	// snapshot (READ COMMITTED) and finds the other's row, or tries the
	// next version.
	tWorkflowDefPut = `INSERT INTO {s}.workflow_definitions (` + wdCols + `)
 SELECT $1, (SELECT coalesce(max(version), 0) + 1 FROM {s}.workflow_definitions WHERE name = $1), $2, $3, $4
 WHERE NOT EXISTS (SELECT 1 FROM {s}.workflow_definitions WHERE name = $1 AND digest = $2)
 ON CONFLICT DO NOTHING
 RETURNING ` + wdCols

	tWorkflowDefByDigest = `SELECT ` + wdCols + ` FROM {s}.workflow_definitions WHERE name = $1 AND digest = $2`
	tWorkflowDefGet      = `SELECT ` + wdCols + ` FROM {s}.workflow_definitions WHERE name = $1 AND version = $2`
	tWorkflowDefListAll  = `SELECT ` + wdCols + ` FROM {s}.workflow_definitions ORDER BY name, version`
	tWorkflowDefListName = `SELECT ` + wdCols + ` FROM {s}.workflow_definitions WHERE name = $1 ORDER BY version`
)

// maxWorkflowDefPutRounds bounds WorkflowDefPut's retries. A round is
// repeated only when another transaction committed a new version of the
// same name meanwhile, so it takes as many rounds as there are concurrent
// writers of that name at most.
const maxWorkflowDefPutRounds = 100

// workflowDefQueries holds the workflow-definition statements.
type workflowDefQueries struct{ put, byDigest, get, listAll, listName string }

func (e *executor) workflowDefs(ctx context.Context, what, query string, args ...any) ([]*dt.WorkflowDef, error) {
	var out []*dt.WorkflowDef
	err := e.each(ctx, what, query, args, func(r rows) error {
		var w dt.WorkflowDef
		var version int32
		if err := r.Scan(&w.Name, &version, &w.Digest, &w.Source, &w.CreatedAt); err != nil {
			return err
		}
		w.Version = int(version)
		w.CreatedAt = w.CreatedAt.UTC()
		out = append(out, &w)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// WorkflowDefPut implements store.WorkflowDefExecutor.
func (e *executor) WorkflowDefPut(ctx context.Context, params *store.WorkflowDefPutParams) (*dt.WorkflowDef, bool, error) {
	def := params.Def
	const what = "put workflow definition"
	if err := e.write(what); err != nil {
		return nil, false, err
	}
	if def.Name == "" || def.Digest == "" {
		return nil, false, fmt.Errorf("postgres: %s: name %q and digest %q must not be empty", what, def.Name, def.Digest)
	}
	put, byDigest := e.d.q.workflowDef.put, e.d.q.workflowDef.byDigest
	for range maxWorkflowDefPutRounds {
		got, err := e.workflowDefs(ctx, what, put, def.Name, def.Digest, nonNil(def.Source), def.CreatedAt)
		if err != nil {
			return nil, false, err
		}
		if len(got) == 1 {
			return got[0], true, nil
		}
		got, err = e.workflowDefs(ctx, what, byDigest, def.Name, def.Digest)
		if err != nil {
			return nil, false, err
		}
		if len(got) == 1 {
			return got[0], false, nil
		}
		// Another transaction took the version we computed: try the next.
		if err := ctx.Err(); err != nil {
			return nil, false, fmt.Errorf("postgres: %s: %w", what, err)
		}
	}
	return nil, false, fmt.Errorf("postgres: %s %q: gave up after %d rounds of concurrent versions: %w",
		what, def.Name, maxWorkflowDefPutRounds, store.ErrConflict)
}

// WorkflowDefGet implements store.WorkflowDefExecutor.
func (e *executor) WorkflowDefGet(ctx context.Context, params *store.WorkflowDefGetParams) (*dt.WorkflowDef, error) {
	name, version := params.Name, params.Version
	got, err := e.workflowDefs(ctx, "get workflow definition", e.d.q.workflowDef.get, name, version)
	if err != nil {
		return nil, err
	}
	if len(got) == 0 {
		return nil, fmt.Errorf("workflow %q version %d: %w", name, version, store.ErrNotFound)
	}
	return got[0], nil
}

// WorkflowDefList implements store.WorkflowDefExecutor.
func (e *executor) WorkflowDefList(ctx context.Context, params *store.WorkflowDefListParams) ([]*dt.WorkflowDef, error) {
	name := params.Name
	if name == "" {
		return e.workflowDefs(ctx, "list workflow definitions", e.d.q.workflowDef.listAll)
	}
	return e.workflowDefs(ctx, "list workflow definitions", e.d.q.workflowDef.listName, name)
}
