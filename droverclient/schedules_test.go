package droverclient_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/droverclient"
)

func TestSchedules(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if err := e.d.AddSchedules(ctx, []drover.Schedule{{Name: "hourly", Workflow: "echo", Input: []byte(`7`), Every: time.Hour}}); err != nil {
		t.Fatal(err)
	}
	sub, op := e.client(t, submitTok), e.client(t, operatorTok)
	ss, err := sub.Schedules(ctx)
	if err != nil || len(ss) != 1 || ss[0].Name != "hourly" || ss[0].EverySeconds != 3600 || len(ss[0].NextDue) != drover.ScheduleStateNext {
		t.Fatalf("Schedules: %+v, %v", ss, err)
	}
	_, err = sub.PauseSchedule(ctx, "hourly")
	wantAPIError(t, err, 403, "forbidden", droverclient.ErrForbidden)
	if s, err := op.PauseSchedule(ctx, "hourly"); err != nil || !s.Paused || len(s.NextDue) != 0 {
		t.Fatalf("PauseSchedule: %+v, %v", s, err)
	}
	if s, err := op.ResumeSchedule(ctx, "hourly"); err != nil || s.Paused {
		t.Fatalf("ResumeSchedule: %+v, %v", s, err)
	}
	tk, err := op.RunSchedule(ctx, "hourly", "")
	if err != nil || !strings.HasPrefix(tk.ID, "schedule:hourly:run:") || string(tk.Input) != "7" {
		t.Fatalf("RunSchedule: %+v, %v", tk, err)
	}
	if s, err := sub.Schedule(ctx, "hourly"); err != nil || s.LastTask != tk.ID {
		t.Fatalf("Schedule: %+v, %v", s, err)
	}
	_, err = sub.Schedule(ctx, "nope")
	wantAPIError(t, err, 404, "not_found", droverclient.ErrNotFound)

	// Delete: refused while the server defines the schedule.
	wantAPIError(t, sub.DeleteSchedule(ctx, "hourly"), 403, "forbidden", droverclient.ErrForbidden)
	wantAPIError(t, op.DeleteSchedule(ctx, "hourly"), 409, "wrong_state", droverclient.ErrConflict)
	e.d.RemoveSchedules("hourly")
	if err := op.DeleteSchedule(ctx, "hourly"); err != nil {
		t.Fatalf("DeleteSchedule: %v", err)
	}
	wantAPIError(t, op.DeleteSchedule(ctx, "hourly"), 404, "not_found", droverclient.ErrNotFound)
	if ss, err := sub.Schedules(ctx); err != nil || len(ss) != 0 {
		t.Fatalf("Schedules after the delete: %+v, %v", ss, err)
	}
	if err := op.DeleteSchedule(ctx, ""); err == nil {
		t.Error("DeleteSchedule with an empty name: no error")
	}
}
