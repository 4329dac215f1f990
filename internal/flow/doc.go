// Package flow is drover's state machine: every transition of a task and its
// steps, written once in Go over the store's primitives so that every driver
// behaves the same.
//
// The roles call it inside one store transaction each:
//
//	Scheduler:  Claim → Advance (dispatch the next step or finish the task)
//	            ApplyReplies (fenced by attempt and CompleteBy) → Advance
//	Supervisor: Recover expired tasks (retry; past the threshold, an extended
//	            wait and retry, Error + alert, or compensate)
//	Operator:   Submit, Cancel, Resubmit
//
// Forward: a task runs its steps in index order; each dispatch increments the
// step's attempt (the fencing token) and sends a request message (stored,
// or handed in memory to an agent runtime of the same process). Backward:
// a Compensating task runs, from the highest index down, the compensations
// of its steps that completed and of a step that timed out past its
// threshold (no reply came, so its call may have taken effect), then ends
// Compensated. A step that failed with a permanent error is not undone:
// its agent answered that the call did not take effect.
package flow
