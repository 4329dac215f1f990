package console_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/drover-run/drover/store"
)

// ScreenshotsEnv names a directory the browser test writes a 1280×800
// screenshot of each page it visits to (not set: none are written).
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

// In a real headless Chromium an operator signs in, goes from the
// overview to the open alert, reads on the task page why the order
// failed, resubmits it after confirming, and sees it done.
func TestBrowserResubmitFailedTask(t *testing.T) {
	exe := chromium(t)
	stores(t, func(t *testing.T, d store.Driver) {
		e := startServer(t, d, false)
		e.submit("order-7", true)
		e.waitState("order-7", "Error")

		opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox,
			chromedp.WindowSize(1280, 800), chromedp.Flag("disable-dev-shm-usage", true))
		actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
		defer cancelA()
		ctx, cancel := chromedp.NewContext(actx)
		defer cancel()
		ctx, cancelT := context.WithTimeout(ctx, 90*time.Second)
		defer cancelT()

		shots := os.Getenv(ScreenshotsEnv)
		shot := func(name string) chromedp.Action[chromedp.Void] {
			return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
				if shots == "" {
					return nil
				}
				png, err := chromedp.FullScreenshot(100)(ctx, tg) // quality 100: PNG
				if err != nil {
					return err
				}
				if err := os.MkdirAll(shots, 0o755); err != nil {
					return err
				}
				return os.WriteFile(filepath.Join(shots, strings.ReplaceAll(t.Name(), "/", "-")+"-"+name+".png"), png, 0o644)
			})
		}
		text := func(sel chromedp.ID) string {
			t.Helper()
			v, err := chromedp.Run(ctx, chromedp.Text(sel))
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		do := func(steps ...chromedp.Action[chromedp.Void]) {
			t.Helper()
			if err := chromedp.Do(ctx, steps...); err != nil {
				t.Fatal(err)
			}
		}
		do(chromedp.Navigate(e.base+"/"),
			chromedp.WaitVisible(chromedp.ID("token")),
			shot("signin"),
			chromedp.SendKeys(chromedp.ID("token"), opToken),
			chromedp.Submit(chromedp.ID("token")),
			chromedp.WaitVisible(chromedp.CSS(`a.card[href="/alerts"]`)),
			shot("overview"),
			chromedp.Click(chromedp.CSS(`a.card[href="/alerts"]`)),
			chromedp.WaitVisible(chromedp.CSS(`a[href="/tasks/order-7"]`)),
			shot("alerts"),
			chromedp.Click(chromedp.CSS(`a[href="/tasks/order-7"]`)),
			chromedp.WaitVisible(chromedp.ID("story")),
			shot("task"))
		if story := text("story"); !strings.Contains(story, "failed") || !strings.Contains(story, "card declined") {
			t.Errorf("task page sentence: %q", story)
		}
		do(chromedp.Click(chromedp.CSS(`a[href="/tasks/order-7/resubmit"]`)),
			chromedp.WaitVisible(chromedp.ID("what")),
			shot("confirm-resubmit"))
		if what := text("what"); !strings.Contains(what, "runs again from step 0") {
			t.Errorf("confirmation: %q", what)
		}
		e.fixed.Store(true) // the operator fixed the cause
		do(chromedp.Click(chromedp.CSS(`form[action="/tasks/order-7/resubmit"] button`)),
			chromedp.WaitVisible(chromedp.CSS(`.flash`)))
		e.waitState("order-7", "Processed")
		do(chromedp.Reload(), chromedp.WaitVisible(chromedp.ID("story")), shot("task-done"))
		if after := text("story"); !strings.HasPrefix(after, "Done:") {
			t.Errorf("after the resubmit the sentence is %q", after)
		}
	})
}
