package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/store"
)

// The schedule cases: recurring schedules' definitions and due times.
func scheduleCases() []testCase {
	return []testCase{
		{"PutListRoundTrip", testSchedulePutList},
		{"DueFiltersAndOrders", testScheduleDue},
		{"PutRollsBack", testSchedulePutRollback},
		{"ListInTransactionLocks", testScheduleListLocks},
		{"DeleteRemovesTheNamed", testScheduleDelete},
	}
}

func newSchedule(name string, next time.Time) *dt.Schedule {
	return &dt.Schedule{Name: name, Workflow: "wf", Input: []byte(`{"n":1}`), Cron: "0 6 * * *", TimeZone: "Europe/Berlin",
		CatchUp: "last", NextDue: next, CreatedAt: at(0), UpdatedAt: at(time.Second)}
}

func listSchedules(t *testing.T, x store.Executor, names []string) []*dt.Schedule {
	t.Helper()
	got, err := x.ScheduleList(context.Background(), &store.ScheduleListParams{Names: names})
	if err != nil {
		t.Fatalf("ScheduleList: %v", err)
	}
	return got
}

// checkSchedules compares schedules one by one (checkEqual takes structs).
func checkSchedules(t *testing.T, what string, got, want []*dt.Schedule) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d schedules, want %d", what, len(got), len(want))
		return
	}
	for i := range got {
		checkEqual(t, fmt.Sprintf("%s [%d]", what, i), got[i], want[i])
	}
}

func putSchedules(t *testing.T, d store.Driver, s ...*dt.Schedule) {
	t.Helper()
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		return x.SchedulePut(ctx, &store.SchedulePutParams{Schedules: s})
	})
}

// testSchedulePutList stores schedules of both kinds, reads them back
// (all, by name, inside and outside a transaction) and replaces one.
func testSchedulePutList(t *testing.T, d store.Driver) {
	a := newSchedule("b-cron", at(time.Hour))
	last := at(-time.Hour)
	b := &dt.Schedule{Name: "a-every", Workflow: "other", Input: []byte(`null`), Every: 90*time.Second + time.Microsecond,
		CatchUp: "all", Paused: true, NextDue: at(time.Minute), LastDue: &last, LastTask: "schedule:a-every:x",
		CreatedAt: at(0), UpdatedAt: at(2 * time.Second)}
	putSchedules(t, d, a, b)
	checkSchedules(t, "all schedules", listSchedules(t, d.Reader(), nil), []*dt.Schedule{b, a})
	checkSchedules(t, "named schedule", listSchedules(t, d.Reader(), []string{"b-cron", "missing"}), []*dt.Schedule{a})
	if got := listSchedules(t, d.Reader(), []string{}); len(got) != 0 {
		t.Errorf("no names: got %d schedules, want none", len(got))
	}
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		checkSchedules(t, "schedule read in a transaction", listSchedules(t, x, []string{"a-every"}), []*dt.Schedule{b})
		return nil
	})

	a2 := *a
	a2.Cron, a2.TimeZone, a2.Every, a2.Paused, a2.NextDue, a2.LastDue, a2.LastTask = "", "", time.Hour, true, at(2*time.Hour), &last, "t1"
	a2.Input, a2.Workflow, a2.CatchUp, a2.UpdatedAt = []byte(`{"n":2}`), "wf2", "skip", at(3*time.Second)
	putSchedules(t, d, &a2)
	checkSchedules(t, "replaced schedule", listSchedules(t, d.Reader(), []string{"b-cron"}), []*dt.Schedule{&a2})
}

// testScheduleDue checks which schedules are due: not paused, NextDue at
// or before Before, named; earliest first, then by name; at most Limit.
func testScheduleDue(t *testing.T, d store.Driver) {
	s1, s2, s3 := newSchedule("s1", at(2*time.Second)), newSchedule("s2", at(time.Second)), newSchedule("s3", at(time.Second))
	paused, later, other := newSchedule("paused", at(0)), newSchedule("later", at(time.Hour)), newSchedule("other", at(0))
	paused.Paused = true
	putSchedules(t, d, s1, s2, s3, paused, later, other)
	names := []string{"s1", "s2", "s3", "paused", "later"}
	due := func(x store.Executor, before time.Time, limit int) []string {
		got, err := x.ScheduleDue(context.Background(), &store.ScheduleDueParams{Names: names, Before: before, Limit: limit})
		if err != nil {
			t.Fatalf("ScheduleDue: %v", err)
		}
		out := []string{}
		for _, s := range got {
			out = append(out, s.Name)
		}
		return out
	}
	if got, want := due(d.Reader(), at(2*time.Second), 10), []string{"s2", "s3", "s1"}; !slices.Equal(got, want) {
		t.Errorf("%s: %v, want %v", "due at 2s", got, want)
	}
	if got, want := due(d.Reader(), at(2*time.Second), 2), []string{"s2", "s3"}; !slices.Equal(got, want) {
		t.Errorf("%s: %v, want %v", "due at 2s, limit 2", got, want)
	}
	if got, want := due(d.Reader(), at(2*time.Second-time.Microsecond), 10), []string{"s2", "s3"}; !slices.Equal(got, want) {
		t.Errorf("%s: %v, want %v", "due just before 2s", got, want)
	}
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		if got, want := due(x, at(2*time.Hour), 10), []string{"s2", "s3", "s1", "later"}; !slices.Equal(got, want) {
			t.Errorf("%s: %v, want %v", "due in a transaction", got, want)
		}
		return nil
	})
	got, err := d.Reader().ScheduleDue(context.Background(), &store.ScheduleDueParams{Before: at(time.Hour)})
	if err != nil || len(got) != 0 {
		t.Errorf("ScheduleDue without names: %d, %v; want none", len(got), err)
	}
}

// testSchedulePutRollback checks that a rolled back SchedulePut leaves
// nothing.
func testSchedulePutRollback(t *testing.T, d store.Driver) {
	errStop := errors.New("stop")
	err := d.InTx(context.Background(), func(ctx context.Context, x store.Executor) error {
		if err := x.SchedulePut(ctx, &store.SchedulePutParams{Schedules: []*dt.Schedule{newSchedule("gone", at(0))}}); err != nil {
			return err
		}
		return errStop
	})
	if !errors.Is(err, errStop) {
		t.Fatalf("InTx: %v, want the callback's error", err)
	}
	if got := listSchedules(t, d.Reader(), nil); len(got) != 0 {
		t.Errorf("after rollback: %d schedules, want none", len(got))
	}
}

// testScheduleListLocks holds a transaction that read a schedule (and
// moved its NextDue) open while another reads it and pauses it: the second
// waits for the first and sees its change, so neither update is lost.
func testScheduleListLocks(t *testing.T, d store.Driver) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	putSchedules(t, d, newSchedule("s", at(time.Second)))
	release := holdOpen(ctx, t, d, func(ctx context.Context, x store.Executor) error {
		got, err := x.ScheduleList(ctx, &store.ScheduleListParams{Names: []string{"s"}})
		if err != nil || len(got) != 1 {
			return fmt.Errorf("T1 list: %d, %v", len(got), err)
		}
		got[0].NextDue = at(time.Hour)
		return x.SchedulePut(ctx, &store.SchedulePutParams{Schedules: got})
	})
	probe, _ := d.(LockWaits)
	var waitsBefore int64
	if probe != nil {
		var err error
		if waitsBefore, err = probe.LockWaits(ctx); err != nil {
			t.Fatalf("LockWaits: %v", err)
		}
	}
	second := make(chan error, 1)
	go func() {
		second <- d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
			got, err := x.ScheduleList(ctx, &store.ScheduleListParams{Names: []string{"s"}})
			if err != nil || len(got) != 1 {
				return fmt.Errorf("T2 list: %d, %v", len(got), err)
			}
			got[0].Paused = true
			return x.SchedulePut(ctx, &store.SchedulePutParams{Schedules: got})
		})
	}()
	if probe != nil {
		tick := time.NewTicker(2 * time.Millisecond)
		for n := int64(0); n < waitsBefore+1; {
			select {
			case err := <-second:
				t.Fatalf("T2 finished while T1 held the schedule: %v", err)
			case <-tick.C:
				var err error
				if n, err = probe.LockWaits(ctx); err != nil {
					t.Fatalf("LockWaits: %v", err)
				}
			case <-ctx.Done():
				t.Fatal("T2 neither finished nor waited for T1")
			}
		}
		tick.Stop()
	}
	if err := release(); err != nil {
		t.Fatalf("T1: %v", err)
	}
	if err := <-second; err != nil {
		t.Fatalf("T2: %v", err)
	}
	got := listSchedules(t, d.Reader(), []string{"s"})
	if len(got) != 1 || !got[0].Paused || !got[0].NextDue.Equal(at(time.Hour)) {
		t.Errorf("after both: %+v; want paused with T1's next due time", got)
	}
}

// testScheduleDelete deletes schedules by name: only those named, a
// missing name is no error, a rollback keeps them, and a reader may not.
func testScheduleDelete(t *testing.T, d store.Driver) {
	putSchedules(t, d, newSchedule("a", at(0)), newSchedule("b", at(0)), newSchedule("c", at(0)))
	del := func(x store.Executor, names ...string) (int, error) {
		return x.ScheduleDelete(context.Background(), &store.ScheduleDeleteParams{Names: names})
	}
	names := func() []string {
		var out []string
		for _, s := range listSchedules(t, d.Reader(), nil) {
			out = append(out, s.Name)
		}
		return out
	}
	for _, names := range [][]string{{"a"}, nil} {
		if _, err := del(d.Reader(), names...); err == nil {
			t.Errorf("ScheduleDelete %v outside a write transaction: no error", names)
		}
	}
	errStop := errors.New("stop")
	err := d.InTx(context.Background(), func(ctx context.Context, x store.Executor) error {
		if n, err := del(x, "a", "b"); n != 2 || err != nil {
			return fmt.Errorf("ScheduleDelete a, b: %d, %v; want 2", n, err)
		}
		return errStop
	})
	if !errors.Is(err, errStop) {
		t.Fatalf("InTx: %v, want the callback's error", err)
	}
	if got, want := names(), []string{"a", "b", "c"}; !slices.Equal(got, want) {
		t.Errorf("after a rolled back delete: %v, want %v", got, want)
	}
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		for _, c := range []struct {
			names []string
			want  int
		}{{nil, 0}, {[]string{"b", "missing"}, 1}, {[]string{"b"}, 0}} {
			if n, err := del(x, c.names...); n != c.want || err != nil {
				t.Errorf("ScheduleDelete %v: %d, %v; want %d", c.names, n, err, c.want)
			}
		}
		return nil
	})
	if got, want := names(), []string{"a", "c"}; !slices.Equal(got, want) {
		t.Errorf("after deleting b: %v, want %v", got, want)
	}
}
