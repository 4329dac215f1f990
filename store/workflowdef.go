package store

// WorkflowDefExecutor holds the primitives that store the versions of
// declarative workflow definitions, so every process (and a restarted
// one) can run a task with the version it was submitted with.
type WorkflowDefExecutor interface {
}
