// Package httpapi is drover's HTTP API: JSON over HTTP/1.1 and HTTP/2 (with
// TLS), versioned under /v1, described by the OpenAPI 3.1 document served at
// /openapi.json (openapi.json in this directory, embedded).
//
// A Handler serves:
//
//   - tasks (Scheduler Agent Supervisor): submit (idempotent with a
//     caller-chosen ID, optional ordering key), get with steps, list with
//     filters and keyset pagination, resubmit, cancel;
//   - operator alerts: list (cursor-paginated) and acknowledge;
//   - session queues (Sequential Convoy): publish, list queues and
//     sessions, peek, list dead letters, resubmit or discard one;
//   - /healthz (liveness), /readyz (readiness: the store answers a cheap
//     read within a timeout) and /openapi.json.
//
// Security: every /v1 route needs an "Authorization: Bearer <token>" header
// naming a configured token (compared in constant time; never logged). A token
// has the scope submit (submit tasks, read tasks, alerts and queues, publish),
// operator (everything, including resubmit, cancel, acknowledge and
// dead-letter actions), metrics (GET /metrics) and/or agent, bound to the
// remote agents it serves (Token.Agents). Only remote agents
// (Options.RemoteAgent) are handed to pollers. Without a token: 401; with
// too small a scope, or for another agent: 403. Unknown tokens are limited
// per client address, requests per token (429 with Retry-After), waiting
// calls and event streams per token (429) and per server (503), and body
// size (413). JSON bodies are decoded strictly: unknown or wrongly-cased fields,
// wrong types, malformed JSON and trailing data are 400 errors naming the
// problem. Every error is a JSON body {"error": {"code": ..., "message": ...}}.
//
// The operator console (internal/console), served beside the API,
// authenticates with the same tokens through Handler.Authenticate and
// Identity (identity.go), so a console session has exactly the
// permissions of its token.
//
// Acknowledgements of alerts are recorded in the event history as events of
// type "alert_acknowledged" on the alert's subject (its task, or its session
// "session:<queue>/<id>"), with the message "acknowledged alert <id>": durable,
// visible in the task's history, deleted with the task by retention.
package httpapi
