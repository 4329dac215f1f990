// Package notifier is the process's one hub of cross-process wake-ups.
//
// Every transaction that creates work calls store.Notify with a
// topic; on a driver with a store.Listener (PostgreSQL's LISTEN/NOTIFY)
// the topics other processes send arrive here. A Hub, one per driver per
// process (For), holds one listening connection while anyone subscribes,
// parses each payload once into a typed Topic and hands it to every
// subscriber: the task roles (package drover's Client), session-queue
// consumers (package convoy), the HTTP API's waiting remote-agent polls and
// the webhook dispatcher (the Events topic, which InsertEvents sends when
// it writes a final state or an alert).
// Without a store.Listener (SQLite) nothing arrives and every role polls.
package notifier
