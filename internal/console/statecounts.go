package console

import (
	"context"
	"sync"
	"time"

	dt "github.com/drover-run/drover/drovertype"
)

// firstCountWait is how long a page waits for the first count: on a
// small store it is done by then and the first page shows it.
const firstCountWait = 100 * time.Millisecond

// stateCountsTTL is how old the overview's counts by state may be before
// a page load starts counting again.
const stateCountsTTL = 30 * time.Second

// refreshed is a value computed off the page's path: computing it reads
// many tasks (a few hundred milliseconds with a million), so a page shows
// the last value, a load finding it older than its TTL starts computing
// it again in the background, and at most one computation of it runs at
// a time.
type refreshed[T any] struct {
	mu        sync.Mutex
	val       T
	at        time.Time     // when val was computed (zero: never)
	computing chan struct{} // closed when the running computation ends (nil: none runs)
}

// get returns the last value, when it was computed and whether there is
// one yet, and starts compute in the background when the value is older
// than ttl and no computation runs. Before the first computation ends it
// waits for it up to firstCountWait. what names the value in the log of
// a failed computation.
func (r *refreshed[T]) get(ctx context.Context, c *Console, ttl time.Duration, what string, compute func(context.Context) (T, error)) (T, time.Time, bool) {
	now := c.clock.Now()
	r.mu.Lock()
	if r.computing == nil && (r.at.IsZero() || now.Sub(r.at) >= ttl) {
		r.computing = make(chan struct{})
		go r.compute(c, now, what, compute, r.computing)
	}
	val, at, computing := r.val, r.at, r.computing
	r.mu.Unlock()
	if !at.IsZero() || computing == nil {
		return val, at, !at.IsZero()
	}
	t := time.NewTimer(firstCountWait)
	defer t.Stop()
	select {
	case <-computing:
	case <-t.C:
	case <-ctx.Done():
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.val, r.at, !r.at.IsZero()
}

func (r *refreshed[T]) compute(c *Console, started time.Time, what string, compute func(context.Context) (T, error), done chan struct{}) {
	defer close(done)
	ctx, cancel := context.WithTimeout(c.streamCtx, c.opts.RequestTimeout)
	defer cancel()
	val, err := compute(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.computing = nil
	if err != nil {
		if c.streamCtx.Err() == nil {
			c.log.Error("console: "+what, "err", err)
		}
		return
	}
	r.val, r.at = val, started
}

// stateCountsNow returns the overview's last counts by state and when
// they were read (nil before the first count ends): a count reads every
// task (no index covers the final states).
func (c *Console) stateCountsNow(ctx context.Context) (map[dt.ProcessState]int, time.Time) {
	counts, at, _ := c.stateCounts.get(ctx, c, stateCountsTTL, "counting tasks by state", c.d.Counts)
	return counts, at
}
