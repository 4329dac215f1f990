package convoy

import (
	"fmt"
	"strconv"
	"time"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/store"
)

// ReceivedMessage is a message handed to a consumer under its session lock.
// It stays at the head of its session until it is settled.
type ReceivedMessage struct {
	Queue     string
	SessionID string
	// Seq is the message's sequence number in its session.
	Seq int64
	// MessageID is the de-duplication ID it was published with, if any.
	MessageID string
	Body      []byte
	// DeliveryCount counts the deliveries of the message, this one included.
	DeliveryCount int
	// EndOfSequence marks the session's last message.
	EndOfSequence bool
	// EnqueuedAt is when the message was published.
	EnqueuedAt time.Time
	// AvailableAt is when the message became deliverable.
	AvailableAt time.Time
	// TraceContext is the W3C trace context of the message's publish span
	// ("<traceparent>[ <tracestate>]"; "" when its publisher did not
	// trace): a consumer's own spans about the message can continue it.
	TraceContext string

	token    int64
	state    []byte // the session state when the message was received
	setState bool
	newState []byte
}

func newReceived(m *dt.Message, token int64, state []byte) *ReceivedMessage {
	return &ReceivedMessage{
		Queue: m.Queue, SessionID: m.SessionID, Seq: m.Seq, MessageID: m.MessageID, Body: m.Body,
		DeliveryCount: m.DeliveryCount, EndOfSequence: m.EndOfSequence, EnqueuedAt: m.EnqueuedAt,
		AvailableAt: m.AvailableAt, TraceContext: m.TraceContext, token: token, state: state,
	}
}

// SessionState returns the session's state blob as it was when the message
// was received (nil when never set). While the session is held nobody else
// can change it.
func (m *ReceivedMessage) SessionState() []byte { return m.state }

// SetSessionState asks for the session's state to become state (nil clears
// it) in the same transaction that completes the message: the state and the
// completion commit together or not at all. It takes effect only when the
// message is completed (a Processor handler returning nil, or
// SessionReceiver.Complete without a state of its own in CompleteOptions).
// Not safe for use by several goroutines at once.
func (m *ReceivedMessage) SetSessionState(state []byte) {
	m.setState, m.newState = true, state
}

func (m *ReceivedMessage) ref() store.SessionRef {
	return store.SessionRef{Queue: m.Queue, SessionID: m.SessionID, Token: m.token}
}

// String names the message: its sequence number, session and queue.
func (m *ReceivedMessage) String() string {
	return fmt.Sprintf("message %d of session %q of queue %q", m.Seq, m.SessionID, m.Queue)
}

// ReasonMaxDeliveryCount is the dead-letter reason of a message received
// more often than its queue's MaxDeliveryCount.
const ReasonMaxDeliveryCount = "max delivery count exceeded"

// Event types convoy records in the event history, under the subject
// drovertype.SessionSubject(queue, session ID) in the events' TaskID field
// (StepIndex -1).
const (
	// EventSessionBlocked (an operator alert): a message was dead-lettered
	// under the block policy; the session halts until the dead letter is
	// resubmitted or discarded.
	EventSessionBlocked = dt.EventSessionBlocked
	// EventMessageDeadLettered: a message was dead-lettered under the skip
	// policy; the session goes on and the dead letter is the gap.
	EventMessageDeadLettered dt.EventType = "message_dead_lettered"
	// EventDeadLetterResubmitted: an operator resubmitted a dead letter.
	EventDeadLetterResubmitted dt.EventType = "dead_letter_resubmitted"
	// EventDeadLetterDiscarded: an operator discarded a dead letter.
	EventDeadLetterDiscarded dt.EventType = "dead_letter_discarded"
)

// deadLetterEvent is the event recorded when a message is dead-lettered.
func deadLetterEvent(queue, session string, seq int64, deliveries int, reason string, block bool, actor string, now time.Time) *dt.Event {
	e := &dt.Event{TaskID: dt.SessionSubject(queue, session), StepIndex: -1, Actor: actor, Attempt: deliveries, CreatedAt: now}
	if block {
		e.Type, e.Alert = EventSessionBlocked, true
		e.Message = fmt.Sprintf("message %d of session %q of queue %q dead-lettered after %d deliveries: %s; "+
			"the session is blocked until the dead letter is resubmitted or discarded", seq, session, queue, deliveries, reason)
	} else {
		e.Type = EventMessageDeadLettered
		e.Message = fmt.Sprintf("message %d of session %q of queue %q dead-lettered after %d deliveries: %s; "+
			"the session goes on without it", seq, session, queue, deliveries, reason)
	}
	return e
}

// poisoned reports whether a received message exceeded the queue's maximum
// delivery count, and returns the settle that dead-letters it.
func poisoned(m *dt.Message, token int64, q dt.Queue) (store.MessageSettle, bool) {
	if m.DeliveryCount <= q.MaxDeliveryCount {
		return store.MessageSettle{}, false
	}
	return store.MessageSettle{
		Ref: store.SessionRef{Queue: m.Queue, SessionID: m.SessionID, Token: token}, Seq: m.Seq,
		Action: store.SettleDeadLetter, Reason: ReasonMaxDeliveryCount, Block: q.PoisonPolicy == PoisonBlock,
	}, true
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
