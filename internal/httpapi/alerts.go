package httpapi

import (
	"errors"
	"net/http"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/droverapi"
	dt "github.com/drover-run/drover/drovertype"
)

// EventAlertAcknowledged is the type of the event that records an
// acknowledgement (drover.EventAlertAcknowledged).
const EventAlertAcknowledged = drover.EventAlertAcknowledged

func toAlertJSON(e *dt.Event) droverapi.Alert {
	return droverapi.Alert{ID: e.ID, Subject: dt.LocalName(e.TaskID), StepIndex: e.StepIndex, Type: string(e.Type), State: string(e.State),
		Actor: e.Actor, Attempt: e.Attempt, Message: e.Message, CreatedAt: e.CreatedAt}
}

// withAck is an alert's JSON with its acknowledgement.
func withAck(a drover.Alert) droverapi.Alert {
	out := toAlertJSON(a.Event)
	if a.Ack != nil {
		out.Acknowledged = &droverapi.Ack{EventID: a.Ack.EventID, Actor: a.Ack.Actor, At: a.Ack.At}
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
	out := droverapi.AlertList{Alerts: []droverapi.Alert{}, NextAfter: next}
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
