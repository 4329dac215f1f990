package metrics_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/convoy"
	"github.com/drover-run/drover/internal/testutil"
	"github.com/drover-run/drover/metrics"
	"github.com/drover-run/drover/store/sqlite"
)

// A library's convoy processor, given ConvoyObserver, counts the session
// locks it renews and the sessions it blocks with the client's metrics.
func TestConvoyObserver(t *testing.T) {
	ctx := context.Background()
	drv, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "drover.db"), sqlite.Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	defer drv.Close()
	c, err := drover.New(drover.Config{Store: drv,
		Workflows: []drover.Workflow{{Name: "w", Steps: []drover.Step{{Name: "s", Agent: "a"}}}},
		Agents:    []drover.Agent{{Name: "a", Func: func(context.Context, *drover.AgentRequest) ([]byte, error) { return nil, nil }}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	q, err := convoy.New(convoy.Config{Store: drv, Observer: metrics.ConvoyObserver(c), PollInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{`"slow"`, `"bad"`} {
		if _, err := q.Publish(ctx, "ledger", convoy.Message{SessionID: "acct-1", Body: []byte(body)}); err != nil {
			t.Fatal(err)
		}
	}
	// The slow message outlives two lock durations: the processor renews
	// the lock meanwhile; the bad one blocks the session (the default
	// policy).
	p, err := convoy.NewProcessor(q, "ledger", func(ctx context.Context, m *convoy.ReceivedMessage) error {
		if string(m.Body) == `"bad"` {
			return convoy.DeadLetterError(errors.New("bad amount"))
		}
		time.Sleep(400 * time.Millisecond)
		return nil
	}, convoy.ProcessorOptions{LockDuration: 150 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Stop(ctx) }()
	testutil.WaitFor(t, "the bad message dead-lettered", func() bool { return p.Stats().DeadLettered == 1 })

	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewCollector(c, metrics.Options{}))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range m.GetLabel() {
				key += "," + l.GetName() + "=" + l.GetValue()
			}
			counts[key] = m.GetCounter().GetValue()
		}
	}
	if n := counts["drover_session_locks_total,event=renewed,namespace=default,queue=ledger"]; n < 1 {
		t.Errorf("session locks renewed: %v, want at least 1 (%v)", n, counts)
	}
	if n := counts["drover_alerts_by_kind_total,kind=session_blocked,namespace=default,workflow="]; n != 1 {
		t.Errorf("session_blocked alerts: %v, want 1 (%v)", n, counts)
	}
}
