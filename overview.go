package drover

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

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
	return c.store.Reader().TaskFinishedSince(ctx, since, limit)
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
	l, err := c.store.Reader().LeaseGet(ctx, supervisor.LeaseName)
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
