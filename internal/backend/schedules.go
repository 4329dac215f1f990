package backend

import (
	"context"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/droverapi"
	"github.com/drover-run/drover/internal/clicore"
	"github.com/drover-run/drover/internal/httpapi"
)

// Schedules is where the schedule commands read and change recurring
// schedules: the store through a drover.Client, or a server's HTTP API.
// Schedules come back in the API's shape, so both paths print the same.
type Schedules interface {
	List(ctx context.Context) ([]droverapi.Schedule, error)
	Get(ctx context.Context, name string) (*droverapi.Schedule, error)
	Pause(ctx context.Context, name string) (*droverapi.Schedule, error)
	Resume(ctx context.Context, name string) (*droverapi.Schedule, error)
	// Delete deletes a stored schedule.
	Delete(ctx context.Context, name string) error
	// Run submits the schedule's task now, with task ID id ("": a new one).
	Run(ctx context.Context, name, id string) (*drover.Task, error)
	Close()
}

// OpenSchedules opens the backend of the schedule commands: remote when
// remote is not nil, else the store of env's --db, which must be migrated.
func OpenSchedules(ctx context.Context, env *clicore.Env, remote *Remote) (Schedules, error) {
	if remote != nil {
		return &remoteSchedules{remote}, nil
	}
	drv, err := env.OpenStore(ctx, clicore.OpenOpts{LockTimeout: true})
	if err != nil {
		return nil, err
	}
	c, err := drover.New(drover.Config{Store: drv.Driver})
	if err != nil {
		drv.Close()
		return nil, err
	}
	return &localSchedules{env: env, drv: drv, c: c}, nil
}

// localSchedules runs the schedule commands on the store.
type localSchedules struct {
	env *clicore.Env
	drv *clicore.Database
	c   *drover.Client
}

func (l *localSchedules) Close() { l.drv.Close() }

func (l *localSchedules) List(ctx context.Context) ([]droverapi.Schedule, error) {
	ss, err := l.c.Schedules(ctx)
	if err != nil {
		return nil, l.drv.StoreErr(err)
	}
	out := make([]droverapi.Schedule, len(ss))
	for i := range ss {
		out[i] = httpapi.ScheduleJSON(&ss[i])
	}
	return out, nil
}

func (l *localSchedules) change(s *drover.ScheduleState, err error) (*droverapi.Schedule, error) {
	if err != nil {
		return nil, l.drv.StoreErr(err)
	}
	out := httpapi.ScheduleJSON(s)
	return &out, nil
}

func (l *localSchedules) Get(ctx context.Context, name string) (*droverapi.Schedule, error) {
	return l.change(l.c.GetSchedule(ctx, name))
}

func (l *localSchedules) Pause(ctx context.Context, name string) (*droverapi.Schedule, error) {
	return l.change(l.c.PauseSchedule(ctx, name))
}

func (l *localSchedules) Resume(ctx context.Context, name string) (*droverapi.Schedule, error) {
	return l.change(l.c.ResumeSchedule(ctx, name))
}

func (l *localSchedules) Delete(ctx context.Context, name string) error {
	return l.drv.StoreErr(l.c.DeleteSchedule(ctx, name))
}

// Run submits with a client that knows the schedule's workflow (as
// "drover submit" does: a stored declarative workflow, or the demo's).
func (l *localSchedules) Run(ctx context.Context, name, id string) (*drover.Task, error) {
	s, err := l.c.GetSchedule(ctx, name)
	if err != nil {
		return nil, l.drv.StoreErr(err)
	}
	c, err := submitClient(ctx, l.env, l.drv, s.Workflow, 0, 0)
	if err != nil {
		return nil, err
	}
	t, err := c.RunScheduleNow(ctx, name, id)
	if err != nil {
		return nil, l.drv.StoreErr(err)
	}
	return t, nil
}

// remoteSchedules runs the schedule commands over the HTTP API.
type remoteSchedules struct{ r *Remote }

func (r *remoteSchedules) Close() {}

func (r *remoteSchedules) List(ctx context.Context) ([]droverapi.Schedule, error) {
	ss, err := r.r.Client.Schedules(ctx)
	return ss, r.r.Err(err)
}

func (r *remoteSchedules) Get(ctx context.Context, name string) (*droverapi.Schedule, error) {
	s, err := r.r.Client.Schedule(ctx, name)
	return s, r.r.Err(err)
}

func (r *remoteSchedules) Pause(ctx context.Context, name string) (*droverapi.Schedule, error) {
	s, err := r.r.Client.PauseSchedule(ctx, name)
	return s, r.r.Err(err)
}

func (r *remoteSchedules) Resume(ctx context.Context, name string) (*droverapi.Schedule, error) {
	s, err := r.r.Client.ResumeSchedule(ctx, name)
	return s, r.r.Err(err)
}

func (r *remoteSchedules) Delete(ctx context.Context, name string) error {
	return r.r.Err(r.r.Client.DeleteSchedule(ctx, name))
}

func (r *remoteSchedules) Run(ctx context.Context, name, id string) (*drover.Task, error) {
	t, err := r.r.Client.RunSchedule(ctx, name, id)
	if err != nil {
		return nil, r.r.Err(err)
	}
	return remoteTask(t), nil
}
