package convoy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/clock"
	"github.com/drover-run/drover/internal/notifier"
	"github.com/drover-run/drover/internal/startstop"
	"github.com/drover-run/drover/internal/tracing"
	"github.com/drover-run/drover/store"
)

// Clock tells convoy the time (any type with a Now() time.Time method);
// tests inject their own. Every time written to the store (publish, lock
// expiry, delays) is read from it. It is drover.Clock: one value serves
// both clients.
type Clock = clock.Clock

// Config configures a Client.
type Config struct {
	// Store is the state-store driver, for example from sqlite.Open or
	// postgres.Open, migrated. Required.
	Store store.Driver
	// InstanceID names this process as the holder of the session locks it
	// takes and as the actor of the events it records. Default: a random ID.
	InstanceID string
	// PollInterval is how often waiting consumers look at the store when no
	// notification wakes them (work published by processes that cannot
	// notify, such as other processes on the same SQLite file). Default 100ms.
	// While notifications arrive (PostgreSQL), a Processor with nothing to
	// do sleeps longer: see IdlePoll.
	PollInterval time.Duration
	// MaxBodyBytes caps a message body. Default DefaultMaxBodyBytes.
	MaxBodyBytes int
	// Clock defaults to the system clock.
	Clock Clock
	// Logger defaults to a discarding logger.
	Logger *slog.Logger
	// TracerProvider, when set, traces every message with OpenTelemetry: a
	// drover.convoy.publish span, whose context is stored with the
	// message, and drover.convoy.receive and drover.convoy.settle spans as
	// its children in whichever process consumes it. nil: off.
	TracerProvider trace.TracerProvider
	// Observer, when set, is told of the session locks this client's
	// receivers and processors renewed or lost, and of the operator
	// alerts they recorded, once the transaction that did it committed:
	// for metrics (metrics.ConvoyObserver records them with a
	// drover.Client's metrics). nil: nobody.
	Observer Observer
}

// Observer is told what a Client's session queues did, for metrics. Its
// methods must be quick and safe for concurrent use.
type Observer interface {
	// SessionLock is a session lock of queue renewed (renewed), or found
	// lost (another consumer may hold the session now).
	SessionLock(queue string, renewed bool)
	// Alert is an operator alert recorded: a session blocked by a dead
	// letter (EventSessionBlocked).
	Alert(e *Event)
}

// observeAlerts tells the Observer of the alerts among events, which a
// committed transaction recorded.
func (c *Client) observeAlerts(events []*dt.Event) {
	if c.cfg.Observer == nil {
		return
	}
	for _, e := range events {
		if e.Alert {
			c.cfg.Observer.Alert(e)
		}
	}
}

// observeLock tells the Observer of a session lock renewed or lost.
func (c *Client) observeLock(queue string, renewed bool) {
	if c.cfg.Observer != nil {
		c.cfg.Observer.SessionLock(queue, renewed)
	}
}

// Limits of names and bodies.
const (
	// DefaultMaxBodyBytes is the default cap on a message body (1 MiB).
	DefaultMaxBodyBytes = 1 << 20
	// MaxQueueNameLen is the longest queue name, in bytes.
	MaxQueueNameLen = dt.MaxNameBytes
	// MaxSessionIDLen is the longest session ID, in bytes.
	MaxSessionIDLen = dt.MaxKeyBytes
	// MaxMessageIDLen is the longest message ID, in bytes.
	MaxMessageIDLen = dt.MaxKeyBytes
)

// policyTTL is how long a queue's policy is cached. SetQueuePolicy clears
// this process's cache at once; other processes see a change within it.
const policyTTL = 5 * time.Second

// Client publishes to session queues, accepts sessions and runs operator
// functions. It is safe for concurrent use. A Client starts no goroutine of
// its own: receivers and processors own theirs, and while a processor runs
// the client expires dedupe entries (with those of other processes, one at
// a time: see package maintenance).
type Client struct {
	cfg    Config
	store  store.Driver
	clock  Clock
	log    *slog.Logger
	hub    *hub
	tracer *tracing.Tracer // nil: tracing off

	polMu    sync.Mutex
	policies map[string]cachedPolicy

	// mntMu guards the dedupe expiry that runs while processors run
	// (maintain).
	mntMu    sync.Mutex
	mntUsers int
	mnt      *startstop.Func
}

type cachedPolicy struct {
	q  dt.Queue
	at time.Time // real time of the read
}

// New validates cfg and returns a Client. It does not touch the store.
func New(cfg Config) (*Client, error) {
	if cfg.Store == nil {
		return nil, fmt.Errorf("%w: Store is required", ErrInvalidConfig)
	}
	if cfg.InstanceID == "" {
		host, _ := os.Hostname()
		var b [4]byte
		_, _ = rand.Read(b[:])
		cfg.InstanceID = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
	}
	if dt.NameProblem(cfg.InstanceID) != "" {
		return nil, fmt.Errorf("%w: InstanceID %q must be 1-%d printable characters without spaces or \"/\"", ErrInvalidConfig, cfg.InstanceID, MaxQueueNameLen)
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 100 * time.Millisecond
	}
	if cfg.PollInterval < time.Millisecond {
		return nil, fmt.Errorf("%w: PollInterval %s must be at least 1ms", ErrInvalidConfig, cfg.PollInterval)
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.MaxBodyBytes < 0 {
		return nil, fmt.Errorf("%w: MaxBodyBytes %d is negative", ErrInvalidConfig, cfg.MaxBodyBytes)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	c := &Client{cfg: cfg, store: cfg.Store, clock: cfg.Clock, log: cfg.Logger, policies: map[string]cachedPolicy{},
		tracer: tracing.New(cfg.TracerProvider)}
	c.hub = newHub(cfg.Store, cfg.Logger)
	return c, nil
}

// InstanceID returns the instance ID this client runs as.
func (c *Client) InstanceID() string { return c.cfg.InstanceID }

// Store returns the state-store driver.
func (c *Client) Store() store.Driver { return c.store }

// now reads the clock, truncated to the store's resolution (microseconds).
func (c *Client) now() time.Time { return c.clock.Now().UTC().Truncate(time.Microsecond) }

// Topic is the notification topic of a queue: publishing to the queue (and
// anything else that makes one of its sessions available) notifies it, so
// consumers in other processes wake at once (PostgreSQL LISTEN/NOTIFY).
func Topic(queue string) string { return notifier.QueueTopic(queue) }

// policy returns the queue's policy, cached for policyTTL; a queue not
// created yet has the default policy.
func (c *Client) policy(ctx context.Context, x store.Executor, queue string) (dt.Queue, error) {
	c.polMu.Lock()
	p, ok := c.policies[queue]
	c.polMu.Unlock()
	if ok && time.Since(p.at) < policyTTL {
		return p.q, nil
	}
	q, err := x.QueueGet(ctx, &store.QueueGetParams{Name: queue})
	switch {
	case errors.Is(err, store.ErrNotFound):
		q = &dt.Queue{Name: queue, MaxDeliveryCount: dt.DefaultMaxDeliveryCount, PoisonPolicy: dt.DefaultPoisonPolicy,
			DedupeWindow: dt.DefaultDedupeWindow, LockDuration: dt.DefaultLockDuration}
	case err != nil:
		return dt.Queue{}, err
	}
	c.polMu.Lock()
	c.policies[queue] = cachedPolicy{q: *q, at: time.Now()}
	c.polMu.Unlock()
	return *q, nil
}

func (c *Client) forgetPolicy(queue string) {
	c.polMu.Lock()
	delete(c.policies, queue)
	c.polMu.Unlock()
}

// ---- names ----

// validQueueName: the rule of names (drovertype.NameProblem): no "/", as a
// session's event subject is "session:<queue>/<session ID>"; a namespace's
// queue is named "<namespace>/<queue>" (drovertype.QualifyName).
func validQueueName(s string) bool { return dt.StoredNameProblem(s) == "" }

func checkQueue(queue string) error {
	if !validQueueName(queue) {
		return fmt.Errorf("%w %q: must be 1-%d printable characters without spaces or \"/\" (a namespace's queue: NAMESPACE/QUEUE)", ErrInvalidQueue, queue, MaxQueueNameLen)
	}
	return nil
}

// idProblem says what is wrong with a session or message ID, or "" (the
// rule of keys, drovertype.KeyProblem).
func idProblem(s string, maxLen int) string { return dt.KeyProblem(s, maxLen) }

// MaxReasonBytes caps a dead-letter reason given to DeadLetter or
// LeaseDeadLetter.
const MaxReasonBytes = 4096

func checkReason(reason string) error {
	return dt.CheckText(ErrInvalidReason, "reason", reason, MaxReasonBytes)
}

func checkSession(id string) error {
	if p := idProblem(id, MaxSessionIDLen); p != "" {
		return fmt.Errorf("%w %q: %s", ErrInvalidSession, id, p)
	}
	return nil
}

// ---- wake-ups ----

// hub wakes consumers waiting for a queue: at once for publishes made by
// this process, through the process's notifier for other processes. It
// subscribes while anyone waits and unsubscribes with the last waiter.
type hub struct {
	notes *notifier.Hub
	log   *slog.Logger

	mu        sync.Mutex
	subs      map[string]map[*waiter]struct{}
	n         int
	stopNotes func()
}

type waiter struct {
	queue string
	ch    chan struct{} // capacity 1
}

func newHub(d store.Driver, log *slog.Logger) *hub {
	return &hub{notes: notifier.For(d), log: log, subs: map[string]map[*waiter]struct{}{}}
}

// subscribe registers a waiter for queue; unsubscribe it when done.
func (h *hub) subscribe(queue string) *waiter {
	w := &waiter{queue: queue, ch: make(chan struct{}, 1)}
	h.mu.Lock()
	defer h.mu.Unlock()
	m := h.subs[queue]
	if m == nil {
		m = map[*waiter]struct{}{}
		h.subs[queue] = m
	}
	m[w] = struct{}{}
	h.n++
	if h.n == 1 && h.notes.Listening() {
		h.stopNotes = h.notes.Subscribe(h.onTopic)
	}
	return w
}

// unsubscribe removes w; the last waiter unsubscribes from the notifier.
func (h *hub) unsubscribe(w *waiter) {
	h.mu.Lock()
	m := h.subs[w.queue]
	if _, ok := m[w]; !ok {
		h.mu.Unlock()
		return
	}
	delete(m, w)
	if len(m) == 0 {
		delete(h.subs, w.queue)
	}
	h.n--
	var unsubscribe func()
	if h.n == 0 {
		unsubscribe, h.stopNotes = h.stopNotes, nil
	}
	h.mu.Unlock()
	if unsubscribe != nil {
		unsubscribe()
	}
}

func (h *hub) onTopic(t notifier.Topic) {
	switch t.Kind {
	case notifier.All:
		h.wakeAll()
	case notifier.Queue:
		h.wake(t.Name)
	}
}

func (h *hub) wake(queue string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.subs[queue] {
		w.signal()
	}
}

func (h *hub) wakeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, m := range h.subs {
		for w := range m {
			w.signal()
		}
	}
}

func (w *waiter) signal() {
	select {
	case w.ch <- struct{}{}:
	default:
	}
}
