package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/drover-run/drover/convoy"
	"github.com/drover-run/drover/internal/clicore"
)

// ConsumedJSON is one message handled by "queue consume", printed with
// --json.
type ConsumedJSON struct {
	Queue         string  `json:"queue"`
	Session       string  `json:"session"`
	Seq           int64   `json:"seq"`
	MessageID     string  `json:"message_id,omitempty"`
	DeliveryCount int     `json:"delivery_count"`
	EndOfSequence bool    `json:"end_of_sequence"`
	Body          *string `json:"body,omitempty"`
	BodyBase64    string  `json:"body_base64,omitempty"`
	Outcome       string  `json:"outcome"` // completed or abandoned
	Error         string  `json:"error,omitempty"`
}

// ConsumeSummary is the last line of "queue consume --json".
type ConsumeSummary struct {
	Queue     string  `json:"queue"`
	Completed int64   `json:"completed"`
	Abandoned int64   `json:"abandoned"`
	Sessions  int64   `json:"sessions_accepted"`
	Seconds   float64 `json:"seconds"`
}

// lockedWriter serializes writes of concurrent workers and child processes.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

type consumeFlags struct {
	queue      string
	sessions   int
	count      int
	idle       time.Duration
	command    string
	retryDelay time.Duration
}

func (e *env) queueConsumeCmd() *cobra.Command {
	var f consumeFlags
	cmd := &cobra.Command{
		Use:   "consume",
		Short: "Consume messages: print them, or run a command for each",
		Long: `consume accepts sessions of --queue, up to --sessions at once, and handles
their messages in order, one at a time per session (peek-lock: a message is
removed only once handled).

Without --exec each message is printed and completed. With --exec CMD, CMD
runs for each message through /bin/sh -c with the body on its standard input
and DROVER_QUEUE, DROVER_SESSION, DROVER_SEQ, DROVER_MESSAGE_ID,
DROVER_DELIVERY_COUNT and DROVER_END_OF_SEQUENCE in its environment; exit
status 0 completes the message, any other abandons it: it is delivered again
after --retry-delay, until the queue's max delivery count dead-letters it.
The command's output goes to stdout (to stderr with --json).

consume stops after --count completed messages, or once no message has been
available for --idle, or when interrupted; then it prints a summary. With
--json every message is one JSON line and the summary the last line.

With --server URL (and a token) the sessions are held through the server's
session-consumer endpoints, their locks renewed in the background; bodies
then arrive as JSON (a body that is not JSON as a JSON string).`,
		Example: `  drover queue consume --queue orders --count 10
  drover queue consume --queue orders --sessions 8 --idle 5s --json
  drover queue consume --queue orders --exec './apply-order.sh' --retry-delay 5s`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkQueueFlag("--queue", f.queue); err != nil {
				return err
			}
			switch {
			case f.sessions <= 0 || f.sessions > 1000:
				return clicore.Usagef("--sessions must be 1-1000, got %d", f.sessions)
			case f.count < 0:
				return clicore.Usagef("--count must not be negative (0: no limit), got %d", f.count)
			case f.idle < 0:
				return clicore.Usagef("--idle must not be negative (0: wait until interrupted), got %s", f.idle)
			case f.retryDelay < 0:
				return clicore.Usagef("--retry-delay must not be negative, got %s", f.retryDelay)
			case cmd.Flags().Changed("exec") && strings.TrimSpace(f.command) == "":
				return clicore.Usagef("--exec is empty: give a shell command")
			}
			return e.runConsume(cmd.Context(), f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.queue, "queue", "", "queue name (required)")
	fl.IntVar(&f.sessions, "sessions", 1, "sessions handled at once")
	fl.IntVar(&f.count, "count", 0, "stop after this many completed messages (0: no limit)")
	fl.DurationVar(&f.idle, "idle", 0, "stop once no message was available for this long (0: wait until interrupted)")
	fl.StringVar(&f.command, "exec", "", "run this shell command per message, body on stdin; exit 0 completes it")
	fl.DurationVar(&f.retryDelay, "retry-delay", time.Second, "with --exec: delay before a failed message is delivered again")
	return cmd
}

func (e *env) runConsume(ctx context.Context, f consumeFlags) error {
	start := time.Now()
	b, err := e.queues(ctx, 0)
	if err != nil {
		return err
	}
	defer b.Close()
	src := b.Consumer(f.queue)

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var (
		mu                                   sync.Mutex
		out                                  = lockedWriter{&mu, e.Stdout}
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
	childOut := io.Writer(out)
	if e.JSON {
		childOut = lockedWriter{&mu, e.Stderr}
	}
	// How long a held session may have nothing to deliver before it is
	// released for the next one.
	sessionIdle := time.Second
	if f.idle > 0 {
		sessionIdle = min(sessionIdle, f.idle)
	}
	settleCtx := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	}

	handle := func(r consumeSession, m *consumeMsg) error {
		j := ConsumedJSON{Queue: m.Queue, Session: m.SessionID, Seq: m.Seq, MessageID: m.MessageID,
			DeliveryCount: m.DeliveryCount, EndOfSequence: m.EndOfSequence, Outcome: "completed"}
		if utf8.Valid(m.Body) {
			b := string(m.Body)
			j.Body = &b
		} else {
			j.BodyBase64 = base64Std(m.Body)
		}
		var runErr error
		if f.command != "" {
			cmd := exec.CommandContext(runCtx, "/bin/sh", "-c", f.command)
			cmd.Stdin = bytes.NewReader(m.Body)
			cmd.Stdout, cmd.Stderr = childOut, lockedWriter{&mu, e.Stderr}
			cmd.Env = append(cmd.Environ(), "DROVER_QUEUE="+m.Queue, "DROVER_SESSION="+m.SessionID,
				"DROVER_SEQ="+strconv.FormatInt(m.Seq, 10), "DROVER_MESSAGE_ID="+m.MessageID,
				"DROVER_DELIVERY_COUNT="+strconv.Itoa(m.DeliveryCount), "DROVER_END_OF_SEQUENCE="+strconv.FormatBool(m.EndOfSequence))
			runErr = cmd.Run()
			if runErr != nil && runCtx.Err() != nil {
				// Interrupted: leave the message at the head.
				return runCtx.Err()
			}
		}
		sctx, cancel := settleCtx()
		defer cancel()
		if runErr != nil {
			j.Outcome, j.Error = "abandoned", runErr.Error()
			if err := r.abandon(sctx, m, f.retryDelay); err != nil {
				return err
			}
			abandoned.Add(1)
		} else {
			if err := r.complete(sctx, m); err != nil {
				return err
			}
			completed.Add(1)
		}
		if e.JSON {
			return clicore.WriteJSON(out, j)
		}
		body := bodyText(m.Body, 200)
		switch {
		case f.command == "":
			_, err := fmt.Fprintf(out, "%s %d (delivery %d): %s\n", m.SessionID, m.Seq, m.DeliveryCount, body)
			return err
		case runErr != nil:
			_, err := fmt.Fprintf(out, "%s %d (delivery %d): %s: abandoned, delivered again after %s\n", m.SessionID, m.Seq, m.DeliveryCount, runErr, f.retryDelay)
			return err
		}
		_, err := fmt.Fprintf(out, "%s %d (delivery %d): completed\n", m.SessionID, m.Seq, m.DeliveryCount)
		return err
	}

	// session handles one accepted session until it has nothing to deliver.
	session := func(r consumeSession) error {
		defer func() {
			sctx, cancel := settleCtx()
			defer cancel()
			_ = r.close(sctx)
		}()
		for runCtx.Err() == nil {
			if f.count > 0 && reserved.Add(1) > int64(f.count) {
				reserved.Add(-1)
				return nil
			}
			m, err := r.receive(runCtx, sessionIdle)
			if err != nil {
				if f.count > 0 {
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
			if completed.Load() == before && f.count > 0 {
				reserved.Add(-1) // abandoned: the slot is free again
			}
			if f.count > 0 && completed.Load() >= int64(f.count) {
				stop()
			}
		}
		return nil
	}

	var wg sync.WaitGroup
	for range f.sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for runCtx.Err() == nil {
				actx, cancel := runCtx, context.CancelFunc(func() {})
				if f.idle > 0 {
					actx, cancel = context.WithTimeout(runCtx, f.idle)
				}
				r, err := src.accept(actx, runCtx)
				cancel()
				if err != nil {
					switch {
					case runCtx.Err() != nil:
						return
					case errors.Is(err, context.DeadlineExceeded):
						if held.Load() == 0 && time.Since(time.Unix(0, lastActivity.Load())) >= f.idle {
							stop()
						}
						continue
					}
					fail(src.explain(err))
					return
				}
				accs.Add(1)
				// While a session is held (a handler may run longer than
				// --idle) the consumer is not idle.
				held.Add(1)
				err = session(r)
				held.Add(-1)
				if err != nil {
					fail(src.explain(err))
					return
				}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	s := ConsumeSummary{Queue: f.queue, Completed: completed.Load(), Abandoned: abandoned.Load(), Sessions: accs.Load(),
		Seconds: math.Round(time.Since(start).Seconds()*1000) / 1000}
	if e.JSON {
		return clicore.WriteJSON(e.Stdout, s)
	}
	_, err = fmt.Fprintf(e.Stdout, "consumed %d messages of queue %s (%d abandoned, %d sessions accepted) in %.1fs\n",
		s.Completed, s.Queue, s.Abandoned, s.Sessions, s.Seconds)
	return err
}

// consumeMsg is a message handed to "queue consume".
type consumeMsg struct {
	Queue, SessionID string
	Seq              int64
	MessageID        string
	Body             []byte
	DeliveryCount    int
	EndOfSequence    bool

	local *convoy.ReceivedMessage // the database path's message
}

// consumeSource accepts sessions for "queue consume": from the database
// (convoy) or over the API (--server).
type consumeSource interface {
	// accept waits until ctx ends for the next available session;
	// runCtx bounds the whole run.
	accept(ctx, runCtx context.Context) (consumeSession, error)
	// explain turns an error into the CLI's terms.
	explain(err error) error
}

// consumeSession is a held session of "queue consume".
type consumeSession interface {
	// receive waits up to idle for the next message; it fails with
	// context.DeadlineExceeded when none came, with convoy's
	// ErrSessionBlocked, ErrSessionEnded or ErrLockLost when none will.
	receive(ctx context.Context, idle time.Duration) (*consumeMsg, error)
	complete(ctx context.Context, m *consumeMsg) error
	abandon(ctx context.Context, m *consumeMsg, delay time.Duration) error
	close(ctx context.Context) error
}

type localConsumeSource struct {
	c     *convoy.Client
	drv   *clicore.Database
	queue string
}

func (s localConsumeSource) accept(ctx, _ context.Context) (consumeSession, error) {
	r, err := s.c.AcceptNextSession(ctx, s.queue)
	if err != nil {
		return nil, err
	}
	return localConsumeSession{r}, nil
}

func (s localConsumeSource) explain(err error) error { return s.drv.StoreErr(err) }

type localConsumeSession struct{ r *convoy.SessionReceiver }

func (s localConsumeSession) receive(ctx context.Context, idle time.Duration) (*consumeMsg, error) {
	rctx, cancel := context.WithTimeout(ctx, idle)
	defer cancel()
	m, err := s.r.Receive(rctx)
	if err != nil {
		return nil, err
	}
	return &consumeMsg{Queue: m.Queue, SessionID: m.SessionID, Seq: m.Seq, MessageID: m.MessageID, Body: m.Body,
		DeliveryCount: m.DeliveryCount, EndOfSequence: m.EndOfSequence, local: m}, nil
}

func (s localConsumeSession) complete(ctx context.Context, m *consumeMsg) error {
	return s.r.Complete(ctx, m.local, nil)
}

func (s localConsumeSession) abandon(ctx context.Context, m *consumeMsg, delay time.Duration) error {
	return s.r.Abandon(ctx, m.local, delay)
}

func (s localConsumeSession) close(ctx context.Context) error { return s.r.Close(ctx) }
