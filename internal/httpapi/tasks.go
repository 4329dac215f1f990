package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/droverapi"
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

func toWaitJSON(w drover.WaitPolicy) *droverapi.WaitPolicy {
	return &droverapi.WaitPolicy{MaxWaits: w.MaxWaits, DelayMS: w.Delay.Milliseconds(), Multiplier: w.Multiplier, MaxDelayMS: w.MaxDelay.Milliseconds()}
}

// taskView is the task as the request's caller sees it: its ID and
// ordering key without the namespace, its callback URL redacted unless
// the caller is an operator.
func (h *Handler) taskView(r *http.Request, t *drover.Task) droverapi.Task {
	out := toTaskJSON(t)
	out.ID = dt.LocalName(t.ID)
	out.OrderingKey = dt.LocalOrderingKey(t.OrderingKey)
	if out.CallbackURL != "" && !h.operator(r) {
		out.CallbackURL = redactURL(out.CallbackURL)
	}
	return out
}

func toTaskJSON(t *drover.Task) droverapi.Task {
	out := droverapi.Task{
		ID: t.ID, Workflow: t.Workflow, State: string(t.ProcessState), Input: jsonOrString(t.Input),
		Output: jsonOrString(t.Output), LastError: t.LastError, LockedBy: t.LockedBy, CompleteBy: t.CompleteBy,
		FailureCount: t.FailureCount, CurrentStep: t.CurrentStep, StepCount: t.StepCount,
		OrderingKey: t.OrderingKey, OrderingSeq: t.OrderingSeq, FailureThreshold: t.FailureThreshold,
		WorkflowVersion: t.WorkflowVersion, CallbackURL: t.CallbackURL, CallbackEvents: t.CallbackEvents,
		OnFailure: string(t.OnFailure), RetryDelayMS: t.RetryDelay.Milliseconds(),
		Priority: t.Priority, AvailableAt: t.AvailableAt, CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt,
	}
	if t.Wait.On() {
		out.Wait = toWaitJSON(t.Wait)
	}
	for _, s := range t.Steps {
		var wait *droverapi.WaitPolicy
		if s.Wait != nil {
			wait = toWaitJSON(*s.Wait)
		}
		out.Steps = append(out.Steps, droverapi.Step{
			OnFailure: string(s.OnFailure), Wait: wait,
			Index: s.Index, Name: s.Name, Agent: s.Agent, Compensation: s.Compensation, TimeoutMS: s.Timeout.Milliseconds(),
			State: string(s.ProcessState), CompensationState: string(s.CompensationState), LockedBy: s.LockedBy,
			CompleteBy: s.CompleteBy, FailureCount: s.FailureCount, Attempt: s.Attempt, IdempotencyKey: s.IdempotencyKey,
			Output: jsonOrString(s.Output), LastError: s.LastError, StartedAt: s.StartedAt, FinishedAt: s.FinishedAt,
			UpdatedAt: s.UpdatedAt, Signal: s.Signal, SignalDefault: jsonOrString(s.SignalDefault), Group: s.Group, FinishSeq: s.FinishSeq,
		})
	}
	return out
}

// DecodeSubmit decodes and checks the body of POST /v1/tasks.
func DecodeSubmit(body []byte) (*droverapi.SubmitRequest, error) {
	// A bad time's error from encoding/json names no field: read run_at
	// first, when there is one, to say which.
	var probe struct {
		RunAt json.RawMessage `json:"run_at"`
	}
	if bytes.Contains(body, []byte(`"run_at"`)) && json.Unmarshal(body, &probe) == nil && len(probe.RunAt) > 0 && string(probe.RunAt) != "null" {
		var at time.Time
		if err := json.Unmarshal(probe.RunAt, &at); err != nil {
			return nil, errorf(http.StatusBadRequest, "invalid_field", "field \"run_at\": want an RFC 3339 time like 2026-12-01T09:00:00Z, got %s", probe.RunAt)
		}
	}
	var req droverapi.SubmitRequest
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
	switch {
	case req.RunAt != nil && req.DelayMS != nil:
		return nil, errorf(http.StatusBadRequest, "invalid_field", "fields \"run_at\" and \"delay_ms\" are both given; give one")
	case req.DelayMS != nil && *req.DelayMS < 0:
		return nil, errorf(http.StatusBadRequest, "invalid_field", "field \"delay_ms\": want 0 or more milliseconds, got %d", *req.DelayMS)
	case req.DelayMS != nil && *req.DelayMS > int64(drover.MaxDelay/time.Millisecond):
		return nil, errorf(http.StatusBadRequest, "invalid_field", "field \"delay_ms\": at most %d (10 years), got %d", int64(drover.MaxDelay/time.Millisecond), *req.DelayMS)
	case req.Priority != nil && (*req.Priority < 0 || *req.Priority > drover.MaxPriority):
		return nil, errorf(http.StatusBadRequest, "invalid_field", "field \"priority\": want an integer from 0 (lowest) to %d, got %d", drover.MaxPriority, *req.Priority)
	}
	if len(req.Input) == 0 {
		req.Input = json.RawMessage("null")
	}
	return &req, nil
}

// submitDelay is the RunAt and Delay of a submit request.
func submitDelay(req *droverapi.SubmitRequest) (runAt time.Time, delay time.Duration) {
	if req.RunAt != nil {
		runAt = *req.RunAt
	}
	if req.DelayMS != nil {
		delay = time.Duration(*req.DelayMS) * time.Millisecond
	}
	return runAt, delay
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
		if _, err := h.drover.Store().Reader().TaskGet(r.Context(), &store.TaskGetParams{ID: h.qualify(r, req.ID)}); err == nil {
			status = http.StatusOK
		} else if !errors.Is(err, store.ErrNotFound) {
			return err
		}
	}
	submitter, done, err := h.submitterOf(r, status == http.StatusOK)
	if err != nil {
		return err
	}
	defer done()
	runAt, delay := submitDelay(req)
	t, err := h.drover.Submit(r.Context(), req.Workflow, req.Input, &drover.SubmitOptions{ID: req.ID, OrderingKey: req.OrderingKey,
		CallbackURL: req.CallbackURL, CallbackEvents: req.CallbackEvents, Namespace: h.ns(r), Submitter: submitter,
		RunAt: runAt, Delay: delay, Priority: req.Priority})
	if err != nil {
		return err
	}
	full, err := h.drover.Task(r.Context(), t.ID)
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/v1/tasks/"+url.PathEscape(dt.LocalName(t.ID)))
	writeJSON(w, status, h.taskView(r, full))
	return nil
}

// submitterOf is the submitter a submit records, after the quota check
// (none for a task that exists already: submitting it again adds nothing).
func (h *Handler) submitterOf(r *http.Request, exists bool) (string, func(), error) {
	if exists {
		if p := principalOf(r); p != nil && p.token != nil {
			return p.token.actorName(), func() {}, nil
		}
		return "", func() {}, nil
	}
	return h.quotaCheck(r)
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
	writeJSON(w, http.StatusOK, h.taskView(r, t))
	return nil
}

func (h *Handler) listTasks(w http.ResponseWriter, r *http.Request) error {
	q, err := queryParams(r, []string{"state", "workflow", "after", "limit", "ordering_key", "updated_from", "updated_before"}, "state")
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
	if key := q.Get("ordering_key"); key != "" {
		if err := fieldProblem("ordering key", key, dt.KeyProblem(key, drover.MaxOrderingKeyBytes)); err != nil {
			return paramCheck("ordering_key", err)
		}
		p.OrderingKey = dt.QualifyOrderingKey(h.ns(r), key)
	}
	if p.UpdatedFrom, err = queryTime(q, "updated_from"); err != nil {
		return err
	}
	if p.UpdatedBefore, err = queryTime(q, "updated_before"); err != nil {
		return err
	}
	if !p.UpdatedFrom.IsZero() && !p.UpdatedBefore.After(p.UpdatedFrom) && !p.UpdatedBefore.IsZero() {
		return paramError("updated_before", "%s is not after updated_from %s", q.Get("updated_before"), q.Get("updated_from"))
	}
	ts, err := h.drover.Tasks(r.Context(), p)
	if err != nil {
		return err
	}
	out := droverapi.TaskList{Tasks: []droverapi.Task{}}
	for _, t := range ts {
		out.Tasks = append(out.Tasks, h.taskView(r, t))
	}
	if len(ts) == limit {
		out.NextAfter = dt.LocalName(ts[len(ts)-1].ID)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (h *Handler) resubmitTask(w http.ResponseWriter, r *http.Request) error {
	id, body, err := namedBody(r, "id", "task ID")
	if err != nil {
		return err
	}
	var req droverapi.ResubmitRequest
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
	writeJSON(w, http.StatusOK, h.taskView(r, t))
	return nil
}

func (h *Handler) cancelTask(w http.ResponseWriter, r *http.Request) error {
	id, body, err := namedBody(r, "id", "task ID")
	if err != nil {
		return err
	}
	var req droverapi.CancelRequest
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
	writeJSON(w, http.StatusOK, h.taskView(r, t))
	return nil
}

// signalTask sends a signal to a task (drover.Client.SendSignal): 201 when
// stored (delivered to its waiting step or kept for later), 200 for a
// duplicate ID.
func (h *Handler) signalTask(w http.ResponseWriter, r *http.Request) error {
	id, body, err := namedBody(r, "id", "task ID")
	if err != nil {
		return err
	}
	name := r.PathValue("name")
	if err := checkName("signal name", name); err != nil {
		return err
	}
	var req droverapi.SignalRequest
	if err := decodeJSON(body, &req, false); err != nil {
		return err
	}
	if req.ID != "" {
		if err := checkName("id", req.ID); err != nil {
			return err
		}
	}
	res, err := h.drover.SendSignal(r.Context(), drover.SignalParams{TaskID: h.qualify(r, id), Name: name, ID: req.ID,
		Payload: req.Payload, Sender: h.actor(r)})
	if err != nil {
		return err
	}
	t, err := h.drover.Task(r.Context(), h.qualify(r, id))
	if err != nil {
		return err
	}
	status := http.StatusCreated
	if res.Duplicate {
		status = http.StatusOK
	}
	writeJSON(w, status, droverapi.SignalResult{Name: name, ID: res.ID, Duplicate: res.Duplicate, Delivered: res.Delivered,
		Task: h.taskView(r, t)})
	return nil
}
