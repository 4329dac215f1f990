package startstop

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
)

// A Group starts in order, stops in reverse, and a failed start stops the
// services already started.
func TestGroupOrder(t *testing.T) {
	var mu sync.Mutex
	var log []string
	note := func(s string) { mu.Lock(); log = append(log, s); mu.Unlock() }
	svc := func(name string) *Func {
		return &Func{Name: name, Run: func(ctx context.Context) error {
			<-ctx.Done()
			note("stopped " + name)
			return nil
		}}
	}
	a, b := svc("a"), svc("b")
	g := Group{a, b}
	if err := g.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); !errors.Is(err, ErrStarted) {
		t.Fatalf("second Start: %v", err)
	}
	g.Stop()
	if want := []string{"stopped b", "stopped a"}; !slices.Equal(log, want) {
		t.Fatalf("log %v, want %v", log, want)
	}
	g.Stop() // a stopped group stops again without effect

	log = nil
	c := svc("c")
	if err := (Group{c, a, a}).Start(context.Background()); !errors.Is(err, ErrStarted) {
		t.Fatalf("Start of a group with a service twice: %v", err)
	}
	if want := []string{"stopped a", "stopped c"}; !slices.Equal(log, want) {
		t.Fatalf("log %v, want %v", log, want)
	}
}
