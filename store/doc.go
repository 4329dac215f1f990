// Package store defines the contract every drover state-store driver implements.
//
// A driver owns one database holding tasks, steps, the agent request and
// reply queues, the event history, leader leases, session queues, webhook
// deliveries and workflow definitions. The engine keeps all state-machine
// logic in Go on top of the small, batch-shaped primitives of [Executor], so
// every driver implements only SQL and one conformance suite (package
// storetest) checks every driver the same way.
//
// # The contract
//
// [Driver] opens transactions ([Driver.InTx], [Driver.InExternalTx]) and
// hands out an [Executor] for each, or one for reads ([Driver.Reader]).
// Every Executor method is named noun then verb (TaskClaim, RequestClaim,
// ReplyTake, OrderingKeyReserve, SessionAccept, WebhookDeliveryClaim) and
// takes ctx and a pointer to a parameters struct named after it
// (TaskClaim takes *[TaskClaimParams]), as River's riverdriver does, even
// when it has no field yet ([TaskCountByStateParams]), so that one can be
// added without changing the method. Results come back as values. The
// verbs keep one meaning: Claim hands rows to a claimant and keeps them
// (TaskClaim, RequestClaim, WebhookDeliveryClaim), Take deletes the rows it
// returns (ReplyTake), Release gives what was claimed, accepted or
// acquired back.
// The Executor is split by subject into [QueueExecutor] (session queues),
// [RemoteAgentExecutor] (agents reached over HTTP), [WebhookExecutor] and
// [WorkflowDefExecutor], all part of Executor.
//
// What a driver can do in fewer calls, but need not, is an optional
// interface, as in database/sql: [TaskClaimWithStepsExecutor],
// [TaskGetAndClaimExecutor] and [Notifier]. Callers do not assert them:
// they call the package functions [TaskClaimWithSteps], [TaskGetAndClaim]
// and [Notify], which use the capability when the Executor has it and
// otherwise do the same with the plain methods ([ClaimThenListSteps],
// [GetThenClaim]; Notify then does nothing, as every role also polls). A
// wrapper that embeds an Executor hides its optional methods unless it
// forwards them. [Listener] is the optional Driver capability that receives
// notifications.
//
// The comments of the contract speak of no particular database: where
// drivers may differ (whether writers overlap, whether a busy row is
// skipped or waited for), they say what either choice means for the
// caller, and each driver's package documentation says which it makes.
//
// # Locking
//
// Reads made through an Executor inside [Driver.InTx] lock the rows they
// return until the transaction ends (a row lock, or a write lock the whole
// transaction holds). The engine relies on that to fence replies,
// recoveries and leader actions with read-check-write.
// [Executor.OrderingKeyReserve] likewise locks the ordering keys it reserves
// until the transaction ends, so positions within a key follow commit order.
package store
