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
	// conflicted with another one (PostgreSQL: a deadlock, SQLSTATE 40P01,
	// or a serialization failure, 40001). Nothing of it committed and the
	// work itself is not at fault: roll back and run the transaction again.
	// The driver's own error stays in the chain (errors.As).
	ErrConflict = errors.New("transaction conflicted with another; retry it")
	// ErrBadData: the database refused a value the transaction wrote
	// (PostgreSQL: a data exception, SQLSTATE class 22, such as a NUL
	// character or invalid UTF-8 in text; a value too large for the
	// database). Nothing of the transaction committed, and running it
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
	// InExternalTx runs fn inside a transaction the caller owns (for SQLite a
	// *sql.Tx on the same database file); the caller commits or rolls back.
	InExternalTx(ctx context.Context, tx any, fn func(ctx context.Context, x Executor) error) error
	// Reader returns an Executor for reads outside any write transaction.
	Reader() Executor
	// Close releases the database.
	Close() error
}

// Executor runs the store primitives. Every method takes ctx first. Methods that
// take slices apply all of them in order; drivers may batch them.
type Executor interface {
	// TaskInsertMany inserts tasks whose ID is not taken yet; inserted[i]
	// reports whether tasks[i] was inserted (false: the ID exists, nothing
	// changed). IDs within one call must be distinct.
	TaskInsertMany(ctx context.Context, tasks []*drovertype.Task) (inserted []bool, err error)
	TaskGet(ctx context.Context, id string) (*drovertype.Task, error)
	TaskGetMany(ctx context.Context, ids []string) ([]*drovertype.Task, error)
	// TaskGetManyWithSteps is TaskGetMany and StepListByTasks of the same
	// IDs in one call (inside a transaction both lock their rows, the tasks
	// first), so that a driver can fetch both in one round trip. On the
	// Reader both reads see one snapshot of the database: the steps are
	// those of the tasks as returned, never of a later state.
	TaskGetManyWithSteps(ctx context.Context, ids []string) ([]*drovertype.Task, []*drovertype.StepRecord, error)
	TaskList(ctx context.Context, p TaskListParams) ([]*drovertype.Task, error)
	TaskCountByState(ctx context.Context) (map[drovertype.ProcessState]int, error)
	TaskCountLockedBy(ctx context.Context, instance string) (int, error)
	// TaskCountActive counts the tasks not yet final: Pending, Processing or
	// Compensating. Cheap (index-only), for queue-depth monitoring.
	TaskCountActive(ctx context.Context) (int, error)
	// TaskCountActiveBySubmitter counts the tasks not yet final (as
	// TaskCountActive) whose Submitter is submitter, which is not "".
	// Index-only, for the quota of tasks in flight per token.
	TaskCountActiveBySubmitter(ctx context.Context, submitter string) (int, error)
	// TaskFinishedSince returns the final tasks (Processed, Error,
	// Compensated, Cancelled) last updated at or after since, newest
	// first, at most limit, each as its state and times only. It reads
	// the index of final tasks by update time, so its cost follows limit
	// and not the table.
	TaskFinishedSince(ctx context.Context, since time.Time, limit int) ([]FinishedTask, error)
	// TaskClaim atomically locks up to Limit claimable tasks for Instance:
	// Pending ones, and Compensating ones nobody holds, available at Now.
	// A Pending task with an OrderingKey is claimable only when no task with
	// the same key and a smaller OrderingSeq is still non-final (Pending,
	// Processing or Compensating); Compensating tasks have started and are
	// not held back. Pending tasks become Processing. Oldest first.
	TaskClaim(ctx context.Context, p TaskClaimParams) ([]*drovertype.Task, error)
	// TaskClaimWithSteps is TaskClaim followed by StepListByTasks of the
	// claimed tasks, in one call, so that a driver can do both in one round
	// trip. The steps come by task ID and index.
	TaskClaimWithSteps(ctx context.Context, p TaskClaimParams) ([]*drovertype.Task, []*drovertype.StepRecord, error)
	// TaskGetAndClaim is TaskGetManyWithSteps of ids, then
	// TaskClaimWithSteps of p (when p.Limit > 0), in one call: the reads of
	// a scheduler tick, which a driver can send in one round trip. (The
	// steps of ids need not be locked: their tasks are, and every writer of
	// steps locks the task first.) A task
	// of ids that is claimable (and, being locked by this transaction, not
	// skipped) may come back in both sets. A task of ids that another
	// transaction holds locked may be left out instead of waited for: it
	// is then listed in Busy.
	TaskGetAndClaim(ctx context.Context, ids []string, p TaskClaimParams) (GetAndClaim, error)
	// TaskListLockedBy returns the non-final tasks an instance holds.
	TaskListLockedBy(ctx context.Context, instance string, limit int) ([]*drovertype.Task, error)
	// TaskListExpired returns held tasks whose CompleteBy is before Now.
	TaskListExpired(ctx context.Context, now time.Time, limit int) ([]*drovertype.Task, error)
	// TaskDeleteFinished deletes up to limit final tasks (Processed, Error,
	// Compensated, Cancelled) last updated before before, oldest first, with
	// their steps, requests, replies and events. It returns how many.
	// A key whose last task it deletes loses its ordering_keys row (the
	// schema counts each key's tasks), so the key's next task starts again
	// at position 1: no task of the key is left to order against. It never
	// waits for a submit: on PostgreSQL it leaves the tasks of keys a
	// submitting transaction holds for a later call.
	TaskDeleteFinished(ctx context.Context, before time.Time, limit int) (int, error)
	// TaskUpdateMany writes the mutable fields of each task.
	TaskUpdateMany(ctx context.Context, tasks []*drovertype.Task) error

	// OrderingSeqReserve hands out positions within ordering keys: for
	// each entry of keys (a key may repeat) the next position of that key,
	// consecutive per key in input order, starting at 1 for a new key.
	// Positions are never handed out twice, but a rolled-back transaction
	// gives its back, and a reservation whose task is not inserted leaves
	// a gap.
	//
	// It locks each key until the transaction ends, so a second
	// transaction reserving the same key waits until the first commits or
	// rolls back. That is what makes positions follow commit order: a task
	// with a higher position never becomes visible before one with a lower
	// position of the same key. (PostgreSQL: the key's row in
	// ordering_keys, locked in sorted key order; SQLite: the write lock.)
	// Reserve and insert in the same transaction.
	OrderingSeqReserve(ctx context.Context, keys []string) ([]int64, error)
	// OrderingKeysPrune deletes the ordering_keys rows of keys that no
	// task has (a key may repeat; unknown keys are ignored), so that their
	// next task starts again at position 1. Call it in the transaction
	// that reserved them, after inserting: a submit whose task existed
	// already would otherwise leave a new key's row behind for good, as no
	// task of it is ever deleted.
	OrderingKeysPrune(ctx context.Context, keys []string) error

	StepInsertMany(ctx context.Context, steps []*drovertype.StepRecord) error
	// StepListByTasks returns the steps of the given tasks ordered by task
	// then index.
	StepListByTasks(ctx context.Context, taskIDs []string) ([]*drovertype.StepRecord, error)
	// StepUpdateMany writes the mutable fields of each step, including
	// IdempotencyKey (it changes only when a Compensated task is
	// resubmitted: a new run gets new keys).
	StepUpdateMany(ctx context.Context, steps []*drovertype.StepRecord) error

	RequestInsertMany(ctx context.Context, reqs []*drovertype.AgentRequest) error
	// RequestClaim hands up to Limit unclaimed requests for Agent, oldest
	// first, to ClaimedBy, with their payload joined in. Requests whose
	// CompleteBy has passed are not handed out.
	RequestClaim(ctx context.Context, p RequestClaimParams) ([]*drovertype.AgentRequest, error)
	// RequestDeleteByStep deletes every request of the given steps.
	RequestDeleteByStep(ctx context.Context, refs []StepRef) error
	// StepMessagesExist reports, for each of the given step attempts,
	// whether a request or reply of that attempt and kind is stored
	// (exists[i] for attempts[i]): whether a message of it is still on its
	// way between scheduler and agent. Another attempt's (a late reply of
	// an earlier one) does not count.
	StepMessagesExist(ctx context.Context, attempts []StepAttempt) (exists []bool, err error)
	// RequestRelease frees the requests claimed by an agent instance, so they
	// are handed out again (used when that instance restarts).
	RequestRelease(ctx context.Context, claimedBy string) (int, error)
	// RequestDeleteExpired deletes requests whose CompleteBy is before now.
	RequestDeleteExpired(ctx context.Context, now time.Time, limit int) (int, error)

	ReplyInsertMany(ctx context.Context, replies []*drovertype.AgentReply) error
	// ReplyTake deletes and returns up to Limit replies for tasks locked by
	// Scheduler, or for tasks nobody holds (stale replies to discard).
	ReplyTake(ctx context.Context, p ReplyTakeParams) ([]*drovertype.AgentReply, error)

	EventInsertMany(ctx context.Context, events []*drovertype.Event) error
	EventList(ctx context.Context, p EventListParams) ([]*drovertype.Event, error)

	// LeaseAcquire takes or renews the named lease for Holder: it succeeds
	// when the lease is free, expired at Now, or already Holder's. The term
	// increments whenever the holder changes.
	LeaseAcquire(ctx context.Context, p LeaseParams) (lease *drovertype.Lease, acquired bool, err error)
	LeaseGet(ctx context.Context, name string) (*drovertype.Lease, error)
	// LeaseList returns the leases whose name starts with prefix and that
	// have not expired at now, in name order, at most limit.
	LeaseList(ctx context.Context, prefix string, now time.Time, limit int) ([]*drovertype.Lease, error)
	// LeaseCheck fails with ErrLeaseNotHeld unless holder holds the named
	// lease at now (ExpiresAt after now); inside a transaction the lease
	// cannot change hands until the transaction ends (LeaseAcquire and
	// LeaseRelease wait for it), yet other transactions checking the same
	// lease need not wait for it. It is the fence a holder runs first in
	// its transactions. A driver may send the
	// check together with the transaction's next statement: its failure
	// then surfaces from that statement or from the commit, and nothing of
	// the transaction commits.
	LeaseCheck(ctx context.Context, name, holder string, now time.Time) error
	// LeaseRelease gives the lease up if Holder holds it in Term.
	LeaseRelease(ctx context.Context, name, holder string, term int64) error

	// Notify signals topic to other processes once the transaction commits
	// (see Listener). Drivers without cross-process notifications do nothing;
	// every role also polls, so a lost notification only costs latency.
	Notify(ctx context.Context, topic string) error

	// QueueExecutor: the session-queue (Sequential Convoy) primitives.
	QueueExecutor
	RemoteAgentExecutor
	WebhookExecutor
	WorkflowDefExecutor
}

// Listener is an optional Driver capability: Listen delivers the topics
// other processes Notify, so roles wake at once instead of at their next
// poll. It blocks until ctx ends, reconnecting on errors; after a
// reconnect it calls wake(TopicAll), since notifications may have been
// missed meanwhile.
type Listener interface {
	Listen(ctx context.Context, wake func(topic string)) error
}

// Notification topics.
const (
	// TopicTasks: tasks became claimable (submitted, recovered, resubmitted).
	TopicTasks = "tasks"
	// TopicAll: anything may have happened; wake every role.
	TopicAll = "*"
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
	// order (AvailableAt, then ID). A scheduler working through a backlog
	// passes the last task it claimed, so the claim starts where the last
	// one ended instead of walking past the index entries of every task
	// claimed before (on PostgreSQL they stay until VACUUM). Tasks that
	// become claimable before After are found by a claim without it. (On
	// SQLite, whose index drops those entries at once, it is only a filter.)
	After *ClaimPosition
}

// ClaimPosition is a task's place in the claim order.
type ClaimPosition struct {
	AvailableAt time.Time
	ID          string
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
	// default a driver whose IDs do not follow commit order (PostgreSQL)
	// returns none above an ID whose transaction may still commit, so that
	// a reader resuming after the last ID it saw never skips one; that can
	// hold back committed events (and wait up to a second for an open
	// transaction). A point lookup or a check does not resume anywhere and
	// sets Lookup; a tail must not.
	Lookup bool
}

// LeaseParams are the arguments of LeaseAcquire.
type LeaseParams struct {
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

// ClaimThenListSteps is TaskClaimWithSteps as its two calls, TaskClaim then
// StepListByTasks of the claimed tasks: for drivers, or paths of a driver,
// that gain nothing from doing both at once.
func ClaimThenListSteps(ctx context.Context, x Executor, p TaskClaimParams) ([]*drovertype.Task, []*drovertype.StepRecord, error) {
	tasks, err := x.TaskClaim(ctx, p)
	if err != nil || len(tasks) == 0 {
		return tasks, nil, err
	}
	ids := make([]string, len(tasks))
	for i, t := range tasks {
		ids[i] = t.ID
	}
	steps, err := x.StepListByTasks(ctx, ids)
	if err != nil {
		return nil, nil, err
	}
	return tasks, steps, nil
}

// GetAndClaim is what TaskGetAndClaim read.
type GetAndClaim struct {
	Got     []*drovertype.Task       // the tasks of ids, locked
	Claimed []*drovertype.Task       // the tasks claimed
	Steps   []*drovertype.StepRecord // the steps of the tasks in Got and Claimed, each once
	// Busy lists the tasks of ids that another transaction held locked and
	// that were therefore left out of Got rather than waited for (a task
	// that does not exist is in neither). A busy task can still be in
	// Claimed, if that transaction made it claimable and committed before
	// the claim ran. A driver whose transactions never overlap, or that
	// waits, reports none.
	Busy []string
}

// GetThenClaim is TaskGetAndClaim as its calls, TaskGetManyWithSteps then
// TaskClaimWithSteps: for drivers, or paths of a driver, that gain nothing
// from doing both at once. It waits for locked tasks (Busy stays empty).
func GetThenClaim(ctx context.Context, x Executor, ids []string, p TaskClaimParams) (r GetAndClaim, err error) {
	if len(ids) > 0 {
		if r.Got, r.Steps, err = x.TaskGetManyWithSteps(ctx, ids); err != nil {
			return GetAndClaim{}, err
		}
	}
	if p.Limit > 0 {
		var more []*drovertype.StepRecord
		if r.Claimed, more, err = x.TaskClaimWithSteps(ctx, p); err != nil {
			return GetAndClaim{}, err
		}
		r.Steps = AppendStepsOfOthers(r.Steps, more, ids)
	}
	return r, nil
}

// AppendStepsOfOthers appends to steps those of more whose task is not in
// ids (whose steps steps already holds).
func AppendStepsOfOthers(steps, more []*drovertype.StepRecord, ids []string) []*drovertype.StepRecord {
	if len(ids) == 0 {
		return append(steps, more...)
	}
	have := make(map[string]bool, len(ids))
	for _, id := range ids {
		have[id] = true
	}
	for _, s := range more {
		if !have[s.TaskID] {
			steps = append(steps, s)
		}
	}
	return steps
}
