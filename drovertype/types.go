package drovertype

import (
	"math"
	"time"
)

// ProcessState is the state of a task or a step, named as in the Scheduler Agent
// Supervisor pattern.
//
// A task moves Pending → Processing → Processed | Error. When it must be undone
// it moves to Compensating and then Compensated | Error. Any non-final task can
// be Cancelled.
type ProcessState string

// The states a task or step can be in.
const (
	Pending      ProcessState = "Pending"
	Processing   ProcessState = "Processing"
	Processed    ProcessState = "Processed"
	Error        ProcessState = "Error"
	Compensating ProcessState = "Compensating"
	Compensated  ProcessState = "Compensated"
	Cancelled    ProcessState = "Cancelled"
)

// AllStates lists every ProcessState in lifecycle order.
var AllStates = []ProcessState{Pending, Processing, Processed, Error, Compensating, Compensated, Cancelled}

// Final reports whether no further transition happens without an operator.
func (s ProcessState) Final() bool {
	switch s {
	case Processed, Error, Compensated, Cancelled:
		return true
	}
	return false
}

// Valid reports whether s is one of the defined states.
func (s ProcessState) Valid() bool {
	for _, v := range AllStates {
		if v == s {
			return true
		}
	}
	return false
}

// FailurePolicy says what happens to a task when a step fails for good: its
// FailureCount reached the workflow's threshold, or its agent returned a
// permanent error.
type FailurePolicy string

const (
	// PolicyError marks the task Error and raises an operator alert.
	PolicyError FailurePolicy = "error"
	// PolicyCompensate undoes, last first, the steps that completed and a
	// step that timed out past the threshold (its call may have taken
	// effect), with their compensations. A step that failed with a
	// permanent error is not undone: it did not take effect.
	PolicyCompensate FailurePolicy = "compensate"
)

// Valid reports whether p is a known policy.
func (p FailurePolicy) Valid() bool { return p == PolicyError || p == PolicyCompensate }

// WaitPolicy is the supervisor's third answer to a step that keeps timing
// out, besides Error and compensation: once the step's FailureCount reaches
// the threshold, wait an extended period, in the expectation that the fault
// is resolved meanwhile, and try the step again. Each wait is recorded as a
// step_waiting alert with the time of the next attempt. After MaxWaits waits
// (each followed by one more attempt) the failure policy applies. It applies
// to a step's compensation too, whose failure ends the task in Error.
// A permanent error is not waited on: the agent said it will not succeed.
type WaitPolicy struct {
	// MaxWaits caps the extended waits of one step (of its forward run,
	// and again of its compensation); 0 turns waiting off.
	MaxWaits int
	// Delay is the first wait.
	Delay time.Duration
	// Multiplier grows each further wait: wait n is Delay·Multiplier^(n-1).
	Multiplier float64
	// MaxDelay caps one wait.
	MaxDelay time.Duration
}

// On reports whether the policy waits at all.
func (p WaitPolicy) On() bool { return p.MaxWaits > 0 }

// Wait returns the length of wait n (1 for the first): Delay grown by
// Multiplier n-1 times (a Multiplier below 1 counts as 1), at most MaxDelay
// when MaxDelay is set.
func (p WaitPolicy) Wait(n int) time.Duration {
	d := float64(p.Delay) * math.Pow(max(p.Multiplier, 1), float64(max(n-1, 0)))
	switch {
	case p.MaxDelay > 0 && d > float64(p.MaxDelay):
		return p.MaxDelay
	case d >= math.MaxInt64:
		return math.MaxInt64
	}
	return time.Duration(d)
}

// RequestKind tells an agent whether to do a step or undo it.
type RequestKind string

const (
	// KindDo runs the step.
	KindDo RequestKind = "do"
	// KindCompensate runs the step's compensating transaction.
	KindCompensate RequestKind = "compensate"
)

// MaxPriority is the highest Task.Priority; 0 is the lowest and the
// default.
const MaxPriority = 10

// PriorityAging is how much earlier than its AvailableAt each level of
// priority places a task in the claim order (ClaimAt).
const PriorityAging = time.Minute

// ClaimAt is a task's place in the claim order: its AvailableAt moved
// earlier by PriorityAging per level of priority. Schedulers claim
// available tasks in ClaimAt order, so a task of priority p goes before
// one of priority q < p that became available less than (p-q) ×
// PriorityAging earlier, and after one that has waited longer: a task
// waits at most MaxPriority × PriorityAging behind higher priorities,
// however many keep arriving.
func ClaimAt(availableAt time.Time, priority int) time.Time {
	return availableAt.Add(-time.Duration(priority) * PriorityAging)
}

// Task is one submitted workflow run and its state-store record.
type Task struct {
	ID           string
	Workflow     string
	Input        []byte
	InputHash    string // sha256 of workflow and input, for idempotent submit
	ProcessState ProcessState
	LockedBy     string     // scheduler instance holding the task; "" when null
	CompleteBy   *time.Time // deadline of the current step while Processing
	FailureCount int        // supervisor recoveries of this task, all steps
	CurrentStep  int        // index of the step being run or compensated
	StepCount    int
	// OrderingKey, when set, orders the task after every task submitted
	// earlier with the same key: it starts only once all of them are final
	// (Processed, Error, Compensated or Cancelled). "" means no ordering.
	OrderingKey string
	// OrderingSeq is the task's position within its OrderingKey, assigned
	// at submit (1, 2, 3, … per key, in the order the submitting
	// transactions commit; gaps are possible). 0 when there is no key.
	OrderingSeq int64
	// Priority orders claimable tasks: higher first, from 0 (the default)
	// to MaxPriority, aged so that lower ones are not starved (ClaimAt).
	// Set at submit and never changed.
	Priority  int
	Output    []byte // output of the last step once Processed
	LastError string
	// WorkflowVersion is the version of the workflow definition the task
	// was submitted with (Workflow.Version); 0 for definitions in code.
	// A declarative workflow reloaded while the task runs does not change
	// it, so the task keeps the version it started with.
	WorkflowVersion int
	// CallbackURL, when set, receives a signed webhook for each of the
	// task's events CallbackEvents selects (empty: when the task reaches a
	// final state). "" means none.
	CallbackURL    string
	CallbackEvents WebhookEventSet
	// Submitter names who submitted the task, for quotas per submitter:
	// the HTTP API records its token's actor name (never the secret).
	// "" for tasks submitted in-process. Set at submit and never changed.
	Submitter string
	// TraceContext is the W3C trace context of the span that submitted the
	// task ("<traceparent>[ <tracestate>]"): every span about the task, in
	// any process, is its child, so the task is one trace. "" when the
	// submitter did not trace. Set at submit and never changed.
	TraceContext string

	// Policy copied from the workflow at submit, so the supervisor needs no
	// workflow code and a running task keeps the version it started with.
	// A step may override OnFailure and Wait (Step.OnFailure, Step.Wait);
	// PolicyOf gives the policy that applies to a step.
	FailureThreshold int
	OnFailure        FailurePolicy
	RetryDelay       time.Duration
	Wait             WaitPolicy

	AvailableAt time.Time // not claimed before this (supervisor back-off)
	CreatedAt   time.Time
	UpdatedAt   time.Time

	Steps []StepRecord // filled by calls that return a task with its steps
}

// StepRecord is the state-store record of one step of a task: its
// definition (drover.Step in a workflow) and its state (ProcessState,
// LockedBy, CompleteBy, FailureCount, attempt).
type StepRecord struct {
	TaskID       string
	Index        int
	Name         string
	Agent        string
	Timeout      time.Duration // time budget: CompleteBy = dispatch time + Timeout
	Compensation string        // agent that undoes this step; "" when none
	// OnFailure and Wait override the task's policy for this step; "" and
	// nil: the task's (Task.PolicyOf).
	OnFailure FailurePolicy
	Wait      *WaitPolicy

	ProcessState      ProcessState
	CompensationState ProcessState // "" until the step is being undone
	LockedBy          string
	CompleteBy        *time.Time
	FailureCount      int
	Attempt           int    // fencing token, incremented on every dispatch
	IdempotencyKey    string // stable over every attempt and resubmission
	Output            []byte
	LastError         string
	StartedAt         *time.Time
	FinishedAt        *time.Time
	UpdatedAt         time.Time

	// Signal, when set, makes this a signal step: it runs no agent but
	// waits, until CompleteBy, for the named signal (see Signal). "" for
	// an agent's step.
	Signal string
	// SignalDefault, when not nil, is the output a signal step completes
	// with when its deadline passes without the signal; nil: the step
	// fails and the failure policy applies.
	SignalDefault []byte
	// Group is the name of the parallel group the step is a branch of; ""
	// for a step of its own. A group's branches are consecutive steps that
	// run at the same time and join before the next step.
	Group string
	// FinishSeq numbers the task's steps in the order they completed (1 for
	// the first; 0 while not completed): compensation undoes steps in
	// reverse order of completion.
	FinishSeq int
}

// PolicyOf returns the failure policy and the wait policy that apply to
// step s of t: the step's own where it sets them, else the task's.
func (t *Task) PolicyOf(s *StepRecord) (FailurePolicy, WaitPolicy) {
	policy, wait := t.OnFailure, t.Wait
	if s.OnFailure != "" {
		policy = s.OnFailure
	}
	if s.Wait != nil {
		wait = *s.Wait
	}
	return policy, wait
}

// AgentRequest is the message the Scheduler sends an agent: through the
// request queue in the store, or, to an agent running in the scheduler's
// own process, in memory (InProcess).
type AgentRequest struct {
	ID             int64 // the request row's ID; 0 for an InProcess request, which has no row
	Agent          string
	TaskID         string
	Workflow       string
	StepIndex      int
	StepName       string
	Attempt        int
	Kind           RequestKind
	IdempotencyKey string
	CompleteBy     time.Time
	Scheduler      string // instance that dispatched it and holds the task
	ClaimedBy      string // agent runtime instance working on it; "" when free
	CreatedAt      time.Time
	// InProcess: handed in memory to an agent runtime of the scheduler's
	// own process (the fast path), so no request row was stored. If that
	// process stops before the reply is applied, a restart with the same
	// instance ID stores the request again (same attempt and key);
	// otherwise the Supervisor recovers the step after CompleteBy.
	InProcess bool
	// PreviousOwn: PreviousOutput is stored with the request, as it is not
	// the output of the step just before (a branch of a parallel group
	// gets the output of the step before the group; the step after a group
	// gets an object of its branches' outputs by name).
	PreviousOwn bool

	// Payload, joined in when the request is claimed.
	Input          []byte // the task's input
	PreviousOutput []byte // output of the step before (or of the group before, by branch name), nil for the first
	StepOutput     []byte // the step's own output; set for compensations
	TraceContext   string // the task's (Task.TraceContext)
}

// AgentReply is an agent's answer to one request. A reply is applied only if
// its Attempt is still the step's current attempt and CompleteBy has not passed.
type AgentReply struct {
	ID        int64
	TaskID    string
	StepIndex int
	Attempt   int
	Kind      RequestKind
	Output    []byte
	Failed    bool // a permanent failure; transient ones are retried or dropped
	Error     string
	CreatedAt time.Time

	// Scheduler is the instance the reply is for, to wake it; not stored.
	Scheduler string
	// InProcess: the reply answers an InProcess request, which has no
	// request row to delete; not stored.
	InProcess bool
}

// EventType names an entry of a task's history.
type EventType string

// Event types recorded in the history.
const (
	EventSubmitted     EventType = "submitted"
	EventStepStarted   EventType = "step_started"
	EventStepProcessed EventType = "step_processed"
	EventStepFailed    EventType = "step_failed"
	EventStepTimedOut  EventType = "step_timed_out"
	EventStepRetry     EventType = "step_retry"
	// EventStepAbandoned: a branch of a parallel group was stopped, in
	// flight or waiting for a retry, because a sibling branch failed for
	// good; it ends the branch's attempt (a late reply is refused).
	EventStepAbandoned EventType = "step_abandoned"
	// EventStepWaiting (an alert): the step reached the failure threshold
	// and waits an extended period (WaitPolicy) before it is tried again;
	// the message gives the time of the next attempt.
	EventStepWaiting EventType = "step_waiting"
	// EventSessionBlocked (an alert of a session queue, under the subject
	// SessionSubject): a message was dead-lettered under the block policy.
	EventSessionBlocked  EventType = "session_blocked"
	EventReplyDiscarded  EventType = "reply_discarded"
	EventCompensating    EventType = "compensating"
	EventStepCompensated EventType = "step_compensated"
	EventProcessed       EventType = "processed"
	EventCompensated     EventType = "compensated"
	EventError           EventType = "error"
	EventCancelled       EventType = "cancelled"
	EventResubmitted     EventType = "resubmitted"
	// EventSignalWaiting: a signal step started waiting for its signal;
	// the message names it and the deadline.
	EventSignalWaiting EventType = "signal_waiting"
	// EventSignalReceived: a signal was stored for the task; the message
	// says whether it completed the step waiting for it.
	EventSignalReceived EventType = "signal_received"
)

// Event is one entry of the append-only history. Alert events are the ones an
// operator must look at.
type Event struct {
	ID        int64
	TaskID    string
	StepIndex int // -1 when the event is about the whole task
	Type      EventType
	State     ProcessState // task state after the event
	Alert     bool
	Actor     string // instance that caused it (scheduler, supervisor, operator)
	Term      int64  // supervisor leader term, for events a supervisor caused
	Attempt   int
	Message   string
	CreatedAt time.Time
}

// WorkflowDef is one stored version of a declarative workflow definition.
// Versions of a name are numbered 1, 2, 3, … in the order they were first
// stored; the same source (same Digest) stored again keeps its version.
type WorkflowDef struct {
	Name      string
	Version   int
	Digest    string // identifies Source, e.g. its sha256 in hex
	Source    []byte // the definition as loaded (YAML or JSON)
	CreatedAt time.Time
}

// Lease is a leader-election lease. Term increases every time the holder
// changes and fences the actions of a deposed holder.
type Lease struct {
	Name      string
	Holder    string
	Term      int64
	ExpiresAt time.Time
}
