package httpapi

import (
	"net/http"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/droverapi"
)

// Schedules are the server's own configuration and submit their tasks in
// the default namespace: they are objects of the default namespace, which
// a request in another one does not see (an empty list, 404).

// ScheduleJSON is a schedule in the API's shape (the CLI prints the same).
func ScheduleJSON(s *drover.ScheduleState) droverapi.Schedule {
	out := droverapi.Schedule{Name: s.Name, Workflow: s.Workflow, Input: s.Input, Cron: s.Cron, TimeZone: s.TimeZone,
		EverySeconds: int64(s.Every / time.Second), CatchUp: string(s.CatchUp), Paused: s.Paused, NextDue: s.NextDue,
		LastDue: s.LastDue, LastTask: s.LastTask, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt}
	if out.NextDue == nil {
		out.NextDue = []time.Time{}
	}
	return out
}

// scheduleNotFound is the answer for a schedule the request cannot see.
func scheduleNotFound(name string) error {
	return errorf(http.StatusNotFound, "not_found", "schedule %q not found", name)
}

func (h *Handler) listSchedules(w http.ResponseWriter, r *http.Request) error {
	if err := noQuery(r); err != nil {
		return err
	}
	out := droverapi.ScheduleList{Schedules: []droverapi.Schedule{}}
	if h.ns(r) == "" {
		ss, err := h.drover.Schedules(r.Context())
		if err != nil {
			return err
		}
		for i := range ss {
			out.Schedules = append(out.Schedules, ScheduleJSON(&ss[i]))
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (h *Handler) getSchedule(w http.ResponseWriter, r *http.Request) error {
	name, err := namedPath(r, "name", "schedule name")
	if err != nil {
		return err
	}
	if h.ns(r) != "" {
		return scheduleNotFound(name)
	}
	s, err := h.drover.GetSchedule(r.Context(), name)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, ScheduleJSON(s))
	return nil
}

// scheduleOfAction is the schedule named in the path of a change that
// takes no body (an empty one, or {}), checked to be the request's to see.
func (h *Handler) scheduleOfAction(r *http.Request) (string, error) {
	name, body, err := namedBody(r, "name", "schedule name")
	if err != nil {
		return "", err
	}
	var empty struct{}
	if err := decodeJSON(body, &empty, false); err != nil {
		return "", err
	}
	if h.ns(r) != "" {
		return "", scheduleNotFound(name)
	}
	return name, nil
}

// changeSchedule is pause and resume: an empty body, the schedule as it
// is afterwards.
func (h *Handler) changeSchedule(change func(*drover.Client, *http.Request, string) (*drover.ScheduleState, error)) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		name, err := h.scheduleOfAction(r)
		if err != nil {
			return err
		}
		s, err := change(h.drover, r, name)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, ScheduleJSON(s))
		return nil
	}
}

func (h *Handler) pauseSchedule(w http.ResponseWriter, r *http.Request) error {
	return h.changeSchedule(func(c *drover.Client, r *http.Request, name string) (*drover.ScheduleState, error) {
		return c.PauseSchedule(r.Context(), name)
	})(w, r)
}

func (h *Handler) resumeSchedule(w http.ResponseWriter, r *http.Request) error {
	return h.changeSchedule(func(c *drover.Client, r *http.Request, name string) (*drover.ScheduleState, error) {
		return c.ResumeSchedule(r.Context(), name)
	})(w, r)
}

// deleteSchedule deletes a stored schedule: 204. One the server itself
// defines is 409 (wrong_state): it would store it again.
func (h *Handler) deleteSchedule(w http.ResponseWriter, r *http.Request) error {
	name, err := h.scheduleOfAction(r)
	if err != nil {
		return err
	}
	if err := h.drover.DeleteSchedule(r.Context(), name); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// runSchedule submits the schedule's task now: 201 with the task.
func (h *Handler) runSchedule(w http.ResponseWriter, r *http.Request) error {
	name, body, err := namedBody(r, "name", "schedule name")
	if err != nil {
		return err
	}
	var req droverapi.RunScheduleRequest
	if err := decodeJSON(body, &req, false); err != nil {
		return err
	}
	if h.ns(r) != "" {
		return scheduleNotFound(name)
	}
	t, err := h.drover.RunScheduleNow(r.Context(), name, req.ID)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, h.taskView(r, t))
	return nil
}
