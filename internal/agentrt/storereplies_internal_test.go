package agentrt

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/clock"
	"github.com/drover-run/drover/internal/fault"
	"github.com/drover-run/drover/internal/flow"
	"github.com/drover-run/drover/internal/testutil"
	"github.com/drover-run/drover/store"
)

// TestStoreRepliesIsolatesRefusedReply: the reply queue's batch holds one
// reply whose text the store refuses; the others are stored, and that one
// is stored as a failure of its step naming the reason. On SQLite the
// refusal comes from the fault point; on PostgreSQL also from the database
// itself, for a NUL character that reached it unsanitized.
func TestStoreRepliesIsolatesRefusedReply(t *testing.T) {
	type refusal struct {
		name  string
		open  func(t *testing.T) store.Driver
		text  string // the bad reply's error
		arm   bool   // arm the fault point with text
		cause string // in the stored failure's error
	}
	sqliteOpen := func(t *testing.T) store.Driver { return testutil.SQLite(t) }
	pgOpen := func(t *testing.T) store.Driver { return testutil.Postgres(t) }
	for _, c := range []refusal{
		{"SQLite/FaultPoint", sqliteOpen, "refused-by-fault-sqlite", true, "injected fault"},
		{"PostgreSQL/FaultPoint", pgOpen, "refused-by-fault-pg", true, "injected fault"},
		{"PostgreSQL/NUL", pgOpen, "x\x00y", false, "invalid byte sequence"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if c.arm {
				defer fault.RefuseText(c.text)()
			}
			d := c.open(t)
			rt := New(d, clock.Real{}, "agents-1", slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
			var batch []*dt.AgentReply
			for i := range 7 {
				r := &dt.AgentReply{TaskID: fmt.Sprintf("t%d", i), Attempt: 1, Kind: dt.KindDo, Output: []byte(`{}`),
					Scheduler: "sched-1", CreatedAt: time.Now().UTC().Truncate(time.Microsecond)}
				if i == 5 {
					r.Failed, r.Output, r.Error = true, nil, c.text
				}
				batch = append(batch, r)
			}
			ctx := context.Background()
			n, err := rt.storeReplies(ctx, batch)
			if err != nil || n != len(batch) {
				t.Fatalf("storeReplies = %d, %v; want %d, nil", n, err, len(batch))
			}
			var got []*dt.AgentReply
			if err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
				got, err = x.ReplyTake(ctx, &store.ReplyTakeParams{Scheduler: "sched-1", Limit: 100})
				return err
			}); err != nil {
				t.Fatal(err)
			}
			if len(got) != len(batch) {
				t.Fatalf("%d replies stored, want %d", len(got), len(batch))
			}
			for _, r := range got {
				bad := r.TaskID == "t5"
				switch {
				case bad && (!r.Failed || !strings.HasPrefix(r.Error, flow.UnstorablePrefix) || !strings.Contains(r.Error, c.cause)):
					t.Errorf("the refused reply was stored as %+v; want a failure whose error starts %q and names %q", r, flow.UnstorablePrefix, c.cause)
				case !bad && (r.Failed || string(r.Output) != `{}`):
					t.Errorf("healthy reply %s stored as %+v", r.TaskID, r)
				}
			}
		})
	}
}
