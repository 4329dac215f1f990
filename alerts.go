package drover

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/notifier"
	"github.com/drover-run/drover/store"
)

// EventAlertAcknowledged records an operator's acknowledgement of an alert,
// on the alert's subject (the task, or "session:<queue>/<session>"), with
// the message "acknowledged alert <alert event ID>".
const EventAlertAcknowledged EventType = "alert_acknowledged"

// ackPrefix starts the message of an acknowledgement event.
const ackPrefix = "acknowledged alert "

// ErrAlertNotFound: no alert has the ID given.
var ErrAlertNotFound = errors.New("alert not found")

// AlertAck is an operator's acknowledgement of an alert.
type AlertAck struct {
	EventID int64 // the acknowledgement's event
	Actor   string
	At      time.Time
}

// Alert is an operator alert (an event with Alert set) and its first
// acknowledgement, nil while unacknowledged.
type Alert struct {
	*Event
	Ack *AlertAck
}

// AlertQuery pages the operator alerts.
type AlertQuery struct {
	AfterID        int64 // alerts with a greater event ID
	Limit          int   // default 100
	Unacknowledged bool  // leave out acknowledged alerts
	// Namespace, when set, reads only that namespace's alerts
	// (drovertype.DefaultNamespace: the default one's). Default "": all.
	Namespace string
}

// Alerts returns up to q.Limit alerts in ID order, with their
// acknowledgements, and the AfterID of the next page (0 when this one is
// the last). With Unacknowledged, pages of the history are read until
// Limit unacknowledged alerts are found or the history ends.
func (c *Client) Alerts(ctx context.Context, q AlertQuery) (alerts []Alert, next int64, err error) {
	if q.Limit <= 0 {
		q.Limit = 100
	}
	if err := checkListNamespace(q.Namespace); err != nil {
		return nil, 0, err
	}
	x := c.store.Reader()
	after := q.AfterID
	for {
		evs, err := x.EventList(ctx, &store.EventListParams{AlertsOnly: true, AfterID: after, Limit: q.Limit, Namespace: q.Namespace})
		if err != nil {
			return nil, 0, err
		}
		acks, err := alertAcks(ctx, x, evs)
		if err != nil {
			return nil, 0, err
		}
		for _, e := range evs {
			after = e.ID
			if q.Unacknowledged && acks[e.ID] != nil {
				continue
			}
			if alerts = append(alerts, Alert{Event: e, Ack: acks[e.ID]}); len(alerts) == q.Limit {
				return alerts, after, nil
			}
		}
		if len(evs) < q.Limit {
			return alerts, 0, nil
		}
	}
}

// AckAlert acknowledges alert id as actor, recorded in the history as an
// EventAlertAcknowledged event. Acknowledging again changes nothing: the
// alert is returned with its first acknowledgement. An unknown ID fails
// with ErrAlertNotFound.
func (c *Client) AckAlert(ctx context.Context, id int64, actor string) (Alert, error) {
	return c.AckAlertIn(ctx, "", id, actor)
}

// AckAlertIn is AckAlert of an alert of the namespace ns (as in
// AlertQuery.Namespace; "": any namespace): another namespace's alert
// fails with ErrAlertNotFound, as an unknown ID does.
func (c *Client) AckAlertIn(ctx context.Context, ns string, id int64, actor string) (Alert, error) {
	var a Alert
	if err := dt.CheckText(ErrInvalidInput, "actor", actor, 0); err != nil {
		return a, err
	}
	if err := checkListNamespace(ns); err != nil {
		return a, err
	}
	err := c.store.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		evs, err := x.EventList(ctx, &store.EventListParams{AlertsOnly: true, AfterID: id - 1, Limit: 1, Lookup: true, Namespace: ns})
		if err != nil {
			return err
		}
		if len(evs) == 0 || evs[0].ID != id {
			return fmt.Errorf("alert %d: %w", id, ErrAlertNotFound)
		}
		a.Event = evs[0]
		acks, err := alertAcks(ctx, x, evs)
		if err != nil || acks[id] != nil {
			a.Ack = acks[id]
			return err // already acknowledged: nothing changes
		}
		return notifier.InsertEvents(ctx, x, []*dt.Event{{TaskID: a.TaskID, StepIndex: a.StepIndex, Type: EventAlertAcknowledged,
			Actor: actor, Message: ackPrefix + strconv.FormatInt(id, 10), CreatedAt: c.clock.Now().Truncate(time.Microsecond)}})
	})
	if err != nil || a.Ack != nil {
		return a, err
	}
	acks, err := alertAcks(ctx, c.store.Reader(), []*dt.Event{a.Event})
	a.Ack = acks[id]
	return a, err
}

// alertAcks returns the acknowledgements of alerts by alert ID: the
// acknowledgement events of each alert's subject after it.
func alertAcks(ctx context.Context, x store.Executor, alerts []*dt.Event) (map[int64]*AlertAck, error) {
	out := map[int64]*AlertAck{}
	first := map[string]int64{} // subject → smallest alert ID asked about
	for _, a := range alerts {
		if f, ok := first[a.TaskID]; !ok || a.ID < f {
			first[a.TaskID] = a.ID
		}
	}
	for subject, after := range first {
		for {
			evs, err := x.EventList(ctx, &store.EventListParams{TaskID: subject, AfterID: after, Limit: 1000, Lookup: true})
			if err != nil {
				return nil, err
			}
			for _, e := range evs {
				if e.Type != EventAlertAcknowledged || !strings.HasPrefix(e.Message, ackPrefix) {
					continue
				}
				if id, err := strconv.ParseInt(strings.TrimPrefix(e.Message, ackPrefix), 10, 64); err == nil && out[id] == nil {
					out[id] = &AlertAck{EventID: e.ID, Actor: e.Actor, At: e.CreatedAt}
				}
			}
			if len(evs) < 1000 {
				break
			}
			after = evs[len(evs)-1].ID
		}
	}
	return out, nil
}
