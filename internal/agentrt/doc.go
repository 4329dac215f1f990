// Package agentrt is the Agent role: it pulls requests from the store's request
// queue, calls each agent's function with retries, a circuit breaker and a hard
// deadline (the request's CompleteBy), and sends replies back to the Scheduler.
//
// Once CompleteBy passes the runtime abandons the call and sends nothing, not
// even an error: the Supervisor recovers the step instead.
//
// Package engine runs it beside the process's schedulers: a request of a
// scheduler of the same process is handed over in memory (the fast path),
// others are taken from the store, woken by the notifier's Requests topic.
package agentrt
