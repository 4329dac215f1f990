package drover

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/drover-run/drover/internal/flow"
	"github.com/drover-run/drover/store"
)

// Group commit of Submit. Every transaction costs a commit (a WAL flush on
// PostgreSQL, an fsync on SQLite) and a fixed amount of work per statement,
// so Submit calls made at the same time by different goroutines of one
// process share a transaction: while one group commits, the calls that
// arrive queue up and go together in the next. A lone call still commits at
// once. A group that fails is not the failure of every call in it: each
// call then runs again in a transaction of its own, so it gets its own
// outcome (ErrTaskConflict for one does not fail the others).

const (
	// maxGroupCalls and maxGroupInputBytes cap one group's transaction.
	maxGroupCalls      = 512
	maxGroupInputBytes = 4 << 20
)

// submitCall is one Submit waiting for its group's commit.
type submitCall struct {
	ctx  context.Context
	sub  flow.Submission
	task *Task
	err  error
	done chan struct{}
}

// submitGroups queues Submit calls and commits them in groups.
type submitGroups struct {
	mu      sync.Mutex
	queue   []*submitCall
	running bool // a goroutine is committing groups
}

// submitOne submits one prepared task through the group commit.
func (c *Client) submitOne(ctx context.Context, sub flow.Submission) (*Task, error) {
	call := &submitCall{ctx: ctx, sub: sub, done: make(chan struct{})}
	g := &c.groups
	g.mu.Lock()
	g.queue = append(g.queue, call)
	if !g.running {
		g.running = true
		go c.commitGroups()
	}
	g.mu.Unlock()
	select {
	case <-call.done:
		return call.task, call.err
	case <-ctx.Done():
		// The group may still commit this task; as with any cancelled
		// call, the caller cannot tell (a resubmit with the same ID is
		// the idempotent way to find out).
		return nil, ctx.Err()
	}
}

// commitGroups commits queued calls, a group per transaction, until the
// queue is empty.
func (c *Client) commitGroups() {
	g := &c.groups
	for {
		g.mu.Lock()
		n, bytes := 0, 0
		for n < len(g.queue) && n < maxGroupCalls {
			bytes += len(g.queue[n].sub.Task.Input)
			if n > 0 && bytes > maxGroupInputBytes {
				break
			}
			n++
		}
		if n == 0 {
			g.running = false
			g.mu.Unlock()
			return
		}
		group := g.queue[:n:n]
		g.queue = g.queue[n:]
		if len(g.queue) == 0 {
			g.queue = nil // let the old backing array go
		}
		g.mu.Unlock()
		c.commitGroup(group)
	}
}

// commitGroup runs one group's transaction; if it fails, every call runs
// alone so each gets its own result.
func (c *Client) commitGroup(group []*submitCall) {
	live := group[:0:0]
	for _, call := range group {
		if err := call.ctx.Err(); err != nil {
			call.err = err
			close(call.done)
			continue
		}
		live = append(live, call)
	}
	if len(live) == 0 {
		return
	}
	if len(live) > 1 {
		subs := make([]flow.Submission, len(live))
		for i, call := range live {
			subs[i] = call.sub
		}
		ctx, stop := groupContext(live)
		var out []*Task
		err := c.store.InTx(ctx, func(ctx context.Context, x store.Executor) error {
			var err error
			out, err = flow.Submit(ctx, x, subs)
			return err
		})
		stop()
		if err == nil {
			c.wakeSchedulers()
			for i, call := range live {
				call.task = out[i]
				close(call.done)
			}
			return
		}
	}
	for _, call := range live {
		call.task, call.err = c.submitAlone(call.ctx, call.sub)
		close(call.done)
	}
}

// submitAlone submits one task in its own transaction.
func (c *Client) submitAlone(ctx context.Context, sub flow.Submission) (*Task, error) {
	var out []*Task
	err := c.store.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		var err error
		out, err = flow.Submit(ctx, x, []flow.Submission{sub})
		return err
	})
	if err != nil {
		return nil, err
	}
	c.wakeSchedulers()
	return out[0], nil
}

// groupContext returns a context for a group's transaction that keeps the
// first call's values and is cancelled only once every call in the group
// has been cancelled: one caller giving up must not abort the others'
// submissions.
func groupContext(calls []*submitCall) (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(calls[0].ctx))
	var left atomic.Int64
	left.Store(int64(len(calls)))
	stops := make([]func() bool, len(calls))
	for i, call := range calls {
		stops[i] = context.AfterFunc(call.ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}
