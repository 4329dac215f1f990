package backend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/convoy"
	"github.com/drover-run/drover/droverapi"
	"github.com/drover-run/drover/droverclient"
	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/clicore"
)

// EnvToken names the environment variable of the bearer token, named in
// the explanation of a 401.
const EnvToken = "DROVER_TOKEN"

// Remote is a running server the commands go through (--server).
type Remote struct {
	Client *droverclient.Client
	// URL is the server as given, named in errors.
	URL string
	// HasToken tells whether a token was given, to explain a 401.
	HasToken bool
	// Namespace is the namespace the commands name (--namespace), to
	// explain a 403 of a namespace's token.
	Namespace string
	// OnReconnect reports a lost event stream of Follow before it is
	// reconnected after wait (nil: silently).
	OnReconnect func(err error, wait time.Duration)
}

// Err explains an error of the API client: an error answer shows its
// status, code and message; others name the server.
func (r *Remote) Err(err error) error {
	if err == nil {
		return nil
	}
	var ae *droverclient.APIError
	if errors.As(err, &ae) {
		msg := fmt.Sprintf("server: %d %s: %s", ae.Status, ae.Code, ae.Message)
		switch {
		case ae.Status == http.StatusUnauthorized && !r.HasToken:
			msg += fmt.Sprintf(" (no token given: use --token, --token-file or $%s)", EnvToken)
		case ae.Status == http.StatusUnauthorized:
			msg += " (the server does not accept this token)"
		case ae.Status == http.StatusForbidden && r.Namespace != "" && strings.Contains(ae.Message, "namespace"):
			msg += " (this token belongs to a namespace and acts in it only: leave out --namespace, or use a global token)"
		case ae.Status == http.StatusForbidden:
			msg += " (resubmit, cancel, alert acknowledgement, dead-letter actions, queue policy changes and schedule pause, resume, run and delete need an operator token)"
		}
		return clicore.Wrap(msg, err)
	}
	if errors.Is(err, context.Canceled) {
		return err
	}
	return clicore.Wrap(fmt.Sprintf("server %s: %s", r.URL, strings.TrimPrefix(err.Error(), "droverclient: ")), err)
}

// findSession returns one session of a queue over the API, which lists
// sessions but has no call for one: it pages through the listing.
func (r *Remote) findSession(ctx context.Context, queue, id string) (*convoy.Session, error) {
	after := ""
	for {
		page, err := r.Client.Sessions(ctx, queue, after, 1000)
		if err != nil {
			return nil, r.Err(err)
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

// ---- conversions of API shapes to the library's types ----

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
		Priority: t.Priority, AvailableAt: t.AvailableAt, CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt,
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
			Signal: s.Signal, SignalDefault: []byte(s.SignalDefault), Group: s.Group, FinishSeq: s.FinishSeq,
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
