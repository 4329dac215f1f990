package console_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/drover-run/drover/internal/cli"
	"github.com/drover-run/drover/internal/testutil"
)

// consoleReady starts the line "drover demo orders --console" prints
// with the console's URL.
const consoleReady = "demo: the operator console shows this demo's orders at "

// startDemo runs "drover demo orders … --console 127.0.0.1:0" with faults
// (extra: its store flags) and returns the console's base URL once it
// serves; the demo stops when the test ends and must exit 0.
func startDemo(t *testing.T, extra ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr testutil.Buffer
	done := make(chan int, 1)
	args := append([]string{"demo", "orders", "--orders", "40", "--transient-rate", "0.1", "--hang-rate", "0", "--permanent-rate", "0.15",
		"--seed", "7", "--console", "127.0.0.1:0"}, extra...)
	go func() { done <- cli.Main(ctx, args, &stdout, &stderr) }()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("the demo exited %d: %s", code, stderr.String())
		}
	})
	deadline := time.Now().Add(90 * time.Second)
	for {
		for _, l := range strings.Split(stderr.String(), "\n") {
			if rest, ok := strings.CutPrefix(l, consoleReady); ok {
				base, _, _ := strings.Cut(rest, "/ ")
				return base
			}
		}
		select {
		case code := <-done:
			done <- code
			t.Fatalf("the demo exited %d before serving the console: %s", code, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the demo did not serve the console within 90s: %s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// getJSON reads an API path of a server without auth.
func getJSON(t *testing.T, url string, out any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d", url, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatal(err)
	}
}

// The incident drill: the orders demo runs with faults and keeps serving
// its console; the operator opens it on the overview, reaches a failed
// order through the alerts, reads why on its page, resubmits it and sees
// it Processed, within 6 page actions. On SQLite and PostgreSQL.
func TestBrowserIncidentDrill(t *testing.T) {
	for _, tc := range []struct {
		name string
		args func(t *testing.T) []string
	}{
		{"sqlite", func(*testing.T) []string { return nil }},
		{"postgres", func(t *testing.T) []string {
			return []string{"--db", testutil.PostgresURL(t), "--schema", testutil.FreshSchema(t)}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			base := startDemo(t, tc.args(t)...)

			// The failed order the operator will pick: one the demo
			// compensated after an alert (the drill follows the alert).
			var list struct {
				Tasks []struct{ ID, State, LastError string }
			}
			getJSON(t, base+"/v1/tasks?state=Compensated&limit=1", &list)
			if len(list.Tasks) == 0 {
				t.Fatal("the demo compensated no order: no incident to drill")
			}
			id := list.Tasks[0].ID

			b := newTab(t)
			if tc.name == "postgres" {
				b.shots = "" // the SQLite run writes the screenshots
			}
			b.do(chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS(`a.card[href="/alerts"]`)), b.shot("overview"))
			// The demo finished its orders within the hour: the charts show them.
			b.do(chromedp.WaitVisible(chromedp.CSS(`#throughput rect.ch-ok`)), chromedp.WaitVisible(chromedp.CSS(`#latency polyline.ch-p50`)))
			b.want("#hour-summary", "tasks finished since", "processed")
			b.want("#leader", "Supervisor leader", "term")
			b.follow("/alerts", "alerts-list", "alerts")
			b.follow("/tasks/"+id, "story", "task")
			b.want("#story", "Failed and compensated", "rejected")
			b.follow("/tasks/"+id+"/resubmit", "what", "confirm-resubmit")
			b.want("#what", "runs again from step 0 as a new run")
			b.press("/tasks/" + id + "/resubmit")
			deadline := time.Now().Add(30 * time.Second)
			for {
				var task struct{ State string }
				getJSON(t, base+"/v1/tasks/"+id, &task)
				if task.State == "Processed" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s is %s 30s after the resubmit, want Processed", id, task.State)
				}
				time.Sleep(20 * time.Millisecond)
			}
			b.actions++
			b.do(chromedp.Reload(), chromedp.WaitVisible(chromedp.ID("story")), b.shot("task-done"))
			b.want("#story", "Done: all 3 steps completed")
			b.want("table.attempts tbody", "rejected", "processed")
			b.do(chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
				_, err := chromedp.Evaluate[bool](`(document.getElementById("attempts").scrollIntoView(), true)`)(ctx, tg)
				return err
			}), b.shot("task-attempts"))
			if b.actions > 6 {
				t.Errorf("the drill took %d page actions, want at most 6", b.actions)
			}
			// The rest of the demo's console, for the screenshots.
			b.follow("/tasks", "tasks-list", "tasks")
			b.follow("/workflows", "workflows-list", "workflows")
			b.want("#wf-orders", "reserve", "inventory-release", "charge", "payments-refund", "ship")
			b.follow("/agents", "agents-list", "agents")
			b.want("table.agents", "inventory-release", "orders undoes step 0 reserve", "shipping")
		})
	}
}
