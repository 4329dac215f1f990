package sqlite

import (
	"context"
	"errors"
	"fmt"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/store"
)

const wdCols = `name, version, digest, source, created_at`

const (
	// qWorkflowDefPut inserts the next version of a name unless the digest
	// is stored already. It writes first, so even in a caller's deferred
	// transaction the write lock is taken before anything is read: the
	// max(version) it reads cannot be stale.
	qWorkflowDefPut = `INSERT INTO workflow_definitions (` + wdCols + `)
 SELECT ?1, (SELECT coalesce(max(version), 0) + 1 FROM workflow_definitions WHERE name = ?1), ?2, ?3, ?4
 WHERE NOT EXISTS (SELECT 1 FROM workflow_definitions WHERE name = ?1 AND digest = ?2)
 RETURNING ` + wdCols

	qWorkflowDefByDigest = `SELECT ` + wdCols + ` FROM workflow_definitions WHERE name = ? AND digest = ?`
	qWorkflowDefGet      = `SELECT ` + wdCols + ` FROM workflow_definitions WHERE name = ? AND version = ?`
	qWorkflowDefListAll  = `SELECT ` + wdCols + ` FROM workflow_definitions ORDER BY name, version`
	qWorkflowDefListName = `SELECT ` + wdCols + ` FROM workflow_definitions WHERE name = ? ORDER BY version`
)

func (e *executor) workflowDefs(ctx context.Context, what, query string, args ...any) ([]*dt.WorkflowDef, error) {
	rows, err := e.query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: %s: %w", what, err)
	}
	defer rows.Close()
	var out []*dt.WorkflowDef
	for rows.Next() {
		var (
			w       dt.WorkflowDef
			created int64
		)
		if err := rows.Scan(&w.Name, &w.Version, &w.Digest, &w.Source, &created); err != nil {
			return nil, fmt.Errorf("sqlite: %s: %w", what, translate(err))
		}
		w.CreatedAt = fromUS(created)
		out = append(out, &w)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: %s: %w", what, translate(err))
	}
	return out, nil
}

// WorkflowDefPut implements store.WorkflowDefExecutor. SQLite has a single
// writer, so the insert and the read that follows it see every committed
// version.
func (e *executor) WorkflowDefPut(ctx context.Context, params *store.WorkflowDefPutParams) (*dt.WorkflowDef, bool, error) {
	def := params.Def
	if e.tx == nil {
		return nil, false, errors.New("sqlite: put workflow definition: write outside a transaction")
	}
	if def.Name == "" || def.Digest == "" {
		return nil, false, fmt.Errorf("sqlite: put workflow definition: name %q and digest %q must not be empty", def.Name, def.Digest)
	}
	src := def.Source
	if src == nil {
		src = []byte{} // the column is NOT NULL; nil would bind as NULL
	}
	got, err := e.workflowDefs(ctx, "put workflow definition", qWorkflowDefPut, def.Name, def.Digest, src, us(def.CreatedAt))
	if err != nil {
		return nil, false, err
	}
	if len(got) == 1 {
		return got[0], true, nil
	}
	got, err = e.workflowDefs(ctx, "put workflow definition", qWorkflowDefByDigest, def.Name, def.Digest)
	if err != nil {
		return nil, false, err
	}
	if len(got) == 0 {
		return nil, false, fmt.Errorf("sqlite: put workflow definition %q: neither inserted nor found", def.Name)
	}
	return got[0], false, nil
}

// WorkflowDefGet implements store.WorkflowDefExecutor.
func (e *executor) WorkflowDefGet(ctx context.Context, params *store.WorkflowDefGetParams) (*dt.WorkflowDef, error) {
	name, version := params.Name, params.Version
	got, err := e.workflowDefs(ctx, "get workflow definition", qWorkflowDefGet, name, version)
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
		return e.workflowDefs(ctx, "list workflow definitions", qWorkflowDefListAll)
	}
	return e.workflowDefs(ctx, "list workflow definitions", qWorkflowDefListName, name)
}
