package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/store"
	"github.com/drover-run/drover/store/postgres"
	"github.com/drover-run/drover/store/storetest"
)

// roundTrips counts what the pool sends to the server: each query and each
// pipeline (batch) is one round trip.
type roundTrips struct{ n atomic.Int64 }

func (r *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	r.n.Add(1)
	return ctx
}
func (r *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (r *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	r.n.Add(1)
	return ctx
}
func (r *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (r *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// tracedDriver opens a migrated driver whose pool counts round trips.
func tracedDriver(t *testing.T) (*postgres.Driver, *roundTrips, *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	schema := schemas.Take(t) // first: its cleanup runs after the pool's
	cfg, err := pgxpool.ParseConfig(testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	rt := &roundTrips{}
	cfg.ConnConfig.Tracer = rt
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	d, err := postgres.New(pool, postgres.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	return d, rt, pool
}

// A scheduler-shaped transaction — one read, then writes nobody reads back —
// costs two round trips: the read (with BEGIN) and the writes (with COMMIT).
func TestPipelinedTransactionRoundTrips(t *testing.T) {
	t.Parallel()
	d, rt, _ := tracedDriver(t)
	ctx := context.Background()
	now := time.Date(2031, 1, 2, 3, 4, 5, 0, time.UTC)
	insert(t, d, task("a", now), task("b", now))
	step := &dt.StepRecord{TaskID: "a", Index: 0, Name: "s", Agent: "ag", Timeout: time.Second, ProcessState: dt.Pending,
		IdempotencyKey: "a/0/s", UpdatedAt: now}
	ev := &dt.Event{TaskID: "a", StepIndex: -1, Type: dt.EventSubmitted, State: dt.Pending, CreatedAt: now}
	before := rt.n.Load()
	err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		tasks, err := x.TaskClaim(ctx, &store.TaskClaimParams{Instance: "s1", Now: now, Limit: 10})
		if err != nil {
			return err
		}
		if len(tasks) != 2 {
			t.Errorf("claimed %d tasks, want 2", len(tasks))
		}
		for _, tk := range tasks {
			tk.CurrentStep = 0
		}
		if err := x.StepInsertMany(ctx, &store.StepInsertManyParams{Steps: []*dt.StepRecord{step}}); err != nil {
			return err
		}
		if err := x.TaskUpdateMany(ctx, &store.TaskUpdateManyParams{Tasks: tasks}); err != nil {
			return err
		}
		if err := x.EventInsertMany(ctx, &store.EventInsertManyParams{Events: []*dt.Event{ev}}); err != nil {
			return err
		}
		return store.Notify(ctx, x, &store.NotifyParams{Topic: store.TopicTasks})
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := rt.n.Load() - before; got != 2 {
		t.Errorf("transaction took %d round trips, want 2", got)
	}
	if ev.ID == 0 {
		t.Error("queued event insert did not report the event's ID by the time InTx returned")
	}
	evs, err := d.Reader().EventList(ctx, &store.EventListParams{TaskID: "a"})
	if err != nil || len(evs) != 1 || evs[0].ID != ev.ID {
		t.Fatalf("events after commit: %v, %v; want the one inserted (ID %d)", evs, err, ev.ID)
	}
}

// A consumer's steady-state transaction, settle a batch and receive the next
// heads (MessageSettleReceiveMany), is two round trips: the session locks
// and the settle-and-receive statement go out together (with BEGIN), then
// the COMMIT.
func TestSettleReceiveRoundTrips(t *testing.T) {
	t.Parallel()
	d, rt, _ := tracedDriver(t)
	ctx := context.Background()
	now := time.Date(2031, 1, 2, 3, 4, 5, 0, time.UTC)
	var msgs []store.PublishMessage
	for _, s := range []string{"a", "b", "c"} {
		msgs = append(msgs, store.PublishMessage{Queue: "q", SessionID: s, Body: []byte("1")},
			store.PublishMessage{Queue: "q", SessionID: s, Body: []byte("2")})
	}
	var refs []store.SessionRef
	err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		if _, err := x.MessagePublishMany(ctx, &store.MessagePublishManyParams{Messages: msgs, Now: now}); err != nil {
			return err
		}
		ss, err := x.SessionAccept(ctx, &store.SessionAcceptParams{Queue: "q", Holder: "h", Now: now, Limit: 10})
		for _, s := range ss {
			refs = append(refs, store.SessionRef{Queue: "q", SessionID: s.ID, Token: s.LockToken})
		}
		if err != nil {
			return err
		}
		_, _, err = x.MessageReceiveMany(ctx, &store.MessageReceiveManyParams{Refs: refs, Now: now})
		return err
	})
	if err != nil || len(refs) != 3 {
		t.Fatalf("setup: %d sessions, %v", len(refs), err)
	}
	settles := make([]store.MessageSettle, len(refs))
	for i, r := range refs {
		settles[i] = store.MessageSettle{Ref: r, Seq: 1, Action: store.SettleComplete, ReceiveNext: true}
	}
	before := rt.n.Load()
	err = d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		got, errs, err := x.MessageSettleReceiveMany(ctx, &store.MessageSettleReceiveManyParams{Settles: settles, Now: now})
		if err != nil {
			return err
		}
		for i := range got {
			if errs[i] != nil || got[i] == nil || got[i].Seq != 2 {
				t.Errorf("settle %d: received %+v, err %v; want seq 2", i, got[i], errs[i])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := rt.n.Load() - before; got != 2 {
		t.Errorf("settle-and-receive transaction took %d round trips, want 2", got)
	}
}

// A queued write that fails surfaces at the next read or at commit, and the
// whole transaction rolls back: nothing of it is stored.
func TestPipelinedWriteErrorRollsBack(t *testing.T) {
	t.Parallel()
	d, _, pool := tracedDriver(t)
	ctx := context.Background()
	now := time.Date(2031, 1, 2, 3, 4, 5, 0, time.UTC)
	insert(t, d, task("a", now))
	step := func(i int) *dt.StepRecord {
		return &dt.StepRecord{TaskID: "a", Index: i, Name: "s", Agent: "ag", Timeout: time.Second, ProcessState: dt.Pending,
			IdempotencyKey: "k", UpdatedAt: now}
	}
	for _, readAfter := range []bool{false, true} {
		err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
			if err := x.EventInsertMany(ctx, &store.EventInsertManyParams{Events: []*dt.Event{{TaskID: "a", StepIndex: -1, Type: dt.EventSubmitted, CreatedAt: now}}}); err != nil {
				return err
			}
			// The same step twice: a primary-key violation, found only when sent.
			if err := x.StepInsertMany(ctx, &store.StepInsertManyParams{Steps: []*dt.StepRecord{step(0), step(0)}}); err != nil {
				return err
			}
			if readAfter {
				_, err := x.TaskGet(ctx, &store.TaskGetParams{ID: "a"})
				return err
			}
			return nil
		})
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "23505" {
			t.Fatalf("readAfter=%v: InTx error %v; want a unique violation", readAfter, err)
		}
		evs, err := d.Reader().EventList(ctx, &store.EventListParams{})
		if err != nil || len(evs) != 0 {
			t.Fatalf("readAfter=%v: events after the failed transaction: %d, %v; want none", readAfter, len(evs), err)
		}
	}
	// Every connection went back to the pool outside any transaction.
	for _, c := range pool.AcquireAllIdle(ctx) {
		if st := c.Conn().PgConn().TxStatus(); st != 'I' {
			t.Errorf("a pooled connection has transaction status %q, want 'I' (idle)", st)
		}
		c.Release()
	}
}

// viaPgxTx runs the drover transactions inside a caller's pgx.Tx through
// InExternalTx: the queued writes must be sent before InExternalTx returns.
type viaPgxTx struct {
	*postgres.Driver
	pool *pgxpool.Pool
}

func (v viaPgxTx) LockWaits(ctx context.Context) (int64, error) { return lockWaits(ctx, v.Driver) }

func (v viaPgxTx) OpenSameStore(t *testing.T) store.Driver {
	return openViaPgxTx(t, openSchema(t, v.Schema()))
}

// openViaPgxTx is d with transactions of a pgx pool of its own, closed when
// t ends.
func openViaPgxTx(t *testing.T, d *postgres.Driver) viaPgxTx {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return viaPgxTx{d, pool}
}

func (v viaPgxTx) InTx(ctx context.Context, fn func(context.Context, store.Executor) error) error {
	tx, err := v.pool.Begin(ctx)
	if err != nil {
		return err
	}
	if err := v.InExternalTx(ctx, tx, fn); err != nil {
		_ = tx.Rollback(ctx)
		return err
	}
	return tx.Commit(ctx)
}

func TestConformancePgxTx(t *testing.T) {
	t.Parallel()
	testURL(t)
	storetest.Run(t, func(t *testing.T) store.Driver { return openViaPgxTx(t, open(t)) })
}

// TxOf runs the application's statements in drover's transaction, after
// drover's queued writes, committing and rolling back with it.
func TestTxOf(t *testing.T) {
	t.Parallel()
	d := openFresh(t)
	ctx := context.Background()
	now := time.Date(2031, 1, 2, 3, 4, 5, 0, time.UTC)
	app := pgx.Identifier{d.Schema(), "app_effects"}.Sanitize()
	if err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		tx, err := postgres.TxOf(x)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `CREATE TABLE `+app+` (n int)`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	count := func(q string) int {
		var n int
		if err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
			tx, err := postgres.TxOf(x)
			if err != nil {
				return err
			}
			return tx.QueryRow(ctx, q).Scan(&n)
		}); err != nil {
			t.Fatal(err)
		}
		return n
	}
	events := `SELECT count(*) FROM ` + pgx.Identifier{d.Schema(), "events"}.Sanitize()
	for _, fail := range []bool{true, false} {
		err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
			if err := x.EventInsertMany(ctx, &store.EventInsertManyParams{Events: []*dt.Event{{TaskID: "a", StepIndex: -1, Type: dt.EventSubmitted, CreatedAt: now}}}); err != nil {
				return err
			}
			tx, err := postgres.TxOf(x)
			if err != nil {
				return err
			}
			var seen int
			if err := tx.QueryRow(ctx, events).Scan(&seen); err != nil {
				return err
			}
			if seen != 1 {
				t.Errorf("the application's statement saw %d events; the queued insert must run first", seen)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO `+app+` VALUES (1)`); err != nil {
				return err
			}
			if fail {
				return errors.New("handler failed")
			}
			return nil
		})
		if fail != (err != nil) {
			t.Fatalf("fail=%v: InTx error %v", fail, err)
		}
		want := 1
		if fail {
			want = 0
		}
		if got := count(`SELECT count(*) FROM ` + app); got != want {
			t.Errorf("fail=%v: %d application rows, want %d", fail, got, want)
		}
		if got := count(events); got != want {
			t.Errorf("fail=%v: %d events, want %d", fail, got, want)
		}
	}
	if _, err := postgres.TxOf(d.Reader()); !errors.Is(err, store.ErrUnsupportedTx) {
		t.Errorf("TxOf(Reader) error %v, want ErrUnsupportedTx", err)
	}
}

// signalEventWaits makes d's readers wait up to a minute for open event
// writers and returns a channel that receives when one starts waiting.
func signalEventWaits(d *postgres.Driver) <-chan struct{} {
	waiting := make(chan struct{}, 1)
	postgres.SetEventWait(d, time.Minute, func() {
		select {
		case waiting <- struct{}{}:
		default:
		}
	})
	return waiting
}

// callersTx begins a transaction on a pool of the test's own (as an
// application would), rolled back and closed when the test ends.
func callersTx(t *testing.T) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	return tx
}

// holdWriter writes e in a transaction, sends it (a read of the events
// sends the event inserts, which otherwise go out with the COMMIT) and keeps
// the transaction open until release is closed; done gets its outcome.
func holdWriter(t *testing.T, d *postgres.Driver, e *dt.Event, release <-chan struct{}) (done <-chan error) {
	t.Helper()
	sent, out := make(chan struct{}), make(chan error, 1)
	go func() {
		out <- d.InTx(context.Background(), func(ctx context.Context, x store.Executor) error {
			if err := x.EventInsertMany(ctx, &store.EventInsertManyParams{Events: []*dt.Event{e}}); err != nil {
				return err
			}
			if _, err := x.EventList(ctx, &store.EventListParams{AfterID: 1 << 62}); err != nil {
				return err
			}
			close(sent)
			<-release
			return nil
		})
	}()
	select {
	case <-sent:
	case err := <-out:
		t.Fatalf("the open writer ended early: %v", err)
	}
	return out
}

// listed is what an EventList call returned.
type listed struct {
	evs []*dt.Event
	err error
}

// listLater calls d.Reader().EventList(AfterID: after) in a goroutine.
func listLater(d *postgres.Driver, after int64) <-chan listed {
	ch := make(chan listed, 1)
	go func() {
		evs, err := d.Reader().EventList(context.Background(), &store.EventListParams{AfterID: after})
		ch <- listed{evs, err}
	}()
	return ch
}

func submittedEvent(taskID string, at time.Time) *dt.Event {
	return &dt.Event{TaskID: taskID, StepIndex: -1, Type: dt.EventSubmitted, State: dt.Pending, CreatedAt: at}
}

// Event writers do not wait for each other: a transaction that wrote events
// and then waits does not hold back other writers. A reader tailing the
// history waits for the writers it saw instead, so an event committed after
// one with a higher ID is not skipped; a writer that stays open longer than
// the reader waits only holds back the events after the last ID proven final.
func TestEventTailWaitsForOpenWriters(t *testing.T) {
	t.Parallel()
	d := open(t)
	ctx := context.Background()
	waiting := signalEventWaits(d)
	now := time.Date(2031, 1, 2, 3, 4, 5, 0, time.UTC)
	insert(t, d, task("a", now))
	ev := func(id string) *dt.Event { return submittedEvent(id, now) }
	hold := func(e *dt.Event) (chan struct{}, <-chan error) {
		release := make(chan struct{})
		return release, holdWriter(t, d, e, release)
	}
	commit := func(e *dt.Event) {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := d.InTx(wctx, func(ctx context.Context, x store.Executor) error {
			return x.EventInsertMany(ctx, &store.EventInsertManyParams{Events: []*dt.Event{e}})
		}); err != nil {
			t.Fatalf("another transaction's events waited for the open one: %v", err)
		}
	}
	list := func(after int64) <-chan listed { return listLater(d, after) }
	want := func(got listed, evs ...*dt.Event) {
		t.Helper()
		if got.err != nil {
			t.Fatal(got.err)
		}
		if len(got.evs) != len(evs) {
			t.Fatalf("EventList returned %d events, want %d", len(got.evs), len(evs))
		}
		for i, e := range evs {
			if got.evs[i].ID != e.ID {
				t.Fatalf("event %d: ID %d, want %d", i, got.evs[i].ID, e.ID)
			}
		}
	}

	first, second := ev("a"), ev("b")
	release, done := hold(first)
	commit(second)
	if !(first.ID < second.ID) {
		t.Fatalf("IDs %d (open) and %d (committed): want the open writer's lower", first.ID, second.ID)
	}
	// A lookup is not a tail: it gets what has committed, without waiting.
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	got, err := d.Reader().EventList(lctx, &store.EventListParams{AfterID: second.ID - 1, Limit: 1, Lookup: true})
	cancel()
	if err != nil || len(got) != 1 || got[0].ID != second.ID {
		close(release)
		t.Fatalf("lookup of the committed event: %d events, %v; want it at once", len(got), err)
	}
	res := list(0)
	select {
	case <-waiting:
	case got := <-res:
		close(release)
		t.Fatalf("EventList returned %d events while the writer of a lower ID was open; want it to wait", len(got.evs))
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	want(<-res, first, second)

	// A writer open longer than readers wait: they return only what is
	// proven final, then the rest once it commits.
	postgres.SetEventWait(d, 50*time.Millisecond, nil)
	third, fourth := ev("a"), ev("b")
	release, done = hold(third)
	commit(fourth)
	want(<-list(second.ID))
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	want(<-list(second.ID), third, fourth)
}

// Readers that find another waiting for the open event writers wait behind
// it and take what it proved: one reader at a time lists the writers.
func TestEventReadersShareOneWait(t *testing.T) {
	t.Parallel()
	d := open(t)
	ctx := context.Background()
	var waits atomic.Int32
	waiting, joined := make(chan struct{}, 16), make(chan struct{}, 16)
	postgres.SetEventWait(d, time.Minute, func() { waits.Add(1); waiting <- struct{}{} })
	postgres.SetEventJoined(d, func() { joined <- struct{}{} })
	now := time.Date(2031, 1, 2, 3, 4, 5, 0, time.UTC)
	ev := func(id string) *dt.Event { return submittedEvent(id, now) }
	open, other := ev("a"), ev("b")
	release := make(chan struct{})
	done := holdWriter(t, d, open, release)
	if err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		return x.EventInsertMany(ctx, &store.EventInsertManyParams{Events: []*dt.Event{other}})
	}); err != nil {
		close(release)
		t.Fatal(err)
	}
	const readers = 4
	results := make(chan int, readers)
	errs := make(chan error, readers)
	for range readers {
		go func() {
			evs, err := d.Reader().EventList(ctx, &store.EventListParams{})
			if err != nil {
				errs <- err
				return
			}
			results <- len(evs)
		}()
	}
	// One reader waits for the open writer; the others wait behind it.
	for range readers - 1 {
		select {
		case <-joined:
		case err := <-errs:
			close(release)
			t.Fatal(err)
		case n := <-results:
			close(release)
			t.Fatalf("a reader returned %d events while the writer of a lower ID was open", n)
		}
	}
	<-waiting
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for range readers {
		select {
		case err := <-errs:
			t.Fatal(err)
		case n := <-results:
			if n != 2 {
				t.Errorf("a reader got %d events, want both", n)
			}
		}
	}
	if n := waits.Load(); n != 1 {
		t.Errorf("%d readers listed and waited for the writers, want 1", n)
	}
}

// A reader that waits behind another's proof which began before a newer
// event was committed still returns that event: a reader woken by the
// newer event's notification (the webhook dispatcher) must not come away
// empty and sleep until its next poll.
func TestEventReaderBehindAnOlderProofGetsNewerEvents(t *testing.T) {
	t.Parallel()
	d := open(t)
	ctx := context.Background()
	waiting, joined := make(chan struct{}, 16), make(chan struct{}, 16)
	postgres.SetEventWait(d, time.Minute, func() { waiting <- struct{}{} })
	postgres.SetEventJoined(d, func() { joined <- struct{}{} })
	now := time.Date(2031, 1, 2, 3, 4, 5, 0, time.UTC)
	older, newer := submittedEvent("a", now), submittedEvent("b", now)
	release := make(chan struct{})
	done := holdWriter(t, d, older, release)
	first := listLater(d, 0) // proves up to older, waiting for its writer
	<-waiting
	if err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		return x.EventInsertMany(ctx, &store.EventInsertManyParams{Events: []*dt.Event{newer}})
	}); err != nil {
		close(release)
		t.Fatal(err)
	}
	second := listLater(d, 0) // joins the proof under way
	select {
	case <-joined:
	case got := <-second:
		close(release)
		t.Fatalf("the second reader returned %v, %v without waiting behind the proof under way", got.evs, got.err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := <-first; got.err != nil || len(got.evs) != 1 || got.evs[0].ID != older.ID {
		t.Fatalf("the first reader got %v, %v; want the older event only (the newer one's ID was handed out after its proof began)", got.evs, got.err)
	}
	got := <-second
	if got.err != nil {
		t.Fatal(got.err)
	}
	var ids []int64
	for _, ev := range got.evs {
		ids = append(ids, ev.ID)
	}
	if want := []int64{older.ID, newer.ID}; !slices.Equal(ids, want) {
		t.Fatalf("the reader behind the older proof got events %v, want %v", ids, want)
	}
}

// A reader behind a proof that gave up on a writer that stays open does
// not wait for that writer in turn: it settles for what is proven final,
// so such a writer makes one reader at a time wait, not each.
func TestEventReaderBehindAStalledProofSettles(t *testing.T) {
	t.Parallel()
	d := open(t)
	ctx := context.Background()
	var waits atomic.Int32
	waiting, joined := make(chan struct{}, 16), make(chan struct{}, 16)
	postgres.SetEventWait(d, 300*time.Millisecond, func() { waits.Add(1); waiting <- struct{}{} })
	postgres.SetEventJoined(d, func() { joined <- struct{}{} })
	now := time.Date(2031, 1, 2, 3, 4, 5, 0, time.UTC)
	open, newer := submittedEvent("a", now), submittedEvent("b", now)
	release := make(chan struct{})
	done := holdWriter(t, d, open, release)
	defer func() {
		close(release)
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	first := listLater(d, 0) // waits for the open writer, then gives up
	<-waiting
	if err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		return x.EventInsertMany(ctx, &store.EventInsertManyParams{Events: []*dt.Event{newer}})
	}); err != nil {
		t.Fatal(err)
	}
	second := listLater(d, 0) // joins it, with a newer last ID
	select {
	case <-joined:
	case got := <-second:
		t.Fatalf("the second reader returned %v, %v without waiting behind the proof under way", got.evs, got.err)
	}
	for _, got := range []listed{<-first, <-second} {
		if got.err != nil || len(got.evs) != 0 {
			t.Fatalf("a reader got %v, %v while the writer of the lowest ID was open; want nothing", got.evs, got.err)
		}
	}
	if n := waits.Load(); n != 1 {
		t.Errorf("%d readers waited for the open writer, want 1 (the second settles behind the first)", n)
	}
}

// A caller's transaction that wrote events through one InExternalTx call
// and reads them through another sees them at once, even while a reader
// on the pool waits for that very transaction to end.
func TestEventListInCallersTransactionWhileAReaderWaits(t *testing.T) {
	t.Parallel()
	d := open(t)
	ctx := context.Background()
	waiting := signalEventWaits(d)
	tx := callersTx(t)
	mine := submittedEvent("a", time.Now())
	if err := d.InExternalTx(ctx, tx, func(ctx context.Context, x store.Executor) error {
		return x.EventInsertMany(ctx, &store.EventInsertManyParams{Events: []*dt.Event{mine}})
	}); err != nil {
		t.Fatal(err)
	}
	outside := listLater(d, 0)
	select {
	case <-waiting:
	case got := <-outside:
		t.Fatalf("a reader returned %d events, %v while the caller's transaction was open; want it to wait", len(got.evs), got.err)
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var evs []*dt.Event
	if err := d.InExternalTx(rctx, tx, func(ctx context.Context, x store.Executor) error {
		var err error
		evs, err = x.EventList(ctx, &store.EventListParams{})
		return err
	}); err != nil {
		t.Fatalf("reading its own events in the caller's transaction: %v", err)
	}
	if len(evs) != 1 || evs[0].ID != mine.ID {
		t.Fatalf("the caller's transaction read %d events, want its own", len(evs))
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := <-outside; got.err != nil || len(got.evs) != 1 {
		t.Fatalf("the reader outside got %d events, %v; want 1", len(got.evs), got.err)
	}
}

// A transaction that has written events reads without waiting for other
// writers (two such would wait for each other) and sees its own events; what
// it reads does not count as proven final for other readers, so a reader
// outside still waits for it.
func TestEventListInWritingTransaction(t *testing.T) {
	t.Parallel()
	d := open(t)
	ctx := context.Background()
	waiting := signalEventWaits(d)
	now := time.Date(2031, 1, 2, 3, 4, 5, 0, time.UTC)
	ev := func(id string) *dt.Event { return submittedEvent(id, now) }
	a, b, c := ev("a"), ev("b"), ev("c")
	sent := func(x store.Executor, ctx context.Context, e *dt.Event) error {
		if err := x.EventInsertMany(ctx, &store.EventInsertManyParams{Events: []*dt.Event{e}}); err != nil {
			return err
		}
		_, err := x.EventList(ctx, &store.EventListParams{AfterID: 1 << 62}) // sends the insert
		return err
	}
	release := make(chan struct{})
	bDone := holdWriter(t, d, b, release)

	aSent, aRead, cCommitted := make(chan struct{}), make(chan struct{}), make(chan struct{})
	aDone := make(chan error, 1)
	go func() {
		aDone <- d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
			if err := sent(x, ctx, a); err != nil {
				return err
			}
			close(aSent)
			<-cCommitted
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			evs, err := x.EventList(rctx, &store.EventListParams{})
			if err != nil {
				return fmt.Errorf("a writing transaction's read waited for another writer: %w", err)
			}
			var ids []int64
			for _, e := range evs {
				ids = append(ids, e.ID)
			}
			if want := []int64{a.ID, c.ID}; !slices.Equal(ids, want) {
				return fmt.Errorf("a writing transaction read IDs %v, want its own and the committed ones %v", ids, want)
			}
			close(aRead)
			<-release
			return nil
		})
	}()
	select {
	case <-aSent:
	case err := <-aDone:
		close(release)
		t.Fatal(err)
	}
	if err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		return x.EventInsertMany(ctx, &store.EventInsertManyParams{Events: []*dt.Event{c}})
	}); err != nil {
		t.Fatal(err)
	}
	close(cCommitted)
	select {
	case <-aRead:
	case err := <-aDone:
		close(release)
		t.Fatal(err)
	}

	res := listLater(d, 0)
	select {
	case <-waiting:
	case got := <-res:
		close(release)
		t.Fatalf("a reader returned %d events while writers of lower IDs were open; want it to wait", len(got.evs))
	}
	close(release)
	for _, done := range []<-chan error{aDone, bDone} {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	got := <-res
	if got.err != nil || len(got.evs) != 3 {
		t.Fatalf("EventList after the writers ended: %d events, %v; want 3", len(got.evs), got.err)
	}
}

// drover's own transactions run with sequential scans, JIT and parallel
// workers off, so tables without planner statistics are still read
// through their indexes, without compiling or starting workers for a
// look-up, also on a pool the caller made with PostgreSQL's defaults; a
// caller's transaction keeps its own settings.
func TestOwnTransactionsPlanSettings(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, _, _ := tracedDriver(t) // a pool made with pgx's defaults, as a caller's
	show := func(x store.Executor) string {
		tx, err := postgres.TxOf(x)
		if err != nil {
			t.Fatal(err)
		}
		var v string
		if err := tx.QueryRow(ctx, `SELECT current_setting('enable_seqscan') || ' ' || current_setting('jit') || ' '
 || current_setting('max_parallel_workers_per_gather')`).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	if err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		if v := show(x); v != "off off 0" {
			t.Errorf("enable_seqscan, jit, max_parallel_workers_per_gather in InTx = %q, want off off 0", v)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	tx := callersTx(t)
	if _, err := tx.Exec(ctx, `SELECT set_config('enable_seqscan', 'on', true), set_config('jit', 'on', true),
 set_config('max_parallel_workers_per_gather', '3', true)`); err != nil {
		t.Fatal(err)
	}
	if err := d.InExternalTx(ctx, tx, func(ctx context.Context, x store.Executor) error {
		if v := show(x); v != "on on 3" {
			t.Errorf("settings in the caller's transaction = %q, want its own on on 3", v)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// The plan settings and Options.LockTimeout are local to drover's
// transactions: the session (here the pool's only connection) keeps its
// own, so a transaction pooler's shared server connections are not
// changed. A lock held longer than LockTimeout fails the transaction,
// and a migration, with store.ErrLocked.
func TestLockTimeoutAndSettingsStayInTheTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := postgres.New(pool, postgres.Options{LockTimeout: -time.Second}); err == nil || !strings.Contains(err.Error(), "lock timeout -1s is negative") {
		t.Fatalf("New with a negative LockTimeout: %v", err)
	}
	schema := freshSchema(t)
	d, err := postgres.New(pool, postgres.Options{Schema: schema, LockTimeout: 150 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	session := func() string {
		t.Helper()
		var v string
		if err := pool.QueryRow(ctx, `SELECT current_setting('lock_timeout') || ' ' || current_setting('jit') || ' '
 || current_setting('enable_seqscan') || ' ' || current_setting('max_parallel_workers_per_gather')`).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	before := session()
	if err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		tx, err := postgres.TxOf(x)
		if err != nil {
			return err
		}
		var v string
		if err := tx.QueryRow(ctx, `SHOW lock_timeout`).Scan(&v); err != nil {
			return err
		}
		if v != "150ms" {
			t.Errorf("lock_timeout in InTx = %q, want 150ms", v)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if after := session(); after != before {
		t.Errorf("session settings after InTx = %q, want them unchanged: %q", after, before)
	}

	// Another session holds a task's row: a transaction that locks it gives
	// up after the timeout.
	insert(t, d, task("held", time.Now()))
	other, err := pgx.Connect(ctx, testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close(context.Background()) })
	otx, err := other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := otx.Exec(ctx, `SELECT 1 FROM `+pgx.Identifier{schema, "tasks"}.Sanitize()+` WHERE id = 'held' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	bounded, cancel := context.WithTimeout(ctx, 10*time.Second) // without the timeout, the wait would not end
	defer cancel()
	err = d.InTx(bounded, func(ctx context.Context, x store.Executor) error {
		_, err := x.TaskGet(ctx, &store.TaskGetParams{ID: "held"})
		return err
	})
	if !errors.Is(err, store.ErrLocked) || time.Since(start) > 10*time.Second {
		t.Errorf("InTx on a row held elsewhere: %v after %s; want ErrLocked after about 150ms", err, time.Since(start))
	}
	if err := otx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	// Another session holds the whole table (as a migration's ALTER TABLE
	// would): a fresh pool, whose statements pgx has yet to prepare
	// (preparing takes the table's lock too), gives up after the timeout,
	// in a transaction, in a read through Reader and in SchemaVersion.
	otx, err = other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := otx.Exec(ctx, `LOCK TABLE `+pgx.Identifier{schema, "tasks"}.Sanitize()+`, `+
		pgx.Identifier{schema, "drover_migrations"}.Sanitize()+` IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	fresh, err := pgxpool.New(ctx, testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fresh.Close)
	fd, err := postgres.New(fresh, postgres.Options{Schema: schema, LockTimeout: 150 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	err = fd.InTx(bounded, func(ctx context.Context, x store.Executor) error {
		_, err := x.TaskGet(ctx, &store.TaskGetParams{ID: "held"})
		return err
	})
	if !errors.Is(err, store.ErrLocked) {
		t.Errorf("InTx on a table locked elsewhere: %v, want ErrLocked", err)
	}
	if _, err := fd.Reader().TaskGet(bounded, &store.TaskGetParams{ID: "held"}); !errors.Is(err, store.ErrLocked) {
		t.Errorf("Reader().TaskGet on a table locked elsewhere: %v, want ErrLocked", err)
	}
	if _, _, err := fd.SchemaVersion(bounded); !errors.Is(err, store.ErrLocked) {
		t.Errorf("SchemaVersion with its table locked elsewhere: %v, want ErrLocked", err)
	}
	if err := otx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := fd.Reader().TaskGet(ctx, &store.TaskGetParams{ID: "held"}); err != nil {
		t.Errorf("Reader().TaskGet once the lock is gone: %v", err)
	}

	// Another migrator holds the schema's migration lock.
	otx, err = other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = otx.Rollback(context.Background()) }()
	if _, err := otx.Exec(ctx, `SELECT pg_advisory_xact_lock(`+strconv.FormatInt(postgres.MigrateLockKey(d), 10)+`)`); err != nil {
		t.Fatal(err)
	}
	if err := d.Migrate(bounded); !errors.Is(err, store.ErrLocked) {
		t.Errorf("Migrate while another migrator holds the lock: %v, want ErrLocked", err)
	}
}

// A claim tick is two round trips: the claim with the claimed tasks' steps
// (one statement, TaskClaimWithSteps with WriteLater), then the writes with
// the COMMIT.
func TestClaimWithStepsRoundTrips(t *testing.T) {
	t.Parallel()
	d, rt, _ := tracedDriver(t)
	ctx := context.Background()
	now := time.Date(2031, 1, 2, 3, 4, 5, 0, time.UTC)
	insert(t, d, task("a", now), task("b", now))
	if err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		return x.StepInsertMany(ctx, &store.StepInsertManyParams{Steps: []*dt.StepRecord{
			{TaskID: "a", Index: 0, Name: "s", Agent: "ag", Timeout: time.Second, ProcessState: dt.Pending, IdempotencyKey: "a/0/s", UpdatedAt: now},
			{TaskID: "b", Index: 0, Name: "s", Agent: "ag", Timeout: time.Second, ProcessState: dt.Pending, IdempotencyKey: "b/0/s", UpdatedAt: now},
		}})
	}); err != nil {
		t.Fatal(err)
	}
	before := rt.n.Load()
	err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		tasks, steps, err := store.TaskClaimWithSteps(ctx, x, &store.TaskClaimParams{Instance: "s1", Now: now, Limit: 10, WriteLater: true})
		if err != nil {
			return err
		}
		if len(tasks) != 2 || len(steps) != 2 {
			t.Errorf("claimed %d tasks with %d steps, want 2 and 2", len(tasks), len(steps))
		}
		if err := x.TaskUpdateMany(ctx, &store.TaskUpdateManyParams{Tasks: tasks}); err != nil {
			return err
		}
		return x.EventInsertMany(ctx, &store.EventInsertManyParams{Events: []*dt.Event{{TaskID: "a", StepIndex: 0, Type: dt.EventStepStarted, CreatedAt: now}}})
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := rt.n.Load() - before; got != 2 {
		t.Errorf("claim tick took %d round trips, want 2", got)
	}
	if got, err := d.Reader().TaskGet(ctx, &store.TaskGetParams{ID: "a"}); err != nil || got.LockedBy != "s1" {
		t.Errorf("task a after the tick: %+v, %v; want locked by s1", got, err)
	}
}
