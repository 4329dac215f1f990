package crashtest

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/droverclient"
	"github.com/drover-run/drover/internal/flow"
	"github.com/drover-run/drover/internal/orders"
	"github.com/drover-run/drover/internal/remotesim"
	"github.com/drover-run/drover/internal/supervisor"
	"github.com/drover-run/drover/store"
	"github.com/drover-run/drover/store/postgres"
)

var crashSeed = flag.Uint64("crash.seed", 0, "seed of the PostgreSQL crash test's kills and remote faults (0: random; the test logs the one it used)")

// Settings every server of the cluster runs with (see pgFleet.start).
const (
	clusterLeaseTTL = time.Second
	clusterSize     = 3
)

// TestClusterSurvivesKillsAndDatabaseRestart runs three `drover server`
// processes on one PostgreSQL schema while orders trickle in, SIGKILLs
// random ones (the supervisor leader among them) at random moments and
// restarts them under the same or a new instance ID, and restarts
// PostgreSQL itself once, holding it down longer than the lease TTL. Then it
// checks from the database and the remote service that every task ended
// final, nothing was applied twice, no step was ever held by two schedulers,
// supervisor leadership moved and was fenced by its term, and every server
// rode out the database restart.
func TestClusterSurvivesKillsAndDatabaseRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test builds and kills real processes; skipped with -short")
	}
	nOrders, kills, drainLimit := 600, 10, 90*time.Second
	if *long {
		nOrders, kills, drainLimit = 3000, 50, 5*time.Minute
	}
	seed := *crashSeed
	if seed == 0 {
		var b [8]byte
		_, _ = crand.Read(b[:])
		seed = binary.LittleEndian.Uint64(b[:]) >> 1
	}
	t.Logf("seed %d (replay its choices and faults with -crash.seed=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	rng2 := rand.New(rand.NewPCG(seed^0x5eed, seed)) // the submitter's own
	began := time.Now()
	ctx := context.Background()

	pg := provideRestartablePG(t)
	t.Logf("PostgreSQL: %s", pg.Desc)
	schema := "crash_" + randomHex(6)
	t.Cleanup(func() {
		if err := dropSchema(pg.URL, schema); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})

	bin := buildDrover(t)

	// Latency keeps calls in flight long enough for kills to land mid-call;
	// hangs leave steps for the supervisor, so every leader has work.
	sim := remotesim.New(remotesim.Config{TransientRate: 0.1, HangRate: 0.03, PermanentRate: 0.01,
		Seed: int64(seed), Latency: 15 * time.Millisecond})
	remote, stopSim, err := sim.Serve(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stopSim()

	// Server logs stay on disk when the test fails.
	logDir, err := os.MkdirTemp("", "drover-crash-pg-")
	if err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(logDir, "servers.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		logf.Close()
		if t.Failed() {
			t.Logf("server logs kept in %s", logPath)
		} else {
			os.RemoveAll(logDir)
		}
	})
	var logMu sync.Mutex
	logw := writerFunc(func(p []byte) (int, error) { logMu.Lock(); defer logMu.Unlock(); return logf.Write(p) })

	// Beside the orders, a declarative workflow with a parallel group,
	// submitted with delays and fired every second by a schedule.
	fleet := &pgFleet{t: t, bin: bin, url: pg.URL, schema: schema, remote: remote, logw: logw,
		workflows: writeFanoutWorkflow(t, remote)}
	t.Cleanup(fleet.killAll)

	// Three servers start together on the empty schema: they migrate it
	// concurrently.
	cs := &chaos{t: t, fleet: fleet, rng: rng, slots: make([]*pgProc, clusterSize)}
	for i := range cs.slots {
		cs.slots[i] = fleet.start(i, cs.newID())
	}
	for _, p := range cs.slots {
		if err := p.waitReady(90 * time.Second); err != nil {
			t.Fatal(err)
		}
	}

	// The test's own client: submits and reads, roles never started.
	drv, err := postgres.Open(ctx, pg.URL, postgres.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer drv.Close()
	client, err := drover.New(drover.Config{Store: drv,
		Workflows: []drover.Workflow{orders.Workflow(orders.Options{StepTimeout: time.Second})}})
	if err != nil {
		t.Fatal(err)
	}
	cs.client = client

	// Orders trickle in while the chaos runs: the chaos loop raises the
	// quota, the submitter follows in small batches, retrying through the
	// database outage (submission by ID is idempotent).
	sub := newSubmitter(client, nOrders)
	sub.api = func() serverAPI { return fleet.api(rng2.IntN) }
	go sub.run()
	defer sub.stop()
	nFanout := nOrders / 10
	fan := newFanoutSubmitter(nFanout, func() serverAPI { return fleet.api(rng2.IntN) }, seed)
	go fan.run()
	defer fan.stop()
	chunk := nOrders / (kills + 1)

	var outage outageResult
	for k := 0; k < kills; k++ {
		sub.raise(chunk)
		if k == kills/2 {
			outage = cs.restartDatabase(pg, sub)
		}
		time.Sleep(time.Duration(200+rng.IntN(800)) * time.Millisecond) // a random moment

		// Pick victims: the supervisor leader often, so leadership must
		// move, otherwise one holding tasks, so the kill cuts work in
		// flight; sometimes a second one at once. The leader is killed for
		// sure at the start and after the outage, and then restarted under
		// a new ID: a restart under the same ID may take its old lease back
		// in the same term.
		victims := map[int]bool{} // slot → restart under a new ID
		forced := k == 0 || k == kills/2+1
		if leader := cs.leaderSlot(); leader >= 0 && (forced || rng.IntN(3) == 0) {
			victims[leader] = forced
			cs.killedLeader++
		} else {
			victims[cs.busySlot()] = false
		}
		if extra := rng.IntN(clusterSize); rng.IntN(4) == 0 && !victims[extra] {
			victims[extra] = false
		}
		var restarted []*pgProc
		for slot := range clusterSize { // in slot order: the seed replays the run
			if fresh, ok := victims[slot]; ok {
				restarted = append(restarted, cs.replace(slot, true, fresh))
			}
		}
		for _, p := range restarted {
			if err := p.waitReady(60 * time.Second); err != nil {
				t.Fatalf("restarted server did not come up (crash loop?): %v", err)
			}
		}
	}
	sub.raise(nOrders)
	if err := sub.wait(2 * time.Minute); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(2 * time.Minute); fan.done.Load() < int64(nFanout); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d fanout tasks submitted in 2 minutes", fan.done.Load(), nFanout)
		}
	}
	// The schedule stops firing, so that the cluster can drain.
	if _, err := client.PauseSchedule(ctx, tickSchedule); err != nil {
		t.Fatalf("pause schedule %s: %v", tickSchedule, err)
	}
	// Submissions through the servers started tasks in the submitting
	// process, and those processes were killed like the others.
	sub.mu.Lock()
	viaHTTP, eager := len(sub.viaHTTP), len(sub.eager)
	sub.mu.Unlock()
	t.Logf("%d orders submitted through the servers' HTTP API, %d of them started at submission", viaHTTP, eager)
	// The count can include a few tasks that the server's own scheduler
	// claimed between the commit and the API's read of the task; without
	// eager start those would be far fewer than half.
	if eager*2 < viaHTTP {
		t.Errorf("only %d of %d orders submitted through a server were started at submission: eager start is not exercised", eager, viaHTTP)
	}
	if cs.killedBusy < cs.measured/2 {
		t.Errorf("only %d of %d kills hit a server holding tasks; the test is not exercising crashes", cs.killedBusy, cs.measured)
	}
	chaosDone := time.Now()

	// Let the survivors finish everything.
	deadline := time.Now().Add(drainLimit)
	for {
		active, err := client.Active(ctx)
		if err == nil && active == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d tasks still not final %s after the last kill (err %v); server log: %s", active, drainLimit, err, logPath)
		}
		time.Sleep(100 * time.Millisecond)
	}
	drainTime := time.Since(chaosDone)

	// Stop the cluster the polite way: SIGTERM must still work after all this.
	for _, p := range cs.slots {
		if err := p.terminate(45 * time.Second); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	}

	// 5. No crash loops, no silent deaths, and every server that was up
	// when the database went away rode it out.
	for _, p := range fleet.procs() {
		if !p.isReady() {
			t.Errorf("server %s never printed its ready line", p.id)
		}
		if p.exitedOnItsOwn() {
			t.Errorf("server %s exited without being killed: %v; last lines: %s", p.id, p.waitErr, p.logTail(10))
		}
		if bad := p.badLines(); len(bad) > 0 {
			t.Errorf("server %s logged that it stopped working or crashed:\n  %s", p.id, strings.Join(bad, "\n  "))
		}
	}

	evs := readAllEvents(t, client)
	for _, p := range outage.survivors {
		// A survivor the test did not kill afterwards must have gone on
		// scheduling after the restart, not merely stayed alive. Nothing
		// commits while the database is down, so an event stamped after
		// it went down was written after it came back.
		p.mu.Lock()
		killed := p.killed
		p.mu.Unlock()
		if killed {
			continue
		}
		worked := false
		for _, e := range evs {
			if e.CreatedAt.After(outage.stopped) && strings.HasPrefix(e.Actor, p.id+"/scheduler-") {
				worked = true
				break
			}
		}
		if !worked {
			t.Errorf("server %s survived the database restart but its schedulers recorded nothing after it", p.id)
		}
	}

	// 1 and 2: every task final, effects applied exactly as the outcome says.
	counts, err := client.Counts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	final, all := counts[drover.Processed]+counts[drover.Error]+counts[drover.Compensated], 0
	for _, n := range counts {
		all += n
	}
	if final != all {
		t.Errorf("final tasks = %d (%v), want all %d", final, counts, all)
	}
	st := sim.Stats()
	if st.DuplicateEffects != 0 {
		t.Errorf("remote service saw %d duplicate effects, want 0 (stats %+v)", st.DuplicateEffects, st)
	}
	checkOrderEffects(t, client, sim, evs, nOrders)
	checkFanout(t, client, sim, fan, evs)

	// 3 and 4: the history.
	reportViolations(t, "no step held by two schedulers", stepHolderViolations(evs))
	termViolations, leaders, supActions := supervisorTermViolations(evs)
	reportViolations(t, "one leader per term", termViolations)
	if len(leaders) < 2 {
		t.Errorf("supervisor leadership never changed hands: leaders seen %v over %d supervisor events", leaders, supActions)
	}

	replyDiscarded := 0
	for _, e := range evs {
		if e.Type == drover.EventReplyDiscarded {
			replyDiscarded++
		}
	}
	t.Logf("orders %d in %s (chaos %s, drain %s): %v; kills %d (%d of %d measured hit a busy server, %d of the leader; "+
		"restarts %d same ID, %d new ID); PostgreSQL down %s, %d servers rode it out, %s started during it; "+
		"leaders %d (%s) over %d supervisor events; events %d (%d late replies discarded); submit retries %d; remote %+v",
		nOrders, time.Since(began).Round(time.Millisecond), chaosDone.Sub(began).Round(time.Millisecond), drainTime.Round(time.Millisecond),
		counts, cs.kills, cs.killedBusy, cs.measured, cs.killedLeader, cs.sameID, cs.newIDs,
		outage.downtime.Round(time.Millisecond), len(outage.survivors), outage.startedIn.id,
		len(leaders), strings.Join(leaders, " "), supActions, len(evs), replyDiscarded, sub.retries.Load(), st)
}

// chaos is the state of the kill loop.
type chaos struct {
	t      *testing.T
	fleet  *pgFleet
	client *drover.Client
	rng    *rand.Rand
	slots  []*pgProc // the current process of each slot
	nextID int

	kills, measured, killedBusy, killedLeader, sameID, newIDs int
}

func (c *chaos) newID() string { id := fmt.Sprintf("node-%d", c.nextID); c.nextID++; return id }

// replace SIGKILLs the process in slot and starts another in its place,
// under a new instance ID if fresh, else under the same one or a new one at
// random; it does not wait for it to be ready. With measure, it first
// counts whether the victim held tasks.
func (c *chaos) replace(slot int, measure, fresh bool) *pgProc {
	old := c.slots[slot]
	if measure {
		c.measured++
		if heldBy(context.Background(), c.client, old.id) > 0 {
			c.killedBusy++
		}
	}
	old.kill()
	c.kills++
	id := old.id
	if fresh || c.rng.IntN(2) == 0 {
		id = c.newID()
		c.newIDs++
	} else {
		c.sameID++
	}
	c.slots[slot] = c.fleet.start(slot, id)
	return c.slots[slot]
}

// busySlot returns a random slot whose process holds tasks, or any slot
// when none does.
func (c *chaos) busySlot() int {
	var busy []int
	for i, p := range c.slots {
		if heldBy(context.Background(), c.client, p.id) > 0 {
			busy = append(busy, i)
		}
	}
	if len(busy) == 0 {
		return c.rng.IntN(len(c.slots))
	}
	return busy[c.rng.IntN(len(busy))]
}

// leaderSlot returns the slot whose process holds an unexpired supervisor
// lease, or -1.
func (c *chaos) leaderSlot() int {
	l, err := c.client.Store().Reader().LeaseGet(context.Background(), &store.LeaseGetParams{Name: supervisor.LeaseName})
	if err != nil || !time.Now().Before(l.ExpiresAt) {
		return -1
	}
	for i, p := range c.slots {
		if l.Holder == p.id+"/supervisor" && p.alive() {
			return i
		}
	}
	return -1
}

type outageResult struct {
	survivors []*pgProc // up through the whole outage
	stopped   time.Time // when the database went down
	downtime  time.Duration
	startedIn *pgProc // started while the database was down
}

// restartDatabase takes PostgreSQL down for longer than the lease TTL while
// the cluster works; meanwhile it kills one server and starts its
// replacement, which must wait for the database. Once the database is back
// it waits until every server that was up renewed its instance lease (it
// reconnected and kept its roles) and the replacement is ready.
func (c *chaos) restartDatabase(pg *pgCluster, sub *submitter) outageResult {
	t := c.t
	t.Helper()
	ctx := context.Background()
	// Let work be in flight when the database goes.
	sub.waitSubmitted(sub.submittedN()+1, 30*time.Second)
	var r outageResult
	for _, p := range c.slots {
		if !p.alive() || !p.isReady() {
			t.Fatalf("server %s not running before the database restart", p.id)
		}
	}
	victim := c.rng.IntN(clusterSize)
	for i, p := range c.slots {
		if i != victim {
			r.survivors = append(r.survivors, p)
		}
	}
	downtime := clusterLeaseTTL + time.Duration(500+c.rng.IntN(1500))*time.Millisecond
	r.stopped = time.Now()
	if err := pg.Restart(downtime, func() { r.startedIn = c.replace(victim, false, false) }); err != nil {
		t.Fatalf("restart PostgreSQL: %v", err)
	}
	back := time.Now()
	r.downtime = back.Sub(r.stopped)
	t.Logf("PostgreSQL restarted: down %s; %s started while it was down", r.downtime.Round(time.Millisecond), r.startedIn.id)

	// Every survivor must still run and renew its instance lease after the
	// outage: a renewal after back sets an expiry past back+TTL.
	deadline := time.Now().Add(30 * time.Second)
	for _, p := range r.survivors {
		for {
			if !p.alive() {
				t.Fatalf("server %s died when PostgreSQL restarted: %v; last lines: %s", p.id, p.waitErr, p.logTail(10))
			}
			l, err := c.client.Store().Reader().LeaseGet(ctx, &store.LeaseGetParams{Name: "instance:" + p.id})
			if err == nil && l.ExpiresAt.After(back.Add(clusterLeaseTTL)) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("server %s did not renew its instance lease within 30s of the PostgreSQL restart (lease %+v, err %v); last lines: %s",
					p.id, l, err, p.logTail(10))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if err := r.startedIn.waitReady(90 * time.Second); err != nil {
		t.Fatalf("server started while PostgreSQL was down did not come up once it was back: %v", err)
	}
	return r
}

// heldBy counts the tasks the schedulers of instance hold right now.
func heldBy(ctx context.Context, c *drover.Client, instance string) int {
	ts, err := c.Tasks(ctx, drover.ListParams{States: []drover.ProcessState{drover.Processing, drover.Compensating}, Limit: 100000})
	if err != nil {
		return 0
	}
	n := 0
	for _, t := range ts {
		if strings.HasPrefix(t.LockedBy, instance+"/") {
			n++
		}
	}
	return n
}

func readAllEvents(t *testing.T, c *drover.Client) []*drover.Event {
	t.Helper()
	var (
		all   []*drover.Event
		after int64
	)
	for {
		evs, err := c.Events(context.Background(), drover.EventQuery{AfterID: after, Limit: 5000})
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 0 {
			return all
		}
		all = append(all, evs...)
		after = evs[len(evs)-1].ID
	}
}

func orderID(taskID string) string { return "o-" + strings.TrimPrefix(taskID, "order-") }

// checkOrderEffects compares each order's outcome with what the remote
// service applied, and checks every Error task raised an alert.
func checkOrderEffects(t *testing.T, c *drover.Client, sim *remotesim.Service, evs []*drover.Event, nOrders int) {
	t.Helper()
	alerted := map[string]bool{}
	for _, e := range evs {
		if e.Alert {
			alerted[e.TaskID] = true
		}
	}
	tasks, err := c.Tasks(context.Background(), drover.ListParams{Workflow: orders.WorkflowName, Limit: nOrders + 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) != nOrders {
		t.Errorf("%d tasks in the store, want %d", len(tasks), nOrders)
	}
	for _, tk := range tasks {
		o := orderID(tk.ID)
		switch tk.ProcessState {
		case drover.Processed:
			for _, op := range []string{"reserve", "charge", "ship"} {
				if n := sim.Applied(op, o); n != 1 {
					t.Errorf("%s Processed but %s applied %d times", tk.ID, op, n)
				}
			}
			for _, op := range []string{"release", "refund"} {
				if n := sim.Applied(op, o); n != 0 {
					t.Errorf("%s Processed but %s applied %d times", tk.ID, op, n)
				}
			}
		case drover.Compensated:
			// Every effect that happened was undone (a compensation may
			// also run for a step whose call hung before applying).
			for _, p := range [][2]string{{"reserve", "release"}, {"charge", "refund"}} {
				if sim.Applied(p[0], o) == 1 && sim.Applied(p[1], o) != 1 {
					t.Errorf("%s Compensated: %s applied but %s applied %d times", tk.ID, p[0], p[1], sim.Applied(p[1], o))
				}
			}
		case drover.Error:
			if !alerted[tk.ID] {
				t.Errorf("%s ended in Error without an operator alert", tk.ID)
			}
			if strings.HasPrefix(tk.LastError, flow.BrokenPrefix) {
				t.Errorf("%s set to Error as broken: %s", tk.ID, tk.LastError)
			}
		default:
			t.Errorf("%s is %s, not final", tk.ID, tk.ProcessState)
		}
	}
}

// stepHolderViolations reads the history step by step. Attempts of a step
// grow by exactly one per start (step_started, or compensating for a
// compensation), so each attempt had one starter. A new attempt starts only
// after the previous one concluded (processed, compensated, failed, or timed
// out by the supervisor), and a step_started by a different scheduler than
// the previous step_started needs a supervisor step_timed_out in between:
// a new holder only after a reset. Outcomes are recorded only for the
// current attempt, by the scheduler that started it.
func stepHolderViolations(evs []*drover.Event) []string {
	type key struct {
		task string
		step int
	}
	type state struct {
		attempt   int
		starter   string
		concluded bool
		doActor   string // starter of the last step_started
		resetDo   bool   // a step_timed_out since that step_started
	}
	steps := map[key]*state{}
	var out []string
	report := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	for _, e := range evs {
		if e.StepIndex < 0 {
			continue
		}
		k := key{e.TaskID, e.StepIndex}
		s := steps[k]
		if s == nil {
			s = &state{}
			steps[k] = s
		}
		switch e.Type {
		case drover.EventStepStarted, drover.EventCompensating:
			if e.Attempt != s.attempt+1 {
				report("task %s step %d: attempt %d (%s, event %d) started by %s after attempt %d: two holders or a lost fence",
					e.TaskID, e.StepIndex, e.Attempt, e.Type, e.ID, e.Actor, s.attempt)
			}
			if s.attempt > 0 && !s.concluded {
				report("task %s step %d: attempt %d started by %s (event %d) while attempt %d by %s had not concluded: two attempts in flight",
					e.TaskID, e.StepIndex, e.Attempt, e.Actor, e.ID, s.attempt, s.starter)
			}
			if e.Type == drover.EventStepStarted {
				if s.doActor != "" && e.Actor != s.doActor && !s.resetDo {
					report("task %s step %d: step_started by %s (event %d, attempt %d) after one by %s with no step_timed_out in between: a new holder without a reset",
						e.TaskID, e.StepIndex, e.Actor, e.ID, e.Attempt, s.doActor)
				}
				s.doActor, s.resetDo = e.Actor, false
			}
			s.attempt, s.starter, s.concluded = e.Attempt, e.Actor, false
		case drover.EventStepTimedOut:
			if e.Term == 0 {
				report("task %s step %d: step_timed_out (event %d) by %s without a supervisor term", e.TaskID, e.StepIndex, e.ID, e.Actor)
			}
			if e.Attempt != s.attempt || s.concluded {
				report("task %s step %d: step_timed_out of attempt %d (event %d) but the attempt in flight is %d (concluded %v)",
					e.TaskID, e.StepIndex, e.Attempt, e.ID, s.attempt, s.concluded)
			}
			s.concluded, s.resetDo = true, true
		case drover.EventStepAbandoned:
			// A branch stopped because a sibling failed for good: in
			// flight, it ends the attempt; waiting for a retry, the
			// attempt had ended with its step_timed_out.
			if e.Attempt != s.attempt {
				report("task %s step %d: step_abandoned of attempt %d (event %d) but the last attempt is %d",
					e.TaskID, e.StepIndex, e.Attempt, e.ID, s.attempt)
			}
			s.concluded = true
		case drover.EventStepProcessed, drover.EventStepCompensated, drover.EventStepFailed:
			if e.Type == drover.EventStepFailed && e.Term != 0 {
				// The supervisor's failure after the last timeout: the
				// attempt already concluded with step_timed_out.
				continue
			}
			if e.Attempt != s.attempt || s.concluded {
				report("task %s step %d: %s of attempt %d (event %d, by %s) recorded while the attempt in flight is %d (concluded %v): a stale reply got through the fence",
					e.TaskID, e.StepIndex, e.Type, e.Attempt, e.ID, e.Actor, s.attempt, s.concluded)
			}
			if e.Actor != s.starter {
				report("task %s step %d: %s of attempt %d (event %d) recorded by %s, but %s started that attempt",
					e.TaskID, e.StepIndex, e.Type, e.Attempt, e.ID, e.Actor, s.starter)
			}
			s.concluded = true
		}
	}
	return out
}

// supervisorTermViolations checks leadership from the supervisors' events:
// each term belongs to one leader, and terms never go back (a deposed
// leader never acts after its successor). It also returns the (leader,
// term) pairs that acted, in order of their first action, and how many
// supervisor events there were.
func supervisorTermViolations(evs []*drover.Event) (out, pairs []string, actions int) {
	termActor := map[int64]string{}
	var lastTerm, lastID int64
	for _, e := range evs {
		if e.Term == 0 {
			continue
		}
		actions++
		if !strings.HasSuffix(e.Actor, "/supervisor") {
			out = append(out, fmt.Sprintf("event %d (%s) has term %d but actor %q is not a supervisor", e.ID, e.Type, e.Term, e.Actor))
		}
		if a, ok := termActor[e.Term]; !ok {
			termActor[e.Term] = e.Actor
			pairs = append(pairs, fmt.Sprintf("%s@%d", e.Actor, e.Term))
		} else if a != e.Actor {
			out = append(out, fmt.Sprintf("term %d acted by two leaders: %s and %s (event %d)", e.Term, a, e.Actor, e.ID))
		}
		if e.Term < lastTerm {
			out = append(out, fmt.Sprintf("event %d (%s) by %s in term %d after event %d in term %d: a deposed leader acted",
				e.ID, e.Type, e.Actor, e.Term, lastID, lastTerm))
		}
		if e.Term > lastTerm {
			lastTerm, lastID = e.Term, e.ID
		}
	}
	return out, pairs, actions
}

// reportViolations fails t with the first few violations of a check.
func reportViolations(t *testing.T, what string, vs []string) {
	t.Helper()
	const show = 20
	for i, v := range vs {
		if i == show {
			t.Errorf("%s: ... %d violations in all", what, len(vs))
			break
		}
		t.Errorf("%s: %s", what, v)
	}
}

// submitter submits orders order-1…order-N in small batches up to a quota
// the test raises, retrying a batch until the store takes it. With api
// set, every other batch goes one order at a time through the HTTP API of
// a random server (api returns its URL), where Submit starts the task in
// its own transaction (eager start).
type submitter struct {
	c       *drover.Client
	api     func() serverAPI
	mu      sync.Mutex
	viaHTTP map[string]bool // orders the HTTP API took
	eager   map[string]bool // of those, returned held by the server that took them
	n       int
	quota   atomic.Int64
	done    atomic.Int64
	retries atomic.Int64
	lastErr atomic.Value
	quit    chan struct{}
	exited  chan struct{}
	once    sync.Once
}

func newSubmitter(c *drover.Client, n int) *submitter {
	return &submitter{c: c, n: n, quit: make(chan struct{}), exited: make(chan struct{})}
}

const submitBatch = 5

func (s *submitter) run() {
	defer close(s.exited)
	next := 1
	for next <= s.n {
		select {
		case <-s.quit:
			return
		case <-time.After(50 * time.Millisecond):
		}
		for next <= s.n && int64(next) <= s.quota.Load() {
			var params []drover.SubmitParams
			for i := next; i < next+submitBatch && i <= s.n && int64(i) <= s.quota.Load(); i++ {
				params = append(params, drover.SubmitParams{Workflow: orders.WorkflowName,
					Input:   []byte(fmt.Sprintf(`{"order_id":"o-%d","amount":%d}`, i, 100+i)),
					Options: drover.SubmitOptions{ID: fmt.Sprintf("order-%d", i)}})
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			var err error
			if s.api != nil && (next/submitBatch)%2 == 1 {
				err = s.submitHTTP(ctx, params)
			} else {
				_, err = s.c.SubmitMany(ctx, params)
			}
			cancel()
			if err != nil {
				s.retries.Add(1)
				s.lastErr.Store(err.Error())
				break // retried at the next tick
			}
			next += len(params)
			s.done.Store(int64(next - 1))
			if len(params) < submitBatch {
				break
			}
			select {
			case <-s.quit:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
}

// submitHTTP submits params one by one through a server's HTTP API. A
// failure leaves the rest for a retry of the whole batch (by ID, so the
// orders already taken come back as they are).
func (s *submitter) submitHTTP(ctx context.Context, params []drover.SubmitParams) error {
	api := s.api()
	if api.url == "" {
		return errors.New("no server ready yet")
	}
	hc, err := droverclient.New(api.url, "")
	if err != nil {
		return err
	}
	for _, p := range params {
		task, created, err := hc.SubmitTask(ctx, droverclient.SubmitRequest{Workflow: p.Workflow, Input: p.Input, ID: p.Options.ID})
		if err != nil {
			return fmt.Errorf("submit %s through %s: %w", p.Options.ID, api.url, err)
		}
		s.mu.Lock()
		if s.viaHTTP == nil {
			s.viaHTTP, s.eager = map[string]bool{}, map[string]bool{}
		}
		s.viaHTTP[p.Options.ID] = true
		// Created by this call and already held by a scheduler of the
		// server that took it: started at submission (a claim of that
		// server's own, woken by the commit, would have to commit before
		// the API's read of the task that it answers with).
		if created && task.State == string(drover.Processing) && strings.HasPrefix(task.LockedBy, api.id+"/scheduler-") {
			s.eager[p.Options.ID] = true
		}
		s.mu.Unlock()
	}
	return nil
}

func (s *submitter) raise(by int) {
	if q := s.quota.Add(int64(by)); q > int64(s.n) {
		s.quota.Store(int64(s.n))
	}
}

func (s *submitter) submittedN() int { return int(s.done.Load()) }

// waitSubmitted waits until at least n orders (capped at the quota) were
// submitted, or limit.
func (s *submitter) waitSubmitted(n int, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for int64(n) > s.done.Load() && int64(n) <= s.quota.Load() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
}

// wait waits until every order was submitted.
func (s *submitter) wait(limit time.Duration) error {
	select {
	case <-s.exited:
		if s.submittedN() != s.n {
			return fmt.Errorf("submitted %d of %d orders", s.submittedN(), s.n)
		}
		return nil
	case <-time.After(limit):
		last, _ := s.lastErr.Load().(string)
		return fmt.Errorf("submitted %d of %d orders after %s (%d failed attempts, last: %s)", s.submittedN(), s.n, limit, s.retries.Load(), last)
	}
}

func (s *submitter) stop() { s.once.Do(func() { close(s.quit) }); <-s.exited }

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = crand.Read(b)
	return hex.EncodeToString(b)
}
