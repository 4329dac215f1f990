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
)

// Task states, as the API spells them.
const (
	StatePending      = "Pending"
	StateProcessing   = "Processing"
	StateProcessed    = "Processed"
	StateError        = "Error"
	StateCompensating = "Compensating"
	StateCompensated  = "Compensated"
	StateCancelled    = "Cancelled"
)

// Task is a task as the API returns it (GET /v1/tasks/{id}); Steps is
// empty in listings.
type Task struct {
	ID       string `json:"id"`
	Workflow string `json:"workflow"`
	// WorkflowVersion is the version of the workflow definition the task
	// runs (0 for workflows defined in code, or a server that does not
	// report it).
	WorkflowVersion int             `json:"workflow_version,omitempty"`
	State           string          `json:"state"`
	Input           json.RawMessage `json:"input"`
	Output          json.RawMessage `json:"output"`
	LastError       string          `json:"last_error"`
	LockedBy        string          `json:"locked_by"`
	CompleteBy      *time.Time      `json:"complete_by"`
	FailureCount    int             `json:"failure_count"`
	CurrentStep     int             `json:"current_step"`
	StepCount       int             `json:"step_count"`
	OrderingKey     string          `json:"ordering_key"`
	OrderingSeq     int64           `json:"ordering_seq"`
	// CallbackURL receives a signed webhook when the task is final ("" for
	// none, or a server that does not report it).
	CallbackURL string `json:"callback_url,omitempty"`
	// CallbackEvents are what CallbackURL receives ("final", "alerts",
	// event types); nil: final states.
	CallbackEvents   []string `json:"callback_events,omitempty"`
	FailureThreshold int      `json:"failure_threshold"`
	OnFailure        string   `json:"on_failure"`
	RetryDelayMS     int64    `json:"retry_delay_ms"`
	// Wait is the task's extended-wait policy; nil when it does not wait.
	Wait        *WaitPolicy `json:"wait,omitempty"`
	AvailableAt time.Time   `json:"available_at"`
	CreatedAt   time.Time   `json:"created_at"`
	UpdatedAt   time.Time   `json:"updated_at"`
	Steps       []TaskStep  `json:"steps,omitempty"`
}

// Final reports whether the task is in a final state (Processed, Error,
// Compensated or Cancelled).
func (t *Task) Final() bool {
	switch t.State {
	case StateProcessed, StateError, StateCompensated, StateCancelled:
		return true
	}
	return false
}

// TaskStep is one step of a task.
type TaskStep struct {
	Index             int             `json:"index"`
	Name              string          `json:"name"`
	Agent             string          `json:"agent"`
	Compensation      string          `json:"compensation"`
	TimeoutMS         int64           `json:"timeout_ms"`
	State             string          `json:"state"`
	CompensationState string          `json:"compensation_state"`
	LockedBy          string          `json:"locked_by"`
	CompleteBy        *time.Time      `json:"complete_by"`
	FailureCount      int             `json:"failure_count"`
	Attempt           int             `json:"attempt"`
	IdempotencyKey    string          `json:"idempotency_key"`
	Output            json.RawMessage `json:"output"`
	LastError         string          `json:"last_error"`
	StartedAt         *time.Time      `json:"started_at"`
	FinishedAt        *time.Time      `json:"finished_at"`
	UpdatedAt         time.Time       `json:"updated_at"`
	// OnFailure and Wait are the step's own policy; "" and nil: the task's.
	OnFailure string      `json:"on_failure,omitempty"`
	Wait      *WaitPolicy `json:"wait,omitempty"`
}

// WaitPolicy is how the supervisor waits before it tries again a step that
// reached the failure threshold: up to MaxWaits waits, the first DelayMS
// long, each next one Multiplier times longer, at most MaxDelayMS; then the
// failure policy applies. Each wait is a step_waiting alert.
type WaitPolicy struct {
	MaxWaits   int     `json:"max_waits"`
	DelayMS    int64   `json:"delay_ms"`
	Multiplier float64 `json:"multiplier"`
	MaxDelayMS int64   `json:"max_delay_ms"`
}

// SubmitRequest is a task to submit (POST /v1/tasks).
type SubmitRequest struct {
	// Workflow names the workflow; required.
	Workflow string `json:"workflow"`
	// Input is the task input, one JSON document; nil sends null.
	Input json.RawMessage `json:"input"`
	// ID makes the submission idempotent: the same ID and input again
	// return the existing task; another input fails with ErrConflict.
	// "": the server generates one.
	ID string `json:"id,omitempty"`
	// OrderingKey runs the task after every task submitted earlier with
	// the same key is final.
	OrderingKey string `json:"ordering_key,omitempty"`
	// CallbackURL receives a signed webhook when the task is final.
	CallbackURL string `json:"callback_url,omitempty"`
	// CallbackEvents chooses what CallbackURL receives: "final" (the
	// default), "alerts" (every operator alert of the task), event types.
	CallbackEvents []string `json:"callback_events,omitempty"`
}

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
}

// TaskPage is one page of a task listing, in ID order, without steps.
type TaskPage struct {
	Tasks []Task `json:"tasks"`
	// NextAfter is ListParams.After of the next page; "" on the last page.
	NextAfter string `json:"next_after"`
}

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
	var page TaskPage
	if _, err := c.do(ctx, http.MethodGet, c.url(q, "/v1/tasks"), nil, &page); err != nil {
		return nil, err
	}
	return &page, nil
}

// ResubmitOptions are the optional settings of Resubmit.
type ResubmitOptions struct {
	// FromStep re-runs the task from this step index; nil: from the step
	// that failed.
	FromStep *int `json:"from_step,omitempty"`
}

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
	body := struct {
		Reason string `json:"reason,omitempty"`
	}{reason}
	var t Task
	if _, err := c.do(ctx, http.MethodPost, c.url(nil, "/v1/tasks", seg(id), "cancel"), body, &t); err != nil {
		return nil, err
	}
	return &t, nil
}
