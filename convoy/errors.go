package convoy

import (
	"errors"

	"github.com/drover-run/drover/store"
)

// Errors returned by the convoy API. Test for them with errors.Is.
var (
	// ErrInvalidConfig: a Config or options struct is not valid.
	ErrInvalidConfig = errors.New("invalid config")
	// ErrInvalidQueue: a queue name is empty, too long, or contains spaces,
	// control characters or "/".
	ErrInvalidQueue = errors.New("invalid queue name")
	// ErrInvalidSession: a session ID is empty, too long, not UTF-8 or
	// contains control characters.
	ErrInvalidSession = errors.New("invalid session ID")
	// ErrInvalidMessage: a message to publish is not valid (the error names
	// the field).
	ErrInvalidMessage = errors.New("invalid message")
	// ErrInvalidReason: a dead-letter reason is too long (MaxReasonBytes),
	// not valid UTF-8 or contains a NUL character.
	ErrInvalidReason = errors.New("invalid reason")
	// ErrInvalidPolicy: a queue policy is not valid.
	ErrInvalidPolicy = errors.New("invalid queue policy")
	// ErrNotFound: the queue, session or dead letter does not exist.
	ErrNotFound = store.ErrNotFound
	// ErrSessionClosed: a message was published to a session whose
	// end-of-sequence message was published already.
	ErrSessionClosed = store.ErrSessionClosed
	// ErrLockLost: the session lock is no longer held (it expired, or another
	// consumer accepted the session since). A settle that fails with it
	// changed nothing.
	ErrLockLost = store.ErrLockLost
	// ErrSessionLocked: AcceptSession named a session another consumer
	// holds.
	ErrSessionLocked = store.ErrSessionLocked
	// ErrNotHead: the message settled is no longer its session's head (it
	// was settled already).
	ErrNotHead = store.ErrNotHead
	// ErrSessionBlocked: the session is halted by a dead-lettered message
	// (poison policy block) until an operator resubmits or discards it.
	ErrSessionBlocked = errors.New("session is blocked by a dead-lettered message")
	// ErrSessionEnded: the session's end-of-sequence message was settled;
	// nothing more will arrive in it.
	ErrSessionEnded = errors.New("session ended: its end-of-sequence message was settled")
	// ErrMessageUnsettled: Receive was called while the previous message of
	// the session is not settled yet (messages are handed out one at a time).
	ErrMessageUnsettled = errors.New("the previous message of the session is not settled")
	// ErrNotReceived: the message settled is not the receiver's unsettled
	// message (it was settled already, or came from another receiver).
	ErrNotReceived = errors.New("message is not this receiver's unsettled message")
	// ErrReceiverClosed: the session receiver was closed.
	ErrReceiverClosed = errors.New("session receiver is closed")
	// ErrAlreadyStarted: Start was called on a running processor.
	ErrAlreadyStarted = errors.New("processor already started")
)

type deadLetterError struct{ err error }

func (e *deadLetterError) Error() string { return e.err.Error() }
func (e *deadLetterError) Unwrap() error { return e.err }

// DeadLetterError marks a handler's error as final for the message: the
// processor dead-letters the message (its reason is err's text) instead of
// abandoning it for another delivery. Under the queue's block policy the
// session then halts until an operator resolves it. DeadLetterError(nil) is
// nil.
func DeadLetterError(err error) error {
	if err == nil {
		return nil
	}
	return &deadLetterError{err: err}
}

// IsDeadLetter reports whether err was marked with DeadLetterError.
func IsDeadLetter(err error) bool {
	var d *deadLetterError
	return errors.As(err, &d)
}
