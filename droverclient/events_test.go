package droverclient_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drover-run/drover/droverclient"
)

func TestEventsList(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	c := e.client(t, submitTok)
	for _, id := range []string{"e-1", "e-2"} {
		if _, _, err := c.SubmitTask(ctx, droverclient.SubmitRequest{Workflow: "echo", ID: id, Input: json.RawMessage(`1`)}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "both Processed", func() bool {
		p, err := c.Tasks(ctx, droverclient.ListParams{States: []string{"Processed"}})
		return err == nil && len(p.Tasks) == 2
	})
	all, err := c.Events(ctx, droverclient.EventParams{})
	if err != nil {
		t.Fatal(err)
	}
	mine, err := c.Events(ctx, droverclient.EventParams{TaskID: "e-1"})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for i, ev := range all {
		if i > 0 && ev.ID <= all[i-1].ID {
			t.Fatalf("events out of order: %+v", all)
		}
		if ev.Subject == "e-1" {
			n++
		}
	}
	if len(mine) == 0 || n != len(mine) || mine[len(mine)-1].State != "Processed" {
		t.Fatalf("e-1: %d of %d events; %+v", len(mine), n, mine)
	}
	for _, ev := range mine {
		if ev.Subject != "e-1" || ev.Type == "" || ev.CreatedAt.IsZero() {
			t.Fatalf("event: %+v", ev)
		}
	}
	// After and Limit.
	rest, err := c.Events(ctx, droverclient.EventParams{TaskID: "e-1", After: mine[0].ID, Limit: 2})
	if err != nil || len(rest) != 2 || rest[0].ID != mine[1].ID {
		t.Fatalf("after %d limit 2: %+v %v", mine[0].ID, rest, err)
	}
	_, err = c.Events(ctx, droverclient.EventParams{TaskID: "nope"})
	wantAPIError(t, err, 404, "not_found", droverclient.ErrNotFound)
	_, err = e.client(t, "").Events(ctx, droverclient.EventParams{})
	wantAPIError(t, err, 401, "unauthorized", droverclient.ErrUnauthorized)
}

// Follow reads a task's events until the final one; the stream is cut
// after two events and Follow resumes with Last-Event-ID, missing none and
// repeating none.
func TestFollowResumes(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := e.client(t, submitTok)
	if _, _, err := c.SubmitTask(ctx, droverclient.SubmitRequest{Workflow: "echo", ID: "f-1"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "f-1 Processed", func() bool {
		tk, err := c.Task(ctx, "f-1")
		return err == nil && tk.Final()
	})
	want, err := c.Events(ctx, droverclient.EventParams{TaskID: "f-1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(want) < 4 {
		t.Fatalf("only %d events", len(want))
	}

	e.cut.Store(2)
	var got []droverclient.Event
	var reconnects []error
	done := errors.New("done")
	err = c.FollowEvents(ctx, droverclient.FollowOptions{TaskID: "f-1", MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond,
		OnReconnect: func(err error, wait time.Duration) { reconnects = append(reconnects, err) }},
		func(ev *droverclient.Event) error {
			got = append(got, *ev)
			if ev.ID == want[len(want)-1].ID {
				return done
			}
			return nil
		})
	if !errors.Is(err, done) {
		t.Fatalf("FollowEvents returned %v", err)
	}
	if len(reconnects) != 1 {
		t.Fatalf("reconnects: %v", reconnects)
	}
	if len(got) != len(want) {
		t.Fatalf("got %d events, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i].ID != want[i].ID {
			t.Fatalf("event %d: id %d, want %d", i, got[i].ID, want[i].ID)
		}
	}

	// Follow from the middle; new events of a resubmitted... here: the
	// context ending stops it with ctx.Err().
	short, cancelShort := context.WithCancel(ctx)
	var first int64
	err = c.Follow(short, "f-1", want[1].ID, func(ev *droverclient.Event) error {
		if first == 0 {
			first = ev.ID
		}
		cancelShort()
		return nil
	})
	if !errors.Is(err, context.Canceled) || first != want[2].ID {
		t.Fatalf("Follow after %d: first %d, err %v", want[1].ID, first, err)
	}

	// Errors that retrying cannot fix come back at once.
	err = c.Follow(ctx, "nope", 0, func(*droverclient.Event) error { return nil })
	wantAPIError(t, err, 404, "not_found", droverclient.ErrNotFound)
	err = e.client(t, "wrong-token-0123456789").Follow(ctx, "", 0, func(*droverclient.Event) error { return nil })
	wantAPIError(t, err, 401, "unauthorized", droverclient.ErrUnauthorized)
}

// Follow retries a server that is busy (503 with Retry-After) and gives up
// at once on one it cannot reach at first.
func TestFollowRetriesUnavailable(t *testing.T) {
	calls := 0
	srv := newStub(t, func(w http.ResponseWriter, r *http.Request) {
		calls++
		if calls == 1 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(`{"error":{"code":"too_many_streams","message":"too many"}}`))
			return
		}
		if got := r.Header.Get("Last-Event-ID"); got != "7" {
			t.Errorf("Last-Event-ID %q", got)
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write([]byte(": connected\n\nid: 8\nevent: x\ndata: {\"id\":8,\n\nid: 9\nevent: x\ndata: {\"id\":9,\"type\":\"x\"}\n\n"))
	})
	c, err := droverclient.New(srv, "")
	if err != nil {
		t.Fatal(err)
	}
	var waits []time.Duration
	err = c.FollowEvents(context.Background(), droverclient.FollowOptions{After: 7, MinBackoff: time.Millisecond,
		OnReconnect: func(err error, d time.Duration) { waits = append(waits, d) }},
		func(*droverclient.Event) error { return nil })
	// The second answer holds a malformed event: an error, after one retry.
	if err == nil || calls != 2 || len(waits) != 1 {
		t.Fatalf("err %v calls %d waits %v", err, calls, waits)
	}

	c, _ = droverclient.New("http://127.0.0.1:1", "")
	if err := c.Follow(context.Background(), "", 0, func(*droverclient.Event) error { return nil }); err == nil {
		t.Fatal("unreachable server: no error")
	}
}

// A stream on which nothing arrives (a dead connection that did not close)
// is dropped after StallTimeout and reconnected.
func TestFollowDropsStalledStream(t *testing.T) {
	var calls atomic.Int64
	srv := newStub(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		if calls.Add(1) == 1 {
			w.Write([]byte(": connected\n\n"))
			w.(http.Flusher).Flush()
			<-r.Context().Done() // silent until the client goes away
			return
		}
		w.Write([]byte("id: 1\nevent: x\ndata: {\"id\":1,\"type\":\"x\"}\n\n"))
	})
	c, err := droverclient.New(srv, "")
	if err != nil {
		t.Fatal(err)
	}
	var reasons []string
	done := errors.New("done")
	err = c.FollowEvents(context.Background(), droverclient.FollowOptions{StallTimeout: 100 * time.Millisecond, MinBackoff: time.Millisecond,
		OnReconnect: func(err error, d time.Duration) { reasons = append(reasons, err.Error()) }},
		func(ev *droverclient.Event) error {
			if ev.ID != 1 || ev.Type != "x" {
				t.Errorf("event %+v", ev)
			}
			return done
		})
	if !errors.Is(err, done) || calls.Load() != 2 || len(reasons) != 1 || !strings.Contains(reasons[0], "nothing arrived") {
		t.Fatalf("err %v, calls %d, reasons %q", err, calls.Load(), reasons)
	}
}
