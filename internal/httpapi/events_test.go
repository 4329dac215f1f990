package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/store"
)

// sseFrame is one parsed Server-Sent Events frame; comment frames have
// only comment set.
type sseFrame struct {
	id      int64
	event   string
	data    map[string]any
	comment string
}

type sseStream struct {
	t      *testing.T
	resp   *http.Response
	frames chan sseFrame
	cancel context.CancelFunc
	done   chan struct{} // closed when the body ends
	// stop ends the reader even while it waits to hand over a frame
	// nobody reads (a test that never drains a busy stream).
	stop     chan struct{}
	stopOnce sync.Once
}

// openStream opens an event stream at target; lastID "" sends no
// Last-Event-ID. It fails unless the answer is a 200 event stream.
func openStream(t *testing.T, srv *httptest.Server, target, token, lastID string) *sseStream {
	t.Helper()
	s, resp := tryStream(t, srv, target, token, lastID)
	if resp != nil {
		t.Fatalf("status %d, want 200: %s", resp.status, resp.body)
	}
	return s
}

// tryStream opens an event stream; on a non-200 answer it returns the
// decoded error response instead.
func tryStream(t *testing.T, srv *httptest.Server, target, token, lastID string) (*sseStream, *response) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+target, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		defer cancel()
		defer resp.Body.Close()
		var b strings.Builder
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			b.WriteString(sc.Text())
		}
		return nil, decodeResponse(t, resp.StatusCode, resp.Header, []byte(b.String()))
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		cancel()
		t.Fatalf("Content-Type %q", ct)
	}
	s := &sseStream{t: t, resp: resp, frames: make(chan sseFrame, 1000), cancel: cancel, done: make(chan struct{}), stop: make(chan struct{})}
	go func() {
		defer close(s.done)
		sc := bufio.NewScanner(resp.Body)
		var f sseFrame
		empty := true
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if !empty {
					select {
					case s.frames <- f:
					case <-s.stop:
						return
					}
				}
				f, empty = sseFrame{}, true
			case strings.HasPrefix(line, ":"):
				f.comment, empty = strings.TrimSpace(line[1:]), false
			case strings.HasPrefix(line, "id: "):
				f.id, _ = strconv.ParseInt(line[4:], 10, 64)
				empty = false
			case strings.HasPrefix(line, "event: "):
				f.event, empty = line[7:], false
			case strings.HasPrefix(line, "data: "):
				if err := json.Unmarshal([]byte(line[6:]), &f.data); err != nil {
					t.Errorf("data is not JSON: %q", line)
				}
				empty = false
			default:
				t.Errorf("unexpected line %q", line)
			}
		}
	}()
	t.Cleanup(s.close)
	return s, nil
}

func (s *sseStream) close() {
	s.stopOnce.Do(func() { close(s.stop) })
	s.cancel()
	s.resp.Body.Close()
	<-s.done
}

// next returns the next event (skipping comments).
func (s *sseStream) next() sseFrame {
	s.t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case f := <-s.frames:
			if f.comment != "" {
				continue
			}
			return f
		case <-s.done:
			select {
			case f := <-s.frames:
				if f.comment == "" {
					return f
				}
				continue
			default:
			}
			s.t.Fatal("stream ended while waiting for an event")
		case <-timeout:
			s.t.Fatal("no event within 20s")
		}
	}
}

// until reads events until one satisfies stop and returns them all.
func (s *sseStream) until(stop func(sseFrame) bool) []sseFrame {
	s.t.Helper()
	var out []sseFrame
	for {
		f := s.next()
		out = append(out, f)
		if stop(f) {
			return out
		}
	}
}

func isFinal(task string) func(sseFrame) bool {
	return func(f sseFrame) bool {
		return f.data["subject"] == task && (f.event == "processed" || f.event == "error" || f.event == "cancelled")
	}
}

func ids(fs []sseFrame) []int64 {
	var out []int64
	for _, f := range fs {
		out = append(out, f.id)
	}
	return out
}

func (e *testEnv) eventIDs(q drover.EventQuery) []int64 {
	e.t.Helper()
	q.Limit = 1 << 30
	evs, err := e.d.Events(context.Background(), q)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []int64
	for _, ev := range evs {
		out = append(out, ev.ID)
	}
	return out
}

func checkIncreasing(t *testing.T, got []int64) {
	t.Helper()
	for i := 1; i < len(got); i++ {
		if got[i] <= got[i-1] {
			t.Fatalf("event IDs not strictly increasing (duplicate or out of order): %v", got)
		}
	}
}

func TestEventStream(t *testing.T) {
	drivers(t, func(t *testing.T, open func(t *testing.T) store.Driver) {
		e := newEnv(t, open(t), Options{EventPollInterval: 10 * time.Millisecond})
		srv := httptest.NewServer(e.h)
		t.Cleanup(srv.Close)

		// A stream of all tasks opened first sees the task's events live.
		all := openStream(t, srv, "/v1/events", submitTok, "")
		e.do("POST", "/v1/tasks", submitTok, `{"workflow":"echo","id":"t1","input":{"n":1}}`).must(t, 201)
		live := all.until(isFinal("t1"))
		checkIncreasing(t, ids(live))
		if want := e.eventIDs(drover.EventQuery{}); !slices.Equal(ids(live), want) {
			t.Fatalf("live stream %v, history %v", ids(live), want)
		}
		for _, f := range live {
			if f.data["id"] != float64(f.id) || f.data["type"] != f.event || f.data["subject"] != "t1" {
				t.Fatalf("frame id %d event %q data %v", f.id, f.event, f.data)
			}
		}
		if live[0].event != "submitted" || len(live) < 4 {
			t.Fatalf("events %v", live)
		}

		// The task's stream from the start replays its history.
		one := openStream(t, srv, "/v1/tasks/t1/events", submitTok, "")
		got := one.until(isFinal("t1"))
		if want := e.eventIDs(drover.EventQuery{TaskID: "t1"}); !slices.Equal(ids(got), want) {
			t.Fatalf("task stream %v, history %v", ids(got), want)
		}

		// Reconnecting with Last-Event-ID: exactly the events after it.
		mid := got[len(got)/2].id
		re := openStream(t, srv, "/v1/tasks/t1/events", operatorTok, strconv.FormatInt(mid, 10))
		rest := re.until(isFinal("t1"))
		if want := e.eventIDs(drover.EventQuery{TaskID: "t1", AfterID: mid}); !slices.Equal(ids(rest), want) {
			t.Fatalf("after %d: %v, want %v", mid, ids(rest), want)
		}
		// ?after= works the same; the header wins over it.
		ra := openStream(t, srv, "/v1/events?after="+strconv.FormatInt(mid, 10), submitTok, "")
		rh := openStream(t, srv, "/v1/events?after=0", submitTok, strconv.FormatInt(mid, 10))
		// A second task: the resumed all-tasks streams get the rest of
		// the first and all of the second, each event once.
		e.do("POST", "/v1/tasks", submitTok, `{"workflow":"echo","id":"t2"}`).must(t, 201)
		for _, s := range []*sseStream{ra, rh} {
			fs := s.until(isFinal("t2"))
			checkIncreasing(t, ids(fs))
			if want := e.eventIDs(drover.EventQuery{AfterID: mid}); !slices.Equal(ids(fs), want) {
				t.Fatalf("resumed: %v, want %v", ids(fs), want)
			}
		}
		// The first task's stream got nothing of t2: after t1's final
		// event only its end.
		select {
		case f := <-one.frames:
			if f.comment == "" && f.event != "end" {
				t.Fatalf("task stream got another task's event: %+v", f)
			}
		default:
		}
	})
}

// A task's stream ends once the task is final: its last events, then an
// "end" event, then the server closes it; a client that comes back with
// the last event's ID gets 204 (an EventSource then stops reconnecting).
// follow=true keeps the stream open after the end.
func TestTaskStreamEndsWhenFinal(t *testing.T) {
	drivers(t, func(t *testing.T, open func(t *testing.T) store.Driver) {
		e := newEnv(t, open(t), Options{EventPollInterval: 10 * time.Millisecond})
		srv := httptest.NewServer(e.h)
		t.Cleanup(srv.Close)
		e.do("POST", "/v1/tasks", submitTok, `{"workflow":"external","id":"x"}`).must(t, 201)
		s := openStream(t, srv, "/v1/tasks/x/events", submitTok, "")
		kept := openStream(t, srv, "/v1/tasks/x/events?follow=true", submitTok, "")
		if f := s.next(); f.event != "submitted" {
			t.Fatalf("first event %+v", f)
		}
		e.do("POST", "/v1/tasks/x/cancel", operatorTok, `{"reason":"test"}`).must(t, 200)
		got := s.until(func(f sseFrame) bool { return f.event == "end" })
		end := got[len(got)-1]
		if end.id != 0 || end.data["subject"] != "x" || end.data["state"] != "Cancelled" {
			t.Fatalf("end frame %+v", end)
		}
		events := got[:len(got)-1]
		history := e.eventIDs(drover.EventQuery{TaskID: "x"})
		if want := history[1:]; !slices.Equal(ids(events), want) {
			t.Fatalf("before the end: %v, want the rest of the history %v", ids(events), want)
		}
		select {
		case <-s.done:
		case <-time.After(20 * time.Second):
			t.Fatal("the stream stayed open after its end event")
		}
		last := strconv.FormatInt(history[len(history)-1], 10)
		// Resuming at the last event: 204, nothing to wait for.
		if _, r := tryStream(t, srv, "/v1/tasks/x/events", submitTok, last); r == nil || r.status != http.StatusNoContent {
			t.Fatalf("resume after the last event of a final task: %+v, want 204", r)
		}
		// Resuming earlier: the rest, then the end.
		re := openStream(t, srv, "/v1/tasks/x/events", submitTok, strconv.FormatInt(history[0], 10))
		rest := re.until(func(f sseFrame) bool { return f.event == "end" })
		if !slices.Equal(ids(rest[:len(rest)-1]), history[1:]) {
			t.Fatalf("resumed: %v, want %v", ids(rest), history[1:])
		}
		// follow=true: the stream goes on after the task is final, and
		// sees it resubmitted.
		kept.until(func(f sseFrame) bool { return f.event == "cancelled" })
		e.do("POST", "/v1/tasks/x/resubmit", operatorTok, ``).must(t, 200)
		if f := kept.next(); f.event != "resubmitted" {
			t.Fatalf("after the resubmission: %+v", f)
		}
		if _, r := tryStream(t, srv, "/v1/tasks/x/events?follow=true", submitTok, last); r != nil {
			t.Fatalf("follow=true on a final task: %d, want the stream", r.status)
		}
	})
}

func TestEventStreamAlerts(t *testing.T) {
	e := newEnv(t, testutilSQLite(t), Options{EventPollInterval: 10 * time.Millisecond})
	srv := httptest.NewServer(e.h)
	t.Cleanup(srv.Close)
	s := openStream(t, srv, "/v1/events?alerts=true", submitTok, "")
	e.do("POST", "/v1/tasks", submitTok, `{"workflow":"echo","id":"ok"}`).must(t, 201)
	e.waitState("ok", "Processed")
	e.do("POST", "/v1/tasks", submitTok, `{"workflow":"fail","id":"bad"}`).must(t, 201)
	f := s.next()
	if f.data["subject"] != "bad" || f.data["alert"] != true {
		t.Fatalf("first alert: %+v", f)
	}
	want := e.eventIDs(drover.EventQuery{AlertsOnly: true})
	if len(want) == 0 || want[0] != f.id {
		t.Fatalf("alert %d, history alerts %v", f.id, want)
	}
	// The task stream with alerts=true has only the task's alerts.
	ts := openStream(t, srv, "/v1/tasks/bad/events?alerts=true", submitTok, "")
	if g := ts.next(); g.id != f.id {
		t.Fatalf("task alert stream: %+v", g)
	}
}

func TestEventStreamErrors(t *testing.T) {
	e := newEnv(t, testutilSQLite(t), Options{})
	for _, c := range []struct {
		target, lastID string
		status         int
		code           string
	}{
		{"/v1/events?after=x", "", 400, "invalid_parameter"},
		{"/v1/events?after=-1", "", 400, "invalid_parameter"},
		{"/v1/events?after=1.5", "", 400, "invalid_parameter"},
		{"/v1/events", "abc", 400, "invalid_request"},
		{"/v1/events", "-3", 400, "invalid_request"},
		{"/v1/events?after=1", "x", 400, "invalid_request"},
		{"/v1/events?alerts=maybe", "", 400, "invalid_parameter"},
		{"/v1/events?task=x", "", 400, ""},
		{"/v1/tasks/nope/events", "", 404, "not_found"},
		{"/v1/tasks/nope/events", "abc", 400, "invalid_request"},
		{"/v1/events?follow=true", "", 400, "unknown_parameter"},
		{"/v1/tasks/nope/events?follow=maybe", "", 400, "invalid_parameter"},
	} {
		req := newReq("GET", c.target, "")
		req.Header.Set("Authorization", "Bearer "+submitTok)
		if c.lastID != "" {
			req.Header.Set("Last-Event-ID", c.lastID)
		}
		r := e.serve(req)
		if r.status != c.status {
			t.Fatalf("%s (Last-Event-ID %q): status %d, want %d: %s", c.target, c.lastID, r.status, c.status, r.body)
		}
		r.mustError(t, c.status, c.code)
	}
	// Authentication: no or a wrong token is 401 (every token has submit
	// or operator, so a submit route has no 403).
	for _, target := range []string{"/v1/events", "/v1/tasks/x/events"} {
		e.do("GET", target, "", "").mustError(t, 401, "unauthorized")
		e.do("GET", target, "wrong-token-0123456789", "").mustError(t, 401, "unauthorized")
		e.do("POST", target, submitTok, "").mustError(t, 405, "method_not_allowed")
	}
}

func TestEventStreamLimitAndHeartbeat(t *testing.T) {
	e := newEnv(t, testutilSQLite(t), Options{MaxStreams: 2, Heartbeat: 20 * time.Millisecond})
	// The server's read and write timeouts (drover server sets both) do
	// not cut a stream.
	srv := httptest.NewUnstartedServer(e.h)
	srv.Config.ReadTimeout, srv.Config.WriteTimeout = 150*time.Millisecond, 150*time.Millisecond
	srv.Start()
	t.Cleanup(srv.Close)
	a := openStream(t, srv, "/v1/events", submitTok, "")
	openStream(t, srv, "/v1/events", operatorTok, "")
	_, r := tryStream(t, srv, "/v1/events", submitTok, "")
	if r == nil {
		t.Fatal("a third stream was accepted with MaxStreams 2")
	}
	r.mustError(t, 503, "too_many_streams")
	if r.header.Get("Retry-After") == "" {
		t.Fatal("503 without Retry-After")
	}
	// Heartbeats arrive on an idle stream, for longer than the timeouts.
	pings := 0
	for pings < 25 {
		select {
		case f := <-a.frames:
			if f.comment == "ping" {
				pings++
			}
		case <-a.done:
			t.Fatalf("the stream ended after %d heartbeats", pings)
		case <-time.After(10 * time.Second):
			t.Fatal("no heartbeat")
		}
	}
	// Once a stream closes, a new one is accepted.
	a.close()
	deadline := time.Now().Add(10 * time.Second)
	for e.h.OpenStreams() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("open streams %d after a close", e.h.OpenStreams())
		}
		time.Sleep(5 * time.Millisecond)
	}
	openStream(t, srv, "/v1/events", submitTok, "")
}

func TestEventStreamShutdown(t *testing.T) {
	e := newEnv(t, testutilSQLite(t), Options{})
	srv := httptest.NewUnstartedServer(e.h)
	srv.Config.RegisterOnShutdown(e.h.CloseStreams)
	srv.Start()
	t.Cleanup(srv.Close)
	e.do("POST", "/v1/tasks", submitTok, `{"workflow":"external","id":"x"}`).must(t, 201)
	s1 := openStream(t, srv, "/v1/events", submitTok, "")
	s2 := openStream(t, srv, "/v1/tasks/x/events", submitTok, "")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Config.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown with open streams: %v", err)
	}
	for _, s := range []*sseStream{s1, s2} {
		select {
		case <-s.done:
		case <-time.After(10 * time.Second):
			t.Fatal("a stream is still open after Shutdown")
		}
	}
	if n := e.h.OpenStreams(); n != 0 {
		t.Fatalf("%d streams open after Shutdown", n)
	}
}

func TestEventStreamDraining(t *testing.T) {
	e := newEnv(t, testutilSQLite(t), Options{})
	srv := httptest.NewServer(e.h)
	t.Cleanup(srv.Close)
	s := openStream(t, srv, "/v1/events", submitTok, "")
	e.h.SetDraining()
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		t.Fatal("SetDraining did not end the stream")
	}
	_, r := tryStream(t, srv, "/v1/events", submitTok, "")
	if r == nil {
		t.Fatal("a stream was accepted while draining")
	}
	r.mustError(t, 503, "shutting_down")
}
