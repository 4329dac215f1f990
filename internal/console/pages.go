package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/convoy"
	dt "github.com/drover-run/drover/drovertype"
)

// states are the task states in the order the pages show them.
var states = []dt.ProcessState{dt.Pending, dt.Processing, dt.Compensating, dt.Error, dt.Processed, dt.Compensated, dt.Cancelled}

// queuesCounted caps the session queues the overview counts.
const queuesCounted = 100

// Queue depth on the overview: of the first depthQueues queues, at most
// depthSessions sessions each.
const (
	depthQueues   = 20
	depthSessions = 1000
)

// instancesShown caps the live instances the overview lists.
const instancesShown = 50

// queueDepth is a row of the overview's queue depths.
type queueDepth struct {
	Name string // as the viewer names it
	convoy.Depth
}

// pageSize is the tasks of one page of the task list.
const pageSize = 50

// alertsShown caps the open alerts the overview counts and the alerts
// page lists at once.
const alertsShown = 100

var funcs = template.FuncMap{
	"json":   prettyJSON,
	"when":   when,
	"state":  func(s dt.ProcessState) string { return "st-" + strings.ToLower(string(s)) },
	"states": func() []dt.ProcessState { return states },
	"query": func(kv ...string) template.URL {
		q := url.Values{}
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i+1] != "" {
				q.Set(kv[i], kv[i+1])
			}
		}
		return template.URL(q.Encode())
	},
	"pathescape": url.PathEscape,
	// local is a stored task ID or alert subject without its namespace.
	"local": dt.LocalName,
	// sessionLink is the page of an alert's session subject (namespace
	// removed), "" for a task's.
	"sessionLink": func(subject string) string {
		if q, s, ok := sessionOf(subject); ok {
			return sessionPath(q, s)
		}
		return ""
	},
	"sessionPath":  sessionPath,
	"anchor":       anchor,
	"countCap":     func() int { return countCap },
	"add":          func(a, b float64) float64 { return a + b },
	"half":         func(a float64) float64 { return a / 2 },
	"dur":          roundDur,
	"sessionStory": sessionStory,
}

// prettyJSON indents a JSON document; anything else is shown as text.
func prettyJSON(b []byte) string {
	if len(b) == 0 {
		return "(none)"
	}
	var out bytes.Buffer
	if json.Indent(&out, b, "", "  ") == nil {
		return out.String()
	}
	return string(b)
}

// when formats a time (or a *time.Time, nil as "-") to the second, UTC.
func when(v any) string {
	switch t := v.(type) {
	case time.Time:
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	case *time.Time:
		if t == nil {
			return "-"
		}
		return when(*t)
	}
	return fmt.Sprint(v)
}

type overviewData struct {
	Global bool // Counts and Active are set (they cover every namespace)
	// Counts are the last counts by state (nil: being counted), read at
	// CountedAt.
	Counts      map[dt.ProcessState]int
	CountedAt   time.Time
	States      []dt.ProcessState
	Active      int
	OpenAlerts  int
	MoreAlerts  bool
	Queues      int
	MoreQueues  bool
	InstanceID  string
	Supervising int64
	// Charts are the throughput and latency of the last hour (Global).
	Charts *charts
	// Leader is the supervisor leader as the store says (nil: none yet).
	Leader *drover.Leader
	// Depths are the depths of the first depthQueues queues.
	Depths []queueDepth
	// Instances are the live instances (Global).
	Instances []drover.Instance
	// Remote are the remote agents and their calls in flight (Global),
	// counted among the first heldShown held tasks (RemoteCapped: more).
	Remote       []*agentView
	RemoteCapped bool
}

func (c *Console) overview(ctx context.Context, r *http.Request, v *viewer) (string, string, any, error) {
	d := &overviewData{States: states, InstanceID: c.d.InstanceID(), Supervising: c.d.SupervisorTerm()}
	if d.Global = !v.id.Confined(); d.Global {
		// The counts cover every namespace: not for a namespace's token.
		var err error
		d.Counts, d.CountedAt = c.stateCountsNow(ctx)
		if d.Active, err = c.d.Active(ctx); err != nil {
			return "", "", nil, err
		}
		now := c.clock.Now()
		fs, err := c.d.Finished(ctx, now.Add(-chartMinutes*time.Minute), chartTasks)
		if err != nil {
			return "", "", nil, err
		}
		d.Charts = buildCharts(fs, now)
	}
	var err error
	if d.Leader, err = c.d.SupervisorLeader(ctx); err != nil {
		return "", "", nil, err
	}
	if d.Global {
		if d.Instances, err = c.d.Instances(ctx, instancesShown); err != nil {
			return "", "", nil, err
		}
		if d.Remote, d.RemoteCapped, err = c.remoteInFlight(ctx, v); err != nil {
			return "", "", nil, err
		}
	}
	alerts, next, err := c.d.Alerts(ctx, drover.AlertQuery{Unacknowledged: true, Limit: alertsShown, Namespace: v.id.ListNamespace()})
	if err != nil {
		return "", "", nil, err
	}
	queues, err := c.opts.Queues.QueuesIn(ctx, v.id.ListNamespace(), "", queuesCounted+1)
	if err != nil {
		return "", "", nil, err
	}
	d.OpenAlerts, d.MoreAlerts = len(alerts), next != 0
	d.Queues, d.MoreQueues = min(len(queues), queuesCounted), len(queues) > queuesCounted
	for _, q := range queues[:min(len(queues), depthQueues)] {
		dp, err := c.opts.Queues.Depth(ctx, q.Name, depthSessions)
		if err != nil {
			return "", "", nil, err
		}
		d.Depths = append(d.Depths, queueDepth{Name: dt.LocalName(q.Name), Depth: dp})
	}
	return "overview", "Overview", d, nil
}

type tasksData struct {
	Workflow, State, ID, Key, From, Before, After string
	Tasks                                         []*drover.Task
	Next                                          string
}

// timeForm is how the task list's time range is written: the value of
// an <input type="datetime-local">, read as UTC.
const timeForm = "2006-01-02T15:04"

// formTime reads a time of the task list's range ("" is no bound).
func formTime(name, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	for _, layout := range []string{timeForm, timeForm + ":05", time.RFC3339} {
		if t, err := time.ParseInLocation(layout, v, time.UTC); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%w: %s %q is not a time like 2026-01-02T15:04 (UTC)", drover.ErrInvalidInput, name, v)
}

// tasks lists tasks by ID with keyset pagination: ?workflow=, ?state=,
// ?key= (an ordering key), ?from= and ?before= (last updated in
// [from, before), UTC), ?id= (an ID or the start of IDs), ?after= (the
// last ID of the previous page). It reads one page of the index at a
// time, never a count.
func (c *Console) tasks(ctx context.Context, r *http.Request, v *viewer) (string, string, any, error) {
	q := r.URL.Query()
	d := &tasksData{Workflow: strings.TrimSpace(q.Get("workflow")), State: q.Get("state"), ID: strings.TrimSpace(q.Get("id")),
		Key: strings.TrimSpace(q.Get("key")), From: strings.TrimSpace(q.Get("from")), Before: strings.TrimSpace(q.Get("before")), After: q.Get("after")}
	// A namespace's keys are stored qualified, as its IDs are.
	p := drover.ListParams{Workflow: d.Workflow, OrderingKey: dt.QualifyOrderingKey(v.id.ListNamespace(), d.Key), Limit: pageSize + 1, Namespace: v.id.ListNamespace()}
	var err error
	if p.UpdatedFrom, err = formTime("from", d.From); err != nil {
		return "", "", nil, err
	}
	if p.UpdatedBefore, err = formTime("before", d.Before); err != nil {
		return "", "", nil, err
	}
	if d.After != "" {
		p.AfterID = v.id.Qualify(d.After)
	}
	prefix := v.id.Qualify(d.ID)
	if d.State != "" {
		st := dt.ProcessState(d.State)
		if !st.Valid() {
			return "", "", nil, fmt.Errorf("%w: unknown state %q", drover.ErrInvalidInput, d.State)
		}
		p.States = []dt.ProcessState{st}
	}
	// IDs starting with d.ID follow d.ID itself in ID order: the page
	// starts at d.ID and ends at the first ID without the prefix.
	if d.ID != "" && d.After == "" {
		t, err := c.d.Task(ctx, prefix)
		switch {
		case err == nil && matches(t, p):
			d.Tasks = append(d.Tasks, t)
		case err != nil && !errors.Is(err, drover.ErrTaskNotFound) && !errors.Is(err, drover.ErrInvalidInput) && !errors.Is(err, drover.ErrInvalidTaskID):
			return "", "", nil, err
		}
		p.AfterID = prefix
	}
	ts, err := c.d.Tasks(ctx, p)
	if err != nil {
		return "", "", nil, err
	}
	for _, t := range ts {
		if d.ID != "" && !strings.HasPrefix(t.ID, prefix) {
			break
		}
		d.Tasks = append(d.Tasks, t)
	}
	if len(d.Tasks) > pageSize {
		d.Tasks = d.Tasks[:pageSize]
		d.Next = dt.LocalName(d.Tasks[pageSize-1].ID)
	}
	return "tasks", "Tasks", d, nil
}

// matches reports whether t passes the filters of p other than the ID.
func matches(t *drover.Task, p drover.ListParams) bool {
	switch {
	case p.Workflow != "" && t.Workflow != p.Workflow,
		p.OrderingKey != "" && t.OrderingKey != p.OrderingKey,
		!p.UpdatedFrom.IsZero() && t.UpdatedAt.Before(p.UpdatedFrom),
		!p.UpdatedBefore.IsZero() && !t.UpdatedAt.Before(p.UpdatedBefore):
		return false
	}
	return len(p.States) == 0 || t.ProcessState == p.States[0]
}

type taskData struct {
	Task    *drover.Task
	Story   string
	Events  []*drover.Event
	More    bool
	Actions actions
	// Timeline pictures every attempt (nil before the first dispatch).
	Timeline *timeline
	// Live is the page's stream of changes ("" when the history shown is
	// cut short).
	Live string
	// FromHere offers a resubmit from each step (an operator, a task
	// resubmittable, not compensated: that one restarts from step 0).
	FromHere bool
	// Groups are the task's parallel groups by the index of their first
	// branch, drawn around their branches.
	Groups map[int]*groupView
}

// groupView is a parallel group of a task on its page.
type groupView struct {
	Name              string
	First, Last, Size int
	Done              int // branches Processed
	Join              int // the step after the group; 0 when the group is last
}

// groups finds the parallel groups of t's steps.
func groups(t *drover.Task) map[int]*groupView {
	out := map[int]*groupView{}
	var cur *groupView
	for i := range t.Steps {
		s := &t.Steps[i]
		if cur != nil && cur.Name != s.Group {
			cur.Join, cur = s.Index, nil
		}
		if s.Group == "" {
			continue
		}
		if cur == nil {
			cur = &groupView{Name: s.Group, First: s.Index}
			out[s.Index] = cur
		}
		cur.Last, cur.Size = s.Index, cur.Size+1
		if s.ProcessState == dt.Processed {
			cur.Done++
		}
	}
	return out
}

// actions are the operator actions a task's state allows.
// actions are what an operator may do to a task; Signal names the signal
// its current step waits for ("" when it waits for none).
type actions struct {
	Resubmit, Cancel bool
	Signal           string
}

func allowed(t *drover.Task) actions {
	switch t.ProcessState {
	case dt.Error, dt.Cancelled, dt.Compensated:
		return actions{Resubmit: true}
	case dt.Pending, dt.Processing, dt.Compensating:
		a := actions{Cancel: true}
		if s := stepAt(t, t.CurrentStep); t.ProcessState == dt.Processing && s != nil && s.Waiting() {
			a.Signal = s.Signal
		}
		return a
	}
	return actions{}
}

// eventsShown caps the history shown on a task's page.
const eventsShown = 500

func (c *Console) loadTask(ctx context.Context, r *http.Request, v *viewer) (*drover.Task, error) {
	t, err := c.d.Task(ctx, v.id.Qualify(r.PathValue("id")))
	if errors.Is(err, drover.ErrTaskNotFound) {
		return nil, fmt.Errorf("task %q not found: %w", r.PathValue("id"), err)
	}
	return t, err
}

func (c *Console) task(ctx context.Context, r *http.Request, v *viewer) (string, string, any, error) {
	t, err := c.loadTask(ctx, r, v)
	if err != nil {
		return "", "", nil, err
	}
	evs, err := c.d.Events(ctx, drover.EventQuery{TaskID: t.ID, Limit: eventsShown + 1})
	if err != nil {
		return "", "", nil, err
	}
	d := &taskData{Task: t, Events: evs, Actions: allowed(t), Groups: groups(t)}
	d.FromHere = v.id.Operator() && d.Actions.Resubmit && t.ProcessState != dt.Compensated
	if len(evs) > eventsShown {
		d.Events, d.More = evs[:eventsShown], true
	}
	d.Story = explain(t, d.Events)
	d.Timeline = buildTimeline(t, d.Events, d.More, c.clock.Now())
	if !d.More { // a history cut short has no last event to follow from
		var last int64
		if n := len(d.Events); n > 0 {
			last = d.Events[n-1].ID
		}
		d.Live = liveURL(dt.LocalName(t.ID), last)
	}
	return "task", "Task " + dt.LocalName(t.ID), d, nil
}

type confirmData struct {
	Task     *drover.Task
	Story    string
	What     string // what the action will do
	FromStep *int   // resubmit from this step (nil: from the failed one)
}

// fromStep reads the step a resubmit starts from: the query's "from" on
// the confirmation page, the form's "from_step" on the action; nil when
// absent.
func fromStep(v string) (*int, error) {
	if v == "" {
		return nil, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return nil, fmt.Errorf("%w: step %q is not a step index (0, 1, ...)", drover.ErrInvalidInput, v)
	}
	return &n, nil
}

func (c *Console) confirmResubmit(ctx context.Context, r *http.Request, v *viewer) (string, string, any, error) {
	t, err := c.loadTask(ctx, r, v)
	if err != nil {
		return "", "", nil, err
	}
	if !allowed(t).Resubmit {
		return "", "", nil, fmt.Errorf("%w: task %s is %s; only Error, Cancelled and Compensated tasks can be resubmitted", drover.ErrNotResubmittable, dt.LocalName(t.ID), t.ProcessState)
	}
	from, err := fromStep(r.URL.Query().Get("from"))
	if err != nil {
		return "", "", nil, err
	}
	what, err := resubmitWhat(t, from)
	if err != nil {
		return "", "", nil, err
	}
	return "confirm_resubmit", "Resubmit " + dt.LocalName(t.ID), &confirmData{Task: t, Story: explain(t, nil), What: what, FromStep: from}, nil
}

// resubmitWhat says what a resubmit of t from step from (nil: the failed
// one) will do, or why it cannot be done.
func resubmitWhat(t *drover.Task, from *int) (string, error) {
	if t.ProcessState == dt.Compensated {
		if from != nil && *from != 0 {
			return "", fmt.Errorf("%w: a compensated task runs again from step 0 only (its completed steps were undone)", drover.ErrNoSuchStep)
		}
		return "The task goes back to Pending and runs again from step 0 as a new run: its completed steps were undone, so every step gets a new idempotency key and calls its service again.", nil
	}
	if from != nil {
		s := stepAt(t, *from)
		if s == nil {
			return "", fmt.Errorf("%w: task %s has no step %d (its steps are 0 to %d)", drover.ErrNoSuchStep, dt.LocalName(t.ID), *from, t.StepCount-1)
		}
		return fmt.Sprintf("The task goes back to Pending and runs again from step %d %q: that step and every later one go back to Pending and call their services again, with the same idempotency keys (step %d: %s). Steps before it keep their results.", s.Index, s.Name, s.Index, s.IdempotencyKey), nil
	}
	s := failedStep(t)
	if s == nil {
		return "The task goes back to Pending and runs again from its current step, with the same idempotency keys.", nil
	}
	return fmt.Sprintf("The task goes back to Pending and runs again from step %d %q, with the same idempotency key (%s): a service that already applied the call recognises the retry. Steps before it keep their results.", s.Index, s.Name, s.IdempotencyKey), nil
}

func (c *Console) confirmCancel(ctx context.Context, r *http.Request, v *viewer) (string, string, any, error) {
	t, err := c.loadTask(ctx, r, v)
	if err != nil {
		return "", "", nil, err
	}
	if !allowed(t).Cancel {
		return "", "", nil, fmt.Errorf("%w: task %s is %s already", drover.ErrAlreadyFinal, dt.LocalName(t.ID), t.ProcessState)
	}
	what := "The task becomes Cancelled, a final state: no further step starts and it is not compensated."
	if t.ProcessState == dt.Processing {
		what += " The call in flight is not interrupted, but its reply is discarded."
	}
	return "confirm_cancel", "Cancel " + dt.LocalName(t.ID), &confirmData{Task: t, Story: explain(t, nil), What: what}, nil
}

func (c *Console) resubmit(ctx context.Context, r *http.Request, v *viewer) (string, string, error) {
	id := r.PathValue("id")
	from, err := fromStep(r.PostFormValue("from_step"))
	if err != nil {
		return "", "", err
	}
	if _, err := c.d.Resubmit(ctx, v.id.Qualify(id), &drover.ResubmitOptions{FromStep: from, Actor: v.id.Actor()}); err != nil {
		return "", "", err
	}
	return "/tasks/" + url.PathEscape(id), "Resubmitted: the task is Pending again.", nil
}

func (c *Console) cancel(ctx context.Context, r *http.Request, v *viewer) (string, string, error) {
	id := r.PathValue("id")
	reason := strings.TrimSpace(r.PostFormValue("reason"))
	if reason == "" {
		return "", "", fmt.Errorf("%w: give a reason for cancelling", drover.ErrInvalidInput)
	}
	if _, err := c.d.CancelAs(ctx, v.id.Qualify(id), reason, v.id.Actor()); err != nil {
		return "", "", err
	}
	return "/tasks/" + url.PathEscape(id), "Cancelled.", nil
}

// signal sends the signal of the task page's form: its name, an optional
// ID and an optional JSON payload, as the viewer.
func (c *Console) signal(ctx context.Context, r *http.Request, v *viewer) (string, string, error) {
	id := r.PathValue("id")
	payload := strings.TrimSpace(r.PostFormValue("payload"))
	res, err := c.d.SendSignal(ctx, drover.SignalParams{TaskID: v.id.Qualify(id), Name: r.PostFormValue("name"),
		ID: strings.TrimSpace(r.PostFormValue("signal_id")), Payload: []byte(payload), Sender: v.id.Actor()})
	if err != nil {
		return "", "", err
	}
	done := "Signal sent: the waiting step completed and the task goes on."
	switch {
	case res.Duplicate:
		done = "A signal with this ID was sent before: this one was ignored."
	case !res.Delivered:
		done = "Signal kept: no step waits for it now (its deadline may have passed); the next step that waits for it takes it."
	}
	return "/tasks/" + url.PathEscape(id), done, nil
}

// alertKinds are the kinds of alert the Alerts page filters on.
var alertKinds = []dt.EventType{dt.EventStepFailed, dt.EventStepWaiting, dt.EventError, dt.EventSessionBlocked}

type alertsData struct {
	Alerts []drover.Alert
	Kinds  []dt.EventType
	Kind   string // the kind shown ("" every kind)
	All    bool   // acknowledged alerts shown too
	AllQ   string // All as the query's value ("1" or "")
	After  string
	Next   string // the after= of the next page ("" on the last)
}

// alerts lists the alerts in ID order, alertsShown read at a time
// (?after= the last ID read): the open ones, or with ?all=1 the
// acknowledged ones too, of one kind with ?kind=.
func (c *Console) alerts(ctx context.Context, r *http.Request, v *viewer) (string, string, any, error) {
	q := r.URL.Query()
	d := &alertsData{Kinds: alertKinds, Kind: q.Get("kind"), All: q.Get("all") == "1", After: q.Get("after")}
	var after int64
	if d.After != "" {
		var err error
		if after, err = strconv.ParseInt(d.After, 10, 64); err != nil || after < 0 {
			return "", "", nil, fmt.Errorf("%w: after %q is not an alert ID", drover.ErrInvalidInput, d.After)
		}
	}
	if d.Kind != "" && !slices.Contains(alertKinds, dt.EventType(d.Kind)) {
		return "", "", nil, fmt.Errorf("%w: no kind of alert %q", drover.ErrInvalidInput, d.Kind)
	}
	alerts, next, err := c.d.Alerts(ctx, drover.AlertQuery{AfterID: after, Unacknowledged: !d.All, Limit: alertsShown, Namespace: v.id.ListNamespace()})
	if err != nil {
		return "", "", nil, err
	}
	for _, a := range alerts {
		if d.Kind == "" || string(a.Type) == d.Kind {
			d.Alerts = append(d.Alerts, a)
		}
	}
	if next != 0 {
		d.Next = strconv.FormatInt(next, 10)
	}
	if d.All {
		d.AllQ = "1"
	}
	return "alerts", "Alerts", d, nil
}

// ackMany acknowledges the alerts checked on the Alerts page (the form's
// "id" values), each as the single acknowledge does, in order; it stops
// at the first that is not found (those before it stay acknowledged).
func (c *Console) ackMany(ctx context.Context, r *http.Request, v *viewer) (string, string, error) {
	ids := r.PostForm["id"]
	if len(ids) == 0 {
		return "", "", fmt.Errorf("%w: check the alerts to acknowledge", drover.ErrInvalidInput)
	}
	if len(ids) > alertsShown {
		return "", "", fmt.Errorf("%w: at most %d alerts at once", drover.ErrInvalidInput, alertsShown)
	}
	var nums []int64
	for _, s := range ids {
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil || id < 1 {
			return "", "", fmt.Errorf("%w: alert ID %q is not a positive number", drover.ErrInvalidInput, s)
		}
		nums = append(nums, id)
	}
	for _, id := range nums {
		if _, err := c.d.AckAlertIn(ctx, v.id.ListNamespace(), id, v.id.Actor()); err != nil {
			if errors.Is(err, drover.ErrAlertNotFound) {
				return "", "", fmt.Errorf("%w: %w", drover.ErrTaskNotFound, err)
			}
			return "", "", err
		}
	}
	return "/alerts", fmt.Sprintf("%d alert%s acknowledged.", len(nums), plural(len(nums))), nil
}

func (c *Console) ack(ctx context.Context, r *http.Request, v *viewer) (string, string, error) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id < 1 {
		return "", "", fmt.Errorf("%w: alert ID %q is not a positive number", drover.ErrInvalidInput, r.PathValue("id"))
	}
	if _, err := c.d.AckAlertIn(ctx, v.id.ListNamespace(), id, v.id.Actor()); err != nil {
		if errors.Is(err, drover.ErrAlertNotFound) {
			return "", "", fmt.Errorf("%w: %w", drover.ErrTaskNotFound, err)
		}
		return "", "", err
	}
	return "/alerts", fmt.Sprintf("Alert %d acknowledged.", id), nil
}

func (d *taskData) live() string { return d.Live }
