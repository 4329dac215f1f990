// Package testutil holds what drover's tests share: real stores (a
// migrated SQLite file per test; a PostgreSQL schema per test from
// $DROVER_TEST_DATABASE_URL, taken from a pool of migrated schemas that
// are emptied between tests), a transaction held open to make another
// wait (HoldTx), a log buffer safe for concurrent writes, and WaitFor,
// which waits on a condition instead of sleeping.
package testutil
