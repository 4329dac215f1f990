// Package cli is the drover command line: the code behind cmd/drover, kept
// here so it can be tested by calling Main. It holds the commands' flags,
// their checks and messages, and printing, nothing more: the task, alert
// and queue commands read and change state through package backend
// (local: the store; remote: a server, with --server), "drover server"
// fills a server.Config and calls server.Run, and "drover demo" and
// "drover bench" are packages democmd and benchcmd.
//
// Every command reports a failure as one line on stderr, "drover: <message>",
// and exits 1; a usage error (unknown command or flag, wrong arguments, a bad
// flag value) exits 2. Help goes to stdout and exits 0.
package cli
