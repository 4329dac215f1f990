package httpapi

import (
	"errors"
	"net/http"
	"time"

	"github.com/drover-run/drover"
	dt "github.com/drover-run/drover/drovertype"
)

// EventAlertAcknowledged is the type of the event that records an
// acknowledgement (drover.EventAlertAcknowledged).
const EventAlertAcknowledged = drover.EventAlertAcknowledged

type alertJSON struct {
	ID        int64     `json:"id"`
	Subject   string    `json:"subject"` // task ID, or "session:<queue>/<session>"
	StepIndex int       `json:"step_index"`
	Type      string    `json:"type"`
	State     string    `json:"state"`
	Actor     string    `json:"actor"`
	Attempt   int       `json:"attempt"`
	Message   string    `json:"message"`
	CreatedAt time.Time `json:"created_at"`
	Ack       *ackJSON  `json:"acknowledged"`
}

type ackJSON struct {
	EventID int64     `json:"event_id"`
	Actor   string    `json:"actor"`
	At      time.Time `json:"at"`
}

func toAlertJSON(e *dt.Event) alertJSON {
	return alertJSON{ID: e.ID, Subject: dt.LocalName(e.TaskID), StepIndex: e.StepIndex, Type: string(e.Type), State: string(e.State),
		Actor: e.Actor, Attempt: e.Attempt, Message: e.Message, CreatedAt: e.CreatedAt}
}

// withAck is an alert's JSON with its acknowledgement.
func withAck(a drover.Alert) alertJSON {
	out := toAlertJSON(a.Event)
	if a.Ack != nil {
		out.Ack = &ackJSON{EventID: a.Ack.EventID, Actor: a.Ack.Actor, At: a.Ack.At}
	}
	return out
}

func (h *Handler) listAlerts(w http.ResponseWriter, r *http.Request) error {
	q, err := queryParams(r, []string{"after", "limit", "unacknowledged"})
	if err != nil {
		return err
	}
	limit, err := parseLimit(q, 100)
	if err != nil {
		return err
	}
	after, err := paramInt(q, "after", 0, 0)
	if err != nil {
		return err
	}
	unacked, err := paramBool(q, "unacknowledged")
	if err != nil {
		return err
	}
	alerts, next, err := h.drover.Alerts(r.Context(), drover.AlertQuery{AfterID: after, Limit: limit, Unacknowledged: unacked, Namespace: h.listNamespace(r)})
	if err != nil {
		return err
	}
	out := struct {
		Alerts    []alertJSON `json:"alerts"`
		NextAfter int64       `json:"next_after"`
	}{Alerts: []alertJSON{}, NextAfter: next}
	for _, a := range alerts {
		out.Alerts = append(out.Alerts, withAck(a))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (h *Handler) ackAlert(w http.ResponseWriter, r *http.Request) error {
	id, err := parseSeq("alert ID", r.PathValue("id"), 1)
	if err != nil {
		return err
	}
	if err := noQuery(r); err != nil {
		return err
	}
	body, err := readBody(r)
	if err != nil {
		return err
	}
	var empty struct{}
	if err := decodeJSON(body, &empty, false); err != nil {
		return err
	}
	a, err := h.drover.AckAlertIn(r.Context(), h.listNamespace(r), id, h.actor(r))
	if errors.Is(err, drover.ErrAlertNotFound) {
		return errorf(http.StatusNotFound, "not_found", "alert %d not found", id)
	}
	if err != nil {
		return err
	}
	out := withAck(a)
	writeJSON(w, http.StatusOK, out)
	return nil
}
