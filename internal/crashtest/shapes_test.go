package crashtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/droverclient"
	"github.com/drover-run/drover/internal/remotesim"
)

// The cluster's second workload: a declarative workflow whose first step
// is a parallel group of two HTTP branches against the simulated service,
// joined by a third step, submitted through the servers' API with delays,
// and fired every second by a schedule. Every call carries the task's ID
// as its order, so the service counts each branch's effect per task.
const (
	fanoutWorkflow = "fanout"
	tickSchedule   = "tick"
	tickPrefix     = "schedule:" + tickSchedule + ":"
)

// fanoutYAML is the workflow file the servers load (--workflows); remote
// is the simulated service's URL.
func fanoutYAML(remote string) string {
	call := func(op string) string {
		return fmt.Sprintf(`{method: POST, url: "%s/v1/%s", body: {order_id: "${task.id}", amount: 1}}`, remote, op)
	}
	return `name: ` + fanoutWorkflow + `
on_failure: compensate
egress:
  allow: [127.0.0.0/8]
steps:
  - name: reserve
    parallel:
      - name: stock
        timeout: 1s
        http: ` + call("fanout-stock") + `
        compensate:
          http: ` + call("fanout-unstock") + `
      - name: payment
        timeout: 1s
        http: ` + call("fanout-pay") + `
        compensate:
          http: ` + call("fanout-refund") + `
  - name: confirm
    timeout: 1s
    http: ` + call("fanout-confirm") + `
schedules:
  - name: ` + tickSchedule + `
    every: 1s
    catch_up: all
`
}

// writeFanoutWorkflow writes the workflow file into a new directory and
// returns the directory.
func writeFanoutWorkflow(t *testing.T, remote string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, fanoutWorkflow+".yaml"), []byte(fanoutYAML(remote)), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// fanoutSubmitter submits n fanout tasks through random servers' HTTP API,
// each delayed by up to two seconds, retrying through kills and the
// database outage (by ID: a retry returns the task already taken).
type fanoutSubmitter struct {
	n      int
	api    func() serverAPI
	rng    *rand.Rand // the submitter's own; only its goroutine uses it
	delays map[string]time.Duration
	mu     sync.Mutex
	done   atomic.Int64
	quit   chan struct{}
	exited chan struct{}
}

func newFanoutSubmitter(n int, api func() serverAPI, seed uint64) *fanoutSubmitter {
	return &fanoutSubmitter{n: n, api: api, rng: rand.New(rand.NewPCG(seed, seed^0xfa7)),
		delays: map[string]time.Duration{}, quit: make(chan struct{}), exited: make(chan struct{})}
}

func (s *fanoutSubmitter) run() {
	defer close(s.exited)
	for i := 1; i <= s.n; {
		select {
		case <-s.quit:
			return
		case <-time.After(100 * time.Millisecond):
		}
		id := fmt.Sprintf("fanout-%d", i)
		delay := time.Duration(s.rng.IntN(2000)) * time.Millisecond
		s.mu.Lock()
		if d, ok := s.delays[id]; ok {
			delay = d // a retry asks for the same
		}
		s.delays[id] = delay
		s.mu.Unlock()
		api := s.api()
		if api.url == "" {
			continue
		}
		hc, err := droverclient.New(api.url, "")
		if err != nil {
			continue
		}
		ms := delay.Milliseconds()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, _, err = hc.SubmitTask(ctx, droverclient.SubmitRequest{Workflow: fanoutWorkflow, ID: id, Input: []byte(`{}`), DelayMS: &ms})
		cancel()
		if err != nil {
			continue // the same ID at the next tick
		}
		s.done.Store(int64(i))
		i++
	}
}

func (s *fanoutSubmitter) stop() {
	select {
	case <-s.quit:
	default:
		close(s.quit)
	}
	<-s.exited
}

// checkFanout checks the second workload once every task is final: every
// fanout task submitted, each parallel branch's effect applied at most
// once and, for a Processed task, exactly once; a compensated branch
// undone; no delayed task started before its delay; and the schedule
// fired every second from its first due time to its last, each once.
func checkFanout(t *testing.T, c *drover.Client, sim *remotesim.Service, s *fanoutSubmitter, evs []*drover.Event) {
	t.Helper()
	ctx := context.Background()
	tasks, err := c.Tasks(ctx, drover.ListParams{Workflow: fanoutWorkflow, Limit: 100000})
	if err != nil {
		t.Fatal(err)
	}
	firstStart := map[string]time.Time{}
	for _, e := range evs {
		if e.Type == drover.EventStepStarted {
			if _, ok := firstStart[e.TaskID]; !ok {
				firstStart[e.TaskID] = e.CreatedAt
			}
		}
	}
	var submitted, processed, compensated int
	var due []time.Time
	for _, tk := range tasks {
		if strings.HasPrefix(tk.ID, tickPrefix) {
			at, err := time.Parse(time.RFC3339, strings.TrimPrefix(tk.ID, tickPrefix))
			if err != nil {
				t.Errorf("schedule task %s: its ID names no due time: %v", tk.ID, err)
				continue
			}
			due = append(due, at)
		} else {
			submitted++
			s.mu.Lock()
			delay := s.delays[tk.ID]
			s.mu.Unlock()
			if start, ok := firstStart[tk.ID]; ok && start.Before(tk.CreatedAt.Add(delay)) {
				t.Errorf("%s started at %s, before its delay of %s from %s", tk.ID, start, delay, tk.CreatedAt)
			}
		}
		switch tk.ProcessState {
		case drover.Processed:
			processed++
			for _, op := range []string{"fanout-stock", "fanout-pay", "fanout-confirm"} {
				if n := sim.Applied(op, tk.ID); n != 1 {
					t.Errorf("%s Processed but %s applied %d times", tk.ID, op, n)
				}
			}
		case drover.Compensated, drover.Error:
			compensated++
			if n := sim.Applied("fanout-confirm", tk.ID); n != 0 && tk.ProcessState == drover.Compensated {
				t.Errorf("%s Compensated but its last step applied %d times", tk.ID, n)
			}
			// A branch that took effect was undone (a timed-out one may
			// be undone without having taken effect).
			for do, undo := range map[string]string{"fanout-stock": "fanout-unstock", "fanout-pay": "fanout-refund"} {
				if tk.ProcessState == drover.Compensated && sim.Applied(do, tk.ID) > sim.Applied(undo, tk.ID) {
					t.Errorf("%s Compensated but %s applied %d times and %s %d", tk.ID, do, sim.Applied(do, tk.ID), undo, sim.Applied(undo, tk.ID))
				}
			}
		default:
			t.Errorf("%s is %s, not final", tk.ID, tk.ProcessState)
		}
		for _, op := range []string{"fanout-stock", "fanout-pay", "fanout-confirm", "fanout-unstock", "fanout-refund"} {
			if n := sim.Applied(op, tk.ID); n > 1 {
				t.Errorf("%s: %s applied %d times", tk.ID, op, n)
			}
		}
	}
	if want := int(s.done.Load()); submitted != want || want != s.n {
		t.Errorf("%d fanout tasks stored, %d submitted, want %d", submitted, want, s.n)
	}
	slices.SortFunc(due, func(a, b time.Time) int { return a.Compare(b) })
	for i := 1; i < len(due); i++ {
		if d := due[i].Sub(due[i-1]); d != time.Second {
			t.Errorf("schedule %s: due times %s and %s are %s apart: a due time lost or fired twice", tickSchedule,
				due[i-1].Format(time.RFC3339), due[i].Format(time.RFC3339), d)
		}
	}
	if len(due) < 10 {
		t.Errorf("schedule %s fired %d times, want one a second through the run", tickSchedule, len(due))
	}
	t.Logf("fanout: %d submitted with delays, %d fired by the schedule (%s to %s); %d Processed, %d Compensated or Error",
		submitted, len(due), first(due), last(due), processed, compensated)
}

func first(ts []time.Time) string {
	if len(ts) == 0 {
		return "-"
	}
	return ts[0].Format(time.RFC3339)
}

func last(ts []time.Time) string {
	if len(ts) == 0 {
		return "-"
	}
	return ts[len(ts)-1].Format(time.RFC3339)
}
