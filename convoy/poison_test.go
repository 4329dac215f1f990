package convoy_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drover-run/drover/convoy"
	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/store"
)

func events(t *testing.T, c *convoy.Client, queue, session string) []*convoy.Event {
	t.Helper()
	evs, err := c.SessionEvents(context.Background(), queue, session, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// Under the block policy a message received more often than the maximum is
// dead-lettered, the session halts with an alert, and resubmitting the dead
// letter resumes the session in order.
func TestPoisonBlockHaltsTheSessionUntilResubmitted(t *testing.T) {
	t.Parallel()
	drivers(t, func(t *testing.T, d store.Driver) {
		c := newClient(t, d)
		ctx := ctxT(t)
		if err := c.SetQueuePolicy(ctx, convoy.QueuePolicy{Name: "q", MaxDeliveryCount: 2}); err != nil {
			t.Fatal(err)
		}
		publish(t, c, "q", msgs("s", 3)...)
		publish(t, c, "q", msgs("other", 1)...)
		r := must[*convoy.SessionReceiver](t)(c.AcceptSession(ctx, "q", "s"))
		for i := 1; i <= 2; i++ {
			m := must[*convoy.ReceivedMessage](t)(r.Receive(ctx))
			if m.Seq != 1 || m.DeliveryCount != i {
				t.Fatalf("delivery %d: seq %d count %d", i, m.Seq, m.DeliveryCount)
			}
			if err := r.Abandon(ctx, m, 0); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := r.Receive(ctx); !errors.Is(err, convoy.ErrSessionBlocked) {
			t.Fatalf("third delivery: %v, want ErrSessionBlocked", err)
		}
		r.Close(ctx)

		s := session(t, c, "q", "s")
		if !s.Blocked || s.Pending != 2 {
			t.Fatalf("session blocked %v pending %d", s.Blocked, s.Pending)
		}
		dl := must[[]*convoy.StoredMessage](t)(c.DeadLetters(ctx, "q", "", convoy.DeadLetterCursor{}, 0))
		if len(dl) != 1 || dl[0].Seq != 1 || dl[0].DeadReason != convoy.ReasonMaxDeliveryCount || !dl[0].Dead {
			t.Fatalf("dead letters %+v", dl)
		}
		evs := events(t, c, "q", "s")
		if len(evs) != 1 || evs[0].Type != convoy.EventSessionBlocked || !evs[0].Alert || evs[0].StepIndex != -1 ||
			evs[0].TaskID != dt.SessionSubject("q", "s") || !strings.Contains(evs[0].Message, "blocked") {
			t.Fatalf("events %+v", evs)
		}
		// Only the other session is available.
		r2 := must[*convoy.SessionReceiver](t)(c.AcceptNextSession(ctx, "q"))
		if r2.SessionID() != "other" {
			t.Fatalf("accepted %q", r2.SessionID())
		}
		if err := r2.Complete(ctx, must[*convoy.ReceivedMessage](t)(r2.Receive(ctx)), nil); err != nil {
			t.Fatal(err)
		}
		r2.Close(ctx)
		short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		r3, err := c.AcceptNextSession(short, "q")
		cancel()
		if err == nil {
			t.Fatalf("accepted %q: a blocked session must not be available", r3.SessionID())
		}

		if err := c.ResubmitDeadLetter(ctx, "q", "s", 99); !errors.Is(err, convoy.ErrNotFound) {
			t.Fatalf("resubmit of an unknown dead letter: %v", err)
		}
		if err := c.ResubmitDeadLetter(ctx, "q", "s", 1); err != nil {
			t.Fatal(err)
		}
		r = must[*convoy.SessionReceiver](t)(c.AcceptNextSession(ctx, "q"))
		defer r.Close(ctx)
		for want := int64(1); want <= 3; want++ {
			m := must[*convoy.ReceivedMessage](t)(r.Receive(ctx))
			if m.Seq != want || m.DeliveryCount != 1 {
				t.Fatalf("after resubmit: seq %d count %d, want %d and 1", m.Seq, m.DeliveryCount, want)
			}
			if err := r.Complete(ctx, m, nil); err != nil {
				t.Fatal(err)
			}
		}
		evs = events(t, c, "q", "s")
		if evs[len(evs)-1].Type != convoy.EventDeadLetterResubmitted {
			t.Fatalf("last event %s", evs[len(evs)-1].Type)
		}
	})
}

// Explicit dead-lettering under block blocks the session too; discarding the
// dead letter resumes with the next message.
func TestDeadLetterUnderBlockAndDiscard(t *testing.T) {
	t.Parallel()
	drivers(t, func(t *testing.T, d store.Driver) {
		c := newClient(t, d)
		ctx := ctxT(t)
		publish(t, c, "q", msgs("s", 2)...)
		r := must[*convoy.SessionReceiver](t)(c.AcceptSession(ctx, "q", "s"))
		defer r.Close(ctx)
		m := must[*convoy.ReceivedMessage](t)(r.Receive(ctx))
		if err := r.DeadLetter(ctx, m, "bad input: price missing"); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Receive(ctx); !errors.Is(err, convoy.ErrSessionBlocked) {
			t.Fatalf("receive: %v", err)
		}
		if evs := events(t, c, "q", "s"); len(evs) != 1 || !evs[0].Alert || !strings.Contains(evs[0].Message, "price missing") {
			t.Fatalf("events %+v", evs)
		}
		if err := c.DiscardDeadLetter(ctx, "q", "s", 1); err != nil {
			t.Fatal(err)
		}
		if err := c.DiscardDeadLetter(ctx, "q", "s", 1); !errors.Is(err, convoy.ErrNotFound) {
			t.Fatalf("second discard: %v", err)
		}
		m = must[*convoy.ReceivedMessage](t)(r.Receive(ctx))
		if m.Seq != 2 {
			t.Fatalf("after discard: seq %d", m.Seq)
		}
		if dl := must[[]*convoy.StoredMessage](t)(c.DeadLetters(ctx, "q", "s", convoy.DeadLetterCursor{}, 0)); len(dl) != 0 {
			t.Fatalf("dead letters after discard: %d", len(dl))
		}
	})
}

// Under the skip policy the session goes on; the gap is in the dead-letter
// list; a non-alert event records it. Handlers run through a Processor.
func TestPoisonSkipGoesOnAndRecordsTheGap(t *testing.T) {
	t.Parallel()
	drivers(t, func(t *testing.T, d store.Driver) {
		c := newClient(t, d)
		ctx := ctxT(t)
		if err := c.SetQueuePolicy(ctx, convoy.QueuePolicy{Name: "q", MaxDeliveryCount: 2, Poison: convoy.PoisonSkip}); err != nil {
			t.Fatal(err)
		}
		publish(t, c, "q", msgs("s", 5)...)
		var (
			mu   sync.Mutex
			seen []string
			done = make(chan struct{})
		)
		p := must[*convoy.Processor](t)(convoy.NewProcessor(c, "q", func(ctx context.Context, m *convoy.ReceivedMessage) error {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, fmt.Sprintf("%d/%d", m.Seq, m.DeliveryCount))
			switch m.Seq {
			case 2:
				return errors.New("always fails")
			case 4:
				return convoy.DeadLetterError(errors.New("unparseable"))
			case 5:
				close(done)
			}
			return nil
		}, convoy.ProcessorOptions{AbandonDelay: -1}))
		startProcessor(t, p)
		recv(t, "the last message", done)
		waitFor(t, "the last completion", func() bool { return p.Stats().Completed == 3 })
		mu.Lock()
		got := strings.Join(seen, " ")
		mu.Unlock()
		if got != "1/1 2/1 2/2 3/1 4/1 5/1" {
			t.Fatalf("handled %s", got)
		}
		dl := must[[]*convoy.StoredMessage](t)(c.DeadLetters(ctx, "q", "s", convoy.DeadLetterCursor{}, 0))
		if len(dl) != 2 || dl[0].Seq != 2 || dl[0].DeadReason != convoy.ReasonMaxDeliveryCount || dl[1].Seq != 4 || dl[1].DeadReason != "unparseable" {
			t.Fatalf("dead letters %+v", dl)
		}
		if s := session(t, c, "q", "s"); s.Blocked || s.Pending != 0 {
			t.Fatalf("session blocked %v pending %d", s.Blocked, s.Pending)
		}
		evs := events(t, c, "q", "s")
		if len(evs) != 2 || evs[0].Type != convoy.EventMessageDeadLettered || evs[0].Alert || evs[1].Type != convoy.EventMessageDeadLettered {
			t.Fatalf("events %+v", evs)
		}
		if st := p.Stats(); st.DeadLettered != 2 || st.Abandoned != 2 {
			t.Fatalf("stats %+v", st)
		}
	})
}

// A Processor under block: the poison message halts its session (others go
// on); resubmitting resumes it in order.
func TestProcessorPoisonBlockAndResubmit(t *testing.T) {
	t.Parallel()
	drivers(t, func(t *testing.T, d store.Driver) {
		c := newClient(t, d)
		ctx := ctxT(t)
		if err := c.SetQueuePolicy(ctx, convoy.QueuePolicy{Name: "q", MaxDeliveryCount: 3}); err != nil {
			t.Fatal(err)
		}
		publish(t, c, "q", msgs("bad", 3)...)
		publish(t, c, "q", msgs("good", 3)...)
		var (
			fail atomic.Bool
			mu   sync.Mutex
			seen = map[string][]int64{}
		)
		fail.Store(true)
		p := must[*convoy.Processor](t)(convoy.NewProcessor(c, "q", func(ctx context.Context, m *convoy.ReceivedMessage) error {
			if m.SessionID == "bad" && m.Seq == 1 && fail.Load() {
				return errors.New("downstream refuses")
			}
			mu.Lock()
			seen[m.SessionID] = append(seen[m.SessionID], m.Seq)
			mu.Unlock()
			return nil
		}, convoy.ProcessorOptions{AbandonDelay: -1, IdleTimeout: 20 * time.Millisecond}))
		startProcessor(t, p)
		waitFor(t, "the good session and the block", func() bool {
			mu.Lock()
			n := len(seen["good"])
			mu.Unlock()
			s := session(t, c, "q", "bad")
			return n == 3 && s.Blocked
		})
		mu.Lock()
		if len(seen["bad"]) != 0 {
			t.Fatalf("blocked session handled %v", seen["bad"])
		}
		mu.Unlock()
		if evs := events(t, c, "q", "bad"); len(evs) != 1 || evs[0].Type != convoy.EventSessionBlocked || !evs[0].Alert {
			t.Fatalf("events %+v", evs)
		}
		fail.Store(false)
		if err := c.ResubmitDeadLetter(ctx, "q", "bad", 1); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the resubmitted session", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(seen["bad"]) == 3
		})
		mu.Lock()
		defer mu.Unlock()
		if fmt.Sprint(seen["bad"]) != "[1 2 3]" {
			t.Fatalf("after resubmit: %v", seen["bad"])
		}
	})
}
