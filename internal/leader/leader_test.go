package leader_test

import (
	"context"
	"github.com/drover-run/drover/internal/testutil"
	"testing"
	"time"

	"github.com/drover-run/drover/internal/clock"
	"github.com/drover-run/drover/internal/leader"
	"github.com/drover-run/drover/store"
)

func openStore(t *testing.T) store.Driver {
	t.Helper()
	return testutil.SQLite(t)
}

const ttl = 10 * time.Second

func elector(d store.Driver, c clock.Clock, instance string) *leader.Elector {
	return &leader.Elector{Driver: d, Clock: c, Name: "sup", Instance: instance, TTL: ttl}
}

func try(t *testing.T, e *leader.Elector) int64 {
	t.Helper()
	term, err := e.TryAcquire(context.Background())
	if err != nil {
		t.Fatalf("%s TryAcquire: %v", e.Instance, err)
	}
	if term != e.Term() {
		t.Errorf("%s: TryAcquire returned term %d but Term() is %d", e.Instance, term, e.Term())
	}
	return term
}

func TestAcquireRenewAndFailoverOnExpiry(t *testing.T) {
	t.Parallel()
	d := openStore(t)
	clk := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	a, b := elector(d, clk, "A"), elector(d, clk, "B")

	if a.Term() != 0 {
		t.Fatal("leader before acquiring")
	}
	if term := try(t, a); term != 1 {
		t.Fatalf("first acquisition: term %d, want 1", term)
	}
	if term := try(t, b); term != 0 {
		t.Fatalf("B acquired A's lease: term %d", term)
	}
	// Renewal keeps the term and pushes the expiry.
	clk.Advance(ttl - time.Second)
	if term := try(t, a); term != 1 {
		t.Fatalf("renewal: term %d", term)
	}
	clk.Advance(ttl - time.Second) // within the renewed lease
	if a.Term() != 1 || try(t, b) != 0 {
		t.Fatal("renewed lease not honoured")
	}

	// A stops renewing. At the very instant its lease expires, A already
	// considers itself deposed, and B can take over: never both.
	clk.Advance(time.Second)
	if got := a.Term(); got != 0 {
		t.Errorf("A still acts as leader (term %d) at its lease expiry", got)
	}
	if term := try(t, b); term != 2 {
		t.Fatalf("B took over with term %d, want 2", term)
	}
	if term := try(t, a); term != 0 {
		t.Fatalf("deposed A re-acquired: term %d", term)
	}
	l, err := d.Reader().LeaseGet(context.Background(), &store.LeaseGetParams{Name: "sup"})
	if err != nil || l.Holder != "B" || l.Term != 2 {
		t.Fatalf("lease %+v, %v; want B term 2", l, err)
	}
}

func TestResignHandsOverAtOnce(t *testing.T) {
	t.Parallel()
	d := openStore(t)
	clk := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	a, b := elector(d, clk, "A"), elector(d, clk, "B")
	if try(t, a) != 1 {
		t.Fatal("A not leader")
	}
	if err := a.Resign(context.Background()); err != nil {
		t.Fatal(err)
	}
	if a.Term() != 0 {
		t.Error("A still leader after resigning")
	}
	// No clock movement needed.
	if term := try(t, b); term != 2 {
		t.Fatalf("B after A resigned: term %d, want 2", term)
	}
	// Resigning when not leader is a no-op.
	if err := a.Resign(context.Background()); err != nil {
		t.Fatal(err)
	}
	if l, _ := d.Reader().LeaseGet(context.Background(), &store.LeaseGetParams{Name: "sup"}); l.Holder != "B" || !l.ExpiresAt.Equal(clk.Now().Add(ttl)) {
		t.Errorf("A's second resign touched B's lease: %+v", l)
	}
}

func TestStaleResignDoesNotReleaseNewLeader(t *testing.T) {
	t.Parallel()
	d := openStore(t)
	clk := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	a, b := elector(d, clk, "A"), elector(d, clk, "B")
	try(t, a)
	clk.Advance(ttl + time.Second)
	if try(t, b) != 2 {
		t.Fatal("B did not take over")
	}
	// A, paused through all this, resigns its old term.
	if err := a.Resign(context.Background()); err != nil {
		t.Fatal(err)
	}
	if term := try(t, elector(d, clk, "C")); term != 0 {
		t.Fatalf("a stale resign released B's lease: C got term %d", term)
	}
	if b.Term() != 2 {
		t.Error("B lost its term")
	}
}

func TestStoreErrorMeansNotLeader(t *testing.T) {
	t.Parallel()
	d := openStore(t)
	clk := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	a := elector(d, clk, "A")
	try(t, a)
	d.Close()
	if _, err := a.TryAcquire(context.Background()); err == nil {
		t.Fatal("TryAcquire on a closed store succeeded")
	}
	if a.Term() != 0 {
		t.Error("still leader after a failed renewal")
	}
}
