package drovertype

import "time"

// Session queues implement the Sequential Convoy pattern: messages of one
// session (for example one order) are delivered one at a time in the order
// they were published, while different sessions are processed in parallel.
// See docs/convoy-design.md.

// PoisonPolicy says what happens to a session when one of its messages is
// dead-lettered (it reached the queue's MaxDeliveryCount, or the consumer
// dead-lettered it).
type PoisonPolicy string

const (
	// PoisonBlock halts the session: nothing more of it is delivered until
	// an operator resubmits or discards the dead message.
	PoisonBlock PoisonPolicy = "block"
	// PoisonSkip goes on with the next message; the dead one is the gap.
	PoisonSkip PoisonPolicy = "skip"
)

// Valid reports whether p is a known policy.
func (p PoisonPolicy) Valid() bool { return p == PoisonBlock || p == PoisonSkip }

// Defaults of a queue created by its first publish.
const (
	// DefaultMaxDeliveryCount is how often a message is delivered before it
	// is dead-lettered.
	DefaultMaxDeliveryCount = 10
	// DefaultPoisonPolicy is what a dead-lettered message does to its session.
	DefaultPoisonPolicy = PoisonBlock
	// DefaultDedupeWindow is how long a message ID is remembered.
	DefaultDedupeWindow = 10 * time.Minute
	// DefaultLockDuration is how long an accepted session stays locked
	// without a renewal.
	DefaultLockDuration = 30 * time.Second
)

// Queue is a named stream of session messages and its policy. A queue is
// created with the default policy by the first publish to it.
type Queue struct {
	Name string
	// MaxDeliveryCount is how many times a message is delivered before it is
	// dead-lettered instead.
	MaxDeliveryCount int
	// PoisonPolicy is what a dead-lettered message does to its session.
	PoisonPolicy PoisonPolicy
	// DedupeWindow is how long a message ID is remembered: a message
	// published again with the same ID within it is not stored twice.
	// Zero turns de-duplication off.
	DedupeWindow time.Duration
	// LockDuration is how long an accepted session stays locked to its
	// consumer unless renewed.
	LockDuration time.Duration
	CreatedAt    time.Time
	UpdatedAt    time.Time
}

// Session is one session of a queue, (Queue, ID), and its state-store record.
// It exists from its first publish on; an idle session is only this row.
type Session struct {
	Queue string
	ID    string
	// NextSeq is the last sequence number assigned (0: none yet); the next
	// message published gets NextSeq+1.
	NextSeq int64
	// Pending counts the messages not yet completed or dead-lettered.
	Pending int
	// ReadyAt is when the head message (the pending message with the
	// smallest sequence number) is available; nil when nothing is pending.
	ReadyAt *time.Time
	// LockHolder is the consumer holding the session; "" when free.
	LockHolder string
	// LockToken increments on every accept: every call made under a lock
	// names it, and a stale token is refused.
	LockToken int64
	// LockedUntil is when the lock expires unless renewed.
	LockedUntil *time.Time
	// State is the application's session state (nil when never set).
	State []byte
	// Closed is set once an end-of-sequence message was published: nothing
	// more can be published to the session.
	Closed bool
	// Blocked is set when a message was dead-lettered under PoisonBlock:
	// the session is not delivered until the dead message is resubmitted or
	// discarded.
	Blocked   bool
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Message is one message of a session and its state-store record. A
// completed message is deleted; a dead-lettered one stays, with Dead set.
type Message struct {
	Queue     string
	SessionID string
	// Seq is the message's sequence number in its session: 1, 2, 3 … in
	// commit order, without gaps.
	Seq int64
	// MessageID, when set, de-duplicates publishes within the queue's
	// DedupeWindow.
	MessageID string
	Body      []byte
	// DeliveryCount counts the receives of the message, this one included.
	DeliveryCount int
	// EndOfSequence marks the session's last message.
	EndOfSequence bool
	// AvailableAt is when the message may be delivered (publish time, a
	// not-before time, or the end of an abandon's delay).
	AvailableAt time.Time
	// Dead is set once the message is dead-lettered.
	Dead       bool
	DeadReason string
	DeadAt     *time.Time
	EnqueuedAt time.Time
	// TraceContext is the W3C trace context of the span that published the
	// message ("<traceparent>[ <tracestate>]"), which its receive and
	// settle continue; "" when the publisher did not trace.
	TraceContext string
}

// SessionSubject is the subject under which a session's events (alerts) are
// recorded, in the task ID field of the event history: "session:<queue>/<ID>".
// A task ID never contains "/", so it never collides with one. A queue of
// a namespace ("<ns>/<queue>", QualifyName) puts the namespace first:
// "<ns>/session:<queue>/<ID>", so the subject is in the queue's namespace
// (NamespaceOf).
func SessionSubject(queue, sessionID string) string {
	if ns := NamespaceOf(queue); ns != "" {
		return ns + "/session:" + queue[len(ns)+1:] + "/" + sessionID
	}
	return "session:" + queue + "/" + sessionID
}
