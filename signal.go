package drover

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/flow"
	"github.com/drover-run/drover/store"
)

// Signal is an external event sent to a task: a person's approval, a
// payment provider's callback. A step with Step.Signal set waits for it.
type Signal = dt.Signal

// The event types of signals.
const (
	// EventSignalWaiting: a signal step started waiting; the message names
	// the signal and the deadline.
	EventSignalWaiting = dt.EventSignalWaiting
	// EventSignalReceived: a signal was stored for the task; the message
	// says whether it completed a waiting step or is kept for later.
	EventSignalReceived = dt.EventSignalReceived
)

// SignalHolder is the LockedBy of a task waiting for a signal: no
// scheduler holds it while it waits.
const SignalHolder = dt.SignalHolder

// SignalParams is one signal for SendSignal.
type SignalParams struct {
	TaskID string
	// Name is the signal's name, the one a signal step waits for.
	Name string
	// ID de-duplicates: a signal with the ID of one the task already has
	// (of the same name) is ignored. "" draws a random ID, so each call is
	// a new signal.
	ID string
	// Payload is a JSON document, the waiting step's output; empty means
	// null. At most Config.MaxInputBytes.
	Payload []byte
	// Sender names who sent it, recorded with the signal and as the actor
	// of its event; "" records "signal".
	Sender string
}

// SignalResult is what SendSignal did.
type SignalResult struct {
	// ID is the signal's ID (drawn when none was given).
	ID string
	// Duplicate: the task already had a signal of this name and ID, so
	// this one was ignored.
	Duplicate bool
	// Delivered: the task's current step was waiting for this signal and
	// completed with it. Otherwise the signal is kept, and the next step
	// of the task that waits for its name takes it (oldest first).
	Delivered bool
	// Task is the task after the signal.
	Task *Task
}

// Signal sends the signal name with payload (a JSON document; nil means
// null) to task taskID: see SendSignal.
func (c *Client) Signal(ctx context.Context, taskID, name string, payload []byte) (*SignalResult, error) {
	return c.SendSignal(ctx, SignalParams{TaskID: taskID, Name: name, Payload: payload})
}

// SendSignal stores a signal for a task. If the task's current step waits
// for a signal of that name and its deadline has not passed, the step
// completes at once with the payload as output and the task goes on to its
// next step; otherwise the signal is kept (signals are durable) until a
// step of the task waits for that name. A signal with the ID of one the
// task already has is ignored (Duplicate). An unknown task fails with
// ErrTaskNotFound; a final task with ErrAlreadyFinal, and the signal is
// not stored. Bad input fails with ErrInvalidInput naming the field.
func (c *Client) SendSignal(ctx context.Context, p SignalParams) (*SignalResult, error) {
	if err := checkTaskID(p.TaskID); err != nil {
		return nil, err
	}
	if err := dt.CheckName(ErrInvalidInput, "signal name", p.Name); err != nil {
		return nil, err
	}
	if p.ID == "" {
		var b [16]byte
		_, _ = rand.Read(b[:])
		p.ID = hex.EncodeToString(b[:])
	} else if err := dt.CheckName(ErrInvalidInput, "signal ID", p.ID); err != nil {
		return nil, err
	}
	if err := dt.CheckText(ErrInvalidInput, "sender", p.Sender, 0); err != nil {
		return nil, err
	}
	payload := p.Payload
	if len(payload) == 0 {
		payload = []byte("null")
	}
	if len(payload) > c.cfg.MaxInputBytes {
		return nil, fmt.Errorf("%w: signal payload of %d bytes exceeds %d", ErrInputTooLarge, len(payload), c.cfg.MaxInputBytes)
	}
	if !json.Valid(payload) {
		return nil, fmt.Errorf("%w: signal payload must be a JSON document", ErrInvalidInput)
	}
	sig := &dt.Signal{TaskID: p.TaskID, Name: p.Name, ID: p.ID, Payload: payload, Sender: p.Sender}
	var res flow.SignalResult
	err := c.store.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		var err error
		res, err = flow.Signal(ctx, x, sig, c.clock.Now())
		return err
	})
	if err != nil {
		return nil, err
	}
	if res.Delivered {
		c.wakeSchedulers()
	}
	return &SignalResult{ID: p.ID, Duplicate: res.Duplicate, Delivered: res.Delivered, Task: res.Task}, nil
}

// Signals lists the signals sent to a task, oldest first, consumed or not.
func (c *Client) Signals(ctx context.Context, taskID string) ([]*Signal, error) {
	if err := checkTaskID(taskID); err != nil {
		return nil, err
	}
	return c.store.Reader().SignalList(ctx, &store.SignalListParams{TaskID: taskID})
}
