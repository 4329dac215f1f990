package instrument_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/drover-run/drover/internal/instrument"
)

// labelValues gathers r and returns the values label takes in family name.
func labelValues(t *testing.T, r *instrument.Recorder, name, label string) map[string]bool {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(r)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			out[value(m, label)] = true
		}
	}
	return out
}

func value(m *dto.Metric, label string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == label {
			return l.GetValue()
		}
	}
	return ""
}

// Workflow, step, agent, namespace and queue names past their caps are
// folded into Other: the series stay bounded whatever callers name.
func TestLabelValuesAreCapped(t *testing.T) {
	r := instrument.New()
	extra := 30
	var obs []instrument.Observation
	for i := range instrument.MaxWorkflows + extra {
		obs = append(obs, instrument.Observation{Kind: instrument.TaskFinished, Namespace: fmt.Sprintf("ns-%d", i%(instrument.MaxNamespaces+extra)),
			Workflow: fmt.Sprintf("wf-%d", i), State: "Processed", Duration: time.Second})
	}
	for i := range instrument.MaxSteps + extra {
		obs = append(obs, instrument.Observation{Kind: instrument.StepRetried, Workflow: "wf-0", Step: fmt.Sprintf("step-%d", i)})
	}
	for i := range instrument.MaxNamespaces + extra {
		obs = append(obs, instrument.Observation{Kind: instrument.Alert, Namespace: fmt.Sprintf("ns-%d", i), Workflow: "wf-0", State: "error"})
	}
	r.Observe(obs)
	for i := range instrument.MaxAgents + extra {
		r.AgentCall(fmt.Sprintf("agent-%d", i), instrument.CallOK, time.Millisecond)
	}
	for i := range instrument.MaxQueues + extra {
		r.SessionLock(fmt.Sprintf("q-%d", i), true)
	}
	for _, c := range []struct {
		family, label string
		max           int
	}{
		{"drover_task_duration_seconds", "workflow", instrument.MaxWorkflows},
		{"drover_step_retries_total", "step", instrument.MaxSteps},
		{"drover_alerts_by_kind_total", "namespace", instrument.MaxNamespaces},
		{"drover_agent_call_duration_seconds", "agent", instrument.MaxAgents},
		{"drover_session_locks_total", "queue", instrument.MaxQueues},
	} {
		got := labelValues(t, r, c.family, c.label)
		if len(got) != c.max+1 || !got[instrument.Other] {
			t.Errorf("%s: %d values of %s (other: %v), want %d and %q", c.family, len(got), c.label, got[instrument.Other], c.max+1, instrument.Other)
		}
	}
	// A value seen before the cap keeps its own series.
	r.AgentCall("agent-0", instrument.CallError, time.Millisecond)
	if got := labelValues(t, r, "drover_agent_call_duration_seconds", "agent"); !got["agent-0"] || len(got) != instrument.MaxAgents+1 {
		t.Errorf("agent-0 lost its series past the cap: %d values", len(got))
	}
}

// HTTP requests are labelled by route pattern and a known method; an
// unknown method is Other, a status not written is 200.
func TestHTTPRequestLabels(t *testing.T) {
	r := instrument.New()
	r.HTTPRequest("GET", "/v1/tasks/{id}", 0, time.Millisecond)
	r.HTTPRequest("BREW", instrument.Unmatched, 405, time.Millisecond)
	if got := labelValues(t, r, "drover_http_requests_total", "method"); !got["GET"] || !got[instrument.Other] || len(got) != 2 {
		t.Errorf("methods %v, want GET and other", got)
	}
	if got := labelValues(t, r, "drover_http_requests_total", "status"); !got["200"] || !got["405"] {
		t.Errorf("statuses %v, want 200 and 405", got)
	}
}

// A nil Recorder records nothing and does not panic: the roles call it
// unconditionally.
func TestNilRecorder(t *testing.T) {
	var r *instrument.Recorder
	r.Observe([]instrument.Observation{{Kind: instrument.TaskFinished}})
	r.AgentCall("a", instrument.CallOK, time.Second)
	r.LeaderChange("supervisor", true)
	r.SessionLock("q", false)
	r.HTTPRequest("GET", "/healthz", 200, time.Second)
}

// BenchmarkObserve is the cost on the scheduler's path of one finished
// one-step task: its step's and its task's observations.
func BenchmarkObserve(b *testing.B) {
	r := instrument.New()
	obs := []instrument.Observation{
		{Kind: instrument.StepFinished, Workflow: "orders", Step: "charge", State: "processed", Duration: time.Millisecond},
		{Kind: instrument.TaskFinished, Workflow: "orders", State: "Processed", Duration: 3 * time.Millisecond},
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r.Observe(obs)
		}
	})
}

// BenchmarkAgentCall is the cost on the agent runtime's path of one call.
func BenchmarkAgentCall(b *testing.B) {
	r := instrument.New()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r.AgentCall("payments", instrument.CallOK, time.Millisecond)
		}
	})
}
