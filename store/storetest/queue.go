package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/store"
)

// Session queues (store.QueueExecutor): the Sequential Convoy primitives.

func queueCases() []testCase {
	return []testCase{
		{"PublishAssignsSeqs", testQueuePublishSeqs},
		{"PublishBatchManySessions", testQueuePublishBatch},
		{"PublishDedupe", testQueueDedupe},
		{"PublishEndOfSequence", testQueueEndOfSequence},
		{"QueuePolicy", testQueuePolicy},
		{"AcceptNext", testQueueAcceptNext},
		{"AcceptNextTakesOverExpiredLock", testQueueAcceptTakeover},
		{"AcceptNextAfterChangesWhileHeld", testQueueAcceptAfterHeld},
		{"AcceptNamed", testQueueAcceptNamed},
		{"SessionAvailable", testQueueSessionAvailable},
		{"SessionNextReady", testQueueSessionNextReady},
		{"RenewRelease", testQueueRenewRelease},
		{"ReceiveHeadOnly", testQueueReceive},
		{"SettleComplete", testQueueSettleComplete},
		{"SettleAbandon", testQueueSettleAbandon},
		{"SettleDeadLetter", testQueueSettleDeadLetter},
		{"SettleLockLost", testQueueSettleLockLost},
		{"SettleNotHead", testQueueSettleNotHead},
		{"SameSessionTwiceInOneCall", testQueueSameSessionTwice},
		{"SettleReceiveNext", testQueueSettleReceive},
		{"SettleReceiveAbandonDeadLetter", testQueueSettleReceiveAbandonDeadLetter},
		{"SettleReceiveRejected", testQueueSettleReceiveRejected},
		{"SettleReceiveSameSessionTwice", testQueueSettleReceiveSameSessionTwice},
		{"SettleReceiveAfterOpenPublisher", testQueueSettleReceiveOpenPublisher},
		{"SessionState", testQueueSessionState},
		{"SessionList", testQueueSessionList},
		{"Depth", testQueueDepth},
		{"Peek", testQueuePeek},
		{"DeadLetterListResubmitDiscard", testQueueDeadLetters},
		{"HeadAfterSkipsAndResubmitBelow", testQueueHeadAfterSkipsAndResubmit},
		{"DedupeDeleteExpired", testQueueDedupeDeleteExpired},
		{"ConcurrentPublishersOneSession", testQueueConcurrentPublish},
		{"ConcurrentDuplicateMessageIDs", testQueueConcurrentDuplicates},
		{"ConcurrentPublishersNewSessions", testQueueConcurrentNewSessions},
		{"OpenPublisherBlocksNoOtherSession", testQueueOpenPublisher},
	}
}

// QueueDepth counts the sessions with messages to deliver (not blocked,
// not emptied) and their pending messages, up to the limit.
func testQueueDepth(t *testing.T, d store.Driver) {
	publishAt(t, d, base, pub("q", "a", "1"), pub("q", "a", "2"), pub("q", "b", "1"),
		pub("q", "c", "1"), pub("q", "c", "2"), pub("q", "c", "3"), pub("q", "e", "1"), pub("q2", "x", "1"))
	now := at(time.Second)
	c := acceptNamed(t, d, "q", "c", "h", now)
	e := acceptNamed(t, d, "q", "e", "h", now)
	receiveAt(t, d, now, c, e)
	wantErrs(t, "settle", settleAt(t, d, now, deadLetter(c, 1, "bad", true), complete(e, 1)), nil, nil)
	wantErrs(t, "release", releaseAt(t, d, now, c, e), nil, nil)
	depthAt := func(queue string, limit int, now time.Time) store.QueueDepth {
		t.Helper()
		got, err := d.Reader().QueueDepth(context.Background(), &store.QueueDepthParams{Queue: queue, Limit: limit, Now: now})
		if err != nil {
			t.Fatalf("QueueDepth(%s, %d): %v", queue, limit, err)
		}
		return got
	}
	depth := func(queue string, limit int) store.QueueDepth {
		t.Helper()
		got := depthAt(queue, limit, now)
		if got.Sessions > 0 && !got.OldestWaiting.Equal(base) {
			t.Errorf("QueueDepth(%s, %d).OldestWaiting = %v, want %v (published then, nobody holds it)", queue, limit, got.OldestWaiting, base)
		}
		got.OldestWaiting = time.Time{}
		return got
	}
	if got := depth("q", 10); got != (store.QueueDepth{Sessions: 2, Messages: 3}) {
		t.Errorf("QueueDepth(q, 10) = %+v, want a and b: 2 sessions, 3 messages (c blocked, e emptied)", got)
	}
	if got := depth("q", 1); got.Sessions != 1 || !got.Capped || got.Messages != 1 && got.Messages != 2 {
		t.Errorf("QueueDepth(q, 1) = %+v, want 1 session of 1 or 2 messages, capped", got)
	}
	if got := depth("q2", 1); got != (store.QueueDepth{Sessions: 1, Messages: 1}) {
		t.Errorf("QueueDepth(q2, 1) = %+v, want 1 session of 1 message, not capped", got)
	}
	if got := depth("none", 10); got != (store.QueueDepth{}) {
		t.Errorf("QueueDepth(none) = %+v", got)
	}
	// Nothing waits before its head is ready, nor while a consumer holds
	// its session.
	if got := depthAt("q", 10, base.Add(-time.Second)); got.Sessions != 2 || !got.OldestWaiting.IsZero() {
		t.Errorf("QueueDepth(q) before the publish = %+v, want 2 sessions, none waiting", got)
	}
	acceptNamed(t, d, "q", "a", "h", now)
	acceptNamed(t, d, "q", "b", "h", now)
	if got := depthAt("q", 10, now); got.Sessions != 2 || !got.OldestWaiting.IsZero() {
		t.Errorf("QueueDepth(q) with a and b held = %+v, want 2 sessions, none waiting", got)
	}
	if got := depthAt("q", 10, now.Add(time.Hour)); !got.OldestWaiting.Equal(base) {
		t.Errorf("QueueDepth(q) once the locks expired = %+v, want waiting since %v", got, base)
	}
}

// ---- helpers ----

func pub(queue, session, body string) store.PublishMessage {
	return store.PublishMessage{Queue: queue, SessionID: session, Body: []byte(body)}
}

func withID(m store.PublishMessage, id string) store.PublishMessage { m.MessageID = id; return m }

func eos(m store.PublishMessage) store.PublishMessage { m.EndOfSequence = true; return m }

func availAt(m store.PublishMessage, t time.Time) store.PublishMessage { m.AvailableAt = t; return m }

func publishAt(t *testing.T, d store.Driver, now time.Time, msgs ...store.PublishMessage) []store.PublishResult {
	t.Helper()
	var res []store.PublishResult
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		var err error
		res, err = x.MessagePublishMany(ctx, &store.MessagePublishManyParams{Messages: msgs, Now: now})
		return err
	})
	if len(res) != len(msgs) {
		t.Fatalf("MessagePublishMany returned %d results for %d messages", len(res), len(msgs))
	}
	return res
}

// wantPublished checks publish results: a positive number is a stored
// message's seq, a negative one a duplicate of that seq.
func wantPublished(t *testing.T, what string, got []store.PublishResult, want ...int64) {
	t.Helper()
	var g []int64
	for _, r := range got {
		if r.Duplicate {
			g = append(g, -r.Seq)
		} else {
			g = append(g, r.Seq)
		}
	}
	if fmt.Sprint(g) != fmt.Sprint(want) {
		t.Errorf("%s: published %v, want %v (negative: duplicate of)", what, g, want)
	}
}

// acceptAt runs SessionAccept in a transaction. An accept of the next
// available sessions first asks SessionAvailable, which must agree with
// what the accept takes.
func acceptAt(t *testing.T, d store.Driver, p store.SessionAcceptParams) []*dt.Session {
	t.Helper()
	avail := false
	if p.SessionID == "" {
		var err error
		if avail, err = d.Reader().SessionAvailable(context.Background(), &store.SessionAvailableParams{Queue: p.Queue, Now: p.Now}); err != nil {
			t.Fatalf("SessionAvailable(%s): %v", p.Queue, err)
		}
	}
	var got []*dt.Session
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		var err error
		got, err = x.SessionAccept(ctx, &p)
		return err
	})
	if p.SessionID == "" && avail != (len(got) > 0) {
		t.Errorf("SessionAvailable(%s, %v) = %v, but the accept took %v", p.Queue, p.Now, avail, sessionIDs(got))
	}
	return got
}

// acceptNamed accepts one session by name and returns its ref.
func acceptNamed(t *testing.T, d store.Driver, queue, session, holder string, now time.Time) store.SessionRef {
	t.Helper()
	got := acceptAt(t, d, store.SessionAcceptParams{Queue: queue, SessionID: session, Holder: holder, Now: now})
	if len(got) != 1 {
		t.Fatalf("accept %s/%s: %d sessions", queue, session, len(got))
	}
	return sref(got[0])
}

func sref(s *dt.Session) store.SessionRef {
	return store.SessionRef{Queue: s.Queue, SessionID: s.ID, Token: s.LockToken}
}

func sessionIDs(ss []*dt.Session) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.Queue + "/" + s.ID
	}
	return out
}

func receiveAt(t *testing.T, d store.Driver, now time.Time, refs ...store.SessionRef) ([]*dt.Message, []error) {
	t.Helper()
	var (
		msgs []*dt.Message
		errs []error
	)
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		var err error
		msgs, errs, err = x.MessageReceiveMany(ctx, &store.MessageReceiveManyParams{Refs: refs, Now: now})
		return err
	})
	if len(msgs) != len(refs) || len(errs) != len(refs) {
		t.Fatalf("MessageReceiveMany: %d messages and %d errors for %d refs", len(msgs), len(errs), len(refs))
	}
	return msgs, errs
}

// receiveOne receives the head of one held session and fails if there is none.
func receiveOne(t *testing.T, d store.Driver, now time.Time, ref store.SessionRef) *dt.Message {
	t.Helper()
	msgs, errs := receiveAt(t, d, now, ref)
	if errs[0] != nil || msgs[0] == nil {
		t.Fatalf("receive %s/%s: message %v, err %v", ref.Queue, ref.SessionID, msgs[0], errs[0])
	}
	return msgs[0]
}

func settleAt(t *testing.T, d store.Driver, now time.Time, settles ...store.MessageSettle) []error {
	t.Helper()
	var errs []error
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		var err error
		errs, err = x.MessageSettleMany(ctx, &store.MessageSettleManyParams{Settles: settles, Now: now})
		return err
	})
	if len(errs) != len(settles) {
		t.Fatalf("MessageSettleMany: %d errors for %d settles", len(errs), len(settles))
	}
	return errs
}

func complete(ref store.SessionRef, seq int64) store.MessageSettle {
	return store.MessageSettle{Ref: ref, Seq: seq, Action: store.SettleComplete}
}

func abandon(ref store.SessionRef, seq int64, until time.Time) store.MessageSettle {
	return store.MessageSettle{Ref: ref, Seq: seq, Action: store.SettleAbandon, AvailableAt: until}
}

func deadLetter(ref store.SessionRef, seq int64, reason string, block bool) store.MessageSettle {
	return store.MessageSettle{Ref: ref, Seq: seq, Action: store.SettleDeadLetter, Reason: reason, Block: block}
}

// wantErrs checks per-item errors: nil must be nil, others errors.Is.
func wantErrs(t *testing.T, what string, got []error, want ...error) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d results, want %d", what, len(got), len(want))
	}
	for i := range got {
		if (want[i] == nil) != (got[i] == nil) || (want[i] != nil && !errors.Is(got[i], want[i])) {
			t.Errorf("%s: item %d: err = %v, want %v", what, i, got[i], want[i])
		}
	}
}

func getSession(t *testing.T, d store.Driver, queue, id string) *dt.Session {
	t.Helper()
	s, err := d.Reader().SessionGet(context.Background(), &store.SessionGetParams{Queue: queue, SessionID: id})
	if err != nil {
		t.Fatalf("SessionGet(%s/%s): %v", queue, id, err)
	}
	return s
}

// checkSession checks a session's bookkeeping.
func checkSession(t *testing.T, what string, s *dt.Session, pending int, readyAt *time.Time, blocked bool) {
	t.Helper()
	ready := func(p *time.Time) string {
		if p == nil {
			return "nil"
		}
		return p.UTC().Format(time.RFC3339Nano)
	}
	if s.Pending != pending || ready(s.ReadyAt) != ready(readyAt) || s.Blocked != blocked {
		t.Errorf("%s: session %s/%s pending %d, ready at %s, blocked %v; want %d, %s, %v",
			what, s.Queue, s.ID, s.Pending, ready(s.ReadyAt), s.Blocked, pending, ready(readyAt), blocked)
	}
}

func peekAll(t *testing.T, d store.Driver, queue, id string) []*dt.Message {
	t.Helper()
	got, err := d.Reader().MessagePeek(context.Background(), &store.MessagePeekParams{Queue: queue, SessionID: id})
	if err != nil {
		t.Fatalf("MessagePeek(%s/%s): %v", queue, id, err)
	}
	return got
}

func msgSeqs(ms []*dt.Message) []int64 {
	out := make([]int64, len(ms))
	for i, m := range ms {
		out[i] = m.Seq
	}
	return out
}

func wantSeqs(t *testing.T, what string, ms []*dt.Message, want ...int64) {
	t.Helper()
	if got := msgSeqs(ms); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%s: seqs %v, want %v", what, got, want)
	}
}

// ---- publish ----

func testQueuePublishSeqs(t *testing.T, d store.Driver) {
	res := publishAt(t, d, base, pub("q", "a", "a1"), pub("q", "a", "a2"), pub("q", "a", "a3"))
	wantPublished(t, "first call", res, 1, 2, 3)
	res = publishAt(t, d, at(time.Second), pub("q", "b", "b1"))
	wantPublished(t, "other session", res, 1)
	res = publishAt(t, d, at(2*time.Second), withID(pub("q", "a", "a4"), "id-4"), pub("q", "a", "a5"))
	wantPublished(t, "second call", res, 4, 5)

	checkEqual(t, "session a", getSession(t, d, "q", "a"), &dt.Session{Queue: "q", ID: "a", NextSeq: 5, Pending: 5,
		ReadyAt: tp(base), CreatedAt: base, UpdatedAt: at(2 * time.Second)})
	checkEqual(t, "session b", getSession(t, d, "q", "b"), &dt.Session{Queue: "q", ID: "b", NextSeq: 1, Pending: 1,
		ReadyAt: tp(at(time.Second)), CreatedAt: at(time.Second), UpdatedAt: at(time.Second)})

	q, err := d.Reader().QueueGet(context.Background(), &store.QueueGetParams{Name: "q"})
	if err != nil {
		t.Fatalf("QueueGet: %v", err)
	}
	checkEqual(t, "queue created by the first publish", q, &dt.Queue{Name: "q", MaxDeliveryCount: dt.DefaultMaxDeliveryCount,
		PoisonPolicy: dt.PoisonBlock, DedupeWindow: dt.DefaultDedupeWindow, LockDuration: dt.DefaultLockDuration,
		CreatedAt: base, UpdatedAt: base})

	msgs := peekAll(t, d, "q", "a")
	wantSeqs(t, "peek a", msgs, 1, 2, 3, 4, 5)
	for i, m := range msgs {
		when := base
		if i >= 3 {
			when = at(2 * time.Second)
		}
		want := &dt.Message{Queue: "q", SessionID: "a", Seq: int64(i + 1), Body: []byte(fmt.Sprintf("a%d", i+1)),
			AvailableAt: when, EnqueuedAt: when}
		if i == 3 {
			want.MessageID = "id-4"
		}
		checkEqual(t, fmt.Sprintf("message a/%d", i+1), m, want)
	}
	wantSeqs(t, "peek b", peekAll(t, d, "q", "b"), 1)
}

func testQueuePublishBatch(t *testing.T, d store.Driver) {
	res := publishAt(t, d, base,
		pub("q1", "a", "1"), pub("q1", "b", "2"), pub("q1", "a", "3"), pub("q2", "a", "4"), pub("q1", "b", "5"),
		pub("q1", "a", "6"), availAt(pub("q1", "c", "7"), at(time.Minute)), pub("q1", "c", "8"), pub("q1", "e", ""))
	wantPublished(t, "batch", res, 1, 1, 2, 1, 2, 3, 1, 2, 1)

	checkSession(t, "q1/a", getSession(t, d, "q1", "a"), 3, tp(base), false)
	checkSession(t, "q1/b", getSession(t, d, "q1", "b"), 2, tp(base), false)
	// The head decides when a session is ready, whatever follows it.
	checkSession(t, "q1/c", getSession(t, d, "q1", "c"), 2, tp(at(time.Minute)), false)
	checkSession(t, "q2/a", getSession(t, d, "q2", "a"), 1, tp(base), false)
	checkSession(t, "q1/e", getSession(t, d, "q1", "e"), 1, tp(base), false)

	bodies := func(ms []*dt.Message) string {
		var parts []string
		for _, m := range ms {
			parts = append(parts, fmt.Sprintf("%d:%s", m.Seq, m.Body))
		}
		return strings.Join(parts, " ")
	}
	for _, c := range []struct{ q, s, want string }{
		{"q1", "a", "1:1 2:3 3:6"}, {"q1", "b", "1:2 2:5"}, {"q1", "c", "1:7 2:8"}, {"q2", "a", "1:4"}, {"q1", "e", "1:"},
	} {
		if got := bodies(peekAll(t, d, c.q, c.s)); got != c.want {
			t.Errorf("%s/%s holds %q, want %q", c.q, c.s, got, c.want)
		}
	}
	c := peekAll(t, d, "q1", "c")
	if !c[0].AvailableAt.Equal(at(time.Minute)) || !c[1].AvailableAt.Equal(base) {
		t.Errorf("available at: %s, %s; want the given time and the publish time", c[0].AvailableAt, c[1].AvailableAt)
	}

	res = publishAt(t, d, at(time.Second), pub("q1", "c", "9"), pub("q2", "a", "10"), pub("q1", "a", "11"))
	wantPublished(t, "second batch", res, 3, 2, 4)
	checkSession(t, "q1/c after", getSession(t, d, "q1", "c"), 3, tp(at(time.Minute)), false)
	checkSession(t, "q1/a after", getSession(t, d, "q1", "a"), 4, tp(base), false)

	qs, err := d.Reader().QueueList(context.Background(), &store.QueueListParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) != 2 || qs[0].Name != "q1" || qs[1].Name != "q2" {
		t.Errorf("QueueList = %v, want q1, q2", qs)
	}
	// An empty call does nothing.
	publishAt(t, d, at(time.Second))
}

func testQueueDedupe(t *testing.T, d store.Driver) {
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		return x.QueuePut(ctx, &store.QueuePutParams{Queue: &dt.Queue{Name: "q", MaxDeliveryCount: 5, PoisonPolicy: dt.PoisonBlock,
			DedupeWindow: time.Minute, LockDuration: time.Minute, CreatedAt: base, UpdatedAt: base}})
	})
	wantPublished(t, "original", publishAt(t, d, base, withID(pub("q", "a", "x"), "m1")), 1)
	wantPublished(t, "retry within the window", publishAt(t, d, at(30*time.Second), withID(pub("q", "a", "x"), "m1")), -1)
	// A message ID is unique in the queue, whatever the session.
	wantPublished(t, "same ID, other session", publishAt(t, d, at(30*time.Second), withID(pub("q", "b", "x"), "m1")), -1)
	if _, err := d.Reader().SessionGet(context.Background(), &store.SessionGetParams{Queue: "q", SessionID: "b"}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a duplicate created its session: err = %v", err)
	}
	checkSession(t, "a after duplicates", getSession(t, d, "q", "a"), 1, tp(base), false)
	if s := getSession(t, d, "q", "a"); s.NextSeq != 1 {
		t.Errorf("a duplicate took a seq: NextSeq %d", s.NextSeq)
	}

	// In one call: a known ID, a new one twice, and one without ID.
	res := publishAt(t, d, at(40*time.Second), withID(pub("q", "a", "x"), "m1"), withID(pub("q", "a", "y"), "m2"),
		withID(pub("q", "a", "y"), "m2"), pub("q", "a", "z"), withID(pub("q", "a", "w"), "m3"))
	wantPublished(t, "mixed call", res, -1, 2, -2, 3, 4)
	wantSeqs(t, "stored", peekAll(t, d, "q", "a"), 1, 2, 3, 4)

	// Completing the original does not forget its ID.
	ref := acceptNamed(t, d, "q", "a", "h", at(41*time.Second))
	wantErrs(t, "complete 1", settleAt(t, d, at(41*time.Second), complete(ref, 1)), nil)
	wantPublished(t, "after completion", publishAt(t, d, at(42*time.Second), withID(pub("q", "a", "x"), "m1")), -1)

	// The window is counted from the original's publish: at its end the ID
	// is free again, and taken by the new message.
	wantPublished(t, "at the window's end", publishAt(t, d, at(time.Minute), withID(pub("q", "a", "x2"), "m1")), 5)
	wantPublished(t, "duplicate of the new one", publishAt(t, d, at(90*time.Second), withID(pub("q", "b", "x3"), "m1")), -5)

	// A queue without a window does not de-duplicate.
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		return x.QueuePut(ctx, &store.QueuePutParams{Queue: &dt.Queue{Name: "nodedupe", MaxDeliveryCount: 5, PoisonPolicy: dt.PoisonSkip,
			LockDuration: time.Minute, CreatedAt: base, UpdatedAt: base}})
	})
	wantPublished(t, "no window", publishAt(t, d, base, withID(pub("nodedupe", "a", "1"), "m1"),
		withID(pub("nodedupe", "a", "2"), "m1")), 1, 2)
	wantPublished(t, "no window, later", publishAt(t, d, at(time.Second), withID(pub("nodedupe", "a", "3"), "m1")), 3)

	// A queue created by the publish gets the default window.
	wantPublished(t, "new queue", publishAt(t, d, base, withID(pub("fresh", "a", "1"), "k")), 1)
	wantPublished(t, "new queue retry", publishAt(t, d, at(9*time.Minute), withID(pub("fresh", "a", "1"), "k")), -1)
}

func testQueueEndOfSequence(t *testing.T, d store.Driver) {
	ctx := context.Background()
	res := publishAt(t, d, base, pub("q", "a", "1"), withID(eos(pub("q", "a", "2")), "last"))
	wantPublished(t, "with end of sequence", res, 1, 2)
	a := getSession(t, d, "q", "a")
	if !a.Closed || a.NextSeq != 2 || a.Pending != 2 {
		t.Fatalf("session after end of sequence: %+v", a)
	}
	if m := peekAll(t, d, "q", "a"); !m[1].EndOfSequence || m[0].EndOfSequence {
		t.Errorf("EndOfSequence flags: %v, %v", m[0].EndOfSequence, m[1].EndOfSequence)
	}
	// Retrying the end-of-sequence message is a duplicate, not an error.
	wantPublished(t, "retried end", publishAt(t, d, at(time.Second), withID(eos(pub("q", "a", "2")), "last")), -2)

	// A publish to the closed session fails as a whole and writes nothing:
	// the store call leaves nothing behind even when the transaction
	// commits.
	rejected := [][]store.PublishMessage{
		{pub("q", "a", "3")},
		{pub("q", "b", "b1"), pub("new", "n", "n1"), withID(pub("q", "c", "c1"), "c-id"), pub("q", "a", "3")},
		{pub("q", "c", "c1"), eos(pub("q", "c", "c2")), pub("q", "c", "c3")}, // after an end in the same call
	}
	for i, msgs := range rejected {
		err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
			_, err := x.MessagePublishMany(ctx, &store.MessagePublishManyParams{Messages: msgs, Now: at(time.Second)})
			wantErrIs(t, err, store.ErrSessionClosed, fmt.Sprintf("rejected publish %d", i))
			return nil
		})
		if err != nil {
			t.Fatalf("InTx: %v", err)
		}
	}
	r := d.Reader()
	for _, s := range [][2]string{{"q", "b"}, {"q", "c"}, {"new", "n"}} {
		if _, err := r.SessionGet(ctx, &store.SessionGetParams{Queue: s[0], SessionID: s[1]}); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("session %s/%s after a rejected publish: err = %v, want ErrNotFound", s[0], s[1], err)
		}
	}
	if _, err := r.QueueGet(ctx, &store.QueueGetParams{Name: "new"}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("queue created by a rejected publish: err = %v", err)
	}
	if a := getSession(t, d, "q", "a"); a.NextSeq != 2 || a.Pending != 2 || !a.Closed {
		t.Errorf("closed session changed by a rejected publish: %+v", a)
	}
	// The ID of a rejected message was not taken.
	wantPublished(t, "ID of a rejected message", publishAt(t, d, at(2*time.Second), withID(pub("q", "c", "c1"), "c-id")), 1)

	// A session whose first message ends it.
	wantPublished(t, "single-message session", publishAt(t, d, base, eos(pub("q", "d", "only"))), 1)
	if !getSession(t, d, "q", "d").Closed {
		t.Error("session d not closed")
	}
	// Its messages are still delivered.
	ref := acceptNamed(t, d, "q", "a", "h", at(time.Second))
	if m := receiveOne(t, d, at(time.Second), ref); m.Seq != 1 {
		t.Errorf("closed session delivers seq %d", m.Seq)
	}
}

func testQueuePolicy(t *testing.T, d store.Driver) {
	ctx := context.Background()
	_, err := d.Reader().QueueGet(ctx, &store.QueueGetParams{Name: "q"})
	wantErrIs(t, err, store.ErrNotFound, "QueueGet before any publish")
	q := &dt.Queue{Name: "q", MaxDeliveryCount: 3, PoisonPolicy: dt.PoisonSkip, DedupeWindow: 90 * time.Second,
		LockDuration: 5*time.Second + 7*time.Microsecond, CreatedAt: base, UpdatedAt: base}
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		return x.QueuePut(ctx, &store.QueuePutParams{Queue: q})
	})
	got, err := d.Reader().QueueGet(ctx, &store.QueueGetParams{Name: "q"})
	if err != nil {
		t.Fatal(err)
	}
	checkEqual(t, "queue", got, q)

	// Publishing keeps the policy.
	publishAt(t, d, at(time.Second), pub("q", "a", "1"), pub("q", "b", "1"))
	got, _ = d.Reader().QueueGet(ctx, &store.QueueGetParams{Name: "q"})
	checkEqual(t, "queue after publish", got, q)

	// Accept locks for the queue's duration, or the caller's.
	s := acceptAt(t, d, store.SessionAcceptParams{Queue: "q", SessionID: "a", Holder: "h", Now: at(2 * time.Second)})
	if len(s) != 1 || !s[0].LockedUntil.Equal(at(2*time.Second).Add(q.LockDuration)) {
		t.Errorf("lock with the queue's duration: %+v", s)
	}
	s = acceptAt(t, d, store.SessionAcceptParams{Queue: "q", Holder: "h", Now: at(2 * time.Second), Limit: 5,
		LockDuration: time.Hour})
	if len(s) != 1 || s[0].ID != "b" || !s[0].LockedUntil.Equal(at(2*time.Second+time.Hour)) {
		t.Errorf("lock with the caller's duration: %+v", s)
	}

	// A policy change keeps CreatedAt.
	q2 := *q
	q2.MaxDeliveryCount, q2.PoisonPolicy, q2.DedupeWindow, q2.LockDuration = 7, dt.PoisonBlock, 0, time.Minute
	q2.CreatedAt, q2.UpdatedAt = at(time.Hour), at(time.Hour)
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		return x.QueuePut(ctx, &store.QueuePutParams{Queue: &q2})
	})
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		got, err := x.QueueGet(ctx, &store.QueueGetParams{Name: "q"})
		if err != nil {
			return err
		}
		want := q2
		want.CreatedAt = base
		checkEqual(t, "queue after update", got, &want)
		return nil
	})
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		return x.QueuePut(ctx, &store.QueuePutParams{Queue: &dt.Queue{Name: "a-first", MaxDeliveryCount: 1, PoisonPolicy: dt.PoisonBlock,
			CreatedAt: base, UpdatedAt: base}})
	})
	qs, err := d.Reader().QueueList(ctx, &store.QueueListParams{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, q := range qs {
		names = append(names, q.Name)
	}
	if fmt.Sprint(names) != "[a-first q]" {
		t.Errorf("QueueList = %v", names)
	}
	// Keyset pages: Limit, then after the last name.
	publishAt(t, d, base, pub("b", "s", "1"), pub("c", "s", "1"), pub("z", "s", "1"))
	var pages []string
	for after := ""; ; {
		qs, err := d.Reader().QueueList(ctx, &store.QueueListParams{AfterName: after, Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		var page []string
		for _, q := range qs {
			page = append(page, q.Name)
		}
		pages = append(pages, fmt.Sprint(page))
		if len(qs) < 2 {
			break
		}
		after = qs[len(qs)-1].Name
	}
	if fmt.Sprint(pages) != "[[a-first b] [c q] [z]]" {
		t.Errorf("QueueList pages of 2 = %v", pages)
	}
}

// ---- accept ----

// emptySession makes session id of queue exist with nothing pending.
func emptySession(t *testing.T, d store.Driver, queue, id string, now time.Time) {
	t.Helper()
	publishAt(t, d, now, pub(queue, id, "gone"))
	ref := acceptNamed(t, d, queue, id, "setup", now)
	wantErrs(t, "complete", settleAt(t, d, now, complete(ref, 1)), nil)
	wantErrs(t, "release", releaseAt(t, d, now, ref), nil)
}

// blockedSession makes session id of queue blocked, with a message pending.
func blockedSession(t *testing.T, d store.Driver, queue, id string, now time.Time) {
	t.Helper()
	publishAt(t, d, now, pub(queue, id, "poison"), pub(queue, id, "next"))
	ref := acceptNamed(t, d, queue, id, "setup", now)
	wantErrs(t, "dead-letter", settleAt(t, d, now, deadLetter(ref, 1, "poison", true)), nil)
	wantErrs(t, "release", releaseAt(t, d, now, ref), nil)
}

func releaseAt(t *testing.T, d store.Driver, now time.Time, refs ...store.SessionRef) []error {
	t.Helper()
	var errs []error
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		var err error
		errs, err = x.SessionRelease(ctx, &store.SessionReleaseParams{Refs: refs, Now: now})
		return err
	})
	return errs
}

func renewAt(t *testing.T, d store.Driver, now, until time.Time, refs ...store.SessionRef) []error {
	t.Helper()
	var errs []error
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		var err error
		errs, err = x.SessionRenew(ctx, &store.SessionRenewParams{Refs: refs, Now: now, Until: until})
		return err
	})
	return errs
}

func testQueueAcceptNext(t *testing.T, d store.Driver) {
	now := base
	publishAt(t, d, at(-time.Hour),
		availAt(pub("q", "a", "1"), at(-3*time.Second)),
		availAt(pub("q", "b", "1"), at(-5*time.Second)),
		availAt(pub("q", "c", "1"), now), // available exactly now
		availAt(pub("q", "d", "1"), at(time.Second)),
		availAt(pub("q", "tie2", "1"), at(-2*time.Second)),
		availAt(pub("q", "tie1", "1"), at(-2*time.Second)),
		availAt(pub("other", "x", "1"), at(-time.Hour)),
	)
	publishAt(t, d, at(-time.Hour), pub("q", "b", "2")) // more messages change nothing
	emptySession(t, d, "q", "empty", at(-time.Hour))
	blockedSession(t, d, "q", "blocked", at(-time.Hour))
	publishAt(t, d, at(-time.Minute), availAt(pub("q", "held", "1"), at(-time.Hour)))
	held := acceptNamed(t, d, "q", "held", "other-consumer", now)

	got := acceptAt(t, d, store.SessionAcceptParams{Queue: "q", Holder: "h1", Now: now, Limit: 2})
	if fmt.Sprint(sessionIDs(got)) != "[q/b q/a]" {
		t.Fatalf("accept Limit 2 = %v, want oldest head first: [q/b q/a]", sessionIDs(got))
	}
	readyB := at(-5 * time.Second)
	checkEqual(t, "accepted session", got[0], &dt.Session{Queue: "q", ID: "b", NextSeq: 2, Pending: 2, ReadyAt: &readyB,
		LockHolder: "h1", LockToken: 1, LockedUntil: tp(now.Add(dt.DefaultLockDuration)), CreatedAt: at(-time.Hour),
		UpdatedAt: now})

	got = acceptAt(t, d, store.SessionAcceptParams{Queue: "q", Holder: "h2", Now: now, Limit: 10})
	if fmt.Sprint(sessionIDs(got)) != "[q/tie1 q/tie2 q/c]" {
		t.Fatalf("accept = %v, want [q/tie1 q/tie2 q/c]: skipping locked, blocked, empty and not yet available sessions",
			sessionIDs(got))
	}
	for _, s := range got {
		if s.LockHolder != "h2" || s.LockToken != 1 {
			t.Errorf("session %s: holder %q token %d", s.ID, s.LockHolder, s.LockToken)
		}
	}
	if got := acceptAt(t, d, store.SessionAcceptParams{Queue: "q", Holder: "h3", Now: now, Limit: 10}); len(got) != 0 {
		t.Errorf("accept with everything taken = %v", sessionIDs(got))
	}
	// d becomes available.
	got = acceptAt(t, d, store.SessionAcceptParams{Queue: "q", Holder: "h3", Now: at(time.Second), Limit: 10})
	if fmt.Sprint(sessionIDs(got)) != "[q/d]" {
		t.Errorf("accept at +1s = %v, want [q/d]", sessionIDs(got))
	}
	// The other consumer still holds "held" (token 1), unexpired.
	if s := getSession(t, d, "q", "held"); s.LockHolder != "other-consumer" || s.LockToken != held.Token {
		t.Errorf("held session taken: %+v", s)
	}
	// A queue with no session available.
	if got := acceptAt(t, d, store.SessionAcceptParams{Queue: "none", Holder: "h", Now: now, Limit: 10}); len(got) != 0 {
		t.Errorf("accept on an unknown queue = %v", sessionIDs(got))
	}
}

// SessionAvailable is a read: it changes nothing, answers in a
// transaction too, and sees only its queue. (Every accept of the next
// available sessions in this suite also checks it agrees: acceptAt.)
func testQueueSessionAvailable(t *testing.T, d store.Driver) {
	ctx := context.Background()
	avail := func(x store.Executor, queue string, now time.Time) bool {
		t.Helper()
		ok, err := x.SessionAvailable(ctx, &store.SessionAvailableParams{Queue: queue, Now: now})
		if err != nil {
			t.Fatalf("SessionAvailable(%s): %v", queue, err)
		}
		return ok
	}
	if avail(d.Reader(), "none", base) {
		t.Error("SessionAvailable of an unknown queue = true")
	}
	publishAt(t, d, base, availAt(pub("q", "a", "1"), at(time.Second)))
	if avail(d.Reader(), "q", base) {
		t.Error("SessionAvailable before the head is due = true")
	}
	if !avail(d.Reader(), "q", at(time.Second)) || avail(d.Reader(), "other", at(time.Second)) {
		t.Error("SessionAvailable once the head is due: want true for q only")
	}
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		if !avail(x, "q", at(time.Second)) {
			t.Error("SessionAvailable in a transaction = false")
		}
		return nil
	})
	if s := getSession(t, d, "q", "a"); s.LockHolder != "" || s.LockToken != 0 {
		t.Errorf("SessionAvailable changed the session: %+v", s)
	}
	acceptNamed(t, d, "q", "a", "h", at(time.Second))
	if avail(d.Reader(), "q", at(2*time.Second)) {
		t.Error("SessionAvailable with the only session held = true")
	}
}

func testQueueSessionNextReady(t *testing.T, d store.Driver) {
	ctx := context.Background()
	next := func(queue string) time.Time {
		t.Helper()
		got, err := d.Reader().SessionNextReady(ctx, &store.SessionNextReadyParams{Queue: queue})
		if err != nil {
			t.Fatalf("SessionNextReady(%s): %v", queue, err)
		}
		return got
	}
	want := func(what, queue string, at time.Time) {
		t.Helper()
		if got := next(queue); !got.Equal(at) {
			t.Errorf("%s: SessionNextReady(%s) = %v, want %v", what, queue, got, at)
		}
	}
	want("unknown queue", "none", time.Time{})
	// A blocked session never becomes ready by itself.
	blockedSession(t, d, "q", "blocked", base)
	want("only a blocked session", "q", time.Time{})
	// The head of a session no one holds: its available time.
	publishAt(t, d, base, availAt(pub("q", "a", "1"), at(time.Minute)))
	want("a delayed head", "q", at(time.Minute))
	publishAt(t, d, base, availAt(pub("q", "b", "1"), at(10*time.Second)))
	want("the earlier of two delayed heads", "q", at(10*time.Second))
	want("another queue", "other", time.Time{})
	// A held session: when its lock ends, if that is later than its head.
	ref := acceptNamed(t, d, "q", "b", "h", at(10*time.Second))
	lockEnd := at(10 * time.Second).Add(dt.DefaultLockDuration)
	want("a held session's lock ending before the other's head", "q", lockEnd)
	publishAt(t, d, base, pub("q", "c", "1"))
	want("a session ready now", "q", base)
	// Released with nothing left, a session is not pending.
	wantErrs(t, "complete", settleAt(t, d, at(10*time.Second), complete(ref, 1)), nil)
	wantErrs(t, "release", releaseAt(t, d, at(10*time.Second), ref), nil)
	if s := getSession(t, d, "q", "b"); s.Pending != 0 {
		t.Fatalf("session b: %d pending, want 0", s.Pending)
	}
	acceptNamed(t, d, "q", "c", "h", at(11*time.Second))
	want("b done, c held: c's lock end before a's head", "q", at(11*time.Second).Add(dt.DefaultLockDuration))
	// Held sessions in front of a free one (in ready-time order): the free
	// head when it comes before their lock ends.
	publishAt(t, d, base, pub("r", "x", "1"), pub("r", "y", "1"))
	acceptNamed(t, d, "r", "x", "h", at(time.Second))
	acceptNamed(t, d, "r", "y", "h", at(2*time.Second))
	want("two held sessions", "r", at(time.Second).Add(dt.DefaultLockDuration))
	publishAt(t, d, base, availAt(pub("r", "z", "1"), at(20*time.Second)), availAt(pub("r", "w", "1"), at(25*time.Second)))
	want("a free head before the held sessions' lock ends", "r", at(20*time.Second))
	// A held session and a free one with the same ready time: the free one's.
	publishAt(t, d, base, pub("s", "a", "1"), pub("s", "b", "1"))
	acceptNamed(t, d, "s", "a", "h", base)
	want("a held and a free session of one ready time", "s", base)
}

func testQueueAcceptTakeover(t *testing.T, d store.Driver) {
	publishAt(t, d, base, pub("q", "a", "1"), pub("q", "a", "2"))
	first := acceptAt(t, d, store.SessionAcceptParams{Queue: "q", Holder: "h1", Now: base, Limit: 1})
	if len(first) != 1 || first[0].LockToken != 1 {
		t.Fatalf("first accept: %+v", first)
	}
	old := sref(first[0])
	m := receiveOne(t, d, base, old)
	// Not before the lock expires...
	if got := acceptAt(t, d, store.SessionAcceptParams{Queue: "q", Holder: "h2", Now: at(29 * time.Second), Limit: 1}); len(got) != 0 {
		t.Fatalf("accept of a locked session = %v", sessionIDs(got))
	}
	// ...then with a new token, and the head again.
	expiry := base.Add(dt.DefaultLockDuration)
	got := acceptAt(t, d, store.SessionAcceptParams{Queue: "q", Holder: "h2", Now: expiry, Limit: 1})
	if len(got) != 1 || got[0].LockToken != 2 || got[0].LockHolder != "h2" {
		t.Fatalf("takeover of an expired lock: %+v", got)
	}
	ref := sref(got[0])
	if m2 := receiveOne(t, d, expiry, ref); m2.Seq != m.Seq || m2.DeliveryCount != 2 {
		t.Errorf("after takeover received seq %d count %d; want seq %d count 2", m2.Seq, m2.DeliveryCount, m.Seq)
	}
	// The deposed consumer can do nothing.
	_, errs := receiveAt(t, d, expiry, old)
	wantErrs(t, "receive with the old token", errs, store.ErrLockLost)
	wantErrs(t, "settle with the old token", settleAt(t, d, expiry, complete(old, 1)), store.ErrLockLost)
	wantErrs(t, "renew with the old token", renewAt(t, d, expiry, at(time.Hour), old), store.ErrLockLost)
	if s := getSession(t, d, "q", "a"); s.LockHolder != "h2" || s.Pending != 2 {
		t.Errorf("session after the deposed consumer's calls: %+v", s)
	}
}

// What happens to a session while it is held (publish, complete, abandon)
// shows in accept-next once it is released or its lock expires: a session
// with a ready head is never hidden (a driver may leave its ready time stale
// while it is held; it may then accept, after an expiry, a session with
// nothing ready, but never miss one).
func testQueueAcceptAfterHeld(t *testing.T, d store.Driver) {
	acceptOne := func(queue string, now time.Time) *dt.Session {
		t.Helper()
		got := acceptAt(t, d, store.SessionAcceptParams{Queue: queue, Holder: "h2", Now: now, Limit: 10})
		if len(got) != 1 || got[0].ID != "s" {
			t.Fatalf("accept-next of %s at %v: %v; want [s]", queue, now, sessionIDs(got))
		}
		return got[0]
	}
	// hold accepts s of queue (one message, available at base), receives
	// and completes it: s is held and empty.
	hold := func(queue string) store.SessionRef {
		t.Helper()
		publishAt(t, d, base, pub(queue, "s", "1"))
		got := acceptAt(t, d, store.SessionAcceptParams{Queue: queue, Holder: "h1", Now: base, Limit: 1})
		if len(got) != 1 {
			t.Fatalf("accept-next of %s: %v", queue, sessionIDs(got))
		}
		ref := sref(got[0])
		receiveOne(t, d, base, ref)
		wantErrs(t, "complete", settleAt(t, d, base, complete(ref, 1)), nil)
		return ref
	}
	expiry := base.Add(dt.DefaultLockDuration)

	// Published to while held and empty, then released: accepted.
	ref := hold("rel")
	publishAt(t, d, at(time.Second), pub("rel", "s", "2"))
	wantErrs(t, "release", releaseAt(t, d, at(2*time.Second), ref), nil)
	s := acceptOne("rel", at(2*time.Second))
	checkSession(t, "rel", s, 1, tp(at(time.Second)), false)
	if m := receiveOne(t, d, at(2*time.Second), sref(s)); m.Seq != 2 {
		t.Errorf("rel: received seq %d; want 2", m.Seq)
	}

	// The same, but the lock expires instead.
	hold("exp")
	publishAt(t, d, at(time.Second), pub("exp", "s", "2"))
	s = acceptOne("exp", expiry)
	if m := receiveOne(t, d, expiry, sref(s)); m.Seq != 2 {
		t.Errorf("exp: received seq %d; want 2", m.Seq)
	}

	// Emptied while held, released: not accepted.
	ref = hold("empty")
	wantErrs(t, "release", releaseAt(t, d, at(time.Second), ref), nil)
	checkSession(t, "empty", getSession(t, d, "empty", "s"), 0, nil, false)
	if got := acceptAt(t, d, store.SessionAcceptParams{Queue: "empty", Holder: "h2", Now: expiry, Limit: 1}); len(got) != 0 {
		t.Errorf("accept-next of an empty released session: %v", sessionIDs(got))
	}

	// Abandoned with a delay while held, released: accepted when due.
	publishAt(t, d, base, pub("ab", "s", "1"))
	ref = acceptNamed(t, d, "ab", "s", "h1", base)
	receiveOne(t, d, base, ref)
	wantErrs(t, "abandon", settleAt(t, d, base, abandon(ref, 1, at(time.Hour))), nil)
	wantErrs(t, "release", releaseAt(t, d, base, ref), nil)
	if got := acceptAt(t, d, store.SessionAcceptParams{Queue: "ab", Holder: "h2", Now: at(time.Minute), Limit: 1}); len(got) != 0 {
		t.Errorf("accept-next before the abandoned head is due: %v", sessionIDs(got))
	}
	checkSession(t, "ab", acceptOne("ab", at(time.Hour)), 1, tp(at(time.Hour)), false)

	// Accepted by name with a head not yet due; that head completed, the
	// next one due now; the lock expires: accepted.
	publishAt(t, d, base, availAt(pub("late", "s", "1"), at(time.Hour)), pub("late", "s", "2"))
	ref = acceptNamed(t, d, "late", "s", "h1", base)
	wantErrs(t, "complete", settleAt(t, d, base, complete(ref, 1)), nil)
	s = acceptOne("late", expiry)
	if m := receiveOne(t, d, expiry, sref(s)); m.Seq != 2 {
		t.Errorf("late: received seq %d; want 2", m.Seq)
	}

	// Accepted by name while empty, published to, lock expired: accepted.
	emptySession(t, d, "named", "s", base)
	acceptNamed(t, d, "named", "s", "h1", base)
	publishAt(t, d, at(time.Second), pub("named", "s", "2"))
	s = acceptOne("named", expiry)
	if m := receiveOne(t, d, expiry, sref(s)); m.Seq != 2 {
		t.Errorf("named: received seq %d; want 2", m.Seq)
	}

	// Dead-lettered with block while held, released: not accepted; the
	// dead message discarded: accepted.
	blockedSession(t, d, "blk", "s", base)
	if got := acceptAt(t, d, store.SessionAcceptParams{Queue: "blk", Holder: "h2", Now: expiry, Limit: 1}); len(got) != 0 {
		t.Errorf("accept-next of a blocked session: %v", sessionIDs(got))
	}
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		return x.DeadLetterDiscard(ctx, &store.DeadLetterDiscardParams{Queue: "blk", SessionID: "s", Seq: 1, Now: base})
	})
	if m := receiveOne(t, d, expiry, sref(acceptOne("blk", expiry))); m.Seq != 2 {
		t.Errorf("blk: received seq %d; want 2", m.Seq)
	}
}

func testQueueAcceptNamed(t *testing.T, d store.Driver) {
	ctx := context.Background()
	publishAt(t, d, base, pub("q", "a", "1"), availAt(pub("q", "later", "1"), at(time.Hour)))
	accept := func(id, holder string, now time.Time) ([]*dt.Session, error) {
		var got []*dt.Session
		err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
			var err error
			got, err = x.SessionAccept(ctx, &store.SessionAcceptParams{Queue: "q", SessionID: id, Holder: holder, Now: now, Limit: 1})
			return err
		})
		return got, err
	}
	_, err := accept("missing", "h1", base)
	wantErrIs(t, err, store.ErrNotFound, "named accept of a missing session")
	got, err := accept("a", "h1", base)
	if err != nil || len(got) != 1 || got[0].LockToken != 1 || got[0].LockHolder != "h1" ||
		!got[0].LockedUntil.Equal(base.Add(dt.DefaultLockDuration)) {
		t.Fatalf("named accept: %+v, %v", got, err)
	}
	_, err = accept("a", "h2", at(time.Second))
	wantErrIs(t, err, store.ErrSessionLocked, "named accept of a session another holds")
	_, err = accept("a", "h1", at(time.Second))
	wantErrIs(t, err, store.ErrSessionLocked, "named accept of a session locked, even by the same holder")
	got, err = accept("a", "h2", base.Add(dt.DefaultLockDuration))
	if err != nil || len(got) != 1 || got[0].LockToken != 2 || got[0].LockHolder != "h2" {
		t.Fatalf("named accept after expiry: %+v, %v", got, err)
	}
	wantErrs(t, "release", releaseAt(t, d, at(31*time.Second), sref(got[0])), nil)
	got, err = accept("a", "h3", at(31*time.Second))
	if err != nil || len(got) != 1 || got[0].LockToken != 3 {
		t.Fatalf("named accept after release: %+v, %v", got, err)
	}
	// A session with nothing available can be accepted by name.
	got, err = accept("later", "h1", base)
	if err != nil || len(got) != 1 {
		t.Fatalf("named accept of a session with nothing available: %+v, %v", got, err)
	}
	if msgs, errs := receiveAt(t, d, base, sref(got[0])); msgs[0] != nil || errs[0] != nil {
		t.Errorf("receive before the head is available: %+v, %v", msgs[0], errs[0])
	}
}

func testQueueRenewRelease(t *testing.T, d store.Driver) {
	publishAt(t, d, base, pub("q", "a", "1"), pub("q", "b", "1"))
	a := acceptNamed(t, d, "q", "a", "h", base)
	b := acceptNamed(t, d, "q", "b", "h", base)
	stale := a
	stale.Token--
	wantErrs(t, "renew", renewAt(t, d, at(10*time.Second), at(time.Minute), a, b, stale), nil, nil, store.ErrLockLost)
	if s := getSession(t, d, "q", "a"); !s.LockedUntil.Equal(at(time.Minute)) || s.LockHolder != "h" {
		t.Errorf("renewed session: %+v", s)
	}
	// An expired lock cannot be renewed, even if nobody took it.
	wantErrs(t, "renew after expiry", renewAt(t, d, at(time.Minute), at(2*time.Minute), a), store.ErrLockLost)
	if s := getSession(t, d, "q", "a"); !s.LockedUntil.Equal(at(time.Minute)) {
		t.Errorf("expired lock changed by a refused renewal: %+v", s)
	}
	a = acceptNamed(t, d, "q", "a", "h", at(time.Minute))

	wantErrs(t, "release", releaseAt(t, d, at(61*time.Second), a, stale), nil, store.ErrLockLost)
	s := getSession(t, d, "q", "a")
	if s.LockHolder != "" || s.LockedUntil != nil || s.LockToken != a.Token {
		t.Errorf("released session: %+v", s)
	}
	wantErrs(t, "release again", releaseAt(t, d, at(61*time.Second), a), store.ErrLockLost)
	_, errs := receiveAt(t, d, at(61*time.Second), a)
	wantErrs(t, "receive after release", errs, store.ErrLockLost)
	// Released: free for the next consumer at once.
	got := acceptAt(t, d, store.SessionAcceptParams{Queue: "q", Holder: "h2", Now: at(61 * time.Second), Limit: 5})
	if fmt.Sprint(sessionIDs(got)) != "[q/a q/b]" { // b's lock expired at +60s
		t.Errorf("accept after release = %v", sessionIDs(got))
	}
	// Empty batches.
	wantErrs(t, "empty renew", renewAt(t, d, base, base))
	wantErrs(t, "empty release", releaseAt(t, d, base))
}

// ---- receive and settle ----

func testQueueReceive(t *testing.T, d store.Driver) {
	publishAt(t, d, base, withID(pub("q", "a", "one"), "id1"), pub("q", "a", "two"))
	publishAt(t, d, base, availAt(pub("q", "later", "x"), at(time.Minute)))
	emptySession(t, d, "q", "empty", base)
	blockedSession(t, d, "q", "blocked", base)
	now := at(time.Second)
	lock := func(id string) store.SessionRef {
		s := acceptAt(t, d, store.SessionAcceptParams{Queue: "q", SessionID: id, Holder: "h", Now: now,
			LockDuration: time.Hour})
		return sref(s[0])
	}
	a, later, empty, blocked := lock("a"), lock("later"), lock("empty"), lock("blocked")
	stale := a
	stale.Token--

	msgs, errs := receiveAt(t, d, now, a, later, empty, blocked, stale)
	wantErrs(t, "receive", errs, nil, nil, nil, nil, store.ErrLockLost)
	checkEqual(t, "received", msgs[0], &dt.Message{Queue: "q", SessionID: "a", Seq: 1, MessageID: "id1",
		Body: []byte("one"), DeliveryCount: 1, AvailableAt: base, EnqueuedAt: base})
	for i, what := range []string{"", "not yet available", "empty", "blocked", "lock lost"} {
		if i > 0 && msgs[i] != nil {
			t.Errorf("receive from a session %s: %+v", what, msgs[i])
		}
	}
	// Unsettled, the head is delivered again, counted.
	if m := receiveOne(t, d, now, a); m.Seq != 1 || m.DeliveryCount != 2 {
		t.Errorf("second receive: seq %d count %d, want 1, 2", m.Seq, m.DeliveryCount)
	}
	p := peekAll(t, d, "q", "a")
	if p[0].DeliveryCount != 2 || p[1].DeliveryCount != 0 {
		t.Errorf("delivery counts %d, %d; want 2, 0", p[0].DeliveryCount, p[1].DeliveryCount)
	}
	if m := peekAll(t, d, "q", "later"); m[0].DeliveryCount != 0 {
		t.Errorf("a message not available was counted delivered")
	}
	checkSession(t, "a", getSession(t, d, "q", "a"), 2, tp(base), false)
	// Available at its time.
	if m := receiveOne(t, d, at(time.Minute), later); m.Seq != 1 || m.DeliveryCount != 1 {
		t.Errorf("receive when available: %+v", m)
	}
	// An expired lock receives nothing.
	_, errs = receiveAt(t, d, now.Add(time.Hour), a)
	wantErrs(t, "receive with an expired lock", errs, store.ErrLockLost)
	msgs, errs = receiveAt(t, d, now)
	if len(msgs) != 0 || len(errs) != 0 {
		t.Errorf("empty receive: %v %v", msgs, errs)
	}
}

func testQueueSettleComplete(t *testing.T, d store.Driver) {
	publishAt(t, d, base, pub("q", "a", "1"), availAt(pub("q", "a", "2"), at(time.Second)),
		availAt(pub("q", "a", "3"), at(2*time.Second)))
	now := at(10 * time.Second)
	ref := acceptNamed(t, d, "q", "a", "h", now)
	receiveOne(t, d, now, ref)
	wantErrs(t, "complete 1", settleAt(t, d, now, complete(ref, 1)), nil)
	checkSession(t, "after completing 1", getSession(t, d, "q", "a"), 2, tp(at(time.Second)), false)
	wantSeqs(t, "after completing 1", peekAll(t, d, "q", "a"), 2, 3)
	if m := receiveOne(t, d, now, ref); m.Seq != 2 {
		t.Fatalf("next head: %d", m.Seq)
	}
	// Complete with a new session state.
	s2 := complete(ref, 2)
	s2.SetState, s2.State = true, []byte("state-2")
	wantErrs(t, "complete 2", settleAt(t, d, now, s2), nil)
	s := getSession(t, d, "q", "a")
	checkSession(t, "after completing 2", s, 1, tp(at(2*time.Second)), false)
	if string(s.State) != "state-2" || !s.UpdatedAt.Equal(now) {
		t.Errorf("state %q updated %s", s.State, s.UpdatedAt)
	}
	// Without SetState the state stays.
	wantErrs(t, "complete 3", settleAt(t, d, now, complete(ref, 3)), nil)
	s = getSession(t, d, "q", "a")
	checkSession(t, "after completing 3", s, 0, nil, false)
	if string(s.State) != "state-2" || s.NextSeq != 3 {
		t.Errorf("state %q next seq %d", s.State, s.NextSeq)
	}
	wantSeqs(t, "empty", peekAll(t, d, "q", "a"))
	// Gone: not the head any more.
	wantErrs(t, "complete 3 again", settleAt(t, d, now, complete(ref, 3)), store.ErrNotHead)
	// A new message after the session emptied is the head again.
	wantPublished(t, "publish to the emptied session", publishAt(t, d, at(11*time.Second), pub("q", "a", "4")), 4)
	checkSession(t, "after publishing 4", getSession(t, d, "q", "a"), 1, tp(at(11*time.Second)), false)
	// SetState with nil clears it.
	s4 := complete(ref, 4)
	s4.SetState = true
	wantErrs(t, "complete 4", settleAt(t, d, at(11*time.Second), s4), nil)
	if s := getSession(t, d, "q", "a"); s.State != nil {
		t.Errorf("state after clearing: %q", s.State)
	}
}

func testQueueSettleAbandon(t *testing.T, d store.Driver) {
	publishAt(t, d, base, pub("q", "a", "1"), pub("q", "a", "2"))
	now := at(time.Second)
	ref := acceptNamed(t, d, "q", "a", "h", now)
	receiveOne(t, d, now, ref)
	wantErrs(t, "abandon with delay", settleAt(t, d, now, abandon(ref, 1, at(time.Minute))), nil)
	checkSession(t, "after abandon", getSession(t, d, "q", "a"), 2, tp(at(time.Minute)), false)
	p := peekAll(t, d, "q", "a")
	if !p[0].AvailableAt.Equal(at(time.Minute)) || p[0].DeliveryCount != 1 {
		t.Errorf("abandoned message: %+v", p[0])
	}
	// FIFO: the message after it is not delivered meanwhile.
	if msgs, errs := receiveAt(t, d, at(2*time.Second), ref); msgs[0] != nil || errs[0] != nil {
		t.Errorf("receive during the delay: %+v %v", msgs[0], errs[0])
	}
	// Released, the session is not accepted before the delay ends.
	wantErrs(t, "release", releaseAt(t, d, at(2*time.Second), ref), nil)
	if got := acceptAt(t, d, store.SessionAcceptParams{Queue: "q", Holder: "h", Now: at(59 * time.Second), Limit: 1}); len(got) != 0 {
		t.Errorf("accepted during the delay: %v", sessionIDs(got))
	}
	got := acceptAt(t, d, store.SessionAcceptParams{Queue: "q", Holder: "h", Now: at(time.Minute), Limit: 1})
	if len(got) != 1 {
		t.Fatal("not accepted after the delay")
	}
	ref = sref(got[0])
	if m := receiveOne(t, d, at(time.Minute), ref); m.Seq != 1 || m.DeliveryCount != 2 {
		t.Errorf("after the delay: seq %d count %d", m.Seq, m.DeliveryCount)
	}
	// Abandon without a time: available at once.
	wantErrs(t, "abandon now", settleAt(t, d, at(61*time.Second), abandon(ref, 1, time.Time{})), nil)
	checkSession(t, "after abandon now", getSession(t, d, "q", "a"), 2, tp(at(61*time.Second)), false)
	if m := receiveOne(t, d, at(61*time.Second), ref); m.Seq != 1 || m.DeliveryCount != 3 {
		t.Errorf("after abandon now: seq %d count %d", m.Seq, m.DeliveryCount)
	}
}

func testQueueSettleDeadLetter(t *testing.T, d store.Driver) {
	publishAt(t, d, base, pub("q", "block", "1"), availAt(pub("q", "block", "2"), at(time.Second)),
		pub("q", "skip", "1"), availAt(pub("q", "skip", "2"), at(2*time.Second)))
	now := at(10 * time.Second)
	bl := acceptNamed(t, d, "q", "block", "h", now)
	sk := acceptNamed(t, d, "q", "skip", "h", now)
	receiveAt(t, d, now, bl, sk)
	st := deadLetter(bl, 1, "too many deliveries", true)
	st.SetState, st.State = true, []byte("halted")
	wantErrs(t, "dead-letter", settleAt(t, d, now, st, deadLetter(sk, 1, "bad input", false)), nil, nil)

	// block: the session halts; its next message is the head but not delivered.
	s := getSession(t, d, "q", "block")
	checkSession(t, "blocked session", s, 1, tp(at(time.Second)), true)
	if string(s.State) != "halted" {
		t.Errorf("state %q", s.State)
	}
	if msgs, errs := receiveAt(t, d, now, bl); msgs[0] != nil || errs[0] != nil {
		t.Errorf("receive from a blocked session: %+v %v", msgs[0], errs[0])
	}
	p := peekAll(t, d, "q", "block")
	checkEqual(t, "dead message", p[0], &dt.Message{Queue: "q", SessionID: "block", Seq: 1, Body: []byte("1"),
		DeliveryCount: 1, AvailableAt: base, Dead: true, DeadReason: "too many deliveries", DeadAt: tp(now), EnqueuedAt: base})
	// skip: the session goes on with the next message.
	checkSession(t, "skipping session", getSession(t, d, "q", "skip"), 1, tp(at(2*time.Second)), false)
	if m := receiveOne(t, d, now, sk); m.Seq != 2 {
		t.Errorf("after skip: seq %d", m.Seq)
	}
	wantErrs(t, "release", releaseAt(t, d, now, bl, sk), nil, nil)
	got := acceptAt(t, d, store.SessionAcceptParams{Queue: "q", Holder: "h", Now: now, Limit: 10})
	if fmt.Sprint(sessionIDs(got)) != "[q/skip]" {
		t.Errorf("accept = %v; a blocked session is never accepted", sessionIDs(got))
	}
	// The dead message is no head: settling it again fails.
	bl2 := acceptNamed(t, d, "q", "block", "h", now)
	wantErrs(t, "settle a dead message", settleAt(t, d, now, complete(bl2, 1)), store.ErrNotHead)
}

func testQueueSettleLockLost(t *testing.T, d store.Driver) {
	publishAt(t, d, base, pub("q", "a", "1"), pub("q", "b", "1"), pub("q", "c", "1"), pub("q", "c", "2"))
	a := acceptNamed(t, d, "q", "a", "h", base)
	b := acceptNamed(t, d, "q", "b", "h", base)
	c := acceptNamed(t, d, "q", "c", "h", base)
	receiveAt(t, d, base, a, b, c)
	stale := b
	stale.Token--
	withState := func(s store.MessageSettle) store.MessageSettle {
		s.SetState, s.State = true, []byte("x")
		return s
	}
	before := peekAll(t, d, "q", "b")
	errs := settleAt(t, d, at(time.Second), complete(a, 1), withState(complete(stale, 1)),
		withState(deadLetter(stale, 1, "r", true)), withState(abandon(stale, 1, at(time.Hour))), complete(c, 2))
	wantErrs(t, "mixed settle", errs, nil, store.ErrLockLost, store.ErrLockLost, store.ErrLockLost, store.ErrNotHead)
	checkSession(t, "a", getSession(t, d, "q", "a"), 0, nil, false)
	sb := getSession(t, d, "q", "b")
	checkSession(t, "b after refused settles", sb, 1, tp(base), false)
	if sb.State != nil {
		t.Errorf("state set by a refused settle: %q", sb.State)
	}
	checkEqual(t, "b's message after refused settles", peekAll(t, d, "q", "b")[0], before[0])
	checkSession(t, "c after a refused settle", getSession(t, d, "q", "c"), 2, tp(base), false)
	wantSeqs(t, "c", peekAll(t, d, "q", "c"), 1, 2)

	// An expired lock: the token is current but the lock is not.
	expired := at(dt.DefaultLockDuration)
	wantErrs(t, "settle with an expired lock", settleAt(t, d, expired, complete(b, 1), withState(abandon(c, 1, base))),
		store.ErrLockLost, store.ErrLockLost)
	checkSession(t, "b after expiry", getSession(t, d, "q", "b"), 1, tp(base), false)
	wantSeqs(t, "b after expiry", peekAll(t, d, "q", "b"), 1)
	wantErrs(t, "empty settle", settleAt(t, d, base))
}

func testQueueSettleNotHead(t *testing.T, d store.Driver) {
	publishAt(t, d, base, pub("q", "a", "1"), pub("q", "a", "2"))
	ref := acceptNamed(t, d, "q", "a", "h", base)
	for _, s := range []store.MessageSettle{complete(ref, 2), abandon(ref, 2, at(time.Hour)),
		deadLetter(ref, 2, "r", true), complete(ref, 0), complete(ref, 3)} {
		wantErrs(t, fmt.Sprintf("%s of seq %d", s.Action, s.Seq), settleAt(t, d, base, s), store.ErrNotHead)
	}
	checkSession(t, "after refused settles", getSession(t, d, "q", "a"), 2, tp(base), false)
	p := peekAll(t, d, "q", "a")
	wantSeqs(t, "messages", p, 1, 2)
	if p[1].Dead || !p[1].AvailableAt.Equal(base) {
		t.Errorf("non-head message changed: %+v", p[1])
	}
}

// Items of one call for the same session apply one after the other.
func testQueueSameSessionTwice(t *testing.T, d store.Driver) {
	publishAt(t, d, base, pub("q", "a", "1"), pub("q", "a", "2"), pub("q", "a", "3"), pub("q", "b", "1"))
	a := acceptNamed(t, d, "q", "a", "h", base)
	b := acceptNamed(t, d, "q", "b", "h", base)
	msgs, errs := receiveAt(t, d, base, a, b, a)
	wantErrs(t, "receive", errs, nil, nil, nil)
	if msgs[0].Seq != 1 || msgs[0].DeliveryCount != 1 || msgs[2].Seq != 1 || msgs[2].DeliveryCount != 2 {
		t.Errorf("receive a twice: %+v, %+v", msgs[0], msgs[2])
	}
	errs = settleAt(t, d, base, complete(a, 1), complete(b, 1), complete(a, 2), complete(a, 2))
	wantErrs(t, "settle", errs, nil, nil, nil, store.ErrNotHead)
	checkSession(t, "a", getSession(t, d, "q", "a"), 1, tp(base), false)
	wantSeqs(t, "a", peekAll(t, d, "q", "a"), 3)
	wantErrs(t, "renew twice", renewAt(t, d, base, at(time.Hour), a, a), nil, nil)
	wantErrs(t, "release twice", releaseAt(t, d, base, a, a), nil, store.ErrLockLost)
}

// ---- settle and receive the next head in one call ----

func settleReceiveAt(t *testing.T, d store.Driver, now time.Time, settles ...store.MessageSettle) ([]*dt.Message, []error) {
	t.Helper()
	var (
		msgs []*dt.Message
		errs []error
	)
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		var err error
		msgs, errs, err = x.MessageSettleReceiveMany(ctx, &store.MessageSettleReceiveManyParams{Settles: settles, Now: now})
		return err
	})
	if len(msgs) != len(settles) || len(errs) != len(settles) {
		t.Fatalf("MessageSettleReceiveMany: %d messages and %d errors for %d settles", len(msgs), len(errs), len(settles))
	}
	return msgs, errs
}

func next(s store.MessageSettle) store.MessageSettle { s.ReceiveNext = true; return s }

// wantNone checks that no message came back for the items listed.
func wantNone(t *testing.T, what string, msgs []*dt.Message, items ...int) {
	t.Helper()
	for _, i := range items {
		if msgs[i] != nil {
			t.Errorf("%s: item %d received %+v, want nothing", what, i, msgs[i])
		}
	}
}

func testQueueSettleReceive(t *testing.T, d store.Driver) {
	publishAt(t, d, base, pub("q", "a", "1"), withID(pub("q", "a", "2"), "id2"), availAt(pub("q", "a", "3"), at(time.Minute)),
		pub("q", "b", "1"), pub("q", "b", "2"))
	now := at(time.Second)
	lock := func(id string) store.SessionRef {
		return sref(acceptAt(t, d, store.SessionAcceptParams{Queue: "q", SessionID: id, Holder: "h", Now: now,
			LockDuration: time.Hour})[0])
	}
	a, b := lock("a"), lock("b")
	receiveAt(t, d, now, a, b)

	// Complete 1 and receive 2 in one call; b completes without ReceiveNext.
	st := next(complete(a, 1))
	st.SetState, st.State = true, []byte("after-1")
	msgs, errs := settleReceiveAt(t, d, now, st, complete(b, 1))
	wantErrs(t, "settle and receive", errs, nil, nil)
	checkEqual(t, "next head", msgs[0], &dt.Message{Queue: "q", SessionID: "a", Seq: 2, MessageID: "id2",
		Body: []byte("2"), DeliveryCount: 1, AvailableAt: base, EnqueuedAt: base})
	wantNone(t, "without ReceiveNext", msgs, 1)
	sa := getSession(t, d, "q", "a")
	checkSession(t, "a after 1", sa, 2, tp(base), false)
	if string(sa.State) != "after-1" || !sa.UpdatedAt.Equal(now) {
		t.Errorf("state %q updated %s", sa.State, sa.UpdatedAt)
	}
	p := peekAll(t, d, "q", "a")
	wantSeqs(t, "a after 1", p, 2, 3)
	if p[0].DeliveryCount != 1 || p[1].DeliveryCount != 0 {
		t.Errorf("delivery counts %d, %d; want 1, 0", p[0].DeliveryCount, p[1].DeliveryCount)
	}
	checkSession(t, "b after 1", getSession(t, d, "q", "b"), 1, tp(base), false)
	if m := peekAll(t, d, "q", "b"); m[0].DeliveryCount != 0 {
		t.Errorf("b's next head was counted delivered without ReceiveNext")
	}

	// The next head is not available yet: nothing received, not counted.
	msgs, errs = settleReceiveAt(t, d, now, next(complete(a, 2)))
	wantErrs(t, "complete 2", errs, nil)
	wantNone(t, "head not yet available", msgs, 0)
	checkSession(t, "a after 2", getSession(t, d, "q", "a"), 1, tp(at(time.Minute)), false)
	if m := peekAll(t, d, "q", "a"); m[0].DeliveryCount != 0 {
		t.Errorf("a message not available was counted delivered")
	}
	// Available at its time (through a plain receive), then the last one:
	// nothing follows.
	later := at(time.Minute)
	if m := receiveOne(t, d, later, a); m.Seq != 3 || m.DeliveryCount != 1 {
		t.Errorf("receive 3: %+v", m)
	}
	msgs, errs = settleReceiveAt(t, d, later, next(complete(a, 3)))
	wantErrs(t, "complete 3", errs, nil)
	wantNone(t, "empty session", msgs, 0)
	checkSession(t, "a emptied", getSession(t, d, "q", "a"), 0, nil, false)

	// MessageSettleMany ignores ReceiveNext.
	wantErrs(t, "settle with ReceiveNext", settleAt(t, d, now, next(abandon(b, 2, time.Time{}))), nil)
	if m := peekAll(t, d, "q", "b"); m[0].DeliveryCount != 0 {
		t.Errorf("MessageSettleMany received the head: %+v", m[0])
	}
	msgs, errs = settleReceiveAt(t, d, now)
	if len(msgs) != 0 || len(errs) != 0 {
		t.Errorf("empty call: %v %v", msgs, errs)
	}
}

func testQueueSettleReceiveAbandonDeadLetter(t *testing.T, d store.Driver) {
	publishAt(t, d, base, pub("q", "ab", "1"), pub("q", "ab", "2"),
		pub("q", "skip", "1"), availAt(pub("q", "skip", "2"), at(time.Second)),
		pub("q", "block", "1"), pub("q", "block", "2"))
	blockedSession(t, d, "q", "was-blocked", base)
	now := at(time.Second)
	ab := acceptNamed(t, d, "q", "ab", "h", now)
	sk := acceptNamed(t, d, "q", "skip", "h", now)
	bl := acceptNamed(t, d, "q", "block", "h", now)
	wb := acceptNamed(t, d, "q", "was-blocked", "h", now)
	receiveAt(t, d, now, ab, sk, bl)

	// Abandon without delay: the same message is the head again and comes
	// back at once, counted; abandon with a delay: not before its time.
	msgs, errs := settleReceiveAt(t, d, now, next(abandon(ab, 1, time.Time{})), next(deadLetter(sk, 1, "bad", false)),
		next(deadLetter(bl, 1, "poison", true)), next(complete(wb, 2)))
	wantErrs(t, "settles", errs, nil, nil, nil, nil)
	if m := msgs[0]; m == nil || m.Seq != 1 || m.DeliveryCount != 2 || !m.AvailableAt.Equal(now) {
		t.Errorf("abandoned without delay: received %+v, want seq 1, count 2, available at now", m)
	}
	checkSession(t, "ab", getSession(t, d, "q", "ab"), 2, tp(now), false)
	// skip: the next message, available at now exactly.
	if m := msgs[1]; m == nil || m.Seq != 2 || m.DeliveryCount != 1 {
		t.Errorf("after a skipped dead letter: received %+v, want seq 2", m)
	}
	checkSession(t, "skip", getSession(t, d, "q", "skip"), 1, tp(at(time.Second)), false)
	// block: blocked by this settle, or before it: nothing received.
	wantNone(t, "blocked sessions", msgs, 2, 3)
	checkSession(t, "block", getSession(t, d, "q", "block"), 1, tp(base), true)
	checkSession(t, "was-blocked", getSession(t, d, "q", "was-blocked"), 0, nil, true)
	if m := peekAll(t, d, "q", "block"); m[1].DeliveryCount != 0 {
		t.Errorf("the head after a blocking dead letter was counted delivered")
	}
	msgs, errs = settleReceiveAt(t, d, now, next(abandon(ab, 1, at(time.Minute))))
	wantErrs(t, "abandon with delay", errs, nil)
	wantNone(t, "abandoned with a delay", msgs, 0)
	checkSession(t, "ab after a delayed abandon", getSession(t, d, "q", "ab"), 2, tp(at(time.Minute)), false)
	if m := peekAll(t, d, "q", "ab"); m[0].DeliveryCount != 2 || !m[0].AvailableAt.Equal(at(time.Minute)) {
		t.Errorf("abandoned message: %+v", m[0])
	}
}

func testQueueSettleReceiveRejected(t *testing.T, d store.Driver) {
	publishAt(t, d, base, pub("q", "a", "1"), pub("q", "a", "2"), pub("q", "b", "1"), pub("q", "b", "2"))
	a := acceptNamed(t, d, "q", "a", "h", base)
	b := acceptNamed(t, d, "q", "b", "h", base)
	receiveAt(t, d, base, a, b)
	stale := a
	stale.Token--
	before := peekAll(t, d, "q", "a")
	msgs, errs := settleReceiveAt(t, d, base, next(complete(stale, 1)), next(complete(b, 2)), next(abandon(stale, 1, time.Time{})))
	wantErrs(t, "rejected settles", errs, store.ErrLockLost, store.ErrNotHead, store.ErrLockLost)
	wantNone(t, "rejected settles", msgs, 0, 1, 2)
	for i, m := range peekAll(t, d, "q", "a") {
		checkEqual(t, fmt.Sprintf("a's message %d after refused settles", m.Seq), m, before[i])
	}
	checkSession(t, "a", getSession(t, d, "q", "a"), 2, tp(base), false)
	checkSession(t, "b", getSession(t, d, "q", "b"), 2, tp(base), false)
	if p := peekAll(t, d, "q", "b"); p[0].DeliveryCount != 1 || p[1].DeliveryCount != 0 {
		t.Errorf("b after a refused settle: counts %d, %d", p[0].DeliveryCount, p[1].DeliveryCount)
	}
	// An expired lock: the token is current but the lock is not.
	msgs, errs = settleReceiveAt(t, d, at(dt.DefaultLockDuration), next(complete(a, 1)))
	wantErrs(t, "settle with an expired lock", errs, store.ErrLockLost)
	wantNone(t, "expired lock", msgs, 0)
	wantSeqs(t, "a after expiry", peekAll(t, d, "q", "a"), 1, 2)
}

// Items of one call for the same session apply one after the other: the
// message a settle receives can be settled by a later item.
func testQueueSettleReceiveSameSessionTwice(t *testing.T, d store.Driver) {
	publishAt(t, d, base, pub("q", "a", "1"), pub("q", "a", "2"), pub("q", "a", "3"), pub("q", "b", "1"))
	a := acceptNamed(t, d, "q", "a", "h", base)
	b := acceptNamed(t, d, "q", "b", "h", base)
	receiveAt(t, d, base, a, b)
	msgs, errs := settleReceiveAt(t, d, base, next(complete(a, 1)), next(complete(b, 1)), next(complete(a, 2)),
		next(complete(a, 2)))
	wantErrs(t, "settles", errs, nil, nil, nil, store.ErrNotHead)
	if msgs[0] == nil || msgs[0].Seq != 2 || msgs[0].DeliveryCount != 1 {
		t.Errorf("first settle of a received %+v, want seq 2", msgs[0])
	}
	if msgs[2] == nil || msgs[2].Seq != 3 || msgs[2].DeliveryCount != 1 {
		t.Errorf("second settle of a received %+v, want seq 3", msgs[2])
	}
	wantNone(t, "b emptied, and a refused settle", msgs, 1, 3)
	checkSession(t, "a", getSession(t, d, "q", "a"), 1, tp(base), false)
	checkSession(t, "b", getSession(t, d, "q", "b"), 0, nil, false)
	wantSeqs(t, "a", peekAll(t, d, "q", "a"), 3)
}

// A settle that waits for an open publisher of its session sees the
// message that publisher commits: it is the next head, received, and the
// session's bookkeeping counts it.
func testQueueSettleReceiveOpenPublisher(t *testing.T, d store.Driver) {
	ctx := context.Background()
	publishAt(t, d, base, pub("q", "a", "1"))
	now := at(time.Second)
	a := acceptNamed(t, d, "q", "a", "h", now)
	receiveOne(t, d, now, a)
	var (
		published = make(chan error, 1)
		release   = make(chan struct{})
		pubDone   = make(chan error, 1)
	)
	go func() {
		pubDone <- d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
			_, err := x.MessagePublishMany(ctx, &store.MessagePublishManyParams{Messages: []store.PublishMessage{pub("q", "a", "2")}, Now: base})
			published <- err
			if err != nil {
				return err
			}
			<-release
			return nil
		})
	}()
	if err := <-published; err != nil {
		t.Fatal(err)
	}
	type result struct {
		msgs []*dt.Message
		errs []error
		err  error
	}
	settled := make(chan result, 1)
	go func() {
		var r result
		r.err = d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
			var err error
			r.msgs, r.errs, err = x.MessageSettleReceiveMany(ctx, &store.MessageSettleReceiveManyParams{Settles: []store.MessageSettle{next(complete(a, 1))}, Now: now})
			return err
		})
		settled <- r
	}()
	select {
	case r := <-settled:
		close(release)
		t.Fatalf("settle finished while a publisher of its session was open: %+v", r)
	case <-time.After(300 * time.Millisecond):
	}
	close(release)
	if err := <-pubDone; err != nil {
		t.Fatal(err)
	}
	r := <-settled
	if r.err != nil {
		t.Fatal(r.err)
	}
	wantErrs(t, "settle", r.errs, nil)
	if m := r.msgs[0]; m == nil || m.Seq != 2 || m.DeliveryCount != 1 {
		t.Errorf("settle after the publisher committed received %+v, want seq 2", m)
	}
	checkSession(t, "a", getSession(t, d, "q", "a"), 1, tp(base), false)
}

func testQueueSessionState(t *testing.T, d store.Driver) {
	ctx := context.Background()
	publishAt(t, d, base, pub("q", "a", "1"))
	ref := acceptNamed(t, d, "q", "a", "h", base)
	set := func(ref store.SessionRef, state []byte, now time.Time) error {
		return d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
			return x.SessionStateSet(ctx, &store.SessionStateSetParams{Ref: ref, State: state, Now: now})
		})
	}
	if err := set(ref, []byte("s1"), at(time.Second)); err != nil {
		t.Fatal(err)
	}
	s := getSession(t, d, "q", "a")
	if string(s.State) != "s1" || !s.UpdatedAt.Equal(at(time.Second)) {
		t.Errorf("state %q updated %s", s.State, s.UpdatedAt)
	}
	stale := ref
	stale.Token++
	wantErrIs(t, set(stale, []byte("s2"), at(time.Second)), store.ErrLockLost, "state set with a wrong token")
	wantErrIs(t, set(ref, []byte("s2"), at(dt.DefaultLockDuration)), store.ErrLockLost, "state set with an expired lock")
	if s := getSession(t, d, "q", "a"); string(s.State) != "s1" {
		t.Errorf("state after refused sets: %q", s.State)
	}
	if err := set(ref, nil, at(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	if s := getSession(t, d, "q", "a"); s.State != nil {
		t.Errorf("state after clearing: %q", s.State)
	}
	// Released, the state stays for the next consumer.
	if err := set(ref, []byte("kept"), at(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	wantErrs(t, "release", releaseAt(t, d, at(3*time.Second), ref), nil)
	got := acceptAt(t, d, store.SessionAcceptParams{Queue: "q", SessionID: "a", Holder: "h2", Now: at(3 * time.Second)})
	if string(got[0].State) != "kept" {
		t.Errorf("accepted session state %q, want kept", got[0].State)
	}
	_, err := d.Reader().SessionGet(ctx, &store.SessionGetParams{Queue: "q", SessionID: "missing"})
	wantErrIs(t, err, store.ErrNotFound, "SessionGet of a missing session")
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		s, err := x.SessionGet(ctx, &store.SessionGetParams{Queue: "q", SessionID: "a"})
		if err != nil {
			return err
		}
		if string(s.State) != "kept" || s.LockHolder != "h2" {
			t.Errorf("SessionGet in a transaction: %+v", s)
		}
		_, err = x.SessionGet(ctx, &store.SessionGetParams{Queue: "q", SessionID: "missing"})
		wantErrIs(t, err, store.ErrNotFound, "SessionGet of a missing session in a transaction")
		return nil
	})
}

func testQueueSessionList(t *testing.T, d store.Driver) {
	ctx := context.Background()
	publishAt(t, d, base, pub("q", "c", "1"), pub("q", "a", "1"), pub("q", "b", "1"), pub("q", "B", "1"),
		pub("other", "a", "1"))
	list := func(p store.SessionListParams) string {
		got, err := d.Reader().SessionList(ctx, &p)
		if err != nil {
			t.Fatalf("SessionList(%+v): %v", p, err)
		}
		return fmt.Sprint(sessionIDs(got))
	}
	for _, c := range []struct {
		p    store.SessionListParams
		want string
	}{
		{store.SessionListParams{Queue: "q"}, "[q/B q/a q/b q/c]"}, // byte order
		{store.SessionListParams{Queue: "q", Limit: 2}, "[q/B q/a]"},
		{store.SessionListParams{Queue: "q", AfterID: "a", Limit: 2}, "[q/b q/c]"},
		{store.SessionListParams{Queue: "q", AfterID: "c"}, "[]"},
		{store.SessionListParams{Queue: "other"}, "[other/a]"},
		{store.SessionListParams{Queue: "none"}, "[]"},
	} {
		if got := list(c.p); got != c.want {
			t.Errorf("SessionList(%+v) = %s, want %s", c.p, got, c.want)
		}
	}
}

func testQueuePeek(t *testing.T, d store.Driver) {
	ctx := context.Background()
	publishAt(t, d, base, pub("q", "a", "1"), pub("q", "a", "2"), pub("q", "a", "3"), pub("q", "a", "4"))
	ref := acceptNamed(t, d, "q", "a", "h", base)
	receiveOne(t, d, base, ref)
	wantErrs(t, "dead-letter", settleAt(t, d, base, deadLetter(ref, 1, "r", false)), nil)
	peek := func(p store.MessagePeekParams) []*dt.Message {
		got, err := d.Reader().MessagePeek(ctx, &p)
		if err != nil {
			t.Fatalf("MessagePeek(%+v): %v", p, err)
		}
		return got
	}
	wantSeqs(t, "all, dead included", peek(store.MessagePeekParams{Queue: "q", SessionID: "a"}), 1, 2, 3, 4)
	wantSeqs(t, "from 2", peek(store.MessagePeekParams{Queue: "q", SessionID: "a", FromSeq: 2}), 2, 3, 4)
	wantSeqs(t, "from 2, limit 2", peek(store.MessagePeekParams{Queue: "q", SessionID: "a", FromSeq: 2, Limit: 2}), 2, 3)
	wantSeqs(t, "from 5", peek(store.MessagePeekParams{Queue: "q", SessionID: "a", FromSeq: 5}))
	wantSeqs(t, "other session", peek(store.MessagePeekParams{Queue: "q", SessionID: "b"}))
	// Peek changes nothing.
	p := peek(store.MessagePeekParams{Queue: "q", SessionID: "a"})
	if !p[0].Dead || p[1].DeliveryCount != 0 {
		t.Errorf("peeked: %+v, %+v", p[0], p[1])
	}
	checkSession(t, "after peeks", getSession(t, d, "q", "a"), 3, tp(base), false)
}

func testQueueDeadLetters(t *testing.T, d store.Driver) {
	ctx := context.Background()
	publishAt(t, d, base, pub("q", "a", "a1"), pub("q", "a", "a2"), pub("q", "b", "b1"), pub("q", "b", "b2"),
		pub("q", "b", "b3"), pub("q", "c", "c1"), pub("other", "a", "x"))
	now := at(time.Second)
	a := acceptNamed(t, d, "q", "a", "h", now)
	b := acceptNamed(t, d, "q", "b", "h", now)
	c := acceptNamed(t, d, "q", "c", "h", now)
	o := acceptNamed(t, d, "other", "a", "h", now)
	receiveAt(t, d, now, a, b, c, o)
	// a: 1 dead, blocked. b: 1 dead (skip), 2 completed, 3 dead (skip). c: 1 dead, blocked, nothing after it.
	wantErrs(t, "dead-letter", settleAt(t, d, now, deadLetter(a, 1, "ra", true), deadLetter(b, 1, "rb1", false),
		complete(b, 2), deadLetter(b, 3, "rb3", false), deadLetter(c, 1, "rc", true), deadLetter(o, 1, "ro", false)),
		nil, nil, nil, nil, nil, nil)
	checkSession(t, "c", getSession(t, d, "q", "c"), 0, nil, true)

	dl := func(p store.DeadLetterListParams) string {
		got, err := d.Reader().DeadLetterList(ctx, &p)
		if err != nil {
			t.Fatalf("DeadLetterList(%+v): %v", p, err)
		}
		var out []string
		for _, m := range got {
			if !m.Dead || m.DeadAt == nil || !m.DeadAt.Equal(now) {
				t.Errorf("listed message %+v", m)
			}
			out = append(out, fmt.Sprintf("%s/%d:%s", m.SessionID, m.Seq, m.DeadReason))
		}
		return fmt.Sprint(out)
	}
	for _, tc := range []struct {
		p    store.DeadLetterListParams
		want string
	}{
		{store.DeadLetterListParams{Queue: "q"}, "[a/1:ra b/1:rb1 b/3:rb3 c/1:rc]"},
		{store.DeadLetterListParams{Queue: "q", Limit: 2}, "[a/1:ra b/1:rb1]"},
		{store.DeadLetterListParams{Queue: "q", AfterSessionID: "b", AfterSeq: 1, Limit: 2}, "[b/3:rb3 c/1:rc]"},
		{store.DeadLetterListParams{Queue: "q", SessionID: "b"}, "[b/1:rb1 b/3:rb3]"},
		{store.DeadLetterListParams{Queue: "q", SessionID: "b", AfterSessionID: "b", AfterSeq: 1}, "[b/3:rb3]"},
		{store.DeadLetterListParams{Queue: "other"}, "[a/1:ro]"},
		{store.DeadLetterListParams{Queue: "none"}, "[]"},
	} {
		if got := dl(tc.p); got != tc.want {
			t.Errorf("DeadLetterList(%+v) = %s, want %s", tc.p, got, tc.want)
		}
	}

	op := func(f func(ctx context.Context, x store.Executor) error) error { return d.InTx(ctx, f) }
	resubmit := func(q, s string, seq int64, now time.Time) error {
		return op(func(ctx context.Context, x store.Executor) error {
			return x.DeadLetterResubmit(ctx, &store.DeadLetterResubmitParams{Queue: q, SessionID: s, Seq: seq, Now: now})
		})
	}
	discard := func(q, s string, seq int64, now time.Time) error {
		return op(func(ctx context.Context, x store.Executor) error {
			return x.DeadLetterDiscard(ctx, &store.DeadLetterDiscardParams{Queue: q, SessionID: s, Seq: seq, Now: now})
		})
	}
	// Only dead messages.
	wantErrIs(t, resubmit("q", "a", 2, now), store.ErrNotFound, "resubmit a live message")
	wantErrIs(t, resubmit("q", "a", 9, now), store.ErrNotFound, "resubmit a missing message")
	wantErrIs(t, discard("q", "a", 2, now), store.ErrNotFound, "discard a live message")
	wantErrIs(t, discard("q", "zz", 1, now), store.ErrNotFound, "discard in a missing session")
	wantSeqs(t, "a untouched", peekAll(t, d, "q", "a"), 1, 2)

	// Resubmit: the message is the head again, the session unblocked.
	later := at(time.Minute)
	if err := resubmit("q", "a", 1, later); err != nil {
		t.Fatal(err)
	}
	checkSession(t, "a after resubmit", getSession(t, d, "q", "a"), 2, tp(later), false)
	checkEqual(t, "resubmitted message", peekAll(t, d, "q", "a")[0], &dt.Message{Queue: "q", SessionID: "a", Seq: 1,
		Body: []byte("a1"), AvailableAt: later, EnqueuedAt: base})
	// (The locks taken at +1s have expired.)
	got := acceptAt(t, d, store.SessionAcceptParams{Queue: "q", Holder: "h2", Now: later, Limit: 10})
	if fmt.Sprint(sessionIDs(got)) != "[q/a]" {
		t.Fatalf("accept after resubmit = %v, want [q/a]", sessionIDs(got))
	}
	if m := receiveOne(t, d, later, sref(got[0])); m.Seq != 1 || m.DeliveryCount != 1 {
		t.Errorf("resubmitted message received as seq %d count %d", m.Seq, m.DeliveryCount)
	}
	// Resubmit under skip, with the session emptied meanwhile.
	if err := resubmit("q", "b", 3, later); err != nil {
		t.Fatal(err)
	}
	checkSession(t, "b after resubmit", getSession(t, d, "q", "b"), 1, tp(later), false)

	// Discard: gone, and the session unblocked.
	if err := discard("q", "c", 1, later); err != nil {
		t.Fatal(err)
	}
	checkSession(t, "c after discard", getSession(t, d, "q", "c"), 0, nil, false)
	wantSeqs(t, "c after discard", peekAll(t, d, "q", "c"))
	if got := dl(store.DeadLetterListParams{Queue: "q"}); got != "[b/1:rb1]" {
		t.Errorf("dead letters left: %s", got)
	}
	wantErrIs(t, discard("q", "c", 1, later), store.ErrNotFound, "discard twice")
	// A blocked session with more messages is unblocked by a discard and
	// goes on with them.
	blockedSession(t, d, "q", "d", later)
	if err := discard("q", "d", 1, later); err != nil {
		t.Fatal(err)
	}
	checkSession(t, "d after discard", getSession(t, d, "q", "d"), 1, tp(later), false)
}

func testQueueDedupeDeleteExpired(t *testing.T, d store.Driver) {
	inTx(t, d, func(ctx context.Context, x store.Executor) error {
		return x.QueuePut(ctx, &store.QueuePutParams{Queue: &dt.Queue{Name: "q", MaxDeliveryCount: 5, PoisonPolicy: dt.PoisonBlock,
			DedupeWindow: time.Minute, LockDuration: time.Minute, CreatedAt: base, UpdatedAt: base}})
	})
	publishAt(t, d, base, withID(pub("q", "a", "1"), "m1"))
	publishAt(t, d, at(30*time.Second), withID(pub("q", "a", "2"), "m2"))
	publishAt(t, d, at(50*time.Second), withID(pub("q", "b", "3"), "m3"))
	del := func(now time.Time, limit int) int {
		var n int
		inTx(t, d, func(ctx context.Context, x store.Executor) error {
			var err error
			n, err = x.DedupeDeleteExpired(ctx, &store.DedupeDeleteExpiredParams{Now: now, Limit: limit})
			return err
		})
		return n
	}
	if n := del(at(59*time.Second), 10); n != 0 {
		t.Errorf("deleted %d before any expired", n)
	}
	if n := del(at(time.Minute), 10); n != 1 { // expires exactly now
		t.Errorf("deleted %d at the first expiry, want 1", n)
	}
	if n := del(at(2*time.Minute), 1); n != 1 {
		t.Errorf("deleted %d with limit 1", n)
	}
	// m3 is still remembered.
	wantPublished(t, "m3 before cleanup", publishAt(t, d, at(109*time.Second), withID(pub("q", "b", "x"), "m3")), -1)
	if n := del(at(2*time.Minute), 10); n != 1 {
		t.Errorf("deleted %d, want the last 1", n)
	}
	if n := del(at(time.Hour), 10); n != 0 {
		t.Errorf("deleted %d from an empty table", n)
	}
	// The messages themselves stay.
	wantSeqs(t, "a", peekAll(t, d, "q", "a"), 1, 2)
}

// ---- concurrency ----

// Producers publish to one session in concurrent transactions, some rolled
// back after publishing. Sequence numbers must be exactly 1..committed, with
// no gap, and follow each producer's commit order.
func testQueueConcurrentPublish(t *testing.T, d store.Driver) {
	const (
		producers = 8
		txs       = 25
	)
	ctx := context.Background()
	publishAt(t, d, base, pub("q", "s", "seed")) // seq 1
	errRollback := errors.New("roll back")
	var (
		wg        sync.WaitGroup
		start     = make(chan struct{})
		errs      = make([]error, producers)
		committed = make([][]string, producers) // bodies in commit order
	)
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			k := 0
			for j := range txs {
				n := 1 + (p+j)%3
				var bodies []string
				msgs := []store.PublishMessage{pub("q", fmt.Sprintf("own-%d", p), "x")}
				for range n {
					b := fmt.Sprintf("p%d-%03d", p, k)
					k++
					bodies = append(bodies, b)
					msgs = append(msgs, pub("q", "s", b))
				}
				rollback := (p+j)%4 == 0
				err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
					res, err := x.MessagePublishMany(ctx, &store.MessagePublishManyParams{Messages: msgs, Now: base})
					if err != nil {
						return err
					}
					for i := 2; i < len(res); i++ {
						if res[i].Seq != res[i-1].Seq+1 {
							return fmt.Errorf("seqs of one call not consecutive: %+v", res)
						}
					}
					// More work in the same transaction widens the window
					// between taking seqs and committing.
					if _, err := x.SessionGet(ctx, &store.SessionGetParams{Queue: "q", SessionID: "s"}); err != nil {
						return err
					}
					if _, err := x.QueueList(ctx, &store.QueueListParams{}); err != nil {
						return err
					}
					if rollback {
						return errRollback
					}
					return nil
				})
				switch {
				case rollback && errors.Is(err, errRollback):
				case err != nil:
					errs[p] = err
					return
				default:
					committed[p] = append(committed[p], bodies...)
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	msgs := peekAll(t, d, "q", "s")
	total := 1
	for _, c := range committed {
		total += len(c)
	}
	if len(msgs) != total {
		t.Fatalf("%d messages stored, want %d committed", len(msgs), total)
	}
	seqOf := map[string]int64{}
	for i, m := range msgs {
		if m.Seq != int64(i+1) {
			t.Fatalf("seq %d at position %d: gap or duplicate in %v", m.Seq, i, msgSeqs(msgs))
		}
		seqOf[string(m.Body)] = m.Seq
	}
	for p, bodies := range committed {
		for i, b := range bodies {
			s, ok := seqOf[b]
			if !ok {
				t.Fatalf("committed message %s missing", b)
			}
			if i > 0 && s <= seqOf[bodies[i-1]] {
				t.Errorf("producer %d: %s got seq %d, not after %s (seq %d), committed before it", p, b, s,
					bodies[i-1], seqOf[bodies[i-1]])
			}
		}
	}
	s := getSession(t, d, "q", "s")
	if s.NextSeq != int64(total) || s.Pending != total {
		t.Errorf("session: next seq %d, pending %d; want %d", s.NextSeq, s.Pending, total)
	}
}

// Producers race, each publishing, in its own transactions, one message to
// each of two sessions that other producers write to as well, most of them
// new when the round starts: a session one producer finds missing is
// created by another meanwhile. One call locks (or creates) its sessions in
// one order, so no call deadlocks with another: every call commits, and
// every session holds exactly its messages, numbered 1..n.
func testQueueConcurrentNewSessions(t *testing.T, d store.Driver) {
	const (
		producers = 12
		rounds    = 100
		width     = 4 // sessions per round
	)
	ctx := context.Background()
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		failed []error
		ready  = make([]chan struct{}, rounds) // closed when every producer reached round r
		left   = make([]sync.WaitGroup, rounds)
		stored = map[string]int{} // committed messages per session
	)
	for r := range rounds {
		ready[r] = make(chan struct{})
		left[r].Add(producers)
		go func() { left[r].Wait(); close(ready[r]) }()
	}
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				// Start each round together, so the sessions are new to all.
				left[r].Done()
				<-ready[r]
				// Pairs overlap in both orders: producer p writes sessions p
				// and p+1+r (mod width), listed one way or the other.
				a, b := p%width, (p+1+r%(width-1))%width
				if p%2 == 1 {
					a, b = b, a
				}
				sa, sb := fmt.Sprintf("r%02d-%d", r, a), fmt.Sprintf("r%02d-%d", r, b)
				msgs := []store.PublishMessage{pub("q", sa, fmt.Sprintf("p%02d-a", p)), pub("q", sb, fmt.Sprintf("p%02d-b", p))}
				err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
					_, err := x.MessagePublishMany(ctx, &store.MessagePublishManyParams{Messages: msgs, Now: base})
					return err
				})
				mu.Lock()
				if err != nil {
					failed = append(failed, fmt.Errorf("producer %d, round %d: %w", p, r, err))
				} else {
					stored[sa]++
					stored[sb]++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(failed) > 0 {
		t.Fatalf("%d of %d publishes failed; the first: %v", len(failed), producers*rounds, failed[0])
	}
	sessions, err := d.Reader().SessionList(ctx, &store.SessionListParams{Queue: "q"})
	if err != nil {
		t.Fatal(err)
	}
	if len(sessions) != len(stored) {
		t.Errorf("%d sessions, want %d", len(sessions), len(stored))
	}
	for _, s := range sessions {
		ms := peekAll(t, d, "q", s.ID)
		if len(ms) != stored[s.ID] {
			t.Errorf("session %s: %d messages, want %d", s.ID, len(ms), stored[s.ID])
		}
		for i, m := range ms {
			if m.Seq != int64(i+1) {
				t.Fatalf("session %s: seqs %v, want 1..%d", s.ID, msgSeqs(ms), len(ms))
			}
		}
		if s.NextSeq != int64(len(ms)) || s.Pending != len(ms) {
			t.Errorf("session %s: next seq %d, pending %d; want %d", s.ID, s.NextSeq, s.Pending, len(ms))
		}
	}
}

// Concurrent transactions publish the same message ID, each to a session of
// its own (so nothing but the ID orders them): exactly one stores it (or, if
// it rolls back, a later one), every other committed publish is told it is a
// duplicate, and the duplicates' sessions are never created.
func testQueueConcurrentDuplicates(t *testing.T, d store.Driver) {
	const n = 12
	ctx := context.Background()
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		results = make([]*store.PublishResult, n) // committed results
		errs    = make([]error, n)
	)
	errRollback := errors.New("roll back")
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			var r store.PublishResult
			err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
				res, err := x.MessagePublishMany(ctx, &store.MessagePublishManyParams{Now: base, Messages: []store.PublishMessage{
					withID(pub("q", fmt.Sprintf("d-%02d", i), "body"), "the-id")}})
				if err != nil {
					return err
				}
				r = res[0]
				if _, err := x.QueueList(ctx, &store.QueueListParams{}); err != nil { // widen the window
					return err
				}
				if i%3 == 0 {
					return errRollback
				}
				return nil
			})
			switch {
			case i%3 == 0 && errors.Is(err, errRollback):
			case err != nil:
				errs[i] = err
			default:
				results[i] = &r
			}
		}()
	}
	close(start)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	sessions, err := d.Reader().SessionList(ctx, &store.SessionListParams{Queue: "q"})
	if err != nil {
		t.Fatal(err)
	}
	if len(sessions) != 1 {
		t.Fatalf("sessions %v: want exactly the one that stored the ID", sessionIDs(sessions))
	}
	var winner int
	if _, err := fmt.Sscanf(sessions[0].ID, "d-%d", &winner); err != nil {
		t.Fatal(err)
	}
	if r := results[winner]; r == nil || r.Duplicate || r.Seq != 1 {
		t.Errorf("publish %d stored the ID, but its result is %+v", winner, r)
	}
	wantSeqs(t, "stored", peekAll(t, d, "q", sessions[0].ID), 1)
	for i, r := range results {
		if i != winner && r != nil && (!r.Duplicate || r.Seq != 1) {
			t.Errorf("publish %d committed with result %+v, want a duplicate of seq 1", i, r)
		}
	}
}

// A transaction publishing to one session and still open holds that
// session's sequence numbers, and nothing else: other sessions are published
// to, accepted, received and settled meanwhile, and accept-next skips the
// locked session instead of waiting for it. SQLite has one writer, so there
// every write waits; the test needs a driver with row locks.
func testQueueOpenPublisher(t *testing.T, d store.Driver) {
	if d.Name() == "sqlite" {
		t.Skip("SQLite serializes all writers: an open write transaction blocks every other")
	}
	ctx := context.Background()
	publishAt(t, d, base, pub("q", "a", "a1"), pub("q", "c", "c1"))
	var (
		published = make(chan int64, 1)
		release   = make(chan struct{})
		aDone     = make(chan error, 1)
	)
	go func() {
		aDone <- d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
			res, err := x.MessagePublishMany(ctx, &store.MessagePublishManyParams{Messages: []store.PublishMessage{pub("q", "a", "a2")}, Now: base})
			if err != nil {
				published <- -1
				return err
			}
			published <- res[0].Seq
			<-release
			return nil
		})
	}()
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	if seq := <-published; seq != 2 {
		t.Fatalf("open publisher got seq %d (err: %v)", seq, <-aDone)
	}

	// A second publisher to the same session waits for the first.
	cDone := make(chan []store.PublishResult, 1)
	cErr := make(chan error, 1)
	go func() {
		var res []store.PublishResult
		err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
			var err error
			res, err = x.MessagePublishMany(ctx, &store.MessagePublishManyParams{Messages: []store.PublishMessage{pub("q", "a", "a3")}, Now: base})
			return err
		})
		cErr <- err
		cDone <- res
	}()

	others := make(chan error, 1)
	go func() {
		others <- func() error {
			var accepted []*dt.Session
			err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
				if _, err := x.MessagePublishMany(ctx, &store.MessagePublishManyParams{Messages: []store.PublishMessage{pub("q", "b", "b1")}, Now: base}); err != nil {
					return err
				}
				var err error
				accepted, err = x.SessionAccept(ctx, &store.SessionAcceptParams{Queue: "q", Holder: "h", Now: at(time.Second), Limit: 10})
				return err
			})
			if err != nil {
				return err
			}
			// a is locked by the open publisher: skipped, not waited for.
			if got := fmt.Sprint(sessionIDs(accepted)); got != "[q/b q/c]" {
				return fmt.Errorf("accept while a is being published to = %s, want [q/b q/c]", got)
			}
			return d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
				ref := sref(accepted[1])
				msgs, errs, err := x.MessageReceiveMany(ctx, &store.MessageReceiveManyParams{Refs: []store.SessionRef{ref}, Now: at(time.Second)})
				if err != nil || errs[0] != nil || msgs[0] == nil {
					return fmt.Errorf("receive c: %v %v %v", msgs, errs, err)
				}
				errs, err = x.MessageSettleMany(ctx, &store.MessageSettleManyParams{Settles: []store.MessageSettle{complete(ref, 1)}, Now: at(time.Second)})
				if err != nil || errs[0] != nil {
					return fmt.Errorf("complete c: %v %v", errs, err)
				}
				if _, err := x.SessionGet(ctx, &store.SessionGetParams{Queue: "q", SessionID: "c"}); err != nil {
					return err
				}
				_, err = d.Reader().SessionGet(ctx, &store.SessionGetParams{Queue: "q", SessionID: "a"})
				return err
			})
		}()
	}()
	select {
	case err := <-others:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("work on other sessions waited for an open publisher of session a")
	}
	select {
	case err := <-cErr:
		t.Fatalf("a second publisher to session a finished while the first was open: %v", err)
	default:
	}
	close(release)
	if err := <-aDone; err != nil {
		t.Fatal(err)
	}
	if err := <-cErr; err != nil {
		t.Fatal(err)
	}
	if res := <-cDone; res[0].Seq != 3 {
		t.Errorf("second publisher got seq %d, want 3", res[0].Seq)
	}
	wantSeqs(t, "a", peekAll(t, d, "q", "a"), 1, 2, 3)
	got := acceptAt(t, d, store.SessionAcceptParams{Queue: "q", Holder: "h2", Now: at(2 * time.Second), Limit: 10})
	if fmt.Sprint(sessionIDs(got)) != "[q/a]" {
		t.Errorf("accept after the publisher committed = %v", sessionIDs(got))
	}
}

// testQueueHeadAfterSkipsAndResubmit follows the head of a session through
// completes and skip-policy dead-letters (gaps of dead messages below the
// head), then a dead letter resubmitted below the current head, held and not
// held: whatever a driver keeps to find the head faster must let the
// resubmitted message be the head again.
func testQueueHeadAfterSkipsAndResubmit(t *testing.T, d store.Driver) {
	ctx := context.Background()
	var msgs []store.PublishMessage
	for i := 1; i <= 7; i++ {
		msgs = append(msgs, pub("q", "s", fmt.Sprint(i)))
	}
	publishAt(t, d, base, msgs...)
	now := at(time.Second)
	ref := acceptNamed(t, d, "q", "s", "h", now)
	if m := receiveOne(t, d, now, ref); m.Seq != 1 {
		t.Fatalf("first receive: seq %d", m.Seq)
	}
	// 1 completed, 2 dead (skip), 3 completed, 4 dead (skip): each settle
	// receives the next head.
	for _, st := range []struct {
		s    store.MessageSettle
		next int64
	}{
		{complete(ref, 1), 2}, {deadLetter(ref, 2, "r2", false), 3}, {complete(ref, 3), 4},
		{deadLetter(ref, 4, "r4", false), 5},
	} {
		got, errs := settleReceiveAt(t, d, now, next(st.s))
		wantErrs(t, fmt.Sprintf("settle %d", st.s.Seq), errs, nil)
		if got[0] == nil || got[0].Seq != st.next {
			t.Fatalf("settle %d: received %v, want seq %d", st.s.Seq, got[0], st.next)
		}
	}
	checkSession(t, "after the gaps", getSession(t, d, "q", "s"), 3, tp(base), false)

	resubmit := func(seq int64, now time.Time) {
		t.Helper()
		if err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
			return x.DeadLetterResubmit(ctx, &store.DeadLetterResubmitParams{Queue: "q", SessionID: "s", Seq: seq, Now: now})
		}); err != nil {
			t.Fatalf("resubmit %d: %v", seq, err)
		}
	}
	// Held (the lock taken at +1s lasts the default 30s): 2 comes back
	// below the head (5); it is the head again.
	later := at(2 * time.Second)
	resubmit(2, later)
	wantErrs(t, "complete the old head", settleAt(t, d, later, complete(ref, 5)), store.ErrNotHead)
	if m := receiveOne(t, d, later, ref); m.Seq != 2 || m.DeliveryCount != 1 {
		t.Fatalf("receive after resubmit: seq %d count %d, want 2, 1", m.Seq, m.DeliveryCount)
	}
	got, errs := settleReceiveAt(t, d, later, next(complete(ref, 2)))
	wantErrs(t, "complete the resubmitted", errs, nil)
	if got[0] == nil || got[0].Seq != 5 {
		t.Fatalf("after the resubmitted: received %v, want seq 5", got[0])
	}
	wantErrs(t, "complete 5", settleAt(t, d, later, complete(ref, 5)), nil)
	wantErrs(t, "release", releaseAt(t, d, later, ref), nil)
	checkSession(t, "after 5", getSession(t, d, "q", "s"), 2, tp(base), false)

	// Not held: 4 comes back below the head (6); accept and receive take it.
	last := at(time.Hour)
	resubmit(4, last)
	checkSession(t, "after resubmitting 4", getSession(t, d, "q", "s"), 3, tp(last), false)
	acc := acceptAt(t, d, store.SessionAcceptParams{Queue: "q", Holder: "h2", Now: last, Limit: 10})
	if fmt.Sprint(sessionIDs(acc)) != "[q/s]" {
		t.Fatalf("accept after resubmit = %v", sessionIDs(acc))
	}
	ref = sref(acc[0])
	for _, want := range []int64{4, 6, 7} {
		m := receiveOne(t, d, last, ref)
		if m.Seq != want {
			t.Fatalf("receive: seq %d, want %d", m.Seq, want)
		}
		wantErrs(t, fmt.Sprintf("complete %d", want), settleAt(t, d, last, complete(ref, want)), nil)
	}
	if got, _ := receiveAt(t, d, last, ref); got[0] != nil {
		t.Errorf("received %v from an emptied session", got[0])
	}
	wantErrs(t, "release at the end", releaseAt(t, d, last, ref), nil)
	checkSession(t, "at the end", getSession(t, d, "q", "s"), 0, nil, false)
	wantSeqs(t, "left", peekAll(t, d, "q", "s"))
}
