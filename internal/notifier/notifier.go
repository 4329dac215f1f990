package notifier

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"time"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/clock"
	"github.com/drover-run/drover/store"
)

// Kind says what a Topic is about.
type Kind int

// The kinds of topics.
const (
	// All: anything may have happened (the listener started or stopped
	// listening, or a topic this version does not know); wake every role.
	All Kind = iota
	// Tasks: tasks became claimable.
	Tasks
	// Requests: unclaimed requests wait for the agent Topic.Name.
	Requests
	// Replies: replies wait for the scheduler instance Topic.Name.
	Replies
	// Queue: a session of the queue Topic.Name may have become available.
	Queue
	// Events: history events a webhook may send (final states, alerts)
	// were written.
	Events
)

// Topic is a parsed notification topic.
type Topic struct {
	Kind Kind
	// Name is the agent, scheduler instance or queue the topic concerns;
	// empty for All and Tasks.
	Name string
}

// Wire prefixes of the named topics (store.TopicRequests, store.TopicReplies).
const (
	requestsPrefix = "requests:"
	repliesPrefix  = "replies:"
	queuePrefix    = "queue:"
)

// EventsTopic is the wire form of the Events topic.
const EventsTopic = "events"

// InsertEvents appends events to the history in x and, when a webhook may
// send one of them (dt.WebhookCandidate: a final state or an alert),
// notifies EventsTopic, so dispatchers wake at once instead of at their
// next poll. Other events notify nothing: most transactions write some,
// and a notification serializes commits on PostgreSQL.
func InsertEvents(ctx context.Context, x store.Executor, events []*dt.Event) error {
	if err := x.EventInsertMany(ctx, &store.EventInsertManyParams{Events: events}); err != nil {
		return err
	}
	for _, e := range events {
		if dt.WebhookCandidate(e) {
			if err := store.Notify(ctx, x, &store.NotifyParams{Topic: EventsTopic}); err != nil {
				return fmt.Errorf("notify %s: %w", EventsTopic, err)
			}
			return nil
		}
	}
	return nil
}

// QueueTopic is the wire form of the topic of a session queue.
func QueueTopic(queue string) string { return queuePrefix + queue }

// Parse reads a topic as sent with store.Notify. A topic it does
// not know reads as All, so a newer sender never leaves a role asleep.
func Parse(s string) Topic {
	switch {
	case s == store.TopicTasks:
		return Topic{Kind: Tasks}
	case s == EventsTopic:
		return Topic{Kind: Events}
	case strings.HasPrefix(s, requestsPrefix):
		return Topic{Kind: Requests, Name: s[len(requestsPrefix):]}
	case strings.HasPrefix(s, repliesPrefix):
		return Topic{Kind: Replies, Name: s[len(repliesPrefix):]}
	case strings.HasPrefix(s, queuePrefix):
		return Topic{Kind: Queue, Name: s[len(queuePrefix):]}
	}
	return Topic{Kind: All}
}

// Hub delivers one driver's notifications to this process's subscribers
// over one listening connection, held while anyone subscribes. All hubs
// of one driver share that connection.
type Hub struct {
	listener store.Listener // nil: the driver has no notifications
	key      any            // the registry's key; nil: the hub's own entry
	own      *entry
}

// entry is the listening state of one driver in this process.
type entry struct {
	subs map[*subscription]struct{}
	live bool // the listener listens: notifications arrive (guarded by mu)
	stop context.CancelFunc
	done chan struct{}
}

type subscription struct{ fn func(Topic) }

var (
	// mu guards registry and every entry.
	mu       sync.Mutex
	registry = map[any]*entry{}
)

// For returns a hub of driver d: every hub of the same driver value
// shares one listening connection, so the process listens once.
func For(d store.Driver) *Hub {
	h := &Hub{}
	if l, ok := d.(store.Listener); ok {
		h.listener = l
	}
	if d != nil && reflect.TypeOf(d).Comparable() {
		h.key = d
	} else {
		h.own = &entry{subs: map[*subscription]struct{}{}}
	}
	return h
}

// Listening reports whether the driver delivers notifications at all;
// without them subscribers are never called and roles poll.
func (h *Hub) Listening() bool { return h.listener != nil }

// Live reports whether notifications arrive now: someone subscribes and
// the listening connection listens. While it does, roles need not poll
// for what notifications announce, and poll only slowly as a fallback;
// when it stops, every subscriber gets an All topic, so that a role
// asleep for long wakes and polls again.
func (h *Hub) Live() bool {
	if h.listener == nil {
		return false
	}
	mu.Lock()
	defer mu.Unlock()
	if h.own != nil {
		return h.own.live
	}
	e := registry[h.key]
	return e != nil && e.live
}

// entry returns the hub's entry, creating it; mu must be held.
func (h *Hub) entry() *entry {
	if h.own != nil {
		return h.own
	}
	e := registry[h.key]
	if e == nil {
		e = &entry{subs: map[*subscription]struct{}{}}
		registry[h.key] = e
	}
	return e
}

// Subscribe calls fn with every topic another process notifies (and with
// an All topic after the listening connection is re-established) until
// unsubscribe is called. fn runs on the listener's goroutine: it must not
// block nor subscribe or unsubscribe. The first subscriber starts the
// listening connection; unsubscribe of the last one closes it and waits
// for it to be closed.
func (h *Hub) Subscribe(fn func(Topic)) (unsubscribe func()) {
	s := &subscription{fn: fn}
	mu.Lock()
	e := h.entry()
	e.subs[s] = struct{}{}
	if len(e.subs) == 1 && h.listener != nil {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		e.stop, e.done = cancel, done
		go func() {
			defer close(done)
			_ = h.listener.Listen(ctx, e.deliver)
		}()
	}
	mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { h.unsubscribe(e, s) }) }
}

func (h *Hub) unsubscribe(e *entry, s *subscription) {
	mu.Lock()
	delete(e.subs, s)
	var done chan struct{}
	if len(e.subs) == 0 {
		if e.stop != nil {
			e.stop()
			done = e.done
			e.stop, e.done = nil, nil
		}
		e.live = false
		if h.key != nil && registry[h.key] == e {
			delete(registry, h.key)
		}
	}
	mu.Unlock()
	if done != nil {
		<-done
	}
}

// Relied reports whether a role on clock c may rely on notifications and
// sleep until its next due time: live (a Hub's Live) says they arrive, and
// c is the real clock, whose due times a timer can wait for (a test's fake
// clock moves without telling anyone). A nil live is never relied on.
func Relied(c clock.Clock, live func() bool) bool {
	_, real := c.(clock.Real)
	return real && live != nil && live()
}

// Until is how long a role relying on notifications sleeps before it looks
// again by itself: until the earliest of dues (zero ones are ignored), at
// least floor and at most ceiling; ceiling when no due time is set, and
// floor when floor is above ceiling. The one rule behind every such role's
// sleep, so that a due time in the past or far ahead is clamped the same
// everywhere.
func Until(now time.Time, floor, ceiling time.Duration, dues ...time.Time) time.Duration {
	wait := ceiling
	for _, due := range dues {
		if !due.IsZero() {
			wait = min(wait, due.Sub(now))
		}
	}
	return max(wait, floor)
}

// deliver parses a payload once and hands it to every subscriber. The
// listener's own topics change Live and reach subscribers as All.
func (e *entry) deliver(payload string) {
	t := Parse(payload)
	mu.Lock()
	switch payload {
	case store.TopicListening:
		e.live = true
	case store.TopicNotListening:
		e.live = false
	}
	fns := make([]func(Topic), 0, len(e.subs))
	for s := range e.subs {
		fns = append(fns, s.fn)
	}
	mu.Unlock()
	for _, fn := range fns {
		fn(t)
	}
}

// Subscribers returns how many subscribers the hub's driver has in this
// process (all of them share one listening connection).
func (h *Hub) Subscribers() int {
	mu.Lock()
	defer mu.Unlock()
	if h.own != nil {
		return len(h.own.subs)
	}
	if e := registry[h.key]; e != nil {
		return len(e.subs)
	}
	return 0
}
