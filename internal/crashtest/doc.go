// Package crashtest holds drover's crash tests: they build the real drover
// binary, run `drover server` as a child process against a real SQLite file
// and the HTTP remote-service simulator, SIGKILL it at random moments while
// tasks are in flight, restart it, and check that every task ends final with
// no duplicate effect at the remote service.
//
// The default run is short; `go test ./internal/crashtest -crash.long` runs a
// longer soak.
package crashtest
