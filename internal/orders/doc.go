// Package orders is the e-commerce example of the Scheduler Agent Supervisor
// pattern as a reusable workflow: reserve stock, charge the customer, ship the
// parcel. Each step is done by an agent that calls a remote service (the
// simulated one in internal/remotesim) with the step's idempotency key, so
// retries, supervisor recoveries and resubmissions never apply an effect twice.
//
// When a step fails for good (a permanent error, or it timed out
// FailureThreshold times) the workflow is compensated: completed steps are
// undone in reverse order by their compensation agents (release the stock,
// refund the charge). Shipping has no compensation: it is the last step, so
// once it is done the task is Processed.
//
// The task input is one JSON object, {"order_id":"o-1","amount":1234}; both
// fields are required and no other field is allowed. The workflow's
// ValidateInput refuses other inputs at submission (ErrInvalidInput).
//
// It is the demo's workflow: "drover demo" and "drover server --demo"
// (package democmd) run it, "drover bench" (package benchcmd) measures it,
// and "drover submit" knows it. A server runs its agents only with --demo.
package orders
