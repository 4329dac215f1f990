package workflowdef

import (
	"context"
	"testing"
	"time"

	"github.com/drover-run/drover"
	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/testutil"
	"github.com/drover-run/drover/store"
)

// A stored version that no longer compiles fails its steps permanently:
// retrying cannot fix it, and a request handed back would stay at the head
// of its agent's queue.
func TestStoredVersionThatDoesNotLoadIsPermanent(t *testing.T) {
	d := testutil.SQLite(t)
	ctx := context.Background()
	if err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		_, _, err := x.WorkflowDefPut(ctx, &store.WorkflowDefPutParams{Def: &dt.WorkflowDef{Name: "broken", Digest: "d1", Source: []byte("name: broken\nsteps: 7\n"), CreatedAt: time.Now()}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	reg, err := NewRegistry(Options{Store: d})
	if err != nil {
		t.Fatal(err)
	}
	_, err = reg.Definition(ctx, "broken", 1)
	if err == nil || !drover.IsPermanent(err) {
		t.Fatalf("Definition of a stored version that does not compile: %v, want a permanent error", err)
	}
}
