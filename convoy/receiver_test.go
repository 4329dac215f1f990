package convoy_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/drover-run/drover/convoy"
	"github.com/drover-run/drover/store"
)

func TestReceiverHandsOutOneMessageAtATimeInOrder(t *testing.T) {
	t.Parallel()
	drivers(t, func(t *testing.T, d store.Driver) {
		c := newClient(t, d)
		ctx := ctxT(t)
		publish(t, c, "q", msgs("s", 3)...)
		if _, err := c.AcceptSession(ctx, "q", "nope"); !errors.Is(err, convoy.ErrNotFound) {
			t.Fatalf("accept unknown session: %v", err)
		}
		if _, err := c.AcceptSession(ctx, "q", ""); !errors.Is(err, convoy.ErrInvalidSession) {
			t.Fatalf("accept empty session ID: %v", err)
		}
		r := must[*convoy.SessionReceiver](t)(c.AcceptNextSession(ctx, "q"))
		if r.SessionID() != "s" || r.Queue() != "q" {
			t.Fatalf("accepted %s/%s", r.Queue(), r.SessionID())
		}
		// Another consumer cannot take the session, nor find it available.
		c2 := newClient(t, d, withID("other"))
		if _, err := c2.AcceptSession(ctx, "q", "s"); !errors.Is(err, convoy.ErrSessionLocked) {
			t.Fatalf("second accept: %v, want ErrSessionLocked", err)
		}
		short, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
		if _, err := c2.AcceptNextSession(short, "q"); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("second accept-next: %v", err)
		}
		cancel()

		m1 := must[*convoy.ReceivedMessage](t)(r.Receive(ctx))
		if m1.Seq != 1 || string(m1.Body) != "s:1" || m1.DeliveryCount != 1 {
			t.Fatalf("first: %+v", m1)
		}
		if _, err := r.Receive(ctx); !errors.Is(err, convoy.ErrMessageUnsettled) {
			t.Fatalf("receive with one unsettled: %v", err)
		}
		if err := r.Abandon(ctx, m1, 0); err != nil {
			t.Fatal(err)
		}
		if err := r.Complete(ctx, m1, nil); !errors.Is(err, convoy.ErrNotReceived) {
			t.Fatalf("complete of an abandoned message: %v", err)
		}
		again := must[*convoy.ReceivedMessage](t)(r.Receive(ctx))
		if again.Seq != 1 || again.DeliveryCount != 2 {
			t.Fatalf("after abandon: seq %d count %d, want 1 and 2", again.Seq, again.DeliveryCount)
		}
		if err := r.Complete(ctx, again, nil); err != nil {
			t.Fatal(err)
		}
		m2 := must[*convoy.ReceivedMessage](t)(r.Receive(ctx))
		if m2.Seq != 2 {
			t.Fatalf("second: seq %d", m2.Seq)
		}
		// Close with m2 unsettled: it stays the head, for the next consumer.
		if err := r.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Receive(ctx); !errors.Is(err, convoy.ErrReceiverClosed) {
			t.Fatalf("receive after close: %v", err)
		}
		r2 := must[*convoy.SessionReceiver](t)(c2.AcceptNextSession(ctx, "q"))
		defer r2.Close(ctx)
		m := must[*convoy.ReceivedMessage](t)(r2.Receive(ctx))
		if m.Seq != 2 || m.DeliveryCount != 2 {
			t.Fatalf("after close: seq %d count %d, want 2 and 2", m.Seq, m.DeliveryCount)
		}
	})
}

// The session state changes atomically with a completion: a completion
// rejected for a lost lock changes neither the message nor the state.
func TestSessionStateCommitsWithTheSettle(t *testing.T) {
	t.Parallel()
	drivers(t, func(t *testing.T, d store.Driver) {
		clk := fakeClock()
		c := newClient(t, d, withClock(clk))
		ctx := ctxT(t)
		if err := c.SetQueuePolicy(ctx, convoy.QueuePolicy{Name: "q", LockDuration: time.Minute}); err != nil {
			t.Fatal(err)
		}
		publish(t, c, "q", msgs("s", 3)...)
		r := must[*convoy.SessionReceiver](t)(c.AcceptSession(ctx, "q", "s"))
		m1 := must[*convoy.ReceivedMessage](t)(r.Receive(ctx))
		if m1.SessionState() != nil {
			t.Fatalf("initial state %q", m1.SessionState())
		}
		if err := r.Complete(ctx, m1, &convoy.CompleteOptions{SetState: true, State: []byte("after 1")}); err != nil {
			t.Fatal(err)
		}
		if st := must[[]byte](t)(r.State(ctx)); string(st) != "after 1" {
			t.Fatalf("state %q", st)
		}
		m2 := must[*convoy.ReceivedMessage](t)(r.Receive(ctx))
		if string(m2.SessionState()) != "after 1" {
			t.Fatalf("state seen with message 2: %q", m2.SessionState())
		}
		// The lock expires; another consumer takes the session over.
		clk.Advance(2 * time.Minute)
		c2 := newClient(t, d, withClock(clk), withID("other"))
		r2 := must[*convoy.SessionReceiver](t)(c2.AcceptSession(ctx, "q", "s"))
		defer r2.Close(ctx)
		m2.SetSessionState([]byte("stale"))
		if err := r.Complete(ctx, m2, nil); !errors.Is(err, convoy.ErrLockLost) {
			t.Fatalf("stale complete: %v, want ErrLockLost", err)
		}
		select {
		case <-r.LockLost():
		default:
			t.Fatal("LockLost not closed after a settle found the lock lost")
		}
		if err := r.SetState(ctx, []byte("stale")); !errors.Is(err, convoy.ErrLockLost) {
			t.Fatalf("stale set state: %v", err)
		}
		if st := must[[]byte](t)(r2.State(ctx)); string(st) != "after 1" {
			t.Fatalf("state after the stale settle: %q", st)
		}
		if ms := peek(t, c, "q", "s"); len(ms) != 2 || ms[0].Seq != 2 {
			t.Fatalf("messages after the stale settle: %d, head %d", len(ms), ms[0].Seq)
		}
		m := must[*convoy.ReceivedMessage](t)(r2.Receive(ctx))
		if m.Seq != 2 || m.DeliveryCount != 2 {
			t.Fatalf("taken over: seq %d count %d", m.Seq, m.DeliveryCount)
		}
		m.SetSessionState([]byte("after 2"))
		if err := r2.Complete(ctx, m, nil); err != nil {
			t.Fatal(err)
		}
		if err := r2.SetState(ctx, nil); err != nil {
			t.Fatal(err)
		}
		if st := must[[]byte](t)(r2.State(ctx)); st != nil {
			t.Fatalf("cleared state: %q", st)
		}
		if err := r.Close(ctx); err != nil {
			t.Fatalf("close of a receiver that lost its lock: %v", err)
		}
	})
}

// A receiver whose renewals find the lock taken over closes LockLost; its
// settles are rejected and change nothing.
func TestReceiverRenewsAndDetectsLockLoss(t *testing.T) {
	t.Parallel()
	drivers(t, func(t *testing.T, d store.Driver) {
		clk := fakeClock()
		c := newClient(t, d, withClock(clk))
		ctx := ctxT(t)
		const lock = 300 * time.Millisecond
		if err := c.SetQueuePolicy(ctx, convoy.QueuePolicy{Name: "q", LockDuration: lock}); err != nil {
			t.Fatal(err)
		}
		publish(t, c, "q", msgs("s", 1)...)
		r := must[*convoy.SessionReceiver](t)(c.AcceptSession(ctx, "q", "s"))
		defer r.Close(ctx)
		m := must[*convoy.ReceivedMessage](t)(r.Receive(ctx))
		// Renewals move the lock with the clock: advance by less than the
		// lock each time, and the lock stays ours.
		for range 5 {
			before := r.LockedUntil()
			clk.Advance(lock / 2)
			waitFor(t, "a renewal", func() bool { return r.LockedUntil().After(before) })
		}
		c2 := newClient(t, d, withClock(clk), withID("other"))
		if _, err := c2.AcceptSession(ctx, "q", "s"); !errors.Is(err, convoy.ErrSessionLocked) {
			t.Fatalf("accept of a renewed session: %v", err)
		}
		// Jump past the lock: another consumer takes over; the next renewal
		// finds the lock lost.
		clk.Advance(2 * lock)
		r2 := must[*convoy.SessionReceiver](t)(c2.AcceptSession(ctx, "q", "s"))
		defer r2.Close(ctx)
		recv(t, "LockLost", r.LockLost())
		if err := r.Complete(ctx, m, nil); !errors.Is(err, convoy.ErrLockLost) {
			t.Fatalf("complete after lock loss: %v", err)
		}
		if _, err := r.Receive(ctx); !errors.Is(err, convoy.ErrLockLost) {
			t.Fatalf("receive after lock loss: %v", err)
		}
		m2 := must[*convoy.ReceivedMessage](t)(r2.Receive(ctx))
		if m2.Seq != 1 || m2.DeliveryCount != 2 {
			t.Fatalf("taken over: seq %d count %d", m2.Seq, m2.DeliveryCount)
		}
		if err := r2.Complete(ctx, m2, nil); err != nil {
			t.Fatal(err)
		}
	})
}

// AcceptNextSession and Receive wake on publishes, without waiting for a
// poll: in this process at once, and from another process through
// notifications (PostgreSQL).
func TestConsumersWakeOnPublish(t *testing.T) {
	t.Parallel()
	drivers(t, func(t *testing.T, d store.Driver) {
		ctx := ctxT(t)
		c := newClient(t, d, withPoll(time.Hour))
		got := make(chan *convoy.SessionReceiver, 1)
		go func() {
			r, err := c.AcceptNextSession(ctx, "q")
			if err != nil {
				t.Error(err)
			}
			got <- r
		}()
		// Publish until the waiter is up (it subscribes right away; its
		// first look may come before the first publish).
		r := publishUntil(t, c, "q", got)
		defer r.Close(ctx)
		m := must[*convoy.ReceivedMessage](t)(r.Receive(ctx))
		if err := r.Complete(ctx, m, nil); err != nil {
			t.Fatal(err)
		}
		next := make(chan *convoy.ReceivedMessage, 1)
		go func() {
			m, err := r.Receive(ctx)
			if err != nil {
				t.Error(err)
			}
			next <- m
		}()
		publish(t, c, "q", convoy.Message{SessionID: r.SessionID(), Body: []byte("later")})
		if m := recv(t, "the message published while Receive waited", next); m == nil || string(m.Body) != "later" {
			t.Fatalf("got %+v", m)
		}

		if d.Name() == "sqlite" {
			return // SQLite has no cross-process notifications: other processes poll
		}
		other := newClient(t, secondDriver(t, d), withPoll(time.Hour))
		got2 := make(chan *convoy.SessionReceiver, 1)
		go func() {
			r, err := other.AcceptNextSession(ctx, "q2")
			if err != nil {
				t.Error(err)
			}
			got2 <- r
		}()
		r2 := publishUntil(t, c, "q2", got2)
		r2.Close(ctx)
	})
}

// publishUntil publishes a message to a new session of queue every 20ms
// until a receiver arrives on got.
func publishUntil(t *testing.T, c *convoy.Client, queue string, got <-chan *convoy.SessionReceiver) *convoy.SessionReceiver {
	t.Helper()
	deadline := time.After(30 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; i++ {
		publish(t, c, queue, convoy.Message{SessionID: "s" + string(rune('a'+i%26)) + itoa(i)})
		select {
		case r := <-got:
			if r == nil {
				t.FailNow()
			}
			return r
		case <-deadline:
			t.Fatal("the waiting consumer was not woken")
		case <-tick.C:
		}
	}
}
