package flow

import (
	"testing"
	"time"

	dt "github.com/drover-run/drover/drovertype"
)

// The claim floor without a store: what the transaction in progress sets
// is kept only if it commits, its age survives claims that start at it,
// and a clock set back ends it.
func TestClaimFloorCommitDiscardAndAge(t *testing.T) {
	t0 := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	full := []*dt.Task{{ID: "a", AvailableAt: t0}, {ID: "b", AvailableAt: t0}}
	m := &Machine{}
	if m.claimAfter(t0) != nil {
		t.Fatal("a new machine has a floor")
	}
	m.claimed(nil, full, 2, t0)
	m.Commit()
	f := m.claimAfter(t0)
	if f == nil || f.ID != "b" || !f.ClaimAt.Equal(t0) {
		t.Fatalf("floor after a full claim = %+v, want b", f)
	}

	// Past the TTL a claim starts from the start; if it rolls back, the old
	// floor stays expired.
	late := t0.Add(1500 * time.Millisecond)
	if m.claimAfter(late) != nil {
		t.Fatal("floor used past claimFloorTTL")
	}
	m.claimed(nil, []*dt.Task{{ID: "c", AvailableAt: late}, {ID: "d", AvailableAt: late}}, 2, late)
	m.Discard()
	if f := m.claimAfter(late.Add(time.Millisecond)); f != nil {
		t.Fatalf("a rolled-back claim revived the expired floor %+v", f)
	}

	// Claims that start at the floor keep its age.
	m = &Machine{}
	m.claimed(nil, full, 2, t0)
	m.Commit()
	next := t0.Add(600 * time.Millisecond)
	m.claimed(m.claimAfter(next), []*dt.Task{{ID: "e", AvailableAt: next}, {ID: "f", AvailableAt: next}}, 2, next)
	m.Commit()
	if f := m.claimAfter(next); f == nil || f.ID != "f" {
		t.Fatalf("floor = %+v, want f", f)
	}
	if f := m.claimAfter(t0.Add(1100 * time.Millisecond)); f != nil {
		t.Fatalf("floor %+v still used 1.1s after the claim that set it", f)
	}

	// A clock set back ends it.
	m = &Machine{}
	m.claimed(nil, full, 2, t0)
	m.Commit()
	if f := m.claimAfter(t0.Add(-time.Minute)); f != nil {
		t.Fatalf("floor %+v used after the clock went back", f)
	}

	// A claim that is not full clears it.
	m.claimed(m.claimAfter(t0), full[:1], 2, t0)
	m.Commit()
	if f := m.claimAfter(t0); f != nil {
		t.Fatalf("floor %+v after a claim that was not full", f)
	}
}
