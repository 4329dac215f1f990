package console_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/drover-run/drover/droverapi"
	"github.com/drover-run/drover/internal/testutil"
	"github.com/drover-run/drover/internal/workflowdef"
	"github.com/drover-run/drover/server"
	"github.com/drover-run/drover/store"
)

// shipV1 and shipV2 are two versions of a declarative workflow: the
// second adds a step and compensates.
const (
	shipV1 = "name: ship\nsteps:\n  - name: label\n    agent: labels\n    timeout: 2s\n"
	shipV2 = "name: ship\non_failure: compensate\nfailure_threshold: 5\nsteps:\n  - name: label\n    agent: labels\n    timeout: 2s\n    compensate: {agent: voids}\n  - name: pickup\n    agent: couriers\n"
)

// startWithShip stores shipV1 as version 1 of "ship", then starts the
// server with shipV2 in its workflow directory (version 2, current).
func startWithShip(t *testing.T, d store.Driver) *env {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "ship.yaml"), []byte(shipV1), 0o600); err != nil {
		t.Fatal(err)
	}
	reg, err := workflowdef.NewRegistry(workflowdef.Options{Store: d})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.LoadDir(context.Background(), dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ship.yaml"), []byte(shipV2), 0o600); err != nil {
		t.Fatal(err)
	}
	return startServerWith(t, d, false, nil, func(c *server.Config) { c.WorkflowsDir = dir })
}

// The Workflows page draws every workflow and every stored version with
// its steps, agents, timeouts, failure policy and compensations, and
// counts each version's running and failed tasks.
func TestWorkflowsPage(t *testing.T) {
	stores(t, func(t *testing.T, d store.Driver) {
		e := startWithShip(t, d)
		e.submit("bad-1", true)
		e.submit("bad-2", true)
		e.waitState("bad-1", "Error")
		e.waitState("bad-2", "Error")
		e.api("POST", "/v1/tasks", `{"workflow":"ship","id":"s-1","input":{}}`, nil) // no courier agent runs: it stays running

		c := browser(t)
		e.signIn(c, readToken)
		p := e.countedPage(c, "/workflows")
		wantIn(t, p, `href="/workflows" aria-current="page"`,
			`<section class="workflow" id="wf-pay">`, "defined in code", `<span class="idx">0</span> charge`, "<dd>payments</dd>", "<dd>5s</dd>",
			"Error, alert an operator", `<strong class="bad">2</strong> in Error`,
			`<section class="workflow" id="wf-ship">`, `version 2 <span class="tag">current</span>`, "version 1",
			"undo: <strong>voids</strong>", "<span class=\"idx\">1</span> pickup", "<dd>couriers</dd>", "<dd>30s</dd>",
			"compensate the completed steps", "until it failed 5 times", "<strong>1</strong> running")
	})
}

// The Agents page lists every agent the workflows name, where it runs,
// the steps it serves and the calls in flight.
func TestAgentsPage(t *testing.T) {
	e := startWithShip(t, testutil.SQLite(t))
	e.api("POST", "/v1/tasks", `{"workflow":"pay","id":"held-1","input":{"hold":true}}`, nil)
	e.api("POST", "/v1/tasks", `{"workflow":"ship","id":"s-1","input":{}}`, nil) // no process serves labels
	e.waitState("held-1", "Processing")
	e.waitState("s-1", "Processing")
	// A remote agent polls for couriers (nothing to claim) with the
	// operator's token: it is connected, through this server.
	e.api("POST", "/v1/agents/couriers/poll", `{"wait_ms":0}`, nil)
	c := browser(t)
	e.signIn(c, readToken)
	// The overview lists the live instance, its roles and the two tasks
	// it holds, and the remote agents with who polls for them and their
	// calls in flight.
	ov := e.get(c, "/")
	inst := e.ready.InstanceID
	wantIn(t, ov, `<td>scheduler ×1 agent supervisor</td><td>2</td>`,
		`<td><a href="/agents">labels</a></td><td><span class="bad">nobody polling</span></td><td>1</td>`,
		`<td><a href="/agents">couriers</a></td><td><ul class="uses pollers"><li><code>oncall</code> via <code>`+inst+`</code></li></ul></td><td>0</td>`)
	wantOut(t, ov, `<a href="/agents">payments</a>`)
	// Another server on the store lists the same poller, connected
	// through the first.
	other := startWithShip(t, e.drv)
	oc := browser(t)
	other.signIn(oc, readToken)
	wantIn(t, other.get(oc, "/"), `<td><a href="/agents">couriers</a></td><td><ul class="uses pollers"><li><code>oncall</code> via <code>`+inst+`</code></li></ul></td>`)

	// payments calls: one succeeds, one fails for good; the remote
	// agent of labels takes s-1's request and completes it.
	e.submit("ok-1", false)
	e.submit("bad-1", true)
	e.waitState("ok-1", "Processed")
	e.waitState("bad-1", "Error")
	var polled droverapi.PollResult
	e.api("POST", "/v1/agents/labels/poll", `{"wait_ms":5000}`, &polled)
	if len(polled.Requests) != 1 {
		t.Fatalf("labels poll: %+v, want s-1's request", polled)
	}
	q := polled.Requests[0]
	e.api("POST", fmt.Sprintf("/v1/agents/requests/%d/complete", q.ID), fmt.Sprintf(`{"token":%q,"output":{}}`, q.Token), nil)
	p := e.countedPage(c, "/agents")
	wantIn(t, p, `href="/agents" aria-current="page"`,
		"<td><strong>payments</strong></td><td>in this server&#39;s process (a Go agent)</td><td>-</td><td>1</td>",
		`<td>2, <span class="bad">50% failed</span></td>`, `<td><span class="breaker br-closed">closed</span></td>`, "<li>pay step 0 charge</li>",
		`<td>1, <span>0% failed</span></td>`, // labels: the result its remote agent sent
		"<td><strong>couriers</strong></td><td>remote: another process polls the API for its requests</td><td><ul class=\"uses pollers\"><li><code>oncall</code>",
		"<td><strong>payments</strong></td><td>in this server&#39;s process (a Go agent)</td><td>-</td>",
		"<li>ship v2 step 1 pickup</li>", "<li>ship v2 undoes step 0 label</li>", "<li>ship v1 step 0 label</li>",
		`<dl class="facts" id="agent-stats">`)
}
