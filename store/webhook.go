package store

// WebhookExecutor holds the primitives of webhook delivery (SAS-15): the
// durable cursor over the event history and the delivery queue.
type WebhookExecutor interface {
}
