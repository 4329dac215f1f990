package workflowdef

import (
	"strings"
	"testing"
	"time"

	"github.com/drover-run/drover"
)

// TestParseSignalStep: a step with signal waits for it (no agent), with a
// required timeout, its own on_failure and a literal default outcome;
// later steps may read its output.
func TestParseSignalStep(t *testing.T) {
	src := `name: order
steps:
  - name: approve
    signal: approved
    timeout: 48h
    on_failure: compensate
    default: {approved: false, by: [system]}
  - name: paid
    signal: payment
    timeout: 10m
  - name: ship
    agent: shipper
    input: {approval: "${steps.approve.output}"}
`
	d, err := Parse("order.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	w := d.Workflow()
	if err := w.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	want := drover.Step{Name: "approve", Signal: "approved", Timeout: 48 * time.Hour, OnFailure: drover.PolicyCompensate,
		SignalDefault: []byte(`{"approved":false,"by":["system"]}`)}
	if s := w.Steps[0]; s.Name != want.Name || s.Signal != want.Signal || s.Agent != "" || s.Timeout != want.Timeout ||
		s.OnFailure != want.OnFailure || string(s.SignalDefault) != string(want.SignalDefault) {
		t.Errorf("approve = %+v", s)
	}
	if s := w.Steps[1]; s.Signal != "payment" || s.SignalDefault != nil || s.Timeout != 10*time.Minute {
		t.Errorf("paid = %+v", s)
	}
	if got := d.ExternalAgents(); len(got) != 1 || got[0] != "shipper" {
		t.Errorf("ExternalAgents = %v, want shipper only", got)
	}
}

func TestParseSignalStepProblems(t *testing.T) {
	cases := []struct{ name, step, want string }{
		{"no timeout", "    signal: ok\n", "w.yaml:3: steps[0].timeout: required for a signal step: how long it waits for its signal"},
		{"agent too", "    signal: ok\n    timeout: 1h\n    agent: a\n", "w.yaml:6: steps[0].agent: a signal step waits for its signal and calls nothing: remove agent"},
		{"bad name", "    signal: \"a b\"\n    timeout: 1h\n", `w.yaml:4: steps[0].signal: "a b" must be 1-200 printable characters without spaces or "/"`},
		{"expression default", "    signal: ok\n    timeout: 1h\n    default: \"${input.x}\"\n", "w.yaml:6: steps[0].default: a default outcome is a literal value: ${...} expressions are not evaluated here"},
		{"default without signal", "    agent: a\n    default: 1\n", "w.yaml:5: steps[0].default: only a signal step (signal: NAME) has a default outcome"},
	}
	for _, c := range cases {
		_, err := Parse("w.yaml", []byte("name: w\nsteps:\n  - name: s\n"+c.step))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v\nwant %s", c.name, err, c.want)
		}
	}
}
