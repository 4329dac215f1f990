// Package console is the operator console: HTML pages served by drover
// server at /, rendered on the server with html/template, its stylesheet
// and its one script (live updates of the task page over server-sent
// events) embedded; no request to another host.
//
// It reads and acts through the same calls as the HTTP API
// (drover.Client's Tasks, Task, Events, Counts, Active, Finished,
// SupervisorLeader, Instances, HeldTasks, Alerts, Resubmit, CancelAs, AckAlertIn;
// convoy.Client's QueuesIn, Depth, QueuePolicy, Sessions,
// Session, Peek, DeadLetters, SessionEvents, ResubmitDeadLetter,
// DiscardDeadLetter) and authenticates with the API's tokens
// (httpapi.Handler.Authenticate): a token with the submit scope sees
// every page, actions need the operator scope.
//
// Sign-in takes a bearer token and sets the cookie drover_session:
// HttpOnly, SameSite=Strict, Secure over TLS, holding the token sealed
// with AES-GCM under a key derived from the configured tokens
// (httpapi.Handler.SessionKey), with a session ID and an expiry. Every
// request re-checks the token, so a token removed from the configuration
// ends its sessions. Every POST carries a CSRF token (an HMAC of the
// session ID) in a hidden field. Without auth (loopback only) a session
// without a token is issued on the first page, for the CSRF token, and
// the API's Host and Origin checks apply.
package console
