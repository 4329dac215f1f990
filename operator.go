package drover

import (
	"context"
	"errors"
	"fmt"
	"time"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/flow"
	"github.com/drover-run/drover/internal/instrument"
	"github.com/drover-run/drover/store"
)

// Task returns a task with all its steps.
func (c *Client) Task(ctx context.Context, id string) (*Task, error) {
	if err := checkTaskID(id); err != nil {
		return nil, err
	}
	// One snapshot: read apart, a step could be newer than its task (a
	// task Processing whose last step is already Processed).
	tasks, steps, err := c.store.Reader().TaskGetManyWithSteps(ctx, &store.TaskGetManyWithStepsParams{IDs: []string{id}})
	if err != nil {
		return nil, err
	}
	if len(tasks) == 0 {
		return nil, fmt.Errorf("task %q: %w", id, store.ErrNotFound)
	}
	t := tasks[0]
	for _, s := range steps {
		t.Steps = append(t.Steps, *s)
	}
	return t, nil
}

// ListParams filters Tasks. Zero values mean no filter.
type ListParams struct {
	States   []ProcessState
	Workflow string
	AfterID  string // keyset pagination
	Limit    int    // default 100
	// Namespace, when set, lists only that namespace's tasks (their IDs
	// as stored, "<namespace>/<ID>"); drovertype.DefaultNamespace: those
	// without a namespace. Default "": every task.
	Namespace string
	// OrderingKey, when set, lists only the tasks submitted with it.
	OrderingKey string
	// UpdatedFrom and UpdatedBefore, when not zero, list only the tasks
	// last updated at or after UpdatedFrom and before UpdatedBefore.
	UpdatedFrom, UpdatedBefore time.Time
}

// Tasks lists tasks (without steps) ordered by ID.
func (c *Client) Tasks(ctx context.Context, p ListParams) ([]*Task, error) {
	if p.Limit <= 0 {
		p.Limit = 100
	}
	for _, s := range p.States {
		if !s.Valid() {
			return nil, &stateError{s}
		}
	}
	if p.Workflow != "" {
		if err := dt.CheckName(ErrInvalidInput, "workflow", p.Workflow); err != nil {
			return nil, err
		}
	}
	if p.AfterID != "" {
		if err := checkTaskID(p.AfterID); err != nil {
			return nil, err
		}
	}
	if err := checkListNamespace(p.Namespace); err != nil {
		return nil, err
	}
	return c.store.Reader().TaskList(ctx, &store.TaskListParams{States: p.States, Workflow: p.Workflow, AfterID: p.AfterID, Limit: p.Limit, Namespace: p.Namespace,
		OrderingKey: p.OrderingKey, UpdatedFrom: p.UpdatedFrom, UpdatedBefore: p.UpdatedBefore})
}

// checkListNamespace checks the Namespace filter of a listing.
func checkListNamespace(ns string) error {
	if ns == dt.DefaultNamespace {
		return nil
	}
	return dt.CheckNamespace(ErrInvalidInput, ns)
}

type stateError struct{ s ProcessState }

func (e *stateError) Error() string {
	return "unknown process state " + string(e.s) + " (want Pending, Processing, Processed, Error, Compensating, Compensated or Cancelled)"
}
func (e *stateError) Unwrap() error { return ErrInvalidInput }

// Counts returns the number of tasks in each state.
func (c *Client) Counts(ctx context.Context) (map[ProcessState]int, error) {
	return c.store.Reader().TaskCountByState(ctx, &store.TaskCountByStateParams{})
}

// Active returns how many tasks are not final yet (Pending, Processing or
// Compensating): the depth of the work queue. It reads indexes only.
func (c *Client) Active(ctx context.Context) (int, error) {
	return c.store.Reader().TaskCountActive(ctx, &store.TaskCountActiveParams{})
}

// ActiveTasksOf returns how many tasks submitted with
// SubmitOptions.Submitter submitter are not final yet (Pending, Processing
// or Compensating), for a quota per submitter. It reads an index only.
func (c *Client) ActiveTasksOf(ctx context.Context, submitter string) (int, error) {
	if submitter == "" {
		return 0, fmt.Errorf("%w: ActiveTasksOf: an empty submitter", ErrInvalidInput)
	}
	return c.store.Reader().TaskCountActiveBySubmitter(ctx, &store.TaskCountActiveBySubmitterParams{Submitter: submitter})
}

// ActiveTasksIn returns how many tasks of namespace are not final yet
// (Pending, Processing or Compensating), for a quota per namespace. It
// reads an index of the namespaces' unfinished tasks only; the default
// namespace's tasks are not in it, so namespace must name another one.
func (c *Client) ActiveTasksIn(ctx context.Context, namespace string) (int, error) {
	if dt.StoredNamespace(namespace) == "" {
		return 0, fmt.Errorf("%w: ActiveTasksIn: the default namespace's tasks are not counted apart", ErrInvalidInput)
	}
	return c.store.Reader().TaskCountActive(ctx, &store.TaskCountActiveParams{Namespace: namespace})
}

// ResubmitOptions are optional settings of Resubmit.
type ResubmitOptions struct {
	// FromStep re-runs the task from this step index (steps from it on go
	// back to Pending). Nil: from the failed step.
	FromStep *int
	// Actor is recorded in the event history. Default "operator".
	Actor string
}

// Resubmit puts an Error or Cancelled task back to work after an operator
// fixed the cause. Idempotency keys stay the same, so a remote service
// that already applied a step recognises the retry.
//
// A Compensated task (its completed steps were undone) runs again from its
// first step as a new run: its steps get new idempotency keys (suffix
// "/run-N"), since the remote services already saw and undid the old ones
// and would otherwise answer the redo from their idempotency stores without
// doing it. Such a task cannot start from a later step.
func (c *Client) Resubmit(ctx context.Context, id string, opts *ResubmitOptions) (*Task, error) {
	if err := checkTaskID(id); err != nil {
		return nil, err
	}
	from, actor := -1, "operator"
	if opts != nil {
		if opts.FromStep != nil {
			from = *opts.FromStep
			if from < 0 {
				return nil, flow.ErrBadStep
			}
		}
		if opts.Actor != "" {
			actor = opts.Actor
		}
		if err := dt.CheckText(ErrInvalidInput, "actor", actor, 0); err != nil {
			return nil, err
		}
	}
	var t *Task
	err := c.store.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		var err error
		t, err = flow.Resubmit(ctx, x, id, actor, from, c.clock.Now())
		return err
	})
	if err != nil {
		return nil, err
	}
	c.wakeSchedulers()
	return t, nil
}

// MaxReasonBytes caps the reason of Cancel.
const MaxReasonBytes = 1000

// Cancel moves a non-final task to Cancelled. A call in flight is not
// interrupted, but its reply is discarded. The history records the actor
// "operator"; CancelAs names another.
func (c *Client) Cancel(ctx context.Context, id, reason string) (*Task, error) {
	return c.CancelAs(ctx, id, reason, "operator")
}

// CancelAs is Cancel with the actor recorded in the history (who cancelled
// the task: an operator's name, a token's). The reason must be valid UTF-8
// without NUL characters, at most MaxReasonBytes; another fails with
// ErrInvalidInput.
func (c *Client) CancelAs(ctx context.Context, id, reason, actor string) (*Task, error) {
	if err := checkTaskID(id); err != nil {
		return nil, err
	}
	if err := dt.CheckText(ErrInvalidInput, "reason", reason, MaxReasonBytes); err != nil {
		return nil, err
	}
	if err := dt.CheckText(ErrInvalidInput, "actor", actor, 0); err != nil {
		return nil, err
	}
	if actor == "" {
		actor = "operator"
	}
	var t *Task
	err := c.store.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		var err error
		t, err = flow.Cancel(ctx, x, id, actor, reason, c.clock.Now())
		return err
	})
	if err != nil {
		return nil, err
	}
	c.traceCancelled(t, actor)
	c.counters.Recorder.Observe([]instrument.Observation{{Kind: instrument.TaskFinished, Namespace: dt.NamespaceOf(t.ID),
		Workflow: t.Workflow, State: string(t.ProcessState), Duration: t.UpdatedAt.Sub(t.CreatedAt)}})
	if t.OrderingKey != "" {
		// The next task of its key may start now.
		c.wakeSchedulers()
	}
	return t, nil
}

// EventQuery filters Events.
type EventQuery struct {
	TaskID     string // "" for all tasks
	AlertsOnly bool
	AfterID    int64 // events with a greater ID
	Limit      int   // default 1000
	// Namespace, when set, reads only that namespace's events
	// (drovertype.DefaultNamespace: the default one's). Default "": all.
	Namespace string
}

// Events reads the durable event history in ID order.
func (c *Client) Events(ctx context.Context, q EventQuery) ([]*Event, error) {
	if q.TaskID != "" {
		if err := checkTaskID(q.TaskID); err != nil {
			return nil, err
		}
	}
	if q.Limit <= 0 {
		q.Limit = 1000
	}
	if err := checkListNamespace(q.Namespace); err != nil {
		return nil, err
	}
	return c.store.Reader().EventList(ctx, &store.EventListParams{TaskID: q.TaskID, AlertsOnly: q.AlertsOnly, AfterID: q.AfterID, Limit: q.Limit, Namespace: q.Namespace})
}

// Subscription selects what Subscribe delivers.
type Subscription struct {
	TaskID     string // "" for every task
	AlertsOnly bool   // only operator alerts
	// AfterID resumes after the last event ID the subscriber saw, so one
	// that reconnects misses nothing.
	AfterID int64
	// PollInterval is how often the history is read. Default 50ms.
	PollInterval time.Duration
	// UntilFinal, with TaskID, ends the subscription once the task is
	// final (Processed, Error, Compensated or Cancelled) and every event
	// recorded up to then was delivered, or once the task is gone. Without
	// it a subscription lasts until ctx ends: it also sees what happens to
	// a final task later (an alert's acknowledgement, a resubmission).
	UntilFinal bool
	// Namespace, when set, delivers only that namespace's events
	// (drovertype.DefaultNamespace: the default one's). Default "": all.
	Namespace string
}

// Subscribe streams events from the durable history, in order, until ctx
// ends (or, with UntilFinal, the task is final); then the channel closes.
// Delivery is at-least-once per subscription: keep the last ID you handled
// and pass it as AfterID when you resubscribe.
func (c *Client) Subscribe(ctx context.Context, s Subscription) <-chan *Event {
	if s.PollInterval <= 0 {
		s.PollInterval = 50 * time.Millisecond
	}
	untilFinal := s.UntilFinal && s.TaskID != ""
	ch := make(chan *Event, 64)
	go func() {
		defer close(ch)
		after := s.AfterID
		for {
			// The state is read before the events: once it is final, this
			// read of the history has every event up to it.
			final := false
			if untilFinal {
				t, err := c.store.Reader().TaskGet(ctx, &store.TaskGetParams{ID: s.TaskID})
				switch {
				case errors.Is(err, store.ErrNotFound):
					final = true // deleted (retention): nothing more comes
				case err != nil:
					if ctx.Err() == nil {
						c.log.Warn("subscribe: read the task", "task", s.TaskID, "err", err)
					}
				default:
					final = t.ProcessState.Final()
				}
			}
			evs, err := c.Events(ctx, EventQuery{TaskID: s.TaskID, AlertsOnly: s.AlertsOnly, AfterID: after, Limit: 1000, Namespace: s.Namespace})
			if err != nil && ctx.Err() == nil {
				c.log.Warn("subscribe: read events", "err", err)
			}
			for _, e := range evs {
				select {
				case ch <- e:
					after = e.ID
				case <-ctx.Done():
					return
				}
			}
			if len(evs) == 1000 {
				continue
			}
			if final && err == nil {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(s.PollInterval):
			}
		}
	}()
	return ch
}

// Wait blocks until the task is final (or ctx ends) and returns it with its steps.
func (c *Client) Wait(ctx context.Context, id string) (*Task, error) {
	for {
		// Last event ID first, then the state: a final event written in
		// between is then after `last` and reaches the subscription.
		last := int64(0)
		evs, err := c.Events(ctx, EventQuery{TaskID: id, Limit: 1 << 30})
		if err != nil {
			return nil, err
		}
		if len(evs) > 0 {
			last = evs[len(evs)-1].ID
		}
		t, err := c.Task(ctx, id)
		if err != nil {
			return nil, err
		}
		if t.ProcessState.Final() {
			return t, nil
		}
		sub, cancel := context.WithCancel(ctx)
		for e := range c.Subscribe(sub, Subscription{TaskID: id, AfterID: last}) {
			if dt.ProcessState(e.State).Final() {
				break
			}
		}
		cancel()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
}
