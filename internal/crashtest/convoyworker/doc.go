// Command convoyworker is the consumer process of the Sequential Convoy crash
// test (internal/crashtest): it runs a ledger processor (ledgers → per-order
// sessions) and a transactional consumer of the order sessions on one
// PostgreSQL schema, until it is killed.
//
// The consumer records each message it processes as an "effect": a row of
// the application table effects (created by the test), written through
// postgres.TxOf inside the transaction that completes the message. So, per
// order, the effects in ID order are exactly the messages consumed and
// committed, in that order; the test reads them back and checks that every
// order's transactions appear once each, in ledger order, whatever process
// was killed when.
package main
