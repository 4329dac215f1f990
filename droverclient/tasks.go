package droverclient

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/drover-run/drover/droverapi"
)

// Task states, as the API spells them (droverapi's).
const (
	StatePending      = droverapi.StatePending
	StateProcessing   = droverapi.StateProcessing
	StateProcessed    = droverapi.StateProcessed
	StateError        = droverapi.StateError
	StateCompensating = droverapi.StateCompensating
	StateCompensated  = droverapi.StateCompensated
	StateCancelled    = droverapi.StateCancelled
)

// Task is a task as the API returns it (GET /v1/tasks/{id}); Steps is
// empty in listings.
type Task = droverapi.Task

// TaskStep is one step of a task.
type TaskStep = droverapi.Step

// WaitPolicy is how the supervisor waits before it tries again a step that
// reached the failure threshold: up to MaxWaits waits, the first DelayMS
// long, each next one Multiplier times longer, at most MaxDelayMS; then the
// failure policy applies. Each wait is a step_waiting alert.
type WaitPolicy = droverapi.WaitPolicy

// SubmitRequest is a task to submit (POST /v1/tasks).
type SubmitRequest = droverapi.SubmitRequest

// errEmptyID is returned for calls naming no task, before any request.
var errEmptyID = errors.New("droverclient: the task ID is empty")

// SubmitTask submits a task and returns it with its steps. created is
// false when a task with the same ID and input already existed (an
// idempotent repeat).
func (c *Client) SubmitTask(ctx context.Context, req SubmitRequest) (*Task, bool, error) {
	if req.Input == nil {
		req.Input = json.RawMessage("null")
	}
	var t Task
	status, err := c.do(ctx, http.MethodPost, c.url(nil, "/v1/tasks"), req, &t)
	if err != nil {
		return nil, false, err
	}
	return &t, status == http.StatusCreated, nil
}

// Task returns a task with its steps; ErrNotFound when there is none.
func (c *Client) Task(ctx context.Context, id string) (*Task, error) {
	if id == "" {
		return nil, errEmptyID
	}
	var t Task
	if _, err := c.do(ctx, http.MethodGet, c.url(nil, "/v1/tasks", seg(id)), nil, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// ListParams filter and page a task listing (GET /v1/tasks).
type ListParams struct {
	// States keeps tasks in any of these states ("Error", "Cancelled", …).
	States []string
	// Workflow keeps one workflow's tasks.
	Workflow string
	// After returns tasks whose ID sorts after it: the NextAfter of the
	// previous page.
	After string
	// Limit caps the page (1-1000); 0 takes the server's default (100).
	Limit int
	// OrderingKey keeps the tasks submitted with this ordering key.
	OrderingKey string
	// UpdatedFrom and UpdatedBefore, when not zero, keep the tasks last
	// updated at or after UpdatedFrom and before UpdatedBefore.
	UpdatedFrom, UpdatedBefore time.Time
}

// TaskPage is one page of a task listing, in ID order, without steps.
type TaskPage = droverapi.TaskList

// Tasks lists tasks in ID order, one page at a time.
func (c *Client) Tasks(ctx context.Context, p ListParams) (*TaskPage, error) {
	q := url.Values{}
	if len(p.States) > 0 {
		q.Set("state", strings.Join(p.States, ","))
	}
	if p.Workflow != "" {
		q.Set("workflow", p.Workflow)
	}
	if p.After != "" {
		q.Set("after", p.After)
	}
	if p.Limit > 0 {
		q.Set("limit", strconv.Itoa(p.Limit))
	}
	if p.OrderingKey != "" {
		q.Set("ordering_key", p.OrderingKey)
	}
	if !p.UpdatedFrom.IsZero() {
		q.Set("updated_from", p.UpdatedFrom.Format(time.RFC3339Nano))
	}
	if !p.UpdatedBefore.IsZero() {
		q.Set("updated_before", p.UpdatedBefore.Format(time.RFC3339Nano))
	}
	var page TaskPage
	if _, err := c.do(ctx, http.MethodGet, c.url(q, "/v1/tasks"), nil, &page); err != nil {
		return nil, err
	}
	return &page, nil
}

// ResubmitOptions are the optional settings of Resubmit: FromStep re-runs
// the task from this step index; nil: from the step that failed.
type ResubmitOptions = droverapi.ResubmitRequest

// Resubmit puts an Error or Cancelled task back to work (operator scope)
// and returns it with its steps. A task in another state: ErrConflict
// (code "wrong_state").
func (c *Client) Resubmit(ctx context.Context, id string, opts *ResubmitOptions) (*Task, error) {
	if id == "" {
		return nil, errEmptyID
	}
	body := ResubmitOptions{}
	if opts != nil {
		body = *opts
	}
	var t Task
	if _, err := c.do(ctx, http.MethodPost, c.url(nil, "/v1/tasks", seg(id), "resubmit"), body, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// Cancel cancels a task that is not final (operator scope), recording
// reason, and returns it with its steps. A final task: ErrConflict.
func (c *Client) Cancel(ctx context.Context, id, reason string) (*Task, error) {
	if id == "" {
		return nil, errEmptyID
	}
	body := droverapi.CancelRequest{Reason: reason}
	var t Task
	if _, err := c.do(ctx, http.MethodPost, c.url(nil, "/v1/tasks", seg(id), "cancel"), body, &t); err != nil {
		return nil, err
	}
	return &t, nil
}
