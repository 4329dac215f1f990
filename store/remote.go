package store

// RemoteAgentExecutor holds the primitives that let agents in other
// processes, reached over the HTTP API, work on requests with a fencing
// token (see internal/httpapi's agent routes).
type RemoteAgentExecutor interface {
}
