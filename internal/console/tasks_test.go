package console_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/drover-run/drover/internal/testutil"
	"github.com/drover-run/drover/store"
)

// The task list filters by ordering key and by the time of the last
// update, alone and with the other filters, and its next page keeps them.
func TestTaskFilters(t *testing.T) {
	stores(t, func(t *testing.T, d store.Driver) {
		e := startServer(t, d, false)
		for i := range 53 {
			key := "acct-1"
			if i%2 == 1 {
				key = "acct-2"
			}
			e.api("POST", "/v1/tasks", fmt.Sprintf(`{"workflow":"pay","id":"k-%03d","input":{},"ordering_key":%q}`, i, key), nil)
		}
		e.submit("plain", false)
		e.submit("bad-1", true)
		e.waitState("bad-1", "Error")
		e.waitState("k-052", "Processed")
		c := browser(t)
		e.signIn(c, readToken)

		byKey := e.get(c, "/tasks?key=acct-2")
		wantIn(t, byKey, `name="key" value="acct-2"`, "k-001", "k-051")
		wantOut(t, byKey, "k-000<", "k-052", "plain", "rel=\"next\"")
		next := e.get(c, "/tasks?after=k-040&key=acct-1")
		wantIn(t, next, "k-042", "k-052")
		wantOut(t, next, "k-040<", "k-041", "k-051", "rel=\"next\"")
		if p := e.get(c, "/tasks?key=acct-1&id=k-05"); p.status != 200 {
			t.Errorf("key and ID: %d", p.status)
		} else {
			wantIn(t, p, "k-050", "k-052")
			wantOut(t, p, "k-051", "k-049")
		}

		now := time.Now().UTC()
		hourAgo, inAnHour := now.Add(-time.Hour).Format("2006-01-02T15:04"), now.Add(time.Hour).Format("2006-01-02T15:04")
		inRange := e.get(c, "/tasks?state=Error&from="+hourAgo+"&before="+inAnHour)
		wantIn(t, inRange, "bad-1", `name="from" value="`+hourAgo+`"`, `name="before" value="`+inAnHour+`"`)
		wantOut(t, inRange, "plain")
		if p := e.get(c, "/tasks?from="+inAnHour); p.status != 200 {
			t.Errorf("from the future: %d", p.status)
		} else {
			wantIn(t, p, "No task matches")
		}
		if p := e.get(c, "/tasks?before="+hourAgo+"&id=plain"); p.status != 200 {
			t.Errorf("before an hour ago: %d", p.status)
		} else {
			wantIn(t, p, "No task matches")
		}
		paged := e.get(c, "/tasks?from="+hourAgo)
		wantIn(t, paged, `rel="next" href="/tasks?after=k-048&amp;from=`+hourAgo[:13]+"%3A")
		if p := e.get(c, "/tasks?from=yesterday"); p.status != http.StatusBadRequest {
			t.Errorf("from=yesterday: %d, want 400", p.status)
		} else {
			wantIn(t, p, "is not a time like")
		}
	})
}

// A delayed task's page says when it starts and shows its priority, and
// the list shows it Pending until then.
func TestDelayedTaskPage(t *testing.T) {
	e := startServer(t, testutil.SQLite(t), false)
	e.api("POST", "/v1/tasks", `{"workflow":"pay","id":"later","input":{},"run_at":"2030-01-02T03:04:05Z","priority":3}`, nil)
	c := browser(t)
	e.signIn(c, readToken)
	wantIn(t, e.get(c, "/tasks/later"), "Scheduled: starts at 2030-01-02 03:04:05Z", "<dt>Priority</dt><dd>3</dd>")
	wantIn(t, e.get(c, "/tasks"), `href="/tasks/later"`, "Pending")
}
