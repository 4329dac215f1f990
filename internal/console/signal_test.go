package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/internal/testutil"
	"github.com/drover-run/drover/server"
	"github.com/drover-run/drover/store"
)

// signalWorkflow waits an hour for the signal "approved", then charges.
func signalWorkflow(cfg *server.Config) {
	cfg.Workflows = append(cfg.Workflows, drover.Workflow{Name: "approve", Steps: []drover.Step{
		{Name: "approval", Signal: "approved", Timeout: time.Hour},
		{Name: "charge", Agent: "payments", Timeout: 5 * time.Second},
	}})
}

// TestSignalForm: the page of a task waiting for a signal says so, and an
// operator (not a reader) sends the signal from its form, with the CSRF
// token; the task then goes on.
func TestSignalForm(t *testing.T) {
	e := startServerWith(t, testutil.SQLite(t), false, nil, signalWorkflow)
	e.api("POST", "/v1/tasks", `{"workflow":"approve","id":"o-1","input":{}}`, nil)
	reader, op := browser(t), browser(t)
	e.signIn(reader, readToken)
	e.signIn(op, opToken)
	rp := e.getUntil(reader, "/tasks/o-1", func(p page) bool { return strings.Contains(p.body, "Waiting for signal") })
	wantIn(t, rp, "Waiting for signal “approved” until ", "then it fails and the failure policy applies", "signal <code>approved</code>", drover.SignalHolder)
	wantOut(t, rp, `action="/tasks/o-1/signal"`)
	if p := e.do(reader, "POST", "/tasks/o-1/signal", url.Values{"csrf": {csrf(t, rp)}, "name": {"approved"}}); p.status != http.StatusForbidden {
		t.Errorf("a reader's signal: %d, want 403", p.status)
	}
	tp := e.get(op, "/tasks/o-1")
	wantIn(t, tp, `action="/tasks/o-1/signal"`, `name="name" value="approved"`, "Send signal “approved”")
	if p := e.do(op, "POST", "/tasks/o-1/signal", url.Values{"name": {"approved"}}); p.status != http.StatusForbidden {
		t.Errorf("a signal without the CSRF token: %d, want 403", p.status)
	}
	if p := e.do(op, "POST", "/tasks/o-1/signal", url.Values{"csrf": {csrf(t, tp)}, "name": {"approved"}, "payload": {"{"}}); p.status != http.StatusBadRequest {
		t.Errorf("a signal with a bad payload: %d, want 400", p.status)
	}
	if got := e.state("o-1"); got != "Processing" {
		t.Fatalf("after refused signals the task is %s", got)
	}
	p := e.do(op, "POST", "/tasks/o-1/signal", url.Values{"csrf": {csrf(t, tp)}, "name": {"approved"}, "payload": {`{"by":"ann"}`}, "signal_id": {"s-1"}})
	if p.status != http.StatusSeeOther {
		t.Fatalf("signal: %d %s", p.status, p.body)
	}
	wantIn(t, e.get(op, p.loc), "Signal sent: the waiting step completed")
	e.waitState("o-1", "Processed")
	done := e.get(op, "/tasks/o-1")
	wantIn(t, done, "signal_received", "http:oncall", "&#34;by&#34;: &#34;ann&#34;", "<td>0 approval</td><td>1</td><td>"+drover.SignalHolder+"</td>")
	wantOut(t, done, `action="/tasks/o-1/signal"`)
}

// In a real headless Chromium an operator opens a task waiting for
// approval, reads until when it waits, sends the signal with a payload
// from the page's form, and sees the task done.
func TestBrowserSignal(t *testing.T) {
	browserStore(t, "sqlite", func(t *testing.T, d store.Driver) {
		e := startServerWith(t, d, false, nil, signalWorkflow)
		e.api("POST", "/v1/tasks", `{"workflow":"approve","id":"order-9","input":{"amount":1200}}`, nil)
		b := newTab(t)
		b.signIn(e.base, opToken, "")
		testutil.WaitFor(t, "order-9 to wait for its signal", func() bool {
			var tk struct {
				Steps []struct{ State string } `json:"steps"`
			}
			e.api("GET", "/v1/tasks/order-9", "", &tk)
			return len(tk.Steps) == 2 && tk.Steps[0].State == "Processing"
		})
		b.do(chromedp.Navigate(e.base+"/tasks/order-9"), chromedp.WaitVisible(chromedp.ID("signal")))
		b.want("#story", "Waiting for signal “approved” until", "then it fails")
		b.do(chromedp.SendKeys(chromedp.ID("payload"), `{"approved":true,"by":"ann"}`), b.shot("signal"))
		b.press("/tasks/order-9/signal")
		b.want(".flash", "Signal sent")
		e.waitState("order-9", "Processed")
		b.do(chromedp.Reload(), chromedp.WaitVisible(chromedp.ID("story")))
		if after := b.text("#story"); !strings.HasPrefix(after, "Done:") {
			t.Errorf("after the signal the sentence is %q", after)
		}
		b.want("table.events", "signal_received", "http:oncall")
	})
}
