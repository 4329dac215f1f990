package drover_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/drover-run/drover"
	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/flow"
	"github.com/drover-run/drover/store"
)

// TestHostileIdentifiersAndReasons: identifiers and reasons that are not
// valid UTF-8, contain a NUL character or would be taken for a flag get
// the same error, naming the field, on every driver, before anything
// reaches the store.
func TestHostileIdentifiersAndReasons(t *testing.T) {
	t.Parallel()
	for name, d := range eagerStores(t) { // every driver: PostgreSQL refuses what SQLite keeps
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c, err := drover.New(drover.Config{Store: d,
				Workflows: []drover.Workflow{{Name: "order", Steps: []drover.Step{{Name: "charge", Agent: "payments"}}}}})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			submit := func(id, key string) error {
				_, err := c.Submit(ctx, "order", []byte(`{}`), &drover.SubmitOptions{ID: id, OrderingKey: key})
				return err
			}
			wantErr := func(what string, err, sentinel error, text string) {
				t.Helper()
				if !errors.Is(err, sentinel) || !strings.Contains(fmt.Sprint(err), text) {
					t.Errorf("%s: err = %v; want %v saying %q", what, err, sentinel, text)
				}
			}
			wantErr("Submit with an invalid UTF-8 ID", submit("\xff\xfe", ""), drover.ErrInvalidTaskID, `task ID "\xff\xfe": is not valid UTF-8`)
			wantErr("Submit with a NUL in the ID", submit("a\x00b", ""), drover.ErrInvalidTaskID, "task ID")
			wantErr("Submit with an ID starting with -", submit("-x", ""), drover.ErrInvalidTaskID, `starts with "-"`)
			wantErr("Submit with a NUL in the ordering key", submit("", "k\x00"), drover.ErrInvalidInput, "OrderingKey")
			wantErr("Submit with invalid UTF-8 in the ordering key", submit("", "k\xff"), drover.ErrInvalidInput, "OrderingKey")
			_, err = c.SubmitMany(ctx, []drover.SubmitParams{{Workflow: "order", Options: drover.SubmitOptions{ID: "ok"}}, {Workflow: "order", Options: drover.SubmitOptions{ID: "\xff"}}})
			wantErr("SubmitMany with an invalid ID", err, drover.ErrInvalidTaskID, "task 1: task ID")
			wantNothingStored(t, c)

			_, err = c.Task(ctx, "\xff\xfe")
			wantErr("Task", err, drover.ErrInvalidTaskID, "not valid UTF-8")
			_, err = c.Cancel(ctx, "\xff\xfe", "")
			wantErr("Cancel", err, drover.ErrInvalidTaskID, "not valid UTF-8")
			_, err = c.Resubmit(ctx, "a\x00", nil)
			wantErr("Resubmit", err, drover.ErrInvalidTaskID, "U+0000")
			_, err = c.Events(ctx, drover.EventQuery{TaskID: "a\x00"})
			wantErr("Events", err, drover.ErrInvalidTaskID, "task ID")
			_, err = c.Tasks(ctx, drover.ListParams{AfterID: "a\x00"})
			wantErr("Tasks after", err, drover.ErrInvalidTaskID, "task ID")

			if _, err := c.Submit(ctx, "order", []byte(`{}`), &drover.SubmitOptions{ID: "o-1"}); err != nil {
				t.Fatal(err)
			}
			_, err = c.Cancel(ctx, "o-1", "customer\x00withdrew")
			wantErr("Cancel with a NUL in the reason", err, drover.ErrInvalidInput, `reason "customer\x00withdrew": contains the NUL character`)
			_, err = c.Cancel(ctx, "o-1", "bad \xff")
			wantErr("Cancel with invalid UTF-8 in the reason", err, drover.ErrInvalidInput, "reason")
			_, err = c.Cancel(ctx, "o-1", strings.Repeat("r", drover.MaxReasonBytes+1))
			wantErr("Cancel with a long reason", err, drover.ErrInvalidInput, "the limit is 1000")
			_, err = c.CancelAs(ctx, "o-1", "", "op\x00")
			wantErr("CancelAs with a NUL in the actor", err, drover.ErrInvalidInput, "actor")
			if tk, err := c.Task(ctx, "o-1"); err != nil || tk.ProcessState != drover.Pending {
				t.Fatalf("o-1 after refused cancels: %v, %v", tk, err)
			}
			if _, err := c.Cancel(ctx, "o-1", "line one\nline two"); err != nil {
				t.Errorf("Cancel with a multi-line reason: %v", err)
			}

			// A task stored with an ID starting with "-" (before submit
			// refused them) can still be read and changed.
			w := drover.Workflow{Name: "order", Steps: []drover.Step{{Name: "charge", Agent: "payments"}}}
			now := time.Now().UTC().Truncate(time.Microsecond)
			sub := flow.Submission{
				Task: &dt.Task{ID: "-old", Workflow: w.Name, Input: []byte(`{}`), InputHash: flow.InputHash(w.Name, []byte(`{}`)),
					ProcessState: dt.Pending, StepCount: 1, FailureThreshold: 3, OnFailure: dt.PolicyError,
					AvailableAt: now, CreatedAt: now, UpdatedAt: now},
				Steps: []*dt.StepRecord{{TaskID: "-old", Name: "charge", Agent: "payments", Timeout: time.Second,
					ProcessState: dt.Pending, IdempotencyKey: flow.IdempotencyKey("-old", 0, "charge"), UpdatedAt: now}},
			}
			if err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
				_, err := flow.Submit(ctx, x, []flow.Submission{sub})
				return err
			}); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Task(ctx, "-old"); err != nil {
				t.Errorf("Task(-old): %v", err)
			}
			if _, err := c.Cancel(ctx, "-old", "gone"); err != nil {
				t.Errorf("Cancel(-old): %v", err)
			}
		})
	}
}

// TestHostileAgentErrorAmongHealthyTasks: one agent fails with an error
// text holding a NUL character and invalid UTF-8 while eight tasks beside
// it succeed. Every healthy task is Processed; the hostile one is Error,
// its error made storable and marked, on every driver alike.
func TestHostileAgentErrorAmongHealthyTasks(t *testing.T) {
	t.Parallel()
	for name, d := range eagerStores(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			release := make(chan struct{})
			started := make(chan struct{}, 9)
			c := startClient(t, drover.Config{Store: d,
				Workflows: []drover.Workflow{{Name: "w", Steps: []drover.Step{{Name: "call", Agent: "svc", Timeout: 20 * time.Second}}}},
				Agents: []drover.Agent{{Name: "svc", Func: func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) {
					// All nine answer at once, so their replies meet in
					// the scheduler's transactions.
					started <- struct{}{}
					<-release
					if r.TaskID == "bad" {
						return nil, drover.Permanent(errors.New("x\x00y\xff"))
					}
					return []byte(`{"ok":true}`), nil
				}}},
			})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			ids := []string{"bad"}
			for i := range 8 {
				ids = append(ids, fmt.Sprintf("ok-%d", i))
			}
			for _, id := range ids {
				if _, err := c.Submit(ctx, "w", []byte(`{}`), &drover.SubmitOptions{ID: id}); err != nil {
					t.Fatal(err)
				}
			}
			for range ids {
				<-started
			}
			close(release)
			for _, id := range ids {
				task, err := c.Wait(ctx, id)
				if err != nil {
					t.Fatalf("Wait(%s): %v", id, err)
				}
				if id != "bad" {
					if task.ProcessState != drover.Processed {
						t.Errorf("%s is %s (%q), want Processed", id, task.ProcessState, task.LastError)
					}
					continue
				}
				if task.ProcessState != drover.Error || !utf8.ValidString(task.LastError) || strings.ContainsRune(task.LastError, 0) ||
					!strings.HasPrefix(task.LastError, "x\uFFFDy\uFFFD") || !strings.Contains(task.LastError, "[drover replaced") {
					t.Errorf("bad is %s with LastError %q; want Error and the agent's text made storable and marked", task.ProcessState, task.LastError)
				}
			}
		})
	}
}
