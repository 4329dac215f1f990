// Package store defines the contract every drover state-store driver implements.
//
// A driver owns one database (SQLite file, PostgreSQL schema) holding tasks,
// steps, the agent request and reply queues, the event history and leader
// leases. The engine keeps all state-machine logic in Go on top of the small,
// batch-shaped primitives of [Executor], so every driver implements only SQL and
// one conformance suite (package storetest) checks every driver the same way.
//
// Locking rule: reads made through an Executor inside [Driver.InTx] lock the rows
// they return until the transaction ends (PostgreSQL: FOR UPDATE; SQLite holds
// the database write lock for the whole transaction). The engine relies on that
// to fence replies, recoveries and leader actions with read-check-write.
// [Executor.OrderingKeyReserve] likewise locks the ordering keys it reserves
// until the transaction ends, so positions within a key follow commit order.
package store
