package clicore

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/drover-run/drover"
	"github.com/spf13/cobra"
)

// Exit codes of the drover command.
const (
	ExitOK      = 0
	ExitFailure = 1
	ExitUsage   = 2
)

// Env is what one invocation of the command line works with: its standard
// streams, its environment and the global flags.
type Env struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Getenv         func(string) string

	// Global flags.
	DBURL       string
	Schema      string
	JSON        bool // --json
	LockTimeout time.Duration
	LogLevel    string
}

// UsageError marks an error as a usage error: exit code 2.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// Usage marks err as a usage error.
func Usage(err error) error { return &UsageError{err} }

// Usagef returns a usage error with a formatted message.
func Usagef(format string, args ...any) error {
	return &UsageError{fmt.Errorf(format, args...)}
}

// ExitError carries an exit code for a failure whose message was already
// printed (the demo prints its summary, then fails).
type ExitError struct {
	Code int
	Msg  string
}

func (e *ExitError) Error() string { return e.Msg }

// Wrapped is an error with its own message that still matches the errors it
// wraps with errors.Is.
type Wrapped struct {
	Msg string
	Err error
}

// Wrap returns err with the message msg.
func Wrap(msg string, err error) error { return &Wrapped{msg, err} }

func (w *Wrapped) Error() string { return w.Msg }
func (w *Wrapped) Unwrap() error { return w.Err }

// ParseLevel parses --log-level.
func ParseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, Usagef("--log-level %q: want debug, info, warn or error", s)
	}
	return l, nil
}

// durationStrings writes durations in JSON logs as the text logs and the
// flags spell them ("1.5s"), not as integer nanoseconds.
func durationStrings(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}

// Logger logs to stderr at --log-level, but never below min; as JSON
// objects with --json.
func (e *Env) Logger(floor slog.Level) *slog.Logger {
	l, _ := ParseLevel(e.LogLevel)
	opts := &slog.HandlerOptions{Level: max(l, floor)}
	if e.JSON {
		opts.ReplaceAttr = durationStrings
		return slog.New(slog.NewJSONHandler(e.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(e.Stderr, opts))
}

// ValidSynchronous checks a SQLite synchronous mode.
func ValidSynchronous(s string) error {
	switch strings.ToLower(s) {
	case "full", "normal":
		return nil
	}
	return Usagef("--synchronous %q: want full or normal", s)
}

// CheckSynchronous validates --synchronous. It is a SQLite setting: given
// explicitly with a PostgreSQL database it is a usage error, since the
// server's synchronous_commit decides durability there.
func CheckSynchronous(cmd *cobra.Command, t DBTarget, synchronous string) error {
	if t.Postgres {
		if cmd.Flags().Changed("synchronous") {
			return Usagef("--synchronous applies to SQLite only; on PostgreSQL durability is the server's synchronous_commit setting")
		}
		return nil
	}
	return ValidSynchronous(synchronous)
}

// WriteJSON prints v as one line of JSON.
func WriteJSON(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	_, err = w.Write(b)
	return err
}

// AllEvents pages through the event history.
func AllEvents(ctx context.Context, c *drover.Client, q drover.EventQuery) ([]*drover.Event, error) {
	var out []*drover.Event
	q.Limit = 1000
	for {
		evs, err := c.Events(ctx, q)
		if err != nil {
			return nil, err
		}
		out = append(out, evs...)
		if len(evs) < q.Limit {
			return out, nil
		}
		q.AfterID = evs[len(evs)-1].ID
	}
}

// StateCounts formats counts by state, in name order.
func StateCounts(m map[drover.ProcessState]int) string {
	var parts []string
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, string(k))
	}
	sort.Strings(keys)
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[drover.ProcessState(k)]))
	}
	return strings.Join(parts, " ")
}
