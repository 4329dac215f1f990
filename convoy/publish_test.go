package convoy_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/drover-run/drover/convoy"
	"github.com/drover-run/drover/store"
)

func TestNewValidatesConfig(t *testing.T) {
	t.Parallel()
	if _, err := convoy.New(convoy.Config{}); !errors.Is(err, convoy.ErrInvalidConfig) || !strings.Contains(err.Error(), "Store") {
		t.Fatalf("no store: got %v", err)
	}
	d := newTestSQLite(t)
	for _, cfg := range []convoy.Config{
		{Store: d, InstanceID: "has space"},
		{Store: d, InstanceID: "a/b"},
		{Store: d, PollInterval: time.Microsecond},
		{Store: d, MaxBodyBytes: -1},
	} {
		if _, err := convoy.New(cfg); !errors.Is(err, convoy.ErrInvalidConfig) {
			t.Errorf("%+v: got %v, want ErrInvalidConfig", cfg, err)
		}
	}
}

func TestPublishRejectsBadInputAndStoresNothing(t *testing.T) {
	t.Parallel()
	d := newTestSQLite(t)
	c, err := convoy.New(convoy.Config{Store: d, MaxBodyBytes: 10})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ok := convoy.Message{SessionID: "s"}
	cases := []struct {
		name, queue string
		msg         convoy.Message
		want        error
		mention     string
	}{
		{"empty queue", "", ok, convoy.ErrInvalidQueue, "queue"},
		{"queue with two slashes", "a/b/c", ok, convoy.ErrInvalidQueue, `"a/b/c"`},
		{"queue of a bad namespace", "a b/c", ok, convoy.ErrInvalidQueue, `"a b/c"`},
		{"queue with space", "a b", ok, convoy.ErrInvalidQueue, `"a b"`},
		{"long queue", strings.Repeat("q", convoy.MaxQueueNameLen+1), ok, convoy.ErrInvalidQueue, "200"},
		{"empty session", "q", convoy.Message{}, convoy.ErrInvalidMessage, "SessionID"},
		{"long session", "q", convoy.Message{SessionID: strings.Repeat("s", convoy.MaxSessionIDLen+1)}, convoy.ErrInvalidMessage, "SessionID"},
		{"control character in session", "q", convoy.Message{SessionID: "a\nb"}, convoy.ErrInvalidMessage, "control"},
		{"bad UTF-8 session", "q", convoy.Message{SessionID: "a\xffb"}, convoy.ErrInvalidMessage, "UTF-8"},
		{"long message ID", "q", convoy.Message{SessionID: "s", MessageID: strings.Repeat("m", convoy.MaxMessageIDLen+1)}, convoy.ErrInvalidMessage, "MessageID"},
		{"body too large", "q", convoy.Message{SessionID: "s", Body: make([]byte, 11)}, convoy.ErrInvalidMessage, "MaxBodyBytes"},
		{"not before out of range", "q", convoy.Message{SessionID: "s", NotBefore: time.Date(1, 1, 1, 0, 0, 0, 1, time.UTC)}, convoy.ErrInvalidMessage, "NotBefore"},
	}
	for _, tc := range cases {
		_, err := c.Publish(ctx, tc.queue, tc.msg)
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.mention) {
			t.Errorf("%s: got %v, want %v mentioning %q", tc.name, err, tc.want, tc.mention)
		}
	}
	// One bad message in a batch rejects the batch, naming the message.
	_, err = c.Publish(ctx, "q", ok, convoy.Message{SessionID: ""})
	if !errors.Is(err, convoy.ErrInvalidMessage) || !strings.Contains(err.Error(), "message 1") {
		t.Errorf("batch: got %v", err)
	}
	qs, err := c.Queues(ctx)
	if err != nil || len(qs) != 0 {
		t.Fatalf("queues after bad publishes: %v, %v; want none", qs, err)
	}
	// An empty publish is a no-op.
	if out, err := c.Publish(ctx, "q"); err != nil || len(out) != 0 {
		t.Fatalf("empty publish: %v, %v", out, err)
	}
}

func TestSequenceNumbersAndDedupe(t *testing.T) {
	t.Parallel()
	drivers(t, func(t *testing.T, d store.Driver) {
		c := newClient(t, d)
		ctx := context.Background()
		out := publish(t, c, "q",
			convoy.Message{SessionID: "a", MessageID: "m1"},
			convoy.Message{SessionID: "b"},
			convoy.Message{SessionID: "a", MessageID: "m2"},
			convoy.Message{SessionID: "a", MessageID: "m1"}, // duplicate within the call
		)
		want := []convoy.Published{{"a", 1, false}, {"b", 1, false}, {"a", 2, false}, {"a", 1, true}}
		if fmt.Sprint(out) != fmt.Sprint(want) {
			t.Fatalf("got %v, want %v", out, want)
		}
		out = publish(t, c, "q", convoy.Message{SessionID: "a", MessageID: "m2"}, convoy.Message{SessionID: "a"})
		want = []convoy.Published{{"a", 2, true}, {"a", 3, false}}
		if fmt.Sprint(out) != fmt.Sprint(want) {
			t.Fatalf("got %v, want %v", out, want)
		}
		if n := len(peek(t, c, "q", "a")); n != 3 {
			t.Fatalf("session a holds %d messages, want 3", n)
		}
		// Without a dedupe window the same ID is stored again.
		if err := c.SetQueuePolicy(ctx, convoy.QueuePolicy{Name: "nodedupe", DedupeWindow: convoy.NoDedupe}); err != nil {
			t.Fatal(err)
		}
		publish(t, c, "nodedupe", convoy.Message{SessionID: "a", MessageID: "x"})
		out = publish(t, c, "nodedupe", convoy.Message{SessionID: "a", MessageID: "x"})
		if out[0].Duplicate || out[0].Seq != 2 {
			t.Fatalf("without dedupe: got %+v", out[0])
		}
		pol := must[convoy.QueuePolicy](t)(c.QueuePolicy(ctx, "nodedupe"))
		if pol.DedupeWindow != convoy.NoDedupe {
			t.Fatalf("policy dedupe window %s, want NoDedupe", pol.DedupeWindow)
		}
	})
}

func TestEndOfSequenceClosesTheSession(t *testing.T) {
	t.Parallel()
	drivers(t, func(t *testing.T, d store.Driver) {
		c := newClient(t, d)
		ctx := ctxT(t)
		publish(t, c, "q", convoy.Message{SessionID: "s", Body: []byte("1")},
			convoy.Message{SessionID: "s", Body: []byte("2"), MessageID: "last", EndOfSequence: true})
		_, err := c.Publish(ctx, "q", convoy.Message{SessionID: "s"}, convoy.Message{SessionID: "other"})
		if !errors.Is(err, convoy.ErrSessionClosed) || !strings.Contains(err.Error(), `"s"`) {
			t.Fatalf("publish after end of sequence: got %v, want ErrSessionClosed naming the session", err)
		}
		if _, err := c.Session(ctx, "q", "other"); !errors.Is(err, convoy.ErrNotFound) {
			t.Fatalf("the rejected call stored session other: %v", err)
		}
		// A retried end-of-sequence message is a duplicate, not an error.
		out := publish(t, c, "q", convoy.Message{SessionID: "s", MessageID: "last", EndOfSequence: true})
		if !out[0].Duplicate || out[0].Seq != 2 {
			t.Fatalf("retried end of sequence: %+v", out[0])
		}
		if s := session(t, c, "q", "s"); !s.Closed || s.Pending != 2 {
			t.Fatalf("session: closed %v pending %d", s.Closed, s.Pending)
		}

		r := must[*convoy.SessionReceiver](t)(c.AcceptNextSession(ctx, "q"))
		defer r.Close(ctx)
		for i := 1; i <= 2; i++ {
			m := must[*convoy.ReceivedMessage](t)(r.Receive(ctx))
			if m.Seq != int64(i) || m.EndOfSequence != (i == 2) {
				t.Fatalf("message %d: seq %d end %v", i, m.Seq, m.EndOfSequence)
			}
			if err := r.Complete(ctx, m, nil); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := r.Receive(ctx); !errors.Is(err, convoy.ErrSessionEnded) {
			t.Fatalf("receive after the end: got %v, want ErrSessionEnded", err)
		}
	})
}

// Producers racing on one session: sequence numbers stay gap-free (a
// rolled-back publish leaves no gap) and each producer's messages keep its
// order.
func TestRacingProducersOnOneSession(t *testing.T) {
	t.Parallel()
	drivers(t, func(t *testing.T, d store.Driver) {
		c := newClient(t, d)
		const producers, each = 8, 25
		var wg sync.WaitGroup
		errs := make(chan error, producers)
		for p := range producers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each {
					m := convoy.Message{SessionID: "hot", Body: fmt.Appendf(nil, "%d:%d", p, i)}
					if p == 0 && i%5 == 0 {
						// A publish in a transaction that rolls back.
						tx, _, rollback := beginTxNoT(d)
						if _, err := c.PublishTx(context.Background(), tx, "q", convoy.Message{SessionID: "hot", Body: []byte("rolled back")}); err != nil {
							errs <- err
							_ = rollback()
							return
						}
						if err := rollback(); err != nil {
							errs <- err
							return
						}
					}
					if _, err := c.Publish(context.Background(), "q", m); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		ms := peek(t, c, "q", "hot")
		if len(ms) != producers*each {
			t.Fatalf("%d messages, want %d", len(ms), producers*each)
		}
		last := map[int]int{}
		for i, m := range ms {
			if m.Seq != int64(i+1) {
				t.Fatalf("message %d has seq %d: gap", i, m.Seq)
			}
			var p, n int
			if _, err := fmt.Sscanf(string(m.Body), "%d:%d", &p, &n); err != nil {
				t.Fatalf("body %q: %v", m.Body, err)
			}
			if prev, ok := last[p]; ok && n != prev+1 {
				t.Fatalf("producer %d: message %d follows %d", p, n, prev)
			}
			last[p] = n
		}
		if s := session(t, c, "q", "hot"); s.NextSeq != producers*each || s.Pending != producers*each {
			t.Fatalf("session next seq %d pending %d", s.NextSeq, s.Pending)
		}
	})
}

func TestPublishTxCommitsAndRollsBackWithTheApplication(t *testing.T) {
	t.Parallel()
	drivers(t, func(t *testing.T, d store.Driver) {
		c := newClient(t, d)
		ctx := context.Background()
		tx, _, rollback := beginTx(t, d)
		if _, err := c.PublishTx(ctx, tx, "q", convoy.Message{SessionID: "s", Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
		if err := rollback(); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Session(ctx, "q", "s"); !errors.Is(err, convoy.ErrNotFound) {
			t.Fatalf("after rollback: %v, want ErrNotFound", err)
		}
		tx, commit, _ := beginTx(t, d)
		out, err := c.PublishTx(ctx, tx, "q", convoy.Message{SessionID: "s", Body: []byte("y")})
		if err != nil {
			t.Fatal(err)
		}
		if err := commit(); err != nil {
			t.Fatal(err)
		}
		if out[0].Seq != 1 {
			t.Fatalf("seq %d after a rolled-back publish, want 1", out[0].Seq)
		}
		if ms := peek(t, c, "q", "s"); len(ms) != 1 || string(ms[0].Body) != "y" {
			t.Fatalf("messages %v", ms)
		}
		if _, err := c.PublishTx(ctx, "not a tx", "q", convoy.Message{SessionID: "s"}); !errors.Is(err, store.ErrUnsupportedTx) {
			t.Fatalf("bad tx: %v", err)
		}
	})
}

func TestNotBeforeHoldsTheSession(t *testing.T) {
	t.Parallel()
	drivers(t, func(t *testing.T, d store.Driver) {
		clk := fakeClock()
		c := newClient(t, d, withClock(clk))
		ctx := ctxT(t)
		publish(t, c, "q", convoy.Message{SessionID: "s", Body: []byte("1"), NotBefore: clk.Now().Add(10 * time.Second)},
			convoy.Message{SessionID: "s", Body: []byte("2")})
		short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		_, err := c.AcceptNextSession(short, "q")
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("accept before not-before: %v", err)
		}
		r := must[*convoy.SessionReceiver](t)(c.AcceptSession(ctx, "q", "s"))
		defer r.Close(ctx)
		got := make(chan *convoy.ReceivedMessage, 1)
		go func() {
			m, err := r.Receive(ctx)
			if err != nil {
				t.Error(err)
			}
			got <- m
		}()
		select {
		case m := <-got:
			t.Fatalf("received %q before its not-before time", m.Body)
		case <-time.After(50 * time.Millisecond):
		}
		clk.Advance(10 * time.Second)
		m := recv(t, "message 1", got)
		if m == nil || m.Seq != 1 || string(m.Body) != "1" {
			t.Fatalf("got %+v, want message 1", m)
		}
	})
}
