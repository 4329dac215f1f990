package droverclient

import (
	"context"
	"errors"
	"net/http"

	"github.com/drover-run/drover/droverapi"
)

// Schedule is a recurring schedule with its next due times.
type Schedule = droverapi.Schedule

var errEmptySchedule = errors.New("droverclient: the schedule name is empty")

// Schedules lists the server's recurring schedules, in name order.
func (c *Client) Schedules(ctx context.Context) ([]Schedule, error) {
	var list droverapi.ScheduleList
	if _, err := c.do(ctx, http.MethodGet, c.url(nil, "/v1/schedules"), nil, &list); err != nil {
		return nil, err
	}
	return list.Schedules, nil
}

// Schedule returns one schedule. An unknown schedule: ErrNotFound.
func (c *Client) Schedule(ctx context.Context, name string) (*Schedule, error) {
	return c.scheduleCall(ctx, http.MethodGet, name, "", nil)
}

// PauseSchedule pauses a schedule (operator scope): none of its due
// times fire until it is resumed. Idempotent.
func (c *Client) PauseSchedule(ctx context.Context, name string) (*Schedule, error) {
	return c.scheduleCall(ctx, http.MethodPost, name, "pause", struct{}{})
}

// ResumeSchedule resumes a paused schedule (operator scope): it is next
// due at its first due time after now. Idempotent.
func (c *Client) ResumeSchedule(ctx context.Context, name string) (*Schedule, error) {
	return c.scheduleCall(ctx, http.MethodPost, name, "resume", struct{}{})
}

// RunSchedule submits the schedule's workflow with its input now
// (operator scope) and returns the task. id, when not empty, is the
// task's ID: a retry with the same id submits once.
func (c *Client) RunSchedule(ctx context.Context, name, id string) (*Task, error) {
	if name == "" {
		return nil, errEmptySchedule
	}
	var t Task
	if _, err := c.do(ctx, http.MethodPost, c.url(nil, "/v1/schedules", seg(name), "run"), droverapi.RunScheduleRequest{ID: id}, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// DeleteSchedule deletes a stored schedule (operator scope): it no
// longer fires; the tasks it submitted stay. One the server's own
// configuration defines is refused (ErrConflict, code wrong_state): remove
// it there first. An unknown schedule: ErrNotFound.
func (c *Client) DeleteSchedule(ctx context.Context, name string) error {
	if name == "" {
		return errEmptySchedule
	}
	_, err := c.do(ctx, http.MethodDelete, c.url(nil, "/v1/schedules", seg(name)), struct{}{}, nil)
	return err
}

func (c *Client) scheduleCall(ctx context.Context, method, name, action string, body any) (*Schedule, error) {
	if name == "" {
		return nil, errEmptySchedule
	}
	segments := []string{"/v1/schedules", seg(name)}
	if action != "" {
		segments = append(segments, action)
	}
	var s Schedule
	if _, err := c.do(ctx, method, c.url(nil, segments...), body, &s); err != nil {
		return nil, err
	}
	return &s, nil
}
