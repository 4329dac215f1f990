package store

import (
	"context"
	"strings"
	"time"

	"github.com/drover-run/drover/drovertype"
)

// WebhookExecutor holds the primitives of webhook delivery: the
// durable cursor over the event history and the delivery queue.
//
// Enqueueing is one transaction: WebhookCursorLock, EventList after the
// cursor, WebhookDeliveryInsertMany for the events found that subscriptions select,
// WebhookCursorSet past the events scanned. The cursor lock makes
// concurrent enqueuers (any number of processes) take turns, and the
// (EventID, URL) uniqueness of deliveries makes a repeated scan harmless.
// Delivering is WebhookDeliveryClaim, the HTTP call outside any
// transaction, then WebhookDeliveryFinishMany fenced by the claim.
type WebhookExecutor interface {
	// WebhookCursorLock locks the enqueue cursor until the transaction
	// ends and returns the ID of the last event already scanned. The
	// cursor starts at the highest event ID recorded when the store was
	// migrated to the webhook schema (0 for a new store), so the history
	// of an upgraded store is not sent (drivers recreate it there if the
	// row is missing). ok is false when another transaction holds the cursor
	// (PostgreSQL skips the locked row instead of waiting; SQLite's single
	// writer never sees that), or when a missing cursor cannot be made yet
	// (PostgreSQL, while an event writer stays open): nothing is locked, try
	// again later. Write transactions only.
	WebhookCursorLock(ctx context.Context) (after int64, ok bool, err error)
	// WebhookCursorSet moves the cursor to after. Call it only in the
	// transaction that locked the cursor.
	WebhookCursorSet(ctx context.Context, after int64) error

	// WebhookDeliveryInsertMany queues the deliveries whose (EventID, URL)
	// is not queued yet and sets their ID; inserted[i] reports whether
	// ds[i] was (false: already queued, nothing changed). Pairs within one
	// call must be distinct. Attempts, ClaimedBy, DeliveredAt, FailedAt,
	// LastError and LastStatus are stored as given (normally zero).
	WebhookDeliveryInsertMany(ctx context.Context, ds []*drovertype.WebhookDelivery) (inserted []bool, err error)
	// WebhookDeliveryClaim hands up to Limit pending deliveries due at Now
	// (NextAttemptAt ≤ Now), earliest due first, to ClaimedBy: Attempts
	// increments, NextAttemptAt becomes Now + Lease (a claim not finished
	// by then is due again, so a dead dispatcher's attempts are taken
	// over), UpdatedAt Now. The returned deliveries carry the new values.
	// Competing claimers get different deliveries (PostgreSQL: SKIP
	// LOCKED).
	WebhookDeliveryClaim(ctx context.Context, p WebhookClaimParams) ([]*drovertype.WebhookDelivery, error)
	// WebhookDeliveryFinishMany records the outcome of attempts. Each
	// applies only if the delivery is still pending and held by the same
	// claim (ClaimedBy and Attempts equal the result's), so the result of
	// an attempt whose claim expired and was taken over changes nothing;
	// applied[i] reports whether rs[i] did. An applied result clears
	// ClaimedBy; a Postponed one also takes back the claim's attempt.
	WebhookDeliveryFinishMany(ctx context.Context, rs []WebhookResult) (applied []bool, err error)
	// WebhookDeliveryRelease makes the pending deliveries claimed by
	// claimedBy due at now and unclaimed, for a dispatcher restarting with
	// the same instance name: attempts it had in flight when it stopped
	// are redone at once instead of after their lease. Attempts keeps
	// counting them.
	WebhookDeliveryRelease(ctx context.Context, claimedBy string, now time.Time) (int, error)
	// WebhookDeliveryList returns deliveries in ID order, filtered by p.
	WebhookDeliveryList(ctx context.Context, p WebhookDeliveryListParams) ([]*drovertype.WebhookDelivery, error)
	// WebhookDeliveryDeleteFinished deletes up to limit delivered or
	// failed deliveries last updated before before, oldest first, and
	// returns how many.
	WebhookDeliveryDeleteFinished(ctx context.Context, before time.Time, limit int) (int, error)
}

// WebhookClaimParams are the arguments of WebhookDeliveryClaim.
type WebhookClaimParams struct {
	ClaimedBy string
	Now       time.Time
	Lease     time.Duration
	Limit     int
}

// WebhookResult is the outcome of one delivery attempt.
type WebhookResult struct {
	ID        int64
	ClaimedBy string // fence: the claim's ClaimedBy …
	Attempt   int    // … and Attempts as the claim returned them
	// Status is WebhookDelivered (DeliveredAt = Now), WebhookFailed (given
	// up: FailedAt = Now) or WebhookPending (retry at NextAttemptAt).
	Status        drovertype.WebhookStatus
	NextAttemptAt time.Time
	LastError     string
	LastStatus    int
	Now           time.Time
	// Postponed says the attempt was not made (the dispatcher had its
	// limit of requests in flight to the destination's host): Attempts
	// goes back down by one, so waiting for a slot costs no attempt.
	// Status must be WebhookPending.
	Postponed bool
}

// WebhookDeliveryListParams filters WebhookDeliveryList. Zero values mean
// no filter.
type WebhookDeliveryListParams struct {
	TaskID  string
	EventID int64
	Status  drovertype.WebhookStatus
	AfterID int64 // keyset pagination: deliveries with ID > AfterID
	Limit   int
}

// CallbackEvents reads a task's stored callback_events column (the
// comma-separated form of drovertype.WebhookEventSet); "" is the empty set.
func CallbackEvents(s string) drovertype.WebhookEventSet {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}
