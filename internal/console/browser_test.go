package console_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/drover-run/drover/store"
)

// ScreenshotsEnv names a directory the browser tests write a 1280×800
// screenshot of each page they visit to (not set: none are written).
const ScreenshotsEnv = "DROVER_CONSOLE_SCREENSHOTS"

// chromium finds the browser: Debian's chromium (scripts/test installs it).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no chromium on PATH: install Debian's chromium package (scripts/test does as root)")
	return ""
}

// tab is a headless Chromium tab of a test, 1280×800.
type tab struct {
	t     *testing.T
	ctx   context.Context
	shots string // ScreenshotsEnv's directory, "" for none
	// actions counts the page actions: links followed, forms sent.
	actions int
}

// browsers lets one headless browser run at a time: the browser tests run
// in parallel (each on both stores), and with several browsers at once on
// a 2-core machine under the race detector, a browser now and then never
// answered a key event, and the test ran out of time. A test waits for
// the browser before its own time starts.
var browsers = make(chan struct{}, 1)

func newTab(t *testing.T) *tab {
	t.Helper()
	browsers <- struct{}{}
	t.Cleanup(func() { <-browsers }) // runs last: after the browser is gone
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium(t)), chromedp.NoSandbox,
		chromedp.WindowSize(1280, 800), chromedp.Flag("disable-dev-shm-usage", true))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelA)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(cancel)
	ctx, cancelT := context.WithTimeout(ctx, 180*time.Second)
	t.Cleanup(cancelT)
	b := &tab{t: t, ctx: ctx, shots: os.Getenv(ScreenshotsEnv)}
	b.do(chromedp.EmulateViewport(1280, 800)) // the window's frame takes some of WindowSize
	return b
}

// shotsTaken are the screenshot names written by this test process.
var shotsTaken sync.Map

// shot writes a screenshot of the page's 1280×800 viewport to name.png
// when ScreenshotsEnv is set ("" writes none). The first run to reach a
// name writes it (a test that runs on both stores writes it once: the
// pages look alike on both).
func (b *tab) shot(name string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		if name == "" || b.shots == "" {
			return nil
		}
		if _, taken := shotsTaken.LoadOrStore(name, true); taken {
			return nil
		}
		png, err := chromedp.CaptureScreenshot()(ctx, tg) // the viewport: 1280×800
		if err != nil {
			return err
		}
		if err := os.MkdirAll(b.shots, 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(b.shots, name+".png"), png, 0o644)
	})
}

// text is the text of the element CSS selector sel finds.
func (b *tab) text(sel chromedp.CSS) string {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Text(sel))
	if err != nil {
		b.t.Fatal(err)
	}
	return v
}

func (b *tab) do(steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, steps...); err != nil {
		b.t.Fatal(err)
	}
}

// signIn signs the tab in with token from the sign-in page, whose
// screenshot it takes as shot.
func (b *tab) signIn(base, token, shot string) {
	b.t.Helper()
	b.do(chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(chromedp.ID("token")),
		b.shot(shot),
		chromedp.SendKeys(chromedp.ID("token"), token),
		chromedp.Submit(chromedp.ID("token")),
		chromedp.WaitVisible(chromedp.CSS(`a.card[href="/alerts"]`)))
}

// follow clicks the first link to href (a page action), waits for the
// element wait of the next page and takes its screenshot name.
func (b *tab) follow(href string, wait chromedp.ID, name string) {
	b.t.Helper()
	b.actions++
	b.do(chromedp.Click(chromedp.CSS(`a[href="`+href+`"]`)), chromedp.WaitVisible(wait), b.shot(name))
}

// press submits the main form whose action ends with action (a page
// action) and waits for the flash that says what was done.
func (b *tab) press(action string) {
	b.t.Helper()
	b.actions++
	b.do(chromedp.Click(chromedp.CSS(`main form[action$="`+action+`"] button`)), chromedp.WaitVisible(chromedp.CSS(".flash")))
}

// keyTo presses Tab until the focused element is the link to target (or,
// with form set, the button of the form whose action ends with target),
// checks the focus is visible (an outline), then presses Enter (a page
// action) and waits for wait: the keyboard alone gets there.
func (b *tab) keyTo(target string, form bool, wait chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	probe := `(e => e.getAttribute("href") || "")(document.activeElement)`
	if form {
		probe = `(e => e.form ? e.form.getAttribute("action") : "")(document.activeElement)`
	}
	for range 80 {
		b.do(chromedp.KeyEvent("\t"))
		got, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](probe))
		if err != nil {
			b.t.Fatal(err)
		}
		if got == target || form && strings.HasSuffix(got, target) {
			outline, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`getComputedStyle(document.activeElement).outlineStyle`))
			if err != nil {
				b.t.Fatal(err)
			}
			if outline == "none" {
				b.t.Errorf("the focus on %s is not visible (no outline)", target)
			}
			b.actions++
			b.do(chromedp.KeyEvent("\r"), wait)
			return
		}
	}
	b.t.Fatalf("80 Tabs never reached %s", target)
}

// want checks that the text of the element sel finds holds every sub.
func (b *tab) want(sel chromedp.CSS, subs ...string) {
	b.t.Helper()
	got := b.text(sel)
	for _, s := range subs {
		if !strings.Contains(got, s) {
			b.t.Errorf("%s says %q, want %q in it", sel, got, s)
		}
	}
}

// In a real headless Chromium an operator signs in, goes from the
// overview to the open alert, reads on the task page why the order
// failed, resubmits it after confirming, and sees it done.
func TestBrowserResubmitFailedTask(t *testing.T) {
	browserStore(t, "sqlite", func(t *testing.T, d store.Driver) {
		e := startServer(t, d, false)
		e.submit("order-7", true)
		e.waitState("order-7", "Error")

		b := newTab(t)
		b.signIn(e.base, opToken, "signin")
		b.follow("/alerts", "alerts-list", "")
		b.follow("/tasks/order-7", "story", "")
		b.want("#story", "failed", "card declined")
		b.follow("/tasks/order-7/resubmit", "what", "")
		b.want("#what", "runs again from step 0")
		e.fixed.Store(true) // the operator fixed the cause
		b.press("/tasks/order-7/resubmit")
		e.waitState("order-7", "Processed")
		b.do(chromedp.Reload(), chromedp.WaitVisible(chromedp.ID("story")))
		if after := b.text("#story"); !strings.HasPrefix(after, "Done:") {
			t.Errorf("after the resubmit the sentence is %q", after)
		}
		// The timeline shows both attempts: the declined one, then the
		// one after the resubmit.
		b.want("table.attempts tbody", "failed", "card declined", "processed")
		if n := b.text("table.attempts tbody"); strings.Count(n, "0 charge") != 2 {
			t.Errorf("attempts: %q, want two of step 0", n)
		}
	})
}

// A blocked session in a real Chromium, with the keyboard alone: from the
// overview to the queue, the dead letter's reason, the session, the
// resubmit confirmation, and the session unblocked, which then drains in
// order.
func TestBrowserResolveDeadLetter(t *testing.T) {
	browserStore(t, "postgres", func(t *testing.T, d store.Driver) {
		e := startServer(t, d, false)
		q := e.ledger()

		b := newTab(t)
		b.signIn(e.base, opToken, "")
		// With the keyboard alone: Tab to each link and button, Enter.
		b.keyTo("/queues", false, chromedp.WaitVisible(chromedp.ID("queues-list")))
		b.do(b.shot("queues"))
		b.keyTo("/queues/ledger", false, chromedp.WaitVisible(chromedp.ID("dead-letters")))
		b.do(b.shot("queue"))
		b.want("table.dead tbody", "bad amount")
		b.keyTo("/queues/ledger/sessions/acct-1", false, chromedp.WaitVisible(chromedp.ID("session-story")))
		b.do(b.shot("session"))
		b.want("#session-story", "Blocked: message 1")
		b.keyTo("/queues/ledger/sessions/acct-1/deadletters/1/resubmit", false, chromedp.WaitVisible(chromedp.ID("what")))
		b.do(b.shot("confirm-dead-letter"))
		b.keyTo("/deadletters/1/resubmit", true, chromedp.WaitVisible(chromedp.CSS(".flash")))
		if story := b.text("#session-story"); strings.HasPrefix(story, "Blocked") {
			t.Errorf("after the resubmit the session is still blocked: %q", story)
		}
		if got, want := strings.Join(drain(t, q), " "), `{"n":1} {"n":2} {"n":3}`; got != want {
			t.Errorf("the session drained %s, want %s", got, want)
		}
		b.do(chromedp.Reload(), chromedp.WaitVisible(chromedp.ID("session-story")))
		b.want("#session-story", "Idle")
	})
}

// The Workflows page in a real Chromium: each version drawn as its steps,
// the compensation under the step it undoes (and, on the way, the task
// list and a cancel's confirmation).
func TestBrowserWorkflows(t *testing.T) {
	browserStore(t, "sqlite", func(t *testing.T, d store.Driver) {
		e := startWithShip(t, d)
		e.api("POST", "/v1/tasks", `{"workflow":"ship","id":"s-1","input":{}}`, nil) // no agent serves it: it stays unfinished
		b := newTab(t)
		b.signIn(e.base, opToken, "")
		b.follow("/tasks", "tasks-list", "")
		b.follow("/tasks/s-1", "story", "")
		b.follow("/tasks/s-1/cancel", "what", "confirm-cancel")
		b.want("#what", "becomes Cancelled")
		b.follow("/workflows", "workflows-list", "")
		b.want("#wf-ship article.current ol.flow", "0 label", "labels", "2s", "undo: voids", "1 pickup", "couriers")
		b.want("#wf-pay", "defined in code", "charge", "payments")
	})
}

// A task page follows the task live: cancelled by someone else (the API
// here), the page shows it with no action of the operator's.
func TestBrowserLiveTask(t *testing.T) {
	browserStore(t, "postgres", func(t *testing.T, d store.Driver) {
		e := startServer(t, d, false)
		e.api("POST", "/v1/tasks", `{"workflow":"pay","id":"held-1","input":{"hold":true}}`, nil)
		e.waitState("held-1", "Processing")
		b := newTab(t)
		b.signIn(e.base, readToken, "")
		b.do(chromedp.Navigate(e.base+"/tasks/held-1"), chromedp.WaitVisible(chromedp.ID("story")))
		b.want("#story", "is running")
		e.api("POST", "/v1/tasks/held-1/cancel", `{"reason":"customer called"}`, nil)
		deadline := time.Now().Add(30 * time.Second)
		for {
			// The page reloads under the test: read what is there now.
			story, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`(s => s ? s.textContent : "")(document.getElementById("story"))`))
			if err == nil && strings.HasPrefix(story, "Cancelled") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("30s after the cancel the page says %q (%v)", story, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

// The task list's filters with the keyboard alone in a real Chromium:
// Tab to the ordering key's field, type the key, Enter; the list shows
// that key's tasks only, and the field keeps the key.
func TestBrowserTaskFilters(t *testing.T) {
	browserStore(t, "sqlite", func(t *testing.T, d store.Driver) {
		e := startServer(t, d, false)
		e.api("POST", "/v1/tasks", `{"workflow":"pay","id":"a-1","input":{},"ordering_key":"acct-1"}`, nil)
		e.api("POST", "/v1/tasks", `{"workflow":"pay","id":"b-1","input":{},"ordering_key":"acct-2"}`, nil)
		e.waitState("b-1", "Processed")
		b := newTab(t)
		b.signIn(e.base, readToken, "")
		b.do(chromedp.Navigate(e.base+"/tasks"), chromedp.WaitVisible(chromedp.ID("tasks-list")))
		for i := 0; ; i++ {
			if i == 40 {
				t.Fatal("40 Tabs never reached the ordering key's field")
			}
			b.do(chromedp.KeyEvent("\t"))
			name, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.activeElement.name || ""`))
			if err != nil {
				t.Fatal(err)
			}
			if name == "key" {
				break
			}
		}
		b.do(chromedp.KeyEvent("acct-2"), chromedp.KeyEvent("\r"), chromedp.WaitVisible(chromedp.CSS(`input[name="key"][value="acct-2"]`)))
		b.want("table.tasks tbody", "b-1")
		if rows := b.text("table.tasks tbody"); strings.Contains(rows, "a-1") {
			t.Errorf("filtered by acct-2 the list shows a-1: %q", rows)
		}
	})
}

// keyboardPages are the console's pages, each with an element that says
// it has loaded, for the keyboard check.
var keyboardPages = []struct {
	path string
	wait chromedp.ID
}{
	{"/", "open-alerts"},
	{"/tasks", "tasks-list"},
	{"/tasks/order-7", "story"},
	{"/tasks/order-7/resubmit", "what"},
	{"/tasks/held-1/cancel", "what"},
	{"/alerts", "alerts-list"},
	{"/workflows", "workflows-list"},
	{"/schedules", "schedules-list"},
	{"/schedules/retired-pay/delete", "what"},
	{"/agents", "agents-list"},
	{"/queues", "queues-list"},
	{"/queues/ledger", "dead-letters"},
	{"/queues/ledger/sessions/acct-1", "session-story"},
	{"/queues/ledger/sessions/acct-1/deadletters/1/resubmit", "what"},
}

// tabThrough presses Tab from the top of the loaded page until the focus
// has visited every element a mouse could use (links, buttons, fields,
// summaries) or has come round again, and checks that each one was
// reached, in document order, with a visible focus. The page logs each
// focus as it happens, so the Tabs go out in batches and the log is read
// once a batch (a round trip per Tab made the test slow on a busy
// machine).
func (b *tab) tabThrough(path string) {
	b.t.Helper()
	n, err := chromedp.Run(b.ctx, chromedp.Evaluate[int](`(() => {
		const all = document.querySelectorAll('a[href], button, input:not([type=hidden]), select, textarea, summary, [tabindex]');
		let n = 0;
		for (const e of all) {
			// A native control with tabindex=-1 still counts: a mouse can use it.
			const native = e.matches('a[href], button, input, select, textarea, summary');
			if (e.disabled || (!native && e.tabIndex < 0) || !e.getClientRects().length || getComputedStyle(e).visibility === 'hidden') continue;
			e.dataset.kb = n++;
		}
		// Start from the top: a focusable mark before everything.
		const start = document.createElement('span');
		start.tabIndex = 0;
		document.body.prepend(start);
		start.focus();
		window.kbLog = [];
		document.addEventListener('focusin', ev => {
			const e = ev.target;
			window.kbLog.push({kb: e.dataset.kb || "", tag: e.tagName, outline: getComputedStyle(e).outlineStyle});
		});
		return n;
	})()`))
	if err != nil {
		b.t.Fatal(err)
	}
	if n == 0 {
		b.t.Fatalf("%s: nothing to focus", path)
	}
	type focus struct {
		KB      string `json:"kb"`
		Tag     string `json:"tag"`
		Outline string `json:"outline"`
	}
	next, pressed, read := 0, 0, 0
	for pressed < 4*n+10 {
		batch := min(n-next+2, 4*n+10-pressed)
		tabs := make([]chromedp.Action[chromedp.Void], batch)
		for i := range tabs {
			tabs[i] = chromedp.KeyEvent("\t")
		}
		b.do(tabs...)
		pressed += batch
		log, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]focus](`window.kbLog`))
		if err != nil {
			b.t.Fatal(err)
		}
		for _, f := range log[read:] {
			if f.KB == "" || f.KB == strconv.Itoa(next-1) {
				continue // the page itself between rounds, or a field's parts (a date's day, month, …)
			}
			if f.KB != strconv.Itoa(next) {
				b.t.Fatalf("%s: Tab reached element %s (%s) where element %d was next: an element the keyboard skips or reaches out of order", path, f.KB, f.Tag, next)
			}
			if f.Outline == "none" {
				b.t.Errorf("%s: the focus on element %s (%s) is not visible", path, f.KB, f.Tag)
			}
			if next++; next == n {
				return
			}
		}
		read = len(log)
	}
	b.t.Fatalf("%s: %d Tabs reached %d of the %d elements", path, pressed, next, n)
}

// Every page works with the keyboard alone: Tab reaches every link,
// button and field in order, with a visible focus (the drills above
// also act with Enter).
func TestBrowserKeyboardEveryPage(t *testing.T) {
	browserStore(t, "postgres", func(t *testing.T, d store.Driver) {
		storeRetired(t, d) // its Delete button is reached too
		e := startServerWith(t, d, false, nil, withSchedule)
		e.submit("order-7", true)
		// A task to cancel whose history stays still: a running one's
		// (recovered every few seconds) made its page reload itself while
		// the keyboard went through it.
		e.api("POST", "/v1/tasks", `{"workflow":"pay","id":"held-1","input":{},"run_at":"2030-01-02T03:04:05Z"}`, nil)
		e.waitState("order-7", "Error")
		e.ledger()
		b := newTab(t)
		b.do(chromedp.Navigate(e.base+"/signin"), chromedp.WaitVisible(chromedp.ID("token")))
		b.tabThrough("/signin")
		b.signIn(e.base, opToken, "")
		for _, p := range keyboardPages {
			b.do(chromedp.Navigate(e.base+p.path), chromedp.WaitVisible(p.wait))
			switch p.path {
			case "/schedules":
				b.do(b.shot("schedules"))
			case "/schedules/retired-pay/delete":
				b.do(b.shot("schedule-delete"))
			}
			b.tabThrough(p.path)
		}
	})
}
