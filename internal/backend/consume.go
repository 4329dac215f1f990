package backend

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/drover-run/drover/convoy"
	"github.com/drover-run/drover/internal/clicore"
)

// Message is a message handed to "queue consume".
type Message struct {
	Queue, SessionID string
	Seq              int64
	MessageID        string
	Body             []byte
	DeliveryCount    int
	EndOfSequence    bool

	local *convoy.ReceivedMessage // the database path's message
}

// Consumer accepts sessions for "queue consume": from the store (convoy)
// or over the API (--server).
type Consumer interface {
	// Accept waits until ctx ends for the next available session;
	// runCtx bounds the whole run.
	Accept(ctx, runCtx context.Context) (Session, error)
	// Explain turns an error into the command line's terms.
	Explain(err error) error
}

// Session is a held session of "queue consume".
type Session interface {
	// Receive waits up to idle for the next message; it fails with
	// context.DeadlineExceeded when none came, with convoy's
	// ErrSessionBlocked, ErrSessionEnded or ErrLockLost when none will.
	Receive(ctx context.Context, idle time.Duration) (*Message, error)
	Complete(ctx context.Context, m *Message) error
	Abandon(ctx context.Context, m *Message, delay time.Duration) error
	Close(ctx context.Context) error
}

// ConsumeOptions configures Consume.
type ConsumeOptions struct {
	Sessions int           // sessions handled at once
	Count    int           // stop after this many completed messages (0: no limit)
	Idle     time.Duration // stop once no message was available for this long (0: never)
	// RetryDelay delays the next delivery of an abandoned message.
	RetryDelay time.Duration
	// Handle handles one message under the run's context (nil: nothing
	// to do). Its error abandons the message, unless the run was
	// interrupted: then the message stays at the head, unsettled.
	Handle func(ctx context.Context, m *Message) error
	// Settled is told each settled message with Handle's error (nil: it
	// was completed). Its error ends the run.
	Settled func(m *Message, handleErr error) error
}

// ConsumeStats counts what Consume did.
type ConsumeStats struct {
	Completed, Abandoned, Sessions int64
}

// Consume runs "queue consume" on src until ctx ends, Count messages are
// completed, or nothing was available for Idle. The first failure stops
// every worker and is returned, explained.
func Consume(ctx context.Context, src Consumer, o ConsumeOptions) (ConsumeStats, error) {
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var (
		reserved, completed, abandoned, accs atomic.Int64
		lastActivity                         atomic.Int64
		held                                 atomic.Int64 // sessions held now
		firstErr                             error
		errOnce                              sync.Once
	)
	lastActivity.Store(time.Now().UnixNano())
	fail := func(err error) {
		errOnce.Do(func() { firstErr = err })
		stop()
	}
	// How long a held session may have nothing to deliver before it is
	// released for the next one.
	sessionIdle := time.Second
	if o.Idle > 0 {
		sessionIdle = min(sessionIdle, o.Idle)
	}
	settleCtx := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	}

	handle := func(r Session, m *Message) error {
		var runErr error
		if o.Handle != nil {
			runErr = o.Handle(runCtx, m)
			if runErr != nil && runCtx.Err() != nil {
				// Interrupted: leave the message at the head.
				return runCtx.Err()
			}
		}
		sctx, cancel := settleCtx()
		defer cancel()
		if runErr != nil {
			if err := r.Abandon(sctx, m, o.RetryDelay); err != nil {
				return err
			}
			abandoned.Add(1)
		} else {
			if err := r.Complete(sctx, m); err != nil {
				return err
			}
			completed.Add(1)
		}
		if o.Settled != nil {
			return o.Settled(m, runErr)
		}
		return nil
	}

	// session handles one accepted session until it has nothing to deliver.
	session := func(r Session) error {
		defer func() {
			sctx, cancel := settleCtx()
			defer cancel()
			_ = r.Close(sctx)
		}()
		for runCtx.Err() == nil {
			if o.Count > 0 && reserved.Add(1) > int64(o.Count) {
				reserved.Add(-1)
				return nil
			}
			m, err := r.Receive(runCtx, sessionIdle)
			if err != nil {
				if o.Count > 0 {
					reserved.Add(-1)
				}
				switch {
				case runCtx.Err() != nil, errors.Is(err, context.DeadlineExceeded),
					errors.Is(err, convoy.ErrSessionBlocked), errors.Is(err, convoy.ErrSessionEnded), errors.Is(err, convoy.ErrLockLost):
					return nil
				}
				return err
			}
			lastActivity.Store(time.Now().UnixNano())
			before := completed.Load()
			if err := handle(r, m); err != nil {
				if runCtx.Err() != nil || errors.Is(err, convoy.ErrLockLost) {
					return nil
				}
				return err
			}
			lastActivity.Store(time.Now().UnixNano())
			if completed.Load() == before && o.Count > 0 {
				reserved.Add(-1) // abandoned: the slot is free again
			}
			if o.Count > 0 && completed.Load() >= int64(o.Count) {
				stop()
			}
		}
		return nil
	}

	var wg sync.WaitGroup
	for range o.Sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for runCtx.Err() == nil {
				actx, cancel := runCtx, context.CancelFunc(func() {})
				if o.Idle > 0 {
					actx, cancel = context.WithTimeout(runCtx, o.Idle)
				}
				r, err := src.Accept(actx, runCtx)
				cancel()
				if err != nil {
					switch {
					case runCtx.Err() != nil:
						return
					case errors.Is(err, context.DeadlineExceeded):
						if held.Load() == 0 && time.Since(time.Unix(0, lastActivity.Load())) >= o.Idle {
							stop()
						}
						continue
					}
					fail(src.Explain(err))
					return
				}
				accs.Add(1)
				// While a session is held (a handler may run longer than
				// Idle) the consumer is not idle.
				held.Add(1)
				err = session(r)
				held.Add(-1)
				if err != nil {
					fail(src.Explain(err))
					return
				}
			}
		}()
	}
	wg.Wait()
	return ConsumeStats{Completed: completed.Load(), Abandoned: abandoned.Load(), Sessions: accs.Load()}, firstErr
}

// localConsumer accepts sessions from the store.
type localConsumer struct {
	c     *convoy.Client
	drv   *clicore.Database
	queue string
}

func (s localConsumer) Accept(ctx, _ context.Context) (Session, error) {
	r, err := s.c.AcceptNextSession(ctx, s.queue)
	if err != nil {
		return nil, err
	}
	return localSession{r}, nil
}

func (s localConsumer) Explain(err error) error { return s.drv.StoreErr(err) }

type localSession struct{ r *convoy.SessionReceiver }

func (s localSession) Receive(ctx context.Context, idle time.Duration) (*Message, error) {
	rctx, cancel := context.WithTimeout(ctx, idle)
	defer cancel()
	m, err := s.r.Receive(rctx)
	if err != nil {
		return nil, err
	}
	return &Message{Queue: m.Queue, SessionID: m.SessionID, Seq: m.Seq, MessageID: m.MessageID, Body: m.Body,
		DeliveryCount: m.DeliveryCount, EndOfSequence: m.EndOfSequence, local: m}, nil
}

func (s localSession) Complete(ctx context.Context, m *Message) error {
	return s.r.Complete(ctx, m.local, nil)
}

func (s localSession) Abandon(ctx context.Context, m *Message, delay time.Duration) error {
	return s.r.Abandon(ctx, m.local, delay)
}

func (s localSession) Close(ctx context.Context) error { return s.r.Close(ctx) }
