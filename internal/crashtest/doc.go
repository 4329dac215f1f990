// Package crashtest holds drover's crash tests: they build the real drover
// binary, run `drover server` as a child process against a real SQLite file
// and the HTTP remote-service simulator, SIGKILL it at random moments while
// tasks are in flight, restart it, and check that every task ends final with
// no duplicate effect at the remote service.
//
// TestTracingAcrossProcesses runs the binary with tracing on (the OTEL_*
// environment) against an OTLP receiver in the test and checks that a
// task submitted in this process and run in the server is one trace.
//
// TestUpgradeWithWorkInFlight builds the previous release (a commit named
// in upgrade_test.go) from the repository's git history, runs its server
// with orders in flight on SQLite and on PostgreSQL, kills it, and lets this
// release's server migrate the store and finish every order, with no
// duplicate effect and one history.
//
// The default run is short; `go test ./internal/crashtest -crash.long` runs a
// longer soak.
package crashtest
