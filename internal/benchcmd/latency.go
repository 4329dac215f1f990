package benchcmd

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/internal/clicore"
)

// latencyTracker joins submissions with the final events the subscriber
// reads from the history. Either may come first: a task can be processed
// (and its event read) before Submit has returned to the submitter.
type latencyTracker struct {
	mu        sync.Mutex
	submitted map[string]time.Time     // task ID → CreatedAt, as Submit returned it
	final     map[string]*drover.Event // task ID → its final event (any task)
	ours      int                      // submitted tasks with a final event
	changed   chan struct{}            // signalled when ours grows
}

func newLatencyTracker(n int) *latencyTracker {
	return &latencyTracker{
		submitted: make(map[string]time.Time, n),
		final:     make(map[string]*drover.Event, n),
		changed:   make(chan struct{}, 1),
	}
}

func (l *latencyTracker) signal() {
	select {
	case l.changed <- struct{}{}:
	default:
	}
}

func (l *latencyTracker) submit(id string, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.submitted[id] = at
	if l.final[id] != nil {
		l.ours++
		l.signal()
	}
}

// event records a task's first final event.
func (l *latencyTracker) event(ev *drover.Event) {
	switch ev.Type {
	case drover.EventProcessed, drover.EventError, drover.EventCompensated, drover.EventCancelled:
	default:
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.final[ev.TaskID] != nil {
		return
	}
	l.final[ev.TaskID] = ev
	if _, ok := l.submitted[ev.TaskID]; ok {
		l.ours++
		l.signal()
	}
}

func (l *latencyTracker) progress() (final, submitted int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ours, len(l.submitted)
}

// runLatency submits rate × duration single tasks, paced at f.rate per
// second from f.submitters goroutines, with the roles running, and reports
// the submit → Processed latencies.
func (e *env) runLatency(ctx context.Context, f benchFlags, drv *clicore.Database, c *drover.Client, explicit bool) error {
	if err := c.Start(ctx); err != nil {
		return drv.StoreErr(err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = c.Stop(sctx)
	}()

	planned := max(1, int(math.Round(f.rate*f.duration.Seconds())))
	tr := newLatencyTracker(planned)

	// The subscriber tails the history from the first task's submission on
	// (the history is durable, so starting after it misses nothing).
	subCtx, stopSub := context.WithCancel(ctx)
	firstID := make(chan string, 1)
	subErr := make(chan error, 1)
	var subDone sync.WaitGroup
	subDone.Add(1)
	go func() {
		defer subDone.Done()
		var id string
		select {
		case id = <-firstID:
		case <-subCtx.Done():
			return
		}
		evs, err := c.Events(subCtx, drover.EventQuery{TaskID: id, Limit: 1})
		if err == nil && len(evs) == 0 {
			err = fmt.Errorf("task %s has no history", id)
		}
		if err != nil {
			subErr <- err
			return
		}
		for ev := range c.Subscribe(subCtx, drover.Subscription{AfterID: evs[0].ID - 1, PollInterval: 10 * time.Millisecond}) {
			tr.event(ev)
		}
	}()
	defer subDone.Wait() // after stopSub (deferred later, runs first)
	defer stopSub()

	// Submit evenly paced: task i is due at start + i/rate. A submitter that
	// falls behind (each Submit is a durable commit) submits back to back
	// until it has caught up; the run then takes longer than the duration,
	// and the achieved rate shows the load actually offered. With several
	// submitters, submitter k takes tasks k+1, k+1+n, k+1+2n, … after the
	// first, which is submitted alone: every later task's events then have
	// greater IDs than its submission, where the subscriber starts.
	start := time.Now()
	deadline := start.Add(f.timeout)
	var (
		submitted atomic.Int64
		errOnce   sync.Once
		firstErr  error
	)
	stopProgress := e.Progress("bench", start, func() string {
		final, _ := tr.progress()
		return fmt.Sprintf("submitted %d/%d  final %d", submitted.Load(), planned, final)
	})
	defer stopProgress()
	sctx, stopSubmit := context.WithCancel(ctx)
	defer stopSubmit()
	fail := func(err error) {
		errOnce.Do(func() { firstErr = err })
		stopSubmit()
	}
	submitTask := func(timer *time.Timer, i int) bool {
		due := start.Add(time.Duration(float64(i) / f.rate * float64(time.Second)))
		if d := time.Until(due); d > 0 {
			timer.Reset(d)
			select {
			case <-sctx.Done():
			case <-timer.C:
			}
		}
		if sctx.Err() != nil {
			if ctx.Err() != nil {
				fail(fmt.Errorf("bench interrupted after %d submissions", submitted.Load()))
			}
			return false
		}
		if time.Now().After(deadline) {
			fail(fmt.Errorf("bench timed out after %s (--timeout) with %d of %d tasks submitted", f.timeout, submitted.Load(), planned))
			return false
		}
		t, err := c.Submit(sctx, BenchWorkflow, nil, nil)
		if err != nil {
			if ctx.Err() != nil {
				err = fmt.Errorf("bench interrupted after %d submissions", submitted.Load())
			} else {
				err = drv.StoreErr(fmt.Errorf("submit: %w", err))
			}
			fail(err)
			return false
		}
		tr.submit(t.ID, t.CreatedAt)
		submitted.Add(1)
		if i == 0 {
			firstID <- t.ID
		}
		return true
	}
	newTimer := func() *time.Timer {
		t := time.NewTimer(time.Hour)
		t.Stop()
		return t
	}
	if submitTask(newTimer(), 0) {
		var wg sync.WaitGroup
		for k := range f.submitters {
			wg.Add(1)
			go func() {
				defer wg.Done()
				timer := newTimer()
				defer timer.Stop()
				for i := 1 + k; i < planned; i += f.submitters {
					if !submitTask(timer, i) {
						return
					}
				}
			}()
		}
		wg.Wait()
	}
	if firstErr != nil {
		return firstErr
	}
	tasks := int(submitted.Load())
	window := max(f.duration, time.Since(start))

	// Wait until every submitted task is final.
	wait := time.NewTimer(time.Until(deadline))
	defer wait.Stop()
	for {
		final, _ := tr.progress()
		if final >= tasks {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("bench interrupted: %d of %d tasks final", final, tasks)
		case <-wait.C:
			return fmt.Errorf("bench timed out after %s (--timeout): %d of %d tasks final", f.timeout, final, tasks)
		case err := <-subErr:
			return drv.StoreErr(fmt.Errorf("read the event history: %w", err))
		case <-tr.changed:
		}
	}
	stopProgress()
	stopSub()
	subDone.Wait()

	tr.mu.Lock()
	lat := make([]time.Duration, 0, tasks)
	failed := map[drover.EventType]int{}
	for id, at := range tr.submitted {
		ev := tr.final[id]
		if ev.Type != drover.EventProcessed {
			failed[ev.Type]++
			continue
		}
		lat = append(lat, ev.CreatedAt.Sub(at))
	}
	tr.mu.Unlock()
	if len(failed) > 0 {
		return fmt.Errorf("bench: %d of %d tasks did not end Processed (final events: %v)", tasks-len(lat), tasks, failed)
	}
	if len(lat) == 0 {
		return errors.New("bench: no task was submitted")
	}
	slices.Sort(lat)
	ms := func(d time.Duration) float64 { return math.Round(float64(d)/float64(time.Millisecond)*1000) / 1000 }
	pct := func(p float64) time.Duration { // nearest rank
		return lat[max(0, int(math.Ceil(p*float64(len(lat))))-1)]
	}
	var sum time.Duration
	for _, d := range lat {
		sum += d
	}
	r := LatencyResult{
		Mode: "latency", Rate: f.rate, DurationS: f.duration.Seconds(), Tasks: tasks,
		P50Ms: ms(pct(0.50)), P90Ms: ms(pct(0.90)), P99Ms: ms(pct(0.99)), MaxMs: ms(lat[len(lat)-1]),
		MeanMs:       ms(sum / time.Duration(len(lat))),
		AchievedRate: math.Round(float64(tasks)/window.Seconds()*10) / 10,
		Submitters:   f.submitters, EagerStart: !f.noEager, Steps: f.steps, Schedulers: f.schedulers, Driver: drv.DriverName(), Synchronous: f.synchronous,
	}
	if explicit {
		r.DB = drv.Label
	}
	if drv.Target.Postgres {
		r.Schema = drv.Target.Schema
	}
	if e.JSON {
		return clicore.WriteJSON(e.Stdout, r)
	}
	fmt.Fprintf(e.Stdout, "drover bench: %d tasks submitted at %g/s for %s (achieved %.1f/s), submit → Processed latency: p50 %.3fms, p90 %.3fms, p99 %.3fms, max %.3fms, mean %.3fms (%s, %d schedulers)\n",
		r.Tasks, r.Rate, f.duration, r.AchievedRate, r.P50Ms, r.P90Ms, r.P99Ms, r.MaxMs, r.MeanMs, benchStoreDesc(drv, f), r.Schedulers)
	return nil
}

// benchStoreDesc says which store a bench ran on, for the human output.
func benchStoreDesc(drv *clicore.Database, f benchFlags) string {
	if drv.Target.Postgres {
		return "postgres schema " + drv.Target.Schema
	}
	return "sqlite synchronous=" + f.synchronous
}
