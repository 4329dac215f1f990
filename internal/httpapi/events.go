package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/droverapi"
	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/store"
)

// Defaults of the event-stream Options.
const (
	DefaultHeartbeat  = 15 * time.Second
	DefaultMaxStreams = 100
	// streamWriteTimeout bounds one write to an event stream: a client that
	// stops reading is dropped instead of holding its slot forever. It also
	// replaces the server's WriteTimeout, which would cut every stream.
	streamWriteTimeout = 30 * time.Second
	// streamRetryAfter is the Retry-After (seconds) of a refused stream.
	streamRetryAfter = 5
)

func toEventJSON(e *dt.Event) droverapi.Event {
	return droverapi.Event{ID: e.ID, Subject: dt.LocalName(e.TaskID), StepIndex: e.StepIndex, Type: string(e.Type), State: string(e.State),
		Alert: e.Alert, Actor: e.Actor, Attempt: e.Attempt, Message: e.Message, CreatedAt: e.CreatedAt}
}

// untimedKey holds the request's context before the request timeout: an
// event stream outlives Options.RequestTimeout.
type untimedKey struct{}

// CloseStreams ends every open event stream and refuses new ones (503). The
// HTTP server's Shutdown waits for handlers to return, so call it (or
// SetDraining, which calls it) before or when shutting down; New's caller
// can also pass it to http.Server.RegisterOnShutdown.
func (h *Handler) CloseStreams() { h.stopStreams() }

// OpenStreams returns the number of event streams being served.
func (h *Handler) OpenStreams() int { return int(h.streams.Load()) }

// allEvents serves GET /v1/events.
func (h *Handler) allEvents(w http.ResponseWriter, r *http.Request) error {
	return h.events(w, r, "")
}

// taskEvents serves GET /v1/tasks/{id}/events.
func (h *Handler) taskEvents(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if err := checkName("task ID", id); err != nil {
		return err
	}
	return h.events(w, r, h.qualify(r, id))
}

// events answers an event route: one JSON page of the history when the
// Accept header prefers application/json (wantsJSON), else the stream.
// Errors are JSON errors either way.
func (h *Handler) events(w http.ResponseWriter, r *http.Request, taskID string) error {
	// The answer depends on Accept: a cache must not mix the two.
	w.Header().Add("Vary", "Accept")
	list := wantsJSON(r.Header.Values("Accept"))
	known := []string{"after", "alerts", "limit"}
	if taskID != "" {
		known = append(known, "follow")
	}
	q, err := queryParams(r, known)
	if err != nil {
		return err
	}
	if !list && q.Has("limit") {
		return paramError("limit", "applies only to the JSON list (Accept: application/json), not to the event stream")
	}
	if list && q.Has("follow") {
		return paramError("follow", "applies only to the event stream, not to the JSON list (Accept: application/json)")
	}
	follow, err := paramBool(q, "follow")
	if err != nil {
		return err
	}
	limit := 0
	if list {
		if limit, err = parseLimit(q, defaultEventListLimit); err != nil {
			return err
		}
	}
	after, err := paramInt(q, "after", 0, 0)
	if err != nil {
		return err
	}
	if vs := r.Header.Values("Last-Event-ID"); len(vs) > 0 {
		// The header of a reconnecting client wins over the URL's "after".
		if len(vs) > 1 {
			return badRequest("header Last-Event-ID given %d times", len(vs))
		}
		if after, err = parseSeq("header Last-Event-ID", vs[0], 0); err != nil {
			return err
		}
	}
	alerts, err := paramBool(q, "alerts")
	if err != nil {
		return err
	}
	if taskID != "" {
		t, err := h.drover.Store().Reader().TaskGet(r.Context(), &store.TaskGetParams{ID: taskID})
		if err != nil {
			if errors.Is(err, store.ErrNotFound) {
				return errorf(http.StatusNotFound, "not_found", "task %q not found", dt.LocalName(taskID))
			}
			return err
		}
		if !list && !follow && t.ProcessState.Final() {
			// A client that has every event of a final task (an
			// EventSource reconnecting after the end event) gets 204,
			// which tells it not to reconnect again.
			evs, err := h.drover.Store().Reader().EventList(r.Context(), &store.EventListParams{TaskID: taskID, AlertsOnly: alerts, AfterID: after, Limit: 1})
			if err != nil {
				return err
			}
			if len(evs) == 0 {
				w.WriteHeader(http.StatusNoContent)
				return nil
			}
		}
	}
	if list {
		return h.listEvents(w, r, store.EventListParams{TaskID: taskID, AlertsOnly: alerts, AfterID: after, Limit: limit, Namespace: h.listNamespace(r)})
	}
	return h.streamEvents(w, r, taskID, alerts, after, taskID != "" && !follow)
}

// defaultEventListLimit is the page size of the JSON list without "limit".
const defaultEventListLimit = 100

// listEvents answers one JSON page of the history. It is an ordinary
// request (request timeout, no stream slot).
func (h *Handler) listEvents(w http.ResponseWriter, r *http.Request, p store.EventListParams) error {
	evs, err := h.drover.Store().Reader().EventList(r.Context(), &p)
	if err != nil {
		return err
	}
	out := droverapi.EventList{Events: make([]droverapi.Event, 0, len(evs))}
	for _, e := range evs {
		out.Events = append(out.Events, toEventJSON(e))
	}
	if len(evs) == p.Limit {
		out.NextAfter = evs[len(evs)-1].ID
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// wantsJSON tells whether an Accept header (its values) prefers
// application/json to text/event-stream: a higher q-value, or the same
// non-zero q-value from a more specific media range ("application/json"
// or "application/*" against "*/*"). No Accept header, "*/*" or a tie
// keeps the event stream, the routes' historic answer. Malformed
// elements are ignored.
func wantsJSON(accept []string) bool {
	jq, js := acceptQ(accept, "application", "json")
	sq, ss := acceptQ(accept, "text", "event-stream")
	return jq > sq || (jq == sq && jq > 0 && js > ss)
}

// acceptQ returns the q-value the Accept header values give the media type
// typ/sub, from its most specific matching range, and that range's
// specificity (3 exact, 2 typ/*, 1 */*, 0 none matches: q 0).
func acceptQ(accept []string, typ, sub string) (q float64, spec int) {
	for _, v := range accept {
		for _, el := range strings.Split(v, ",") {
			el = strings.TrimSpace(el)
			if el == "" {
				continue
			}
			mt, params, err := mime.ParseMediaType(el)
			if err != nil {
				continue
			}
			t, s, ok := strings.Cut(mt, "/")
			if !ok {
				continue
			}
			n := 0
			switch {
			case t == typ && s == sub:
				n = 3
			case t == typ && s == "*":
				n = 2
			case t == "*" && s == "*":
				n = 1
			default:
				continue
			}
			w := 1.0
			if qs, ok := params["q"]; ok {
				f, err := strconv.ParseFloat(qs, 64)
				if err != nil || f < 0 || f > 1 {
					continue
				}
				w = f
			}
			// The most specific range decides (RFC 9110, 12.5.1); among
			// equally specific ones, the highest q.
			if n > spec || (n == spec && w > q) {
				q, spec = w, n
			}
		}
	}
	return q, spec
}

// streamEvents answers with a text/event-stream of the history's events
// after event ID after, then of new events as they are recorded, until
// the client goes away or the streams are closed, or, with untilFinal,
// the task is final: then an "end" event closes the stream. Errors before
// the stream starts are JSON errors.
func (h *Handler) streamEvents(w http.ResponseWriter, r *http.Request, taskID string, alerts bool, after int64, untilFinal bool) error {
	release, err := h.hold(w, r, holdStream)
	if err != nil {
		return err
	}
	defer release()

	// The stream lives as long as the request (without the request
	// timeout) and until CloseStreams.
	ctx, cancel := context.WithCancel(untimedContext(r))
	defer cancel()
	stop := context.AfterFunc(h.streamCtx, cancel)
	defer stop()

	rc := http.NewResponseController(w)
	// Neither the server's ReadTimeout nor its WriteTimeout may cut the
	// stream: no read deadline, and a write deadline per write.
	_ = rc.SetReadDeadline(time.Time{})
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("X-Accel-Buffering", "no") // nginx: do not buffer
	w.WriteHeader(http.StatusOK)
	write := func(b []byte) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout)) // unsupported by some writers
		if _, err := w.Write(b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !write([]byte(": connected\n\n")) {
		return nil
	}
	events := h.drover.Subscribe(ctx, drover.Subscription{TaskID: taskID, AlertsOnly: alerts, AfterID: after,
		PollInterval: h.opts.EventPollInterval, UntilFinal: untilFinal, Namespace: h.listNamespace(r)})
	tick := time.NewTicker(h.opts.Heartbeat)
	defer tick.Stop()
	last := after
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-events:
			if !ok {
				if untilFinal && ctx.Err() == nil {
					h.writeEnd(ctx, write, taskID)
				}
				return nil
			}
			if e.ID <= last {
				continue // never twice on one stream
			}
			data, err := json.Marshal(toEventJSON(e))
			if err != nil {
				return nil
			}
			if !write(fmt.Appendf(nil, "id: %d\nevent: %s\ndata: %s\n\n", e.ID, e.Type, data)) {
				return nil
			}
			last = e.ID
		case <-tick.C:
			if !write([]byte(": ping\n\n")) {
				return nil
			}
		}
	}
}

// writeEnd sends the "end" event of a task stream whose task is final. It
// has no id: a client resuming with the last event's ID gets 204.
func (h *Handler) writeEnd(ctx context.Context, write func([]byte) bool, taskID string) {
	end := droverapi.End{Subject: dt.LocalName(taskID)}
	if t, err := h.drover.Store().Reader().TaskGet(ctx, &store.TaskGetParams{ID: taskID}); err == nil {
		end.State = string(t.ProcessState)
	}
	data, err := json.Marshal(end)
	if err != nil {
		return
	}
	write(fmt.Appendf(nil, "event: end\ndata: %s\n\n", data))
}
