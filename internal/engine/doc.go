// Package engine runs a process's roles: its schedulers, its agent
// runtime with the fast path between them, its supervisor and the expiry
// of session-queue dedupe entries (package maintenance), built from
// one Config and started and stopped together as a startstop.Group. It
// routes the process's notifications (package notifier) to the role they
// concern, and starts tasks in their Submit transaction (eager start,
// BeginStart). Package drover's Client fills the Config and holds the
// instance lease; nothing else wires roles.
package engine
