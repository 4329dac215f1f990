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

// stateCounts are the counts of tasks by state, counted off the page's
// path: a count reads every task (no index covers the final states), a
// few hundred milliseconds with a million tasks, so a page shows the
// last counts and at most one count per process runs at a time.
type stateCounts struct {
	mu       sync.Mutex
	counts   map[dt.ProcessState]int
	at       time.Time     // when counts were read (zero: never)
	counting chan struct{} // closed when the running count ends (nil: none runs)
}

// stateCountsNow returns the last counts and when they were read (nil
// before the first count ends), and starts a count in the background
// when they are older than stateCountsTTL and none runs. Before the
// first count ends it waits for it up to firstCountWait.
func (c *Console) stateCountsNow(ctx context.Context) (map[dt.ProcessState]int, time.Time) {
	sc := &c.stateCounts
	now := c.clock.Now()
	sc.mu.Lock()
	if sc.counting == nil && (sc.at.IsZero() || now.Sub(sc.at) >= stateCountsTTL) {
		sc.counting = make(chan struct{})
		go c.countStates(now, sc.counting)
	}
	counts, at, counting := sc.counts, sc.at, sc.counting
	sc.mu.Unlock()
	if counts != nil || counting == nil {
		return counts, at
	}
	t := time.NewTimer(firstCountWait)
	defer t.Stop()
	select {
	case <-counting:
	case <-t.C:
	case <-ctx.Done():
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return sc.counts, sc.at
}

func (c *Console) countStates(started time.Time, done chan struct{}) {
	defer close(done)
	ctx, cancel := context.WithTimeout(c.streamCtx, c.opts.RequestTimeout)
	defer cancel()
	counts, err := c.d.Counts(ctx)
	sc := &c.stateCounts
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.counting = nil
	if err != nil {
		if c.streamCtx.Err() == nil {
			c.log.Error("console: counting tasks by state", "err", err)
		}
		return
	}
	sc.counts, sc.at = counts, started
}
