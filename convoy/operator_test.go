package convoy_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/drover-run/drover/convoy"
	"github.com/drover-run/drover/store"
)

func TestQueuePolicies(t *testing.T) {
	t.Parallel()
	drivers(t, func(t *testing.T, d store.Driver) {
		c := newClient(t, d)
		ctx := context.Background()
		if _, err := c.QueuePolicy(ctx, "q"); !errors.Is(err, convoy.ErrNotFound) {
			t.Fatalf("policy of an unknown queue: %v", err)
		}
		publish(t, c, "q", msgs("s", 1)...)
		pol := must[convoy.QueuePolicy](t)(c.QueuePolicy(ctx, "q"))
		want := convoy.QueuePolicy{Name: "q", MaxDeliveryCount: 10, Poison: convoy.PoisonBlock, DedupeWindow: 10 * time.Minute, LockDuration: 30 * time.Second}
		if pol != want {
			t.Fatalf("default policy %+v, want %+v", pol, want)
		}
		set := convoy.QueuePolicy{Name: "q", MaxDeliveryCount: 3, Poison: convoy.PoisonSkip, DedupeWindow: time.Hour, LockDuration: 5 * time.Second}
		if err := c.SetQueuePolicy(ctx, set); err != nil {
			t.Fatal(err)
		}
		if pol := must[convoy.QueuePolicy](t)(c.QueuePolicy(ctx, "q")); pol != set {
			t.Fatalf("policy %+v, want %+v", pol, set)
		}
		for _, bad := range []convoy.QueuePolicy{
			{Name: ""},
			{Name: "q", MaxDeliveryCount: -1},
			{Name: "q", Poison: "drop"},
			{Name: "q", LockDuration: time.Millisecond},
			{Name: "q", LockDuration: 48 * time.Hour},
		} {
			err := c.SetQueuePolicy(ctx, bad)
			if !errors.Is(err, convoy.ErrInvalidPolicy) && !errors.Is(err, convoy.ErrInvalidQueue) {
				t.Errorf("%+v: got %v", bad, err)
			}
		}
		if pol := must[convoy.QueuePolicy](t)(c.QueuePolicy(ctx, "q")); pol != set {
			t.Fatalf("a rejected policy changed the queue: %+v", pol)
		}
		publish(t, c, "a-first", msgs("s", 1)...)
		qs := must[[]*convoy.Queue](t)(c.Queues(ctx))
		if len(qs) != 2 || qs[0].Name != "a-first" || qs[1].Name != "q" || qs[1].MaxDeliveryCount != 3 {
			t.Fatalf("queues %+v", qs)
		}
		// A page at a time.
		if qs := must[[]*convoy.Queue](t)(c.QueuesAfter(ctx, "", 1)); len(qs) != 1 || qs[0].Name != "a-first" {
			t.Fatalf("first page %+v", qs)
		}
		if qs := must[[]*convoy.Queue](t)(c.QueuesAfter(ctx, "a-first", 0)); len(qs) != 1 || qs[0].Name != "q" {
			t.Fatalf("page after a-first %+v", qs)
		}
	})
}

func TestOperatorListings(t *testing.T) {
	t.Parallel()
	drivers(t, func(t *testing.T, d store.Driver) {
		c := newClient(t, d)
		ctx := ctxT(t)
		if err := c.SetQueuePolicy(ctx, convoy.QueuePolicy{Name: "q", Poison: convoy.PoisonSkip}); err != nil {
			t.Fatal(err)
		}
		for i := range 5 {
			publish(t, c, "q", msgs(fmt.Sprintf("s%d", i), 4)...)
		}
		// Sessions, paged.
		var ids []string
		after := ""
		for {
			page := must[[]*convoy.Session](t)(c.Sessions(ctx, "q", after, 2))
			if len(page) == 0 {
				break
			}
			for _, s := range page {
				ids = append(ids, s.ID)
			}
			after = page[len(page)-1].ID
		}
		if fmt.Sprint(ids) != "[s0 s1 s2 s3 s4]" {
			t.Fatalf("sessions %v", ids)
		}
		if s := session(t, c, "q", "s2"); s.NextSeq != 4 || s.Pending != 4 || s.ReadyAt == nil {
			t.Fatalf("session %+v", s)
		}
		if _, err := c.Session(ctx, "q", "nope"); !errors.Is(err, convoy.ErrNotFound) {
			t.Fatalf("unknown session: %v", err)
		}
		// Dead-letter messages 2 and 3 of s1 and s3 (skip: the sessions go on).
		for _, id := range []string{"s1", "s3"} {
			r := must[*convoy.SessionReceiver](t)(c.AcceptSession(ctx, "q", id))
			for seq := 1; seq <= 3; seq++ {
				m := must[*convoy.ReceivedMessage](t)(r.Receive(ctx))
				if seq == 1 {
					err := r.Complete(ctx, m, nil)
					if err != nil {
						t.Fatal(err)
					}
					continue
				}
				if err := r.DeadLetter(ctx, m, fmt.Sprintf("bad %d", seq)); err != nil {
					t.Fatal(err)
				}
			}
			r.Close(ctx)
		}
		// Peek shows the gap (dead ones included), from a sequence number on.
		ms := must[[]*convoy.StoredMessage](t)(c.Peek(ctx, "q", "s1", 2, 0))
		if len(ms) != 3 || ms[0].Seq != 2 || !ms[0].Dead || ms[0].DeadReason != "bad 2" || ms[2].Dead {
			t.Fatalf("peek %+v", ms)
		}
		// Dead letters of the queue, paged by cursor.
		var got []string
		var cur convoy.DeadLetterCursor
		for {
			page := must[[]*convoy.StoredMessage](t)(c.DeadLetters(ctx, "q", "", cur, 3))
			if len(page) == 0 {
				break
			}
			for _, m := range page {
				got = append(got, fmt.Sprintf("%s/%d", m.SessionID, m.Seq))
			}
			last := page[len(page)-1]
			cur = convoy.DeadLetterCursor{SessionID: last.SessionID, Seq: last.Seq}
		}
		if fmt.Sprint(got) != "[s1/2 s1/3 s3/2 s3/3]" {
			t.Fatalf("dead letters %v", got)
		}
		if err := c.DiscardDeadLetter(ctx, "q", "s1", 2); err != nil {
			t.Fatal(err)
		}
		if err := c.ResubmitDeadLetter(ctx, "q", "s1", 3); err != nil {
			t.Fatal(err)
		}
		if dl := must[[]*convoy.StoredMessage](t)(c.DeadLetters(ctx, "q", "s1", convoy.DeadLetterCursor{}, 0)); len(dl) != 0 {
			t.Fatalf("s1 dead letters after resolving: %v", dl)
		}
		// The resubmitted message is the head again: before message 4.
		r := must[*convoy.SessionReceiver](t)(c.AcceptSession(ctx, "q", "s1"))
		defer r.Close(ctx)
		m := must[*convoy.ReceivedMessage](t)(r.Receive(ctx))
		if m.Seq != 3 || m.DeliveryCount != 1 {
			t.Fatalf("after resubmit: seq %d count %d", m.Seq, m.DeliveryCount)
		}
		var types []string
		for _, e := range events(t, c, "q", "s1") {
			types = append(types, string(e.Type))
		}
		if fmt.Sprint(types) != "[message_dead_lettered message_dead_lettered dead_letter_discarded dead_letter_resubmitted]" {
			t.Fatalf("events %v", types)
		}
		if _, err := c.Sessions(ctx, "a/b/c", "", 0); !errors.Is(err, convoy.ErrInvalidQueue) {
			t.Fatalf("bad queue: %v", err)
		}
	})
}
