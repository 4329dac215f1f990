package droverclient_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/droverclient"
	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/store"
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

// A long history comes back whole from a real server: every event once,
// in ID order, over several pages, with Limit and After honoured across
// pages.
func TestEventsManyEvents(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	c := e.client(t, submitTok)
	if _, _, err := c.SubmitTask(ctx, droverclient.SubmitRequest{Workflow: "external", ID: "busy"}); err != nil {
		t.Fatal(err)
	}
	// Once its step is dispatched to the remote agent (which never polls
	// here) the task's history stays still, so the lists compared below
	// cannot differ by an event the scheduler wrote in between.
	waitFor(t, "busy's step to be dispatched", func() bool {
		tk, err := e.d.Task(ctx, "busy")
		return err == nil && tk.ProcessState == drover.Processing && tk.Steps[0].ProcessState == drover.Processing
	})
	now := time.Now().UTC()
	evs := make([]*dt.Event, 2500)
	for i := range evs {
		evs[i] = &dt.Event{TaskID: "busy", StepIndex: -1, Type: "progress", State: dt.Processing,
			Alert: i%10 == 0, Actor: "test", Message: strconv.Itoa(i), CreatedAt: now}
	}
	if err := e.d.Store().InTx(ctx, func(ctx context.Context, x store.Executor) error {
		return x.EventInsertMany(ctx, &store.EventInsertManyParams{Events: evs})
	}); err != nil {
		t.Fatal(err)
	}
	history := func(q drover.EventQuery) []int64 {
		t.Helper()
		q.Limit = 1 << 30
		got, err := e.d.Events(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		out := make([]int64, len(got))
		for i, ev := range got {
			out[i] = ev.ID
		}
		return out
	}
	check := func(what string, got []droverclient.Event, want []int64) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: %d events, want %d", what, len(got), len(want))
		}
		for i := range want {
			if got[i].ID != want[i] {
				t.Fatalf("%s: event %d has ID %d, want %d", what, i, got[i].ID, want[i])
			}
		}
	}
	mine := history(drover.EventQuery{TaskID: "busy"})
	if len(mine) < 2500 {
		t.Fatalf("history of busy: %d events", len(mine))
	}
	// The Idle of old callers is ignored: one tiny idle wait does not cut
	// the list short.
	for _, p := range []droverclient.EventParams{{}, {Idle: time.Nanosecond}} {
		got, err := c.Events(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		check("all", got, history(drover.EventQuery{}))
	}
	got, err := c.Events(ctx, droverclient.EventParams{TaskID: "busy"})
	if err != nil {
		t.Fatal(err)
	}
	check("busy", got, mine)
	if got[len(got)-1].Message != "2499" || got[len(got)-1].Subject != "busy" || got[len(got)-1].CreatedAt.IsZero() {
		t.Fatalf("last event %+v", got[len(got)-1])
	}
	got, err = c.Events(ctx, droverclient.EventParams{TaskID: "busy", After: mine[499], Limit: 1500})
	if err != nil {
		t.Fatal(err)
	}
	check("after 500 limit 1500", got, mine[500:2000])
	got, err = c.Events(ctx, droverclient.EventParams{AlertsOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	check("alerts", got, history(drover.EventQuery{AlertsOnly: true}))
}

// eventServer is a server with n events in its history whose event
// stream goes silent after the first stall events (a busy server): a
// client reading the stream until it is idle gets a short list. It counts
// the requests of each kind.
func eventServer(t *testing.T, n, stall int) (url string, lists, streams *atomic.Int64) {
	lists, streams = new(atomic.Int64), new(atomic.Int64)
	event := func(id int) string {
		return fmt.Sprintf(`{"id":%d,"subject":"t","step_index":-1,"type":"x","state":"Pending","created_at":"2026-01-02T03:04:05Z"}`, id)
	}
	url = newStub(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Accept") != "application/json" {
			streams.Add(1)
			w.Header().Set("Content-Type", "text/event-stream")
			for id := 1; id <= stall; id++ {
				fmt.Fprintf(w, "id: %d\nevent: x\ndata: %s\n\n", id, event(id))
			}
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			return
		}
		lists.Add(1)
		after, err1 := strconv.Atoi(r.URL.Query().Get("after"))
		limit, err2 := strconv.Atoi(r.URL.Query().Get("limit"))
		if err1 != nil || err2 != nil || limit < 1 || limit > 1000 {
			t.Errorf("list query %q", r.URL.RawQuery)
			w.WriteHeader(400)
			return
		}
		var b strings.Builder
		b.WriteString(`{"events":[`)
		last := min(after+limit, n)
		for id := after + 1; id <= last; id++ {
			if id > after+1 {
				b.WriteByte(',')
			}
			b.WriteString(event(id))
		}
		next := 0
		if last-after == limit {
			next = last
		}
		fmt.Fprintf(&b, `],"next_after":%d}`, next)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(b.String()))
	})
	return url, lists, streams
}

// Events reads the JSON list, not the stream: on a server whose stream
// stalls it still returns every event, at once.
func TestEventsBusyServer(t *testing.T) {
	srv, lists, streams := eventServer(t, 2500, 1000)
	c, err := droverclient.New(srv, "")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	got, err := c.Events(ctx, droverclient.EventParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2500 {
		t.Fatalf("%d events, want 2500", len(got))
	}
	for i, ev := range got {
		if ev.ID != int64(i+1) || ev.Subject != "t" {
			t.Fatalf("event %d: %+v", i, ev)
		}
	}
	if lists.Load() != 3 || streams.Load() != 0 {
		t.Fatalf("%d list requests (want 3 pages of 1000), %d streams", lists.Load(), streams.Load())
	}
	// Limit across pages, and an exact multiple of the page size.
	got, err = c.Events(ctx, droverclient.EventParams{After: 100, Limit: 1234})
	if err != nil || len(got) != 1234 || got[0].ID != 101 || got[1233].ID != 1334 {
		t.Fatalf("after 100 limit 1234: %d events, %v", len(got), err)
	}
	srv2, _, _ := eventServer(t, 2000, 0)
	c2, _ := droverclient.New(srv2, "")
	if got, err = c2.Events(ctx, droverclient.EventParams{}); err != nil || len(got) != 2000 {
		t.Fatalf("2000 events: %d, %v", len(got), err)
	}
}

// A server that pages wrongly, or answers the list with a stream (one
// without the JSON list), is an error, not an endless loop or read.
func TestEventsBadServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for name, c := range map[string]struct{ ct, body string }{
		"next_after repeats":   {"application/json", `{"events":[{"id":1}],"next_after":0}`},
		"next_after backwards": {"application/json", `{"events":[],"next_after":1}`},
		"not JSON":             {"application/json", `<html>`},
		"stream":               {"text/event-stream", ""},
	} {
		calls := 0
		srv := newStub(t, func(w http.ResponseWriter, r *http.Request) {
			calls++
			w.Header().Set("Content-Type", c.ct)
			if c.ct == "text/event-stream" {
				_, _ = w.Write([]byte(": connected\n\n"))
				w.(http.Flusher).Flush()
				<-r.Context().Done()
				return
			}
			if name == "next_after repeats" {
				_, _ = w.Write([]byte(`{"events":[{"id":1}],"next_after":1}`))
				return
			}
			_, _ = w.Write([]byte(c.body))
		})
		cl, _ := droverclient.New(srv, "")
		if _, err := cl.Events(ctx, droverclient.EventParams{}); err == nil || ctx.Err() != nil || calls > 2 {
			t.Fatalf("%s: err %v after %d calls (ctx %v)", name, err, calls, ctx.Err())
		}
	}
}

// Follow reads a task's events until the final one; the stream is cut
// after two events and Follow resumes with Last-Event-ID, missing none and
// repeating none.
// echoTask starts the API, submits an echo task id and returns the env, a
// client with the submit token and a context ending with the test (30s
// at most).
func echoTask(t *testing.T, id string) (*env, *droverclient.Client, context.Context) {
	t.Helper()
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	c := e.client(t, submitTok)
	if _, _, err := c.SubmitTask(ctx, droverclient.SubmitRequest{Workflow: "echo", ID: id}); err != nil {
		t.Fatal(err)
	}
	return e, c, ctx
}

func TestFollowResumes(t *testing.T) {
	e, c, ctx := echoTask(t, "f-1")
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
			_, _ = w.Write([]byte(`{"error":{"code":"too_many_streams","message":"too many"}}`))
			return
		}
		if got := r.Header.Get("Last-Event-ID"); got != "7" {
			t.Errorf("Last-Event-ID %q", got)
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte(": connected\n\nid: 8\nevent: x\ndata: {\"id\":8,\n\nid: 9\nevent: x\ndata: {\"id\":9,\"type\":\"x\"}\n\n"))
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
			_, _ = w.Write([]byte(": connected\n\n"))
			w.(http.Flusher).Flush()
			<-r.Context().Done() // silent until the client goes away
			return
		}
		_, _ = w.Write([]byte("id: 1\nevent: x\ndata: {\"id\":1,\"type\":\"x\"}\n\n"))
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

// Following a task ends by itself once the task is final and every event
// was given to fn (the server's end event); KeepFollowing goes on.
func TestFollowEndsWhenTaskIsFinal(t *testing.T) {
	_, c, ctx := echoTask(t, "f-1")
	var got []droverclient.Event
	err := c.FollowEvents(ctx, droverclient.FollowOptions{TaskID: "f-1"}, func(ev *droverclient.Event) error {
		got = append(got, *ev)
		return nil
	})
	if err != nil {
		t.Fatalf("FollowEvents of a task: %v, want nil once it is final", err)
	}
	want, err := c.Events(ctx, droverclient.EventParams{TaskID: "f-1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) || len(got) < 4 || got[len(got)-1].State != droverclient.StateProcessed {
		t.Fatalf("followed %d events (last %+v), history has %d", len(got), got[len(got)-1], len(want))
	}
	// Resuming after the last event of the final task: nothing, nil.
	calls := 0
	if err := c.Follow(ctx, "f-1", want[len(want)-1].ID, func(*droverclient.Event) error { calls++; return nil }); err != nil || calls != 0 {
		t.Fatalf("Follow after the last event: %d events, %v", calls, err)
	}
	// KeepFollowing: still following after the final event, until ctx ends.
	short, cancelShort := context.WithCancel(ctx)
	var seen atomic.Int64
	done := make(chan error, 1)
	go func() {
		done <- c.FollowEvents(short, droverclient.FollowOptions{TaskID: "f-1", KeepFollowing: true}, func(ev *droverclient.Event) error {
			seen.Add(1)
			return nil
		})
	}()
	waitFor(t, "every event", func() bool { return seen.Load() == int64(len(want)) })
	select {
	case err := <-done:
		t.Fatalf("KeepFollowing returned %v after the final event", err)
	case <-time.After(300 * time.Millisecond): // 30 of the server's polls
	}
	cancelShort()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("KeepFollowing ended with %v, want context.Canceled", err)
	}
}
