package webhook

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/clock"
	"github.com/drover-run/drover/internal/egress"
	"github.com/drover-run/drover/internal/fault"
	"github.com/drover-run/drover/internal/instrument"
	"github.com/drover-run/drover/internal/maintenance"
	"github.com/drover-run/drover/internal/notifier"
	"github.com/drover-run/drover/internal/startstop"
	"github.com/drover-run/drover/internal/tracing"
	"github.com/drover-run/drover/store"
)

// Defaults of Options.
const (
	DefaultPollInterval   = time.Second
	DefaultConcurrency    = 8
	DefaultMaxAttempts    = 12
	DefaultMaxAge         = 24 * time.Hour
	DefaultBackoffBase    = time.Second
	DefaultBackoffMax     = 10 * time.Minute
	DefaultTimeout        = 10 * time.Second
	DefaultConnectTimeout = 3 * time.Second
	DefaultMaxPerHost     = 4
	DefaultBatch          = 500
	DefaultRetention      = 7 * 24 * time.Hour
)

// MaxURLBytes caps the length of a webhook URL.
const MaxURLBytes = 2048

// maxErrorBody caps the part of a failed answer's body kept in LastError.
const maxErrorBody = 256

// pruneEvery is how often old finished deliveries are deleted.
const pruneEvery = 10 * time.Minute

// roundTimeout bounds the transaction recording results and claiming.
const roundTimeout = 30 * time.Second

// Options configure a Dispatcher.
type Options struct {
	// Recorder, when set, counts the retention lease's changes of leader.
	Recorder *instrument.Recorder
	// Secret derives the key that signs the requests to each URL
	// (droverapi.WebhookKey); receivers verify with the server's secret or
	// their own key (droverapi.WebhookSecret). Required, at least
	// MinSecretBytes bytes. Never logged.
	Secret []byte
	// URLs receive every final-state event of every task, in addition to
	// each task's own callback URL (SubmitOptions.CallbackURL). Absolute
	// http or https URLs.
	URLs []string
	// Subscriptions are URLs that receive the events they choose, of every
	// task and session: final states, alerts, event types. A URL given
	// more than once (here or in URLs) receives what any of them chooses,
	// once per event.
	Subscriptions []Subscription
	// Instance names this dispatcher in the claims it makes. It must be
	// unique among the dispatchers running on a store (the process's
	// instance ID is): on start a dispatcher releases the claims left by an
	// earlier run of the same instance, so they are sent again at once.
	// Default: host-pid-random.
	Instance string
	// Clock tells the time of due dates, ages and signatures. Default:
	// the system clock.
	Clock clock.Clock
	// Logger defaults to a discarding logger.
	Logger *slog.Logger
	// Tracer, when on, records a drover.webhook.deliver span per attempt,
	// a child of the task's trace, and sends its traceparent.
	Tracer *tracing.Tracer
	// Egress is where deliveries may connect (egress.Policy): checked on
	// each URL before sending and on every address connected to. A
	// refused delivery fails at once, its error starting with "egress
	// denied: ". Default: the default policy, which refuses loopback,
	// private, link-local and other special-purpose addresses.
	Egress *egress.Policy
	// PollInterval is how often the history is scanned for new final
	// states and due retries are claimed. Default 1s. On a store that
	// notifies (PostgreSQL) a new final state or alert wakes the scan at
	// once; the poll finds the rest (retries, other selected events).
	PollInterval time.Duration
	// Concurrency caps the requests in flight. Default 8.
	Concurrency int
	// MaxPerHost caps the requests in flight to one host, so a slow
	// receiver cannot hold every slot; a delivery claimed while its host
	// is at the cap is put back, due a PollInterval later, without
	// counting an attempt. Default 4.
	MaxPerHost int
	// MaxPerNamespace caps the requests in flight for the events of one
	// namespace (drovertype.NamespaceOf the delivery's subject), so one
	// namespace's slow receivers cannot hold every slot; MaxPerHost then
	// counts per namespace and host. A delivery claimed at the cap is put
	// back as at MaxPerHost. The cap applies once the dispatcher has seen
	// an event or a delivery of a namespace other than the default one: a
	// store without namespaces uses every slot, as before. Default: three quarters of Concurrency
	// (at least 1).
	MaxPerNamespace int
	// MaxAttempts is the number of attempts before a delivery is marked
	// failed. Default 12.
	MaxAttempts int
	// MaxAge is how long after it was queued a delivery is retried; an
	// attempt failing later marks it failed. Events older than this when
	// the dispatcher finds them are not queued at all (a store
	// whose webhooks were off for long). Default 24h.
	MaxAge time.Duration
	// BackoffBase is the delay after the first failed attempt; it doubles
	// after each further one up to BackoffMax. Each delay is drawn at
	// random between half and all of that (jitter), so receivers that come
	// back are not hit by every retry at once. Defaults 1s and 10m.
	BackoffBase, BackoffMax time.Duration
	// Timeout bounds one request, answer included. Default 10s.
	Timeout time.Duration
	// ConnectTimeout bounds connecting to the receiver, within Timeout, so
	// an address that drops packets frees its slot early. Default 3s.
	ConnectTimeout time.Duration
	// Batch caps the events scanned per enqueue transaction. Default 500.
	Batch int
	// Retention is how long delivered and failed deliveries are kept for
	// operators; a negative value keeps them forever. Default 7 days.
	Retention time.Duration
	// AllowCallbacks, when set, is where tasks' callback URLs may point
	// (the URLs above always may): a delivery to another one fails at
	// once, without a request. The HTTP API refuses such URLs at submit;
	// this catches those stored before the list was set or tightened.
	AllowCallbacks *Allow
}

// Stats counts what a dispatcher did since it was made.
type Stats struct {
	Enqueued  int64 // deliveries this dispatcher queued
	TooOld    int64 // events older than MaxAge when found (final states and alerts): not queued
	Attempts  int64 // requests sent (or tried)
	Delivered int64 // attempts answered with a 2xx status
	Retried   int64 // failed attempts to be tried again
	Failed    int64 // deliveries given up (MaxAttempts or MaxAge reached, or an unusable or refused URL)
	Postponed int64 // claimed deliveries put back, their host at MaxPerHost
	Stale     int64 // results not recorded: the claim had expired and was taken over
	InFlight  int64 // requests in flight now
}

// Dispatcher queues and sends the webhooks of one store. Run it in every
// process that should send webhooks; they share the work.
type Dispatcher struct {
	store  store.Driver
	opts   Options
	log    *slog.Logger
	clock  clock.Clock
	client *http.Client
	lease  time.Duration

	running atomic.Bool
	// seen is the highest event ID this dispatcher knows the cursor has
	// passed (valid once seenKnown): a cheap read finds whether anything
	// is new before taking the cursor lock.
	seen      atomic.Int64
	seenKnown atomic.Bool

	enqueued, tooOld, attempts, delivered, retried, failed, stale, inFlight, postponed atomic.Int64
	// namespaced: an event or delivery of a namespace other than the
	// default one was seen; MaxPerNamespace applies from then on.
	namespaced atomic.Bool
	// nsInFlight is a copy of the requests in flight per namespace (the
	// run loop's own map changes without a lock), for the metrics.
	nsInFlight atomic.Pointer[map[string]int]
}

// NamespaceInFlight returns the webhook requests in flight per namespace
// (stored namespace, "" for the default one), once namespaces are in use.
func (d *Dispatcher) NamespaceInFlight() map[string]int {
	if m := d.nsInFlight.Load(); m != nil && d.namespaced.Load() {
		return *m
	}
	return nil
}

// New validates opts and returns a Dispatcher on d. It does not touch the
// store.
func New(d store.Driver, opts Options) (*Dispatcher, error) {
	if d == nil {
		return nil, errors.New("webhook: nil store")
	}
	if len(opts.Secret) < MinSecretBytes {
		return nil, fmt.Errorf("webhook: Secret is %d bytes, want at least %d", len(opts.Secret), MinSecretBytes)
	}
	// One subscription per URL and namespace, in the order first given,
	// with the union of the events chosen.
	var subs []Subscription
	at := map[string]int{}
	add := func(s Subscription) {
		key := s.Namespace + "\x00" + s.URL
		if i, ok := at[key]; ok {
			subs[i].Events = subs[i].Events.Union(s.Events)
			return
		}
		at[key] = len(subs)
		subs = append(subs, s)
	}
	for i, u := range opts.URLs {
		if err := CheckURL(u); err != nil {
			return nil, fmt.Errorf("webhook: URLs[%d]: %w", i, err)
		}
		add(Subscription{URL: u})
	}
	for i, s := range opts.Subscriptions {
		if err := CheckURL(s.URL); err != nil {
			return nil, fmt.Errorf("webhook: Subscriptions[%d]: %w", i, err)
		}
		events, err := dt.ParseWebhookEvents(s.Events)
		if err != nil {
			return nil, fmt.Errorf("webhook: Subscriptions[%d] (%s): %w", i, redact(s.URL), err)
		}
		if s.Namespace = dt.StoredNamespace(s.Namespace); s.Namespace != "" {
			if p := dt.NamespaceProblem(s.Namespace); p != "" {
				return nil, fmt.Errorf("webhook: Subscriptions[%d] (%s): namespace %q %s", i, redact(s.URL), s.Namespace, p)
			}
		}
		add(Subscription{URL: s.URL, Events: events, Namespace: s.Namespace})
	}
	opts.Subscriptions, opts.URLs = subs, nil
	opts.Secret = bytes.Clone(opts.Secret)
	for _, c := range []struct {
		name string
		v    time.Duration
	}{{"PollInterval", opts.PollInterval}, {"MaxAge", opts.MaxAge}, {"BackoffBase", opts.BackoffBase},
		{"BackoffMax", opts.BackoffMax}, {"Timeout", opts.Timeout}, {"ConnectTimeout", opts.ConnectTimeout}} {
		if c.v < 0 {
			return nil, fmt.Errorf("webhook: %s %s is negative", c.name, c.v)
		}
	}
	if opts.Concurrency < 0 || opts.MaxAttempts < 0 || opts.Batch < 0 || opts.MaxPerHost < 0 {
		return nil, fmt.Errorf("webhook: Concurrency (%d), MaxPerHost (%d), MaxAttempts (%d) and Batch (%d) must not be negative",
			opts.Concurrency, opts.MaxPerHost, opts.MaxAttempts, opts.Batch)
	}
	def := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	def(&opts.PollInterval, DefaultPollInterval)
	def(&opts.MaxAge, DefaultMaxAge)
	def(&opts.BackoffBase, DefaultBackoffBase)
	def(&opts.BackoffMax, DefaultBackoffMax)
	def(&opts.Timeout, DefaultTimeout)
	def(&opts.ConnectTimeout, DefaultConnectTimeout)
	def(&opts.Retention, DefaultRetention)
	if opts.BackoffMax < opts.BackoffBase {
		return nil, fmt.Errorf("webhook: BackoffMax %s is below BackoffBase %s", opts.BackoffMax, opts.BackoffBase)
	}
	if opts.Concurrency == 0 {
		opts.Concurrency = DefaultConcurrency
	}
	if opts.MaxPerHost == 0 {
		opts.MaxPerHost = DefaultMaxPerHost
	}
	if opts.MaxPerNamespace <= 0 {
		opts.MaxPerNamespace = max(1, opts.Concurrency*3/4)
	}
	if opts.MaxAttempts == 0 {
		opts.MaxAttempts = DefaultMaxAttempts
	}
	if opts.Batch == 0 {
		opts.Batch = DefaultBatch
	}
	if opts.Instance == "" {
		host, _ := os.Hostname()
		var b [4]byte
		_, _ = rand.Read(b[:])
		opts.Instance = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	tr := opts.Egress.Transport(min(opts.ConnectTimeout, opts.Timeout))
	tr.MaxIdleConnsPerHost = opts.MaxPerHost
	client := &http.Client{
		Transport: tr,
		// A 3xx answer is a failed attempt, not a new destination.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return &Dispatcher{
		store: d, opts: opts, log: opts.Logger.With("instance", opts.Instance), clock: opts.Clock, client: client,
		// A claim outlives its request (Timeout) with room for recording
		// the result; only a dead process lets it expire.
		lease: opts.Timeout + 30*time.Second,
	}, nil
}

// Subscription is a URL and the events it receives.
type Subscription struct {
	URL string
	// Namespace is the namespace whose events the URL receives ("#...&
	// namespace=NAME" on the command line). Default "": the default
	// namespace's only. A task's own callback URL receives its task's
	// events, whatever the namespace.
	Namespace string
	// Events selects the events: "final", "alerts", event types
	// (dt.ParseWebhookEvents). Empty: final states.
	Events dt.WebhookEventSet
}

// ParseSubscription parses the command-line form of a subscription: a URL,
// optionally followed by "#events=" and comma-separated selectors, such as
// "https://ops.example.com/hook#events=final,alerts". The fragment only
// carries the choice: it is not part of the URL called.
func ParseSubscription(s string) (Subscription, error) {
	u, frag, hasFrag := strings.Cut(s, "#")
	if err := CheckURL(u); err != nil {
		return Subscription{}, err
	}
	sub := Subscription{URL: u}
	if !hasFrag {
		return sub, nil
	}
	var list string
	for _, part := range strings.Split(frag, "&") {
		k, v, _ := strings.Cut(part, "=")
		switch {
		case k == "events" && list == "":
			list = v
			if list == "" {
				return Subscription{}, fmt.Errorf("URL %q: events= lists no events", redact(u))
			}
		case k == "namespace" && sub.Namespace == "":
			if p := dt.NamespaceProblem(v); p != "" {
				return Subscription{}, fmt.Errorf("URL %q: namespace %q %s", redact(u), v, p)
			}
			sub.Namespace = dt.StoredNamespace(v)
		default:
			return Subscription{}, fmt.Errorf("URL %q: the part after # must be events=LIST (such as events=final,alerts) and/or namespace=NAME, joined by &, not %q", redact(u), frag)
		}
	}
	if list == "" {
		return sub, nil
	}
	events, err := dt.SplitWebhookEvents(list)
	if err != nil {
		return Subscription{}, fmt.Errorf("URL %q: events: %w", redact(u), err)
	}
	sub.Events = events
	return sub, nil
}

// CheckURL reports whether s can be a webhook URL: an absolute http or https
// URL with a host, at most MaxURLBytes long.
func CheckURL(s string) error {
	if len(s) > MaxURLBytes {
		return fmt.Errorf("URL is %d bytes, the limit is %d", len(s), MaxURLBytes)
	}
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("URL %q: %w", redact(s), err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("URL %q: want an http or https URL", redact(s))
	}
	if u.Host == "" {
		return fmt.Errorf("URL %q: no host", redact(s))
	}
	return nil
}

// redact returns scheme://host/path of a URL: user info and query may carry
// credentials, which must not reach the logs.
func redact(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return "(unparsable URL)"
	}
	return u.Scheme + "://" + u.Host + u.Path
}

// Instance returns the dispatcher's instance name.
func (d *Dispatcher) Instance() string { return d.opts.Instance }

// Stats returns the dispatcher's counters.
func (d *Dispatcher) Stats() Stats {
	return Stats{
		Enqueued: d.enqueued.Load(), TooOld: d.tooOld.Load(), Attempts: d.attempts.Load(),
		Delivered: d.delivered.Load(), Retried: d.retried.Load(), Failed: d.failed.Load(),
		Stale: d.stale.Load(), InFlight: d.inFlight.Load(), Postponed: d.postponed.Load(),
	}
}

// Run queues and sends webhooks until ctx ends. Then it stops claiming,
// waits for the requests in flight (each ends within Timeout), records
// their results and returns nil. Store errors are logged and retried at the
// next poll; Run fails only if it is already running.
func (d *Dispatcher) Run(ctx context.Context) error {
	if !d.running.CompareAndSwap(false, true) {
		return errors.New("webhook: Dispatcher.Run is already running")
	}
	defer d.running.Store(false)
	d.log.Info("webhook dispatcher started", "urls", len(d.opts.Subscriptions), "concurrency", d.opts.Concurrency)
	if p := d.pruner(); p != nil {
		if err := p.Start(ctx); err != nil {
			return err
		}
		defer p.Stop()
	}

	// Requests outlive ctx: a stop lets them finish within Timeout.
	sendCtx := context.WithoutCancel(ctx)
	type sent struct {
		res      store.WebhookResult
		ns, host string
	}
	results := make(chan sent, d.opts.Concurrency)
	perHost := map[string]int{} // requests in flight by namespace and host
	perNS := map[string]int{}   // requests in flight by namespace
	timer := time.NewTimer(d.opts.PollInterval)
	defer timer.Stop()
	// Another transaction's final state or alert wakes the scan at once
	// (PostgreSQL); without notifications the timer finds it, every
	// PollInterval. While notifications arrive the timer is only a slow
	// fallback (IdlePoll), and wakes the dispatcher when a retry it
	// recorded is due (retries) or a scan, claim or release failed
	// (retry, a PollInterval later).
	wake := make(chan struct{}, 1)
	notes := notifier.For(d.store)
	var retries retryTimes
	unsubscribe := notes.Subscribe(func(t notifier.Topic) {
		if t.Kind == notifier.Events || t.Kind == notifier.All {
			select {
			case wake <- struct{}{}:
			default:
			}
		}
	})
	defer unsubscribe()
	var (
		inflight  int
		pending   []store.WebhookResult
		released  bool
		scan      = true
		retry     bool // the last scan or claim failed: try again soon
		heldTries int  // scans in a row that events were held back from
	)
	for {
		if !released {
			released = d.release(ctx)
		}
		if scan {
			scan = false
			// A scan, release or claim that failed is tried again a
			// PollInterval later, not when the next notification or the
			// slow fallback comes; a scan that events were held back from
			// too, then less and less often while they stay held back (each
			// try waits up to a second for the open writer).
			ok, held := d.enqueueAll(ctx, notifier.Relied(d.clock, notes.Live))
			retry = !ok
			if held {
				heldTries++
			} else {
				heldTries = 0
			}
		}
		if released && ctx.Err() == nil {
			// Not cut by ctx: a commit interrupted by a stop would leave
			// its outcome unknown (results recorded twice, claims held
			// until their lease ends).
			rctx, cancel := context.WithTimeout(sendCtx, roundTimeout)
			free := d.opts.Concurrency - inflight
			roundAt := d.clock.Now()
			claimed, left, failed := d.round(rctx, pending, free)
			retry = retry || failed
			cancel()
			claimedAt := roundAt
			if failed {
				claimedAt = time.Time{}
			}
			retries.recorded(pending[:len(pending)-len(left)], claimedAt) // left is a suffix not recorded
			pending = append(pending[:0], left...)
			for _, w := range claimed {
				ns := dt.NamespaceOf(w.TaskID)
				if ns != "" {
					d.namespaced.Store(true)
				}
				host := ns + "\x00" + hostOf(w.URL)
				if perHost[host] >= d.opts.MaxPerHost || d.namespaced.Load() && perNS[ns] >= d.opts.MaxPerNamespace {
					pending = append(pending, d.postpone(w))
					continue
				}
				perHost[host]++
				perNS[ns]++
				d.publishNS(perNS)
				inflight++
				d.inFlight.Add(1)
				go func() { results <- sent{d.send(sendCtx, w), ns, host} }()
			}
		}
		wait := d.opts.PollInterval
		if notifier.Relied(d.clock, notes.Live) {
			wait = notifier.Until(d.clock.Now(), time.Millisecond, max(d.opts.PollInterval, IdlePoll), retries.next())
			if heldTries > 0 {
				wait = min(wait, d.opts.PollInterval<<min(heldTries-1, 10))
			}
			if len(pending) > 0 || retry || !released { // results to record (postponed ones among them), or a failure to retry
				wait = d.opts.PollInterval
			}
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			for ; inflight > 0; inflight-- {
				pending = append(pending, (<-results).res)
				d.inFlight.Add(-1)
			}
			if len(pending) > 0 {
				fctx, cancel := context.WithTimeout(sendCtx, roundTimeout)
				if _, left, _ := d.round(fctx, pending, 0); len(left) > 0 {
					d.log.Warn("webhook results not recorded at stop; their deliveries are sent again when the claims expire", "results", len(pending))
				}
				cancel()
			}
			d.log.Info("webhook dispatcher stopped")
			return nil
		case <-timer.C:
			scan = true // and the round claims the retry due now
		case <-wake:
			scan = true
		case r := <-results:
			inflight--
			d.inFlight.Add(-1)
			if perHost[r.host]--; perHost[r.host] == 0 {
				delete(perHost, r.host)
			}
			if perNS[r.ns]--; perNS[r.ns] == 0 {
				delete(perNS, r.ns)
			}
			d.publishNS(perNS)
			pending = append(pending, r.res)
		}
	}
}

// IdlePoll is how often a dispatcher scans while notifications arrive
// (PollInterval, if longer): final states and alerts notify it, and it
// wakes for the retries it recorded itself; a retry another dispatcher
// recorded, whose process then stopped, waits for this fallback.
const IdlePoll = 30 * time.Second

// maxRetryTimes caps the retry times a dispatcher remembers. Past it the
// latest are forgotten: those retries wait for a scan another wake brings,
// at worst the IdlePoll fallback.
const maxRetryTimes = 1024

// retryTimes are the times of the retries this dispatcher recorded that no
// claim has covered yet, earliest first; it wakes at the first. All are
// kept, not only the earliest: once the earliest is claimed, the next one
// may be all that is due, and nothing else would wake the dispatcher for
// it before the IdlePoll fallback.
type retryTimes []time.Time

// recorded takes in the retries among results a round recorded. claimedAt
// is when the round's claim ran (zero: the round failed): the retries due
// by then need no wake of their own. The claim took them (or another
// dispatcher did), or it had no slot free for them: every request in
// flight then brings, when it ends, a round whose claim takes them. Were
// they kept, the dispatcher would wake for them at once, again and again,
// while its slots stay busy.
func (r *retryTimes) recorded(results []store.WebhookResult, claimedAt time.Time) {
	if !claimedAt.IsZero() {
		n, _ := slices.BinarySearchFunc(*r, claimedAt, func(t, at time.Time) int {
			if t.After(at) {
				return 1
			}
			return -1
		})
		*r = slices.Delete(*r, 0, n)
	}
	for _, res := range results {
		t := res.NextAttemptAt
		if res.Status != dt.WebhookPending || !claimedAt.IsZero() && !t.After(claimedAt) {
			continue
		}
		i, found := slices.BinarySearchFunc(*r, t, time.Time.Compare)
		if found || i == maxRetryTimes {
			continue
		}
		if len(*r) == maxRetryTimes {
			*r = (*r)[:maxRetryTimes-1]
		}
		*r = slices.Insert(*r, i, t)
	}
}

// next is the earliest retry time, zero if none is remembered.
func (r retryTimes) next() time.Time {
	if len(r) == 0 {
		return time.Time{}
	}
	return r[0]
}

// publishNS publishes a copy of the run loop's requests per namespace.
func (d *Dispatcher) publishNS(perNS map[string]int) {
	if d.namespaced.Load() {
		c := maps.Clone(perNS)
		d.nsInFlight.Store(&c)
	}
}

// release frees the claims an earlier run of this instance left (it
// stopped without recording their results), so they are sent again now.
func (d *Dispatcher) release(ctx context.Context) bool {
	var n int
	err := d.store.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		var err error
		n, err = x.WebhookDeliveryRelease(ctx, &store.WebhookDeliveryReleaseParams{ClaimedBy: d.opts.Instance, Now: d.clock.Now()})
		return err
	})
	if err != nil {
		if ctx.Err() == nil {
			d.log.Warn("webhook: release the claims of an earlier run", "err", err)
		}
		return false
	}
	if n > 0 {
		d.log.Info("webhook: released the claims of an earlier run of this instance", "deliveries", n)
	}
	return true
}

// round records results and claims up to free due deliveries in one
// transaction. left are the results not recorded (the transaction failed):
// nil when they are recorded or stale. If the store refuses a value of
// one result (store.ErrBadData), the results are recorded one per
// transaction, so that one does not hold back the others; the refused one
// is recorded with an error saying so, or left to its claim's expiry (it
// is then sent again) if even that is refused. failed reports a
// transaction that failed.
func (d *Dispatcher) round(ctx context.Context, results []store.WebhookResult, free int) (claimed []*dt.WebhookDelivery, left []store.WebhookResult, failed bool) {
	claimed, err := d.roundTx(ctx, results, free)
	if err == nil {
		return claimed, nil, false
	}
	if !errors.Is(err, store.ErrBadData) || len(results) == 0 || ctx.Err() != nil {
		if ctx.Err() == nil {
			d.log.Warn("webhook: record results and claim deliveries", "results", len(results), "err", err)
		}
		return nil, results, true
	}
	d.log.Warn("webhook: the store refused a value of the results; recording them apart", "results", len(results), "err", err)
	for i, r := range results {
		_, err := d.roundTx(ctx, results[i:i+1], 0)
		if errors.Is(err, store.ErrBadData) {
			r.LastError = "the result could not be stored: " + dt.Storable(err.Error())
			if _, err = d.roundTx(ctx, []store.WebhookResult{r}, 0); errors.Is(err, store.ErrBadData) {
				d.log.Error("webhook: a result could not be stored, nor its failure; the delivery is sent again when its claim expires",
					"delivery", r.ID, "err", err)
				err = nil
			}
		}
		if err != nil {
			if ctx.Err() == nil {
				d.log.Warn("webhook: record results", "results", len(results)-i, "err", err)
			}
			return nil, results[i:], true
		}
	}
	claimed, _, failed = d.round(ctx, nil, free)
	return claimed, nil, failed
}

// roundTx is one transaction of round.
func (d *Dispatcher) roundTx(ctx context.Context, results []store.WebhookResult, free int) (claimed []*dt.WebhookDelivery, err error) {
	if len(results) == 0 && free <= 0 {
		return nil, nil
	}
	var applied []bool
	err = d.store.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		if fault.Armed() {
			for _, r := range results {
				if err := fault.Text(r.LastError); err != nil {
					return err
				}
			}
		}
		var err error
		if applied, err = x.WebhookDeliveryFinishMany(ctx, &store.WebhookDeliveryFinishManyParams{Results: results}); err != nil {
			return err
		}
		if free > 0 {
			claimed, err = x.WebhookDeliveryClaim(ctx, &store.WebhookDeliveryClaimParams{
				ClaimedBy: d.opts.Instance, Now: d.clock.Now(), Lease: d.lease, Limit: free})
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	for i, a := range applied {
		r := results[i]
		if !a {
			d.stale.Add(1)
			d.log.Warn("webhook: result not recorded, the claim had expired and was taken over",
				"delivery", r.ID, "delivery_attempt", r.Attempt)
			continue
		}
		switch {
		case r.Postponed:
		case r.Status == dt.WebhookDelivered:
			d.delivered.Add(1)
		case r.Status == dt.WebhookFailed:
			d.failed.Add(1)
		default:
			d.retried.Add(1)
		}
	}
	return claimed, nil
}

// enqueueAll queues the deliveries of every event not yet scanned that a
// subscription selects, a batch per transaction. ok is false when a
// transaction failed; held, when it relies on notifications (relied) and
// committed events were held back behind an older event writer still
// open. Either way it should look again soon.
func (d *Dispatcher) enqueueAll(ctx context.Context, relied bool) (ok, held bool) {
	for ctx.Err() == nil {
		more, err := d.enqueue(ctx)
		if err != nil {
			if ctx.Err() == nil {
				d.log.Warn("webhook: queue deliveries", "err", err)
			}
			return false, false
		}
		if !more {
			return true, relied && d.heldBack(ctx)
		}
	}
	return true, false
}

// heldBack reports whether an event was committed after the cursor this
// dispatcher last saw that the scan could not read yet: on a driver whose
// event IDs do not follow commit order, a scan reads nothing above an ID
// whose transaction may still commit, and gives up waiting for it after a
// while. Its end (a rollback, say) may notify no one, so the dispatcher
// has to look again by itself.
func (d *Dispatcher) heldBack(ctx context.Context) bool {
	if !d.seenKnown.Load() {
		return false
	}
	evs, err := d.store.Reader().EventList(ctx, &store.EventListParams{AfterID: d.seen.Load(), Limit: 1, Lookup: true})
	return err == nil && len(evs) > 0
}

// enqueue runs one enqueue transaction; more reports a full batch.
func (d *Dispatcher) enqueue(ctx context.Context) (more bool, err error) {
	// Anything new since the cursor this dispatcher last saw? A read
	// without locks spares the write transaction (and on SQLite the write
	// lock) while nothing happens.
	if d.seenKnown.Load() {
		evs, err := d.store.Reader().EventList(ctx, &store.EventListParams{AfterID: d.seen.Load(), Limit: 1})
		if err != nil {
			return false, err
		}
		if len(evs) == 0 {
			return false, nil
		}
	}
	now := d.clock.Now()
	var (
		queued, tooOld int64
		cursor         int64
		locked         bool
	)
	err = d.store.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		queued, tooOld, more, locked = 0, 0, false, false
		after, ok, err := x.WebhookCursorLock(ctx, &store.WebhookCursorLockParams{})
		if err != nil || !ok {
			return err // !ok: another dispatcher is enqueuing right now
		}
		cursor, locked = after, true
		evs, err := x.EventList(ctx, &store.EventListParams{AfterID: after, Limit: d.opts.Batch})
		if err != nil || len(evs) == 0 {
			return err
		}
		more = len(evs) == d.opts.Batch
		var (
			picked []*dt.Event
			ids    []string
			idSet  = map[string]bool{}
		)
		for _, ev := range evs {
			// Every selector picks final states or alerts: nothing else
			// can be sent, and needs no task read.
			if !dt.WebhookCandidate(ev) {
				continue
			}
			if now.Sub(ev.CreatedAt) > d.opts.MaxAge {
				tooOld++
				continue
			}
			picked = append(picked, ev)
			if dt.NamespaceOf(ev.TaskID) != "" {
				d.namespaced.Store(true)
			}
			if _, session := SessionOf(ev.TaskID); !session && !idSet[ev.TaskID] {
				idSet[ev.TaskID] = true
				ids = append(ids, ev.TaskID)
			}
		}
		var ds []*dt.WebhookDelivery
		if len(picked) > 0 {
			// The tasks are read without locks: their events are committed,
			// so they are too, and nothing here decides their state.
			tasks, err := d.store.Reader().TaskGetMany(ctx, &store.TaskGetManyParams{IDs: ids})
			if err != nil {
				return err
			}
			byID := make(map[string]*dt.Task, len(tasks))
			for _, t := range tasks {
				byID[t.ID] = t
			}
			for _, ev := range picked {
				t := byID[ev.TaskID]
				if _, session := SessionOf(ev.TaskID); !session && t == nil {
					continue // deleted by retention since
				}
				urls := d.urlsFor(ev, t)
				if len(urls) == 0 {
					continue
				}
				body, err := BuildPayload(ev, t)
				if err != nil {
					return err
				}
				for _, u := range urls {
					ds = append(ds, &dt.WebhookDelivery{
						EventID: ev.ID, URL: u, TaskID: ev.TaskID, EventType: ev.Type, Payload: body,
						NextAttemptAt: now, CreatedAt: now, UpdatedAt: now,
					})
				}
			}
		}
		ins, err := x.WebhookDeliveryInsertMany(ctx, &store.WebhookDeliveryInsertManyParams{Deliveries: ds})
		if err != nil {
			return err
		}
		for _, ok := range ins {
			if ok {
				queued++
			}
		}
		cursor = evs[len(evs)-1].ID
		return x.WebhookCursorSet(ctx, &store.WebhookCursorSetParams{After: cursor})
	})
	if err != nil {
		return false, err
	}
	if locked && (!d.seenKnown.Load() || cursor > d.seen.Load()) {
		d.seen.Store(cursor)
		d.seenKnown.Store(true)
	}
	d.enqueued.Add(queued)
	if tooOld > 0 {
		d.tooOld.Add(tooOld)
		d.log.Info("webhook: events older than MaxAge not queued", "events", tooOld, "max_age", d.opts.MaxAge)
	}
	return more, nil
}

// urlsFor returns the URLs event ev goes to: the callback URL of its task
// t (nil for a session's event) if the task's CallbackEvents select it,
// then each subscription selecting it; each URL once.
func (d *Dispatcher) urlsFor(ev *dt.Event, t *dt.Task) []string {
	var urls []string
	if t != nil && t.CallbackURL != "" && t.CallbackEvents.Matches(ev) {
		urls = append(urls, t.CallbackURL)
	}
	ns := dt.NamespaceOf(ev.TaskID)
	for _, s := range d.opts.Subscriptions {
		if s.Namespace == ns && s.Events.Matches(ev) && !slices.Contains(urls, s.URL) {
			urls = append(urls, s.URL)
		}
	}
	return urls
}

// subscribed reports whether u is the URL of a configured subscription.
func (d *Dispatcher) subscribed(u string) bool {
	return slices.ContainsFunc(d.opts.Subscriptions, func(s Subscription) bool { return s.URL == u })
}

// pruner deletes delivered and failed deliveries older than Retention
// every pruneEvery, in the dispatcher process that holds
// maintenance.WebhookLease; nil without a Retention.
func (d *Dispatcher) pruner() startstop.Service {
	if d.opts.Retention <= 0 {
		return nil
	}
	r := &maintenance.Runner{Driver: d.store, Clock: d.clock, Log: d.log, Lease: maintenance.WebhookLease,
		Instance: d.opts.Instance + "/maintenance", Interval: pruneEvery, Batch: 1000,
		Tick: min(d.opts.PollInterval, 10*time.Second/3), Services: []maintenance.Service{maintenance.WebhookRetention(d.opts.Retention)}, Recorder: d.opts.Recorder}
	return &startstop.Func{Name: "webhook retention", Run: r.Run, Log: d.log}
}

// backoff is the delay after the n-th failed attempt: BackoffBase doubled
// n-1 times, at most BackoffMax, drawn between half and all of it.
func (d *Dispatcher) backoff(n int) time.Duration {
	delay := d.opts.BackoffBase
	for i := 1; i < n && delay < d.opts.BackoffMax; i++ {
		delay *= 2
	}
	delay = min(delay, d.opts.BackoffMax)
	half := delay / 2
	return half + time.Duration(mrand.Int64N(int64(delay-half)+1))
}

// hostOf is the host a URL calls, as MaxPerHost counts them.
func hostOf(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return ""
	}
	return strings.ToLower(u.Hostname())
}

// postpone is the result of a claimed delivery not sent now (its host has
// MaxPerHost requests in flight): due again a poll later, its attempt
// given back, its last error kept.
func (d *Dispatcher) postpone(w *dt.WebhookDelivery) store.WebhookResult {
	d.postponed.Add(1)
	now := d.clock.Now()
	return store.WebhookResult{ID: w.ID, ClaimedBy: d.opts.Instance, Attempt: w.Attempts, Status: dt.WebhookPending,
		Postponed: true, NextAttemptAt: now.Add(d.opts.PollInterval), LastError: w.LastError, LastStatus: w.LastStatus, Now: now}
}

// send makes one attempt of w and returns its result.
func (d *Dispatcher) send(ctx context.Context, w *dt.WebhookDelivery) store.WebhookResult {
	d.attempts.Add(1)
	res := store.WebhookResult{ID: w.ID, ClaimedBy: d.opts.Instance, Attempt: w.Attempts}
	if d.opts.Tracer.On() {
		var span trace.Span
		ctx, span = d.traceDelivery(ctx, w)
		defer func() { endDelivery(span, res) }()
	}
	status, err := d.post(ctx, w)
	res.Now, res.LastStatus = d.clock.Now(), status
	var permanent *permanentError
	switch {
	case err == nil:
		res.Status = dt.WebhookDelivered
		d.log.Debug("webhook delivered", "delivery", w.ID, "event", w.EventID, "task", w.TaskID,
			"url", redact(w.URL), "delivery_attempt", w.Attempts, "status", status)
		return res
	case errors.As(err, &permanent):
		res.Status, res.LastError = dt.WebhookFailed, err.Error()
	case w.Attempts >= d.opts.MaxAttempts:
		res.Status, res.LastError = dt.WebhookFailed, fmt.Sprintf("%v (gave up after %d attempts)", err, w.Attempts)
	case res.Now.Sub(w.CreatedAt) >= d.opts.MaxAge:
		res.Status, res.LastError = dt.WebhookFailed, fmt.Sprintf("%v (gave up after %d attempts: older than %s)", err, w.Attempts, d.opts.MaxAge)
	default:
		res.Status, res.LastError = dt.WebhookPending, err.Error()
		res.NextAttemptAt = res.Now.Add(d.backoff(w.Attempts))
		d.log.Debug("webhook attempt failed, will retry", "delivery", w.ID, "event", w.EventID, "task", w.TaskID,
			"url", redact(w.URL), "delivery_attempt", w.Attempts, "next", res.NextAttemptAt, "err", res.LastError)
		return res
	}
	d.log.Warn("webhook delivery failed for good", "delivery", w.ID, "event", w.EventID, "task", w.TaskID,
		"url", redact(w.URL), "attempts", w.Attempts, "err", res.LastError)
	return res
}

// permanentError is a failure no retry can fix (an unusable URL).
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// post sends the request; nil error means a 2xx answer.
func (d *Dispatcher) post(ctx context.Context, w *dt.WebhookDelivery) (status int, err error) {
	if err := CheckURL(w.URL); err != nil {
		return 0, &permanentError{err}
	}
	if !d.subscribed(w.URL) && !d.opts.AllowCallbacks.prefixAllows(w.URL) {
		return 0, &permanentError{fmt.Errorf("callback URL %s is not allowed (allowed: %s)", redact(w.URL), d.opts.AllowCallbacks)}
	}
	if u, err := url.Parse(w.URL); err == nil {
		if err := d.opts.Egress.CheckURL(u); err != nil {
			return 0, &permanentError{fmt.Errorf("%w (POST %s)", err, redact(w.URL))}
		}
	}
	ctx, cancel := context.WithTimeout(ctx, d.opts.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(w.Payload))
	if err != nil {
		return 0, &permanentError{fmt.Errorf("request to %s: %w", redact(w.URL), err)}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "drover-webhook/1")
	for k, v := range Sign(d.opts.Secret, w.URL, strconv.FormatInt(w.EventID, 10), w.Payload, d.clock.Now()) {
		req.Header[k] = v
	}
	req.Header.Set(HeaderEventType, string(w.EventType))
	req.Header.Set(HeaderAttempt, strconv.Itoa(w.Attempts))
	tracing.Inject(ctx, req.Header)
	resp, err := d.client.Do(req)
	if err != nil {
		// Refused at connect: the name resolved to a refused address.
		var denied *egress.DeniedError
		if errors.As(err, &denied) {
			return 0, &permanentError{fmt.Errorf("%w (POST %s)", denied, redact(w.URL))}
		}
		var (
			ne net.Error
			oe *net.OpError
		)
		if errors.As(err, &ne) && ne.Timeout() {
			if errors.As(err, &oe) && oe.Op == "dial" && ctx.Err() == nil {
				return 0, fmt.Errorf("no connection within %s", min(d.opts.ConnectTimeout, d.opts.Timeout))
			}
			return 0, fmt.Errorf("no answer within %s", d.opts.Timeout)
		}
		// *url.Error names the URL without its password; keep only the cause.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return 0, fmt.Errorf("POST %s: %v", redact(w.URL), err)
	}
	defer resp.Body.Close()
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	// Drain a little more so the connection can be reused.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return resp.StatusCode, nil
	}
	msg := fmt.Sprintf("HTTP %d", resp.StatusCode)
	if s := bytes.TrimSpace(snippet); len(s) > 0 {
		// The receiver's answer may hold any bytes (drovertype.Storable).
		msg += ": " + dt.Storable(string(s))
	}
	return resp.StatusCode, errors.New(msg)
}
