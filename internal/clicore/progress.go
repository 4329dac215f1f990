package clicore

import (
	"fmt"
	"sync"
	"time"
)

// ProgressEvery is how often a long run (demo, bench) prints its progress.
const ProgressEvery = 500 * time.Millisecond

// ProgressLine prints one progress line of a long run on stderr,
// "<name>:  12.5s  <what>", the seconds since start; none with --json,
// whose output is the one JSON result (and JSON logs).
func (e *Env) ProgressLine(name string, start time.Time, what string) {
	if e.JSON {
		return
	}
	fmt.Fprintf(e.Stderr, "%s: %5.1fs  %s\n", name, time.Since(start).Seconds(), what)
}

// Progress prints progressLine(name, start, what()) every ProgressEvery
// until stop is called (more than once is fine); what is called from
// another goroutine.
func (e *Env) Progress(name string, start time.Time, what func() string) (stop func()) {
	if e.JSON {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(ProgressEvery)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				e.ProgressLine(name, start, what())
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(done) })
		wg.Wait()
	}
}
