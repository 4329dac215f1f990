// Package democmd is "drover demo" (the orders demo over a simulated flaky
// service, the ledger demo of session queues, the simulated service on its
// own) and what "drover server --demo" adds to a server (AddToServer). It
// is linked into the drover command, never into package server.
package democmd
