// Package benchcmd is "drover bench": throughput and latency of the
// orders workflow, and of session queues ("bench convoy"), on a temporary
// or given store.
package benchcmd
