package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/drover-run/drover/internal/backend"
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
session-consumer endpoints, their locks renewed in the background (sooner
when round trips are long); bodies then arrive as JSON (a body that is not
JSON as a JSON string). Sessions lost with nothing completed make it wait
before accepting again; when round trips take over half the queue's lock
duration it stops with an error saying to raise --lock-duration.`,
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

	var mu sync.Mutex
	out := lockedWriter{&mu, e.Stdout}
	childOut := io.Writer(out)
	if e.JSON {
		childOut = lockedWriter{&mu, e.Stderr}
	}
	o := backend.ConsumeOptions{Sessions: f.sessions, Count: f.count, Idle: f.idle, RetryDelay: f.retryDelay}
	if f.command != "" {
		o.Handle = func(runCtx context.Context, m *backend.Message) error {
			cmd := exec.CommandContext(runCtx, "/bin/sh", "-c", f.command)
			cmd.Stdin = bytes.NewReader(m.Body)
			cmd.Stdout, cmd.Stderr = childOut, lockedWriter{&mu, e.Stderr}
			cmd.Env = append(cmd.Environ(), "DROVER_QUEUE="+m.Queue, "DROVER_SESSION="+m.SessionID,
				"DROVER_SEQ="+strconv.FormatInt(m.Seq, 10), "DROVER_MESSAGE_ID="+m.MessageID,
				"DROVER_DELIVERY_COUNT="+strconv.Itoa(m.DeliveryCount), "DROVER_END_OF_SEQUENCE="+strconv.FormatBool(m.EndOfSequence))
			return cmd.Run()
		}
	}
	o.Settled = func(m *backend.Message, runErr error) error {
		if e.JSON {
			j := ConsumedJSON{Queue: m.Queue, Session: m.SessionID, Seq: m.Seq, MessageID: m.MessageID,
				DeliveryCount: m.DeliveryCount, EndOfSequence: m.EndOfSequence, Outcome: "completed"}
			if utf8.Valid(m.Body) {
				b := string(m.Body)
				j.Body = &b
			} else {
				j.BodyBase64 = base64Std(m.Body)
			}
			if runErr != nil {
				j.Outcome, j.Error = "abandoned", runErr.Error()
			}
			return clicore.WriteJSON(out, j)
		}
		var err error
		switch {
		case f.command == "":
			_, err = fmt.Fprintf(out, "%s %d (delivery %d): %s\n", m.SessionID, m.Seq, m.DeliveryCount, bodyText(m.Body, 200))
		case runErr != nil:
			_, err = fmt.Fprintf(out, "%s %d (delivery %d): %s: abandoned, delivered again after %s\n", m.SessionID, m.Seq, m.DeliveryCount, runErr, f.retryDelay)
		default:
			_, err = fmt.Fprintf(out, "%s %d (delivery %d): completed\n", m.SessionID, m.Seq, m.DeliveryCount)
		}
		return err
	}
	st, err := backend.Consume(ctx, b.Consumer(f.queue), o)
	if err != nil {
		return err
	}
	s := ConsumeSummary{Queue: f.queue, Completed: st.Completed, Abandoned: st.Abandoned, Sessions: st.Sessions,
		Seconds: math.Round(time.Since(start).Seconds()*1000) / 1000}
	if e.JSON {
		return clicore.WriteJSON(e.Stdout, s)
	}
	_, err = fmt.Fprintf(e.Stdout, "consumed %d messages of queue %s (%d abandoned, %d sessions accepted) in %.1fs\n",
		s.Completed, s.Queue, s.Abandoned, s.Sessions, s.Seconds)
	return err
}
