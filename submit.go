package drover

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/flow"
	"github.com/drover-run/drover/store"
)

// SubmitOptions are optional settings of a submission.
type SubmitOptions struct {
	// ID is the caller's task ID, for idempotent submission: submitting the
	// same ID with the same workflow, input, OrderingKey, CallbackURL and
	// CallbackEvents returns the existing task (inputs are compared as JSON values: key
	// order and spacing do not matter); with any of them different it
	// fails with ErrTaskConflict, saying which. 1 to
	// drovertype.MaxNameBytes (200) bytes of valid UTF-8, printable,
	// without spaces or "/", not starting with "-"; another fails with
	// ErrInvalidTaskID (a *drovertype.FieldError saying why). Default: a
	// generated, time-ordered UUID.
	ID string
	// OrderingKey, when set, runs the task only after every task submitted
	// earlier with the same key is final (Processed, Error, Compensated or
	// Cancelled): tasks sharing a key run one at a time, in the order their
	// submissions committed. Tasks with different keys, or none, run in
	// parallel. A task that is retried or recovered by the supervisor stays
	// at the head of its key, so the next one keeps waiting; a task that
	// ends in Error or is cancelled lets the next one start. A resubmitted
	// task keeps its position: it goes before the tasks of its key that
	// have not started yet, but does not hold back those already running.
	// At most MaxOrderingKeyBytes bytes of UTF-8 without control
	// characters. Default "": no ordering.
	OrderingKey string
	// CallbackURL, when set, is sent a signed webhook (HMAC-SHA256) when
	// the task reaches a final state: an absolute http or https URL of at
	// most MaxCallbackURLBytes. Default "": none.
	CallbackURL string
	// CallbackEvents chooses the task's events CallbackURL is sent: "final"
	// (it reached a final state), "alerts" (every operator alert of the
	// task: a permanent failure, a failure that starts compensation, an
	// extended wait, an Error), or event types (processed, compensated,
	// error, cancelled, step_failed, step_waiting). Default (empty):
	// final. Only with CallbackURL.
	CallbackEvents []string
	// Namespace puts the task in a namespace (drovertype.NamespaceProblem
	// says which names are allowed): its stored ID is "<Namespace>/<ID>"
	// (Task.ID; ID stays the caller's, unique within the namespace) and
	// its OrderingKey orders only the namespace's tasks. Default "" (or
	// drovertype.DefaultNamespace): the default namespace, IDs unchanged.
	Namespace string
	// RunAt, when set, delays the task: it is stored Pending and no
	// scheduler claims it before RunAt (Task.AvailableAt), so it costs
	// nothing while it waits and can be cancelled meanwhile. A time not
	// after now runs the task at once. At most MaxDelay ahead. Schedulers
	// find a due task at their next poll (Config.PollInterval).
	RunAt time.Time
	// Delay delays the task by this long from the submit instead (not
	// with RunAt; 0: none). At most MaxDelay.
	Delay time.Duration
	// Priority, when set, is the task's priority (Task.Priority), from 0
	// (lowest) to MaxPriority, instead of its workflow's
	// (Workflow.Priority). Among tasks available to start, schedulers
	// claim higher priorities first, aged so that a lower one waits at
	// most PriorityAging per level of difference behind them (see
	// ClaimAt). PriorityOf makes the pointer.
	Priority *int
	// Submitter names who submits the task (Task.Submitter), for a quota
	// of tasks in flight per submitter (Client.ActiveTasksOf); the HTTP
	// API sets its token's name. Never a secret. Default "": none.
	Submitter string
}

// MaxDelay caps how far ahead SubmitOptions.RunAt and Delay may put a
// task.
const MaxDelay = 10 * 365 * 24 * time.Hour

// MaxOrderingKeyBytes caps the length of SubmitOptions.OrderingKey.
const MaxOrderingKeyBytes = 256

// MaxSubmitterBytes caps the length of SubmitOptions.Submitter.
const MaxSubmitterBytes = 200

// MaxCallbackURLBytes caps the length of SubmitOptions.CallbackURL.
const MaxCallbackURLBytes = 2048

// CallbackURLError is the error for a SubmitOptions.CallbackURL that is
// not acceptable; errors.Is(err, ErrInvalidInput) holds for it.
type CallbackURLError struct {
	URL    string
	Reason string // what is wrong, e.g. "must be an http or https URL"
}

func (e *CallbackURLError) Error() string {
	u := e.URL
	if len(u) > 100 {
		u = u[:100] + "…"
	}
	return fmt.Sprintf("%v: CallbackURL %q %s", ErrInvalidInput, u, e.Reason)
}

// Unwrap makes errors.Is(err, ErrInvalidInput) true.
func (e *CallbackURLError) Unwrap() error { return ErrInvalidInput }

// ValidateCallbackURL checks a callback URL as Submit does: "" (none), or
// an absolute http or https URL with a host, without a fragment or user
// information (credentials would be stored and shown with the task; the
// webhook's signature authenticates it), of at most MaxCallbackURLBytes of
// UTF-8 without spaces or control characters. A bad one gives a
// *CallbackURLError.
func ValidateCallbackURL(s string) error {
	bad := func(format string, args ...any) error {
		return &CallbackURLError{URL: s, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case s == "":
		return nil
	case len(s) > MaxCallbackURLBytes:
		return bad("is %d bytes, the limit is %d", len(s), MaxCallbackURLBytes)
	case !utf8.ValidString(s):
		return bad("is not valid UTF-8")
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return bad("contains the control character %U", r)
		}
		if unicode.IsSpace(r) {
			return bad("contains a space (%U); percent-encode it", r)
		}
	}
	u, err := url.Parse(s)
	if err != nil {
		return bad("is not a URL: %v", errors.Unwrap(err))
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return bad("must be an absolute http or https URL")
	case u.Opaque != "" || u.Host == "":
		return bad("must be an absolute URL with a host, like https://host/path")
	case u.Hostname() == "":
		return bad("has an empty host name")
	case u.User != nil:
		return bad("must not contain user information (user:password@)")
	case strings.Contains(s, "#"):
		return bad("must not have a fragment (#…)")
	}
	return nil
}

// ValidateCallbackEvents checks SubmitOptions.CallbackEvents as Submit does
// and returns them as a set; an error wraps ErrInvalidInput.
func ValidateCallbackEvents(callbackURL string, events []string) (WebhookEventSet, error) {
	set, err := dt.ParseWebhookEvents(events)
	if err != nil {
		return nil, fmt.Errorf("%w: CallbackEvents: %v", ErrInvalidInput, err)
	}
	if len(events) > 0 && callbackURL == "" {
		return nil, fmt.Errorf("%w: CallbackEvents without a CallbackURL", ErrInvalidInput)
	}
	return set, nil
}

// PriorityOf returns a pointer to p, for SubmitOptions.Priority.
func PriorityOf(p int) *int { return &p }

// Priorities: a task's is from 0 (the default, lowest) to MaxPriority, and
// each level of difference places it PriorityAging earlier in the claim
// order (see ClaimAt in package drovertype).
const (
	MaxPriority   = dt.MaxPriority
	PriorityAging = dt.PriorityAging
)

// priorityProblem says what is wrong with a priority, or "".
func priorityProblem(p int) string {
	if p < 0 || p > MaxPriority {
		return fmt.Sprintf("%d is out of range: from 0 (lowest) to %d", p, MaxPriority)
	}
	return ""
}

// runAt is when a submitted task may start: now, or the later time its
// RunAt or Delay asks for.
func runAt(o SubmitOptions, now time.Time) (time.Time, error) {
	switch {
	case !o.RunAt.IsZero() && o.Delay != 0:
		return time.Time{}, fmt.Errorf("%w: RunAt and Delay are both set; give one", ErrInvalidInput)
	case o.Delay < 0:
		return time.Time{}, fmt.Errorf("%w: Delay %s is negative", ErrInvalidInput, o.Delay)
	case o.Delay > MaxDelay, o.RunAt.Sub(now) > MaxDelay:
		return time.Time{}, fmt.Errorf("%w: the task would start more than 10 years from now (MaxDelay)", ErrInvalidInput)
	case o.Delay > 0:
		return now.Add(o.Delay).Truncate(time.Microsecond), nil
	case o.RunAt.After(now):
		return o.RunAt.Truncate(time.Microsecond), nil
	}
	return now, nil
}

// validateOrderingKey checks a non-empty ordering key.
func validateOrderingKey(k string) error {
	return dt.CheckKey(ErrInvalidInput, "OrderingKey", k, MaxOrderingKeyBytes)
}

// checkTaskID checks the ID of a task to look up or change.
// A task of a namespace is named by its stored ID, "<namespace>/<ID>".
func checkTaskID(id string) error {
	return dt.CheckStoredName(ErrInvalidTaskID, "task ID", id)
}

// SubmitParams is one task of SubmitMany.
type SubmitParams struct {
	Workflow string
	Input    []byte
	Options  SubmitOptions
}

// Submit records a new task with its steps. input must be a JSON document
// of at most Config.MaxInputBytes. The task is stored Pending, for a
// scheduler's claim, or, when a scheduler of this process runs and has
// room, already started by it (Processing, see Config.NoEagerStart). With opts.OrderingKey set, the
// task waits for the tasks submitted before it with the same key (see
// SubmitOptions); its position is returned in Task.OrderingSeq.
//
// Calls made at the same time from several goroutines share transactions
// (group commit), each with its own outcome. If ctx ends before the task is
// committed, Submit returns ctx's error and the task is not recorded; if it
// ends while the commit is under way, the caller cannot tell: submitting
// again with the same SubmitOptions.ID is the idempotent way to find out.
func (c *Client) Submit(ctx context.Context, workflow string, input []byte, opts *SubmitOptions) (*Task, error) {
	p := SubmitParams{Workflow: workflow, Input: input}
	if opts != nil {
		p.Options = *opts
	}
	ts, err := c.submit(ctx, nil, []SubmitParams{p})
	if err != nil {
		return nil, err
	}
	return ts[0], nil
}

// SubmitMany records several tasks in one transaction: all or none. Tasks
// of the call that share an OrderingKey are ordered as they appear in
// params.
func (c *Client) SubmitMany(ctx context.Context, params []SubmitParams) ([]*Task, error) {
	return c.submit(ctx, nil, params)
}

// SubmitTx records a task inside the caller's own transaction, so the
// application's business row and the task commit together or not at all.
// For SQLite, tx is a *sql.Tx on the same database file; the caller
// commits. Schedulers in this process are woken at once; others find
// the task at their next poll after the commit.
//
// With an OrderingKey, the key stays locked until the caller's transaction
// ends (on PostgreSQL its row; SQLite has a single writer anyway): other
// submissions with that key wait for it, so commit promptly. Several
// SubmitTx calls in one transaction lock their keys in call order: two
// transactions taking the same keys in opposite orders can deadlock
// (PostgreSQL detects it and aborts one), so submit keys in a consistent
// order, sorted for example.
func (c *Client) SubmitTx(ctx context.Context, tx any, workflow string, input []byte, opts *SubmitOptions) (*Task, error) {
	p := SubmitParams{Workflow: workflow, Input: input}
	if opts != nil {
		p.Options = *opts
	}
	ts, err := c.submit(ctx, tx, []SubmitParams{p})
	if err != nil {
		return nil, err
	}
	return ts[0], nil
}

type prepared struct {
	task  *dt.Task
	steps []*dt.StepRecord
}

// prepare validates one submission and builds its records; it touches nothing.
func (c *Client) prepare(ctx context.Context, p SubmitParams) (*prepared, error) {
	c.wfMu.RLock()
	w, ok := c.workflows[p.Workflow]
	c.wfMu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownWorkflow, p.Workflow)
	}
	if len(p.Input) > c.cfg.MaxInputBytes {
		return nil, fmt.Errorf("%w: %d bytes, the limit is %d (Config.MaxInputBytes)", ErrInputTooLarge, len(p.Input), c.cfg.MaxInputBytes)
	}
	// A copy: the task keeps it after Submit returns (an agent of this
	// process may get it from memory, eager start), and the caller may
	// reuse its buffer.
	input := bytes.Clone(p.Input)
	if len(input) == 0 {
		input = []byte("null")
	}
	if !json.Valid(input) {
		return nil, fmt.Errorf("%w: not a JSON document", ErrInvalidInput)
	}
	if w.ValidateInput != nil {
		if err := w.ValidateInput(input); err != nil {
			return nil, fmt.Errorf("%w for workflow %q: %w", ErrInvalidInput, w.Name, err)
		}
	}
	id := p.Options.ID
	if id == "" {
		u, err := uuid.NewV7()
		if err != nil {
			return nil, err
		}
		id = u.String()
	} else if err := dt.CheckNewTaskID(ErrInvalidTaskID, "task ID", id); err != nil {
		return nil, err
	}
	if p.Options.Namespace != dt.DefaultNamespace {
		if err := dt.CheckNamespace(ErrInvalidInput, p.Options.Namespace); err != nil {
			return nil, err
		}
	}
	id = dt.QualifyName(p.Options.Namespace, id)
	if p.Options.OrderingKey != "" {
		if err := validateOrderingKey(p.Options.OrderingKey); err != nil {
			return nil, err
		}
	}
	if p.Options.Submitter != "" {
		if err := dt.CheckKey(ErrInvalidInput, "Submitter", p.Options.Submitter, MaxSubmitterBytes); err != nil {
			return nil, err
		}
	}
	if err := ValidateCallbackURL(p.Options.CallbackURL); err != nil {
		return nil, err
	}
	events, err := ValidateCallbackEvents(p.Options.CallbackURL, p.Options.CallbackEvents)
	if err != nil {
		return nil, err
	}
	// The store keeps microseconds; truncate so the returned task equals
	// the stored one.
	now := c.clock.Now().Truncate(time.Microsecond)
	start, err := runAt(p.Options, now)
	if err != nil {
		return nil, err
	}
	flat := w.FlatSteps()
	priority := w.Priority
	if p.Options.Priority != nil {
		priority = *p.Options.Priority
		if why := priorityProblem(priority); why != "" {
			return nil, fmt.Errorf("%w: Priority %s", ErrInvalidInput, why)
		}
	}
	t := &dt.Task{
		ID: id, Workflow: w.Name, Input: input, InputHash: flow.InputHash(w.Name, input),
		ProcessState: dt.Pending, StepCount: len(flat), OrderingKey: dt.QualifyOrderingKey(p.Options.Namespace, p.Options.OrderingKey),
		FailureThreshold: w.FailureThreshold, OnFailure: w.OnFailure, RetryDelay: w.RetryDelay, Wait: w.Wait,
		WorkflowVersion: w.Version, CallbackURL: p.Options.CallbackURL, CallbackEvents: events,
		Submitter: p.Options.Submitter, Priority: priority, AvailableAt: start, CreatedAt: now, UpdatedAt: now,
	}
	if c.tracer.On() {
		t.TraceContext = submitContext(ctx)
	}
	steps := make([]*dt.StepRecord, len(flat))
	for i, s := range flat {
		steps[i] = &dt.StepRecord{
			TaskID: id, Index: i, Name: s.Name, Agent: s.Agent, Timeout: s.Timeout, Compensation: s.Compensation,
			OnFailure: s.OnFailure, Wait: s.Wait, // never changed after registration: shared safely
			Signal: s.Signal, SignalDefault: s.SignalDefault,
			ProcessState: dt.Pending, IdempotencyKey: flow.IdempotencyKey(id, i, s.Name), UpdatedAt: now,
			Group: s.Group,
		}
	}
	return &prepared{task: t, steps: steps}, nil
}

func (c *Client) submit(ctx context.Context, tx any, params []SubmitParams) (ts []*Task, err error) {
	if c.tracer.On() {
		var spans []trace.Span
		ctx, spans = c.traceSubmit(ctx, params)
		defer func() { endSubmit(spans, ts, err) }()
	}
	if tx == nil && len(params) == 1 {
		p, err := c.prepare(ctx, params[0])
		if err != nil {
			return nil, err
		}
		t, err := c.submitOne(ctx, flow.Submission{Task: p.task, Steps: p.steps})
		if err != nil {
			return nil, err
		}
		return []*Task{t}, nil
	}
	ps := make([]*prepared, len(params))
	for i, p := range params {
		var err error
		if ps[i], err = c.prepare(ctx, p); err != nil {
			if len(params) > 1 {
				return nil, fmt.Errorf("task %d: %w", i, err)
			}
			return nil, err
		}
	}
	subs := make([]flow.Submission, len(ps))
	for i, p := range ps {
		subs[i] = flow.Submission{Task: p.task, Steps: p.steps}
	}
	var out []*Task
	fn := func(ctx context.Context, x store.Executor) error {
		var err error
		out, err = flow.Submit(ctx, x, subs)
		return err
	}
	if tx != nil {
		err = c.store.InExternalTx(ctx, tx, fn)
	} else {
		err = c.store.InTx(ctx, fn)
	}
	if err != nil {
		return nil, err
	}
	c.wakeSchedulers()
	return out, nil
}
