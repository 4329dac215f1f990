package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/droverapi"
	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/store"
)

// eventPage is the decoded JSON answer of an event route.
type eventPage struct {
	Events    []droverapi.Event `json:"events"`
	NextAfter int64             `json:"next_after"`
}

// listPage asks target for a JSON page with Accept: application/json;
// lastID "" sends no Last-Event-ID.
func (e *testEnv) listPage(target, lastID string) eventPage {
	e.t.Helper()
	req := newReq("GET", target, "")
	req.Header.Set("Authorization", "Bearer "+submitTok)
	req.Header.Set("Accept", "application/json")
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	r := e.serve(req).must(e.t, 200)
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		e.t.Fatalf("%s: Content-Type %q", target, ct)
	}
	if v := r.header.Get("Vary"); !strings.Contains(v, "Accept") {
		e.t.Fatalf("%s: Vary %q", target, v)
	}
	var p eventPage
	if err := json.Unmarshal(r.body, &p); err != nil {
		e.t.Fatalf("%s: %v: %s", target, err, r.body)
	}
	if p.Events == nil {
		e.t.Fatalf("%s: events is not an array: %s", target, r.body)
	}
	return p
}

// listAll follows next_after from after 0 and returns every event's ID;
// it checks each full page has next_after = its last ID.
func (e *testEnv) listAll(target string, limit int) []int64 {
	e.t.Helper()
	sep := "?"
	if strings.Contains(target, "?") {
		sep = "&"
	}
	var out []int64
	var after int64
	for pages := 0; ; pages++ {
		if pages > 10000 {
			e.t.Fatal("paging does not end")
		}
		p := e.listPage(fmt.Sprintf("%s%slimit=%d&after=%d", target, sep, limit, after), "")
		for _, ev := range p.Events {
			out = append(out, ev.ID)
		}
		if len(p.Events) > limit {
			e.t.Fatalf("%d events on a page of %d", len(p.Events), limit)
		}
		if len(p.Events) == limit && p.NextAfter != p.Events[limit-1].ID {
			e.t.Fatalf("full page: next_after %d, last %d", p.NextAfter, p.Events[limit-1].ID)
		}
		if len(p.Events) < limit && p.NextAfter != 0 {
			e.t.Fatalf("short page: next_after %d", p.NextAfter)
		}
		if p.NextAfter == 0 {
			return out
		}
		after = p.NextAfter
	}
}

// insertEvents records n events of subject straight into the history.
func (e *testEnv) insertEvents(subject string, n int, alertEvery int) {
	e.t.Helper()
	now := time.Now().UTC()
	evs := make([]*dt.Event, n)
	for i := range evs {
		evs[i] = &dt.Event{TaskID: subject, StepIndex: -1, Type: dt.EventSubmitted, State: dt.Pending,
			Alert: alertEvery > 0 && i%alertEvery == 0, Actor: "test", Message: "m" + strconv.Itoa(i), CreatedAt: now}
	}
	if err := e.drv.InTx(context.Background(), func(ctx context.Context, x store.Executor) error {
		return x.EventInsertMany(ctx, &store.EventInsertManyParams{Events: evs})
	}); err != nil {
		e.t.Fatal(err)
	}
}

func TestEventList(t *testing.T) {
	drivers(t, func(t *testing.T, open func(t *testing.T) store.Driver) {
		// One stream slot, taken: the JSON list needs none.
		e := newEnv(t, open(t), Options{MaxStreams: 1, EventPollInterval: 10 * time.Millisecond})
		srv := httptest.NewServer(e.h)
		t.Cleanup(srv.Close)
		stream := openStream(t, srv, "/v1/events", submitTok, "")

		e.do("POST", "/v1/tasks", submitTok, `{"workflow":"echo","id":"t1","input":{"n":1}}`).must(t, 201)
		e.waitState("t1", "Processed")
		e.do("POST", "/v1/tasks", submitTok, `{"workflow":"fail","id":"t2"}`).must(t, 201)
		e.waitState("t2", "Error")

		// The default page holds the whole (short) history, with the
		// stream's event objects.
		p := e.listPage("/v1/events", "")
		var got []int64
		for _, ev := range p.Events {
			got = append(got, ev.ID)
		}
		want := e.eventIDs(drover.EventQuery{})
		if !slices.Equal(got, want) || p.NextAfter != 0 {
			t.Fatalf("list %v next_after %d, history %v", got, p.NextAfter, want)
		}
		hist, err := e.d.Events(context.Background(), drover.EventQuery{})
		if err != nil {
			t.Fatal(err)
		}
		for i, ev := range p.Events {
			if w := toEventJSON(hist[i]); ev.Subject != w.Subject || ev.Type != w.Type || ev.State != w.State ||
				ev.Alert != w.Alert || ev.Message != w.Message || ev.StepIndex != w.StepIndex || !ev.CreatedAt.Equal(w.CreatedAt) {
				t.Fatalf("event %d: %+v, want %+v", i, ev, w)
			}
		}

		// One task; after (query or Last-Event-ID, the header winning);
		// alerts.
		t1 := e.eventIDs(drover.EventQuery{TaskID: "t1"})
		if g := e.listAll("/v1/tasks/t1/events", 1); !slices.Equal(g, t1) {
			t.Fatalf("t1 by pages of 1: %v, want %v", g, t1)
		}
		mid := t1[len(t1)/2]
		wantAfter := e.eventIDs(drover.EventQuery{TaskID: "t1", AfterID: mid})
		for _, c := range []struct{ target, lastID string }{
			{"/v1/tasks/t1/events?after=" + strconv.FormatInt(mid, 10), ""},
			{"/v1/tasks/t1/events", strconv.FormatInt(mid, 10)},
			{"/v1/tasks/t1/events?after=0", strconv.FormatInt(mid, 10)},
		} {
			var g []int64
			for _, ev := range e.listPage(c.target, c.lastID).Events {
				g = append(g, ev.ID)
			}
			if !slices.Equal(g, wantAfter) {
				t.Fatalf("%s (Last-Event-ID %q): %v, want %v", c.target, c.lastID, g, wantAfter)
			}
		}
		alerts := e.eventIDs(drover.EventQuery{AlertsOnly: true})
		if len(alerts) == 0 {
			t.Fatal("no alert recorded")
		}
		if g := e.listAll("/v1/events?alerts=true", 100); !slices.Equal(g, alerts) {
			t.Fatalf("alerts %v, want %v", g, alerts)
		}
		if g := e.listAll("/v1/tasks/t1/events?alerts=true", 100); len(g) != 0 {
			t.Fatalf("t1 has no alert, got %v", g)
		}
		if g := e.listPage("/v1/tasks/t1/events?after="+strconv.FormatInt(t1[len(t1)-1], 10), ""); len(g.Events) != 0 || g.NextAfter != 0 {
			t.Fatalf("past the end: %+v", g)
		}

		if n := e.h.OpenStreams(); n != 1 {
			t.Fatalf("open streams %d, want the one stream", n)
		}
		// Nobody reads the stream: close it before the long history fills
		// its test buffer.
		stream.close()

		// A long history: every event once, in order, by pages of the
		// largest size and of the default size.
		e.insertEvents("many", 2500, 7)
		all := e.eventIDs(drover.EventQuery{})
		for _, limit := range []int{1000, 100, 999} {
			if g := e.listAll("/v1/events", limit); !slices.Equal(g, all) {
				t.Fatalf("limit %d: %d events, want %d", limit, len(g), len(all))
			}
		}
		if p := e.listPage("/v1/events", ""); len(p.Events) != 100 || p.NextAfter != all[99] {
			t.Fatalf("default limit: %d events, next_after %d", len(p.Events), p.NextAfter)
		}
		if g, w := e.listAll("/v1/events?alerts=true", 50), e.eventIDs(drover.EventQuery{AlertsOnly: true}); !slices.Equal(g, w) || len(w) < 300 {
			t.Fatalf("alerts: %d, want %d", len(g), len(w))
		}
	})
}

// The Accept header chooses between the stream and the JSON list.
func TestEventListNegotiation(t *testing.T) {
	for accept, want := range map[string]bool{
		"":                                          false,
		"*/*":                                       false,
		"text/event-stream":                         false,
		"text/html":                                 false,
		"application/json, text/event-stream":       false,
		"text/event-stream, application/json":       false,
		"application/json;q=0.5, */*":               false,
		"application/json;q=0":                      false,
		"application/json;q=0, */*":                 false,
		"application/*;q=0.4, text/*;q=0.5":         false,
		"application/json":                          true,
		"Application/JSON; charset=utf-8":           true,
		"application/json, */*":                     true,
		"application/json, text/plain, */*":         true,
		"application/*":                             true,
		"text/event-stream;q=0.5, application/json": true,
		"text/event-stream;q=0, */*":                true,
		"application/json;q=0.9, text/*;q=0.8":      true,
		"application/json;q=bad, application/json;q=0.1, text/event-stream;q=0.05": true,
		"nonsense;;, application/json":                                             true,
	} {
		var vals []string
		if accept != "" {
			vals = []string{accept}
		}
		if got := wantsJSON(vals); got != want {
			t.Errorf("Accept %q: JSON %v, want %v", accept, got, want)
		}
	}
	if !wantsJSON([]string{"text/event-stream;q=0.1", "application/json"}) {
		t.Error("several Accept lines are not read together")
	}

	// End to end: the answer's Content-Type follows the header.
	e := newEnv(t, testutilSQLite(t), Options{})
	srv := httptest.NewServer(e.h)
	t.Cleanup(srv.Close)
	for accept, wantCT := range map[string]string{
		"":                                  "text/event-stream",
		"text/event-stream":                 "text/event-stream",
		"application/json":                  "application/json",
		"application/json, text/plain, */*": "application/json",
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/v1/events", nil)
		req.Header.Set("Authorization", "Bearer "+submitTok)
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		ct := resp.Header.Get("Content-Type")
		cancel()
		resp.Body.Close()
		if resp.StatusCode != 200 || ct != wantCT {
			t.Errorf("Accept %q: status %d Content-Type %q, want %q", accept, resp.StatusCode, ct, wantCT)
		}
	}
}

func TestEventListErrors(t *testing.T) {
	e := newEnv(t, testutilSQLite(t), Options{})
	e.do("POST", "/v1/tasks", submitTok, `{"workflow":"external","id":"x"}`).must(t, 201)
	for _, c := range []struct {
		target, accept, lastID string
		status                 int
		code                   string
	}{
		{"/v1/events?limit=0", "application/json", "", 400, "invalid_parameter"},
		{"/v1/events?limit=1001", "application/json", "", 400, "invalid_parameter"},
		{"/v1/events?limit=x", "application/json", "", 400, "invalid_parameter"},
		{"/v1/events?limit=-5", "application/json", "", 400, "invalid_parameter"},
		{"/v1/events?after=x", "application/json", "", 400, "invalid_parameter"},
		{"/v1/events?after=-1", "application/json", "", 400, "invalid_parameter"},
		{"/v1/events", "application/json", "abc", 400, "invalid_request"},
		{"/v1/events?alerts=maybe", "application/json", "", 400, "invalid_parameter"},
		{"/v1/events?task=x", "application/json", "", 400, "unknown_parameter"},
		{"/v1/events?format=json", "application/json", "", 400, "unknown_parameter"},
		{"/v1/tasks/x/events?follow=true", "application/json", "", 400, "invalid_parameter"},
		{"/v1/tasks/nope/events", "application/json", "", 404, "not_found"},
		{"/v1/tasks/nope/events?limit=0", "application/json", "", 400, "invalid_parameter"},
		{"/v1/tasks/x/events?limit=1001", "application/json", "", 400, "invalid_parameter"},
		// "limit" has no meaning on a stream: refused, not ignored.
		{"/v1/events?limit=10", "", "", 400, "invalid_parameter"},
		{"/v1/tasks/x/events?limit=10", "text/event-stream", "", 400, "invalid_parameter"},
	} {
		req := newReq("GET", c.target, "")
		req.Header.Set("Authorization", "Bearer "+submitTok)
		if c.accept != "" {
			req.Header.Set("Accept", c.accept)
		}
		if c.lastID != "" {
			req.Header.Set("Last-Event-ID", c.lastID)
		}
		r := e.serve(req)
		if r.status != c.status {
			t.Fatalf("%s (Accept %q): status %d, want %d: %s", c.target, c.accept, r.status, c.status, r.body)
		}
		r.mustError(t, c.status, c.code)
		if c.target == "/v1/events?limit=10" && !strings.Contains(r.errMsg(), "limit") {
			t.Fatalf("error does not name the parameter: %s", r.body)
		}
	}
	for _, tok := range []string{"", "wrong-token-0123456789"} {
		req := newReq("GET", "/v1/events", "")
		req.Header.Set("Accept", "application/json")
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		e.serve(req).mustError(t, 401, "unauthorized")
	}
	// The list of an existing task without events after "after" is
	// empty, not an error.
	if p := e.listPage("/v1/tasks/x/events?after=1000000", ""); len(p.Events) != 0 || p.NextAfter != 0 {
		t.Fatalf("page %+v", p)
	}
}
