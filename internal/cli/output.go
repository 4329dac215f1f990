package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/drover-run/drover"
)

// The JSON forms of tasks, steps and events printed with --json. Field names
// follow the state store's columns.

// TaskJSON is a task as printed with --json.
type TaskJSON struct {
	ID               string          `json:"id"`
	Workflow         string          `json:"workflow"`
	WorkflowVersion  int             `json:"workflow_version,omitempty"` // 0: a workflow defined in code
	State            string          `json:"state"`
	Input            json.RawMessage `json:"input"`
	Output           json.RawMessage `json:"output"`
	CallbackURL      string          `json:"callback_url,omitempty"`
	CallbackEvents   []string        `json:"callback_events,omitempty"` // absent: final states
	LockedBy         *string         `json:"locked_by"`
	CompleteBy       *time.Time      `json:"complete_by"`
	FailureCount     int             `json:"failure_count"`
	FailureThreshold int             `json:"failure_threshold"`
	OnFailure        string          `json:"on_failure"`
	Wait             *WaitJSON       `json:"wait,omitempty"` // absent: the task does not wait
	AvailableAt      time.Time       `json:"available_at"`   // not claimed before (a back-off or an extended wait)
	CurrentStep      int             `json:"current_step"`
	StepCount        int             `json:"step_count"`
	OrderingKey      *string         `json:"ordering_key"`
	OrderingSeq      *int64          `json:"ordering_seq"` // position within ordering_key
	Priority         int             `json:"priority"`
	LastError        string          `json:"last_error,omitempty"`
	CreatedAt        time.Time       `json:"created_at"`
	UpdatedAt        time.Time       `json:"updated_at"`
	Steps            []StepJSON      `json:"steps,omitempty"`
	Events           []EventJSON     `json:"events,omitempty"`
}

// StepJSON is a step as printed with --json.
type StepJSON struct {
	Index             int             `json:"index"`
	Name              string          `json:"name"`
	Agent             string          `json:"agent"`
	Compensation      string          `json:"compensation,omitempty"`
	State             string          `json:"state"`
	CompensationState string          `json:"compensation_state,omitempty"`
	LockedBy          *string         `json:"locked_by"`
	CompleteBy        *time.Time      `json:"complete_by"`
	FailureCount      int             `json:"failure_count"`
	Attempt           int             `json:"attempt"`
	IdempotencyKey    string          `json:"idempotency_key"`
	TimeoutSeconds    float64         `json:"timeout_seconds"`
	Output            json.RawMessage `json:"output"`
	Group             string          `json:"group,omitempty"`      // the parallel group it is a branch of
	FinishSeq         int             `json:"finish_seq,omitempty"` // order of completion, from 1
	LastError         string          `json:"last_error,omitempty"`
	StartedAt         *time.Time      `json:"started_at"`
	FinishedAt        *time.Time      `json:"finished_at"`
	OnFailure         string          `json:"on_failure,omitempty"` // the step's own policy; absent: the task's
	Wait              *WaitJSON       `json:"wait,omitempty"`
	Signal            string          `json:"signal,omitempty"`         // the signal a signal step waits for
	SignalDefault     json.RawMessage `json:"signal_default,omitempty"` // its outcome at the deadline; absent: it fails
}

// WaitJSON is a wait policy as printed with --json.
type WaitJSON struct {
	MaxWaits        int     `json:"max_waits"`
	DelaySeconds    float64 `json:"delay_seconds"`
	Multiplier      float64 `json:"multiplier"`
	MaxDelaySeconds float64 `json:"max_delay_seconds"`
}

func waitJSON(w drover.WaitPolicy) *WaitJSON {
	return &WaitJSON{MaxWaits: w.MaxWaits, DelaySeconds: w.Delay.Seconds(), Multiplier: w.Multiplier, MaxDelaySeconds: w.MaxDelay.Seconds()}
}

// EventJSON is an event as printed with --json.
type EventJSON struct {
	ID        int64     `json:"id"`
	TaskID    string    `json:"task_id"`
	Step      *int      `json:"step"`
	Type      string    `json:"type"`
	State     string    `json:"state"`
	Alert     bool      `json:"alert"`
	Actor     string    `json:"actor,omitempty"`
	Term      int64     `json:"term,omitempty"`
	Attempt   int       `json:"attempt,omitempty"`
	Message   string    `json:"message,omitempty"`
	CreatedAt time.Time `json:"created_at"`
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// rawJSON returns b as a JSON value: null when empty, a JSON string when b
// is not valid JSON (never the case for what drover stores, but be safe).
func rawJSON(b []byte) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("null")
	}
	if !json.Valid(b) {
		q, _ := json.Marshal(string(b))
		return q
	}
	return b
}

func taskJSON(t *drover.Task) TaskJSON {
	j := TaskJSON{
		ID: t.ID, Workflow: t.Workflow, State: string(t.ProcessState), Input: rawJSON(t.Input), Output: rawJSON(t.Output),
		LockedBy: nullable(t.LockedBy), CompleteBy: t.CompleteBy, FailureCount: t.FailureCount,
		FailureThreshold: t.FailureThreshold, OnFailure: string(t.OnFailure), CurrentStep: t.CurrentStep,
		StepCount: t.StepCount, LastError: t.LastError, CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt,
		OrderingKey: nullable(t.OrderingKey), WorkflowVersion: t.WorkflowVersion, CallbackURL: t.CallbackURL,
		AvailableAt: t.AvailableAt, CallbackEvents: t.CallbackEvents, Priority: t.Priority,
	}
	if t.Wait.On() {
		j.Wait = waitJSON(t.Wait)
	}
	if t.OrderingKey != "" {
		seq := t.OrderingSeq
		j.OrderingSeq = &seq
	}
	for i := range t.Steps {
		s := &t.Steps[i]
		j.Steps = append(j.Steps, StepJSON{
			Index: s.Index, Name: s.Name, Agent: s.Agent, Compensation: s.Compensation, State: string(s.ProcessState),
			CompensationState: string(s.CompensationState), LockedBy: nullable(s.LockedBy), CompleteBy: s.CompleteBy,
			FailureCount: s.FailureCount, Attempt: s.Attempt, IdempotencyKey: s.IdempotencyKey,
			TimeoutSeconds: s.Timeout.Seconds(), Output: rawJSON(s.Output), LastError: s.LastError,
			StartedAt: s.StartedAt, FinishedAt: s.FinishedAt, OnFailure: string(s.OnFailure),
			Signal: s.Signal, Group: s.Group, FinishSeq: s.FinishSeq,
		})
		if s.SignalDefault != nil {
			j.Steps[len(j.Steps)-1].SignalDefault = rawJSON(s.SignalDefault)
		}
		if s.Wait != nil {
			j.Steps[len(j.Steps)-1].Wait = waitJSON(*s.Wait)
		}
	}
	return j
}

// waitText describes a wait policy for people: "up to 3 waits of 5m0s, ×2, at most 1h0m0s".
func waitText(w drover.WaitPolicy) string {
	if !w.On() {
		return "no extended waits"
	}
	return fmt.Sprintf("up to %d extended waits of %s, ×%g, at most %s", w.MaxWaits, w.Delay, w.Multiplier, w.MaxDelay)
}

// stateText is a task's state, with the time before which it is not
// claimed when that is later than now (a retry back-off or an extended
// wait): "Pending until 2030-01-01T10:00:00.000Z".
func stateText(t *drover.Task, now time.Time) string {
	if (t.ProcessState == drover.Pending || t.ProcessState == drover.Compensating) && t.LockedBy == "" && t.AvailableAt.After(now) {
		return string(t.ProcessState) + " until " + fmtTime(&t.AvailableAt)
	}
	return string(t.ProcessState)
}

// waiting says which extended wait step s of t is in, or "" if none:
// its FailureCount is past the threshold and the task is not claimed
// before a time still to come.
func waiting(t *drover.Task, s *drover.TaskStep, now time.Time) string {
	_, w := t.PolicyOf(s)
	n := s.FailureCount - t.FailureThreshold + 1
	if !w.On() || n < 1 || n > w.MaxWaits || t.LockedBy != "" || !t.AvailableAt.After(now) ||
		(s.ProcessState != drover.Pending && s.CompensationState != drover.Pending) {
		return ""
	}
	return fmt.Sprintf("step %d (%s), extended wait %d of %d (see State)", s.Index, s.Name, n, w.MaxWaits)
}

// signalWaitText says what signal step s waits for and until when, and
// what its deadline does.
func signalWaitText(s *drover.TaskStep) string {
	then := "then it fails"
	if s.SignalDefault != nil {
		then = "then it completes with its default outcome"
	}
	return fmt.Sprintf("step %d (%s) waits for signal %q until %s; %s", s.Index, s.Name, s.Signal, fmtTime(s.CompleteBy), then)
}

func eventJSON(e *drover.Event) EventJSON {
	j := EventJSON{
		ID: e.ID, TaskID: e.TaskID, Type: string(e.Type), State: string(e.State), Alert: e.Alert,
		Actor: e.Actor, Term: e.Term, Attempt: e.Attempt, Message: e.Message, CreatedAt: e.CreatedAt,
	}
	if e.StepIndex >= 0 {
		i := e.StepIndex
		j.Step = &i
	}
	return j
}

const timeFormat = "2006-01-02T15:04:05.000Z07:00"

func fmtTime(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return t.UTC().Format(timeFormat)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// clip shortens s to n runes for tables, on one line.
func clip(s string, n int) string {
	s = OneLine(s)
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
}

func row(tw io.Writer, cols ...string) {
	fmt.Fprintln(tw, strings.Join(cols, "\t"))
}

func printTask(w io.Writer, t *drover.Task, events []*drover.Event, now time.Time) error {
	tw := newTable(w)
	row(tw, "Task:", t.ID)
	if t.WorkflowVersion > 0 {
		row(tw, "Workflow:", fmt.Sprintf("%s (version %d)", t.Workflow, t.WorkflowVersion))
	} else {
		row(tw, "Workflow:", t.Workflow)
	}
	row(tw, "State:", stateText(t, now))
	if 0 <= t.CurrentStep && t.CurrentStep < len(t.Steps) {
		if s := waiting(t, &t.Steps[t.CurrentStep], now); s != "" {
			row(tw, "Waiting:", s)
		}
		if s := &t.Steps[t.CurrentStep]; t.ProcessState == drover.Processing && s.Waiting() {
			row(tw, "Waiting:", signalWaitText(s))
		}
	}
	row(tw, "LockedBy:", dash(t.LockedBy))
	row(tw, "CompleteBy:", fmtTime(t.CompleteBy))
	row(tw, "FailureCount:", fmt.Sprintf("%d (threshold %d, then %s; on failure: %s)", t.FailureCount, t.FailureThreshold, waitText(t.Wait), t.OnFailure))
	row(tw, "Current step:", currentStep(t))
	if t.OrderingKey != "" {
		row(tw, "Ordering key:", ordering(t, 300))
	}
	if t.Priority != 0 {
		row(tw, "Priority:", strconv.Itoa(t.Priority))
	}
	row(tw, "Input:", clip(string(t.Input), 200))
	if len(t.Output) > 0 {
		row(tw, "Output:", clip(string(t.Output), 200))
	}
	if t.LastError != "" {
		row(tw, "Last error:", clip(t.LastError, 300))
	}
	if t.CallbackURL != "" {
		events := "final"
		if len(t.CallbackEvents) > 0 {
			events = t.CallbackEvents.String()
		}
		row(tw, "Callback URL:", clip(t.CallbackURL, 300)+" (events: "+events+")")
	}
	row(tw, "Created:", fmtTime(&t.CreatedAt))
	row(tw, "Updated:", fmtTime(&t.UpdatedAt))
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = newTable(w)
	row(tw, "INDEX", "NAME", "AGENT", "STATE", "COMPENSATION", "LOCKED_BY", "COMPLETE_BY", "FAILURES", "ATTEMPT", "IDEMPOTENCY_KEY", "LAST_ERROR")
	var own []string // steps with their own failure policy
	for i := range t.Steps {
		s := &t.Steps[i]
		comp := "-"
		if s.Compensation != "" {
			comp = s.Compensation
			if s.CompensationState != "" {
				comp += ":" + string(s.CompensationState)
			}
		}
		agent := s.Agent
		if s.Signal != "" {
			agent = "signal:" + s.Signal
		}
		name := s.Name
		if s.Group != "" {
			name += " [parallel " + s.Group + "]"
		}
		row(tw, strconv.Itoa(s.Index), name, agent, string(s.ProcessState), comp, dash(s.LockedBy), fmtTime(s.CompleteBy),
			strconv.Itoa(s.FailureCount), strconv.Itoa(s.Attempt), s.IdempotencyKey, dash(clip(s.LastError, 80)))
		if s.OnFailure != "" || s.Wait != nil {
			policy, wait := t.PolicyOf(s)
			own = append(own, fmt.Sprintf("step %d (%s) has its own failure policy: %s; on failure: %s", s.Index, s.Name, waitText(wait), policy))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, line := range own {
		fmt.Fprintln(w, line)
	}
	if events != nil {
		fmt.Fprintln(w)
		return printEvents(w, events, false)
	}
	return nil
}

// stepOf shows which step a task is at as a position and a count, both
// counted from 1 ("3/3" for the last of three); CurrentStep is the step's
// 0-based index.
func stepOf(t *drover.Task) string {
	return fmt.Sprintf("%d/%d", t.CurrentStep+1, t.StepCount)
}

// currentStep is stepOf for "drover status": "3 of 3 (ship, index 2)".
func currentStep(t *drover.Task) string {
	s := fmt.Sprintf("%d of %d", t.CurrentStep+1, t.StepCount)
	if t.CurrentStep < 0 || t.CurrentStep >= len(t.Steps) {
		return s
	}
	cur := &t.Steps[t.CurrentStep]
	if cur.Group == "" || t.ProcessState == drover.Compensating {
		return s + fmt.Sprintf(" (%s, index %d)", cur.Name, t.CurrentStep)
	}
	// A parallel group: every branch, with its state.
	var branches []string
	last := t.CurrentStep
	for i := t.CurrentStep; i < len(t.Steps) && t.Steps[i].Group == cur.Group; i++ {
		branches = append(branches, fmt.Sprintf("%s %s", t.Steps[i].Name, t.Steps[i].ProcessState))
		last = i
	}
	return s + fmt.Sprintf(" (parallel group %s, indexes %d-%d: %s)", cur.Group, t.CurrentStep, last, strings.Join(branches, ", "))
}

// ordering shows a task's ordering key and its position in it, the key
// quoted (it may hold spaces) and clipped to n runes; "-" without a key.
func ordering(t *drover.Task, n int) string {
	if t.OrderingKey == "" {
		return "-"
	}
	return fmt.Sprintf("%s #%d", clip(strconv.Quote(t.OrderingKey), n), t.OrderingSeq)
}

func printEvents(w io.Writer, events []*drover.Event, withTask bool) error {
	tw := newTable(w)
	cols := []string{"ID", "TIME"}
	if withTask {
		cols = append(cols, "TASK")
	}
	cols = append(cols, "STEP", "TYPE", "STATE", "ALERT", "ACTOR", "ATTEMPT", "MESSAGE")
	row(tw, cols...)
	for _, e := range events {
		printEventRow(tw, e, withTask)
	}
	return tw.Flush()
}

func printEventRow(tw io.Writer, e *drover.Event, withTask bool) {
	cols := []string{strconv.FormatInt(e.ID, 10), fmtTime(&e.CreatedAt)}
	if withTask {
		cols = append(cols, e.TaskID)
	}
	step := "-"
	if e.StepIndex >= 0 {
		step = strconv.Itoa(e.StepIndex)
	}
	alert := ""
	if e.Alert {
		alert = "ALERT"
	}
	attempt := "-"
	if e.Attempt > 0 {
		attempt = strconv.Itoa(e.Attempt)
	}
	cols = append(cols, step, string(e.Type), string(e.State), dash(alert), dash(e.Actor), attempt, dash(clip(e.Message, 120)))
	row(tw, cols...)
}

func jsonValid(b []byte) bool { return json.Valid(b) }

// jsonProblem says what is wrong with a document json.Valid rejected.
func jsonProblem(b []byte) string {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return err.Error()
	}
	return "invalid JSON"
}

// eventLine formats one event on one line, for --follow.
func eventLine(e *drover.Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d %s task=%s", e.ID, fmtTime(&e.CreatedAt), e.TaskID)
	if e.StepIndex >= 0 {
		fmt.Fprintf(&b, " step=%d", e.StepIndex)
	}
	fmt.Fprintf(&b, " %s state=%s", e.Type, e.State)
	if e.Alert {
		b.WriteString(" ALERT")
	}
	if e.Actor != "" {
		fmt.Fprintf(&b, " actor=%s", e.Actor)
	}
	if e.Attempt > 0 {
		fmt.Fprintf(&b, " attempt=%d", e.Attempt)
	}
	if e.Message != "" {
		fmt.Fprintf(&b, " msg=%q", OneLine(e.Message))
	}
	return b.String()
}
