package drover_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/internal/clock"
	"github.com/drover-run/drover/store"
)

// A delayed task waits Pending, unclaimed, until its time (the injected
// clock stands still until the test moves it), then runs; one cancelled
// while it waits never runs; tasks submitted after it without a delay are
// not held back by it; a RunAt in the past runs at once.
func TestDelayedTasks(t *testing.T) {
	t.Parallel()
	bothStores(t, func(t *testing.T, d store.Driver) {
		clk := clock.NewFake(time.Now())
		ran := make(chan string, 8)
		c := startClient(t, drover.Config{
			Store: d, Clock: clk, LeaseTTL: 24 * time.Hour, NoEagerStart: true, // the lease outlives the clock's jump
			Workflows: []drover.Workflow{{Name: "remind", Steps: []drover.Step{{Name: "send", Agent: "mailer", Timeout: time.Hour}}}},
			Agents: []drover.Agent{{Name: "mailer", Func: func(_ context.Context, r *drover.AgentRequest) ([]byte, error) {
				ran <- r.TaskID
				return []byte(`"sent"`), nil
			}}},
		})
		ctx := context.Background()
		later, err := c.Submit(ctx, "remind", nil, &drover.SubmitOptions{ID: "later", Delay: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if want := clk.Now().Add(time.Hour).Truncate(time.Microsecond); later.ProcessState != drover.Pending || !later.AvailableAt.Equal(want) {
			t.Fatalf("submitted: %s, available at %s; want Pending until %s", later.ProcessState, later.AvailableAt, want)
		}
		if _, err := c.Submit(ctx, "remind", nil, &drover.SubmitOptions{ID: "cancelled", RunAt: clk.Now().Add(30 * time.Minute)}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Submit(ctx, "remind", nil, &drover.SubmitOptions{ID: "now", RunAt: clk.Now().Add(-time.Minute)}); err != nil {
			t.Fatal(err)
		}
		if got := waitTask(t, c, "now"); got.ProcessState != drover.Processed {
			t.Fatalf("the task due in the past: %s", got.ProcessState)
		}
		if id := <-ran; id != "now" {
			t.Fatalf("%s ran first, want now", id)
		}
		if _, err := c.Cancel(ctx, "cancelled", "not needed"); err != nil {
			t.Fatalf("cancel a waiting delayed task: %v", err)
		}
		// Claims after it was stored (no eager start: "now" and "next"
		// were claimed) passed the delayed task by: it is still waiting.
		if _, err := c.Submit(ctx, "remind", nil, &drover.SubmitOptions{ID: "next"}); err != nil {
			t.Fatal(err)
		}
		waitTask(t, c, "next")
		if id := <-ran; id != "next" {
			t.Fatalf("%s ran, want next", id)
		}
		if got, err := c.Task(ctx, "later"); err != nil || got.ProcessState != drover.Pending || got.LockedBy != "" {
			t.Fatalf("before its time: %+v %v, want Pending and not held", got, err)
		}
		select {
		case id := <-ran:
			t.Fatalf("%s ran before its time", id)
		default:
		}
		clk.Advance(time.Hour)
		if got := waitTask(t, c, "later"); got.ProcessState != drover.Processed {
			t.Fatalf("after its time: %s", got.ProcessState)
		}
		if got, _ := c.Task(ctx, "cancelled"); got.ProcessState != drover.Cancelled {
			t.Fatalf("the cancelled delayed task is %s", got.ProcessState)
		}
		if id := <-ran; id != "later" {
			t.Fatalf("%s ran, want later (the cancelled one never runs)", id)
		}
	})
}

// Bad delays are refused with a reason and store nothing.
func TestDelayedTaskBadInput(t *testing.T) {
	t.Parallel()
	c := startClient(t, drover.Config{
		Store:     newStore(t),
		Workflows: []drover.Workflow{{Name: "remind", Steps: []drover.Step{{Name: "send", Agent: "mailer"}}}},
		Agents:    []drover.Agent{okAgent("mailer")},
	})
	now := time.Now()
	for _, tc := range []struct {
		opts drover.SubmitOptions
		want string
	}{
		{drover.SubmitOptions{RunAt: now.Add(time.Hour), Delay: time.Hour}, "RunAt and Delay are both set"},
		{drover.SubmitOptions{Delay: -time.Second}, "Delay -1s is negative"},
		{drover.SubmitOptions{Delay: drover.MaxDelay + time.Hour}, "more than"},
		{drover.SubmitOptions{RunAt: now.Add(drover.MaxDelay + time.Hour)}, "more than"},
	} {
		_, err := c.Submit(context.Background(), "remind", nil, &tc.opts)
		if !errors.Is(err, drover.ErrInvalidInput) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want ErrInvalidInput saying %q", tc.opts, err, tc.want)
		}
	}
	wantNothingStored(t, c)
}
