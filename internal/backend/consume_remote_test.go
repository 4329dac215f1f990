package backend

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/convoy"
	"github.com/drover-run/drover/droverclient"
	"github.com/drover-run/drover/internal/httpapi"
	"github.com/drover-run/drover/internal/httpapi/apitest"
	"github.com/drover-run/drover/internal/testutil"
)

const operatorTok = "operator-token-0123456789"

// slowQueue is a queue "q" with one message and the lock duration lock,
// served by a real API server that takes delay to begin each request (a
// loaded server, or one far away), and the remote backend on it.
func slowQueue(t *testing.T, delay, lock time.Duration) Queues {
	t.Helper()
	ctx := context.Background()
	opts := httpapi.Options{Rate: -1, Tokens: []httpapi.Token{{Secret: operatorTok, Scopes: []httpapi.Scope{httpapi.ScopeOperator}}}}
	s := apitest.Start(t, drover.Config{Store: testutil.SQLite(t), PollInterval: 10 * time.Millisecond}, opts,
		func(h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				t := time.NewTimer(delay)
				defer t.Stop()
				select {
				case <-t.C:
					h.ServeHTTP(w, r)
				case <-r.Context().Done():
				}
			})
		})
	if err := s.Convoy.SetQueuePolicy(ctx, convoy.QueuePolicy{Name: "q", LockDuration: lock, MaxDeliveryCount: 1000}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Convoy.Publish(ctx, "q", convoy.Message{SessionID: "s", Body: []byte(`{"n":1}`)}); err != nil {
		t.Fatal(err)
	}
	c, err := droverclient.New(s.URL, operatorTok)
	if err != nil {
		t.Fatal(err)
	}
	q, err := OpenQueues(ctx, nil, &Remote{Client: c, URL: s.URL, HasToken: true}, 0)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// A round trip of over two thirds of the lock duration: renewing at a
// third of it would reach the server after the lock ended, so the
// session would be lost before its message is completed, again and
// again. Renewals sent early by the measured round trip keep it. (The
// lock leaves 700ms for a loaded machine's own delays.)
func TestRemoteConsumeRenewsByTheRoundTrip(t *testing.T) {
	t.Parallel()
	q := slowQueue(t, 1700*time.Millisecond, 2400*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := Consume(ctx, q.Consumer("q"), ConsumeOptions{Sessions: 1, Count: 1})
	if err != nil || st.Completed != 1 || st.Sessions != 1 {
		t.Fatalf("Consume = %+v, %v; want the message completed in the first session", st, err)
	}
}

// A round trip longer than the lock: no session can be held long enough
// to complete a message. The consumer backs off its accepts and, after a
// few lost sessions, stops with an error saying so, instead of accepting
// the session over and over until interrupted.
func TestRemoteConsumeRefusesALockShorterThanTheRoundTrip(t *testing.T) {
	t.Parallel()
	q := slowQueue(t, 200*time.Millisecond, 150*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := Consume(ctx, q.Consumer("q"), ConsumeOptions{Sessions: 2, Count: 1})
	if !errors.Is(err, ErrLockTooShort) {
		t.Fatalf("Consume = %+v, %v; want %v", st, err, ErrLockTooShort)
	}
	if st.Completed != 0 || st.Sessions > lostBeforeRefusing+1 {
		t.Errorf("stats %+v: want nothing completed and at most %d sessions accepted", st, lostBeforeRefusing+1)
	}
	t.Log(err)
}
