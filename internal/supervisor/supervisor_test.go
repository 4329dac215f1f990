package supervisor_test

import (
	"context"
	"fmt"
	"github.com/drover-run/drover/internal/testutil"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/clock"
	"github.com/drover-run/drover/internal/flow"
	"github.com/drover-run/drover/internal/supervisor"
	"github.com/drover-run/drover/store"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

const (
	stepTimeout = time.Second
	leaseTTL    = 10 * time.Second
)

func openStore(t *testing.T) store.Driver {
	t.Helper()
	return testutil.SQLite(t)
}

// seed submits n one-step tasks that retry (practically) forever.
func seed(t *testing.T, d store.Driver, n int, now time.Time) {
	t.Helper()
	subs := make([]flow.Submission, n)
	for i := range subs {
		id := fmt.Sprintf("t%03d", i)
		in := []byte(`{}`)
		subs[i] = flow.Submission{
			Task: &dt.Task{ID: id, Workflow: "wf", Input: in, InputHash: flow.InputHash("wf", in), ProcessState: dt.Pending,
				StepCount: 1, FailureThreshold: 1000, OnFailure: dt.PolicyError, AvailableAt: now, CreatedAt: now, UpdatedAt: now},
			Steps: []*dt.StepRecord{{TaskID: id, Name: "s", Agent: "a", Timeout: stepTimeout, ProcessState: dt.Pending,
				IdempotencyKey: flow.IdempotencyKey(id, 0, "s"), UpdatedAt: now}},
		}
	}
	if err := d.InTx(context.Background(), func(ctx context.Context, x store.Executor) error {
		_, err := flow.Submit(ctx, x, subs)
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// dispatch has a scheduler claim every claimable task; it returns how many.
func dispatch(t *testing.T, d store.Driver, now time.Time) int {
	t.Helper()
	var n int
	if err := d.InTx(context.Background(), func(ctx context.Context, x store.Executor) error {
		var err error
		_, n, _, err = (&flow.Machine{Instance: "sched"}).Claim(ctx, x, now, 10000)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

func newSup(d store.Driver, c clock.Clock, instance string) *supervisor.Supervisor {
	s := supervisor.New(d, c, instance, quiet, &flow.Counters{})
	s.LeaseTTL = leaseTTL
	s.Interval = 10 * time.Millisecond
	s.Batch = 16
	return s
}

func counts(t *testing.T, d store.Driver) map[dt.ProcessState]int {
	t.Helper()
	c, err := d.Reader().TaskCountByState(context.Background(), &store.TaskCountByStateParams{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func allEvents(t *testing.T, d store.Driver) []*dt.Event {
	t.Helper()
	evs, err := d.Reader().EventList(context.Background(), &store.EventListParams{})
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// Two supervisors sweep one store concurrently, over and over, through
// several leadership changes: only the leader of the moment ever acts, each
// expired step is recovered exactly once, and every recovery is signed with a
// term its actor really held.
func TestTwoSupervisorsOnlyLeaderActs(t *testing.T) {
	t.Parallel()
	const (
		tasks  = 60
		rounds = 12
	)
	d := openStore(t)
	clk := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	seed(t, d, tasks, clk.Now())
	sups := []*supervisor.Supervisor{newSup(d, clk, "sup-1"), newSup(d, clk, "sup-2")}

	var (
		mu       sync.Mutex
		held     = map[int64]string{} // term → the one instance that held it
		problems []string
	)
	note := func(format string, args ...any) {
		mu.Lock()
		problems = append(problems, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	record := func(instance string, term int64) {
		if term == 0 {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if prev, ok := held[term]; ok && prev != instance {
			problems = append(problems, fmt.Sprintf("term %d held by both %s and %s", term, prev, instance))
		}
		held[term] = instance
	}
	leaderNow := func() *supervisor.Supervisor {
		for _, s := range sups {
			if s.Term() > 0 {
				return s
			}
		}
		return nil
	}

	for round := range rounds {
		if n := dispatch(t, d, clk.Now()); n != tasks {
			t.Fatalf("round %d: dispatched %d tasks, want %d", round, n, tasks)
		}
		clk.Advance(stepTimeout + time.Second) // every step is now past its CompleteBy
		if round%3 == 2 {
			// The leader's lease runs out; the other one gets in first.
			prev := leaderNow()
			clk.Advance(leaseTTL)
			for _, s := range sups {
				if s != prev {
					term, err := s.Acquire(context.Background())
					if err != nil || term == 0 {
						t.Fatalf("round %d: %s could not take over the expired lease: %d, %v", round, s.Instance, term, err)
					}
					record(s.Instance, term)
				}
			}
		}
		var wg sync.WaitGroup
		for _, s := range sups {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 4 {
					term, err := s.Acquire(context.Background())
					if err != nil {
						note("%s Acquire: %v", s.Instance, err)
						return
					}
					record(s.Instance, term)
					before := s.Term()
					n, err := s.Sweep(context.Background())
					if err != nil {
						note("%s Sweep: %v", s.Instance, err)
						return
					}
					if before == 0 && n != 0 {
						note("round %d: %s is not the leader but its Sweep handled %d tasks", round, s.Instance, n)
					}
				}
			}()
		}
		wg.Wait()
		if c := counts(t, d); c[dt.Pending] != tasks {
			t.Fatalf("round %d: %v; want all %d tasks recovered to Pending", round, c, tasks)
		}
		leaders := 0
		for _, s := range sups {
			if s.Term() > 0 {
				leaders++
			}
		}
		if leaders != 1 {
			t.Fatalf("round %d: %d supervisors consider themselves leader", round, leaders)
		}
	}
	mu.Lock()
	for _, p := range problems {
		t.Error(p)
	}
	mu.Unlock()

	evs := allEvents(t, d)
	timedOut := map[string]int{}
	var lastTerm int64
	actors := map[string]bool{}
	for _, e := range evs {
		if e.Type != dt.EventStepTimedOut && e.Type != dt.EventStepRetry {
			continue
		}
		if holder, ok := held[e.Term]; !ok || holder != e.Actor {
			t.Errorf("event %d (%s of %s) by %q in term %d, which was held by %q", e.ID, e.Type, e.TaskID, e.Actor, e.Term, holder)
		}
		if e.Term < lastTerm {
			t.Errorf("event %d in term %d after an event of term %d: a deposed leader acted", e.ID, e.Term, lastTerm)
		}
		lastTerm = e.Term
		actors[e.Actor] = true
		if e.Type == dt.EventStepTimedOut {
			timedOut[e.TaskID]++
		}
	}
	for i := range tasks {
		id := fmt.Sprintf("t%03d", i)
		if timedOut[id] != rounds {
			t.Errorf("task %s recovered %d times in %d rounds", id, timedOut[id], rounds)
		}
		steps, err := d.Reader().StepListByTasks(context.Background(), &store.StepListByTasksParams{TaskIDs: []string{id}})
		if err != nil || steps[0].FailureCount != rounds || steps[0].Attempt != rounds {
			t.Errorf("task %s step: FailureCount %d Attempt %d; want %d each", id, steps[0].FailureCount, steps[0].Attempt, rounds)
		}
	}
	if len(held) < 2 || len(actors) < 2 {
		t.Errorf("terms %v, actors %v: the test needs leadership to change hands", held, actors)
	}
}

func TestFailoverOnLeaseExpiry(t *testing.T) {
	t.Parallel()
	d := openStore(t)
	clk := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	seed(t, d, 5, clk.Now())
	s1, s2 := newSup(d, clk, "sup-1"), newSup(d, clk, "sup-2")
	ctx := context.Background()

	t1, err := s1.Acquire(ctx)
	if err != nil || t1 == 0 {
		t.Fatalf("sup-1 Acquire: %d %v", t1, err)
	}
	if t2, _ := s2.Acquire(ctx); t2 != 0 {
		t.Fatalf("sup-2 acquired a held lease: %d", t2)
	}
	dispatch(t, d, clk.Now())
	// sup-1 stops renewing (a long GC pause, a partition...).
	clk.Advance(leaseTTL)
	if s1.Term() != 0 {
		t.Fatal("sup-1 still acts as leader after its lease expired")
	}
	if n, err := s1.Sweep(ctx); n != 0 || err != nil {
		t.Fatalf("deposed sup-1 swept %d tasks (%v)", n, err)
	}
	if c := counts(t, d); c[dt.Processing] != 5 {
		t.Fatalf("a non-leader changed tasks: %v", c)
	}
	t2, err := s2.Acquire(ctx)
	if err != nil || t2 <= t1 {
		t.Fatalf("sup-2 took over with term %d (%v); want > %d", t2, err, t1)
	}
	if term, _ := s1.Acquire(ctx); term != 0 {
		t.Fatalf("sup-1 re-acquired: %d", term)
	}
	if n, err := s2.Sweep(ctx); n != 5 || err != nil {
		t.Fatalf("new leader swept %d (%v), want 5", n, err)
	}
	for _, e := range allEvents(t, d) {
		if e.Type == dt.EventStepTimedOut && (e.Actor != "sup-2" || e.Term != t2) {
			t.Errorf("recovery by %q term %d, want sup-2 term %d", e.Actor, e.Term, t2)
		}
	}
}

func TestFailoverOnResign(t *testing.T) {
	t.Parallel()
	d := openStore(t)
	clk := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	seed(t, d, 3, clk.Now())
	s1, s2 := newSup(d, clk, "sup-1"), newSup(d, clk, "sup-2")

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s1.Run(ctx) }()
	// Watch the lease in the store (not s1.Term(), which may not be called
	// while Run runs: see TestTermWhileRunning).
	t1 := waitLeader(t, d, "sup-1")
	if term, _ := s2.Acquire(context.Background()); term != 0 {
		t.Fatalf("sup-2 acquired while sup-1 runs: %d", term)
	}
	cancel() // sup-1 shuts down and resigns
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	// The lease is free at once: no waiting for its TTL.
	t2, err := s2.Acquire(context.Background())
	if err != nil || t2 <= t1 {
		t.Fatalf("sup-2 after sup-1 resigned: term %d (%v), want > %d", t2, err, t1)
	}
	dispatch(t, d, clk.Now())
	clk.Advance(stepTimeout + time.Second)
	if n, _ := s1.Sweep(context.Background()); n != 0 {
		t.Errorf("resigned sup-1 swept %d", n)
	}
	if n, err := s2.Sweep(context.Background()); n != 3 || err != nil {
		t.Errorf("sup-2 swept %d (%v), want 3", n, err)
	}
}

// Sweep works through more expired tasks than one batch holds.
func TestSweepInBatches(t *testing.T) {
	t.Parallel()
	d := openStore(t)
	clk := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	seed(t, d, 50, clk.Now())
	s := newSup(d, clk, "sup")
	s.Batch = 7
	recovered := 0
	s.OnRecover = func() { recovered++ }
	if _, err := s.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	dispatch(t, d, clk.Now())
	clk.Advance(stepTimeout + time.Second)
	n, err := s.Sweep(context.Background())
	if err != nil || n != 50 {
		t.Fatalf("Sweep = %d, %v; want 50", n, err)
	}
	if recovered == 0 {
		t.Error("OnRecover not called")
	}
	if c := counts(t, d); c[dt.Pending] != 50 {
		t.Errorf("counts %v", c)
	}
}

// waitLeader waits until instance holds the supervisor lease and returns its term.
func waitLeader(t *testing.T, d store.Driver, instance string) int64 {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		l, err := d.Reader().LeaseGet(context.Background(), &store.LeaseGetParams{Name: supervisor.LeaseName})
		if err == nil && l.Holder == instance {
			return l.Term
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never became leader (lease %+v, %v)", instance, l, err)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// Term is what Client.SupervisorTerm reports while the supervisor runs: it
// must be safe to call from another goroutine. (Run with -race. Not parallel,
// so that a race found here fails this test alone.)
func TestTermWhileRunning(t *testing.T) {
	d := openStore(t)
	s := newSup(d, clock.Real{}, "sup")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	// Poll Term() from the start, as a dashboard would.
	deadline := time.Now().Add(10 * time.Second)
	for s.Term() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("Term() stayed 0 while the supervisor runs alone")
		}
		time.Sleep(time.Millisecond)
	}
	if term := waitLeader(t, d, "sup"); s.Term() != term {
		t.Errorf("Term() = %d, the store says term %d", s.Term(), term)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if s.Term() != 0 {
		t.Errorf("Term() = %d after Run resigned", s.Term())
	}
	if l, err := d.Reader().LeaseGet(context.Background(), &store.LeaseGetParams{Name: supervisor.LeaseName}); err != nil || l.ExpiresAt.After(time.Now()) {
		t.Errorf("lease after resign: %+v, %v; want released", l, err)
	}
}

// Retention: only the leader deletes, only final tasks older than Retention,
// all of them across batches; nothing without a Retention.
func TestRetain(t *testing.T) {
	t.Parallel()
	d := openStore(t)
	ctx := context.Background()
	clk := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	seed(t, d, 40, clk.Now())
	// 30 final (cancelled) tasks; 10 stay Pending.
	if err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		for i := range 30 {
			if _, err := flow.Cancel(ctx, x, fmt.Sprintf("t%03d", i), "op", "test", clk.Now()); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	s := newSup(d, clk, "sup")
	if n, err := s.Retain(ctx); err != nil || n != 0 {
		t.Fatalf("Retain without a Retention = %d, %v; want 0", n, err)
	}
	s.Retention = time.Hour
	clk.Advance(2 * time.Hour)
	if n, err := s.Retain(ctx); err != nil || n != 0 {
		t.Fatalf("Retain without leading = %d, %v; want 0", n, err)
	}
	if _, err := s.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Retain(ctx); err != nil || n != 30 {
		t.Fatalf("Retain = %d, %v; want 30 (in batches of %d)", n, err, s.Batch)
	}
	if c := counts(t, d); c[dt.Cancelled] != 0 || c[dt.Pending] != 10 {
		t.Errorf("counts after retention %v; want only the 10 Pending tasks", c)
	}
}
