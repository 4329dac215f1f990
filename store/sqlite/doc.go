// Package sqlite is drover's embedded state-store driver: one SQLite file in WAL
// mode, shared safely by goroutines and by several processes on one host.
//
// Writes go through a single pooled connection that opens transactions with
// BEGIN IMMEDIATE, so writers in one process queue in Go instead of spinning on
// SQLITE_BUSY; other processes wait up to the busy timeout. Reads use their own
// pool and run beside the writer, as WAL allows.
//
// Migrations are the embedded migrations/*.sql files, applied in version order,
// each in its own transaction.
package sqlite
