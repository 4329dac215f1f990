package console_test

import (
	"regexp"
	"testing"
	"time"

	"github.com/drover-run/drover/store"
)

var leaderRE = regexp.MustCompile(`Supervisor leader: <code>([^<]+)</code>, term (\d+)`)

// The overview charts the last hour's finished tasks and their latency,
// shows each queue's depth, and names the supervisor leader from its
// lease: two servers on one store name the same leader.
func TestOverviewChartsDepthLeader(t *testing.T) {
	stores(t, func(t *testing.T, d store.Driver) {
		e := startServer(t, d, false)
		other := startServer(t, d, false)
		for _, id := range []string{"ok-1", "ok-2", "ok-3"} {
			e.submit(id, false)
		}
		e.submit("bad-1", true)
		e.waitState("bad-1", "Error")
		for _, id := range []string{"ok-1", "ok-2", "ok-3"} {
			e.waitState(id, "Processed")
		}
		e.api("POST", "/v1/queues/ledger/messages", `{"messages":[{"session_id":"acct-1","body":"x"},{"session_id":"acct-1","body":"y"},{"session_id":"acct-2","body":"z"}]}`, nil)

		c := browser(t)
		e.signIn(c, readToken)
		ov := e.get(c, "/")
		wantIn(t, ov, `<svg class="chart" id="throughput"`, `<svg class="chart" id="latency"`,
			"4 tasks finished since", "(3 processed, 1 failed, compensated or cancelled); submit to Processed took",
			`<rect class="ch-ok"`, `: 3 processed</title>`, `: 1 failed, compensated or cancelled</title>`, `<polyline class="ch-p50"`,
			`<td><a href="/queues/ledger">ledger</a></td><td>2</td><td>3</td>`)
		wantOut(t, ov, "Only the newest")

		// Both servers name one leader, read from its lease, whichever serves
		// the page (the lease is taken within the supervisor's first tick).
		c2 := browser(t)
		other.signIn(c2, readToken)
		deadline := time.Now().Add(30 * time.Second)
		for {
			m1, m2 := leaderRE.FindStringSubmatch(e.get(c, "/").body), leaderRE.FindStringSubmatch(other.get(c2, "/").body)
			if m1 != nil && m2 != nil && m1[1] == m2[1] && m1[2] == m2[2] {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("after 30s the two overviews name leaders %q and %q", m1, m2)
			}
			time.Sleep(20 * time.Millisecond)
		}
		served := regexp.MustCompile(`served by instance <code>([^<]+)</code>`)
		s1, s2 := served.FindStringSubmatch(e.get(c, "/").body), served.FindStringSubmatch(other.get(c2, "/").body)
		if s1 == nil || s2 == nil || s1[1] == s2[1] {
			t.Fatalf("the pages were served by %q and %q: want two instances", s1, s2)
		}
		// Either lists both live instances.
		// (two schedulers each on PostgreSQL, one on SQLite).
		wantIn(t, other.get(c2, "/"), "<td><code>"+s1[1]+"</code></td><td>scheduler ×", "<td><code>"+s2[1]+"</code></td><td>scheduler ×",
			" agent supervisor</td><td>0</td>")
	})
}
