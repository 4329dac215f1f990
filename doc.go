// Package drover makes multi-step operations against flaky remote services
// succeed or fail as a whole, with the Scheduler Agent Supervisor pattern.
//
// # Concepts
//
// A [Workflow] is an ordered list of steps; each [Step] names an agent, a time
// budget and optionally a compensation agent. An [Agent] is a Go function that
// calls one remote service. A task is one run of a workflow on one input.
//
// Three roles run the tasks, in one process or spread over several:
//
//   - the Scheduler claims Pending tasks (LockedBy), sends each step's request
//     to its agent through a queue in the store, and applies the replies — only
//     if their attempt is current and their CompleteBy has not passed;
//   - the Agent runtime calls agent functions with retries, a circuit breaker
//     and a hard deadline, passing a stable idempotency key on every try;
//   - the Supervisor, elected through a lease, finds steps whose CompleteBy
//     passed, increments FailureCount and retries them; past the threshold it
//     waits an extended period and retries them (Workflow.Wait), or marks the
//     task Error with an operator alert, or has it compensated, per the
//     workflow's (or the step's) policy.
//
// Every state change is one transaction in the state store (package store; the
// default driver is store/sqlite), so a crash at any point loses nothing that
// was committed.
//
// # States
//
// A task moves Pending → Processing → Processed | Error; when it must be undone
// it moves to Compensating → Compensated | Error. Any non-final task can be
// Cancelled; Error and Cancelled tasks can be resubmitted.
//
// # Ordered tasks
//
// Tasks submitted with the same [SubmitOptions].OrderingKey run one at a
// time, in the order their submissions committed: a task starts only once
// every earlier task of its key is final (Processed, Error, Compensated or
// Cancelled). Retries and supervisor recoveries keep a task at the head of
// its key, so the next one waits through them. Tasks with different keys, or
// none, run in parallel. Each keyed task records its position in
// Task.OrderingSeq.
//
// # Getting started
//
//	drv, _ := sqlite.Open(ctx, "drover.db", sqlite.Options{Create: true})
//	client, _ := drover.New(drover.Config{
//		Store:     drv,
//		Workflows: []drover.Workflow{{Name: "order", Steps: []drover.Step{{Name: "charge", Agent: "payments", Timeout: 10 * time.Second}}}},
//		Agents:    []drover.Agent{{Name: "payments", Func: charge}},
//	})
//	client.Migrate(ctx)
//	client.Start(ctx)
//	task, _ := client.Submit(ctx, "order", []byte(`{"order_id":"o-1"}`), nil)
//
// # Tracing
//
// Set Config.TracerProvider to an OpenTelemetry provider and every task is
// one trace: a drover.submit span (a child of the span in Submit's
// context) whose context is stored with the task, and the spans of its
// step attempts, agent calls, recoveries, compensations and final state as
// its children, in whichever process runs them. An agent function's
// context carries its call's span. nil is off. See docs/operations.md,
// Tracing.
//
// See the examples and docs/architecture.md for more.
package drover
