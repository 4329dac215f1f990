package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/drover-run/drover/store"
)

// The console cases: sign-outs of console sessions.
func consoleCases() []testCase {
	return []testCase{
		{"SignOutCountsUntilExpiry", testSignOut},
		{"SignOutDeleteExpired", testSignOutDeleteExpired},
	}
}

func signedOut(t *testing.T, x store.Executor, id string, now time.Time) bool {
	t.Helper()
	ok, err := x.SignOutExists(context.Background(), &store.SignOutExistsParams{SessionID: id, Now: now})
	if err != nil {
		t.Fatalf("SignOutExists %s: %v", id, err)
	}
	return ok
}

func signOut(t *testing.T, d store.Driver, id string, expires time.Time) {
	t.Helper()
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		return x.SignOutInsert(ctx, &store.SignOutInsertParams{SessionID: id, ExpiresAt: expires})
	})
}

// testSignOut records a sign-out: it counts for that session only, until
// its expiry (exclusive); recording it again changes nothing; a rolled
// back one does not count; a reader may not record one.
func testSignOut(t *testing.T, d store.Driver) {
	if signedOut(t, d.Reader(), "s1", at(0)) {
		t.Error("a session never signed out counts as signed out")
	}
	if err := d.Reader().SignOutInsert(context.Background(), &store.SignOutInsertParams{SessionID: "s1", ExpiresAt: at(time.Hour)}); err == nil {
		t.Error("SignOutInsert outside a write transaction: no error")
	}
	errStop := errors.New("stop")
	if err := d.InTx(context.Background(), func(ctx context.Context, x store.Executor) error {
		if err := x.SignOutInsert(ctx, &store.SignOutInsertParams{SessionID: "s1", ExpiresAt: at(time.Hour)}); err != nil {
			return err
		}
		if !signedOut(t, x, "s1", at(0)) {
			t.Error("the sign-out is not seen in its own transaction")
		}
		return errStop
	}); !errors.Is(err, errStop) {
		t.Fatalf("InTx: %v, want the callback's error", err)
	}
	if signedOut(t, d.Reader(), "s1", at(0)) {
		t.Error("a rolled back sign-out counts")
	}
	signOut(t, d, "s1", at(time.Hour))
	signOut(t, d, "s1", at(2*time.Hour)) // again: no error, no change
	for _, c := range []struct {
		id   string
		now  time.Time
		want bool
	}{
		{"s1", at(0), true},
		{"s1", at(time.Hour - time.Microsecond), true},
		{"s1", at(time.Hour), false},
		{"s2", at(0), false},
	} {
		if got := signedOut(t, d.Reader(), c.id, c.now); got != c.want {
			t.Errorf("SignOutExists %s at %v: %v, want %v", c.id, c.now.Sub(base), got, c.want)
		}
	}
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		if !signedOut(t, x, "s1", at(0)) {
			t.Error("SignOutExists in a write transaction: false, want true")
		}
		return nil
	})
}

// testSignOutDeleteExpired deletes the sign-outs expired by Before, at
// most Limit, and keeps the others.
func testSignOutDeleteExpired(t *testing.T, d store.Driver) {
	for i, id := range []string{"a", "b", "c", "d"} {
		signOut(t, d, id, at(time.Duration(i)*time.Minute))
	}
	del := func(before time.Time, limit int) int {
		var n int
		inTx(t, d, func(ctx context.Context, x store.Executor) error {
			var err error
			n, err = x.SignOutDeleteExpired(ctx, &store.SignOutDeleteExpiredParams{Before: before, Limit: limit})
			return err
		})
		return n
	}
	if n := del(at(2*time.Minute), 0); n != 0 {
		t.Errorf("limit 0: deleted %d", n)
	}
	if n := del(at(2*time.Minute), 2); n != 2 {
		t.Errorf("expired by 2m, limit 2: deleted %d, want 2", n)
	}
	if n := del(at(2*time.Minute), 10); n != 1 {
		t.Errorf("expired by 2m, again: deleted %d, want 1 (c)", n)
	}
	// d expires at 3m: it is kept and still counts before then.
	if !signedOut(t, d.Reader(), "d", at(2*time.Minute)) || signedOut(t, d.Reader(), "a", at(-time.Hour)) {
		t.Error("after the deletes: d should still count and a be gone")
	}
	for _, limit := range []int{10, 0} {
		if _, err := d.Reader().SignOutDeleteExpired(context.Background(), &store.SignOutDeleteExpiredParams{Before: at(time.Hour), Limit: limit}); err == nil {
			t.Errorf("SignOutDeleteExpired (limit %d) outside a write transaction: no error", limit)
		}
	}
}
