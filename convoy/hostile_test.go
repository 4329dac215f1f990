package convoy_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/drover-run/drover/convoy"
	"github.com/drover-run/drover/internal/fault"
	"github.com/drover-run/drover/store"
)

// TestHostileDeadLetterReasons: a handler dead-letters with a reason
// holding a NUL character and invalid UTF-8, another with a reason the
// store refuses (the fault point stands in for a database refusing a
// value), while the other sessions' messages complete, settled in the same
// rounds. Every healthy message completes; the two are dead-lettered with
// readable reasons, on every driver. A consumer giving such a reason
// itself is told.
func TestHostileDeadLetterReasons(t *testing.T) {
	t.Parallel()
	drivers(t, func(t *testing.T, d store.Driver) {
		marker := "refuse-convoy-" + t.Name()
		defer fault.RefuseText(marker)()
		c := newClient(t, d)
		ctx := ctxT(t)
		// Each bad session with healthy ones in a queue of its own; every
		// handler waits for all of the queue's, so their settles meet in a
		// round.
		for _, bad := range []string{"nul", "refused"} {
			queue := "q-" + bad
			if err := c.SetQueuePolicy(ctx, convoy.QueuePolicy{Name: queue, Poison: convoy.PoisonSkip}); err != nil {
				t.Fatal(err)
			}
			sessions := []string{bad, "ok-1", "ok-2", "ok-3"}
			for _, s := range sessions {
				publish(t, c, queue, msgs(s, 1)...)
			}
			var arrived sync.WaitGroup
			arrived.Add(len(sessions))
			p := must[*convoy.Processor](t)(convoy.NewProcessor(c, queue, func(ctx context.Context, m *convoy.ReceivedMessage) error {
				arrived.Done()
				arrived.Wait()
				switch m.SessionID {
				case "nul":
					return convoy.DeadLetterError(errors.New("bad \x00 order \xff"))
				case "refused":
					return convoy.DeadLetterError(errors.New("no " + marker))
				}
				return nil
			}, convoy.ProcessorOptions{AbandonDelay: -1}))
			startProcessor(t, p)
			waitFor(t, "every message of "+queue+" settled", func() bool {
				for _, s := range sessions {
					for _, m := range peek(t, c, queue, s) {
						if !m.Dead {
							return false
						}
					}
				}
				return true
			})
			dl, err := c.DeadLetters(ctx, queue, "", convoy.DeadLetterCursor{}, 100)
			if err != nil {
				t.Fatal(err)
			}
			if len(dl) != 1 || dl[0].SessionID != bad {
				t.Fatalf("%s: dead letters %+v, want the one of %s", queue, dl, bad)
			}
			r := dl[0].DeadReason
			switch bad {
			case "nul":
				if !utf8.ValidString(r) || strings.ContainsRune(r, 0) || !strings.HasPrefix(r, "bad \uFFFD order \uFFFD [drover replaced") {
					t.Errorf("nul: reason %q, want the handler's made storable and marked", r)
				}
			case "refused":
				if !strings.HasPrefix(r, "the dead-letter reason could not be stored: ") {
					t.Errorf("refused: reason %q, want it to say the reason could not be stored", r)
				}
			}
		}

		// A consumer is told.
		publish(t, c, "q-own", msgs("own", 1)...)
		r, err := c.AcceptSession(ctx, "q-own", "own")
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close(context.Background())
		m, err := r.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.DeadLetter(ctx, m, "bad\x00"); !errors.Is(err, convoy.ErrInvalidReason) || !strings.Contains(err.Error(), `reason "bad\x00": contains the NUL character`) {
			t.Errorf("DeadLetter with a NUL in the reason: %v, want ErrInvalidReason naming it", err)
		}
		if err := r.DeadLetter(ctx, m, "bad order"); err != nil {
			t.Errorf("DeadLetter after the refused one: %v", err)
		}
	})
}
