package store

import (
	"context"

	"github.com/drover-run/drover/drovertype"
)

// WorkflowDefExecutor holds the primitives that store the versions of
// declarative workflow definitions, so every process (and a restarted
// one) can run a task with the version it was submitted with.
type WorkflowDefExecutor interface {
	// WorkflowDefPut stores Def unless its name already has a version with
	// the same Digest: then it returns that stored version and created
	// false. Otherwise it inserts Def as the next version of its name
	// (the highest stored version + 1; 1 for a new name) with
	// CreatedAt = Def.CreatedAt, and returns it with created true;
	// Def.Version is ignored. Several transactions putting the same name
	// at once (processes loading the same directory) never get the same
	// version for different digests, and none fails because of another:
	// the one that waits gets the row the other committed. A transaction
	// that puts several names should put them in sorted name order: two
	// transactions putting new versions of the same names in opposite
	// orders can deadlock in a driver whose writers overlap, which then
	// aborts one (ErrConflict).
	// Write transactions only.
	WorkflowDefPut(ctx context.Context, params *WorkflowDefPutParams) (stored *drovertype.WorkflowDef, created bool, err error)
	// WorkflowDefGet returns version Version of workflow Name, ErrNotFound
	// when there is none.
	WorkflowDefGet(ctx context.Context, params *WorkflowDefGetParams) (*drovertype.WorkflowDef, error)
	// WorkflowDefList returns every stored version of Name ("" for every
	// name), ordered by name, then version.
	WorkflowDefList(ctx context.Context, params *WorkflowDefListParams) ([]*drovertype.WorkflowDef, error)
}

// WorkflowDefGetParams are the arguments of WorkflowDefGet.
type WorkflowDefGetParams struct {
	Name    string
	Version int
}

// WorkflowDefListParams are the arguments of WorkflowDefList.
type WorkflowDefListParams struct {
	Name string
}

// WorkflowDefPutParams are the arguments of WorkflowDefPut.
type WorkflowDefPutParams struct {
	Def *drovertype.WorkflowDef
}
