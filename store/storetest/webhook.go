package storetest

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/store"
)

func webhookCases() []testCase {
	return []testCase{
		{"CursorStartsAtZeroOnNewStore", testWebhookCursorStart},
		{"CursorRollback", testWebhookCursorRollback},
		{"ConcurrentEnqueuersScanEachEventOnce", testWebhookConcurrentEnqueue},
		{"InsertRoundTripAndConflict", testWebhookInsert},
		{"ClaimDueLeaseAndTakeover", testWebhookClaim},
		{"ConcurrentClaimsNeverOverlap", testWebhookClaimConcurrent},
		{"FinishIsFencedByClaim", testWebhookFinish},
		{"PostponedAttemptIsNotCounted", testWebhookPostponed},
		{"Release", testWebhookRelease},
		{"ListFilters", testWebhookList},
		{"DeleteFinished", testWebhookDeleteFinished},
	}
}

func newDelivery(eventID int64, url, taskID string) *dt.WebhookDelivery {
	return &dt.WebhookDelivery{
		EventID: eventID, URL: url, TaskID: taskID, EventType: dt.EventProcessed,
		Payload:       []byte(fmt.Sprintf(`{"id":"%d","task_id":%q}`, eventID, taskID)),
		NextAttemptAt: base, CreatedAt: base, UpdatedAt: base,
	}
}

func insertDeliveries(t *testing.T, d store.Driver, ds ...*dt.WebhookDelivery) {
	t.Helper()
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		ins, err := x.WebhookDeliveryInsertMany(ctx, &store.WebhookDeliveryInsertManyParams{Deliveries: ds})
		if err != nil {
			return err
		}
		for i, ok := range ins {
			if !ok {
				return fmt.Errorf("delivery (%d, %s) not inserted", ds[i].EventID, ds[i].URL)
			}
		}
		return nil
	})
}

func listDeliveries(t *testing.T, d store.Driver, p store.WebhookDeliveryListParams) []*dt.WebhookDelivery {
	t.Helper()
	got, err := d.Reader().WebhookDeliveryList(context.Background(), &p)
	if err != nil {
		t.Fatalf("WebhookDeliveryList(%+v): %v", p, err)
	}
	return got
}

func getDelivery(t *testing.T, d store.Driver, id int64) *dt.WebhookDelivery {
	t.Helper()
	got := listDeliveries(t, d, store.WebhookDeliveryListParams{AfterID: id - 1, Limit: 1})
	if len(got) != 1 || got[0].ID != id {
		t.Fatalf("delivery %d not found", id)
	}
	return got[0]
}

func claimDeliveries(t *testing.T, d store.Driver, p store.WebhookDeliveryClaimParams) []*dt.WebhookDelivery {
	t.Helper()
	var out []*dt.WebhookDelivery
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		var err error
		out, err = x.WebhookDeliveryClaim(ctx, &p)
		return err
	})
	return out
}

func finishDeliveries(t *testing.T, d store.Driver, rs ...store.WebhookResult) []bool {
	t.Helper()
	var out []bool
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		var err error
		out, err = x.WebhookDeliveryFinishMany(ctx, &store.WebhookDeliveryFinishManyParams{Results: rs})
		return err
	})
	return out
}

func deliveryIDs(ds []*dt.WebhookDelivery) []int64 {
	out := make([]int64, len(ds))
	for i, w := range ds {
		out[i] = w.ID
	}
	return out
}

func lockCursor(t *testing.T, d store.Driver) int64 {
	t.Helper()
	var after int64
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		var (
			ok  bool
			err error
		)
		after, ok, err = x.WebhookCursorLock(ctx, &store.WebhookCursorLockParams{})
		if err == nil && !ok {
			err = errors.New("cursor not locked with no other transaction running")
		}
		return err
	})
	return after
}

func insertEvents(t *testing.T, d store.Driver, evs ...*dt.Event) {
	t.Helper()
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		return x.EventInsertMany(ctx, &store.EventInsertManyParams{Events: evs})
	})
}

func testWebhookCursorStart(t *testing.T, d store.Driver) {
	ev := func(typ dt.EventType) *dt.Event {
		return &dt.Event{TaskID: "t", StepIndex: -1, Type: typ, CreatedAt: base}
	}
	// A new store's cursor is at 0 (the store had no events when migrated):
	// events recorded before the first enqueue are not skipped.
	insertEvents(t, d, ev(dt.EventSubmitted), ev(dt.EventProcessed))
	if got := lockCursor(t, d); got != 0 {
		t.Fatalf("first WebhookCursorLock = %d, want 0", got)
	}
	// Events do not move it; only WebhookCursorSet does.
	all := listEvents(t, d, store.EventListParams{})
	max := all[len(all)-1].ID
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		if _, _, err := x.WebhookCursorLock(ctx, &store.WebhookCursorLockParams{}); err != nil {
			return err
		}
		return x.WebhookCursorSet(ctx, &store.WebhookCursorSetParams{After: max})
	})
	insertEvents(t, d, ev(dt.EventResubmitted))
	if got := lockCursor(t, d); got != max {
		t.Fatalf("WebhookCursorLock after set = %d, want %d", got, max)
	}
	// A second migration leaves it alone.
	if err := d.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := lockCursor(t, d); got != max {
		t.Fatalf("WebhookCursorLock after Migrate = %d, want %d", got, max)
	}
	// The Reader refuses writes.
	if _, _, err := d.Reader().WebhookCursorLock(context.Background(), &store.WebhookCursorLockParams{}); err == nil {
		t.Error("Reader().WebhookCursorLock succeeded, want an error")
	}
}

func testWebhookCursorRollback(t *testing.T, d store.Driver) {
	if got := lockCursor(t, d); got != 0 {
		t.Fatalf("cursor of an empty store = %d, want 0", got)
	}
	sentinel := errors.New("roll back")
	err := d.InTx(context.Background(), func(ctx context.Context, x store.Executor) error {
		if _, _, err := x.WebhookCursorLock(ctx, &store.WebhookCursorLockParams{}); err != nil {
			return err
		}
		if err := x.WebhookCursorSet(ctx, &store.WebhookCursorSetParams{After: 99}); err != nil {
			return err
		}
		if _, err := x.WebhookDeliveryInsertMany(ctx, &store.WebhookDeliveryInsertManyParams{Deliveries: []*dt.WebhookDelivery{newDelivery(1, "http://a", "t")}}); err != nil {
			return err
		}
		return sentinel
	})
	if !errors.Is(err, sentinel) {
		t.Fatalf("InTx = %v, want the callback's error", err)
	}
	if got := lockCursor(t, d); got != 0 {
		t.Errorf("cursor after rollback = %d, want 0", got)
	}
	if got := listDeliveries(t, d, store.WebhookDeliveryListParams{}); len(got) != 0 {
		t.Errorf("%d deliveries after rollback, want 0", len(got))
	}
}

// Enqueuers in several goroutines (processes, on a shared database) scan the
// history while writers add events. The cursor lock must make them take
// turns: if two scanned the same events, the second insert of a delivery
// would come back "not inserted". Every final event after the start must
// get exactly one delivery per URL, and no other event any.
func testWebhookConcurrentEnqueue(t *testing.T, d store.Driver) {
	const (
		writers   = 4
		perWriter = 30
		enqueuers = 4
	)
	urls := []string{"http://a.example/hook", "http://b.example/hook"}
	insertEvents(t, d, &dt.Event{TaskID: "old", StepIndex: -1, Type: dt.EventProcessed, CreatedAt: base})
	start := listEvents(t, d, store.EventListParams{})[0].ID
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		if _, _, err := x.WebhookCursorLock(ctx, &store.WebhookCursorLockParams{}); err != nil {
			return err
		}
		return x.WebhookCursorSet(ctx, &store.WebhookCursorSetParams{After: start}) // the old event is history
	})

	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		errs      []error
		rounds    [][2]int64 // (after, new cursor) of every round that moved the cursor
		skipped   int
		writersWG sync.WaitGroup
		stop      = make(chan struct{})
	)
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	enqueue := func(ctx context.Context, x store.Executor) (moved bool, err error) {
		after, ok, err := x.WebhookCursorLock(ctx, &store.WebhookCursorLockParams{})
		if err != nil || !ok {
			if err == nil {
				mu.Lock()
				skipped++
				mu.Unlock()
			}
			return false, err
		}
		evs, err := x.EventList(ctx, &store.EventListParams{AfterID: after, Limit: 7})
		if err != nil || len(evs) == 0 {
			return false, err
		}
		var ds []*dt.WebhookDelivery
		for _, ev := range evs {
			if !dt.IsWebhookEvent(ev.Type) {
				continue
			}
			for _, u := range urls {
				ds = append(ds, newDelivery(ev.ID, u, ev.TaskID))
			}
		}
		ins, err := x.WebhookDeliveryInsertMany(ctx, &store.WebhookDeliveryInsertManyParams{Deliveries: ds})
		if err != nil {
			return false, err
		}
		for i, ok := range ins {
			if !ok {
				return false, fmt.Errorf("delivery (%d, %s) was already queued: two enqueuers scanned the same event", ds[i].EventID, ds[i].URL)
			}
		}
		last := evs[len(evs)-1].ID
		if err := x.WebhookCursorSet(ctx, &store.WebhookCursorSetParams{After: last}); err != nil {
			return false, err
		}
		mu.Lock()
		rounds = append(rounds, [2]int64{after, last})
		mu.Unlock()
		return true, nil
	}
	for w := range writers {
		writersWG.Add(1)
		go func() {
			defer writersWG.Done()
			types := []dt.EventType{dt.EventStepStarted, dt.EventProcessed, dt.EventError, dt.EventStepFailed, dt.EventCancelled, dt.EventCompensated}
			for i := range perWriter {
				ev := &dt.Event{TaskID: fmt.Sprintf("w%d-%d", w, i), StepIndex: -1, Type: types[i%len(types)], CreatedAt: base}
				if err := d.InTx(context.Background(), func(ctx context.Context, x store.Executor) error {
					return x.EventInsertMany(ctx, &store.EventInsertManyParams{Events: []*dt.Event{ev}})
				}); err != nil {
					fail(err)
					return
				}
			}
		}()
	}
	for range enqueuers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := d.InTx(context.Background(), func(ctx context.Context, x store.Executor) error {
					_, err := enqueue(ctx, x)
					return err
				}); err != nil {
					fail(err)
					return
				}
			}
		}()
	}
	writersWG.Wait()
	close(stop)
	wg.Wait()
	// Drain what the enqueuers left.
	for moved := true; moved; {
		inTx(t, d, func(ctx context.Context, x store.Executor) error {
			var err error
			moved, err = enqueue(ctx, x)
			return err
		})
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	// The rounds chain: each starts where another ended.
	sort.Slice(rounds, func(i, j int) bool { return rounds[i][0] < rounds[j][0] })
	prev := start
	for _, r := range rounds {
		if r[0] != prev {
			t.Fatalf("rounds do not chain: one started at %d after the cursor was at %d (rounds %v)", r[0], prev, rounds)
		}
		prev = r[1]
	}
	t.Logf("%d rounds, %d skipped because the cursor was locked", len(rounds), skipped)

	want := map[string]bool{}
	for _, ev := range listEvents(t, d, store.EventListParams{AfterID: start}) {
		if dt.IsWebhookEvent(ev.Type) {
			for _, u := range urls {
				want[fmt.Sprintf("%d %s", ev.ID, u)] = true
			}
		}
	}
	got := map[string]bool{}
	for _, w := range listDeliveries(t, d, store.WebhookDeliveryListParams{}) {
		k := fmt.Sprintf("%d %s", w.EventID, w.URL)
		if got[k] {
			t.Errorf("delivery %s queued twice", k)
		}
		got[k] = true
		if !want[k] {
			t.Errorf("delivery %s for an event that is not a final-state event after the start", k)
		}
	}
	if len(want) != writers*perWriter/6*4*len(urls) {
		t.Fatalf("test setup: %d deliveries expected, want %d", len(want), writers*perWriter/6*4*len(urls))
	}
	for k := range want {
		if !got[k] {
			t.Errorf("delivery %s missing", k)
		}
	}
}

func testWebhookInsert(t *testing.T, d store.Driver) {
	a := newDelivery(10, "http://a", "t1")
	b := newDelivery(10, "http://b", "t1")
	full := newDelivery(11, "http://a", "t2")
	full.EventType = dt.EventError
	full.Attempts = 3
	full.NextAttemptAt = at(time.Minute)
	full.ClaimedBy = "disp-1"
	full.DeliveredAt = tp(at(2 * time.Second))
	full.FailedAt = tp(at(3 * time.Second))
	full.LastError = "HTTP 503"
	full.LastStatus = 503
	full.CreatedAt = at(-time.Hour)
	full.UpdatedAt = at(time.Hour)
	insertDeliveries(t, d, a, b, full)
	if a.ID == 0 || b.ID == 0 || full.ID == 0 || a.ID == b.ID {
		t.Fatalf("IDs not set: %d %d %d", a.ID, b.ID, full.ID)
	}
	got := listDeliveries(t, d, store.WebhookDeliveryListParams{})
	if len(got) != 3 {
		t.Fatalf("%d deliveries, want 3", len(got))
	}
	byID := map[int64]*dt.WebhookDelivery{}
	for _, w := range got {
		byID[w.ID] = w
	}
	for _, w := range []*dt.WebhookDelivery{a, b, full} {
		checkEqual(t, fmt.Sprintf("delivery (%d, %s)", w.EventID, w.URL), byID[w.ID], w)
	}
	// The same (event, URL) again is skipped; a new pair in the same call is inserted.
	dup := newDelivery(10, "http://a", "other")
	dup.Payload = []byte(`{"changed":true}`)
	c := newDelivery(12, "http://a", "t3")
	var ins []bool
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		var err error
		ins, err = x.WebhookDeliveryInsertMany(ctx, &store.WebhookDeliveryInsertManyParams{Deliveries: []*dt.WebhookDelivery{dup, c}})
		return err
	})
	if fmt.Sprint(ins) != "[false true]" {
		t.Fatalf("inserted = %v, want [false true]", ins)
	}
	if c.ID == 0 {
		t.Error("ID of the inserted delivery not set")
	}
	checkEqual(t, "delivery after a conflicting insert", getDelivery(t, d, a.ID), a)
	// The Reader refuses writes.
	if _, err := d.Reader().WebhookDeliveryInsertMany(context.Background(), &store.WebhookDeliveryInsertManyParams{Deliveries: []*dt.WebhookDelivery{newDelivery(13, "x", "t")}}); err == nil {
		t.Error("Reader().WebhookDeliveryInsertMany succeeded, want an error")
	}
}

func testWebhookClaim(t *testing.T, d store.Driver) {
	late := newDelivery(1, "http://a", "t1")
	late.NextAttemptAt = at(time.Minute) // not due yet
	due2 := newDelivery(2, "http://a", "t2")
	due2.NextAttemptAt = at(-time.Second)
	due1 := newDelivery(3, "http://a", "t3")
	due1.NextAttemptAt = at(-time.Minute)
	due3 := newDelivery(4, "http://a", "t4")
	done := newDelivery(5, "http://a", "t5")
	done.NextAttemptAt = at(-time.Hour)
	done.DeliveredAt = tp(at(-time.Hour))
	gaveUp := newDelivery(6, "http://a", "t6")
	gaveUp.NextAttemptAt = at(-time.Hour)
	gaveUp.FailedAt = tp(at(-time.Hour))
	insertDeliveries(t, d, late, due2, due1, due3, done, gaveUp)

	// Earliest due first, up to the limit.
	got := claimDeliveries(t, d, store.WebhookDeliveryClaimParams{ClaimedBy: "A", Now: base, Lease: 30 * time.Second, Limit: 2})
	if !sameIDs(deliveryIDs(got), []int64{due1.ID, due2.ID}) {
		t.Fatalf("claimed %v, want the two earliest due %v", deliveryIDs(got), []int64{due1.ID, due2.ID})
	}
	for _, w := range got {
		if w.ClaimedBy != "A" || w.Attempts != 1 || !w.NextAttemptAt.Equal(at(30*time.Second)) || !w.UpdatedAt.Equal(base) {
			t.Errorf("claimed delivery %d: ClaimedBy %q Attempts %d NextAttemptAt %s UpdatedAt %s; want A, 1, now+lease, now",
				w.ID, w.ClaimedBy, w.Attempts, w.NextAttemptAt, w.UpdatedAt)
		}
		checkEqual(t, "stored claimed delivery", getDelivery(t, d, w.ID), w)
	}
	// The rest of what is due; held, finished and future deliveries are not handed out.
	got = claimDeliveries(t, d, store.WebhookDeliveryClaimParams{ClaimedBy: "B", Now: at(time.Second), Lease: 30 * time.Second, Limit: 10})
	if !sameIDs(deliveryIDs(got), []int64{due3.ID}) {
		t.Fatalf("second claim = %v, want only %d", deliveryIDs(got), due3.ID)
	}
	// Once A's lease has passed, its deliveries are due again: B takes them
	// over, and the attempt counts on. The future one is due by then too.
	got = claimDeliveries(t, d, store.WebhookDeliveryClaimParams{ClaimedBy: "B", Now: at(30 * time.Second), Lease: time.Minute, Limit: 10})
	if !sameIDs(deliveryIDs(got), []int64{due1.ID, due2.ID}) {
		t.Fatalf("claim at the end of A's lease = %v, want %v", deliveryIDs(got), []int64{due1.ID, due2.ID})
	}
	for _, w := range got {
		if w.ClaimedBy != "B" || w.Attempts != 2 {
			t.Errorf("taken-over delivery %d: ClaimedBy %q Attempts %d, want B, 2", w.ID, w.ClaimedBy, w.Attempts)
		}
	}
	got = claimDeliveries(t, d, store.WebhookDeliveryClaimParams{ClaimedBy: "C", Now: at(time.Minute), Lease: time.Minute, Limit: 10})
	if !sameIDs(deliveryIDs(got), []int64{late.ID, due3.ID}) {
		t.Fatalf("claim at +1m = %v, want %v", deliveryIDs(got), []int64{late.ID, due3.ID})
	}
	if _, err := d.Reader().WebhookDeliveryClaim(context.Background(), &store.WebhookDeliveryClaimParams{ClaimedBy: "R", Now: at(time.Hour), Limit: 1}); err == nil {
		t.Error("Reader().WebhookDeliveryClaim succeeded, want an error")
	}
}

func sameIDs(a, b []int64) bool {
	x := append([]int64(nil), a...)
	y := append([]int64(nil), b...)
	sort.Slice(x, func(i, j int) bool { return x[i] < x[j] })
	sort.Slice(y, func(i, j int) bool { return y[i] < y[j] })
	return fmt.Sprint(x) == fmt.Sprint(y)
}

// Claimers in parallel transactions, some holding theirs open while others
// claim, must each get different deliveries and together all of them.
func testWebhookClaimConcurrent(t *testing.T, d store.Driver) {
	const n, claimers = 120, 6
	ds := make([]*dt.WebhookDelivery, n)
	for i := range ds {
		ds[i] = newDelivery(int64(i+1), "http://a", fmt.Sprintf("t%d", i))
	}
	insertDeliveries(t, d, ds...)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		seen = map[int64]string{}
		errs []error
	)
	for c := range claimers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			me := fmt.Sprintf("claimer-%d", c)
			for {
				var got []*dt.WebhookDelivery
				err := d.InTx(context.Background(), func(ctx context.Context, x store.Executor) error {
					var err error
					got, err = x.WebhookDeliveryClaim(ctx, &store.WebhookDeliveryClaimParams{ClaimedBy: me, Now: base, Lease: time.Hour, Limit: 7})
					if err != nil {
						return err
					}
					// Hold the claim's row locks a little, so others claim meanwhile.
					_, err = x.TaskGet(ctx, &store.TaskGetParams{ID: "none"})
					if errors.Is(err, store.ErrNotFound) {
						err = nil
					}
					return err
				})
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				}
				for _, w := range got {
					if other, dup := seen[w.ID]; dup {
						errs = append(errs, fmt.Errorf("delivery %d claimed by both %s and %s", w.ID, other, me))
					}
					seen[w.ID] = me
				}
				mu.Unlock()
				if err != nil || len(got) == 0 {
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if len(seen) != n {
		t.Fatalf("%d deliveries claimed, want all %d", len(seen), n)
	}
	for _, w := range listDeliveries(t, d, store.WebhookDeliveryListParams{}) {
		if w.Attempts != 1 || w.ClaimedBy != seen[w.ID] {
			t.Errorf("delivery %d: Attempts %d ClaimedBy %q; want 1, %q", w.ID, w.Attempts, w.ClaimedBy, seen[w.ID])
		}
	}
}

func testWebhookFinish(t *testing.T, d store.Driver) {
	a := newDelivery(1, "http://a", "t1")
	b := newDelivery(2, "http://a", "t2")
	c := newDelivery(3, "http://a", "t3")
	insertDeliveries(t, d, a, b, c)
	got := claimDeliveries(t, d, store.WebhookDeliveryClaimParams{ClaimedBy: "A", Now: base, Lease: time.Minute, Limit: 10})
	if len(got) != 3 {
		t.Fatalf("claimed %d, want 3", len(got))
	}
	now := at(time.Second)
	res := func(id int64, by string, attempt int, st dt.WebhookStatus) store.WebhookResult {
		return store.WebhookResult{ID: id, ClaimedBy: by, Attempt: attempt, Status: st, NextAttemptAt: at(10 * time.Second),
			LastError: "HTTP 500", LastStatus: 500, Now: now}
	}
	// Wrong claimer, wrong attempt, unknown ID: nothing changes.
	applied := finishDeliveries(t, d, res(a.ID, "B", 1, dt.WebhookDelivered), res(b.ID, "A", 2, dt.WebhookFailed), res(999999, "A", 1, dt.WebhookDelivered))
	if fmt.Sprint(applied) != "[false false false]" {
		t.Fatalf("stale results applied = %v, want none", applied)
	}
	for _, w := range got {
		checkEqual(t, "delivery after stale results", getDelivery(t, d, w.ID), w)
	}
	// Retry a, deliver b, give up c — in one call.
	ok := res(b.ID, "A", 1, dt.WebhookDelivered)
	ok.LastError, ok.LastStatus = "", 204
	applied = finishDeliveries(t, d, res(a.ID, "A", 1, dt.WebhookPending), ok, res(c.ID, "A", 1, dt.WebhookFailed))
	if fmt.Sprint(applied) != "[true true true]" {
		t.Fatalf("applied = %v, want all", applied)
	}
	ga, gb, gc := getDelivery(t, d, a.ID), getDelivery(t, d, b.ID), getDelivery(t, d, c.ID)
	if ga.Status() != dt.WebhookPending || ga.ClaimedBy != "" || !ga.NextAttemptAt.Equal(at(10*time.Second)) ||
		ga.LastError != "HTTP 500" || ga.LastStatus != 500 || ga.Attempts != 1 || !ga.UpdatedAt.Equal(now) {
		t.Errorf("retried delivery = %s", render(ga))
	}
	if gb.Status() != dt.WebhookDelivered || gb.ClaimedBy != "" || !gb.DeliveredAt.Equal(now) || gb.FailedAt != nil || gb.LastStatus != 204 || gb.LastError != "" {
		t.Errorf("delivered delivery = %s", render(gb))
	}
	if gc.Status() != dt.WebhookFailed || gc.ClaimedBy != "" || !gc.FailedAt.Equal(now) || gc.DeliveredAt != nil || gc.LastError != "HTTP 500" {
		t.Errorf("failed delivery = %s", render(gc))
	}
	// A second result for the same claim changes nothing (the delivery is no longer held).
	if applied := finishDeliveries(t, d, res(a.ID, "A", 1, dt.WebhookDelivered)); applied[0] {
		t.Error("a second result of the same claim was applied")
	}
	// Finished deliveries are never claimed again; the retried one is, at its time.
	if got := claimDeliveries(t, d, store.WebhookDeliveryClaimParams{ClaimedBy: "A", Now: at(9 * time.Second), Lease: time.Minute, Limit: 10}); len(got) != 0 {
		t.Errorf("claimed %v before the retry time", deliveryIDs(got))
	}
	got = claimDeliveries(t, d, store.WebhookDeliveryClaimParams{ClaimedBy: "B", Now: at(10 * time.Second), Lease: time.Minute, Limit: 10})
	if !sameIDs(deliveryIDs(got), []int64{a.ID}) || got[0].Attempts != 2 {
		t.Fatalf("claim at the retry time = %v, want %d with attempt 2", deliveryIDs(got), a.ID)
	}
	if _, err := d.Reader().WebhookDeliveryFinishMany(context.Background(), &store.WebhookDeliveryFinishManyParams{Results: []store.WebhookResult{res(a.ID, "B", 2, dt.WebhookDelivered)}}); err == nil {
		t.Error("Reader().WebhookDeliveryFinishMany succeeded, want an error")
	}
	err := d.InTx(context.Background(), func(ctx context.Context, x store.Executor) error {
		_, err := x.WebhookDeliveryFinishMany(ctx, &store.WebhookDeliveryFinishManyParams{Results: []store.WebhookResult{res(a.ID, "B", 2, "bogus")}})
		return err
	})
	if err == nil {
		t.Error("a result with an unknown status was accepted")
	}
}

// testWebhookPostponed: a result marked Postponed (the attempt was not
// made) gives the claim's attempt back, is fenced like any result, and must
// stay pending.
func testWebhookPostponed(t *testing.T, d store.Driver) {
	a := newDelivery(1, "http://a", "t1")
	b := newDelivery(2, "http://a", "t2")
	insertDeliveries(t, d, a, b)
	got := claimDeliveries(t, d, store.WebhookDeliveryClaimParams{ClaimedBy: "A", Now: base, Lease: time.Minute, Limit: 10})
	if len(got) != 2 || got[0].Attempts != 1 {
		t.Fatalf("claimed %d (attempts %d), want 2 with attempt 1", len(got), got[0].Attempts)
	}
	// A first real attempt of b fails: it counts.
	applied := finishDeliveries(t, d, store.WebhookResult{ID: b.ID, ClaimedBy: "A", Attempt: 1, Status: dt.WebhookPending,
		NextAttemptAt: at(time.Second), LastError: "HTTP 503", LastStatus: 503, Now: at(time.Second)})
	if !applied[0] {
		t.Fatal("b's result not applied")
	}
	got = claimDeliveries(t, d, store.WebhookDeliveryClaimParams{ClaimedBy: "A", Now: at(time.Second), Lease: time.Minute, Limit: 10})
	if len(got) != 1 || got[0].ID != b.ID || got[0].Attempts != 2 {
		t.Fatalf("claimed %v, want b with attempt 2", deliveryIDs(got))
	}
	now := at(2 * time.Second)
	postpone := func(id int64, by string, attempt int, lastErr string, lastStatus int) store.WebhookResult {
		return store.WebhookResult{ID: id, ClaimedBy: by, Attempt: attempt, Status: dt.WebhookPending, Postponed: true,
			NextAttemptAt: at(5 * time.Second), LastError: lastErr, LastStatus: lastStatus, Now: now}
	}
	// Wrong claimer, wrong attempt: nothing changes.
	if applied := finishDeliveries(t, d, postpone(a.ID, "B", 1, "", 0), postpone(b.ID, "A", 1, "HTTP 503", 503)); fmt.Sprint(applied) != "[false false]" {
		t.Fatalf("stale postponements applied = %v, want none", applied)
	}
	if applied := finishDeliveries(t, d, postpone(a.ID, "A", 1, "", 0), postpone(b.ID, "A", 2, "HTTP 503", 503)); fmt.Sprint(applied) != "[true true]" {
		t.Fatalf("postponements applied = %v, want both", applied)
	}
	ga, gb := getDelivery(t, d, a.ID), getDelivery(t, d, b.ID)
	if ga.Attempts != 0 || ga.ClaimedBy != "" || ga.Status() != dt.WebhookPending || !ga.NextAttemptAt.Equal(at(5*time.Second)) || ga.LastError != "" {
		t.Errorf("postponed a = %s, want 0 attempts, unclaimed, due at +5s", render(ga))
	}
	if gb.Attempts != 1 || gb.ClaimedBy != "" || gb.LastError != "HTTP 503" || gb.LastStatus != 503 {
		t.Errorf("postponed b = %s, want 1 attempt (its real one), its last error kept", render(gb))
	}
	// Claimed again later: the attempt numbers go on from there.
	got = claimDeliveries(t, d, store.WebhookDeliveryClaimParams{ClaimedBy: "C", Now: at(5 * time.Second), Lease: time.Minute, Limit: 10})
	if len(got) != 2 {
		t.Fatalf("claimed %v after the postponement, want both", deliveryIDs(got))
	}
	for _, w := range got {
		if want := map[int64]int{a.ID: 1, b.ID: 2}[w.ID]; w.Attempts != want {
			t.Errorf("delivery %d: attempt %d, want %d", w.ID, w.Attempts, want)
		}
	}
	err := d.InTx(context.Background(), func(ctx context.Context, x store.Executor) error {
		r := postpone(a.ID, "C", 1, "", 0)
		r.Status = dt.WebhookDelivered
		_, err := x.WebhookDeliveryFinishMany(ctx, &store.WebhookDeliveryFinishManyParams{Results: []store.WebhookResult{r}})
		return err
	})
	if err == nil {
		t.Error("a postponed result that is not pending was accepted")
	}
}

func testWebhookRelease(t *testing.T, d store.Driver) {
	a := newDelivery(1, "http://a", "t1")
	b := newDelivery(2, "http://a", "t2")
	c := newDelivery(3, "http://a", "t3")
	insertDeliveries(t, d, a, b, c)
	claimDeliveries(t, d, store.WebhookDeliveryClaimParams{ClaimedBy: "A", Now: base, Lease: time.Hour, Limit: 2})
	other := claimDeliveries(t, d, store.WebhookDeliveryClaimParams{ClaimedBy: "B", Now: base, Lease: time.Hour, Limit: 2})
	if len(other) != 1 {
		t.Fatalf("B claimed %d, want 1", len(other))
	}
	now := at(time.Second)
	var n int
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		var err error
		n, err = x.WebhookDeliveryRelease(ctx, &store.WebhookDeliveryReleaseParams{ClaimedBy: "A", Now: now})
		return err
	})
	if n != 2 {
		t.Fatalf("released %d, want 2", n)
	}
	got := claimDeliveries(t, d, store.WebhookDeliveryClaimParams{ClaimedBy: "A2", Now: now, Lease: time.Hour, Limit: 10})
	if len(got) != 2 || sameIDs(deliveryIDs(got), deliveryIDs(other)) {
		t.Fatalf("after release, claimed %v; want A's two, not B's %v", deliveryIDs(got), deliveryIDs(other))
	}
	for _, w := range got {
		if w.Attempts != 2 {
			t.Errorf("released delivery %d: Attempts %d, want 2 (the released attempt counts)", w.ID, w.Attempts)
		}
	}
	if w := getDelivery(t, d, other[0].ID); w.ClaimedBy != "B" {
		t.Errorf("B's delivery after releasing A: ClaimedBy %q", w.ClaimedBy)
	}
}

func testWebhookList(t *testing.T, d store.Driver) {
	ds := []*dt.WebhookDelivery{
		newDelivery(1, "http://a", "t1"), newDelivery(1, "http://b", "t1"),
		newDelivery(2, "http://a", "t2"), newDelivery(3, "http://a", "t1"),
	}
	ds[1].DeliveredAt = tp(base)
	ds[2].FailedAt = tp(base)
	insertDeliveries(t, d, ds...)
	id := func(i int) int64 { return ds[i].ID }
	cases := []struct {
		p    store.WebhookDeliveryListParams
		want []int64
	}{
		{store.WebhookDeliveryListParams{}, []int64{id(0), id(1), id(2), id(3)}},
		{store.WebhookDeliveryListParams{TaskID: "t1"}, []int64{id(0), id(1), id(3)}},
		{store.WebhookDeliveryListParams{EventID: 1}, []int64{id(0), id(1)}},
		{store.WebhookDeliveryListParams{Status: dt.WebhookPending}, []int64{id(0), id(3)}},
		{store.WebhookDeliveryListParams{Status: dt.WebhookDelivered}, []int64{id(1)}},
		{store.WebhookDeliveryListParams{Status: dt.WebhookFailed}, []int64{id(2)}},
		{store.WebhookDeliveryListParams{AfterID: id(1), Limit: 1}, []int64{id(2)}},
		{store.WebhookDeliveryListParams{TaskID: "t1", Status: dt.WebhookPending, AfterID: id(0)}, []int64{id(3)}},
		{store.WebhookDeliveryListParams{TaskID: "missing"}, []int64{}},
	}
	for _, c := range cases {
		got := deliveryIDs(listDeliveries(t, d, c.p))
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("WebhookDeliveryList(%+v) = %v, want %v", c.p, got, c.want)
		}
	}
	if _, err := d.Reader().WebhookDeliveryList(context.Background(), &store.WebhookDeliveryListParams{Status: "bogus"}); err == nil {
		t.Error("WebhookDeliveryList with an unknown status succeeded, want an error")
	}
}

func testWebhookDeleteFinished(t *testing.T, d store.Driver) {
	mk := func(ev int64, updated time.Duration, delivered, failed bool) *dt.WebhookDelivery {
		w := newDelivery(ev, "http://a", "t")
		w.UpdatedAt = at(updated)
		if delivered {
			w.DeliveredAt = tp(at(updated))
		}
		if failed {
			w.FailedAt = tp(at(updated))
		}
		return w
	}
	oldest := mk(1, -3*time.Hour, true, false)
	old := mk(2, -2*time.Hour, false, true)
	older := mk(3, -150*time.Minute, true, false)
	recent := mk(4, 0, true, false)
	pending := mk(5, -5*time.Hour, false, false)
	insertDeliveries(t, d, oldest, old, older, recent, pending)
	del := func(limit int) int {
		var n int
		inTx(t, d, func(ctx context.Context, x store.Executor) error {
			var err error
			n, err = x.WebhookDeliveryDeleteFinished(ctx, &store.WebhookDeliveryDeleteFinishedParams{Before: at(-time.Hour), Limit: limit})
			return err
		})
		return n
	}
	if n := del(2); n != 2 {
		t.Fatalf("deleted %d, want 2 (the limit)", n)
	}
	if got := deliveryIDs(listDeliveries(t, d, store.WebhookDeliveryListParams{})); !sameIDs(got, []int64{old.ID, recent.ID, pending.ID}) {
		t.Fatalf("after deleting 2: %v, want the oldest two gone", got)
	}
	if n := del(10); n != 1 {
		t.Fatalf("deleted %d, want 1", n)
	}
	if got := deliveryIDs(listDeliveries(t, d, store.WebhookDeliveryListParams{})); !sameIDs(got, []int64{recent.ID, pending.ID}) {
		t.Fatalf("after deleting all old finished: %v, want the recent and the pending one", got)
	}
}
