package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/drover-run/drover"
	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/store"
)

// checkName validates a task ID, workflow or queue name by drover's rule
// of names (drovertype.NameProblem): the error names what it is.
func checkName(what, s string) error {
	return fieldProblem(what, s, dt.NameProblem(s))
}

// checkSession validates a session ID by drover's rule of keys
// (drovertype.KeyProblem; "/" is allowed: send it as %2F in a path).
func checkSession(s string) error {
	return fieldProblem("session ID", s, dt.KeyProblem(s, dt.MaxKeyBytes))
}

// checkText validates a free text of the request body (a reason, an
// error): at most max bytes of UTF-8 without NUL characters.
func checkText(field, s string, max int) error {
	if p := dt.TextProblem(s, max); p != "" {
		return errorf(http.StatusBadRequest, "invalid_field", "%s", &dt.FieldError{Field: "field " + strconv.Quote(field), Value: s, Problem: p})
	}
	return nil
}

// fieldProblem is a 400 for a value with the problem p, if any.
func fieldProblem(what, s, p string) error {
	if p == "" {
		return nil
	}
	return badRequest("%s", &dt.FieldError{Field: what, Value: s, Problem: p})
}

// jsonOrString returns b as raw JSON when it is a JSON document, else as a
// JSON string; nil stays null.
func jsonOrString(b []byte) json.RawMessage {
	if b == nil {
		return nil
	}
	if json.Valid(b) {
		return json.RawMessage(b)
	}
	s, _ := json.Marshal(string(b))
	return s
}

// taskJSON is a task in responses.
type taskJSON struct {
	ID               string          `json:"id"`
	Workflow         string          `json:"workflow"`
	WorkflowVersion  int             `json:"workflow_version,omitempty"`
	State            string          `json:"state"`
	Input            json.RawMessage `json:"input"`
	Output           json.RawMessage `json:"output"`
	LastError        string          `json:"last_error"`
	LockedBy         string          `json:"locked_by"`
	CompleteBy       *time.Time      `json:"complete_by"`
	FailureCount     int             `json:"failure_count"`
	CurrentStep      int             `json:"current_step"`
	StepCount        int             `json:"step_count"`
	OrderingKey      string          `json:"ordering_key"`
	OrderingSeq      int64           `json:"ordering_seq"`
	CallbackURL      string          `json:"callback_url,omitempty"`
	CallbackEvents   []string        `json:"callback_events,omitempty"` // absent: final states
	FailureThreshold int             `json:"failure_threshold"`
	OnFailure        string          `json:"on_failure"`
	RetryDelayMS     int64           `json:"retry_delay_ms"`
	Wait             *waitJSON       `json:"wait,omitempty"` // absent: the task does not wait
	AvailableAt      time.Time       `json:"available_at"`
	CreatedAt        time.Time       `json:"created_at"`
	UpdatedAt        time.Time       `json:"updated_at"`
	Steps            []stepJSON      `json:"steps,omitempty"`
}

// waitJSON is a WaitPolicy in responses.
type waitJSON struct {
	MaxWaits   int     `json:"max_waits"`
	DelayMS    int64   `json:"delay_ms"`
	Multiplier float64 `json:"multiplier"`
	MaxDelayMS int64   `json:"max_delay_ms"`
}

func toWaitJSON(w drover.WaitPolicy) *waitJSON {
	return &waitJSON{MaxWaits: w.MaxWaits, DelayMS: w.Delay.Milliseconds(), Multiplier: w.Multiplier, MaxDelayMS: w.MaxDelay.Milliseconds()}
}

type stepJSON struct {
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
	// The step's own policy; absent: the task's.
	OnFailure string    `json:"on_failure,omitempty"`
	Wait      *waitJSON `json:"wait,omitempty"`
}

// taskJSON is the task as the request's caller sees it: its ID and
// ordering key without the namespace, its callback URL redacted unless
// the caller is an operator.
func (h *Handler) taskJSON(r *http.Request, t *drover.Task) taskJSON {
	out := toTaskJSON(t)
	out.ID = dt.LocalName(t.ID)
	out.OrderingKey = dt.LocalOrderingKey(t.OrderingKey)
	if out.CallbackURL != "" && !h.operator(r) {
		out.CallbackURL = redactURL(out.CallbackURL)
	}
	return out
}

func toTaskJSON(t *drover.Task) taskJSON {
	out := taskJSON{
		ID: t.ID, Workflow: t.Workflow, State: string(t.ProcessState), Input: jsonOrString(t.Input),
		Output: jsonOrString(t.Output), LastError: t.LastError, LockedBy: t.LockedBy, CompleteBy: t.CompleteBy,
		FailureCount: t.FailureCount, CurrentStep: t.CurrentStep, StepCount: t.StepCount,
		OrderingKey: t.OrderingKey, OrderingSeq: t.OrderingSeq, FailureThreshold: t.FailureThreshold,
		WorkflowVersion: t.WorkflowVersion, CallbackURL: t.CallbackURL, CallbackEvents: t.CallbackEvents,
		OnFailure: string(t.OnFailure), RetryDelayMS: t.RetryDelay.Milliseconds(),
		AvailableAt: t.AvailableAt, CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt,
	}
	if t.Wait.On() {
		out.Wait = toWaitJSON(t.Wait)
	}
	for _, s := range t.Steps {
		var wait *waitJSON
		if s.Wait != nil {
			wait = toWaitJSON(*s.Wait)
		}
		out.Steps = append(out.Steps, stepJSON{
			OnFailure: string(s.OnFailure), Wait: wait,
			Index: s.Index, Name: s.Name, Agent: s.Agent, Compensation: s.Compensation, TimeoutMS: s.Timeout.Milliseconds(),
			State: string(s.ProcessState), CompensationState: string(s.CompensationState), LockedBy: s.LockedBy,
			CompleteBy: s.CompleteBy, FailureCount: s.FailureCount, Attempt: s.Attempt, IdempotencyKey: s.IdempotencyKey,
			Output: jsonOrString(s.Output), LastError: s.LastError, StartedAt: s.StartedAt, FinishedAt: s.FinishedAt,
			UpdatedAt: s.UpdatedAt,
		})
	}
	return out
}

// SubmitRequest is the body of POST /v1/tasks.
type SubmitRequest struct {
	Workflow    string          `json:"workflow"`
	Input       json.RawMessage `json:"input"`
	ID          string          `json:"id,omitempty"`
	OrderingKey string          `json:"ordering_key,omitempty"`
	// CallbackURL receives a signed webhook when the task is final.
	CallbackURL string `json:"callback_url,omitempty"`
	// CallbackEvents chooses what CallbackURL receives: "final", "alerts",
	// event types. Absent: final.
	CallbackEvents []string `json:"callback_events,omitempty"`
}

// DecodeSubmit decodes and checks the body of POST /v1/tasks.
func DecodeSubmit(body []byte) (*SubmitRequest, error) {
	var req SubmitRequest
	if err := decodeJSON(body, &req, true); err != nil {
		return nil, err
	}
	if req.Workflow == "" {
		return nil, errorf(http.StatusBadRequest, "invalid_field", "field \"workflow\" is required")
	}
	if err := checkName("workflow", req.Workflow); err != nil {
		return nil, err
	}
	if req.ID != "" {
		if err := fieldProblem("field \"id\"", req.ID, dt.NewTaskIDProblem(req.ID)); err != nil {
			return nil, err
		}
	}
	if req.OrderingKey != "" {
		if err := fieldProblem("field \"ordering_key\"", req.OrderingKey, dt.KeyProblem(req.OrderingKey, drover.MaxOrderingKeyBytes)); err != nil {
			return nil, err
		}
	}
	if err := drover.ValidateCallbackURL(req.CallbackURL); err != nil {
		var ce *drover.CallbackURLError
		if errors.As(err, &ce) {
			return nil, errorf(http.StatusBadRequest, "invalid_field", "field \"callback_url\" %s", ce.Reason)
		}
		return nil, errorf(http.StatusBadRequest, "invalid_field", "field \"callback_url\": %s", err)
	}
	if _, err := dt.ParseWebhookEvents(req.CallbackEvents); err != nil {
		return nil, errorf(http.StatusBadRequest, "invalid_field", "field \"callback_events\": %v", err)
	}
	if len(req.CallbackEvents) > 0 && req.CallbackURL == "" {
		return nil, errorf(http.StatusBadRequest, "invalid_field", "field \"callback_events\" needs a \"callback_url\"")
	}
	if len(req.Input) == 0 {
		req.Input = json.RawMessage("null")
	}
	return &req, nil
}

func (h *Handler) submitTask(w http.ResponseWriter, r *http.Request) error {
	if err := noQuery(r); err != nil {
		return err
	}
	body, err := readBody(r)
	if err != nil {
		return err
	}
	req, err := DecodeSubmit(body)
	if err != nil {
		return err
	}
	if req.CallbackURL != "" {
		if err := h.opts.CallbackAllow.Check(req.CallbackURL); err != nil {
			return errorf(http.StatusBadRequest, "invalid_field", "field \"callback_url\" %v", err)
		}
	}
	status := http.StatusCreated
	if req.ID != "" {
		// The same ID and input again returns the existing task: 200.
		if _, err := h.drover.Store().Reader().TaskGet(r.Context(), h.qualify(r, req.ID)); err == nil {
			status = http.StatusOK
		} else if !errors.Is(err, store.ErrNotFound) {
			return err
		}
	}
	t, err := h.drover.Submit(r.Context(), req.Workflow, req.Input, &drover.SubmitOptions{ID: req.ID, OrderingKey: req.OrderingKey,
		CallbackURL: req.CallbackURL, CallbackEvents: req.CallbackEvents, Namespace: h.ns(r)})
	if err != nil {
		return err
	}
	full, err := h.drover.Task(r.Context(), t.ID)
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/v1/tasks/"+url.PathEscape(dt.LocalName(t.ID)))
	writeJSON(w, status, h.taskJSON(r, full))
	return nil
}

func (h *Handler) getTask(w http.ResponseWriter, r *http.Request) error {
	id, err := namedPath(r, "id", "task ID")
	if err != nil {
		return err
	}
	t, err := h.drover.Task(r.Context(), h.qualify(r, id))
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return errorf(http.StatusNotFound, "not_found", "task %q not found", id)
		}
		return err
	}
	writeJSON(w, http.StatusOK, h.taskJSON(r, t))
	return nil
}

type taskListJSON struct {
	Tasks []taskJSON `json:"tasks"`
	// NextAfter is the "after" of the next page; "" on the last page.
	NextAfter string `json:"next_after"`
}

func (h *Handler) listTasks(w http.ResponseWriter, r *http.Request) error {
	q, err := queryParams(r, []string{"state", "workflow", "after", "limit"}, "state")
	if err != nil {
		return err
	}
	limit, err := parseLimit(q, 100)
	if err != nil {
		return err
	}
	p := drover.ListParams{Workflow: q.Get("workflow"), AfterID: q.Get("after"), Limit: limit, Namespace: h.listNamespace(r)}
	for _, v := range q["state"] {
		for _, s := range strings.Split(v, ",") {
			st := dt.ProcessState(strings.TrimSpace(s))
			if !st.Valid() {
				return paramError("state", "unknown state %q (want Pending, Processing, Processed, Error, Compensating, Compensated or Cancelled)", s)
			}
			p.States = append(p.States, st)
		}
	}
	if p.Workflow != "" {
		if err := checkName("workflow", p.Workflow); err != nil {
			return paramCheck("workflow", err)
		}
	}
	if p.AfterID != "" {
		if err := checkName("task ID", p.AfterID); err != nil {
			return paramCheck("after", err)
		}
		p.AfterID = h.qualify(r, p.AfterID)
	}
	ts, err := h.drover.Tasks(r.Context(), p)
	if err != nil {
		return err
	}
	out := taskListJSON{Tasks: []taskJSON{}}
	for _, t := range ts {
		out.Tasks = append(out.Tasks, h.taskJSON(r, t))
	}
	if len(ts) == limit {
		out.NextAfter = dt.LocalName(ts[len(ts)-1].ID)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// ResubmitRequest is the optional body of POST /v1/tasks/{id}/resubmit.
type ResubmitRequest struct {
	FromStep *int `json:"from_step"`
}

func (h *Handler) resubmitTask(w http.ResponseWriter, r *http.Request) error {
	id, body, err := namedBody(r, "id", "task ID")
	if err != nil {
		return err
	}
	var req ResubmitRequest
	if err := decodeJSON(body, &req, false); err != nil {
		return err
	}
	if req.FromStep != nil && *req.FromStep < 0 {
		return errorf(http.StatusBadRequest, "invalid_field", "field \"from_step\" must not be negative")
	}
	id = h.qualify(r, id)
	if _, err := h.drover.Resubmit(r.Context(), id, &drover.ResubmitOptions{FromStep: req.FromStep, Actor: h.actor(r)}); err != nil {
		return err
	}
	t, err := h.drover.Task(r.Context(), id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, h.taskJSON(r, t))
	return nil
}

// CancelRequest is the optional body of POST /v1/tasks/{id}/cancel.
type CancelRequest struct {
	Reason string `json:"reason"`
}

func (h *Handler) cancelTask(w http.ResponseWriter, r *http.Request) error {
	id, body, err := namedBody(r, "id", "task ID")
	if err != nil {
		return err
	}
	var req CancelRequest
	if err := decodeJSON(body, &req, false); err != nil {
		return err
	}
	if err := checkText("reason", req.Reason, drover.MaxReasonBytes); err != nil {
		return err
	}
	id = h.qualify(r, id)
	if _, err := h.drover.CancelAs(r.Context(), id, req.Reason, h.actor(r)); err != nil {
		return err
	}
	t, err := h.drover.Task(r.Context(), id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, h.taskJSON(r, t))
	return nil
}
