package store

import (
	"context"
	"errors"
	"time"

	"github.com/drover-run/drover/drovertype"
)

// Errors returned by drivers. Drivers translate database errors at the boundary
// so callers can test them with errors.Is.
var (
	// ErrNotFound: the task, step or lease does not exist.
	ErrNotFound = errors.New("not found")
	// ErrLocked: the database is locked by another process beyond the busy timeout.
	ErrLocked = errors.New("store is locked by another process")
	// ErrCorrupt: the database file is not a valid store.
	ErrCorrupt = errors.New("store is corrupt or not a drover database")
	// ErrUnsupportedTx: the caller's transaction is not of a type the driver accepts.
	ErrUnsupportedTx = errors.New("transaction type not supported by this driver")
	// ErrSchemaTooNew: the database was migrated by a newer drover.
	ErrSchemaTooNew = errors.New("store schema is newer than this drover")
	// ErrNotMigrated: the database has no drover schema yet.
	ErrNotMigrated = errors.New("store is not migrated")
	// ErrConflict: the database aborted the transaction because it
	// conflicted with another one (a deadlock or a serialization failure).
	// Nothing of it committed and the
	// work itself is not at fault: roll back and run the transaction again.
	// The driver's own error stays in the chain (errors.As).
	ErrConflict = errors.New("transaction conflicted with another; retry it")
	// ErrBadData: the database refused a value the transaction wrote
	// (a data exception, such as a NUL character or invalid UTF-8 in
	// text; a value too large for the database). Nothing of the transaction committed, and running it
	// again fails the same way: the fault is in the data of some item of
	// it, so a caller that wrote many items in one transaction writes them
	// apart to find the one at fault and commit the rest. The driver's
	// own error stays in the chain (errors.As).
	ErrBadData = errors.New("the database refused a value")
	// ErrLeaseNotHeld: LeaseCheck found the lease missing, expired, or held
	// by someone else.
	ErrLeaseNotHeld = errors.New("lease not held")
)

// Driver is one database holding a drover state store.
type Driver interface {
	// Name is the driver's short name, such as "sqlite".
	Name() string
	// Migrate applies every embedded migration not yet applied.
	Migrate(ctx context.Context) error
	// SchemaVersion reports the applied and the latest known migration version.
	SchemaVersion(ctx context.Context) (applied, latest int, err error)
	// InTx runs fn in one write transaction, committed if fn returns nil.
	InTx(ctx context.Context, fn func(ctx context.Context, x Executor) error) error
	// InExternalTx runs fn inside a transaction the caller owns, of the
	// type the driver documents; the caller commits or rolls back.
	InExternalTx(ctx context.Context, tx any, fn func(ctx context.Context, x Executor) error) error
	// Reader returns an Executor for reads outside any write transaction.
	Reader() Executor
	// Close releases the database.
	Close() error
}

// Executor runs the store primitives. Every method takes ctx and a pointer
// to its own parameters struct, named after it (TaskGet takes
// *TaskGetParams), so that a parameter can be added without changing the
// method's signature; the callee does not keep or change the struct.
// Methods that take slices apply all of them in order; drivers may batch
// them. What only some drivers do in fewer calls is an optional interface
// (see TaskGetAndClaim), not part of Executor.
type Executor interface {
	// TaskInsertMany inserts tasks whose ID is not taken yet; inserted[i]
	// reports whether Tasks[i] was inserted (false: the ID exists, nothing
	// changed). IDs within one call must be distinct.
	TaskInsertMany(ctx context.Context, params *TaskInsertManyParams) (inserted []bool, err error)
	// TaskGet returns one task, or ErrNotFound.
	TaskGet(ctx context.Context, params *TaskGetParams) (*drovertype.Task, error)
	// TaskGetMany returns the tasks of IDs that exist.
	TaskGetMany(ctx context.Context, params *TaskGetManyParams) ([]*drovertype.Task, error)
	// TaskGetManyWithSteps is TaskGetMany and StepListByTasks of the same
	// IDs in one call (inside a transaction both lock their rows, the tasks
	// first), so that a driver can fetch both in one round trip. On the
	// Reader both reads see one snapshot of the database: the steps are
	// those of the tasks as returned, never of a later state.
	TaskGetManyWithSteps(ctx context.Context, params *TaskGetManyWithStepsParams) ([]*drovertype.Task, []*drovertype.StepRecord, error)
	// TaskList returns the tasks params selects, in ID order.
	TaskList(ctx context.Context, params *TaskListParams) ([]*drovertype.Task, error)
	// TaskCountByState counts the tasks in each state.
	TaskCountByState(ctx context.Context, params *TaskCountByStateParams) (map[drovertype.ProcessState]int, error)
	// TaskCountLockedBy counts the tasks Instance holds.
	TaskCountLockedBy(ctx context.Context, params *TaskCountLockedByParams) (int, error)
	// TaskCountActive counts the tasks not yet final: Pending, Processing or
	// Compensating, of every namespace or of Namespace. Cheap (through
	// partial indexes of the unfinished tasks), for queue-depth monitoring
	// and the quota of tasks in flight per namespace.
	TaskCountActive(ctx context.Context, params *TaskCountActiveParams) (int, error)
	// TaskCountActiveBySubmitter counts the tasks not yet final (as
	// TaskCountActive) whose Submitter is Submitter, which is not "".
	// Index-only, for the quota of tasks in flight per token.
	TaskCountActiveBySubmitter(ctx context.Context, params *TaskCountActiveBySubmitterParams) (int, error)
	// TaskFinishedSince returns the final tasks (Processed, Error,
	// Compensated, Cancelled) last updated at or after Since, newest
	// first, at most Limit, each as its state and times only. It reads
	// the index of final tasks by update time, so its cost follows Limit
	// and not the table.
	TaskFinishedSince(ctx context.Context, params *TaskFinishedSinceParams) ([]FinishedTask, error)
	// TaskClaim atomically locks up to Limit claimable tasks for Instance:
	// Pending ones, and Compensating ones nobody holds, available at Now.
	// A Pending task with an OrderingKey is claimable only when no task with
	// the same key and a smaller OrderingSeq is still non-final (Pending,
	// Processing or Compensating); Compensating tasks have started and are
	// not held back. Pending tasks become Processing. In claim order:
	// by drovertype.ClaimAt (priority, then how long they waited), then ID.
	TaskClaim(ctx context.Context, params *TaskClaimParams) ([]*drovertype.Task, error)
	// TaskNextAvailable returns when the next claimable task that is not
	// available at Now becomes available: the earliest AvailableAt after
	// Now of the Pending tasks, and the Compensating ones nobody holds, or
	// the zero time if there is none. A scheduler with nothing to claim
	// sleeps until then. It reads the claim order (ClaimAt) from
	// MaxPriority × PriorityAging before Now, and at most Limit tasks past
	// the first one not yet available; when it stops at Limit it returns
	// that first one's ClaimAt, which is never after the answer (so a
	// caller wakes early, never late; the answer may then be before Now).
	// With Due, a claimable task available at Now that its ordering key
	// does not hold back makes the answer Now (see TaskNextAvailableParams).
	TaskNextAvailable(ctx context.Context, params *TaskNextAvailableParams) (time.Time, error)
	// TaskListLockedBy returns up to Limit of the non-final tasks Instance
	// holds.
	TaskListLockedBy(ctx context.Context, params *TaskListLockedByParams) ([]*drovertype.Task, error)
	// TaskListExpired returns held tasks whose CompleteBy is before Now.
	TaskListExpired(ctx context.Context, params *TaskListExpiredParams) ([]*drovertype.Task, error)
	// TaskDeleteFinished deletes up to Limit final tasks (Processed, Error,
	// Compensated, Cancelled) last updated before Before, oldest first, with
	// their steps, requests, replies, events and signals. It returns how many.
	// A key whose last task it deletes loses its ordering_keys row (the
	// schema counts each key's tasks), so the key's next task starts again
	// at position 1: no task of the key is left to order against. It never
	// waits for a submit: a driver whose writers overlap leaves the tasks of
	// keys a submitting transaction holds for a later call.
	TaskDeleteFinished(ctx context.Context, params *TaskDeleteFinishedParams) (int, error)
	// TaskUpdateMany writes the mutable fields of each task.
	TaskUpdateMany(ctx context.Context, params *TaskUpdateManyParams) error

	// OrderingKeyReserve hands out positions within ordering keys: for
	// each entry of Keys (a key may repeat) the next position of that key,
	// consecutive per key in input order, starting at 1 for a new key.
	// Positions are never handed out twice, but a rolled-back transaction
	// gives its back, and a reservation whose task is not inserted leaves
	// a gap.
	//
	// It locks each key until the transaction ends, so a second
	// transaction reserving the same key waits until the first commits or
	// rolls back. That is what makes positions follow commit order: a task
	// with a higher position never becomes visible before one with a lower
	// position of the same key. Transactions reserving several keys never
	// deadlock each other over them. Reserve and insert in the same
	// transaction.
	OrderingKeyReserve(ctx context.Context, params *OrderingKeyReserveParams) ([]int64, error)
	// OrderingKeyPrune deletes the ordering_keys rows of Keys that no
	// task has (a key may repeat; unknown keys are ignored), so that their
	// next task starts again at position 1. Call it in the transaction
	// that reserved them, after inserting: a submit whose task existed
	// already would otherwise leave a new key's row behind for good, as no
	// task of it is ever deleted.
	OrderingKeyPrune(ctx context.Context, params *OrderingKeyPruneParams) error

	// StepInsertMany inserts steps.
	StepInsertMany(ctx context.Context, params *StepInsertManyParams) error
	// StepListByTasks returns the steps of the given tasks ordered by task
	// then index.
	StepListByTasks(ctx context.Context, params *StepListByTasksParams) ([]*drovertype.StepRecord, error)
	// StepUpdateMany writes the mutable fields of each step, including
	// IdempotencyKey (it changes only when a Compensated task is
	// resubmitted: a new run gets new keys).
	StepUpdateMany(ctx context.Context, params *StepUpdateManyParams) error

	// RequestInsertMany stores requests for agents.
	RequestInsertMany(ctx context.Context, params *RequestInsertManyParams) error
	// RequestClaim hands up to Limit unclaimed requests for Agent, oldest
	// first, to ClaimedBy, with their payload joined in. Requests whose
	// CompleteBy has passed are not handed out.
	RequestClaim(ctx context.Context, params *RequestClaimParams) ([]*drovertype.AgentRequest, error)
	// RequestDeleteByStep deletes every request of the steps of Refs.
	RequestDeleteByStep(ctx context.Context, params *RequestDeleteByStepParams) error
	// StepMessagesExist reports, for each of the step attempts of
	// Attempts, whether a request or reply of that attempt and kind is
	// stored (exists[i] for Attempts[i]): whether a message of it is still on its
	// way between scheduler and agent. Another attempt's (a late reply of
	// an earlier one) does not count.
	StepMessagesExist(ctx context.Context, params *StepMessagesExistParams) (exists []bool, err error)
	// RequestRelease frees the requests claimed by ClaimedBy, an agent
	// instance, so they are handed out again (used when that instance
	// restarts), and returns how many.
	RequestRelease(ctx context.Context, params *RequestReleaseParams) (int, error)
	// RequestDeleteExpired deletes up to Limit requests whose CompleteBy
	// is before Now, and returns how many.
	RequestDeleteExpired(ctx context.Context, params *RequestDeleteExpiredParams) (int, error)

	// ReplyInsertMany stores replies for schedulers.
	ReplyInsertMany(ctx context.Context, params *ReplyInsertManyParams) error
	// ReplyTake deletes and returns up to Limit replies for tasks locked by
	// Scheduler, or for tasks nobody holds (stale replies to discard).
	ReplyTake(ctx context.Context, params *ReplyTakeParams) ([]*drovertype.AgentReply, error)

	// EventInsertMany appends events to the history and sets their ID.
	EventInsertMany(ctx context.Context, params *EventInsertManyParams) error
	// EventList returns the events params selects, in ID order.
	EventList(ctx context.Context, params *EventListParams) ([]*drovertype.Event, error)

	// LeaseAcquire takes or renews the named lease for Holder: it succeeds
	// when the lease is free, expired at Now, or already Holder's. The term
	// increments whenever the holder changes.
	LeaseAcquire(ctx context.Context, params *LeaseAcquireParams) (lease *drovertype.Lease, acquired bool, err error)
	// LeaseGet returns the named lease, or ErrNotFound.
	LeaseGet(ctx context.Context, params *LeaseGetParams) (*drovertype.Lease, error)
	// LeaseList returns the leases whose name starts with Prefix and that
	// have not expired at Now, in name order, at most Limit.
	LeaseList(ctx context.Context, params *LeaseListParams) ([]*drovertype.Lease, error)
	// LeaseCheck fails with ErrLeaseNotHeld unless Holder holds the named
	// lease at Now (ExpiresAt after Now); inside a transaction the lease
	// cannot change hands until the transaction ends (LeaseAcquire and
	// LeaseRelease wait for it), yet other transactions checking the same
	// lease need not wait for it. It is the fence a holder runs first in
	// its transactions. A driver may send the
	// check together with the transaction's next statement: its failure
	// then surfaces from that statement or from the commit, and nothing of
	// the transaction commits.
	LeaseCheck(ctx context.Context, params *LeaseCheckParams) error
	// LeaseRelease gives the lease up if Holder holds it in Term.
	LeaseRelease(ctx context.Context, params *LeaseReleaseParams) error

	// QueueExecutor: the session-queue (Sequential Convoy) primitives.
	QueueExecutor
	RemoteAgentExecutor
	WebhookExecutor
	WorkflowDefExecutor
	SignalExecutor
	ScheduleExecutor
	ConsoleExecutor
}

// Listener is an optional Driver capability: Listen delivers the topics
// other processes Notify, so roles wake at once instead of at their next
// poll. It blocks until ctx ends, reconnecting on errors. It calls
// wake(TopicListening) each time it starts listening and
// wake(TopicNotListening) when it stops (a lost connection), so that
// roles poll slowly only while notifications arrive, and know that some
// may have been missed in between.
type Listener interface {
	Listen(ctx context.Context, wake func(topic string)) error
}

// Notification topics.
const (
	// TopicTasks: tasks became claimable (submitted, recovered, resubmitted).
	TopicTasks = "tasks"
	// TopicAll: anything may have happened; wake every role.
	TopicAll = "*"
	// TopicListening and TopicNotListening are a Listener's own: it
	// listens from now on, or has stopped (notifications are missed until
	// it listens again). No process can Notify them: a notification's
	// payload holds no NUL byte.
	TopicListening    = "\x00listening"
	TopicNotListening = "\x00not-listening"
)

// TopicRequests is the topic of new unclaimed requests for an agent.
func TopicRequests(agent string) string { return "requests:" + agent }

// TopicReplies is the topic of new replies for a scheduler instance.
func TopicReplies(scheduler string) string { return "replies:" + scheduler }

// TaskListParams filters TaskList. Zero values mean no filter.
type TaskListParams struct {
	States   []drovertype.ProcessState
	Workflow string
	// Namespace, when set, lists only that namespace's tasks
	// (drovertype.DefaultNamespace: the tasks stored without a namespace).
	Namespace string
	AfterID   string // keyset pagination: tasks with ID > AfterID
	Limit     int
	// OrderingKey, when set, lists only the tasks of that ordering key.
	OrderingKey string
	// UpdatedFrom and UpdatedBefore, when not zero, list only the tasks
	// last updated at or after UpdatedFrom and before UpdatedBefore.
	UpdatedFrom, UpdatedBefore time.Time
}

// FinishedTask is a final task as TaskFinishedSince returns it: when it
// was submitted and when it reached its final state.
type FinishedTask struct {
	State     drovertype.ProcessState
	CreatedAt time.Time
	UpdatedAt time.Time
}

// TaskClaimParams are the arguments of TaskClaim.
type TaskClaimParams struct {
	Instance string
	Now      time.Time
	Limit    int
	// WriteLater promises that the caller writes every returned task with
	// TaskUpdateMany before its transaction commits (the scheduler does:
	// each claimed task is dispatched or let go of at once). The driver may
	// then only lock the tasks and return them as claimed (LockedBy,
	// Processing, UpdatedAt set) without writing them itself, saving a
	// write of each row; until the caller's write, the row lock alone keeps
	// other claims off them. A task the caller does not write stays as it
	// was when the transaction commits.
	WriteLater bool
	// After, when set, restricts the claim to tasks after it in the claim's
	// order (ClaimAt, then ID). A scheduler working through a backlog
	// passes the last task it claimed, so the claim starts where the last
	// one ended instead of walking past the index entries of every task
	// claimed before (in a database whose index keeps them until a later
	// cleanup). Tasks that become claimable before After are found by a
	// claim without it. (Where the index drops those entries at once, it is
	// only a filter.)
	After *ClaimPosition
}

// ClaimPosition is a task's place in the claim order: claimable tasks are
// claimed by drovertype.ClaimAt (AvailableAt moved earlier by priority),
// then ID.
type ClaimPosition struct {
	ClaimAt time.Time
	ID      string
}

// RequestClaimParams are the arguments of RequestClaim.
type RequestClaimParams struct {
	Agent     string
	ClaimedBy string
	Now       time.Time
	Limit     int
}

// ReplyTakeParams are the arguments of ReplyTake.
type ReplyTakeParams struct {
	Scheduler string
	Limit     int
}

// EventListParams filters EventList. Events come in ID order.
type EventListParams struct {
	TaskID     string // "" for every task
	AlertsOnly bool
	// Namespace, when set, lists only that namespace's events
	// (drovertype.NamespaceOf their subject; drovertype.DefaultNamespace:
	// the default namespace's).
	Namespace string
	AfterID   int64
	Limit     int
	// Lookup asks for every matching event committed as of the read. By
	// default a driver whose IDs do not follow commit order returns none above an ID whose transaction may still commit, so that
	// a reader resuming after the last ID it saw never skips one; that can
	// hold back committed events (and wait up to a second for an open
	// transaction). A point lookup or a check does not resume anywhere and
	// sets Lookup; a tail must not.
	Lookup bool
}

// LeaseAcquireParams are the arguments of LeaseAcquire.
type LeaseAcquireParams struct {
	Name   string
	Holder string
	Now    time.Time
	TTL    time.Duration
}

// StepRef names one step of one task.
type StepRef struct {
	TaskID string
	Index  int
}

// StepAttempt names one attempt of a step, in one direction: doing it or
// compensating it.
type StepAttempt struct {
	TaskID  string
	Index   int
	Attempt int
	Kind    drovertype.RequestKind
}

// OrderingKeyPruneParams are the arguments of OrderingKeyPrune.
type OrderingKeyPruneParams struct {
	Keys []string
}

// OrderingKeyReserveParams are the arguments of OrderingKeyReserve.
type OrderingKeyReserveParams struct {
	Keys []string
}

// StepInsertManyParams are the arguments of StepInsertMany.
type StepInsertManyParams struct {
	Steps []*drovertype.StepRecord
}

// StepListByTasksParams are the arguments of StepListByTasks.
type StepListByTasksParams struct {
	TaskIDs []string
}

// StepUpdateManyParams are the arguments of StepUpdateMany.
type StepUpdateManyParams struct {
	Steps []*drovertype.StepRecord
}

// TaskCountLockedByParams are the arguments of TaskCountLockedBy.
type TaskCountLockedByParams struct {
	Instance string
}

// TaskDeleteFinishedParams are the arguments of TaskDeleteFinished.
type TaskDeleteFinishedParams struct {
	Before time.Time // tasks last updated before it
	Limit  int
}

// TaskGetParams are the arguments of TaskGet.
type TaskGetParams struct {
	ID string
}

// TaskGetManyParams are the arguments of TaskGetMany.
type TaskGetManyParams struct {
	IDs []string
}

// TaskGetManyWithStepsParams are the arguments of TaskGetManyWithSteps.
type TaskGetManyWithStepsParams struct {
	IDs []string
}

// TaskInsertManyParams are the arguments of TaskInsertMany.
type TaskInsertManyParams struct {
	Tasks []*drovertype.Task
}

// TaskNextAvailableParams are the arguments of TaskNextAvailable.
type TaskNextAvailableParams struct {
	Now   time.Time
	Limit int
	// Due asks whether a task is claimable at Now, not held back by its
	// ordering key, and if so answers Now: for a scheduler whose claim came
	// back empty, which passed over such a task while another transaction
	// held it locked (or did not see it committed yet). Whoever holds it
	// may let it go without notifying anyone.
	Due bool
}

// TaskListExpiredParams are the arguments of TaskListExpired.
type TaskListExpiredParams struct {
	Now   time.Time
	Limit int
	// Peek reads without locking the tasks, in a transaction too: for a
	// look at what is held, not to recover it.
	Peek bool
}

// TaskListLockedByParams are the arguments of TaskListLockedBy.
type TaskListLockedByParams struct {
	Instance string
	Limit    int
}

// TaskUpdateManyParams are the arguments of TaskUpdateMany.
type TaskUpdateManyParams struct {
	Tasks []*drovertype.Task
}

// EventInsertManyParams are the arguments of EventInsertMany.
type EventInsertManyParams struct {
	Events []*drovertype.Event
}

// LeaseCheckParams are the arguments of LeaseCheck.
type LeaseCheckParams struct {
	Name   string
	Holder string
	Now    time.Time
}

// LeaseGetParams are the arguments of LeaseGet.
type LeaseGetParams struct {
	Name string
}

// LeaseReleaseParams are the arguments of LeaseRelease.
type LeaseReleaseParams struct {
	Name   string
	Holder string
	Term   int64
}

// ReplyInsertManyParams are the arguments of ReplyInsertMany.
type ReplyInsertManyParams struct {
	Replies []*drovertype.AgentReply
}

// RequestDeleteByStepParams are the arguments of RequestDeleteByStep.
type RequestDeleteByStepParams struct {
	Refs []StepRef
}

// RequestDeleteExpiredParams are the arguments of RequestDeleteExpired.
type RequestDeleteExpiredParams struct {
	Now   time.Time
	Limit int
}

// RequestInsertManyParams are the arguments of RequestInsertMany.
type RequestInsertManyParams struct {
	Requests []*drovertype.AgentRequest
}

// RequestReleaseParams are the arguments of RequestRelease.
type RequestReleaseParams struct {
	ClaimedBy string
}

// StepMessagesExistParams are the arguments of StepMessagesExist.
type StepMessagesExistParams struct {
	Attempts []StepAttempt
}

// TaskCountByStateParams are the arguments of TaskCountByState: none yet.
// (A filter, such as a namespace, would go here.)
type TaskCountByStateParams struct{}

// TaskCountActiveParams are the arguments of TaskCountActive.
type TaskCountActiveParams struct {
	// Namespace, when set, counts only that namespace's tasks, through an
	// index of the unfinished tasks of namespaces other than the default
	// one, so the count follows that namespace's alone. It must not be
	// drovertype.DefaultNamespace: the default namespace's tasks are not
	// indexed apart (see CountNamespace).
	Namespace string
}

// TaskCountActiveBySubmitterParams are the arguments of
// TaskCountActiveBySubmitter.
type TaskCountActiveBySubmitterParams struct {
	Submitter string
}

// TaskFinishedSinceParams are the arguments of TaskFinishedSince.
type TaskFinishedSinceParams struct {
	Since time.Time
	Limit int
}

// LeaseListParams are the arguments of LeaseList.
type LeaseListParams struct {
	Prefix string
	Now    time.Time
	Limit  int
}
