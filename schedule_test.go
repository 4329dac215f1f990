package drover_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/internal/clock"
	"github.com/drover-run/drover/internal/testutil"
	"github.com/drover-run/drover/store"
)

// t0 is the schedule tests' start: a whole minute, so the due times of a
// schedule every minute fall on whole minutes.
var t0 = time.Date(2026, time.December, 5, 6, 0, 0, 0, time.UTC)

var reportWorkflow = drover.Workflow{Name: "report", Steps: []drover.Step{{Name: "build", Agent: "builder"}}}

// scheduleClient is a client of d (not started) that knows the report
// workflow and fires ss.
func scheduleClient(t *testing.T, d store.Driver, clk drover.Clock, instance string, ss ...drover.Schedule) *drover.Client {
	t.Helper()
	c, err := drover.New(drover.Config{Store: d, Clock: clk, InstanceID: instance, Workflows: []drover.Workflow{reportWorkflow},
		ExternalAgents: []string{"builder"}, Schedules: ss})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := c.AddSchedules(context.Background(), ss); err != nil {
		t.Fatalf("AddSchedules: %v", err)
	}
	return c
}

func fire(t *testing.T, c *drover.Client) {
	t.Helper()
	if _, err := c.FireSchedules(context.Background()); err != nil {
		t.Fatalf("FireSchedules: %v", err)
	}
}

// scheduledIDs lists the IDs of the tasks of schedule name, sorted.
func scheduledIDs(t *testing.T, c *drover.Client, name string) []string {
	t.Helper()
	ts, err := c.Tasks(context.Background(), drover.ListParams{Workflow: "report", Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, task := range ts {
		if strings.HasPrefix(task.ID, "schedule:"+name+":") {
			ids = append(ids, task.ID)
		}
	}
	slices.Sort(ids)
	return ids
}

func dueIDs(name string, due ...time.Time) []string {
	ids := make([]string, len(due))
	for i, d := range due {
		ids[i] = drover.ScheduleTaskID(name, d)
	}
	slices.Sort(ids)
	return ids
}

func wantIDs(t *testing.T, what string, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s: tasks\n  %v\nwant\n  %v", what, got, want)
	}
}

// Two processes of one store fire a schedule each minute, taking turns as
// leader (the lease runs out between rounds on the fake clock): each due
// time submits exactly one task, with the input given, and none early.
func TestScheduleFiresEachDueTimeOnce(t *testing.T) {
	t.Parallel()
	bothStores(t, func(t *testing.T, d store.Driver) {
		clk := clock.NewFake(t0.Add(500 * time.Millisecond))
		s := drover.Schedule{Name: "minutely", Workflow: "report", Input: []byte(`{"kind":"sales"}`), Every: time.Minute}
		a := scheduleClient(t, d, clk, "a", s)
		b := scheduleClient(t, d, clk, "b", s)
		var want []time.Time
		for i := 1; i <= 5; i++ {
			clk.Advance(30 * time.Second)
			fire(t, a)
			fire(t, b)
			clk.Advance(30 * time.Second)
			fire(t, b)
			fire(t, a)
			fire(t, b)
			want = append(want, t0.Add(time.Duration(i)*time.Minute))
			wantIDs(t, fmt.Sprintf("after minute %d", i), scheduledIDs(t, a, "minutely"), dueIDs("minutely", want...))
		}
		task, err := a.Task(context.Background(), drover.ScheduleTaskID("minutely", want[0]))
		if err != nil || string(task.Input) != `{"kind":"sales"}` {
			t.Fatalf("first task: %v, %v", task, err)
		}
		st, err := a.GetSchedule(context.Background(), "minutely")
		if err != nil {
			t.Fatal(err)
		}
		if len(st.NextDue) != drover.ScheduleStateNext || !st.NextDue[0].Equal(t0.Add(6*time.Minute)) || !st.NextDue[1].Equal(t0.Add(7*time.Minute)) {
			t.Errorf("next due times %v, want every minute from %v", st.NextDue, t0.Add(6*time.Minute))
		}
		if st.LastDue == nil || !st.LastDue.Equal(want[4]) || st.LastTask != drover.ScheduleTaskID("minutely", want[4]) {
			t.Errorf("last due %v, last task %q", st.LastDue, st.LastTask)
		}
	})
}

// After downtime, skip fires none of the missed due times, last the
// latest one, all every one; then each is due on its grid again.
func TestScheduleCatchUpPolicies(t *testing.T) {
	t.Parallel()
	bothStores(t, func(t *testing.T, d store.Driver) {
		clk := clock.NewFake(t0)
		ss := []drover.Schedule{
			{Name: "skip", Workflow: "report", Every: 10 * time.Minute, CatchUp: drover.CatchUpSkip},
			{Name: "last", Workflow: "report", Every: 10 * time.Minute, CatchUp: drover.CatchUpLast},
			{Name: "default", Workflow: "report", Every: 10 * time.Minute},
			{Name: "all", Workflow: "report", Every: 10 * time.Minute, CatchUp: drover.CatchUpAll},
		}
		c := scheduleClient(t, d, clk, "a", ss...)
		clk.Advance(time.Hour + 2*time.Minute) // due 06:10 … 07:00 passed; 07:00 is 2 minutes late
		fire(t, c)
		var all []time.Time
		for i := 1; i <= 6; i++ {
			all = append(all, t0.Add(time.Duration(i)*10*time.Minute))
		}
		wantIDs(t, "skip", scheduledIDs(t, c, "skip"), nil)
		wantIDs(t, "last", scheduledIDs(t, c, "last"), dueIDs("last", all[5]))
		wantIDs(t, "default (last)", scheduledIDs(t, c, "default"), dueIDs("default", all[5]))
		wantIDs(t, "all", scheduledIDs(t, c, "all"), dueIDs("all", all...))

		// Back on time: a due time a few seconds late fires under every policy.
		clk.Advance(8*time.Minute + 3*time.Second) // 07:10:03
		fire(t, c)
		next := t0.Add(70 * time.Minute)
		wantIDs(t, "skip, on time", scheduledIDs(t, c, "skip"), dueIDs("skip", next))
		wantIDs(t, "last, on time", scheduledIDs(t, c, "last"), dueIDs("last", all[5], next))
		wantIDs(t, "all, on time", scheduledIDs(t, c, "all"), dueIDs("all", append(all, next)...))
	})
}

// A cron schedule is due at its times in its time zone.
func TestScheduleCronTimeZone(t *testing.T) {
	t.Parallel()
	d := testutil.SQLite(t)
	clk := clock.NewFake(t0) // 07:00 in Berlin
	c := scheduleClient(t, d, clk, "a",
		drover.Schedule{Name: "berlin", Workflow: "report", Cron: "0 6 * * *", TimeZone: "Europe/Berlin"},
		drover.Schedule{Name: "seconds", Workflow: "report", Cron: "*/15 * * * * *"})
	st, err := c.GetSchedule(context.Background(), "berlin")
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2026, 12, 6, 5, 0, 0, 0, time.UTC); !st.NextDue[0].Equal(want) || !st.NextDue[1].Equal(want.Add(24*time.Hour)) {
		t.Errorf("berlin next due %v, want 05:00 UTC each day from %v", st.NextDue, want)
	}
	clk.Advance(31 * time.Second)
	fire(t, c)
	wantIDs(t, "seconds (catch-up last)", scheduledIDs(t, c, "seconds"), dueIDs("seconds", t0.Add(30*time.Second)))
	wantIDs(t, "berlin", scheduledIDs(t, c, "berlin"), nil)
}

// Pause stops the due times, resume restarts them after now (those that
// passed meanwhile do not fire), run now submits at once, once per ID.
func TestSchedulePauseResumeRunNow(t *testing.T) {
	t.Parallel()
	bothStores(t, func(t *testing.T, d store.Driver) {
		ctx := context.Background()
		clk := clock.NewFake(t0)
		c := scheduleClient(t, d, clk, "a", drover.Schedule{Name: "p", Workflow: "report", Input: []byte(`[1]`), Every: time.Minute})
		st, err := c.PauseSchedule(ctx, "p")
		if err != nil || !st.Paused || len(st.NextDue) != 0 {
			t.Fatalf("PauseSchedule: %+v, %v", st, err)
		}
		clk.Advance(3*time.Minute + time.Second)
		fire(t, c)
		wantIDs(t, "paused", scheduledIDs(t, c, "p"), nil)

		task, err := c.RunScheduleNow(ctx, "p", "manual-1")
		if err != nil || task.ID != "manual-1" || string(task.Input) != `[1]` {
			t.Fatalf("RunScheduleNow: %+v, %v", task, err)
		}
		again, err := c.RunScheduleNow(ctx, "p", "manual-1")
		if err != nil || again.ID != "manual-1" || !again.CreatedAt.Equal(task.CreatedAt) {
			t.Fatalf("RunScheduleNow again: %+v, %v; want the same task", again, err)
		}
		generated, err := c.RunScheduleNow(ctx, "p", "")
		if err != nil || !strings.HasPrefix(generated.ID, "schedule:p:run:") {
			t.Fatalf("RunScheduleNow without an ID: %+v, %v", generated, err)
		}

		st, err = c.ResumeSchedule(ctx, "p")
		if err != nil || st.Paused || !st.NextDue[0].Equal(t0.Add(4*time.Minute)) || st.LastTask != generated.ID {
			t.Fatalf("ResumeSchedule: %+v, %v; want next due %v", st, err, t0.Add(4*time.Minute))
		}
		fire(t, c)
		wantIDs(t, "resumed, before its due time", scheduledIDs(t, c, "p"), []string{generated.ID})
		clk.Advance(time.Minute)
		fire(t, c)
		wantIDs(t, "resumed", scheduledIDs(t, c, "p"), append(dueIDs("p", t0.Add(4*time.Minute)), generated.ID))

		for _, err := range []error{
			func() error { _, err := c.PauseSchedule(ctx, "missing"); return err }(),
			func() error { _, err := c.RunScheduleNow(ctx, "missing", ""); return err }(),
			func() error { _, err := c.GetSchedule(ctx, "missing"); return err }(),
		} {
			if !errors.Is(err, drover.ErrScheduleNotFound) {
				t.Errorf("unknown schedule: %v, want ErrScheduleNotFound", err)
			}
		}
	})
}

// A schedule gone from the configuration is deleted by a client that does
// not define it: it no longer fires, the tasks it submitted stay, and a
// process still defining it stores it again, as new, when it starts.
func TestScheduleDelete(t *testing.T) {
	t.Parallel()
	bothStores(t, func(t *testing.T, d store.Driver) {
		ctx := context.Background()
		clk := clock.NewFake(t0)
		def := drover.Schedule{Name: "old", Workflow: "report", Every: time.Minute}
		a := scheduleClient(t, d, clk, "a", def)
		clk.Advance(time.Minute)
		fire(t, a)
		fired := dueIDs("old", t0.Add(time.Minute))
		wantIDs(t, "before the delete", scheduledIDs(t, a, "old"), fired)

		if err := a.DeleteSchedule(ctx, "old"); !errors.Is(err, drover.ErrScheduleDefined) || !strings.Contains(err.Error(), `"old"`) {
			t.Errorf("DeleteSchedule by the client defining it: %v, want ErrScheduleDefined naming it", err)
		}
		b := scheduleClient(t, d, clk, "b")
		if err := b.DeleteSchedule(ctx, "old"); err != nil {
			t.Fatalf("DeleteSchedule: %v", err)
		}
		if _, err := b.GetSchedule(ctx, "old"); !errors.Is(err, drover.ErrScheduleNotFound) {
			t.Errorf("GetSchedule after the delete: %v, want ErrScheduleNotFound", err)
		}
		if ss, err := b.Schedules(ctx); err != nil || len(ss) != 0 {
			t.Errorf("Schedules after the delete: %+v, %v; want none", ss, err)
		}
		if err := b.DeleteSchedule(ctx, "old"); !errors.Is(err, drover.ErrScheduleNotFound) {
			t.Errorf("DeleteSchedule again: %v, want ErrScheduleNotFound", err)
		}
		clk.Advance(time.Minute)
		fire(t, a) // a still defines it, but it is not stored: nothing fires
		wantIDs(t, "after the delete", scheduledIDs(t, a, "old"), fired)

		restarted := scheduleClient(t, d, clk, "a2", def)
		st, err := restarted.GetSchedule(ctx, "old")
		if err != nil || st.LastTask != "" || !st.NextDue[0].Equal(t0.Add(3*time.Minute)) {
			t.Fatalf("stored again at start: %+v, %v; want a new schedule next due %v", st, err, t0.Add(3*time.Minute))
		}

		// Removed from a client's own schedules, it is stored but no
		// longer fired by it, and that client may delete it.
		restarted.RemoveSchedules("old")
		clk.Advance(time.Minute)
		fire(t, restarted)
		wantIDs(t, "after RemoveSchedules", scheduledIDs(t, a, "old"), fired)
		if _, err := restarted.GetSchedule(ctx, "old"); err != nil {
			t.Errorf("GetSchedule after RemoveSchedules: %v; want it still stored", err)
		}
		if err := restarted.DeleteSchedule(ctx, "old"); err != nil {
			t.Errorf("DeleteSchedule after RemoveSchedules: %v", err)
		}
	})
}

// A schedule deleted by another process while this started one still
// defines it is stored again, as new, by this one's schedule leader within
// a minute, with a warning, and fires again.
func TestScheduleDeletedWhileDefinedIsStoredAgain(t *testing.T) {
	t.Parallel()
	bothStores(t, func(t *testing.T, d store.Driver) {
		ctx := context.Background()
		clk := clock.NewFake(t0)
		logs := &testutil.Buffer{}
		c := startClient(t, drover.Config{Store: d, Clock: clk, Workflows: []drover.Workflow{reportWorkflow}, ExternalAgents: []string{"builder"},
			Logger: slog.New(slog.NewTextHandler(logs, nil)), Schedules: []drover.Schedule{{Name: "kept", Workflow: "report", Every: time.Hour}}})
		other := scheduleClient(t, d, clk, "other")
		if err := other.DeleteSchedule(ctx, "kept"); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Minute)
		testutil.WaitFor(t, "the deleted schedule stored again", func() bool {
			_, err := c.GetSchedule(ctx, "kept") // at once or a minute later: the leader's first look may follow the delete
			return err == nil
		})
		if !strings.Contains(logs.String(), "stored again as new schedules") {
			t.Errorf("no warning in the log:\n%s", logs.String())
		}
		st, err := c.GetSchedule(ctx, "kept")
		if err != nil {
			t.Fatal(err)
		}
		clk.Advance(st.NextDue[0].Sub(clk.Now()))
		id := drover.ScheduleTaskID("kept", st.NextDue[0])
		testutil.WaitFor(t, "the restored schedule's task", func() bool {
			_, err := c.Task(ctx, id)
			return err == nil
		})
	})
}

// A changed definition keeps the state, unless its timing changed: then
// it is next due after now.
func TestScheduleDefinitionChange(t *testing.T) {
	t.Parallel()
	d := testutil.SQLite(t)
	ctx := context.Background()
	clk := clock.NewFake(t0)
	c := scheduleClient(t, d, clk, "a", drover.Schedule{Name: "c", Workflow: "report", Every: time.Hour})
	if _, err := c.PauseSchedule(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	clk.Advance(10 * time.Minute)
	if err := c.AddSchedules(ctx, []drover.Schedule{{Name: "c", Workflow: "report", Input: []byte(`2`), Every: time.Hour}}); err != nil {
		t.Fatal(err)
	}
	st, _ := c.GetSchedule(ctx, "c")
	if !st.Paused || string(st.Input) != "2" {
		t.Errorf("after an input change: %+v", st)
	}
	if _, err := c.ResumeSchedule(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	st, _ = c.GetSchedule(ctx, "c")
	if !st.NextDue[0].Equal(t0.Add(time.Hour)) {
		t.Errorf("next due %v after an input change, want %v", st.NextDue[0], t0.Add(time.Hour))
	}
	if err := c.AddSchedules(ctx, []drover.Schedule{{Name: "c", Workflow: "report", Every: 2 * time.Minute}}); err != nil {
		t.Fatal(err)
	}
	st, _ = c.GetSchedule(ctx, "c")
	if !st.NextDue[0].Equal(t0.Add(12 * time.Minute)) {
		t.Errorf("next due %v after a timing change, want %v", st.NextDue[0], t0.Add(12*time.Minute))
	}
}

// Bad definitions are refused with an error naming the schedule and the
// problem.
func TestScheduleValidation(t *testing.T) {
	t.Parallel()
	d := testutil.SQLite(t)
	for _, tc := range []struct {
		s    drover.Schedule
		want string
	}{
		{drover.Schedule{Name: "a b", Workflow: "report", Every: time.Minute}, `schedule "a b": the name contains a space`},
		{drover.Schedule{Name: strings.Repeat("n", 101), Workflow: "report", Every: time.Minute}, "the limit is 100"},
		{drover.Schedule{Name: "x", Workflow: "report"}, `"x": give Cron or Every`},
		{drover.Schedule{Name: "x", Workflow: "report", Cron: "* * * * *", Every: time.Minute}, "not both"},
		{drover.Schedule{Name: "x", Workflow: "report", Cron: "61 * * * *"}, `Cron "61 * * * *": `},
		{drover.Schedule{Name: "x", Workflow: "report", Cron: "@every 1m"}, "use Every"},
		{drover.Schedule{Name: "x", Workflow: "report", Cron: "0 6 * * *", TimeZone: "Mars/Base"}, `TimeZone "Mars/Base" is not a known IANA time zone`},
		{drover.Schedule{Name: "x", Workflow: "report", Every: time.Millisecond}, "shorter than 1s"},
		{drover.Schedule{Name: "x", Workflow: "report", Every: time.Minute, CatchUp: "some"}, `CatchUp "some" is not skip, last or all`},
		{drover.Schedule{Name: "x", Workflow: "report", Every: time.Minute, Input: []byte("{")}, "Input is not a JSON document"},
		{drover.Schedule{Name: "x", Workflow: "nightly", Every: time.Minute}, `unknown workflow "nightly"`},
	} {
		_, err := drover.New(drover.Config{Store: d, Workflows: []drover.Workflow{reportWorkflow}, ExternalAgents: []string{"builder"},
			Schedules: []drover.Schedule{tc.s}})
		if !errors.Is(err, drover.ErrInvalidSchedule) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want ErrInvalidSchedule saying %q", tc.s, err, tc.want)
		}
	}
}

// A started client fires its Config.Schedules by itself when they are
// due, and its tasks run.
func TestScheduleStartedClientFires(t *testing.T) {
	t.Parallel()
	bothStores(t, func(t *testing.T, d store.Driver) {
		clk := clock.NewFake(t0)
		var ran atomic.Int64
		c := startClient(t, drover.Config{Store: d, Clock: clk, Workflows: []drover.Workflow{reportWorkflow},
			Agents: []drover.Agent{{Name: "builder", Func: func(context.Context, *drover.AgentRequest) ([]byte, error) {
				ran.Add(1)
				return []byte(`{}`), nil
			}}},
			Schedules: []drover.Schedule{{Name: "auto", Workflow: "report", Every: time.Minute}}})
		if _, err := c.GetSchedule(context.Background(), "auto"); err != nil {
			t.Fatalf("Start did not store the schedule: %v", err)
		}
		clk.Advance(time.Minute)
		id := drover.ScheduleTaskID("auto", t0.Add(time.Minute))
		testutil.WaitFor(t, "the due time's task processed", func() bool {
			task, err := c.Task(context.Background(), id)
			return err == nil && task.ProcessState == drover.Processed
		})
		if n := ran.Load(); n != 1 {
			t.Errorf("agent ran %d times, want 1", n)
		}
	})
}

// The schedule leader crashed at each of its transactions in turn, before
// the commit and after it (the commit happened, the process never learned
// it), and replaced by another process: every due time of the schedules
// is fired exactly once, none lost. Each crash point runs on a store of
// its own.
func TestScheduleCrashAtEveryTransaction(t *testing.T) {
	t.Parallel()
	ss := []drover.Schedule{
		{Name: "every", Workflow: "report", Every: time.Minute, CatchUp: drover.CatchUpAll},
		{Name: "cron", Workflow: "report", Cron: "*/2 * * * *", CatchUp: drover.CatchUpAll},
	}
	// run is the scenario: a process fires the schedules for four minutes,
	// one round a minute; once one of its calls fails (the crash) it is
	// gone, and a process started in its place (after its lease ran out)
	// takes over on the real store. It returns the clock's end.
	run := func(t *testing.T, d store.Driver, first store.Driver) time.Time {
		clk := clock.NewFake(t0)
		newClient := func(d store.Driver, instance string) (*drover.Client, error) {
			c, err := drover.New(drover.Config{Store: d, Clock: clk, InstanceID: instance, Workflows: []drover.Workflow{reportWorkflow},
				ExternalAgents: []string{"builder"}, Schedules: ss})
			if err != nil {
				t.Fatal(err)
			}
			return c, c.AddSchedules(context.Background(), ss)
		}
		c, err := newClient(first, "crashing")
		replace := func() {
			clk.Advance(11 * time.Second) // the crashed leader's lease runs out
			if c, err = newClient(d, "survivor"); err != nil {
				t.Fatalf("survivor: %v", err)
			}
		}
		if err != nil {
			replace()
		}
		for i := range 5 {
			if i < 4 {
				clk.Advance(time.Minute)
			}
			if _, err := c.FireSchedules(context.Background()); err != nil {
				if !errors.Is(err, testutil.ErrCrash) {
					t.Fatalf("FireSchedules: %v", err)
				}
				replace()
				fire(t, c)
			}
		}
		return clk.Now()
	}
	check := func(t *testing.T, what string, d store.Driver, end time.Time) {
		c, err := drover.New(drover.Config{Store: d, Workflows: []drover.Workflow{reportWorkflow}, ExternalAgents: []string{"builder"}})
		if err != nil {
			t.Fatal(err)
		}
		// The interval's grid starts when the schedule was first stored.
		st, err := c.GetSchedule(context.Background(), "every")
		if err != nil {
			t.Fatal(err)
		}
		var every, cron []time.Time
		for due := st.CreatedAt.Truncate(time.Second).Add(time.Minute); !due.After(end); due = due.Add(time.Minute) {
			every = append(every, due)
		}
		for due := t0.Add(time.Minute); !due.After(end); due = due.Add(time.Minute) {
			if due.Minute()%2 == 0 {
				cron = append(cron, due)
			}
		}
		wantIDs(t, what+": every", scheduledIDs(t, c, "every"), dueIDs("every", every...))
		wantIDs(t, what+": cron", scheduledIDs(t, c, "cron"), dueIDs("cron", cron...))
	}
	bothStores(t, func(t *testing.T, open store.Driver) {
		fresh := func() store.Driver {
			if open.Name() == "sqlite" {
				return testutil.SQLite(t)
			}
			return testutil.Postgres(t)
		}
		// A clean run tells how many transactions the work takes.
		d := fresh()
		counter := &testutil.CrashPoint{Driver: d}
		end := run(t, d, counter)
		check(t, "clean run", d, end)
		steps := counter.Calls()
		if steps < 9 {
			t.Fatalf("a clean run took %d transactions; want at least 9 (store, then a lease and a firing per round)", steps)
		}
		for k := int64(1); k <= steps; k++ {
			for _, afterCommit := range []bool{false, true} {
				d := fresh()
				cp := &testutil.CrashPoint{Driver: d, At: k, AfterCommit: afterCommit}
				end := run(t, d, cp)
				if !cp.Fired() {
					t.Fatalf("crash point %d was not reached", k)
				}
				check(t, fmt.Sprintf("crash at transaction %d (after commit: %v)", k, afterCommit), d, end)
			}
		}
	})
}

// Two started processes on one store, each running the schedule leader,
// compete for the lease at every due time (it runs out as the fake clock
// moves a minute): each due time is submitted once.
func TestScheduleTwoStartedProcesses(t *testing.T) {
	t.Parallel()
	bothStores(t, func(t *testing.T, d store.Driver) {
		clk := clock.NewFake(t0)
		s := drover.Schedule{Name: "shared", Workflow: "report", Every: time.Minute}
		var clients []*drover.Client
		for _, id := range []string{"p1", "p2"} {
			clients = append(clients, startClient(t, drover.Config{Store: d, Clock: clk, InstanceID: id, Workflows: []drover.Workflow{reportWorkflow},
				ExternalAgents: []string{"builder"}, Roles: drover.Roles{Supervisor: true}, Schedules: []drover.Schedule{s}}))
		}
		var want []time.Time
		for i := 1; i <= 4; i++ {
			clk.Advance(time.Minute)
			want = append(want, t0.Add(time.Duration(i)*time.Minute))
			id := drover.ScheduleTaskID("shared", want[len(want)-1])
			testutil.WaitFor(t, "the task of "+id, func() bool {
				_, err := clients[0].Task(context.Background(), id)
				return err == nil
			})
		}
		wantIDs(t, "two processes", scheduledIDs(t, clients[1], "shared"), dueIDs("shared", want...))
	})
}

// Catch-up all after a long downtime fires every missed due time, over
// several transactions of at most 500.
func TestScheduleCatchUpAllInBatches(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	c := scheduleClient(t, testutil.SQLite(t), clk, "a", drover.Schedule{Name: "s", Workflow: "report", Every: time.Second, CatchUp: drover.CatchUpAll})
	clk.Advance(1234 * time.Second)
	fire(t, c)
	ts, err := c.Tasks(context.Background(), drover.ListParams{Workflow: "report", Limit: 2000})
	if err != nil || len(ts) != 1234 {
		t.Fatalf("%d tasks (%v), want 1234", len(ts), err)
	}
	st, _ := c.GetSchedule(context.Background(), "s")
	if !st.NextDue[0].Equal(t0.Add(1235*time.Second)) || !st.LastDue.Equal(t0.Add(1234*time.Second)) {
		t.Errorf("next due %v, last due %v", st.NextDue[0], st.LastDue)
	}
}
