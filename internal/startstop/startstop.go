package startstop

import (
	"context"
	"errors"
	"log/slog"
	"sync"
)

// Service is a part that runs in the background between Start and Stop.
type Service interface {
	// Start starts the service; it runs until Stop or until ctx ends.
	// Starting a running service fails with ErrStarted.
	Start(ctx context.Context) error
	// Stop stops the service and waits until it has stopped. It does
	// nothing on a service that is not running.
	Stop()
}

// ErrStarted is returned by Start on a service already running.
var ErrStarted = errors.New("startstop: service already started")

// Func is a Service that runs a function until its context ends: the
// usual shape of a role's Run.
type Func struct {
	// Name names the service in the log when Run fails.
	Name string
	// Run runs until ctx ends; an error is logged.
	Run func(ctx context.Context) error
	// Log receives Run's error; nil discards it.
	Log *slog.Logger

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// Start runs f.Run in a goroutine.
func (f *Func) Start(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done != nil {
		return ErrStarted
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	f.cancel, f.done = cancel, done
	go func() {
		defer close(done)
		if err := f.Run(ctx); err != nil && f.Log != nil {
			f.Log.Error("service stopped", "service", f.Name, "err", err)
		}
	}()
	return nil
}

// Stop cancels Run's context and waits for it to return.
func (f *Func) Stop() {
	f.mu.Lock()
	cancel, done := f.cancel, f.done
	f.cancel, f.done = nil, nil
	f.mu.Unlock()
	if done == nil {
		return
	}
	cancel()
	<-done
}

// Group is services started together and stopped together.
type Group []Service

// Start starts the services in order; if one fails, those started are
// stopped and its error returned.
func (g Group) Start(ctx context.Context) error {
	for i, s := range g {
		if err := s.Start(ctx); err != nil {
			g[:i].Stop()
			return err
		}
	}
	return nil
}

// Stop stops the services in reverse order.
func (g Group) Stop() {
	for i := len(g) - 1; i >= 0; i-- {
		g[i].Stop()
	}
}
