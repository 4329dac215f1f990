package drover

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/drover-run/drover/internal/engine"
	"github.com/drover-run/drover/internal/supervisor"
	"github.com/drover-run/drover/store"
)

// FinishedTask is a task that reached a final state, as Finished returns
// it: its state, when it was submitted and when it finished.
type FinishedTask = store.FinishedTask

// finishedLimit is Finished's default limit.
const finishedLimit = 1000

// Finished returns the tasks that reached a final state (Processed, Error,
// Compensated, Cancelled) at or after since, newest first, at most limit
// (default 1000). It reads the index of final tasks by time, so its cost
// follows limit and not the number of tasks stored; the store is the one
// every process writes, so it counts every process's tasks.
func (c *Client) Finished(ctx context.Context, since time.Time, limit int) ([]FinishedTask, error) {
	if limit <= 0 {
		limit = finishedLimit
	}
	return c.store.Reader().TaskFinishedSince(ctx, &store.TaskFinishedSinceParams{Since: since, Limit: limit})
}

// Leader is the supervisor leader as its lease in the store says.
type Leader struct {
	// Instance is the leader's InstanceID.
	Instance string
	// Term counts the changes of leader: it grows each time another
	// instance takes over.
	Term int64
	// ExpiresAt is when the lease runs out unless the leader renews it.
	ExpiresAt time.Time
	// Live reports whether the lease had not run out when it was read.
	Live bool
}

// SupervisorLeader reads the supervisor lease from the store: the same
// answer whichever process asks, whether or not it runs a supervisor
// itself. Nil when no supervisor ever led on this store.
func (c *Client) SupervisorLeader(ctx context.Context) (*Leader, error) {
	l, err := c.store.Reader().LeaseGet(ctx, &store.LeaseGetParams{Name: supervisor.LeaseName})
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("supervisor lease: %w", err)
	}
	// The engine's supervisor holds the lease as "<InstanceID>/supervisor".
	return &Leader{Instance: strings.TrimSuffix(l.Holder, "/supervisor"), Term: l.Term, ExpiresAt: l.ExpiresAt,
		Live: l.ExpiresAt.After(c.clock.Now())}, nil
}

// Instance is a running Client (a process, or one of several in a
// process) as its instance lease in the store says.
type Instance struct {
	ID string
	// Schedulers is how many schedulers it runs (0: not the scheduler
	// role); Agent and Supervisor report the other roles (Supervisor: it
	// competes for the supervisor lease, not that it leads).
	Schedulers        int
	Agent, Supervisor bool
	// Held is how many tasks its schedulers hold.
	Held int
	// ExpiresAt is when its lease runs out unless renewed (every third
	// of Config.LeaseTTL while it runs).
	ExpiresAt time.Time
}

// Instances lists the live instances on the store, those whose instance
// lease has not run out, by ID, at most limit (default 100), with the
// tasks each one's schedulers hold (counted through the index of held
// tasks). Every process reads the same leases, so any one answers for
// all of them.
func (c *Client) Instances(ctx context.Context, limit int) ([]Instance, error) {
	if limit <= 0 {
		limit = 100
	}
	r := c.store.Reader()
	ls, err := r.LeaseList(ctx, &store.LeaseListParams{Prefix: instancePrefix, Now: c.clock.Now(), Limit: limit})
	if err != nil {
		return nil, err
	}
	out := make([]Instance, 0, len(ls))
	for _, l := range ls {
		in := Instance{ID: strings.TrimPrefix(l.Name, instancePrefix), ExpiresAt: l.ExpiresAt}
		_, roles, _ := strings.Cut(l.Holder, rolesMark)
		for _, role := range strings.Split(roles, ",") {
			switch name, n, _ := strings.Cut(role, ":"); name {
			case "scheduler":
				in.Schedulers, _ = strconv.Atoi(n)
			case "agent":
				in.Agent = true
			case "supervisor":
				in.Supervisor = true
			}
		}
		for _, sched := range in.SchedulerIDs() {
			n, err := r.TaskCountLockedBy(ctx, &store.TaskCountLockedByParams{Instance: sched})
			if err != nil {
				return nil, err
			}
			in.Held += n
		}
		out = append(out, in)
	}
	return out, nil
}

// SchedulerIDs are the names its schedulers hold tasks under (a task's
// LockedBy), as the engine names them.
func (in Instance) SchedulerIDs() []string {
	ids := make([]string, in.Schedulers)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s/scheduler-%d", in.ID, i)
	}
	return ids
}

// HeldTasks lists the tasks (without steps) that schedulers hold with a
// call or compensation in flight, on every instance, soonest deadline
// (CompleteBy) first, at most limit (default 100). It reads the index of
// held tasks in its order, so its cost follows the work in flight, not
// the tasks stored.
func (c *Client) HeldTasks(ctx context.Context, limit int) ([]*Task, error) {
	if limit <= 0 {
		limit = 100
	}
	// Every held task's deadline comes before the end of time.
	return c.store.Reader().TaskListExpired(ctx, &store.TaskListExpiredParams{Now: time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), Limit: limit})
}

// RemoteAgent is a remote agent's poller that polled the HTTP API
// recently, as its presence lease in the store says.
type RemoteAgent struct {
	// Agent is the agent it polls for; Poller who polls (the name of
	// the API token it uses, or "anonymous" on a server without auth).
	Agent, Poller string
	// Server is the InstanceID of the server it polls.
	Server string
	// ExpiresAt is when it counts as gone unless it polls again.
	ExpiresAt time.Time
}

// remoteAgentLimit is RemoteAgents' default limit.
const remoteAgentLimit = 100

// RemoteAgents lists the remote agents' pollers connected to any server
// on the store (a poll within the last minute or so), by agent and
// poller, at most limit (default 100). A server renews a poller's
// presence at most every 20 seconds and keeps it for 90, so a poller
// that stopped stays listed up to 90 seconds.
func (c *Client) RemoteAgents(ctx context.Context, limit int) ([]RemoteAgent, error) {
	if limit <= 0 {
		limit = remoteAgentLimit
	}
	ls, err := c.store.Reader().LeaseList(ctx, &store.LeaseListParams{Prefix: engine.PresencePrefix, Now: c.clock.Now(), Limit: limit})
	if err != nil {
		return nil, err
	}
	out := make([]RemoteAgent, 0, len(ls))
	for _, l := range ls {
		key := strings.TrimPrefix(l.Name, engine.PresencePrefix)
		i := strings.LastIndexByte(key, '/')
		if i < 0 {
			continue
		}
		out = append(out, RemoteAgent{Agent: key[:i], Poller: key[i+1:], Server: l.Holder, ExpiresAt: l.ExpiresAt})
	}
	return out, nil
}
