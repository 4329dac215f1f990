// Package flow is drover's state machine: every transition of a task and its
// steps, written once in Go over the store's primitives so that every driver
// behaves the same.
//
// The roles call it inside one store transaction each:
//
//	Scheduler:  Claim → Advance (dispatch the next step or finish the task)
//	            ApplyReplies (fenced by attempt and CompleteBy) → Advance
//	Supervisor: Recover expired tasks (retry, Error + alert, or compensate)
//	Operator:   Submit, Cancel, Resubmit
//
// Forward: a task runs its steps in index order; each dispatch increments the
// step's attempt (the fencing token) and sends a request message (stored,
// or handed in memory to an agent runtime of the same process). Backward:
// a Compensating task runs the compensations of its Processed steps from the
// highest index down, then ends Compensated.
package flow
