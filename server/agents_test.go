package server

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/internal/testutil"
	"github.com/drover-run/drover/internal/workflowdef"
)

// inProcess are agents given in Config.Agents, as the orders demo's are.
var inProcess = []string{"inventory", "payments", "shipping", "inventory-release", "payments-refund"}

// Agents of Config.Agents run in a server: never remote, even on a server
// without the agent role, where they are declared external.
func TestRemoteAgentNames(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "pay.yaml"), []byte("name: pay\nsteps:\n  - {name: charge, agent: billing}\n  - {name: refund, agent: payments-refund}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	reg, err := workflowdef.NewRegistry(workflowdef.Options{Store: testutil.SQLite(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.LoadDir(context.Background(), dir); err != nil {
		t.Fatal(err)
	}
	for _, agents := range [][]string{nil, inProcess} {
		want := map[string]bool{"billing": true, "http": false, "payments-refund": true, "other": false}
		if agents != nil {
			want = map[string]bool{"billing": true, "http": false, "payments-refund": false, "payments": false}
		}
		f := (&Server{agents: agents}).remoteAgent(reg)
		for agent, remote := range want {
			if f(agent) != remote {
				t.Errorf("agents %v: remote %q = %v, want %v", agents, agent, !remote, remote)
			}
		}
	}
}

// On reload, a server with Config.Agents refuses a new version that names
// one of them as a remote agent, also when this process runs no agent
// (the library only knows the agents of this process).
func TestAgentGuardRefusesReloadedRemoteAgent(t *testing.T) {
	t.Parallel()
	c, err := drover.New(drover.Config{Store: testutil.SQLite(t), Roles: drover.Roles{Scheduler: true},
		Workflows: []drover.Workflow{{Name: "orders", Steps: []drover.Step{{Name: "pay", Agent: "payments"}}}}, ExternalAgents: inProcess})
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{agents: inProcess, cfg: Config{AgentsProvider: "the orders demo (--demo)"}}
	pay := []drover.Workflow{{Name: "pay", Steps: []drover.Step{{Name: "charge", Agent: "payments"}}}}
	err = agentGuard{c, s}.AddWorkflows(pay, []string{"payments"})
	if !errors.Is(err, drover.ErrInvalidConfig) || !strings.Contains(err.Error(), `agent "payments" has two providers: the orders demo (--demo)`) {
		t.Fatalf("AddWorkflows: %v, want the two providers named", err)
	}
	if n := len(c.Workflows()); n != 1 {
		t.Fatalf("%d workflows registered after the refusal, want 1", n)
	}
	ok := []drover.Workflow{{Name: "pay", Steps: []drover.Step{{Name: "charge", Agent: "pay-agent"}}}}
	if err := (agentGuard{c, s}).AddWorkflows(ok, []string{"pay-agent"}); err != nil {
		t.Fatalf("AddWorkflows of another agent: %v", err)
	}
	if n := len(c.Workflows()); n != 2 {
		t.Fatalf("%d workflows registered, want 2", n)
	}
}
