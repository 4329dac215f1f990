package drover_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/store"
)

// The history resumes from every one of its events: a reader or subscriber
// that passes the last event ID it saw (AfterID, as the HTTP API's
// Last-Event-ID does) gets exactly the events after it, in order, nothing
// missed and nothing twice, for one task and for the stream of all tasks.
// The tasks interleave, and their histories hold the kinds of events a
// task can have: steps started and completed, a recovery after a
// deadline, a permanent failure, an alert, compensations.
func TestHistoryResumesFromEveryEvent(t *testing.T) {
	t.Parallel()
	bothStores(t, func(t *testing.T, d store.Driver) {
		c := startClient(t, drover.Config{
			Store: d,
			Workflows: []drover.Workflow{{Name: "trip", OnFailure: drover.PolicyCompensate, Steps: []drover.Step{
				{Name: "flight", Agent: "air", Compensation: "air-undo", Timeout: 300 * time.Millisecond},
				{Name: "hotel", Agent: "rooms", Compensation: "rooms-undo"},
				{Name: "car", Agent: "cars"},
			}}},
			Agents: []drover.Agent{
				{Name: "air", Func: func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) {
					if r.Attempt == 1 {
						<-ctx.Done() // past the deadline: the supervisor recovers the step
						return nil, ctx.Err()
					}
					return []byte(`"F1"`), nil
				}},
				okAgent("rooms"), okAgent("air-undo"), okAgent("rooms-undo"),
				{Name: "cars", Func: func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) {
					return nil, drover.Permanent(errors.New("no cars"))
				}},
			},
		})
		ctx := context.Background()
		ids := []string{"trip-1", "trip-2", "trip-3"}
		for _, id := range ids {
			if _, err := c.Submit(ctx, "trip", []byte(`{}`), &drover.SubmitOptions{ID: id}); err != nil {
				t.Fatal(err)
			}
		}
		for _, id := range ids {
			if task := waitTask(t, c, id); task.ProcessState != drover.Compensated {
				t.Fatalf("%s ended %s (%s)", id, task.ProcessState, task.LastError)
			}
		}
		history := func(q drover.EventQuery) []*drover.Event {
			t.Helper()
			q.Limit = 10000
			evs, err := c.Events(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			return evs
		}
		key := func(evs []*drover.Event) []string {
			out := make([]string, len(evs))
			for i, e := range evs {
				out[i] = fmt.Sprintf("%d %s %s %d %d", e.ID, e.TaskID, e.Type, e.StepIndex, e.Attempt)
			}
			return out
		}
		all := history(drover.EventQuery{})
		kinds := map[drover.EventType]bool{}
		for _, e := range all {
			kinds[e.Type] = true
		}
		for _, want := range []drover.EventType{drover.EventSubmitted, drover.EventStepStarted, drover.EventStepTimedOut, drover.EventStepRetry,
			drover.EventStepProcessed, drover.EventStepFailed, drover.EventCompensating, drover.EventStepCompensated, drover.EventCompensated} {
			if !kinds[want] {
				t.Fatalf("the history has no %s event: %v", want, key(all))
			}
		}
		for i := 1; i < len(all); i++ {
			if all[i].ID <= all[i-1].ID {
				t.Fatalf("event IDs not increasing: %v", key(all[i-1:i+1]))
			}
		}
		check := func(what string, full []*drover.Event, q drover.EventQuery, subscribe bool) {
			t.Helper()
			for i := -1; i < len(full); i++ {
				if i >= 0 {
					q.AfterID = full[i].ID
				}
				want := key(full[i+1:])
				if got := key(history(q)); !slices.Equal(got, want) {
					t.Fatalf("%s, Events after event %d: %v, want %v", what, q.AfterID, got, want)
				}
				if !subscribe {
					continue
				}
				sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				var got []*drover.Event
				for e := range c.Subscribe(sctx, drover.Subscription{TaskID: q.TaskID, AfterID: q.AfterID, UntilFinal: true, PollInterval: 5 * time.Millisecond}) {
					got = append(got, e)
				}
				cancel()
				if !slices.Equal(key(got), want) {
					t.Fatalf("%s, Subscribe after event %d: %v, want %v", what, q.AfterID, key(got), want)
				}
			}
		}
		for _, id := range ids {
			check(id, history(drover.EventQuery{TaskID: id}), drover.EventQuery{TaskID: id}, true)
		}
		check("all tasks", all, drover.EventQuery{}, false)
		check("alerts", history(drover.EventQuery{AlertsOnly: true}), drover.EventQuery{AlertsOnly: true}, false)
	})
}
