package console

import (
	"context"
	"fmt"
	"net/http"

	"github.com/drover-run/drover"
	dt "github.com/drover-run/drover/drovertype"
)

// The Schedules page: the recurring schedules, their next due times and
// last task, with pause, resume and run now for operators, and delete for
// those stored that this server's configuration no longer defines (gone
// from its workflow files, say). Schedules are
// the server's configuration and submit in the default namespace: a
// viewer in another namespace sees none (as the HTTP API answers).

// schedulesData is the Schedules page.
type schedulesData struct {
	Schedules []drover.ScheduleState
	// Undefined are the stored schedules this server does not define.
	Undefined map[string]bool
	// Elsewhere: the viewer is in a namespace other than the default one.
	Elsewhere bool
}

func (c *Console) schedules(ctx context.Context, _ *http.Request, v *viewer) (string, string, any, error) {
	d := &schedulesData{Elsewhere: v.id.ListNamespace() != dt.DefaultNamespace}
	if !d.Elsewhere {
		var err error
		if d.Schedules, err = c.d.Schedules(ctx); err != nil {
			return "", "", nil, err
		}
		d.Undefined = map[string]bool{}
		for _, s := range d.Schedules {
			if !c.d.DefinesSchedule(s.Name) {
				d.Undefined[s.Name] = true
			}
		}
	}
	return "schedules", "Schedules", d, nil
}

// scheduleOfPath is the schedule the path names, one the viewer can see:
// schedules are objects of the default namespace.
func scheduleOfPath(r *http.Request, v *viewer) (string, error) {
	name := r.PathValue("name")
	if v.id.ListNamespace() != dt.DefaultNamespace {
		return "", fmt.Errorf("%w: %q", drover.ErrScheduleNotFound, name)
	}
	return name, nil
}

// confirmScheduleData is the page that asks before a schedule is deleted.
type confirmScheduleData struct {
	Schedule *drover.ScheduleState
	What     string
}

// confirmScheduleDelete asks before a stored schedule is deleted.
func (c *Console) confirmScheduleDelete(ctx context.Context, r *http.Request, v *viewer) (string, string, any, error) {
	name, err := scheduleOfPath(r, v)
	if err != nil {
		return "", "", nil, err
	}
	s, err := c.d.GetSchedule(ctx, name)
	if err != nil {
		return "", "", nil, err
	}
	if c.d.DefinesSchedule(name) {
		return "", "", nil, fmt.Errorf("%w: %q is in the configuration of this server; remove it there first", drover.ErrScheduleDefined, name)
	}
	what := "The schedule is deleted from the database: it fires no more and is no longer listed; the tasks it submitted stay. " +
		"This server does not define it, but another process may: one that still does stores it again, as a new schedule " +
		"(when it starts, or within about a minute if it fires the schedules)."
	return "confirm_schedule_delete", "Delete schedule " + name, &confirmScheduleData{Schedule: s, What: what}, nil
}

// scheduleAction is pause, resume, run or delete of the schedule of the
// path.
func (c *Console) scheduleAction(ctx context.Context, r *http.Request, v *viewer) (string, string, error) {
	name, err := scheduleOfPath(r, v)
	if err != nil {
		return "", "", err
	}
	switch r.PathValue("action") {
	case "pause":
		if _, err := c.d.PauseSchedule(ctx, name); err != nil {
			return "", "", err
		}
		return "/schedules", fmt.Sprintf("Schedule %s paused.", name), nil
	case "resume":
		if _, err := c.d.ResumeSchedule(ctx, name); err != nil {
			return "", "", err
		}
		return "/schedules", fmt.Sprintf("Schedule %s resumed.", name), nil
	case "run":
		t, err := c.d.RunScheduleNow(ctx, name, "")
		if err != nil {
			return "", "", err
		}
		return "/schedules", fmt.Sprintf("Schedule %s ran now: task %s.", name, t.ID), nil
	case "delete":
		if err := c.d.DeleteSchedule(ctx, name); err != nil {
			return "", "", err
		}
		return "/schedules", fmt.Sprintf("Schedule %s deleted.", name), nil
	}
	return "", "", fmt.Errorf("%w: no schedule action %q", drover.ErrInvalidInput, r.PathValue("action"))
}
