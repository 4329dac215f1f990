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
	// row is missing). ok is false when another transaction holds the
	// cursor (a driver whose writers overlap skips it instead of waiting),
	// or when a missing cursor cannot be made yet (while a transaction
	// writing events stays open): nothing is locked, try again later. Write transactions only.
	WebhookCursorLock(ctx context.Context, params *WebhookCursorLockParams) (after int64, ok bool, err error)
	// WebhookCursorSet moves the cursor to After. Call it only in the
	// transaction that locked the cursor.
	WebhookCursorSet(ctx context.Context, params *WebhookCursorSetParams) error

	// WebhookDeliveryInsertMany queues the deliveries whose (EventID, URL)
	// is not queued yet and sets their ID; inserted[i] reports whether
	// Deliveries[i] was (false: already queued, nothing changed). Pairs within one
	// call must be distinct. Attempts, ClaimedBy, DeliveredAt, FailedAt,
	// LastError and LastStatus are stored as given (normally zero).
	WebhookDeliveryInsertMany(ctx context.Context, params *WebhookDeliveryInsertManyParams) (inserted []bool, err error)
	// WebhookDeliveryClaim hands up to Limit pending deliveries due at Now
	// (NextAttemptAt ≤ Now), earliest due first, to ClaimedBy: Attempts
	// increments, NextAttemptAt becomes Now + Lease (a claim not finished
	// by then is due again, so a dead dispatcher's attempts are taken
	// over), UpdatedAt Now. The returned deliveries carry the new values.
	// Competing claimers get different deliveries, without waiting for
	// each other.
	WebhookDeliveryClaim(ctx context.Context, params *WebhookDeliveryClaimParams) ([]*drovertype.WebhookDelivery, error)
	// WebhookDeliveryFinishMany records the outcome of attempts, Results. Each
	// applies only if the delivery is still pending and held by the same
	// claim (ClaimedBy and Attempts equal the result's), so the result of
	// an attempt whose claim expired and was taken over changes nothing;
	// applied[i] reports whether Results[i] did. An applied result clears
	// ClaimedBy; a Postponed one also takes back the claim's attempt.
	WebhookDeliveryFinishMany(ctx context.Context, params *WebhookDeliveryFinishManyParams) (applied []bool, err error)
	// WebhookDeliveryRelease makes the pending deliveries claimed by
	// ClaimedBy due at Now and unclaimed, for a dispatcher restarting with
	// the same instance name: attempts it had in flight when it stopped
	// are redone at once instead of after their lease. Attempts keeps
	// counting them.
	WebhookDeliveryRelease(ctx context.Context, params *WebhookDeliveryReleaseParams) (int, error)
	// WebhookDeliveryList returns deliveries in ID order, filtered by params.
	WebhookDeliveryList(ctx context.Context, params *WebhookDeliveryListParams) ([]*drovertype.WebhookDelivery, error)
	// WebhookDeliveryDeleteFinished deletes up to Limit delivered or
	// failed deliveries last updated before Before, oldest first, and
	// returns how many.
	WebhookDeliveryDeleteFinished(ctx context.Context, params *WebhookDeliveryDeleteFinishedParams) (int, error)
}

// WebhookDeliveryClaimParams are the arguments of WebhookDeliveryClaim.
type WebhookDeliveryClaimParams struct {
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

// WebhookCursorSetParams are the arguments of WebhookCursorSet.
type WebhookCursorSetParams struct {
	After int64
}

// WebhookDeliveryDeleteFinishedParams are the arguments of WebhookDeliveryDeleteFinished.
type WebhookDeliveryDeleteFinishedParams struct {
	Before time.Time
	Limit  int
}

// WebhookDeliveryFinishManyParams are the arguments of WebhookDeliveryFinishMany.
type WebhookDeliveryFinishManyParams struct {
	Results []WebhookResult
}

// WebhookDeliveryInsertManyParams are the arguments of WebhookDeliveryInsertMany.
type WebhookDeliveryInsertManyParams struct {
	Deliveries []*drovertype.WebhookDelivery
}

// WebhookDeliveryReleaseParams are the arguments of WebhookDeliveryRelease.
type WebhookDeliveryReleaseParams struct {
	ClaimedBy string
	Now       time.Time
}

// WebhookCursorLockParams are the arguments of WebhookCursorLock: none
// yet.
type WebhookCursorLockParams struct{}
