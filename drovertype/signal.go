package drovertype

import "time"

// Signal is an external event sent to a task (a person's approval, a
// payment provider's callback): a signal step waiting for its Name
// completes with its Payload as output. Signals are durable: one sent
// before the task reaches its step is kept and consumed when it gets there,
// oldest first; one sent with the ID of a stored signal of the same task
// and name is ignored.
type Signal struct {
	TaskID  string
	Name    string
	ID      string // de-duplicates: unique per task and name
	Payload []byte
	// Sender names who sent it (the API token's actor, "cli", ...); "" when
	// unknown.
	Sender     string
	ReceivedAt time.Time
	// ConsumedAt is when a step took it; nil while it waits for one.
	// ConsumedStep and ConsumedAttempt name that step and its attempt.
	ConsumedAt      *time.Time
	ConsumedStep    int
	ConsumedAttempt int
}

// SignalHolder is the LockedBy of a task (and its step) waiting for a
// signal: held by no scheduler, so the wait takes no scheduler's room and
// outlives any process, yet not claimable; the signal or the supervisor,
// at CompleteBy, moves it on. It contains a space, which no instance ID
// may.
const SignalHolder = "awaiting signal"

// Waiting reports whether step s of a task waits for its signal.
func (s *StepRecord) Waiting() bool {
	return s.Signal != "" && s.ProcessState == Processing && s.LockedBy == SignalHolder
}
