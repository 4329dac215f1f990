package console_test

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/internal/testutil"
	"github.com/drover-run/drover/server"
	"github.com/drover-run/drover/store"
)

// withSchedule gives the test server a schedule of the pay workflow that
// does not come due during a test (midnight of 29 February).
func withSchedule(cfg *server.Config) {
	cfg.Schedules = []drover.Schedule{{Name: "leap-pay", Workflow: "pay", Input: []byte(`{"amount":1}`),
		Cron: "0 0 29 2 *", TimeZone: "Europe/Berlin"}}
}

// storeRetired stores a schedule of the pay workflow that the test
// server does not define, as a process that defined it once would have.
func storeRetired(t testing.TB, d store.Driver) {
	t.Helper()
	c, err := drover.New(drover.Config{Store: d, Workflows: []drover.Workflow{{Name: "pay", Steps: []drover.Step{{Name: "charge", Agent: "charge"}}}},
		ExternalAgents: []string{"charge"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.AddSchedules(context.Background(), []drover.Schedule{{Name: "retired-pay", Workflow: "pay", Every: 24 * time.Hour}}); err != nil {
		t.Fatal(err)
	}
}

// The Schedules page lists a schedule with its next due times; an
// operator pauses, resumes and runs it (with the session's CSRF token); a
// reader sees it without the buttons and cannot act. A stored schedule
// the server does not define is marked so, and an operator deletes it;
// the server's own cannot be.
func TestSchedulesPage(t *testing.T) {
	d := testutil.SQLite(t)
	storeRetired(t, d)
	e := startServerWith(t, d, false, nil, withSchedule)
	op, reader := browser(t), browser(t)
	e.signIn(op, opToken)
	e.signIn(reader, readToken)

	p := e.get(op, "/schedules")
	berlin, _ := time.LoadLocation("Europe/Berlin")
	next := time.Date(2028, 2, 29, 0, 0, 0, 0, berlin).UTC()
	wantIn(t, p, `id="schedules-list"`, "leap-pay", "<code>0 0 29 2 *</code> Europe/Berlin", "active", next.Format("2006-01-02 15:04"),
		`action="/schedules/leap-pay/pause"`, `action="/schedules/leap-pay/run"`, `href="/schedules" aria-current="page"`)
	rp := e.get(reader, "/schedules")
	wantIn(t, rp, "leap-pay")
	if strings.Contains(rp.body, "/schedules/leap-pay/pause") {
		t.Errorf("a reader sees the pause button")
	}
	if got := e.do(reader, "POST", "/schedules/leap-pay/pause", url.Values{"csrf": {csrf(t, rp)}}); got.status != http.StatusForbidden {
		t.Errorf("reader's pause: %d", got.status)
	}
	if got := e.do(op, "POST", "/schedules/leap-pay/pause", url.Values{}); got.status != http.StatusForbidden {
		t.Errorf("pause without CSRF: %d", got.status)
	}

	token := csrf(t, p)
	done := e.do(op, "POST", "/schedules/leap-pay/pause", url.Values{"csrf": {token}})
	if done.status != http.StatusSeeOther || !strings.HasPrefix(done.loc, "/schedules?done=") {
		t.Fatalf("pause: %d %s", done.status, done.loc)
	}
	p = e.get(op, done.loc)
	wantIn(t, p, "Schedule leap-pay paused.", "paused", `action="/schedules/leap-pay/resume"`)
	done = e.do(op, "POST", "/schedules/leap-pay/resume", url.Values{"csrf": {token}})
	wantIn(t, e.get(op, done.loc), "Schedule leap-pay resumed.", `action="/schedules/leap-pay/pause"`)

	done = e.do(op, "POST", "/schedules/leap-pay/run", url.Values{"csrf": {token}})
	p = e.get(op, done.loc)
	m := regexp.MustCompile(`ran now: task (schedule:leap-pay:run:[0-9a-f-]+)\.`).FindStringSubmatch(p.body)
	if m == nil {
		t.Fatalf("run: %s", p.body)
	}
	wantIn(t, p, `<a href="/tasks/`+url.PathEscape(m[1])+`">`+m[1]+`</a>`)
	e.waitState(m[1], "Processed")

	if got := e.do(op, "POST", "/schedules/missing/pause", url.Values{"csrf": {token}}); got.status != http.StatusNotFound {
		t.Errorf("unknown schedule: %d", got.status)
	}
	if got := e.do(op, "POST", "/schedules/leap-pay/explode", url.Values{"csrf": {token}}); got.status != http.StatusBadRequest {
		t.Errorf("unknown action: %d", got.status)
	}

	// Delete, after a page that asks.
	p = e.get(op, "/schedules")
	wantIn(t, p, "retired-pay", "not defined by this server (another process may define it)", `href="/schedules/retired-pay/delete"`)
	if strings.Contains(p.body, "/schedules/leap-pay/delete") || strings.Count(p.body, "not defined by this server") != 1 {
		t.Errorf("the server's own schedule is offered for deletion or marked as not defined:\n%s", p.body)
	}
	if strings.Contains(rp.body, "/delete") {
		t.Errorf("a reader sees a delete button")
	}
	ask := e.get(op, "/schedules/retired-pay/delete")
	wantIn(t, ask, "Delete schedule <code>retired-pay</code>?", "every 24h0m0s", "another process may", `action="/schedules/retired-pay/delete"`)
	if got := e.get(op, "/schedules/leap-pay/delete"); got.status != http.StatusConflict || !strings.Contains(got.body, "remove it there first") {
		t.Errorf("the delete page of the server's own schedule: %d %s", got.status, got.body)
	}
	if got := e.do(op, "POST", "/schedules/leap-pay/delete", url.Values{"csrf": {token}}); got.status != http.StatusConflict ||
		!strings.Contains(got.body, "remove it there first") {
		t.Errorf("deleting the server's own schedule: %d %s", got.status, got.body)
	}
	if got := e.do(reader, "POST", "/schedules/retired-pay/delete", url.Values{"csrf": {csrf(t, rp)}}); got.status != http.StatusForbidden {
		t.Errorf("reader's delete: %d", got.status)
	}
	done = e.do(op, "POST", "/schedules/retired-pay/delete", url.Values{"csrf": {csrf(t, ask)}})
	p = e.get(op, done.loc)
	wantIn(t, p, "Schedule retired-pay deleted.", "leap-pay")
	if strings.Contains(strings.ReplaceAll(p.body, "Schedule retired-pay deleted.", ""), "retired-pay") {
		t.Errorf("the deleted schedule is still listed:\n%s", p.body)
	}
	if got := e.get(op, "/schedules/retired-pay/delete"); got.status != http.StatusNotFound {
		t.Errorf("the delete page of a deleted schedule: %d", got.status)
	}
}
