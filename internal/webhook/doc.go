// Package webhook sends signed webhooks when tasks reach a final state
// (Processed, Compensated, Error or Cancelled) and, for subscriptions that
// choose them, on operator alerts (a permanent step failure, a failure that
// starts compensation, an extended wait, a blocked session).
//
// A Dispatcher turns the events of the durable history that subscriptions
// select (dt.WebhookEventSet: final states by default) into durable
// deliveries (one per event and URL: the task's callback URL and every
// globally configured URL), POSTs each as JSON signed with
// HMAC-SHA256 (with a key of the destination's, over the event ID, the
// time and the body, so a request one receiver got does not verify at
// another), and retries failures with exponential back-off and jitter
// until a 2xx answer, MaxAttempts or MaxAge. Every request goes through
// an egress policy (loopback, private, link-local... destinations fail at
// once unless opened), at most MaxPerHost at a time to one host, with a
// short ConnectTimeout. Any number of dispatchers, in
// any number of processes sharing a store, cooperate: the enqueue cursor is
// locked by one at a time and deliveries are claimed (PostgreSQL: SKIP
// LOCKED) with a lease, so no (event, URL) is queued twice or sent by two
// dispatchers at once, and none is lost when a process dies: its claims
// expire and another dispatcher (or the same instance restarted) sends them
// again. Delivery is at least once; receivers de-duplicate on the
// webhook-id header (or the body's "id"), which is the same on every
// attempt. The user guide is docs/webhooks.md.
//
// Package server runs a Dispatcher when a webhook secret is set. A
// transaction that writes a final state or an alert notifies the
// notifier's Events topic, which wakes the dispatchers of every process
// (PostgreSQL); without notifications (SQLite) they find it at their poll.
package webhook
