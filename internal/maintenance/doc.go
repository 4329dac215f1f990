// Package maintenance runs drover's leader-only chores: one small Service
// per chore (step recovery, request expiry, retention, expiry of
// session-queue dedupe entries, webhook retention), run in batches by
// whichever process holds the chore's lease.
// A Runner holds one lease (package leader) and runs its services every
// Interval while it leads; each batch is its own transaction fenced by
// the lease (flow.Leader.CheckLeader), so a deposed leader cannot act
// once another has taken it.
//
// The Supervisor role (package supervisor) is a Runner of the task chores
// under the lease "supervisor"; the expiry of dedupe entries has its own
// lease (DedupeLease) and runs both in the supervisor's process and in
// any process that consumes session queues (package convoy), so an
// application that only uses session queues still expires its entries.
// Webhook deliveries are pruned under WebhookLease by the processes that
// run a webhook dispatcher (package webhook).
package maintenance
