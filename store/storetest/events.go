package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/store"
)

func eventCases() []testCase {
	return []testCase{
		{"InsertListFilters", testEventList},
		{"TailingReaderMissesNothing", func(t *testing.T, d store.Driver) { testEventTailing(t, d, 1, 0) }},
		{"TailingReaderMissesNothingInRows", func(t *testing.T, d store.Driver) { testEventTailing(t, d, 3, 2) }},
		{"RowsResumeFromEveryEvent", testEventRows},
	}
}

func leaseCases() []testCase {
	return []testCase{
		{"AcquireRenewTakeover", testLeaseAcquire},
		{"Release", testLeaseRelease},
		{"GetNotFound", testLeaseGetNotFound},
		{"CheckFencesTransaction", testLeaseCheck},
		{"List", testLeaseList},
	}
}

// LeaseList lists the leases of a prefix not expired at now, by name.
func testLeaseList(t *testing.T, d store.Driver) {
	acquire(t, d, "instance:b", "B", base, 10*time.Second)
	acquire(t, d, "instance:a", "A", base, 20*time.Second)
	acquire(t, d, "instance:c", "C", base, 5*time.Second)
	acquire(t, d, "instancex", "X", base, time.Minute)
	acquire(t, d, "supervisor", "S", base, time.Minute)
	list := func(prefix string, now time.Time, limit int) string {
		t.Helper()
		ls, err := d.Reader().LeaseList(context.Background(), &store.LeaseListParams{Prefix: prefix, Now: now, Limit: limit})
		if err != nil {
			t.Fatalf("LeaseList(%q): %v", prefix, err)
		}
		var out []string
		for _, l := range ls {
			out = append(out, fmt.Sprintf("%s=%s@%v", l.Name, l.Holder, l.ExpiresAt.Sub(base)))
		}
		return fmt.Sprint(out)
	}
	for _, c := range []struct {
		got, want string
	}{
		{list("instance:", base, 10), "[instance:a=A@20s instance:b=B@10s instance:c=C@5s]"},
		{list("instance:", at(5*time.Second), 10), "[instance:a=A@20s instance:b=B@10s]"},
		{list("instance:", base, 1), "[instance:a=A@20s]"},
		{list("instance", at(15*time.Second), 10), "[instance:a=A@20s instancex=X@1m0s]"},
		{list("nothing", base, 10), "[]"},
	} {
		if c.got != c.want {
			t.Errorf("LeaseList = %s, want %s", c.got, c.want)
		}
	}
}

// LeaseCheck passes for the holder before expiry; otherwise the transaction
// fails with ErrLeaseNotHeld, wherever the driver reports it, and none of
// its writes commit, even a write that follows the check with no read in
// between.
func testLeaseCheck(t *testing.T, d store.Driver) {
	acquire(t, d, "inst", "A", base, 10*time.Second)
	insertTasks(t, d, newTask("t"))
	ctx := context.Background()
	run := func(holder, name string, now time.Time, read bool) error {
		return d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
			if err := x.LeaseCheck(ctx, &store.LeaseCheckParams{Name: name, Holder: holder, Now: now}); err != nil {
				return err
			}
			tk := newTask("t")
			tk.ProcessState, tk.LastError = dt.Error, "fenced write by "+holder
			if err := x.TaskUpdateMany(ctx, &store.TaskUpdateManyParams{Tasks: []*dt.Task{tk}}); err != nil {
				return err
			}
			if read {
				_, err := x.TaskGet(ctx, &store.TaskGetParams{ID: "t"})
				return err
			}
			return nil
		})
	}
	for _, read := range []bool{false, true} {
		for _, c := range []struct {
			what, holder, name string
			now                time.Time
		}{
			{"another holder", "B", "inst", at(time.Second)},
			{"the holder at expiry", "A", "inst", at(10 * time.Second)},
			{"a missing lease", "A", "none", at(time.Second)},
		} {
			err := run(c.holder, c.name, c.now, read)
			wantErrIs(t, err, store.ErrLeaseNotHeld, fmt.Sprintf("LeaseCheck of %s (read after the write: %v)", c.what, read))
			if got := getTask(t, d, "t"); got.ProcessState != dt.Pending {
				t.Fatalf("LeaseCheck of %s failed, yet the transaction's write committed: task is %s (%s)", c.what, got.ProcessState, got.LastError)
			}
		}
	}
	if err := run("A", "inst", at(time.Second), false); err != nil {
		t.Fatalf("LeaseCheck of the holder before expiry: %v", err)
	}
	if got := getTask(t, d, "t"); got.ProcessState != dt.Error {
		t.Fatalf("the holder's write did not commit: task is %s", got.ProcessState)
	}
}

func eventIDs(evs []*dt.Event) []int64 {
	out := make([]int64, len(evs))
	for i, e := range evs {
		out[i] = e.ID
	}
	return out
}

func testEventList(t *testing.T, d store.Driver) {
	insertTasks(t, d, newTask("a"), newTask("b"))
	mk := func(task string, step int, typ dt.EventType, alert bool) *dt.Event {
		return &dt.Event{TaskID: task, StepIndex: step, Type: typ, State: dt.Processing, Alert: alert,
			Actor: "actor-" + task, Term: 0, Attempt: 1, Message: "msg " + string(typ), CreatedAt: at(time.Duration(step+2) * time.Second)}
	}
	first := []*dt.Event{
		{TaskID: "a", StepIndex: -1, Type: dt.EventSubmitted, State: dt.Pending, CreatedAt: base}, // empty optional fields
		mk("a", 0, dt.EventStepStarted, false),
		mk("b", -1, dt.EventSubmitted, false),
	}
	second := []*dt.Event{
		mk("a", 0, dt.EventStepFailed, true),
		{TaskID: "b", StepIndex: 3, Type: dt.EventStepTimedOut, State: dt.Processing, Actor: "sup", Term: 7, Attempt: 2, CreatedAt: at(time.Minute)},
		mk("a", -1, dt.EventError, true),
	}
	second[2].State = dt.Error
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		if err := x.EventInsertMany(ctx, &store.EventInsertManyParams{Events: first}); err != nil {
			return err
		}
		return x.EventInsertMany(ctx, &store.EventInsertManyParams{Events: nil})
	})
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		return x.EventInsertMany(ctx, &store.EventInsertManyParams{Events: second})
	})
	inserted := append(append([]*dt.Event(nil), first...), second...)

	all := listEvents(t, d, store.EventListParams{})
	if len(all) != 6 {
		t.Fatalf("EventList = %d events, want 6", len(all))
	}
	for i, e := range all {
		if i > 0 && e.ID <= all[i-1].ID {
			t.Errorf("event IDs not increasing: %v", eventIDs(all))
		}
		checkEqual(t, fmt.Sprintf("event %d", i), e, inserted[i], "ID")
	}
	if all[0].StepIndex != -1 || all[4].StepIndex != 3 || all[4].Term != 7 {
		t.Errorf("StepIndex/Term round trip: %+v, %+v", all[0], all[4])
	}
	id := func(i int) int64 { return all[i].ID }
	cases := []struct {
		p    store.EventListParams
		want []int64
	}{
		{store.EventListParams{TaskID: "a"}, []int64{id(0), id(1), id(3), id(5)}},
		{store.EventListParams{TaskID: "b"}, []int64{id(2), id(4)}},
		{store.EventListParams{TaskID: "missing"}, []int64{}},
		{store.EventListParams{AlertsOnly: true}, []int64{id(3), id(5)}},
		{store.EventListParams{AfterID: id(2)}, []int64{id(3), id(4), id(5)}},
		{store.EventListParams{AfterID: id(5)}, []int64{}},
		{store.EventListParams{Limit: 2}, []int64{id(0), id(1)}},
		{store.EventListParams{AfterID: id(1), Limit: 2}, []int64{id(2), id(3)}},
		{store.EventListParams{TaskID: "a", AfterID: id(1), Limit: 1}, []int64{id(3)}},
		{store.EventListParams{TaskID: "a", AlertsOnly: true, AfterID: id(3)}, []int64{id(5)}},
		{store.EventListParams{TaskID: "b", AlertsOnly: true}, []int64{}},
	}
	for _, c := range cases {
		got := eventIDs(listEvents(t, d, c.p))
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("EventList(%+v) = %v, want %v", c.p, got, c.want)
		}
	}
	// Reads inside a transaction agree.
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		got, err := x.EventList(ctx, &store.EventListParams{TaskID: "b"})
		if err != nil {
			return err
		}
		if fmt.Sprint(eventIDs(got)) != fmt.Sprint([]int64{id(2), id(4)}) {
			t.Errorf("EventList in a transaction = %v", eventIDs(got))
		}
		return nil
	})
}

func acquire(t *testing.T, d store.Driver, name, holder string, now time.Time, ttl time.Duration) (*dt.Lease, bool) {
	t.Helper()
	var (
		l  *dt.Lease
		ok bool
	)
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		var err error
		l, ok, err = x.LeaseAcquire(ctx, &store.LeaseAcquireParams{Name: name, Holder: holder, Now: now, TTL: ttl})
		return err
	})
	return l, ok
}

func getLease(t *testing.T, d store.Driver, name string) *dt.Lease {
	t.Helper()
	l, err := d.Reader().LeaseGet(context.Background(), &store.LeaseGetParams{Name: name})
	if err != nil {
		t.Fatalf("LeaseGet(%s): %v", name, err)
	}
	return l
}

func checkLease(t *testing.T, what string, l *dt.Lease, holder string, term int64, expires time.Time) {
	t.Helper()
	if l == nil {
		t.Fatalf("%s: no lease returned", what)
	}
	if l.Holder != holder || l.Term != term || !l.ExpiresAt.Equal(expires) {
		t.Errorf("%s: lease %s held by %q term %d expires %s; want %q term %d expires %s",
			what, l.Name, l.Holder, l.Term, l.ExpiresAt.Format(time.RFC3339Nano), holder, term, expires.Format(time.RFC3339Nano))
	}
}

func testLeaseAcquire(t *testing.T, d store.Driver) {
	ttl := 10 * time.Second
	l, ok := acquire(t, d, "sup", "A", base, ttl)
	if !ok {
		t.Fatal("fresh lease not acquired")
	}
	checkLease(t, "fresh", l, "A", 1, at(ttl))
	checkLease(t, "fresh, read back", getLease(t, d, "sup"), "A", 1, at(ttl))

	// Renewal by the holder keeps the term and extends the expiry.
	l, ok = acquire(t, d, "sup", "A", at(5*time.Second), ttl)
	if !ok {
		t.Fatal("renewal refused")
	}
	checkLease(t, "renewed", l, "A", 1, at(15*time.Second))

	// Another holder is refused while it is unexpired, and told who holds it.
	l, ok = acquire(t, d, "sup", "B", at(14*time.Second), ttl)
	if ok {
		t.Fatal("B acquired a lease A holds unexpired")
	}
	checkLease(t, "refused", l, "A", 1, at(15*time.Second))
	checkLease(t, "after refusal", getLease(t, d, "sup"), "A", 1, at(15*time.Second))

	// Another lease name is independent.
	if l, ok := acquire(t, d, "other", "B", at(14*time.Second), ttl); !ok || l.Term != 1 {
		t.Fatalf("independent lease: %+v %v", l, ok)
	}

	// After expiry, B takes over with the next term.
	l, ok = acquire(t, d, "sup", "B", at(16*time.Second), ttl)
	if !ok {
		t.Fatal("B could not take the expired lease")
	}
	checkLease(t, "taken over", l, "B", 2, at(26*time.Second))

	// A, deposed, is refused.
	l, ok = acquire(t, d, "sup", "A", at(17*time.Second), ttl)
	if ok {
		t.Fatal("deposed A re-acquired B's lease")
	}
	checkLease(t, "deposed refused", l, "B", 2, at(26*time.Second))

	// A takes it back after B's expiry: term 3.
	l, ok = acquire(t, d, "sup", "A", at(27*time.Second), ttl)
	if !ok {
		t.Fatal("A could not take the expired lease back")
	}
	checkLease(t, "back to A", l, "A", 3, at(37*time.Second))
}

func testLeaseRelease(t *testing.T, d store.Driver) {
	ttl := time.Minute
	if _, ok := acquire(t, d, "sup", "A", base, ttl); !ok {
		t.Fatal("not acquired")
	}
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		// Wrong holder or wrong term: no effect.
		if err := x.LeaseRelease(ctx, &store.LeaseReleaseParams{Name: "sup", Holder: "B", Term: 1}); err != nil {
			return err
		}
		if err := x.LeaseRelease(ctx, &store.LeaseReleaseParams{Name: "sup", Holder: "A", Term: 2}); err != nil {
			return err
		}
		return x.LeaseRelease(ctx, &store.LeaseReleaseParams{Name: "missing", Holder: "A", Term: 1})
	})
	if _, ok := acquire(t, d, "sup", "B", at(time.Second), ttl); ok {
		t.Fatal("B acquired after a release by the wrong holder or term")
	}
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		return x.LeaseRelease(ctx, &store.LeaseReleaseParams{Name: "sup", Holder: "A", Term: 1})
	})
	// Long before the old expiry, B acquires at once, with a new term.
	l, ok := acquire(t, d, "sup", "B", at(time.Second), ttl)
	if !ok {
		t.Fatal("B could not acquire a released lease")
	}
	checkLease(t, "after release", l, "B", 2, at(time.Second+ttl))
}

func testLeaseGetNotFound(t *testing.T, d store.Driver) {
	_, err := d.Reader().LeaseGet(context.Background(), &store.LeaseGetParams{Name: "none"})
	wantErrIs(t, err, store.ErrNotFound, "LeaseGet")
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		_, err := x.LeaseGet(ctx, &store.LeaseGetParams{Name: "none"})
		wantErrIs(t, err, store.ErrNotFound, "LeaseGet in a transaction")
		return nil
	})
}

// Subscribers tail the history with EventList(AfterID: last ID seen). That
// only misses nothing if a read never returns an ID while a lower one may
// still commit, even with concurrent writers.
// testEventTailing has writers commit perTx events of one task per
// transaction (one event row each, from 2 on) while a reader tails the
// task's events by AfterID, limit at a time (0: all), and checks that the
// reader saw every event, once.
func testEventTailing(t *testing.T, d store.Driver, perTx, limit int) {
	const (
		writers = 8
		each    = 40
	)
	insertTasks(t, d, newTask("t"))
	var (
		wg   sync.WaitGroup
		errs = make([]error, writers)
	)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				errs[w] = d.InTx(context.Background(), func(ctx context.Context, x store.Executor) error {
					var evs []*dt.Event
					for k := range perTx {
						evs = append(evs, &dt.Event{TaskID: "t", StepIndex: w, Type: dt.EventStepStarted, Attempt: i*perTx + k + 1, CreatedAt: base})
					}
					if err := x.EventInsertMany(ctx, &store.EventInsertManyParams{Events: evs}); err != nil {
						return err
					}
					// More work in the same transaction widens the window
					// between taking an ID and committing. (A read of the
					// events sends a pipelining driver's queued insert, so
					// the ID is taken here, before the read of the task.)
					if _, err := x.EventList(ctx, &store.EventListParams{TaskID: "t", AfterID: 1 << 62}); err != nil {
						return err
					}
					_, err := x.TaskGet(ctx, &store.TaskGetParams{ID: "t"})
					return err
				})
				if errs[w] != nil {
					return
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()

	seen := map[int64]bool{}
	var last int64
	tail := func() int {
		evs := listEvents(t, d, store.EventListParams{TaskID: "t", AfterID: last, Limit: limit})
		for _, e := range evs {
			if e.ID <= last {
				t.Errorf("EventList(AfterID %d) returned ID %d", last, e.ID)
			}
			if seen[e.ID] {
				t.Errorf("EventList returned ID %d again", e.ID)
			}
			seen[e.ID] = true
			last = e.ID
		}
		return len(evs)
	}
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		tail()
	}
	for tail() > 0 { // what is left, a page at a time
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	all := listEvents(t, d, store.EventListParams{TaskID: "t"})
	if len(all) != writers*each*perTx {
		t.Fatalf("%d events stored, want %d", len(all), writers*each*perTx)
	}
	missed := 0
	for _, e := range all {
		if !seen[e.ID] {
			missed++
		}
	}
	if missed > 0 {
		t.Errorf("a reader tailing by AfterID missed %d of %d events: an event committed with an ID below one already read", missed, len(all))
	}
}

// testEventRows stores runs of one task's events that a driver keeps in
// one row (store.GroupEvents), beside alerts, another task's events and a
// run longer than a row holds, and checks that every event reads back as
// written, with distinct IDs in the order written, and that a reader
// resuming after any of them, also one in the middle of a row, with or
// without a limit, for all tasks, one task, alerts or a namespace, reads
// exactly the rest.
func testEventRows(t *testing.T, d store.Driver) {
	insertTasks(t, d, newTask("a"), newTask("b"), newTask("team/c"))
	n := 0
	mk := func(task string, step int, typ dt.EventType) *dt.Event {
		n++
		return &dt.Event{TaskID: task, StepIndex: step, Type: typ, State: dt.Processing, Actor: fmt.Sprintf("actor-%d", n),
			Term: int64(n % 3), Attempt: n % 4, Message: fmt.Sprintf("msg %d", n), CreatedAt: at(time.Duration(n) * time.Millisecond)}
	}
	first := []*dt.Event{
		mk("a", -1, dt.EventSubmitted), mk("a", 0, dt.EventStepStarted), mk("a", 0, dt.EventStepProcessed),
		mk("b", -1, dt.EventSubmitted),
		mk("a", 1, dt.EventStepStarted),
	}
	first[0].State, first[0].Actor, first[0].Message = dt.Pending, "", "" // empty optional fields, in a row's first event
	first[2].Actor, first[2].Attempt = "", 0                              // and in a later one
	alert := mk("a", 1, dt.EventStepFailed)
	alert.Alert = true
	second := []*dt.Event{alert, mk("a", -1, dt.EventError)}
	for i := range 2*store.EventRowSpan + 3 { // a run longer than two rows
		second = append(second, mk("team/c", i, dt.EventStepStarted))
	}
	second = append(second, mk("b", 0, dt.EventStepStarted), mk("b", 0, dt.EventStepProcessed), mk("b", -1, dt.EventProcessed))
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		return x.EventInsertMany(ctx, &store.EventInsertManyParams{Events: first})
	})
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		return x.EventInsertMany(ctx, &store.EventInsertManyParams{Events: second})
	})
	written := append(append([]*dt.Event(nil), first...), second...)
	for i, e := range written {
		if e.ID <= 0 || i > 0 && e.ID <= written[i-1].ID {
			t.Fatalf("EventInsertMany gave IDs %v, want increasing in the order written", eventIDs(written))
		}
	}
	all := listEvents(t, d, store.EventListParams{})
	if len(all) != len(written) {
		t.Fatalf("EventList = %d events, want %d", len(all), len(written))
	}
	for i, e := range all {
		checkEqual(t, fmt.Sprintf("event %d", i), e, written[i])
	}

	checkEventsResume(t, d, written)
}

// checkEventsResume checks that the store holds exactly the events
// written (and those of no other task), and that a reader resuming after
// any of their IDs, with or without a limit, for all tasks, each task,
// alerts or each namespace, reads exactly the rest.
func checkEventsResume(t *testing.T, d store.Driver, written []*dt.Event) {
	t.Helper()
	type filter struct {
		name string
		p    store.EventListParams
		keep func(*dt.Event) bool
	}
	filters := []filter{
		{"all", store.EventListParams{}, func(*dt.Event) bool { return true }},
		{"alerts", store.EventListParams{AlertsOnly: true}, func(e *dt.Event) bool { return e.Alert }},
	}
	seen := map[string]bool{}
	for _, e := range written {
		if !seen[e.TaskID] {
			seen[e.TaskID] = true
			task := e.TaskID
			filters = append(filters, filter{"task " + task, store.EventListParams{TaskID: task}, func(e *dt.Event) bool { return e.TaskID == task }})
		}
		if ns := dt.NamespaceOf(e.TaskID); ns != "" && !seen["ns "+ns] {
			seen["ns "+ns] = true
			filters = append(filters, filter{"namespace " + ns, store.EventListParams{Namespace: ns},
				func(e *dt.Event) bool { return dt.NamespaceOf(e.TaskID) == ns }})
		}
	}
	for _, f := range filters {
		var want []int64
		for _, e := range written {
			if f.keep(e) {
				want = append(want, e.ID)
			}
		}
		afters := []int64{0}
		for _, e := range written { // also IDs the filter leaves out
			afters = append(afters, e.ID)
		}
		for _, after := range afters {
			var rest []int64
			for _, id := range want {
				if id > after {
					rest = append(rest, id)
				}
			}
			for _, limit := range []int{0, 1, 3} {
				p := f.p
				p.AfterID, p.Limit = after, limit
				var got []int64
				for {
					page := eventIDs(listEvents(t, d, p))
					if limit > 0 && len(page) > limit {
						t.Fatalf("%s after %d, limit %d: %d events", f.name, p.AfterID, limit, len(page))
					}
					got = append(got, page...)
					if limit == 0 || len(page) < limit {
						break
					}
					p.AfterID = page[len(page)-1]
				}
				if fmt.Sprint(got) != fmt.Sprint(rest) {
					t.Errorf("%s after %d, limit %d: read %v, want %v", f.name, after, limit, got, rest)
				}
			}
		}
	}
}
