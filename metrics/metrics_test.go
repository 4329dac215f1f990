package metrics_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/internal/testutil"
	"github.com/drover-run/drover/metrics"
	"github.com/drover-run/drover/store/sqlite"
)

// gather returns every metric of reg by name, and the gather error.
func gather(t *testing.T, reg *prometheus.Registry) (map[string]float64, error) {
	t.Helper()
	mfs, err := reg.Gather()
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			got[mf.GetName()] = value(mf.GetType(), m)
		}
	}
	return got, err
}

func value(typ dto.MetricType, m *dto.Metric) float64 {
	if typ == dto.MetricType_COUNTER {
		return m.GetCounter().GetValue()
	}
	return m.GetGauge().GetValue()
}

// The metrics are the client's Stats, its supervisor's leadership and the
// store's active tasks.
func TestCollectorReportsTheClient(t *testing.T) {
	ctx := context.Background()
	drv, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "drover.db"), sqlite.Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	defer drv.Close()
	var calls atomic.Int64
	c, err := drover.New(drover.Config{
		Store:     drv,
		Workflows: []drover.Workflow{{Name: "w", Steps: []drover.Step{{Name: "s", Agent: "a", Timeout: time.Minute}}}},
		Agents: []drover.Agent{{Name: "a", Func: func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) {
			if strings.HasPrefix(r.TaskID, "bad") {
				return nil, drover.Permanent(errors.New("no"))
			}
			if calls.Add(1) == 1 {
				return nil, errors.New("transient") // retried
			}
			return []byte(`{}`), nil
		}, Concurrency: 1}},
		PollInterval:       5 * time.Millisecond,
		SupervisorInterval: 5 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewCollector(c, metrics.Options{}))

	// Before Start: no work, nothing held, no leader.
	got, err := gather(t, reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"drover_tasks_finished_total", "drover_supervisor_leader", "drover_tasks_active"} {
		if v, ok := got[name]; !ok || v != 0 {
			t.Errorf("%s = %v (present %v) before any work, want 0", name, v, ok)
		}
	}
	for _, id := range []string{"t1", "t2", "bad1"} {
		if _, err := c.Submit(ctx, "w", []byte(`{}`), &drover.SubmitOptions{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := gather(t, reg); got["drover_tasks_active"] != 3 {
		t.Errorf("drover_tasks_active = %v with 3 tasks submitted, want 3", got["drover_tasks_active"])
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Stop(ctx) }()
	testutil.WaitFor(t, "3 tasks finished and the supervisor leading", func() bool {
		return c.Stats().TasksFinished >= 3 && c.SupervisorTerm() != 0
	})
	got, err = gather(t, reg)
	if err != nil {
		t.Fatal(err)
	}
	s := c.Stats()
	want := map[string]float64{
		"drover_tasks_finished_total":   3,
		"drover_alerts_total":           float64(s.Alerts),
		"drover_steps_dispatched_total": float64(s.Dispatched),
		"drover_replies_applied_total":  float64(s.RepliesApplied),
		"drover_agent_calls_total":      float64(s.AgentCalls),
		"drover_agent_retries_total":    1,
		"drover_supervisor_leader":      1,
		"drover_supervisor_term":        float64(c.SupervisorTerm()),
		"drover_tasks_active":           0,
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s = %v, want %v", name, got[name], w)
		}
	}
	if s.Alerts == 0 || s.Dispatched < 3 || s.AgentCalls < 4 {
		t.Errorf("Stats %+v: want an alert (bad1), 3 dispatches and 4 calls", s)
	}
	// The labelled metrics the roles recorded come with them (the server's
	// tests check their series and labels).
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	families := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			families[mf.GetName()] += float64(m.GetHistogram().GetSampleCount()) + m.GetCounter().GetValue()
		}
	}
	for name, want := range map[string]float64{"drover_task_duration_seconds": 3, "drover_step_duration_seconds": 3,
		"drover_agent_call_duration_seconds": 4, "drover_alerts_by_kind_total": float64(s.Alerts)} {
		if families[name] != want {
			t.Errorf("%s counts %v, want %v", name, families[name], want)
		}
	}

	// A failed store read fails that metric, not the others.
	drv.Close()
	got, err = gather(t, reg)
	if err == nil || !strings.Contains(err.Error(), "drover_tasks_active") {
		t.Errorf("gather with the store closed: err %v, want one naming drover_tasks_active", err)
	}
	if got["drover_tasks_finished_total"] != 3 {
		t.Errorf("drover_tasks_finished_total = %v with the store closed, want 3", got["drover_tasks_finished_total"])
	}
}
