package convoy_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drover-run/drover/convoy"
	"github.com/drover-run/drover/store"
)

// fifoChecker records every handler call and checks the Sequential Convoy
// invariants: per session, calls never overlap, and each call's message is
// the one after the last completed one (a redelivery of a failed message
// repeats it); bodies follow the publish order.
type fifoChecker struct {
	mu     sync.Mutex
	inUse  map[string]*atomic.Bool
	lastOK map[string]int64
	calls  int
	done   int
	errs   []string
}

func newFIFOChecker() *fifoChecker {
	return &fifoChecker{inUse: map[string]*atomic.Bool{}, lastOK: map[string]int64{}}
}

func (f *fifoChecker) fail(format string, args ...any) {
	f.errs = append(f.errs, fmt.Sprintf(format, args...))
}

// handle wraps the handler under test.
func (f *fifoChecker) handle(ctx context.Context, m *convoy.ReceivedMessage, work func() error) error {
	f.mu.Lock()
	flag := f.inUse[m.SessionID]
	if flag == nil {
		flag = &atomic.Bool{}
		f.inUse[m.SessionID] = flag
	}
	f.calls++
	if want := f.lastOK[m.SessionID] + 1; m.Seq != want {
		f.fail("session %s: handed seq %d, want %d", m.SessionID, m.Seq, want)
	}
	if want := fmt.Sprintf("%s:%d", m.SessionID, m.Seq); string(m.Body) != want {
		f.fail("session %s seq %d: body %q, want %q", m.SessionID, m.Seq, m.Body, want)
	}
	f.mu.Unlock()
	if !flag.CompareAndSwap(false, true) {
		f.mu.Lock()
		f.fail("session %s: seq %d handled while another message of the session is in a handler", m.SessionID, m.Seq)
		f.mu.Unlock()
		return errors.New("overlap")
	}
	err := work()
	flag.Store(false)
	if err == nil {
		f.mu.Lock()
		f.lastOK[m.SessionID] = m.Seq
		f.done++
		f.mu.Unlock()
	}
	return err
}

func (f *fifoChecker) completed() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.done
}

func (f *fifoChecker) check(t *testing.T, sessions []string, n int64) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, e := range f.errs {
		if i == 20 {
			t.Errorf("… %d more", len(f.errs)-20)
			break
		}
		t.Error(e)
	}
	for _, s := range sessions {
		if f.lastOK[s] != n {
			t.Errorf("session %s: last completed %d, want %d", s, f.lastOK[s], n)
		}
	}
}

// Many sessions, several processors in two "processes" (clients on their own
// drivers), producers publishing while they run, handlers failing now and
// then: every session is processed in order, one message at a time, each
// message completed once.
func TestProcessorsKeepFIFOPerSessionUnderConcurrency(t *testing.T) {
	t.Parallel()
	drivers(t, func(t *testing.T, d store.Driver) {
		const (
			sessions = 60
			each     = 25
		)
		ctx := ctxT(t)
		c1 := newClient(t, d, withID("proc-1"))
		c2 := newClient(t, secondDriver(t, d), withID("proc-2"))
		chk := newFIFOChecker()
		var failures atomic.Int64
		handler := func(ctx context.Context, m *convoy.ReceivedMessage) error {
			return chk.handle(ctx, m, func() error {
				if rand.IntN(20) == 0 {
					failures.Add(1)
					return errors.New("transient")
				}
				return nil
			})
		}
		opts := convoy.ProcessorOptions{MaxSessions: 8, IdleTimeout: 20 * time.Millisecond, AbandonDelay: -1}
		var procs []*convoy.Processor
		for _, c := range []*convoy.Client{c1, c1, c2} {
			p := must[*convoy.Processor](t)(convoy.NewProcessor(c, "q", handler, opts))
			startProcessor(t, p)
			procs = append(procs, p)
		}
		if err := c1.SetQueuePolicy(ctx, convoy.QueuePolicy{Name: "q", MaxDeliveryCount: 1000}); err != nil {
			t.Fatal(err)
		}
		// Producers: each session's messages in order, sessions interleaved,
		// in batches, while the processors run.
		var ids []string
		for i := range sessions {
			ids = append(ids, fmt.Sprintf("s%03d", i))
		}
		var wg sync.WaitGroup
		for w := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := []*convoy.Client{c1, c2}[w%2]
				for i := 1; i <= each; i++ {
					var batch []convoy.Message
					for j := w; j < sessions; j += 3 {
						batch = append(batch, convoy.Message{SessionID: ids[j], Body: fmt.Appendf(nil, "%s:%d", ids[j], i)})
					}
					if _, err := c.Publish(ctx, "q", batch...); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		waitFor(t, "every message completed", func() bool { return chk.completed() == sessions*each })
		for _, p := range procs {
			if err := p.Stop(ctx); err != nil {
				t.Fatal(err)
			}
		}
		chk.check(t, ids, each)
		var total convoy.ProcessorStats
		for _, p := range procs {
			st := p.Stats()
			total.Completed += st.Completed
			total.Abandoned += st.Abandoned
			total.LockLost += st.LockLost
		}
		if total.Completed != sessions*each || total.Abandoned != failures.Load() || total.LockLost != 0 {
			t.Errorf("stats: %+v, %d handler failures", total, failures.Load())
		}
		for _, id := range ids {
			if s := session(t, c1, "q", id); s.Pending != 0 || s.LockHolder != "" || s.NextSeq != each {
				t.Errorf("session %s: pending %d holder %q next %d", id, s.Pending, s.LockHolder, s.NextSeq)
			}
		}
		t.Logf("%d handler failures; processors accepted %d/%d/%d sessions", failures.Load(),
			procs[0].Stats().Accepted, procs[1].Stats().Accepted, procs[2].Stats().Accepted)
	})
}

// A processor whose store fails stops a slow handler (cancels its context)
// before its lock expires, so no other consumer can have the session while
// the handler runs; the handler's settle is rejected with ErrLockLost; the
// message goes to the next consumer.
func TestProcessorStopsAHandlerWhoseLockIsLost(t *testing.T) {
	t.Parallel()
	drivers(t, func(t *testing.T, d store.Driver) {
		clk := fakeClock()
		c := newClient(t, d, withClock(clk))
		ctx := ctxT(t)
		const lock = time.Second
		if err := c.SetQueuePolicy(ctx, convoy.QueuePolicy{Name: "q", LockDuration: lock}); err != nil {
			t.Fatal(err)
		}
		publish(t, c, "q", msgs("s", 1)...)
		var (
			outage   atomic.Bool
			inUse    atomic.Bool
			overlap  atomic.Bool
			started  = make(chan int64, 10)
			returned = make(chan struct{}, 10)
			errs     errorLog
		)
		p := must[*convoy.Processor](t)(convoy.NewProcessor(c, "q", func(ctx context.Context, m *convoy.ReceivedMessage) error {
			if !inUse.CompareAndSwap(false, true) {
				overlap.Store(true)
			}
			defer func() { returned <- struct{}{} }()
			defer inUse.Store(false)
			started <- m.Seq
			<-ctx.Done() // a slow handler, stopped only by its context
			return ctx.Err()
		}, convoy.ProcessorOptions{OnError: errs.add}))
		convoy.SetRoundHook(p, func() error {
			if outage.Load() {
				return errors.New("simulated store outage")
			}
			return nil
		})
		startProcessor(t, p)
		recv(t, "the handler to start", started)
		outage.Store(true)
		// Most of the lock passes without a renewal: the processor gives the
		// session up while the lock is still its own.
		clk.Advance(lock * 9 / 10)
		recv(t, "the handler to return", returned)
		c2 := newClient(t, d, withClock(clk), withID("other"))
		if _, err := c2.AcceptSession(ctx, "q", "s"); !errors.Is(err, convoy.ErrSessionLocked) {
			t.Fatalf("accept while the first lock is unexpired: %v, want ErrSessionLocked", err)
		}
		waitFor(t, "the rejected settle", func() bool { return errs.count(convoy.ErrLockLost) >= 2 })
		// The lock expires; another consumer takes the session and the
		// message, delivered again.
		clk.Advance(lock)
		r := must[*convoy.SessionReceiver](t)(c2.AcceptSession(ctx, "q", "s"))
		if !inUse.CompareAndSwap(false, true) {
			t.Fatal("the first handler is still running")
		}
		m := must[*convoy.ReceivedMessage](t)(r.Receive(ctx))
		if m.Seq != 1 || m.DeliveryCount != 2 {
			t.Fatalf("taken over: seq %d count %d", m.Seq, m.DeliveryCount)
		}
		if err := r.Complete(ctx, m, nil); err != nil {
			t.Fatal(err)
		}
		inUse.Store(false)
		if err := r.Close(ctx); err != nil {
			t.Fatal(err)
		}
		outage.Store(false)
		if overlap.Load() {
			t.Fatal("handlers overlapped")
		}
		if st := p.Stats(); st.Completed != 0 || st.LockLost != 1 || st.RoundErrors == 0 {
			t.Fatalf("stats %+v", st)
		}
		if ms := peek(t, c, "q", "s"); len(ms) != 0 {
			t.Fatalf("left: %v", ms)
		}
	})
}

// When the lock expires under a running handler, the processor cancels the
// handler and rejects its settle, even if the handler then claims success.
// It may accept the session again, but hands its message out again only once
// the stale handler has returned.
func TestProcessorLockExpiresUnderAHandler(t *testing.T) {
	t.Parallel()
	drivers(t, func(t *testing.T, d store.Driver) {
		clk := fakeClock()
		c := newClient(t, d, withClock(clk))
		ctx := ctxT(t)
		const lock = time.Second
		if err := c.SetQueuePolicy(ctx, convoy.QueuePolicy{Name: "q", LockDuration: lock}); err != nil {
			t.Fatal(err)
		}
		publish(t, c, "q", msgs("s", 1)...)
		var (
			inUse     atomic.Bool
			overlap   atomic.Bool
			cancelled = make(chan struct{})
			release   = make(chan struct{})
			second    = make(chan int, 1)
			errs      errorLog
		)
		p := must[*convoy.Processor](t)(convoy.NewProcessor(c, "q", func(ctx context.Context, m *convoy.ReceivedMessage) error {
			if !inUse.CompareAndSwap(false, true) {
				overlap.Store(true)
			}
			defer inUse.Store(false)
			if m.DeliveryCount > 1 {
				second <- m.DeliveryCount
				return nil
			}
			<-ctx.Done()
			close(cancelled)
			<-release
			return nil // claims success: must be rejected all the same
		}, convoy.ProcessorOptions{OnError: errs.add}))
		startProcessor(t, p)
		waitFor(t, "the first delivery", func() bool { return inUse.Load() })
		clk.Advance(3 * lock)
		recv(t, "the handler's context to be cancelled", cancelled)
		select {
		case n := <-second:
			t.Fatalf("delivery %d handed out while the stale handler runs", n)
		case <-time.After(50 * time.Millisecond):
		}
		close(release)
		if n := recv(t, "the second delivery", second); n != 2 {
			t.Fatalf("second delivery has count %d", n)
		}
		waitFor(t, "the completion", func() bool { return p.Stats().Completed == 1 })
		if overlap.Load() {
			t.Fatal("handlers of one session overlapped")
		}
		if errs.count(convoy.ErrLockLost) < 2 {
			t.Fatalf("errors reported: %v (want the drop and the rejected settle)", errs.all())
		}
		if ms := peek(t, c, "q", "s"); len(ms) != 0 {
			t.Fatalf("left: %v", ms)
		}
	})
}

// Handler outcomes: nil completes, an error abandons (delivered again after
// the delay), DeadLetterError dead-letters; state set by a handler commits
// with the completion.
func TestProcessorSettlesByHandlerOutcome(t *testing.T) {
	t.Parallel()
	drivers(t, func(t *testing.T, d store.Driver) {
		c := newClient(t, d)
		ctx := ctxT(t)
		if err := c.SetQueuePolicy(ctx, convoy.QueuePolicy{Name: "q", Poison: convoy.PoisonSkip}); err != nil {
			t.Fatal(err)
		}
		publish(t, c, "q", msgs("s", 4)...)
		var (
			mu    sync.Mutex
			calls []string
			times = map[int64][]time.Time{}
		)
		p := must[*convoy.Processor](t)(convoy.NewProcessor(c, "q", func(ctx context.Context, m *convoy.ReceivedMessage) error {
			mu.Lock()
			defer mu.Unlock()
			calls = append(calls, fmt.Sprintf("%d/%d/%s", m.Seq, m.DeliveryCount, m.SessionState()))
			times[m.Seq] = append(times[m.Seq], time.Now())
			switch {
			case m.Seq == 2 && m.DeliveryCount == 1:
				return errors.New("try again")
			case m.Seq == 3:
				return convoy.DeadLetterError(fmt.Errorf("wrapped: %w", errors.New("no such product")))
			}
			m.SetSessionState(fmt.Appendf(nil, "after %d", m.Seq))
			return nil
		}, convoy.ProcessorOptions{AbandonDelay: 40 * time.Millisecond}))
		startProcessor(t, p)
		waitFor(t, "the session to drain", func() bool { return session(t, c, "q", "s").Pending == 0 })
		mu.Lock()
		got := strings.Join(calls, " ")
		retry := times[2][1].Sub(times[2][0])
		mu.Unlock()
		if got != "1/1/ 2/1/after 1 2/2/after 1 3/1/after 2 4/1/after 2" {
			t.Fatalf("calls %s", got)
		}
		if retry < 20*time.Millisecond {
			t.Fatalf("redelivered after %s, want at least half the 40ms abandon delay", retry)
		}
		if st := session(t, c, "q", "s").State; string(st) != "after 4" {
			t.Fatalf("state %q", st)
		}
		dl := must[[]*convoy.StoredMessage](t)(c.DeadLetters(ctx, "q", "s", convoy.DeadLetterCursor{}, 0))
		if len(dl) != 1 || dl[0].Seq != 3 || dl[0].DeadReason != "wrapped: no such product" {
			t.Fatalf("dead letters %+v", dl)
		}
	})
}

// A processor releases idle sessions so another one's sessions get their
// turn; MaxHold rotates busy ones.
func TestProcessorReleasesIdleAndLongHeldSessions(t *testing.T) {
	t.Parallel()
	drivers(t, func(t *testing.T, d store.Driver) {
		c := newClient(t, d)
		var (
			mu    sync.Mutex
			order []string
		)
		handler := func(ctx context.Context, m *convoy.ReceivedMessage) error {
			mu.Lock()
			order = append(order, fmt.Sprintf("%s%d", m.SessionID, m.Seq))
			mu.Unlock()
			return nil
		}
		// One slot: the first session must be released when idle for the
		// second to be processed.
		p := must[*convoy.Processor](t)(convoy.NewProcessor(c, "idle", handler, convoy.ProcessorOptions{MaxSessions: 1, IdleTimeout: 10 * time.Millisecond}))
		publish(t, c, "idle", msgs("a", 1)...)
		publish(t, c, "idle", msgs("b", 1)...)
		startProcessor(t, p)
		waitFor(t, "both sessions", func() bool { mu.Lock(); defer mu.Unlock(); return len(order) == 2 })
		waitFor(t, "the idle release", func() bool { return p.Stats().Released == 2 })

		// Two sessions with interleaved backlogs, one slot, MaxHold: the
		// slot rotates (oldest head first) instead of draining a first.
		mu.Lock()
		order = nil
		mu.Unlock()
		for i := 1; i <= 3; i++ {
			publish(t, c, "hold", convoy.Message{SessionID: "a", Body: []byte("x")})
			publish(t, c, "hold", convoy.Message{SessionID: "b", Body: []byte("x")})
		}
		p2 := must[*convoy.Processor](t)(convoy.NewProcessor(c, "hold", handler, convoy.ProcessorOptions{MaxSessions: 1, MaxHold: time.Nanosecond}))
		startProcessor(t, p2)
		waitFor(t, "the backlogs", func() bool { mu.Lock(); defer mu.Unlock(); return len(order) == 6 })
		mu.Lock()
		defer mu.Unlock()
		if got := strings.Join(order, " "); got != "a1 b1 a2 b2 a3 b3" {
			t.Fatalf("order %s", got)
		}
	})
}

// Stop waits for running handlers and settles their messages; a Stop whose
// context ends first cancels them and leaves their messages for later.
func TestProcessorStop(t *testing.T) {
	t.Parallel()
	drivers(t, func(t *testing.T, d store.Driver) {
		c := newClient(t, d)
		ctx := ctxT(t)
		publish(t, c, "q", msgs("s", 2)...)
		started, finish := make(chan struct{}, 2), make(chan struct{})
		p := must[*convoy.Processor](t)(convoy.NewProcessor(c, "q", func(ctx context.Context, m *convoy.ReceivedMessage) error {
			started <- struct{}{}
			select {
			case <-finish:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}, convoy.ProcessorOptions{}))
		if err := p.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if err := p.Start(ctx); !errors.Is(err, convoy.ErrAlreadyStarted) {
			t.Fatalf("second start: %v", err)
		}
		recv(t, "the handler", started)
		stopped := make(chan error, 1)
		go func() { stopped <- p.Stop(ctx) }()
		select {
		case err := <-stopped:
			t.Fatalf("Stop returned (%v) while a handler was running", err)
		case <-time.After(30 * time.Millisecond):
		}
		close(finish)
		if err := recv(t, "Stop", stopped); err != nil {
			t.Fatal(err)
		}
		s := session(t, c, "q", "s")
		if s.Pending != 1 || s.LockHolder != "" {
			t.Fatalf("after a graceful stop: pending %d holder %q (message 1 completed, message 2 not received, session released)", s.Pending, s.LockHolder)
		}

		// Hard stop.
		finish = make(chan struct{})
		if err := p.Start(ctx); err != nil {
			t.Fatal(err)
		}
		recv(t, "the handler", started)
		short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer cancel()
		if err := p.Stop(short); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("hard stop: %v", err)
		}
		s = session(t, c, "q", "s")
		if s.Pending != 1 || s.LockHolder != "" {
			t.Fatalf("after a hard stop: pending %d holder %q", s.Pending, s.LockHolder)
		}
		if ms := peek(t, c, "q", "s"); ms[0].DeliveryCount != 1 {
			t.Fatalf("delivery count %d", ms[0].DeliveryCount)
		}
	})
}

func TestNewProcessorValidates(t *testing.T) {
	t.Parallel()
	c := newClient(t, newTestSQLite(t))
	h := func(context.Context, *convoy.ReceivedMessage) error { return nil }
	cases := []struct {
		queue string
		h     convoy.Handler
		o     convoy.ProcessorOptions
		want  error
	}{
		{"q", nil, convoy.ProcessorOptions{}, convoy.ErrInvalidConfig},
		{"a/b/c", h, convoy.ProcessorOptions{}, convoy.ErrInvalidQueue},
		{"q", h, convoy.ProcessorOptions{MaxSessions: -1}, convoy.ErrInvalidConfig},
		{"q", h, convoy.ProcessorOptions{IdleTimeout: -1}, convoy.ErrInvalidConfig},
		{"q", h, convoy.ProcessorOptions{LockDuration: time.Millisecond}, convoy.ErrInvalidConfig},
	}
	for _, tc := range cases {
		if _, err := convoy.NewProcessor(c, tc.queue, tc.h, tc.o); !errors.Is(err, tc.want) {
			t.Errorf("%q %+v: got %v, want %v", tc.queue, tc.o, err, tc.want)
		}
	}
}

// slowTx is a store whose transactions take a while on the test's clock:
// InTx advances the fake clock by delay before committing, as a long wait
// for the database would.
type slowTx struct {
	store.Driver
	clk   interface{ Advance(time.Duration) }
	delay atomic.Int64
}

func (s *slowTx) InTx(ctx context.Context, fn func(context.Context, store.Executor) error) error {
	return s.Driver.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		if err := fn(ctx, x); err != nil {
			return err
		}
		if d := time.Duration(s.delay.Load()); d > 0 {
			s.clk.Advance(d)
		}
		return nil
	})
}

// A round whose transaction outlasts most of the session lock does not hand
// the message it received to a handler: another consumer may take the
// session any moment. Once rounds are quick again the message is delivered.
func TestProcessorSlowRoundDoesNotDispatch(t *testing.T) {
	t.Parallel()
	drivers(t, func(t *testing.T, d store.Driver) {
		clk := fakeClock()
		slow := &slowTx{Driver: d, clk: clk}
		c := newClient(t, slow, withClock(clk))
		ctx := ctxT(t)
		const lock = time.Second
		if err := c.SetQueuePolicy(ctx, convoy.QueuePolicy{Name: "q", LockDuration: lock}); err != nil {
			t.Fatal(err)
		}
		publish(t, c, "q", msgs("s", 1)...)
		slow.delay.Store(int64(lock))
		var calls atomic.Int64
		var errs errorLog
		p := must[*convoy.Processor](t)(convoy.NewProcessor(c, "q", func(ctx context.Context, m *convoy.ReceivedMessage) error {
			calls.Add(1)
			return nil
		}, convoy.ProcessorOptions{OnError: errs.add}))
		startProcessor(t, p)
		waitFor(t, "a dropped session", func() bool { return errs.count(convoy.ErrLockLost) > 0 })
		if n := calls.Load(); n != 0 {
			t.Fatalf("handler called %d times after rounds that outlasted the lock", n)
		}
		slow.delay.Store(0)
		clk.Advance(2 * lock) // the dropped lock expires; the session is free again
		waitFor(t, "the completion", func() bool { return p.Stats().Completed == 1 })
	})
}
