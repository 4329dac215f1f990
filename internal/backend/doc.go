// Package backend is where the drover command line reads and changes
// tasks, alerts and session queues: one interface per kind of command
// (Tasks, Queues, and Consumer for "queue consume"), each with two
// implementations chosen by --server. The local one works on the store
// named by --db through the library clients (drover.Client,
// convoy.Client); the remote one goes through a running server's HTTP API
// (package droverclient). Both answer in the library's types and explain
// their errors in the command line's terms, so package cli parses flags
// and prints, and does not know which path it took.
//
// Consume runs "queue consume": a pool of workers that accept sessions,
// receive their messages in order and settle each after the caller's
// handler; the remote sessions renew their locks in the background.
package backend
