package backend

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/droverapi"
	"github.com/drover-run/drover/droverclient"
	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/clicore"
	"github.com/drover-run/drover/internal/orders"
	"github.com/drover-run/drover/internal/workflowdef"
	"github.com/drover-run/drover/store"
)

// Tasks is where the task and alert commands (submit, status, list,
// resubmit, cancel, events, alerts) read and change tasks: the store through
// a drover.Client, or a server's HTTP API. Errors come back explained for
// the user.
type Tasks interface {
	// Submit submits a task; with full the answer has its steps.
	// stepTimeout and maxInput apply to the local path only (the server
	// has its own).
	Submit(ctx context.Context, workflow string, input []byte, opts *drover.SubmitOptions, stepTimeout time.Duration, maxInput int, full bool) (*drover.Task, error)
	Task(ctx context.Context, id string) (*drover.Task, error)
	// TaskEvents is every event of one task.
	TaskEvents(ctx context.Context, id string) ([]*drover.Event, error)
	// Tasks is one page of tasks and the ID to pass as AfterID for the
	// next ("": none).
	Tasks(ctx context.Context, p drover.ListParams) ([]*drover.Task, string, error)
	// Resubmit and Cancel change a task; with full the answer has its
	// steps.
	Resubmit(ctx context.Context, id string, opts *drover.ResubmitOptions, full bool) (*drover.Task, error)
	Cancel(ctx context.Context, id, reason string, full bool) (*drover.Task, error)
	// Events lists events (with AlertsOnly and no task: alerts, paged).
	Events(ctx context.Context, q drover.EventQuery) ([]*drover.Event, error)
	// Follow calls fn for each new event until ctx ends or, with a task,
	// the task is final.
	Follow(ctx context.Context, s drover.Subscription, fn func(*drover.Event) error) error
	// Alerts is one page of alerts, in the API's shape, and the ID to pass
	// as AfterID for the next (0: none); AckAlert acknowledges one.
	Alerts(ctx context.Context, q drover.AlertQuery) ([]droverapi.Alert, int64, error)
	AckAlert(ctx context.Context, id int64) (*droverapi.Alert, error)
	Close()
}

// OpenTasks opens the backend of the task commands: remote when remote is
// not nil, else the store of env's --db, which must be migrated.
func OpenTasks(ctx context.Context, env *clicore.Env, remote *Remote) (Tasks, error) {
	if remote != nil {
		return &remoteTasks{remote}, nil
	}
	drv, err := env.OpenStore(ctx, clicore.OpenOpts{LockTimeout: true})
	if err != nil {
		return nil, err
	}
	return &localTasks{env: env, drv: drv}, nil
}

// localTasks runs the task commands on the store.
type localTasks struct {
	env *clicore.Env
	drv *clicore.Database
	c   *drover.Client // made on first use; Submit makes its own
}

func (l *localTasks) Close() { l.drv.Close() }

func (l *localTasks) client() (*drover.Client, error) {
	if l.c == nil {
		c, err := drover.New(clientConfig(l.drv.Driver, 0, 0))
		if err != nil {
			return nil, err
		}
		l.c = c
	}
	return l.c, nil
}

func (l *localTasks) Submit(ctx context.Context, workflow string, input []byte, opts *drover.SubmitOptions, stepTimeout time.Duration, maxInput int, full bool) (*drover.Task, error) {
	c, err := submitClient(ctx, l.env, l.drv, workflow, maxInput, stepTimeout)
	if err != nil {
		return nil, err
	}
	t, err := c.Submit(ctx, workflow, input, opts)
	if err != nil {
		return nil, l.drv.StoreErr(err)
	}
	if full {
		return c.Task(ctx, t.ID)
	}
	return t, nil
}

func (l *localTasks) Task(ctx context.Context, id string) (*drover.Task, error) {
	c, err := l.client()
	if err != nil {
		return nil, err
	}
	t, err := c.Task(ctx, id)
	return t, l.drv.StoreErr(err)
}

func (l *localTasks) TaskEvents(ctx context.Context, id string) ([]*drover.Event, error) {
	c, err := l.client()
	if err != nil {
		return nil, err
	}
	return clicore.AllEvents(ctx, c, drover.EventQuery{TaskID: id})
}

func (l *localTasks) Tasks(ctx context.Context, p drover.ListParams) ([]*drover.Task, string, error) {
	c, err := l.client()
	if err != nil {
		return nil, "", err
	}
	ts, err := c.Tasks(ctx, p)
	if err != nil {
		return nil, "", l.drv.StoreErr(err)
	}
	next := ""
	if len(ts) == p.Limit {
		next = ts[len(ts)-1].ID
	}
	return ts, next, nil
}

// changed is the answer of a resubmit or cancel: with full, re-read with
// its steps.
func (l *localTasks) changed(ctx context.Context, c *drover.Client, t *drover.Task, err error, full bool) (*drover.Task, error) {
	if err != nil {
		return nil, l.drv.StoreErr(err)
	}
	if full {
		return c.Task(ctx, t.ID)
	}
	return t, nil
}

func (l *localTasks) Resubmit(ctx context.Context, id string, opts *drover.ResubmitOptions, full bool) (*drover.Task, error) {
	c, err := l.client()
	if err != nil {
		return nil, err
	}
	t, err := c.Resubmit(ctx, id, opts)
	return l.changed(ctx, c, t, err, full)
}

func (l *localTasks) Cancel(ctx context.Context, id, reason string, full bool) (*drover.Task, error) {
	c, err := l.client()
	if err != nil {
		return nil, err
	}
	t, err := c.Cancel(ctx, id, reason)
	return l.changed(ctx, c, t, err, full)
}

func (l *localTasks) Events(ctx context.Context, q drover.EventQuery) ([]*drover.Event, error) {
	c, err := l.client()
	if err != nil {
		return nil, err
	}
	evs, err := c.Events(ctx, q)
	return evs, l.drv.StoreErr(err)
}

func (l *localTasks) Follow(ctx context.Context, s drover.Subscription, fn func(*drover.Event) error) error {
	c, err := l.client()
	if err != nil {
		return err
	}
	s.UntilFinal = true
	for ev := range c.Subscribe(ctx, s) {
		if err := fn(ev); err != nil {
			return err
		}
	}
	return nil // interrupted, or the task is final: a normal end of --follow
}

func (l *localTasks) Alerts(ctx context.Context, q drover.AlertQuery) ([]droverapi.Alert, int64, error) {
	c, err := l.client()
	if err != nil {
		return nil, 0, err
	}
	page, next, err := c.Alerts(ctx, q)
	if err != nil {
		return nil, 0, l.drv.StoreErr(err)
	}
	var out []droverapi.Alert
	for _, a := range page {
		out = append(out, *apiAlert(a))
	}
	return out, next, nil
}

func (l *localTasks) AckAlert(ctx context.Context, id int64) (*droverapi.Alert, error) {
	c, err := l.client()
	if err != nil {
		return nil, err
	}
	a, err := c.AckAlert(ctx, id, "cli")
	if errors.Is(err, drover.ErrAlertNotFound) {
		return nil, fmt.Errorf("alert %d not found (see 'drover alerts')", id)
	}
	if err != nil {
		return nil, l.drv.StoreErr(err)
	}
	return apiAlert(a), nil
}

// remoteTasks runs the task commands against a server.
type remoteTasks struct{ r *Remote }

func (r *remoteTasks) Close() {}

func (r *remoteTasks) Submit(ctx context.Context, workflow string, input []byte, opts *drover.SubmitOptions, _ time.Duration, _ int, _ bool) (*drover.Task, error) {
	req := droverapi.SubmitRequest{Workflow: workflow, Input: input, ID: opts.ID,
		OrderingKey: opts.OrderingKey, CallbackURL: opts.CallbackURL, CallbackEvents: opts.CallbackEvents,
		Priority: opts.Priority}
	if !opts.RunAt.IsZero() {
		req.RunAt = &opts.RunAt
	}
	if opts.Delay != 0 {
		ms := opts.Delay.Milliseconds()
		req.DelayMS = &ms
	}
	t, _, err := r.r.Client.SubmitTask(ctx, req)
	if err != nil {
		return nil, r.r.Err(err)
	}
	return remoteTask(t), nil
}

func (r *remoteTasks) Task(ctx context.Context, id string) (*drover.Task, error) {
	t, err := r.r.Client.Task(ctx, id)
	if err != nil {
		return nil, r.r.Err(err)
	}
	return remoteTask(t), nil
}

func (r *remoteTasks) TaskEvents(ctx context.Context, id string) ([]*drover.Event, error) {
	evs, err := r.r.Client.Events(ctx, droverclient.EventParams{TaskID: id})
	if err != nil {
		return nil, r.r.Err(err)
	}
	out := []*drover.Event{}
	for i := range evs {
		out = append(out, remoteEvent(&evs[i]))
	}
	return out, nil
}

func (r *remoteTasks) Tasks(ctx context.Context, p drover.ListParams) ([]*drover.Task, string, error) {
	var names []string
	for _, st := range p.States {
		names = append(names, string(st))
	}
	page, err := r.r.Client.Tasks(ctx, droverclient.ListParams{States: names, Workflow: p.Workflow, After: p.AfterID, Limit: p.Limit,
		OrderingKey: p.OrderingKey, UpdatedFrom: p.UpdatedFrom, UpdatedBefore: p.UpdatedBefore})
	if err != nil {
		return nil, "", r.r.Err(err)
	}
	var ts []*drover.Task
	for i := range page.Tasks {
		ts = append(ts, remoteTask(&page.Tasks[i]))
	}
	return ts, page.NextAfter, nil
}

func (r *remoteTasks) Resubmit(ctx context.Context, id string, opts *drover.ResubmitOptions, _ bool) (*drover.Task, error) {
	t, err := r.r.Client.Resubmit(ctx, id, &droverapi.ResubmitRequest{FromStep: opts.FromStep})
	if err != nil {
		return nil, r.r.Err(err)
	}
	return remoteTask(t), nil
}

func (r *remoteTasks) Cancel(ctx context.Context, id, reason string, _ bool) (*drover.Task, error) {
	t, err := r.r.Client.Cancel(ctx, id, reason)
	if err != nil {
		return nil, r.r.Err(err)
	}
	return remoteTask(t), nil
}

func (r *remoteTasks) Events(ctx context.Context, q drover.EventQuery) ([]*drover.Event, error) {
	var evs []*drover.Event
	if q.AlertsOnly && q.TaskID == "" {
		// Alerts have an exact, paged listing.
		after := q.AfterID
		for len(evs) < q.Limit {
			page, err := r.r.Client.Alerts(ctx, droverclient.AlertParams{After: after, Limit: min(q.Limit-len(evs), 1000)})
			if err != nil {
				return nil, r.r.Err(err)
			}
			for _, a := range page.Alerts {
				evs = append(evs, &drover.Event{ID: a.ID, TaskID: a.Subject, StepIndex: a.StepIndex, Type: dt.EventType(a.Type),
					State: dt.ProcessState(a.State), Alert: true, Actor: a.Actor, Attempt: a.Attempt, Message: a.Message, CreatedAt: a.CreatedAt})
			}
			if page.NextAfter == 0 {
				break
			}
			after = page.NextAfter
		}
		return evs, nil
	}
	list, err := r.r.Client.Events(ctx, droverclient.EventParams{TaskID: q.TaskID, AlertsOnly: q.AlertsOnly, After: q.AfterID, Limit: q.Limit})
	if err != nil {
		return nil, r.r.Err(err)
	}
	for i := range list {
		evs = append(evs, remoteEvent(&list[i]))
	}
	return evs, nil
}

func (r *remoteTasks) Follow(ctx context.Context, s drover.Subscription, fn func(*drover.Event) error) error {
	err := r.r.Client.FollowEvents(ctx, droverclient.FollowOptions{TaskID: s.TaskID, AlertsOnly: s.AlertsOnly, After: s.AfterID,
		OnReconnect: r.r.OnReconnect},
		func(ev *droverapi.Event) error { return fn(remoteEvent(ev)) })
	if ctx.Err() != nil {
		return nil // interrupted: a normal end of --follow
	}
	return r.r.Err(err) // nil when the task is final
}

func (r *remoteTasks) Alerts(ctx context.Context, q drover.AlertQuery) ([]droverapi.Alert, int64, error) {
	page, err := r.r.Client.Alerts(ctx, droverclient.AlertParams{After: q.AfterID, Limit: q.Limit, Unacknowledged: q.Unacknowledged})
	if err != nil {
		return nil, 0, r.r.Err(err)
	}
	return page.Alerts, page.NextAfter, nil
}

func (r *remoteTasks) AckAlert(ctx context.Context, id int64) (*droverapi.Alert, error) {
	a, err := r.r.Client.AckAlert(ctx, id)
	if err != nil {
		return nil, r.r.Err(err)
	}
	return a, nil
}

// submitClient opens the store and a client that can submit workflow: the
// latest stored version of a declarative workflow or, when no declarative
// workflow has that name, the orders demo's workflow (whose input it checks).
func submitClient(ctx context.Context, env *clicore.Env, drv *clicore.Database, workflow string, maxInput int, stepTimeout time.Duration) (*drover.Client, error) {
	fail := func(err error) (*drover.Client, error) { return nil, err }
	reg, err := workflowdef.NewRegistry(workflowdef.Options{Store: drv.Driver, Logger: env.Logger(slog.LevelWarn)})
	if err == nil {
		err = reg.LoadStored(ctx)
	}
	if err != nil {
		return fail(drv.StoreErr(err))
	}
	var cfg drover.Config
	switch _, declared := reg.Current(workflow); {
	case declared:
		cfg = drover.Config{Store: drv.Driver, MaxInputBytes: maxInput, Workflows: reg.Workflows(),
			ExternalAgents: append(reg.ExternalAgents(), workflowdef.HTTPAgentName)}
	case workflow == orders.WorkflowName:
		cfg = clientConfig(drv.Driver, maxInput, stepTimeout)
	default:
		var known []string
		for _, w := range reg.Workflows() {
			known = append(known, w.Name)
		}
		known = append(known, orders.WorkflowName+" (the demo's, run by \"drover server --demo\")")
		return fail(fmt.Errorf("%w %q (this database knows: %s)", drover.ErrUnknownWorkflow, workflow, strings.Join(known, ", ")))
	}
	return drover.New(cfg)
}

// apiAlert is a stored alert in the API's shape, so both paths print the
// same.
func apiAlert(a drover.Alert) *droverapi.Alert {
	e := a.Event
	out := &droverapi.Alert{ID: e.ID, Subject: e.TaskID, StepIndex: e.StepIndex, Type: string(e.Type), State: string(e.State),
		Actor: e.Actor, Attempt: e.Attempt, Message: e.Message, CreatedAt: e.CreatedAt}
	if a.Ack != nil {
		out.Acknowledged = &droverapi.Ack{EventID: a.Ack.EventID, Actor: a.Ack.Actor, At: a.Ack.At}
	}
	return out
}

// clientConfig is the base client configuration of the command line: it
// knows the orders workflow, whose agents run in a server.
func clientConfig(drv store.Driver, maxInput int, stepTimeout time.Duration) drover.Config {
	return drover.Config{
		Store:          drv,
		Workflows:      []drover.Workflow{orders.Workflow(orders.Options{StepTimeout: stepTimeout})},
		ExternalAgents: orders.AgentNames(),
		MaxInputBytes:  maxInput,
	}
}
