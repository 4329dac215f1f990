package drover

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/drover-run/drover/internal/engine"
	"github.com/drover-run/drover/internal/flow"
	"github.com/drover-run/drover/store"
)

// Group commit of Submit. Every transaction costs a commit (a WAL flush on
// PostgreSQL, an fsync on SQLite) and a fixed amount of work per statement,
// so Submit calls made at the same time by different goroutines of one
// process share a transaction: while groups commit, the calls that arrive
// queue up and go together in the next. A lone call still commits at once.
//
// A group is not a unit of failure: if its transaction fails, each of its
// calls runs again alone (concurrently), so each gets its own outcome
// (ErrTaskConflict for one does not fail the others). A call whose context
// ends while it waits in the queue leaves the queue and is not submitted;
// one whose context ends while its group's transaction runs cancels that
// transaction, and the others in the group then run alone, so a cancelled
// call's task commits only if the commit had already happened.

const (
	// maxGroupCalls and maxGroupInputBytes cap one group's transaction.
	maxGroupCalls      = 512
	maxGroupInputBytes = 4 << 20
	// maxGroupsInFlight caps the group transactions running at once, so a
	// group waiting on a lock (an ordering key another transaction holds,
	// say) does not hold up every other Submit of the process.
	maxGroupsInFlight = 4
)

// submitCall is one Submit waiting for its group's commit.
type submitCall struct {
	ctx  context.Context
	sub  flow.Submission
	task *Task
	err  error
	pan  any // a panic of the group's transaction, re-raised in the caller
	done chan struct{}
}

// submitGroups queues Submit calls and commits them in groups.
type submitGroups struct {
	mu      sync.Mutex
	queue   []*submitCall
	running int // goroutines committing groups
}

// submitOne submits one prepared task through the group commit.
func (c *Client) submitOne(ctx context.Context, sub flow.Submission) (*Task, error) {
	call := &submitCall{ctx: ctx, sub: sub, done: make(chan struct{})}
	g := &c.groups
	g.mu.Lock()
	g.queue = append(g.queue, call)
	if g.running < maxGroupsInFlight {
		g.running++
		go c.commitGroups()
	}
	g.mu.Unlock()
	select {
	case <-call.done:
	case <-ctx.Done():
		g.mu.Lock()
		for i, q := range g.queue {
			if q == call { // still queued: leave, nothing was sent
				g.queue = append(g.queue[:i:i], g.queue[i+1:]...)
				g.mu.Unlock()
				return nil, ctx.Err()
			}
		}
		g.mu.Unlock()
		// Taken by a group, whose transaction this cancels (see
		// groupContext): wait for the real outcome, which comes soon.
		<-call.done
	}
	if call.pan != nil {
		panic(call.pan)
	}
	return call.task, call.err
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
			g.running--
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
	if len(group) > 1 {
		out, err := c.submitTogether(group)
		if err == nil {
			given := map[*Task]bool{}
			for i, call := range group {
				t := out[i]
				if given[t] { // the same ID twice in the group: each caller its own copy
					t = cloneTask(t)
				}
				given[t] = true
				call.task = t
				close(call.done)
			}
			return
		}
	}
	var wg sync.WaitGroup
	for _, call := range group {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(call.done)
			defer func() { call.pan = recover() }()
			call.task, call.err = c.submitAlone(call.ctx, call.sub)
		}()
	}
	wg.Wait()
}

// submitTogether submits the group's tasks in one transaction. A panic
// inside it is handed to every caller (and the group reruns alone, where
// it is raised again in each caller's goroutine).
func (c *Client) submitTogether(group []*submitCall) (out []*Task, err error) {
	defer func() {
		if p := recover(); p != nil {
			out, err = nil, fmt.Errorf("panic: %v", p)
		}
	}()
	subs := make([]flow.Submission, len(group))
	for i, call := range group {
		subs[i] = call.sub
	}
	ctx, stop := groupContext(group)
	defer stop()
	return c.submitInTx(ctx, subs)
}

// submitInTx submits in one transaction of drover's own, starting the new
// tasks when a scheduler of this process has room (see Config.NoEagerStart).
func (c *Client) submitInTx(ctx context.Context, subs []flow.Submission) (out []*Task, err error) {
	// Room only for the tasks that can start: a keyed one waits for a
	// claim, and its transaction may wait for the key meanwhile.
	n := 0
	for _, sub := range subs {
		if sub.Task.OrderingKey == "" {
			n++
		}
	}
	if start := c.beginStart(n); start != nil {
		defer start.Abort() // the transaction failed or panicked; no-op after Commit
		err = c.store.InTx(ctx, func(ctx context.Context, x store.Executor) error {
			// The transaction may run again: give back what the last try reserved.
			start.Retry()
			var err error
			out, err = flow.SubmitAndStart(ctx, x, subs, start.Flow)
			return err
		})
		if err != nil && (errors.Is(err, errInstanceLost) || errors.Is(err, store.ErrLeaseNotHeld)) {
			// The process is losing its instance lease (its roles are about
			// to stop): submit without starting, for the claims of whoever
			// holds the lease next, or of other processes. The deferred
			// Abort returns what this try reserved.
			return c.submitInTxPlain(ctx, subs)
		}
		if err != nil {
			return nil, err
		}
		start.Commit()
		c.wakeForPending(out)
		return out, nil
	}
	return c.submitInTxPlain(ctx, subs)
}

func (c *Client) submitInTxPlain(ctx context.Context, subs []flow.Submission) ([]*Task, error) {
	var out []*Task
	err := c.store.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		var err error
		out, err = flow.Submit(ctx, x, subs)
		return err
	})
	if err != nil {
		return nil, err
	}
	c.wakeSchedulers()
	return out, nil
}

// beginStart reserves room for a Submit transaction of n tasks on a
// scheduler of this process (engine.Engine.BeginStart), or returns nil:
// eager start is off, the process runs no scheduler, or none has room.
func (c *Client) beginStart(n int) *engine.Start {
	if c.cfg.NoEagerStart {
		return nil
	}
	if e := c.runningEngine(); e != nil {
		return e.BeginStart(n)
	}
	return nil
}

// wakeForPending wakes a scheduler if a submitted task waits for a claim.
func (c *Client) wakeForPending(tasks []*Task) {
	for _, t := range tasks {
		if t.ProcessState == Pending {
			c.wakeSchedulers()
			return
		}
	}
}

// submitAlone submits one task in its own transaction.
func (c *Client) submitAlone(ctx context.Context, sub flow.Submission) (*Task, error) {
	out, err := c.submitInTx(ctx, []flow.Submission{sub})
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

// groupContext returns a context for a group's transaction that keeps the
// first call's values and is cancelled as soon as any call in the group is:
// the transaction then rolls back and the others run alone, so a cancelled
// call is not submitted behind its caller's back.
func groupContext(calls []*submitCall) (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(calls[0].ctx))
	stops := make([]func() bool, len(calls))
	for i, call := range calls {
		stops[i] = context.AfterFunc(call.ctx, cancel)
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}

// cloneTask copies a task so two callers never share one.
func cloneTask(t *Task) *Task {
	c := *t
	c.Input, c.Output = bytes.Clone(t.Input), bytes.Clone(t.Output)
	if t.CompleteBy != nil {
		at := *t.CompleteBy
		c.CompleteBy = &at
	}
	return &c
}
