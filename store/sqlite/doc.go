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
//
// # The SQLite library
//
// A cgo build links mattn/go-sqlite3; a build without cgo (CGO_ENABLED=0, or
// no C compiler), or with the tag sqlite_purego, links modernc.org/sqlite,
// pure Go. driver_*.go is all that differs: the DSN, reading an error's
// result code, the library's version. The settings of each connection
// (conn.go) and the errors' mapping to the store's sentinels are one code
// for both, and the file format is SQLite's, so either opens the other's
// databases. [DriverName] and [DriverModule] name the linked library.
//
// # How the store contract maps to SQLite
//
// [Driver.InExternalTx] takes a *sql.Tx opened on the same database file
// (from [Driver.DB]). The write transaction holds the database's one write
// lock from BEGIN IMMEDIATE to its end, which is what the contract's row
// locks come to here: reads in a transaction lock by holding it,
// OrderingKeyReserve's keys are locked by it, and no two write transactions
// ever overlap, so none conflicts with another (no store.ErrConflict) and
// none ever finds a task, session or the webhook cursor busy.
//
// The executor implements none of the store's optional interfaces: a round
// trip costs nothing, so store.TaskClaimWithSteps and store.TaskGetAndClaim
// run as their separate calls (store.ClaimThenListSteps,
// store.GetThenClaim), and store.Notify does nothing (SQLite has no
// cross-process notifications; processes sharing a file find new work by
// polling). TaskClaimParams.After is only a filter, as the claim index
// drops the entries of claimed tasks at once. The Reader's
// TaskGetManyWithSteps runs its two reads in one read transaction, for one
// snapshot.
//
// Hot statements (those of every scheduler, agent, supervisor and consumer
// round) are prepared on the write connection and reused: each after the
// first transaction that runs it, outside that transaction and its
// caller's deadline.
package sqlite
