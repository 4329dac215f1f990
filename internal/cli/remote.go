package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/convoy"
	"github.com/drover-run/drover/droverapi"
	"github.com/drover-run/drover/droverclient"
	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/clicore"
)

// The CLI against a running server: with --server URL the commands that
// read or change tasks, alerts or queues go through the HTTP API
// (package droverclient) instead of the database, and print the same
// output.

// Environment variables of --server, --token and --namespace.
const (
	EnvServer    = "DROVER_SERVER"
	EnvToken     = "DROVER_TOKEN"
	EnvNamespace = "DROVER_NAMESPACE"
)

// remoteCommands are the commands that work against a server, by path.
var remoteCommands = map[string]bool{
	"drover submit": true, "drover status": true, "drover list": true, "drover resubmit": true,
	"drover cancel": true, "drover events": true,
	"drover alerts": true, "drover alerts ack": true,
	"drover queue": true, "drover queue publish": true, "drover queue peek": true, "drover queue sessions": true,
	"drover queue list": true, "drover queue dlq": true, "drover queue resolve": true, "drover queue policy": true,
	"drover queue consume": true,
}

// setupRemote resolves --server, --token and --token-file for cmd. With a
// server, e.remote is the API client; without one it stays nil and the
// command uses the database.
func (e *env) setupRemote(cmd *cobra.Command) error {
	fl := cmd.Flags()
	serverFlag := fl.Changed("server")
	if !serverFlag {
		e.serverURL = e.Getenv(EnvServer)
	}
	tokenFlags := fl.Changed("token") || fl.Changed("token-file")
	nsFlag := fl.Changed("namespace")
	if !nsFlag {
		e.namespace = e.Getenv(EnvNamespace)
	}
	if e.serverURL == "" {
		if serverFlag {
			return clicore.Usagef("--server is empty: want http://HOST:PORT or https://HOST:PORT")
		}
		if tokenFlags {
			return clicore.Usagef("--token and --token-file go with --server (or $%s)", EnvServer)
		}
		if nsFlag {
			// The database has no tokens to confine a caller: namespaces
			// are the server's.
			return clicore.Usagef("--namespace goes with --server (or $%s)", EnvServer)
		}
		return nil
	}
	if !remoteCommands[cmd.CommandPath()] {
		if serverFlag {
			return clicore.Usagef("'%s' does not work against a server: it needs the database (--db); leave out --server", cmd.CommandPath())
		}
		e.serverURL = "" // $DROVER_SERVER does not apply to this command
		return nil
	}
	if fl.Changed("db") || fl.Changed("schema") {
		if serverFlag {
			return clicore.Usagef("--db/--schema and --server exclude each other: give the database or the server")
		}
		e.serverURL = "" // an explicit --db wins over $DROVER_SERVER
		return nil
	}
	token := ""
	switch {
	case fl.Changed("token") && fl.Changed("token-file"):
		return clicore.Usagef("--token and --token-file exclude each other")
	case fl.Changed("token-file"):
		b, err := os.ReadFile(e.tokenFile)
		if err != nil {
			return clicore.Usagef("--token-file: %v", err)
		}
		token = strings.TrimSpace(string(b))
		if token == "" || strings.ContainsAny(token, " \t\r\n") {
			return clicore.Usagef("--token-file %s: want one token on one line", e.tokenFile)
		}
	case fl.Changed("token"):
		if token = strings.TrimSpace(e.token); token == "" {
			return clicore.Usagef("--token is empty")
		}
	default:
		token = strings.TrimSpace(e.Getenv(EnvToken))
	}
	opts := []droverclient.Option{droverclient.WithHTTPClient(&http.Client{})}
	if e.namespace != "" {
		if e.namespace != dt.DefaultNamespace {
			if p := dt.NamespaceProblem(e.namespace); p != "" {
				return clicore.Usagef("--namespace %q: %s", e.namespace, p)
			}
		}
		opts = append(opts, droverclient.WithNamespace(e.namespace))
	} else if nsFlag {
		return clicore.Usagef("--namespace is empty: want a namespace name, or leave it out for the token's own (or the default one)")
	}
	// No overall timeout: it would cut event streams; requests end with
	// the command's context.
	c, err := droverclient.New(e.serverURL, token, opts...)
	if err != nil {
		return clicore.Usagef("--server: %s", strings.TrimPrefix(err.Error(), "droverclient: "))
	}
	e.remote = c
	e.hasToken = token != ""
	return nil
}

// remoteErr explains an error of the API client: an error answer shows
// its status, code and message; others name the server.
func (e *env) remoteErr(err error) error {
	if err == nil {
		return nil
	}
	var ae *droverclient.APIError
	if errors.As(err, &ae) {
		msg := fmt.Sprintf("server: %d %s: %s", ae.Status, ae.Code, ae.Message)
		switch {
		case ae.Status == http.StatusUnauthorized && !e.hasToken:
			msg += fmt.Sprintf(" (no token given: use --token, --token-file or $%s)", EnvToken)
		case ae.Status == http.StatusUnauthorized:
			msg += " (the server does not accept this token)"
		case ae.Status == http.StatusForbidden && e.namespace != "" && strings.Contains(ae.Message, "namespace"):
			msg += " (this token belongs to a namespace and acts in it only: leave out --namespace, or use a global token)"
		case ae.Status == http.StatusForbidden:
			msg += " (resubmit, cancel, alert acknowledgement, dead-letter actions and queue policy changes need an operator token)"
		}
		return clicore.Wrap(msg, err)
	}
	if errors.Is(err, context.Canceled) {
		return err
	}
	return clicore.Wrap(fmt.Sprintf("server %s: %s", e.serverURL, strings.TrimPrefix(err.Error(), "droverclient: ")), err)
}

// ---- conversions of API shapes to the types the printers take ----

// nullJSON returns nil for an absent or null JSON value.
func nullJSON(b json.RawMessage) []byte {
	if len(b) == 0 || string(b) == "null" {
		return nil
	}
	return b
}

func remoteTask(t *droverapi.Task) *drover.Task {
	input := []byte(t.Input)
	if len(input) == 0 {
		input = []byte("null")
	}
	out := &drover.Task{
		ID: t.ID, Workflow: t.Workflow, Input: input, ProcessState: dt.ProcessState(t.State), LockedBy: t.LockedBy,
		CompleteBy: t.CompleteBy, FailureCount: t.FailureCount, CurrentStep: t.CurrentStep, StepCount: t.StepCount,
		OrderingKey: t.OrderingKey, OrderingSeq: t.OrderingSeq, Output: nullJSON(t.Output), LastError: t.LastError,
		WorkflowVersion: t.WorkflowVersion, CallbackURL: t.CallbackURL, CallbackEvents: t.CallbackEvents, FailureThreshold: t.FailureThreshold,
		OnFailure: dt.FailurePolicy(t.OnFailure), RetryDelay: time.Duration(t.RetryDelayMS) * time.Millisecond,
		AvailableAt: t.AvailableAt, CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt,
	}
	if t.Wait != nil {
		out.Wait = remoteWait(t.Wait)
	}
	for _, s := range t.Steps {
		var wait *dt.WaitPolicy
		if s.Wait != nil {
			w := remoteWait(s.Wait)
			wait = &w
		}
		out.Steps = append(out.Steps, dt.StepRecord{
			OnFailure: dt.FailurePolicy(s.OnFailure), Wait: wait,
			TaskID: t.ID, Index: s.Index, Name: s.Name, Agent: s.Agent, Timeout: time.Duration(s.TimeoutMS) * time.Millisecond,
			Compensation: s.Compensation, ProcessState: dt.ProcessState(s.State), CompensationState: dt.ProcessState(s.CompensationState),
			LockedBy: s.LockedBy, CompleteBy: s.CompleteBy, FailureCount: s.FailureCount, Attempt: s.Attempt,
			IdempotencyKey: s.IdempotencyKey, Output: nullJSON(s.Output), LastError: s.LastError,
			StartedAt: s.StartedAt, FinishedAt: s.FinishedAt, UpdatedAt: s.UpdatedAt,
		})
	}
	return out
}

func remoteWait(w *droverapi.WaitPolicy) dt.WaitPolicy {
	return dt.WaitPolicy{MaxWaits: w.MaxWaits, Delay: time.Duration(w.DelayMS) * time.Millisecond,
		Multiplier: w.Multiplier, MaxDelay: time.Duration(w.MaxDelayMS) * time.Millisecond}
}

func remoteEvent(ev *droverapi.Event) *drover.Event {
	return &drover.Event{ID: ev.ID, TaskID: ev.Subject, StepIndex: ev.StepIndex, Type: dt.EventType(ev.Type),
		State: dt.ProcessState(ev.State), Alert: ev.Alert, Actor: ev.Actor, Attempt: ev.Attempt, Message: ev.Message,
		CreatedAt: ev.CreatedAt}
}

func remoteQueue(q *droverapi.Queue) *convoy.Queue {
	return &convoy.Queue{Name: q.Name, MaxDeliveryCount: q.MaxDeliveryCount, PoisonPolicy: convoy.PoisonPolicy(q.PoisonPolicy),
		DedupeWindow: time.Duration(q.DedupeWindowMS) * time.Millisecond, LockDuration: time.Duration(q.LockDurationMS) * time.Millisecond,
		CreatedAt: q.CreatedAt, UpdatedAt: q.UpdatedAt}
}

// remoteSession converts an API session; the API does not tell the lock
// token (0).
func remoteSession(s *droverapi.Session) *convoy.Session {
	return &convoy.Session{Queue: s.Queue, ID: s.ID, NextSeq: s.NextSeq, Pending: s.Pending, ReadyAt: s.ReadyAt,
		LockHolder: s.LockHolder, LockedUntil: s.LockedUntil, State: nullJSON(s.State), Closed: s.Closed, Blocked: s.Blocked,
		CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt}
}

// remoteMessage converts an API message. The API returns bodies as JSON
// (a body that is not JSON as a JSON string), shown as such.
func remoteMessage(m *droverapi.Message) *convoy.StoredMessage {
	return &convoy.StoredMessage{Queue: m.Queue, SessionID: m.SessionID, Seq: m.Seq, MessageID: m.MessageID, Body: []byte(m.Body),
		DeliveryCount: m.DeliveryCount, EndOfSequence: m.EndOfSequence, AvailableAt: m.AvailableAt, Dead: m.Dead,
		DeadReason: m.DeadReason, DeadAt: m.DeadAt, EnqueuedAt: m.EnqueuedAt}
}

// findSession returns one session of a queue over the API, which lists
// sessions but has no call for one: it pages through the listing.
func (e *env) findSession(ctx context.Context, queue, id string) (*convoy.Session, error) {
	after := ""
	for {
		page, err := e.remote.Sessions(ctx, queue, after, 1000)
		if err != nil {
			return nil, e.remoteErr(err)
		}
		for i := range page.Sessions {
			if page.Sessions[i].ID == id {
				return remoteSession(&page.Sessions[i]), nil
			}
		}
		if page.NextAfter == "" {
			return nil, fmt.Errorf("session %q of queue %q not found on the server (see 'drover queue sessions --queue %s')", id, queue, queue)
		}
		after = page.NextAfter
	}
}

// printStatus prints a task with its steps and, when not nil, its events.
func (e *env) printStatus(t *drover.Task, events []*drover.Event) error {
	if e.JSON {
		j := taskJSON(t)
		for _, ev := range events {
			j.Events = append(j.Events, eventJSON(ev))
		}
		return clicore.WriteJSON(e.Stdout, j)
	}
	return printTask(e.Stdout, t, events, time.Now())
}

// reconnecting reports a lost event stream of --follow --server.
func (e *env) reconnecting(err error, wait time.Duration) {
	fmt.Fprintf(e.Stderr, "drover: event stream from %s lost (%s); reconnecting in %s\n", e.serverURL,
		OneLine(e.remoteErr(err).Error()), wait.Round(time.Millisecond))
}

// printFollowed prints one event of --follow.
func (e *env) printFollowed(ev *drover.Event) error {
	if e.JSON {
		return clicore.WriteJSON(e.Stdout, eventJSON(ev))
	}
	_, err := fmt.Fprintln(e.Stdout, eventLine(ev))
	return err
}

// printEventList prints the events of "drover events".
func (e *env) printEventList(evs []*drover.Event) error {
	if e.JSON {
		for _, ev := range evs {
			if err := clicore.WriteJSON(e.Stdout, eventJSON(ev)); err != nil {
				return err
			}
		}
		return nil
	}
	return printEvents(e.Stdout, evs, true)
}
