package store

import (
	"context"
	"errors"
	"time"

	"github.com/drover-run/drover/drovertype"
)

// Errors of the session-queue primitives (QueueExecutor).
var (
	// ErrSessionClosed: a message was published to a session whose
	// end-of-sequence message was already published.
	ErrSessionClosed = errors.New("session is closed")
	// ErrLockLost: the lock token is stale (the session was accepted again
	// since, or released) or the lock expired.
	ErrLockLost = errors.New("session lock lost")
	// ErrNotHead: the message settled is not the session's head (its pending
	// message with the smallest sequence number), or no longer exists.
	ErrNotHead = errors.New("message is not the head of its session")
	// ErrSessionLocked: a named accept found the session locked by another
	// consumer, lock unexpired.
	ErrSessionLocked = errors.New("session is locked by another consumer")
)

// QueueExecutor is the store half of session queues (the Sequential Convoy
// pattern; docs/convoy-design.md). Like the rest of Executor it is SQL only:
// policy (max delivery count, poison handling, alerts) lives in package
// convoy. Every time is a parameter; the database clock is never read.
//
// Calls made under a session lock name it with a SessionRef: they apply only
// while the ref's token is the session's current one and its lock is
// unexpired (LockedUntil after now); otherwise that item fails with
// ErrLockLost and nothing of it changes. Batch calls report per item: a nil
// error means applied. Items of one call for the same session apply in call
// order, as if made one after the other.
//
// Calls that change a session lock it until the transaction ends;
// publishing to a session therefore waits for another transaction
// publishing to (or settling in) the same session to end. That wait is what
// makes sequence numbers follow commit order. One call locks its sessions,
// existing and new alike, in key order, so calls never deadlock each other;
// a transaction making several calls over different sets of sessions can,
// in a driver whose writers overlap (the database then aborts one
// transaction with an error wrapping ErrConflict, to be retried).
type QueueExecutor interface {
	// QueuePut creates the queue or replaces its policy. CreatedAt is kept
	// when the queue exists.
	QueuePut(ctx context.Context, params *QueuePutParams) error
	// QueueGet returns the queue, or ErrNotFound. It locks nothing.
	QueueGet(ctx context.Context, params *QueueGetParams) (*drovertype.Queue, error)
	// QueueList returns the queues in name order (keyset pagination).
	QueueList(ctx context.Context, params *QueueListParams) ([]*drovertype.Queue, error)

	// MessagePublishMany stores messages, creating missing queues (default
	// policy) and sessions. results[i] is the outcome of Messages[i]:
	// messages of one session get consecutive sequence numbers in call
	// order. A message whose MessageID was published to the queue within
	// its dedupe window (or earlier in the same call) is not stored: its
	// result is Duplicate with the original's Seq. If any other message
	// targets a closed session, or follows an end-of-sequence message of its
	// session in the call, the whole call fails with ErrSessionClosed and
	// writes nothing. (Except, in a driver whose writers overlap, when a
	// session is closed by another transaction after this call looked: the
	// error then comes after other sessions were written, and the
	// transaction must be rolled back, as after any error.)
	MessagePublishMany(ctx context.Context, params *MessagePublishManyParams) (results []PublishResult, err error)

	// SessionAccept locks sessions of Queue to Holder: the named one
	// (SessionID; ErrNotFound if it does not exist, ErrSessionLocked if its
	// lock is held and unexpired), or else up to Limit of the sessions
	// whose head is available at Now, not blocked and not locked (or lock
	// expired), oldest ReadyAt first; locked rows are skipped, never waited
	// for. Each accept increments the session's LockToken and sets
	// LockedUntil to Now plus the lock duration.
	//
	// Which sessions are available is decided from a ready time the store
	// keeps per session. It is exact for a session no one holds. While a
	// session is held, a driver may leave it stale (so that settles and
	// receives do not rewrite indexed columns): it then
	// tells only whether something is pending, and is otherwise no later
	// than the time the session last had a ready head (or than the accept
	// or publish that set it). SessionRelease brings it up to date. So a
	// session with a ready head is never missed; but when a lock expired
	// without a release, accept may take the session over though its head
	// is not available yet (e.g. abandoned with a delay by the deposed
	// holder): receive then returns nothing for it until its head is due.
	// The ReadyAt that SessionAccept, SessionGet and SessionList return is
	// always the head's exact available time.
	SessionAccept(ctx context.Context, params *SessionAcceptParams) ([]*drovertype.Session, error)
	// SessionAvailable reports whether SessionAccept of the next available
	// sessions of Queue would take one at Now: a cheap read (it takes no
	// write lock), for waiting accepts to call before SessionAccept.
	SessionAvailable(ctx context.Context, params *SessionAvailableParams) (bool, error)
	// SessionNextReady returns the earliest time a session of Queue with
	// something pending and not blocked may be accepted: its head's ready
	// time, or, while a holder's lock runs later than that, the lock's end.
	// Zero when no session has anything pending. A time at or before now
	// means a session may be accepted now; a held session's stale ready
	// time (see SessionAccept) only makes the answer early. A read, for an
	// idle consumer that notifications wake for everything else to sleep
	// until.
	SessionNextReady(ctx context.Context, params *SessionNextReadyParams) (time.Time, error)
	// SessionRenew extends the lock of each session of Refs to Until.
	SessionRenew(ctx context.Context, params *SessionRenewParams) (errs []error, err error)
	// SessionRelease frees each session of Refs (its token stays, so the ref
	// is stale from then on) and brings its ready time up to date (see
	// SessionAccept).
	SessionRelease(ctx context.Context, params *SessionReleaseParams) (errs []error, err error)

	// MessageReceiveMany returns, for each held session whose head message
	// is available at Now (and that is not blocked), that head with its
	// DeliveryCount incremented. msgs[i] is nil when Refs[i] has nothing to
	// receive or errs[i] is set (ErrLockLost).
	MessageReceiveMany(ctx context.Context, params *MessageReceiveManyParams) (msgs []*drovertype.Message, errs []error, err error)
	// MessageSettleMany applies each of Settles to its session's head
	// message.
	// errs[i] is ErrLockLost (lock not held), ErrNotHead (Seq is not the
	// head) or nil (applied). Pending, ReadyAt and Blocked follow. It
	// ignores ReceiveNext.
	MessageSettleMany(ctx context.Context, params *MessageSettleManyParams) (errs []error, err error)
	// MessageSettleReceiveMany is MessageSettleMany that also receives:
	// right after a settle with ReceiveNext applied, its session's head
	// (the next message after a complete or dead-letter, the same one after
	// an abandon) is received as MessageReceiveMany would: only if it is
	// available at Now and the session is not blocked, with its
	// DeliveryCount incremented. msgs[i] is that message; nil when
	// Settles[i] has no ReceiveNext, nothing was available, or errs[i] is
	// set (a rejected settle receives nothing). It is the consumer's
	// steady state in one call: complete n, receive n+1.
	MessageSettleReceiveMany(ctx context.Context, params *MessageSettleReceiveManyParams) (msgs []*drovertype.Message, errs []error, err error)

	// SessionGet returns the session, or ErrNotFound. Inside a transaction
	// it locks the session's row.
	SessionGet(ctx context.Context, params *SessionGetParams) (*drovertype.Session, error)
	// SessionList returns a queue's sessions in ID order (keyset pagination).
	SessionList(ctx context.Context, params *SessionListParams) ([]*drovertype.Session, error)
	// QueueDepth counts a queue's sessions that have messages to deliver
	// (pending and not blocked) and their pending messages, reading at
	// most Limit such sessions through the index accept scans, earliest
	// ready first, and the earliest ready time of those not held.
	QueueDepth(ctx context.Context, params *QueueDepthParams) (QueueDepth, error)
	// SessionStateSet sets the state of the session of Ref to State under
	// its held lock (nil clears it); ErrLockLost otherwise.
	SessionStateSet(ctx context.Context, params *SessionStateSetParams) error

	// MessagePeek returns a session's messages from FromSeq on, in
	// sequence order, dead ones included, changing nothing.
	MessagePeek(ctx context.Context, params *MessagePeekParams) ([]*drovertype.Message, error)
	// DeadLetterList returns dead messages of a queue (or one of its
	// sessions) in (session, seq) order.
	DeadLetterList(ctx context.Context, params *DeadLetterListParams) ([]*drovertype.Message, error)
	// DeadLetterResubmit makes a dead message pending again, available at
	// Now with delivery count 0: having the smallest sequence number, it is
	// its session's head again. The session is unblocked. ErrNotFound if no
	// such dead message exists.
	DeadLetterResubmit(ctx context.Context, params *DeadLetterResubmitParams) error
	// DeadLetterDiscard deletes a dead message and unblocks its session.
	// ErrNotFound if no such dead message exists.
	DeadLetterDiscard(ctx context.Context, params *DeadLetterDiscardParams) error

	// DedupeDeleteExpired deletes up to Limit message IDs whose dedupe
	// window ended at or before Now, and returns how many.
	DedupeDeleteExpired(ctx context.Context, params *DedupeDeleteExpiredParams) (int, error)
}

// SessionRef names a session held under a lock token.
type SessionRef struct {
	Queue     string
	SessionID string
	Token     int64
}

// PublishMessage is one message to publish.
type PublishMessage struct {
	Queue     string
	SessionID string
	// MessageID, when set, de-duplicates the message within the queue's
	// dedupe window.
	MessageID string
	Body      []byte
	// EndOfSequence closes the session: it must be the session's last
	// message.
	EndOfSequence bool
	// AvailableAt is when the message may be delivered; zero means Now.
	AvailableAt time.Time
	// TraceContext is stored with the message (Message.TraceContext).
	TraceContext string
}

// MessagePublishManyParams are the arguments of MessagePublishMany.
type MessagePublishManyParams struct {
	Messages []PublishMessage
	Now      time.Time
}

// PublishResult is the outcome of one published message.
type PublishResult struct {
	// Seq is the message's sequence number; for a duplicate, the original's
	// (in the original's session).
	Seq int64
	// Duplicate: the message ID was published within the dedupe window;
	// nothing was stored.
	Duplicate bool
}

// SessionAcceptParams are the arguments of SessionAccept.
type SessionAcceptParams struct {
	Queue string
	// SessionID names the session to accept; "" accepts the next available
	// ones.
	SessionID string
	Holder    string
	Now       time.Time
	// LockDuration overrides the queue's lock duration when positive.
	LockDuration time.Duration
	// Limit caps how many sessions an accept of the next available ones
	// takes.
	Limit int
}

// SettleAction is what MessageSettleMany does with a head message.
type SettleAction string

const (
	// SettleComplete deletes the message; the next one becomes the head.
	SettleComplete SettleAction = "complete"
	// SettleAbandon leaves the message at the head, available again at
	// MessageSettle.AvailableAt.
	SettleAbandon SettleAction = "abandon"
	// SettleDeadLetter marks the message dead (kept for the dead-letter
	// list); the next one becomes the head. With MessageSettle.Block the
	// session is blocked.
	SettleDeadLetter SettleAction = "dead_letter"
)

// MessageSettle settles one head message.
type MessageSettle struct {
	Ref    SessionRef
	Seq    int64
	Action SettleAction
	// AvailableAt (abandon) is when the message is delivered again; zero
	// means now.
	AvailableAt time.Time
	// Reason (dead-letter) is recorded with the dead message.
	Reason string
	// Block (dead-letter) blocks the session (PoisonBlock).
	Block bool
	// SetState replaces the session state with State (nil clears it) in
	// the same step.
	SetState bool
	State    []byte
	// ReceiveNext (MessageSettleReceiveMany only): once the settle applied,
	// receive the session's head.
	ReceiveNext bool
}

// QueueListParams are the arguments of QueueList.
type QueueListParams struct {
	AfterName string // keyset pagination: queues whose name sorts after AfterName
	Limit     int    // 0: no limit
	// Namespace, when set, lists only that namespace's queues
	// (drovertype.DefaultNamespace: those stored without a namespace).
	Namespace string
}

// QueueDepth is what QueueDepth counts.
type QueueDepth struct {
	Sessions int   // sessions with messages to deliver
	Messages int64 // their pending messages
	// Capped: the queue has more such sessions than the limit; the counts
	// cover the first limit of them.
	Capped bool
	// OldestWaiting is the earliest time a session of those read has been
	// ready for a consumer while nobody holds it at QueueDepthParams.Now
	// (its head deliverable then); zero when none waits.
	OldestWaiting time.Time
}

// SessionListParams filter SessionList. Limit 0 means no limit.
type SessionListParams struct {
	Queue   string
	AfterID string // keyset pagination: sessions with ID > AfterID
	Limit   int
}

// MessagePeekParams are the arguments of MessagePeek. Limit 0 means no limit.
type MessagePeekParams struct {
	Queue     string
	SessionID string
	FromSeq   int64 // messages with Seq >= FromSeq
	Limit     int
}

// DeadLetterListParams filter DeadLetterList. Limit 0 means no limit.
type DeadLetterListParams struct {
	Queue     string
	SessionID string // "" for every session of the queue
	// Keyset pagination: messages after (AfterSessionID, AfterSeq).
	AfterSessionID string
	AfterSeq       int64
	Limit          int
}

// DeadLetterDiscardParams are the arguments of DeadLetterDiscard.
type DeadLetterDiscardParams struct {
	Queue     string
	SessionID string
	Seq       int64
	Now       time.Time
}

// DeadLetterResubmitParams are the arguments of DeadLetterResubmit.
type DeadLetterResubmitParams struct {
	Queue     string
	SessionID string
	Seq       int64
	Now       time.Time
}

// DedupeDeleteExpiredParams are the arguments of DedupeDeleteExpired.
type DedupeDeleteExpiredParams struct {
	Now   time.Time
	Limit int
}

// MessageReceiveManyParams are the arguments of MessageReceiveMany.
type MessageReceiveManyParams struct {
	Refs []SessionRef
	Now  time.Time
}

// MessageSettleManyParams are the arguments of MessageSettleMany.
type MessageSettleManyParams struct {
	Settles []MessageSettle
	Now     time.Time
}

// MessageSettleReceiveManyParams are the arguments of MessageSettleReceiveMany.
type MessageSettleReceiveManyParams struct {
	Settles []MessageSettle
	Now     time.Time
}

// QueueGetParams are the arguments of QueueGet.
type QueueGetParams struct {
	Name string
}

// QueuePutParams are the arguments of QueuePut.
type QueuePutParams struct {
	Queue *drovertype.Queue
}

// SessionAvailableParams are the arguments of SessionAvailable.
type SessionAvailableParams struct {
	Queue string
	Now   time.Time
}

// SessionNextReadyParams are the arguments of SessionNextReady.
type SessionNextReadyParams struct {
	Queue string
}

// SessionGetParams are the arguments of SessionGet.
type SessionGetParams struct {
	Queue     string
	SessionID string
}

// SessionReleaseParams are the arguments of SessionRelease.
type SessionReleaseParams struct {
	Refs []SessionRef
	Now  time.Time
}

// SessionRenewParams are the arguments of SessionRenew.
type SessionRenewParams struct {
	Refs  []SessionRef
	Now   time.Time
	Until time.Time
}

// SessionStateSetParams are the arguments of SessionStateSet.
type SessionStateSetParams struct {
	Ref   SessionRef
	State []byte
	Now   time.Time
}

// QueueDepthParams are the arguments of QueueDepth.
type QueueDepthParams struct {
	Queue string
	Limit int
	Now   time.Time // for OldestWaiting
}
