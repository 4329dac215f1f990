package store

import (
	"context"
	"time"

	"github.com/drover-run/drover/drovertype"
)

// SignalExecutor holds the primitives of signals, the external events a
// signal step waits for (drovertype.Signal). The caller locks the task
// (TaskGetManyWithSteps in the transaction) before SignalInsert, so a
// signal and the step reaching its wait are ordered by the task's lock.
type SignalExecutor interface {
	// SignalInsert stores Signal unless the task already has a signal of
	// the same Name and ID: then it changes nothing and returns false.
	// ConsumedAt is stored as given (normally nil).
	SignalInsert(ctx context.Context, params *SignalInsertParams) (inserted bool, err error)
	// SignalTake consumes, for each entry of Takes, the oldest signal of
	// its task and name not yet consumed (or exactly the one of ID, when
	// set and not consumed), marking it consumed At by the entry's step
	// and attempt, and returns it; taken[i] is nil when there was none.
	// Entries are for distinct tasks.
	SignalTake(ctx context.Context, params *SignalTakeParams) (taken []*drovertype.Signal, err error)
	// SignalList returns the signals of TaskID, oldest first.
	SignalList(ctx context.Context, params *SignalListParams) ([]*drovertype.Signal, error)
}

// SignalInsertParams are the arguments of SignalInsert.
type SignalInsertParams struct {
	Signal *drovertype.Signal
}

// SignalTake is one entry of SignalTakeParams: the step waiting for
// signal Name of TaskID, at its Attempt.
type SignalTake struct {
	TaskID    string
	Name      string
	ID        string // "" for the oldest not consumed
	StepIndex int
	Attempt   int
}

// SignalTakeParams are the arguments of SignalTake.
type SignalTakeParams struct {
	Takes []SignalTake
	At    time.Time
}

// SignalListParams are the arguments of SignalList.
type SignalListParams struct {
	TaskID string
}
