// Package droverclient is a small Go client for the HTTP API of
// "drover server --listen" (docs/server.md): submit and inspect tasks,
// operate alerts and session queues, follow event streams, and run remote
// agents that long-poll for requests and complete them with a fencing token.
//
// It needs nothing of drover's store or engine, so a service that only
// talks to a drover server imports this package alone.
package droverclient
