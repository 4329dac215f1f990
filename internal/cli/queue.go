package cli

import (
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/drover-run/drover/convoy"
	"github.com/drover-run/drover/internal/backend"
	"github.com/drover-run/drover/internal/clicore"
)

// The "drover queue" commands: session queues (the Sequential Convoy
// pattern, package convoy) from the command line.

// QueueJSON is a queue and its policy as printed with --json.
type QueueJSON struct {
	Name                string    `json:"name"`
	MaxDeliveryCount    int       `json:"max_delivery_count"`
	Poison              string    `json:"poison"`
	DedupeWindow        string    `json:"dedupe_window"` // "0s": de-duplication off
	DedupeWindowSeconds float64   `json:"dedupe_window_seconds"`
	LockDuration        string    `json:"lock_duration"`
	LockDurationSeconds float64   `json:"lock_duration_seconds"`
	CreatedAt           time.Time `json:"created_at"`
	UpdatedAt           time.Time `json:"updated_at"`
}

// SessionJSON is a session as printed with --json.
type SessionJSON struct {
	Queue   string `json:"queue"`
	Session string `json:"session"`
	// LastSeq is the last sequence number assigned (0: none yet); NextSeq
	// the one the next message published gets.
	LastSeq int64      `json:"last_seq"`
	NextSeq int64      `json:"next_seq"`
	Pending int        `json:"pending"`
	ReadyAt *time.Time `json:"ready_at"`
	// Locked: held by a consumer whose lock has not expired.
	Locked      bool       `json:"locked"`
	LockedBy    *string    `json:"locked_by"`
	LockedUntil *time.Time `json:"locked_until"`
	LockToken   int64      `json:"lock_token"`
	Blocked     bool       `json:"blocked"`
	Closed      bool       `json:"closed"`
	StateBytes  int        `json:"state_bytes"`
	CreatedAt   time.Time  `json:"created_at"`
	UpdatedAt   time.Time  `json:"updated_at"`
}

// MessageJSON is a stored message as printed with --json. Body is the body
// as text when it is valid UTF-8; otherwise BodyBase64 holds it.
type MessageJSON struct {
	Queue         string     `json:"queue"`
	Session       string     `json:"session"`
	Seq           int64      `json:"seq"`
	MessageID     string     `json:"message_id,omitempty"`
	DeliveryCount int        `json:"delivery_count"`
	EndOfSequence bool       `json:"end_of_sequence"`
	AvailableAt   time.Time  `json:"available_at"`
	EnqueuedAt    time.Time  `json:"enqueued_at"`
	Dead          bool       `json:"dead"`
	DeadReason    string     `json:"dead_reason,omitempty"`
	DeadAt        *time.Time `json:"dead_at,omitempty"`
	Body          *string    `json:"body,omitempty"`
	BodyBase64    string     `json:"body_base64,omitempty"`
	BodyBytes     int        `json:"body_bytes"`
}

// PublishedJSON is what "queue publish --json" prints.
type PublishedJSON struct {
	Queue     string `json:"queue"`
	Session   string `json:"session"`
	Seq       int64  `json:"seq"`
	Duplicate bool   `json:"duplicate"`
	MessageID string `json:"message_id,omitempty"`
}

func queueJSON(q *convoy.Queue) QueueJSON {
	return QueueJSON{
		Name: q.Name, MaxDeliveryCount: q.MaxDeliveryCount, Poison: string(q.PoisonPolicy),
		DedupeWindow: q.DedupeWindow.String(), DedupeWindowSeconds: q.DedupeWindow.Seconds(),
		LockDuration: q.LockDuration.String(), LockDurationSeconds: q.LockDuration.Seconds(),
		CreatedAt: q.CreatedAt, UpdatedAt: q.UpdatedAt,
	}
}

func sessionJSON(s *convoy.Session, now time.Time) SessionJSON {
	return SessionJSON{
		Queue: s.Queue, Session: s.ID, LastSeq: s.NextSeq, NextSeq: s.NextSeq + 1, Pending: s.Pending, ReadyAt: s.ReadyAt,
		Locked:   s.LockHolder != "" && s.LockedUntil != nil && s.LockedUntil.After(now),
		LockedBy: nullable(s.LockHolder), LockedUntil: s.LockedUntil, LockToken: s.LockToken,
		Blocked: s.Blocked, Closed: s.Closed, StateBytes: len(s.State), CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt,
	}
}

func messageJSON(m *convoy.StoredMessage) MessageJSON {
	j := MessageJSON{
		Queue: m.Queue, Session: m.SessionID, Seq: m.Seq, MessageID: m.MessageID, DeliveryCount: m.DeliveryCount,
		EndOfSequence: m.EndOfSequence, AvailableAt: m.AvailableAt, EnqueuedAt: m.EnqueuedAt,
		Dead: m.Dead, DeadReason: m.DeadReason, DeadAt: m.DeadAt, BodyBytes: len(m.Body),
	}
	if utf8.Valid(m.Body) {
		b := string(m.Body)
		j.Body = &b
	} else {
		j.BodyBase64 = base64Std(m.Body)
	}
	return j
}

func base64Std(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// bodyText is a body for a table: text, or a note for binary.
func bodyText(b []byte, n int) string {
	switch {
	case len(b) == 0:
		return "-"
	case !utf8.Valid(b):
		return fmt.Sprintf("(%d bytes, binary)", len(b))
	}
	return clip(string(b), n)
}

// ---- flag checks (before anything is opened: bad input changes nothing) ----

// parseNotBefore reads --not-before: an RFC 3339 time, or a duration from now.
func parseNotBefore(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		if t.Year() < 1970 || t.Year() > 9999 {
			return time.Time{}, clicore.Usagef("--not-before %q is out of range (years 1970-9999)", s)
		}
		return t, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return time.Time{}, clicore.Usagef("--not-before %q: want an RFC 3339 time (2026-11-22T10:00:00Z) or a duration from now (30s, 5m, 2h)", s)
	}
	if d < 0 {
		return time.Time{}, clicore.Usagef("--not-before %q: a duration must not be negative", s)
	}
	return now.Add(d), nil
}

// ---- the commands ----

func (e *env) queueCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "queue",
		Short: "Publish to, inspect and operate session queues (Sequential Convoy)",
		Long: `queue works with session queues, drover's Sequential Convoy: messages carry a
session ID (an order ID, say); the messages of one session are processed in
publish order, one at a time, while different sessions are processed in
parallel by competing consumers. Every message gets a per-session sequence
number 1, 2, 3 … in commit order; the last one may carry an end-of-sequence
flag. Queues and sessions are created by their first publish.

A message delivered more often than its queue's max delivery count (default
10) is dead-lettered. Under the poison policy "block" (the default) its
session halts, keeping strict order, and an operator alert is recorded
(drover events --alerts) until the dead letter is resolved with
"drover queue resolve"; under "skip" the session goes on and the dead letter
is the gap.

The database (on PostgreSQL, the schema --schema) must exist and be migrated
("drover migrate"). See docs/convoy.md.`,
		Example: `  drover queue publish --queue orders --session o-17 --body '{"op":"create"}'
  drover queue sessions --queue orders
  drover queue peek --queue orders --session o-17
  drover queue dlq --queue orders
  drover queue resolve --queue orders --session o-17 --seq 3 --resubmit
  drover queue policy --queue orders --max-delivery 5 --poison skip
  drover queue consume --queue orders --count 10 --exec 'cat; echo'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return clicore.Usagef("queue needs a subcommand: publish, peek, sessions, list, policy, dlq, resolve or consume")
		},
	}
	cmd.AddCommand(e.queuePublishCmd(), e.queuePeekCmd(), e.queueSessionsCmd(), e.queueListCmd(),
		e.queuePolicyCmd(), e.queueDLQCmd(), e.queueResolveCmd(), e.queueConsumeCmd())
	return cmd
}

func (e *env) queuePublishCmd() *cobra.Command {
	var (
		queue, session, messageID, notBefore, body, bodyFile string
		eos                                                  bool
		maxBody                                              int
	)
	cmd := &cobra.Command{
		Use:   "publish",
		Short: "Publish one message to a session",
		Long: `publish stores one message in session --session of queue --queue and prints
its sequence number in the session. The queue and the session are created by
their first message.

The body is --body (a string), or the contents of --body-file, or standard
input with --body-file -; without either the body is empty. It is stored as
bytes, at most --max-body-bytes.

--message-id de-duplicates: publishing the same ID to the queue again within
its dedupe window (drover queue policy) stores nothing and reports the
original's sequence number with "duplicate": true. --end-of-sequence marks
the session's last message: later publishes to the session fail. --not-before
delays delivery until a time (RFC 3339) or for a duration from now; the
message keeps its place, so the session's later messages wait too.`,
		Example: `  drover queue publish --queue orders --session o-17 --body '{"op":"create"}'
  drover queue publish --queue orders --session o-17 --body '{"op":"pay"}' --message-id pay-o-17 --json
  drover queue publish --queue orders --session o-17 --body '{"op":"close"}' --end-of-sequence
  drover queue publish --queue orders --session o-18 --body-file order.json --not-before 30s
  echo '{"op":"create"}' | drover queue publish --queue orders --session o-19 --body-file -`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			fl := cmd.Flags()
			if err := checkQueueFlag("--queue", queue); err != nil {
				return err
			}
			if err := checkSessionFlag(session); err != nil {
				return err
			}
			if fl.Changed("message-id") {
				if err := checkIDFlag("--message-id", "message ID", messageID, convoy.MaxMessageIDLen); err != nil {
					return err
				}
			}
			if maxBody <= 0 {
				return clicore.Usagef("--max-body-bytes must be positive, got %d", maxBody)
			}
			if fl.Changed("body") && fl.Changed("body-file") {
				return clicore.Usagef("--body and --body-file are exclusive: give the body one way")
			}
			var nb time.Time
			if fl.Changed("not-before") {
				var err error
				if nb, err = parseNotBefore(notBefore, time.Now()); err != nil {
					return err
				}
			}
			var data []byte
			switch {
			case fl.Changed("body"):
				data = []byte(body)
			case fl.Changed("body-file"):
				var r io.Reader
				name := "standard input"
				if bodyFile == "-" {
					r = e.Stdin
				} else {
					f, err := os.Open(bodyFile)
					if err != nil {
						return clicore.Usagef("--body-file: %v", err)
					}
					defer f.Close()
					r, name = f, bodyFile
				}
				b, err := io.ReadAll(io.LimitReader(r, int64(maxBody)+1))
				if err != nil {
					return fmt.Errorf("--body-file: read %s: %w", name, err)
				}
				data = b
			}
			if len(data) > maxBody {
				return fmt.Errorf("%w: the body is more than %d bytes (--max-body-bytes)", convoy.ErrInvalidMessage, maxBody)
			}
			b, err := e.queues(ctx, maxBody)
			if err != nil {
				return err
			}
			defer b.Close()
			res, err := b.Publish(ctx, queue, convoy.Message{SessionID: session, Body: data, MessageID: messageID,
				EndOfSequence: eos, NotBefore: nb})
			if err != nil {
				return err
			}
			return e.printPublished(queue, messageID, res.SessionID, res.Seq, res.Duplicate)
		},
	}
	f := cmd.Flags()
	f.StringVar(&queue, "queue", "", "queue name (required)")
	f.StringVar(&session, "session", "", "session ID, e.g. the order ID (required)")
	f.StringVar(&messageID, "message-id", "", "de-duplication ID within the queue's dedupe window")
	f.BoolVar(&eos, "end-of-sequence", false, "mark the session's last message")
	f.StringVar(&notBefore, "not-before", "", "deliver no earlier than this RFC 3339 time, or this long from now (30s, 5m)")
	f.StringVar(&body, "body", "", "the message body")
	f.StringVar(&bodyFile, "body-file", "", "read the body from this file; - reads standard input")
	f.IntVar(&maxBody, "max-body-bytes", convoy.DefaultMaxBodyBytes, "largest body accepted, in bytes")
	return cmd
}

func (e *env) queuePeekCmd() *cobra.Command {
	var (
		queue, session string
		from           int64
		limit          int
	)
	cmd := &cobra.Command{
		Use:   "peek",
		Short: "Show a session's messages without changing anything",
		Long: `peek lists the messages of one session in sequence order, from --from on:
the pending ones (the first is the head, the next to be delivered) and the
dead-lettered ones, with their delivery count, availability and body.
Completed messages are gone. It takes no lock and changes nothing.`,
		Example: `  drover queue peek --queue orders --session o-17
  drover queue peek --queue orders --session o-17 --from 40 --limit 10 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if err := checkQueueFlag("--queue", queue); err != nil {
				return err
			}
			if err := checkSessionFlag(session); err != nil {
				return err
			}
			if from < 0 {
				return clicore.Usagef("--from must be 0 or more, got %d", from)
			}
			if limit <= 0 || limit > 10000 {
				return clicore.Usagef("--limit must be 1-10000, got %d", limit)
			}
			b, err := e.queues(ctx, 0)
			if err != nil {
				return err
			}
			defer b.Close()
			s, ms, next, err := b.Peek(ctx, queue, session, from, limit)
			if err != nil {
				return err
			}
			if e.JSON {
				out := struct {
					Session  SessionJSON   `json:"session"`
					Messages []MessageJSON `json:"messages"`
					NextFrom int64         `json:"next_from,omitempty"`
				}{Session: sessionJSON(s, time.Now()), Messages: []MessageJSON{}, NextFrom: next}
				for _, m := range ms {
					out.Messages = append(out.Messages, messageJSON(m))
				}
				return clicore.WriteJSON(e.Stdout, out)
			}
			fmt.Fprintf(e.Stdout, "session %s of queue %s: %d pending, last seq %d%s\n", s.ID, s.Queue, s.Pending, s.NextSeq, sessionFlags(s, time.Now()))
			tw := newTable(e.Stdout)
			row(tw, "SEQ", "STATE", "DELIVERIES", "AVAILABLE", "MESSAGE_ID", "EOS", "BODY", "DEAD_REASON")
			head := true
			for _, m := range ms {
				st := "pending"
				switch {
				case m.Dead:
					st = "DEAD"
				case head && !s.Blocked:
					st, head = "head", false
				}
				eosMark := ""
				if m.EndOfSequence {
					eosMark = "EOS"
				}
				row(tw, strconv.FormatInt(m.Seq, 10), st, strconv.Itoa(m.DeliveryCount), fmtTime(&m.AvailableAt), dash(m.MessageID),
					dash(eosMark), bodyText(m.Body, 60), dash(clip(m.DeadReason, 60)))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if next != 0 {
				fmt.Fprintf(e.Stderr, "more messages may follow: --from %d\n", next)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&queue, "queue", "", "queue name (required)")
	f.StringVar(&session, "session", "", "session ID (required)")
	f.Int64Var(&from, "from", 0, "start at this sequence number")
	f.IntVar(&limit, "limit", 100, "at most this many messages")
	return cmd
}

// sessionFlags describes a session's lock, block and close for a human.
func sessionFlags(s *convoy.Session, now time.Time) string {
	var parts []string
	if s.LockHolder != "" && s.LockedUntil != nil && s.LockedUntil.After(now) {
		parts = append(parts, fmt.Sprintf("locked by %s until %s", s.LockHolder, fmtTime(s.LockedUntil)))
	}
	if s.Blocked {
		parts = append(parts, "BLOCKED by a dead letter (drover queue dlq)")
	}
	if s.Closed {
		parts = append(parts, "closed (end of sequence published)")
	}
	if len(parts) == 0 {
		return ""
	}
	return "; " + strings.Join(parts, "; ")
}

func (e *env) queueSessionsCmd() *cobra.Command {
	var (
		queue, after string
		limit        int
	)
	cmd := &cobra.Command{
		Use:   "sessions",
		Short: "List a queue's sessions: pending count, lock, blocked, closed",
		Long: `sessions lists the sessions of a queue in ID order: how many messages are
pending, the last sequence number assigned, who holds the session's lock and
until when, whether it is blocked by a dead letter (poison policy block) and
whether its end-of-sequence message was published (closed). Page with
--limit and --after: pass the last session ID printed (or "next_after" of the
JSON output) as --after.`,
		Example: `  drover queue sessions --queue orders
  drover queue sessions --queue orders --after o-99 --limit 50 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if err := checkQueueFlag("--queue", queue); err != nil {
				return err
			}
			if limit <= 0 || limit > 10000 {
				return clicore.Usagef("--limit must be 1-10000, got %d", limit)
			}
			b, err := e.queues(ctx, 0)
			if err != nil {
				return err
			}
			defer b.Close()
			ss, next, err := b.Sessions(ctx, queue, after, limit)
			if err != nil {
				return err
			}
			now := time.Now()
			if e.JSON {
				out := struct {
					Queue     string        `json:"queue"`
					Sessions  []SessionJSON `json:"sessions"`
					NextAfter string        `json:"next_after,omitempty"`
				}{Queue: queue, Sessions: []SessionJSON{}, NextAfter: next}
				for _, s := range ss {
					out.Sessions = append(out.Sessions, sessionJSON(s, now))
				}
				return clicore.WriteJSON(e.Stdout, out)
			}
			tw := newTable(e.Stdout)
			row(tw, "SESSION", "PENDING", "NEXT_SEQ", "READY_AT", "LOCKED_BY", "LOCKED_UNTIL", "BLOCKED", "CLOSED")
			for _, s := range ss {
				j := sessionJSON(s, now)
				by := "-"
				if j.Locked {
					by = s.LockHolder
				}
				row(tw, s.ID, strconv.Itoa(s.Pending), strconv.FormatInt(s.NextSeq+1, 10), fmtTime(s.ReadyAt), by,
					fmtTime(lockedUntil(j)), yes(s.Blocked), yes(s.Closed))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if next != "" {
				fmt.Fprintf(e.Stderr, "more sessions may follow: --after %s\n", next)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&queue, "queue", "", "queue name (required)")
	f.StringVar(&after, "after", "", "only sessions whose ID sorts after this one")
	f.IntVar(&limit, "limit", 100, "at most this many sessions")
	return cmd
}

func lockedUntil(j SessionJSON) *time.Time {
	if !j.Locked {
		return nil
	}
	return j.LockedUntil
}

func yes(b bool) string {
	if b {
		return "yes"
	}
	return "-"
}

func (e *env) queueListCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the queues and their policies",
		Long: `list prints every queue with its policy: the max delivery count (a message
delivered more often is dead-lettered), the poison policy (block: the session
halts until an operator resolves the dead letter; skip: it goes on), the
dedupe window of message IDs (0s: off) and the session lock duration.`,
		Example: `  drover queue list
  drover queue list --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			b, err := e.queues(ctx, 0)
			if err != nil {
				return err
			}
			defer b.Close()
			qs, err := b.Queues(ctx)
			if err != nil {
				return err
			}
			if e.JSON {
				out := struct {
					Queues []QueueJSON `json:"queues"`
				}{Queues: []QueueJSON{}}
				for _, q := range qs {
					out.Queues = append(out.Queues, queueJSON(q))
				}
				return clicore.WriteJSON(e.Stdout, out)
			}
			tw := newTable(e.Stdout)
			row(tw, "QUEUE", "MAX_DELIVERY", "POISON", "DEDUPE_WINDOW", "LOCK_DURATION", "UPDATED")
			for _, q := range qs {
				row(tw, q.Name, strconv.Itoa(q.MaxDeliveryCount), string(q.PoisonPolicy), q.DedupeWindow.String(), q.LockDuration.String(), fmtTime(&q.UpdatedAt))
			}
			return tw.Flush()
		},
	}
}

func (e *env) queuePolicyCmd() *cobra.Command {
	var (
		queue, poison string
		maxDelivery   int
		dedupe, lock  time.Duration
	)
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Show or change a queue's policy",
		Long: `policy shows a queue's policy, or changes the parts given and shows the
result. Changing the policy of a queue that does not exist yet creates it.

  --max-delivery N     a message delivered more than N times is dead-lettered (default 10)
  --poison block|skip  block: the session halts until the dead letter is resolved
                       ("drover queue resolve"), keeping strict order, and an operator
                       alert is recorded; skip: the session goes on without it
  --dedupe-window D    how long a message ID is remembered (0 turns de-duplication off)
  --lock-duration D    how long a consumer's session lock lasts without renewal
                       (10ms to 24h; consumers renew at a third of it)

A new policy applies to deliveries from then on; consumers in other
processes pick it up within a few seconds.`,
		Example: `  drover queue policy --queue orders
  drover queue policy --queue orders --max-delivery 5 --poison skip
  drover queue policy --queue orders --dedupe-window 1h --lock-duration 1m --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			fl := cmd.Flags()
			if err := checkQueueFlag("--queue", queue); err != nil {
				return err
			}
			change := fl.Changed("max-delivery") || fl.Changed("poison") || fl.Changed("dedupe-window") || fl.Changed("lock-duration")
			if fl.Changed("max-delivery") && maxDelivery < 1 {
				return clicore.Usagef("--max-delivery must be at least 1, got %d", maxDelivery)
			}
			if fl.Changed("poison") {
				poison = strings.ToLower(strings.TrimSpace(poison))
				if !convoy.PoisonPolicy(poison).Valid() {
					return clicore.Usagef("--poison %q: want block or skip", poison)
				}
			}
			if fl.Changed("dedupe-window") && dedupe < 0 {
				return clicore.Usagef("--dedupe-window must not be negative (0 turns de-duplication off), got %s", dedupe)
			}
			if fl.Changed("lock-duration") && (lock < 10*time.Millisecond || lock > 24*time.Hour) {
				return clicore.Usagef("--lock-duration must be between 10ms and 24h, got %s", lock)
			}
			b, err := e.queues(ctx, 0)
			if err != nil {
				return err
			}
			defer b.Close()
			var q *convoy.Queue
			created := false
			if !change {
				q, err = b.Policy(ctx, queue)
			} else {
				var ch backend.PolicyChange
				if fl.Changed("max-delivery") {
					ch.MaxDelivery = &maxDelivery
				}
				if fl.Changed("poison") {
					ch.Poison = &poison
				}
				if fl.Changed("dedupe-window") {
					ch.Dedupe = &dedupe
				}
				if fl.Changed("lock-duration") {
					ch.Lock = &lock
				}
				q, created, err = b.SetPolicy(ctx, queue, ch)
			}
			if err != nil {
				return err
			}
			return e.printPolicy(q, created, change)
		},
	}
	f := cmd.Flags()
	f.StringVar(&queue, "queue", "", "queue name (required)")
	f.IntVar(&maxDelivery, "max-delivery", 0, "deliveries before a message is dead-lettered")
	f.StringVar(&poison, "poison", "", "what a dead letter does to its session: block or skip")
	f.DurationVar(&dedupe, "dedupe-window", 0, "how long message IDs are remembered; 0 turns de-duplication off")
	f.DurationVar(&lock, "lock-duration", 0, "session lock duration, 10ms-24h")
	return cmd
}

func (e *env) queueDLQCmd() *cobra.Command {
	var (
		queue, session, afterSession string
		afterSeq                     int64
		limit                        int
	)
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "List dead-lettered messages and why",
		Long: `dlq lists the dead-lettered messages of a queue (or of one --session) in
(session, sequence number) order, with the reason: "max delivery count
exceeded", or the error a consumer dead-lettered the message with. Under the
poison policy block the first dead letter of a session is why the session
halted; resolve it with "drover queue resolve". Page with --after-session and
--after-seq (the "next_after" of the JSON output).`,
		Example: `  drover queue dlq --queue orders
  drover queue dlq --queue orders --session o-17 --json
  drover queue dlq --queue orders --after-session o-17 --after-seq 3 --limit 50`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			fl := cmd.Flags()
			if err := checkQueueFlag("--queue", queue); err != nil {
				return err
			}
			if fl.Changed("session") {
				if err := checkSessionFlag(session); err != nil {
					return err
				}
			}
			if limit <= 0 || limit > 10000 {
				return clicore.Usagef("--limit must be 1-10000, got %d", limit)
			}
			if afterSeq < 0 {
				return clicore.Usagef("--after-seq must be 0 or more, got %d", afterSeq)
			}
			if fl.Changed("after-seq") && !fl.Changed("after-session") && session == "" {
				return clicore.Usagef("--after-seq goes with --after-session (or --session)")
			}
			if session != "" && afterSession == "" && fl.Changed("after-seq") {
				afterSession = session
			}
			type cursor struct {
				Session string `json:"session"`
				Seq     int64  `json:"seq"`
			}
			b, err := e.queues(ctx, 0)
			if err != nil {
				return err
			}
			defer b.Close()
			ms, nextCursor, err := b.DeadLetters(ctx, queue, session, convoy.DeadLetterCursor{SessionID: afterSession, Seq: afterSeq}, limit)
			if err != nil {
				return err
			}
			var next *cursor
			if nextCursor != nil {
				next = &cursor{nextCursor.SessionID, nextCursor.Seq}
			}
			if e.JSON {
				out := struct {
					Queue       string        `json:"queue"`
					DeadLetters []MessageJSON `json:"dead_letters"`
					NextAfter   *cursor       `json:"next_after,omitempty"`
				}{Queue: queue, DeadLetters: []MessageJSON{}, NextAfter: next}
				for _, m := range ms {
					out.DeadLetters = append(out.DeadLetters, messageJSON(m))
				}
				return clicore.WriteJSON(e.Stdout, out)
			}
			tw := newTable(e.Stdout)
			row(tw, "SESSION", "SEQ", "DELIVERIES", "DEAD_AT", "MESSAGE_ID", "REASON", "BODY")
			for _, m := range ms {
				row(tw, m.SessionID, strconv.FormatInt(m.Seq, 10), strconv.Itoa(m.DeliveryCount), fmtTime(m.DeadAt), dash(m.MessageID),
					dash(clip(m.DeadReason, 80)), bodyText(m.Body, 40))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if next != nil {
				fmt.Fprintf(e.Stderr, "more dead letters may follow: --after-session %s --after-seq %d\n", next.Session, next.Seq)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&queue, "queue", "", "queue name (required)")
	f.StringVar(&session, "session", "", "only this session's dead letters")
	f.StringVar(&afterSession, "after-session", "", "paging: start after this session …")
	f.Int64Var(&afterSeq, "after-seq", 0, "… and this sequence number")
	f.IntVar(&limit, "limit", 100, "at most this many dead letters")
	return cmd
}

func (e *env) queueResolveCmd() *cobra.Command {
	var (
		queue, session    string
		seq               int64
		resubmit, discard bool
	)
	cmd := &cobra.Command{
		Use:   "resolve",
		Short: "Resubmit or discard a dead-lettered message",
		Long: `resolve is the operator's answer to a dead letter (drover queue dlq), with
exactly one of:

  --resubmit  put the message back at the head of its session with a fresh
              delivery count and unblock the session: it is delivered next,
              before the session's later messages, so order is kept
  --discard   delete the message and unblock the session, which goes on with
              its next message

Either way an event records it (drover events --task 'session:QUEUE/SESSION').
Fix the cause first (a consumer bug, a missing reference), or the message
comes back.`,
		Example: `  drover queue dlq --queue orders
  drover queue resolve --queue orders --session o-17 --seq 3 --resubmit
  drover queue resolve --queue orders --session o-18 --seq 1 --discard --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if err := checkQueueFlag("--queue", queue); err != nil {
				return err
			}
			if err := checkSessionFlag(session); err != nil {
				return err
			}
			if !cmd.Flags().Changed("seq") {
				return clicore.Usagef("--seq is required: the sequence number of the dead letter (see 'drover queue dlq')")
			}
			if seq < 1 {
				return clicore.Usagef("--seq must be 1 or more, got %d", seq)
			}
			if resubmit == discard {
				return clicore.Usagef("give exactly one of --resubmit and --discard")
			}
			b, err := e.queues(ctx, 0)
			if err != nil {
				return err
			}
			defer b.Close()
			s, err := b.Resolve(ctx, queue, session, seq, resubmit)
			if err != nil {
				return err
			}
			action := "resubmitted"
			if !resubmit {
				action = "discarded"
			}
			return e.printResolved(queue, session, seq, action, s)
		},
	}
	f := cmd.Flags()
	f.StringVar(&queue, "queue", "", "queue name (required)")
	f.StringVar(&session, "session", "", "session ID (required)")
	f.Int64Var(&seq, "seq", 0, "sequence number of the dead letter (required)")
	f.BoolVar(&resubmit, "resubmit", false, "put it back at the head of its session and unblock the session")
	f.BoolVar(&discard, "discard", false, "delete it and unblock the session")
	return cmd
}
