package httpapi

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/store"
)

// EventAlertAcknowledged is the type of the event that records an
// acknowledgement; its message is ackPrefix followed by the alert's ID.
const EventAlertAcknowledged dt.EventType = "alert_acknowledged"

const ackPrefix = "acknowledged alert "

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
	return alertJSON{ID: e.ID, Subject: e.TaskID, StepIndex: e.StepIndex, Type: string(e.Type), State: string(e.State),
		Actor: e.Actor, Attempt: e.Attempt, Message: e.Message, CreatedAt: e.CreatedAt}
}

// acks returns the acknowledgements of the alerts given, by alert ID: the
// ack events of each alert's subject after the alert.
func acks(ctx context.Context, x store.Executor, alerts []*dt.Event) (map[int64]*ackJSON, error) {
	out := map[int64]*ackJSON{}
	first := map[string]int64{} // subject → smallest alert ID asked about
	for _, a := range alerts {
		if f, ok := first[a.TaskID]; !ok || a.ID < f {
			first[a.TaskID] = a.ID
		}
	}
	for subject, after := range first {
		for {
			evs, err := x.EventList(ctx, store.EventListParams{TaskID: subject, AfterID: after, Limit: 1000})
			if err != nil {
				return nil, err
			}
			for _, e := range evs {
				if e.Type != EventAlertAcknowledged || !strings.HasPrefix(e.Message, ackPrefix) {
					continue
				}
				id, err := strconv.ParseInt(strings.TrimPrefix(e.Message, ackPrefix), 10, 64)
				if err == nil && out[id] == nil {
					out[id] = &ackJSON{EventID: e.ID, Actor: e.Actor, At: e.CreatedAt}
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

func (h *Handler) listAlerts(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	if err := checkQuery(q, []string{"after", "limit", "unacknowledged"}); err != nil {
		return err
	}
	limit, err := parseLimit(q, 100)
	if err != nil {
		return err
	}
	var after int64
	if s := q.Get("after"); s != "" {
		if after, err = parseSeq("query parameter \"after\"", s, 0); err != nil {
			return err
		}
	}
	unacked := false
	if s := q.Get("unacknowledged"); s != "" {
		if unacked, err = strconv.ParseBool(s); err != nil {
			return badRequest("query parameter \"unacknowledged\": want true or false, got %q", s)
		}
	}
	x := h.drover.Store().Reader()
	out := struct {
		Alerts    []alertJSON `json:"alerts"`
		NextAfter int64       `json:"next_after"`
	}{Alerts: []alertJSON{}}
	// With unacknowledged=true, pages of alerts are read until limit
	// unacknowledged ones are found or the history ends.
	for {
		evs, err := x.EventList(r.Context(), store.EventListParams{AlertsOnly: true, AfterID: after, Limit: limit})
		if err != nil {
			return err
		}
		ack, err := acks(r.Context(), x, evs)
		if err != nil {
			return err
		}
		for _, e := range evs {
			after = e.ID
			if unacked && ack[e.ID] != nil {
				continue
			}
			a := toAlertJSON(e)
			a.Ack = ack[e.ID]
			out.Alerts = append(out.Alerts, a)
			if len(out.Alerts) == limit {
				break
			}
		}
		if len(out.Alerts) == limit {
			out.NextAfter = after
			break
		}
		if len(evs) < limit {
			break
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (h *Handler) ackAlert(w http.ResponseWriter, r *http.Request) error {
	id, err := parseSeq("alert ID", r.PathValue("id"), 1)
	if err != nil {
		return err
	}
	if err := checkQuery(r.URL.Query(), nil); err != nil {
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
	var alert *dt.Event
	var ack *ackJSON
	actor := h.actor(r)
	err = h.drover.Store().InTx(r.Context(), func(ctx context.Context, x store.Executor) error {
		evs, err := x.EventList(ctx, store.EventListParams{AlertsOnly: true, AfterID: id - 1, Limit: 1})
		if err != nil {
			return err
		}
		if len(evs) == 0 || evs[0].ID != id {
			return errorf(http.StatusNotFound, "not_found", "alert %d not found", id)
		}
		alert = evs[0]
		a, err := acks(ctx, x, evs)
		if err != nil {
			return err
		}
		if ack = a[id]; ack != nil {
			return nil // already acknowledged: nothing changes
		}
		now := h.clock.Now().Truncate(time.Microsecond)
		return x.EventInsertMany(ctx, []*dt.Event{{TaskID: alert.TaskID, StepIndex: alert.StepIndex, Type: EventAlertAcknowledged,
			Actor: actor, Message: ackPrefix + strconv.FormatInt(id, 10), CreatedAt: now}})
	})
	if err != nil {
		return err
	}
	if ack == nil {
		a, err := acks(r.Context(), h.drover.Store().Reader(), []*dt.Event{alert})
		if err != nil {
			return err
		}
		ack = a[id]
	}
	out := toAlertJSON(alert)
	out.Ack = ack
	writeJSON(w, http.StatusOK, out)
	return nil
}
