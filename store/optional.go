package store

import (
	"context"

	"github.com/drover-run/drover/drovertype"
)

// Optional Executor capabilities. An Executor may implement any of the
// interfaces below to do in one call, or in one round trip, what the
// contract otherwise does in several calls. Callers never assert them
// themselves: they call the package-level function of the same name,
// which uses the capability when the Executor has it and otherwise falls
// back to the plain Executor methods, with the same result. (This is how
// database/sql treats its drivers' optional interfaces, such as
// driver.QueryerContext.)

// TaskClaimWithStepsExecutor is an Executor that claims tasks and lists
// their steps in one call; see TaskClaimWithSteps.
type TaskClaimWithStepsExecutor interface {
	Executor
	// TaskClaimWithSteps is TaskClaim followed by StepListByTasks of the
	// claimed tasks. The steps come by task ID and index.
	TaskClaimWithSteps(ctx context.Context, params *TaskClaimParams) ([]*drovertype.Task, []*drovertype.StepRecord, error)
}

// TaskGetAndClaimExecutor is an Executor that reads the tasks of a
// scheduler tick in one call; see TaskGetAndClaim.
type TaskGetAndClaimExecutor interface {
	Executor
	// TaskGetAndClaim is the package-level TaskGetAndClaim. It may leave
	// out a task of params.IDs that another transaction holds locked
	// instead of waiting for it, and then lists it in GetAndClaim.Busy.
	TaskGetAndClaim(ctx context.Context, params *TaskGetAndClaimParams) (GetAndClaim, error)
}

// Notifier is an Executor that signals other processes; see Notify.
type Notifier interface {
	Executor
	// Notify is the package-level Notify.
	Notify(ctx context.Context, params *NotifyParams) error
}

// TaskClaimWithSteps is TaskClaim followed by StepListByTasks of the
// claimed tasks, in one call when x implements TaskClaimWithStepsExecutor
// (one round trip), else as ClaimThenListSteps. The steps come by task ID
// and index.
func TaskClaimWithSteps(ctx context.Context, x Executor, params *TaskClaimParams) ([]*drovertype.Task, []*drovertype.StepRecord, error) {
	if cx, ok := x.(TaskClaimWithStepsExecutor); ok {
		return cx.TaskClaimWithSteps(ctx, params)
	}
	return ClaimThenListSteps(ctx, x, params)
}

// ClaimThenListSteps is TaskClaimWithSteps as its two calls, TaskClaim
// then StepListByTasks of the claimed tasks: the fallback, also for paths
// of a driver that gain nothing from doing both at once.
func ClaimThenListSteps(ctx context.Context, x Executor, params *TaskClaimParams) ([]*drovertype.Task, []*drovertype.StepRecord, error) {
	tasks, err := x.TaskClaim(ctx, params)
	if err != nil || len(tasks) == 0 {
		return tasks, nil, err
	}
	ids := make([]string, len(tasks))
	for i, t := range tasks {
		ids[i] = t.ID
	}
	steps, err := x.StepListByTasks(ctx, &StepListByTasksParams{TaskIDs: ids})
	if err != nil {
		return nil, nil, err
	}
	return tasks, steps, nil
}

// TaskGetAndClaimParams are the arguments of TaskGetAndClaim.
type TaskGetAndClaimParams struct {
	// IDs are the tasks to read (and lock) with their steps.
	IDs []string
	// Claim is the claim to make after, if Claim.Limit > 0.
	Claim TaskClaimParams
}

// GetAndClaim is what TaskGetAndClaim read.
type GetAndClaim struct {
	Got     []*drovertype.Task       // the tasks of IDs, locked
	Claimed []*drovertype.Task       // the tasks claimed
	Steps   []*drovertype.StepRecord // the steps of the tasks in Got and Claimed, each once
	// Busy lists the tasks of IDs that another transaction held locked and
	// that were therefore left out of Got rather than waited for (a task
	// that does not exist is in neither). A busy task can still be in
	// Claimed, if that transaction made it claimable and committed before
	// the claim ran. A driver whose transactions never overlap, or that
	// waits, reports none.
	Busy []string
}

// TaskGetAndClaim is TaskGetManyWithSteps of params.IDs, then
// TaskClaimWithSteps of params.Claim (when its Limit > 0): the reads of a
// scheduler tick, in one call (which a driver can send in one round trip)
// when x implements TaskGetAndClaimExecutor, else as GetThenClaim. (The
// steps of IDs need not be locked: their tasks are, and every writer of
// steps locks the task first.) A task of IDs that is claimable (and, being
// locked by this transaction, not skipped) may come back in both sets. A
// task of IDs that another transaction holds locked may be left out
// instead of waited for: it is then listed in Busy.
func TaskGetAndClaim(ctx context.Context, x Executor, params *TaskGetAndClaimParams) (GetAndClaim, error) {
	if gx, ok := x.(TaskGetAndClaimExecutor); ok {
		return gx.TaskGetAndClaim(ctx, params)
	}
	return GetThenClaim(ctx, x, params)
}

// GetThenClaim is TaskGetAndClaim as its calls, TaskGetManyWithSteps then
// TaskClaimWithSteps: the fallback, also for paths of a driver that gain
// nothing from doing both at once. It waits for locked tasks (Busy stays
// empty).
func GetThenClaim(ctx context.Context, x Executor, params *TaskGetAndClaimParams) (r GetAndClaim, err error) {
	ids := params.IDs
	if len(ids) > 0 {
		if r.Got, r.Steps, err = x.TaskGetManyWithSteps(ctx, &TaskGetManyWithStepsParams{IDs: ids}); err != nil {
			return GetAndClaim{}, err
		}
	}
	if params.Claim.Limit > 0 {
		var more []*drovertype.StepRecord
		if r.Claimed, more, err = TaskClaimWithSteps(ctx, x, &params.Claim); err != nil {
			return GetAndClaim{}, err
		}
		r.Steps = appendStepsOfOthers(r.Steps, more, ids)
	}
	return r, nil
}

// appendStepsOfOthers appends to steps those of more whose task is not in
// ids (whose steps steps already holds).
func appendStepsOfOthers(steps, more []*drovertype.StepRecord, ids []string) []*drovertype.StepRecord {
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

// NotifyParams are the arguments of Notify.
type NotifyParams struct {
	// Topic is what to signal: TopicTasks, TopicRequests(agent), ...
	Topic string
}

// Notify signals params.Topic to other processes once the transaction
// commits (see Listener), if x implements Notifier. Otherwise it does
// nothing: every role also polls, so a lost or missing notification only
// costs latency.
func Notify(ctx context.Context, x Executor, params *NotifyParams) error {
	if n, ok := x.(Notifier); ok {
		return n.Notify(ctx, params)
	}
	return nil
}

// Advisor is a Driver that can tell which settings of its database work
// against drover; see Advise.
type Advisor interface {
	Driver
	// Advise returns one sentence per such setting: what is set, what it
	// costs, and what to do. None when the database is set up well.
	Advise(ctx context.Context) ([]string, error)
}

// Advise returns d's advice on its database's settings (Advisor), or
// nothing for a driver that gives none.
func Advise(ctx context.Context, d Driver) ([]string, error) {
	if a, ok := d.(Advisor); ok {
		return a.Advise(ctx)
	}
	return nil, nil
}
