// Package httpagent is the caller behind drover's built-in HTTP agent: a step
// declared with a URL instead of Go code is run by an agent function that
// renders the request (method, URL, headers, body) and hands it to
// Caller.Do. The package knows nothing of the store or of workflows; it only
// makes one logical HTTP call as safely as a flaky remote service allows.
//
// What Do does with a Request:
//
//   - Every try carries the request's IdempotencyKey in the Idempotency-Key
//     header, so the remote service can de-duplicate retries (the step's key is
//     stable across tries, attempts and process restarts).
//   - Status codes are classified: 2xx success; 5xx, 408, 425 and 429
//     transient; every other code permanent (redirects are not followed, so
//     1xx and 3xx are permanent too). Request.Status overrides single codes,
//     2xx included (a 202 "still working" can be made transient).
//   - Transient failures (transient statuses, connection errors, transport
//     timeouts, an open circuit breaker) are retried with exponential back-off
//     and jitter until RetryPolicy.MaxTries or the context's deadline.
//     Retry-After on 429 and 503 replaces the back-off when the wait ends
//     before the deadline. A try that could only start after the deadline is
//     not made: Do gives up at once and returns the last failure, unwrapped,
//     so the agent runtime leaves the step to the supervisor.
//   - Permanent failures (permanent statuses, a bad method or URL, a response
//     larger than Options.MaxResponseBytes, a TLS certificate that does not
//     verify) return at once wrapped with drover.Permanent: the step fails
//     and an operator alert is raised.
//   - The context's deadline (the step's CompleteBy) cuts the call in flight
//     and any wait (back-off, a concurrency slot).
//   - Each host (scheme, host and port) has its own circuit breaker, counting
//     only transient failures, and its own limit of calls in flight; calls
//     over the limit wait for a slot or the end of their context. At most
//     Options.MaxHosts hosts are kept: the least recently called one that
//     no call holds is forgotten first.
//   - Every call goes through an egress policy (internal/egress): the URL
//     is checked before anything is sent and every address connected to
//     is checked at connect time, after DNS. A refused call is a permanent
//     failure whose message starts with "egress denied: " and names the
//     host, the address and why; it reaches nothing. Each policy has its
//     own connection pool, and no proxy is used.
//
// The step output is always JSON: a 2xx body that is valid JSON is returned
// as is, an empty body becomes null, anything else becomes a JSON string.
//
// Errors name the method, the URL without userinfo and with query values
// redacted, the status and the first 200 bytes of the response body; logs
// never carry header values (tokens live there).
package httpagent
