package convoy_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/drover-run/drover/convoy"
	"github.com/drover-run/drover/internal/notifier"
	"github.com/drover-run/drover/internal/testutil"
	"github.com/drover-run/drover/store/postgres"
)

// While notifications arrive (PostgreSQL), a processor that holds no
// session and finds none runs no store transaction until something wakes
// it: a publish from another process, at once; a delayed message coming
// due, and a crashed holder's lock ending, at that time, by itself.
func TestIdleProcessorSleepsUntilWoken(t *testing.T) {
	t.Parallel()
	d := testutil.Postgres(t)
	ctx := ctxT(t)
	c := newClient(t, d, withPoll(20*time.Millisecond))
	other := newClient(t, secondDriver(t, d), withID("other"))
	for _, q := range []string{"q", "crash"} {
		if err := c.SetQueuePolicy(ctx, convoy.QueuePolicy{Name: q, MaxDeliveryCount: 10, Poison: convoy.PoisonSkip,
			DedupeWindow: time.Minute, LockDuration: time.Second}); err != nil {
			t.Fatal(err)
		}
	}
	got := make(chan string, 16)
	handler := func(_ context.Context, m *convoy.ReceivedMessage) error {
		got <- m.SessionID
		return nil
	}
	p := must[*convoy.Processor](t)(convoy.NewProcessor(c, "q", handler, convoy.ProcessorOptions{}))
	startProcessor(t, p)
	waitFor(t, "notifications", notifier.For(d).Live)

	// Idle: no rounds, where polling every 20 ms made about 50 a second.
	waitFor(t, "a first round", func() bool { return p.Stats().Rounds > 0 })
	time.Sleep(100 * time.Millisecond)
	before := p.Stats().Rounds
	time.Sleep(time.Second)
	if n := p.Stats().Rounds - before; n > 1 {
		t.Errorf("an idle processor made %d rounds in 1s while notifications arrive, want at most 1", n)
	}

	// A publish from another process: delivered at once.
	publish(t, other, "q", convoy.Message{SessionID: "now"})
	if s := recvWithin(t, "the message published now", 5*time.Second, got); s != "now" {
		t.Fatalf("got %q, want now", s)
	}
	// A delayed message: at its time, though nothing notifies then.
	due := time.Now().Add(1500 * time.Millisecond)
	publish(t, other, "q", convoy.Message{SessionID: "later", NotBefore: due})
	if s := recvWithin(t, "the delayed message", 10*time.Second, got); s != "later" || time.Now().Before(due) {
		t.Fatalf("got %q at %v, want later at or after %v", s, time.Now(), due)
	}

	// A holder that crashed (a lease never renewed nor released): its
	// session is taken over when the lock ends.
	publish(t, other, "crash", convoy.Message{SessionID: "held"})
	lockEnd := time.Now().Add(time.Second) // the lock ends after this
	if _, err := other.AcceptLease(ctx, "crash", "held", "", 0); err != nil {
		t.Fatal(err)
	}
	p2 := must[*convoy.Processor](t)(convoy.NewProcessor(c, "crash", handler, convoy.ProcessorOptions{}))
	startProcessor(t, p2)
	if s := recvWithin(t, "the crashed holder's session", 10*time.Second, got); s != "held" || time.Now().Before(lockEnd) {
		t.Fatalf("got %q at %v, want held after its lock ended at %v", s, time.Now(), lockEnd)
	}
}

// While notifications arrive, the expiry of dedupe entries that a
// processor's client runs (as the lease holder) runs again only after its
// idle interval when it found nothing, not every second. A statement
// trigger counts its DELETEs, which run even when they delete nothing.
func TestIdleDedupeExpirySleeps(t *testing.T) {
	t.Parallel()
	d := testutil.Postgres(t)
	ctx := ctxT(t)
	exec := func(sql string) {
		t.Helper()
		if _, err := d.Pool().Exec(ctx, strings.ReplaceAll(sql, "{s}", pgx.Identifier{d.Schema()}.Sanitize())); err != nil {
			t.Fatal(err)
		}
	}
	exec(`CREATE TABLE {s}.dedupe_deletes (n int)`)
	exec(`CREATE FUNCTION {s}.count_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN INSERT INTO ` + pgx.Identifier{d.Schema()}.Sanitize() + `.dedupe_deletes VALUES (1); RETURN NULL; END $$`)
	exec(`CREATE TRIGGER count_delete AFTER DELETE ON {s}.queue_dedupe FOR EACH STATEMENT EXECUTE FUNCTION {s}.count_delete()`)
	deletes := func() int {
		var n int
		if err := d.Pool().QueryRow(ctx, strings.ReplaceAll(`SELECT count(*) FROM {s}.dedupe_deletes`, "{s}", pgx.Identifier{d.Schema()}.Sanitize())).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// Notifications arrive before the processor starts, so that even the
	// expiry's first run relies on them.
	defer notifier.For(d).Subscribe(func(notifier.Topic) {})()
	waitFor(t, "notifications", notifier.For(d).Live)
	c := newClient(t, d)
	p := must[*convoy.Processor](t)(convoy.NewProcessor(c, "q", func(context.Context, *convoy.ReceivedMessage) error { return nil }, convoy.ProcessorOptions{}))
	startProcessor(t, p)
	waitFor(t, "the first expiry", func() bool { return deletes() > 0 })
	before := deletes()
	time.Sleep(4 * time.Second)
	if n := deletes() - before; n > 0 {
		t.Errorf("the idle dedupe expiry ran %d times in 4s while notifications arrive, want 0", n)
	}
}

// While notifications arrive, AcceptLease waiting for the next session
// of an idle queue does not look at the store every PollInterval (the
// index scans of queue_sessions, read from pg_stat_user_tables, stay
// flat); a publish from another process ends the wait at once, and a
// delayed message at its time.
func TestWaitingAcceptSleepsUntilWoken(t *testing.T) {
	t.Parallel()
	d, c, other := notifiedClients(t)
	ctx := ctxT(t)
	scans := func() int64 { return sessionScans(t, d) }
	accepted := make(chan string, 1)
	accept := func() {
		l, err := c.AcceptLease(ctx, "q", "", "", 30*time.Second)
		switch {
		case err != nil:
			t.Error(err)
			accepted <- ""
		case l == nil:
			accepted <- "none"
		default:
			accepted <- l.SessionID
		}
	}
	go accept()
	// A backend reports its statistics at a transaction's end at most
	// once a second (else after 10 s idle): a few of the wait's first
	// reads may land in the window.
	time.Sleep(1500 * time.Millisecond)
	before := scans()
	time.Sleep(2 * time.Second)
	if n := scans() - before; n > 30 {
		t.Errorf("a waiting accept scanned queue_sessions %d times in 2s while notifications arrive, want a few, with statistics that come late (every 20 ms: about 100)", n)
	}
	publish(t, other, "q", convoy.Message{SessionID: "now"})
	if s := recvWithin(t, "the accept after the publish", 5*time.Second, accepted); s != "now" {
		t.Fatalf("accepted %q, want now", s)
	}
	due := time.Now().Add(time.Second)
	publish(t, other, "q", convoy.Message{SessionID: "later", NotBefore: due})
	go accept()
	if s := recvWithin(t, "the accept of the delayed session", 10*time.Second, accepted); s != "later" || time.Now().Before(due) {
		t.Fatalf("accepted %q at %v, want later at or after %v", s, time.Now(), due)
	}
}

// While notifications arrive, a wait for the next message of a held
// session (LeaseReceive, SessionReceiver.Receive) does not try a receive
// every PollInterval; a publish to the session from another process ends
// the wait at once, and a delayed message at its time.
func TestWaitingReceiveSleepsUntilWoken(t *testing.T) {
	t.Parallel()
	d, c, other := notifiedClients(t)
	ctx := ctxT(t)
	if err := c.SetQueuePolicy(ctx, convoy.QueuePolicy{Name: "q", MaxDeliveryCount: 10, Poison: convoy.PoisonSkip,
		DedupeWindow: time.Minute, LockDuration: time.Minute}); err != nil {
		t.Fatal(err)
	}
	scans := func() int64 { return sessionScans(t, d) }
	for _, kind := range []string{"lease", "receiver"} {
		session := kind
		publish(t, c, "q", convoy.Message{SessionID: session, Body: []byte("1")})
		// receive waits for the session's next message and completes it.
		var receive func() string
		switch kind {
		case "lease":
			l, err := c.AcceptLease(ctx, "q", session, "", 0)
			if err != nil {
				t.Fatal(err)
			}
			receive = func() string {
				m, err := c.LeaseReceive(ctx, l.Ref(), 30*time.Second)
				if err != nil || m == nil {
					t.Errorf("%s: receive %v, %v", kind, m, err)
					return ""
				}
				if err := c.LeaseComplete(ctx, l.Ref(), m.Seq); err != nil {
					t.Error(err)
				}
				return string(m.Body)
			}
		case "receiver":
			r := must[*convoy.SessionReceiver](t)(c.AcceptSession(ctx, "q", session))
			defer r.Close(context.Background())
			receive = func() string {
				m, err := r.Receive(ctx)
				if err != nil {
					t.Errorf("%s: receive %v", kind, err)
					return ""
				}
				if err := r.Complete(ctx, m, nil); err != nil {
					t.Error(err)
				}
				return string(m.Body)
			}
		}
		if b := receive(); b != "1" {
			t.Fatalf("%s: first message %q", kind, b)
		}
		got := make(chan string, 1)
		go func() { got <- receive() }()
		// As in TestWaitingAcceptSleepsUntilWoken: statistics come late.
		time.Sleep(1500 * time.Millisecond)
		before := scans()
		time.Sleep(2 * time.Second)
		if n := scans() - before; n > 30 {
			t.Errorf("%s: a waiting receive scanned queue_sessions %d times in 2s while notifications arrive, want a few, with statistics that come late (every 20 ms: 100 or more)", kind, n)
		}
		publish(t, other, "q", convoy.Message{SessionID: session, Body: []byte("2")})
		if b := recvWithin(t, "the message published now", 5*time.Second, got); b != "2" {
			t.Fatalf("%s: received %q, want 2", kind, b)
		}
		due := time.Now().Add(time.Second)
		publish(t, other, "q", convoy.Message{SessionID: session, Body: []byte("3"), NotBefore: due})
		go func() { got <- receive() }()
		if b := recvWithin(t, "the delayed message", 10*time.Second, got); b != "3" || time.Now().Before(due) {
			t.Fatalf("%s: received %q at %v, want 3 at or after %v", kind, b, time.Now(), due)
		}
	}
}

// A processor that gives up a session whose head is delayed (abandoned
// after a failure) notifies: a consumer asleep until that session's lock
// would end must look again, since the head comes due sooner.
func TestReleaseOfDelayedSessionNotifies(t *testing.T) {
	t.Parallel()
	d := testutil.Postgres(t)
	var (
		mu     sync.Mutex
		topics int
	)
	defer notifier.For(secondDriver(t, d)).Subscribe(func(tp notifier.Topic) {
		if tp.Kind == notifier.Queue && tp.Name == "q" {
			mu.Lock()
			topics++
			mu.Unlock()
		}
	})()
	heard := func() int {
		mu.Lock()
		defer mu.Unlock()
		return topics
	}
	c := newClient(t, d)
	p := must[*convoy.Processor](t)(convoy.NewProcessor(c, "q", func(context.Context, *convoy.ReceivedMessage) error {
		return errors.New("not yet")
	}, convoy.ProcessorOptions{IdleTimeout: 300 * time.Millisecond, AbandonDelay: time.Hour, MaxAbandonDelay: time.Hour}))
	startProcessor(t, p)
	publish(t, c, "q", convoy.Message{SessionID: "a"})
	waitFor(t, "the abandon", func() bool { return p.Stats().Abandoned > 0 })
	before := heard()
	waitFor(t, "the release", func() bool { return p.Stats().Released > 0 })
	waitForWithin(t, "a notification of the release", 5*time.Second, func() bool { return heard() > before })
}

// notifiedClients opens a PostgreSQL store whose notifications arrive
// before anything starts, a client polling every 20 ms on it, and another
// client on a second driver, as another process.
func notifiedClients(t *testing.T) (*postgres.Driver, *convoy.Client, *convoy.Client) {
	t.Helper()
	d := testutil.Postgres(t)
	t.Cleanup(notifier.For(d).Subscribe(func(notifier.Topic) {}))
	waitFor(t, "notifications", notifier.For(d).Live)
	return d, newClient(t, d, withPoll(20*time.Millisecond)), newClient(t, secondDriver(t, d), withID("other"))
}

// sessionScans is how many index scans of queue_sessions the server has
// counted so far (pg_stat_user_tables: each backend reports at the end of
// a transaction, at most once a second, else after 10 s idle).
func sessionScans(t *testing.T, d *postgres.Driver) int64 {
	t.Helper()
	var n int64
	err := d.Pool().QueryRow(context.Background(), `SELECT pg_stat_clear_snapshot(), coalesce(idx_scan, 0) FROM pg_stat_user_tables WHERE relid = $1::regclass`,
		pgx.Identifier{d.Schema(), "queue_sessions"}.Sanitize()).Scan(nil, &n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
