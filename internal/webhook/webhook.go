// Package webhook sends signed webhooks when tasks reach a final state
// (SAS-15): Processed, Compensated, Error or Cancelled.
//
// A Dispatcher turns the final-state events of the durable history into
// durable deliveries (one per event and URL: the task's callback URL and
// every globally configured URL), POSTs each as JSON signed with
// HMAC-SHA256, and retries failures with exponential back-off and jitter
// until a 2xx answer, MaxAttempts or MaxAge. Any number of dispatchers, in
// any number of processes sharing a store, cooperate: the enqueue cursor is
// locked by one at a time and deliveries are claimed (PostgreSQL: SKIP
// LOCKED) with a lease, so no (event, URL) is queued twice or sent by two
// dispatchers at once, and none is lost when a process dies: its claims
// expire and another dispatcher (or the same instance restarted) sends them
// again. Delivery is at least once; receivers de-duplicate on the
// Drover-Event-Id header (or the body's "id"), which is the same on every
// attempt. The user guide is docs/webhooks.md.
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
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/clock"
	"github.com/drover-run/drover/store"
)

// Defaults of Options.
const (
	DefaultPollInterval = time.Second
	DefaultConcurrency  = 8
	DefaultMaxAttempts  = 12
	DefaultMaxAge       = 24 * time.Hour
	DefaultBackoffBase  = time.Second
	DefaultBackoffMax   = 10 * time.Minute
	DefaultTimeout      = 10 * time.Second
	DefaultBatch        = 500
	DefaultRetention    = 7 * 24 * time.Hour
)

// MaxURLBytes caps the length of a webhook URL.
const MaxURLBytes = 2048

// maxErrorBody caps the part of a failed answer's body kept in LastError.
const maxErrorBody = 256

// pruneEvery is how often a dispatcher deletes old finished deliveries.
const pruneEvery = 10 * time.Minute

// roundTimeout bounds the transaction recording results and claiming.
const roundTimeout = 30 * time.Second

// Options configure a Dispatcher.
type Options struct {
	// Secret signs every request (HMAC-SHA256); receivers verify with the
	// same secret. Required, at least MinSecretBytes bytes. Never logged.
	Secret []byte
	// URLs receive every final-state event of every task, in addition to
	// each task's own callback URL (SubmitOptions.CallbackURL). Absolute
	// http or https URLs.
	URLs []string
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
	// HTTPClient sends the requests. Default: a client with its own
	// transport that does not follow redirects (a 3xx answer is a failed
	// attempt). Its Timeout, if any, applies on top of Timeout.
	HTTPClient *http.Client
	// PollInterval is how often the history is scanned for new final
	// states and due retries are claimed. Default 1s.
	PollInterval time.Duration
	// Concurrency caps the requests in flight. Default 8.
	Concurrency int
	// MaxAttempts is the number of attempts before a delivery is marked
	// failed. Default 12.
	MaxAttempts int
	// MaxAge is how long after it was queued a delivery is retried; an
	// attempt failing later marks it failed. Final-state events older than
	// this when the dispatcher finds them are not queued at all (a store
	// whose webhooks were off for long). Default 24h.
	MaxAge time.Duration
	// BackoffBase is the delay after the first failed attempt; it doubles
	// after each further one up to BackoffMax. Each delay is drawn at
	// random between half and all of that (jitter), so receivers that come
	// back are not hit by every retry at once. Defaults 1s and 10m.
	BackoffBase, BackoffMax time.Duration
	// Timeout bounds one request, answer included. Default 10s.
	Timeout time.Duration
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
	TooOld    int64 // final-state events older than MaxAge when found: not queued
	Attempts  int64 // requests sent (or tried)
	Delivered int64 // attempts answered with a 2xx status
	Retried   int64 // failed attempts to be tried again
	Failed    int64 // deliveries given up (MaxAttempts or MaxAge reached, or an unusable URL)
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

	enqueued, tooOld, attempts, delivered, retried, failed, stale, inFlight atomic.Int64
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
	seen := map[string]bool{}
	urls := make([]string, 0, len(opts.URLs))
	for i, u := range opts.URLs {
		if err := CheckURL(u); err != nil {
			return nil, fmt.Errorf("webhook: URLs[%d]: %w", i, err)
		}
		if !seen[u] {
			seen[u] = true
			urls = append(urls, u)
		}
	}
	opts.URLs = urls
	opts.Secret = bytes.Clone(opts.Secret)
	for _, c := range []struct {
		name string
		v    time.Duration
	}{{"PollInterval", opts.PollInterval}, {"MaxAge", opts.MaxAge}, {"BackoffBase", opts.BackoffBase},
		{"BackoffMax", opts.BackoffMax}, {"Timeout", opts.Timeout}} {
		if c.v < 0 {
			return nil, fmt.Errorf("webhook: %s %s is negative", c.name, c.v)
		}
	}
	if opts.Concurrency < 0 || opts.MaxAttempts < 0 || opts.Batch < 0 {
		return nil, fmt.Errorf("webhook: Concurrency (%d), MaxAttempts (%d) and Batch (%d) must not be negative",
			opts.Concurrency, opts.MaxAttempts, opts.Batch)
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
	def(&opts.Retention, DefaultRetention)
	if opts.BackoffMax < opts.BackoffBase {
		return nil, fmt.Errorf("webhook: BackoffMax %s is below BackoffBase %s", opts.BackoffMax, opts.BackoffBase)
	}
	if opts.Concurrency == 0 {
		opts.Concurrency = DefaultConcurrency
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
	client := opts.HTTPClient
	if client == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = opts.Concurrency
		client = &http.Client{
			Transport:     tr,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	return &Dispatcher{
		store: d, opts: opts, log: opts.Logger.With("instance", opts.Instance), clock: opts.Clock, client: client,
		// A claim outlives its request (Timeout) with room for recording
		// the result; only a dead process lets it expire.
		lease: opts.Timeout + 30*time.Second,
	}, nil
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
		Stale: d.stale.Load(), InFlight: d.inFlight.Load(),
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
	d.log.Info("webhook dispatcher started", "urls", len(d.opts.URLs), "concurrency", d.opts.Concurrency)

	// Requests outlive ctx: a stop lets them finish within Timeout.
	sendCtx := context.WithoutCancel(ctx)
	results := make(chan store.WebhookResult, d.opts.Concurrency)
	ticker := time.NewTicker(d.opts.PollInterval)
	defer ticker.Stop()
	var (
		inflight  int
		pending   []store.WebhookResult
		released  bool
		scan      = true
		lastPrune time.Time
	)
	for {
		if !released {
			released = d.release(ctx)
		}
		if scan {
			scan = false
			d.enqueueAll(ctx)
			if now := d.clock.Now(); d.opts.Retention > 0 && now.Sub(lastPrune) >= pruneEvery {
				lastPrune = now
				d.prune(ctx, now)
			}
		}
		if released && ctx.Err() == nil {
			// Not cut by ctx: a commit interrupted by a stop would leave
			// its outcome unknown (results recorded twice, claims held
			// until their lease ends).
			rctx, cancel := context.WithTimeout(sendCtx, roundTimeout)
			claimed, ok := d.round(rctx, pending, d.opts.Concurrency-inflight)
			cancel()
			if ok {
				pending = pending[:0]
			}
			for _, w := range claimed {
				inflight++
				d.inFlight.Add(1)
				go func() { results <- d.send(sendCtx, w) }()
			}
		}
		select {
		case <-ctx.Done():
			for ; inflight > 0; inflight-- {
				pending = append(pending, <-results)
				d.inFlight.Add(-1)
			}
			if len(pending) > 0 {
				fctx, cancel := context.WithTimeout(sendCtx, roundTimeout)
				if _, ok := d.round(fctx, pending, 0); !ok {
					d.log.Warn("webhook results not recorded at stop; their deliveries are sent again when the claims expire", "results", len(pending))
				}
				cancel()
			}
			d.log.Info("webhook dispatcher stopped")
			return nil
		case <-ticker.C:
			scan = true
		case r := <-results:
			inflight--
			d.inFlight.Add(-1)
			pending = append(pending, r)
		}
	}
}

// release frees the claims an earlier run of this instance left (it
// stopped without recording their results), so they are sent again now.
func (d *Dispatcher) release(ctx context.Context) bool {
	var n int
	err := d.store.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		var err error
		n, err = x.WebhookDeliveryRelease(ctx, d.opts.Instance, d.clock.Now())
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
// transaction. ok reports whether the transaction committed (the results
// are then recorded or stale).
func (d *Dispatcher) round(ctx context.Context, results []store.WebhookResult, free int) (claimed []*dt.WebhookDelivery, ok bool) {
	if len(results) == 0 && free <= 0 {
		return nil, true
	}
	var applied []bool
	err := d.store.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		var err error
		if applied, err = x.WebhookDeliveryFinishMany(ctx, results); err != nil {
			return err
		}
		if free > 0 {
			claimed, err = x.WebhookDeliveryClaim(ctx, store.WebhookClaimParams{
				ClaimedBy: d.opts.Instance, Now: d.clock.Now(), Lease: d.lease, Limit: free})
		}
		return err
	})
	if err != nil {
		if ctx.Err() == nil {
			d.log.Warn("webhook: record results and claim deliveries", "results", len(results), "err", err)
		}
		return nil, false
	}
	for i, a := range applied {
		r := results[i]
		if !a {
			d.stale.Add(1)
			d.log.Warn("webhook: result not recorded, the claim had expired and was taken over",
				"delivery", r.ID, "attempt", r.Attempt)
			continue
		}
		switch r.Status {
		case dt.WebhookDelivered:
			d.delivered.Add(1)
		case dt.WebhookFailed:
			d.failed.Add(1)
		default:
			d.retried.Add(1)
		}
	}
	return claimed, true
}

// enqueueAll queues the deliveries of every final-state event not yet
// scanned, a batch per transaction.
func (d *Dispatcher) enqueueAll(ctx context.Context) {
	for ctx.Err() == nil {
		more, err := d.enqueue(ctx)
		if err != nil {
			if ctx.Err() == nil {
				d.log.Warn("webhook: queue deliveries", "err", err)
			}
			return
		}
		if !more {
			return
		}
	}
}

// enqueue runs one enqueue transaction; more reports a full batch.
func (d *Dispatcher) enqueue(ctx context.Context) (more bool, err error) {
	// Anything new since the cursor this dispatcher last saw? A read
	// without locks spares the write transaction (and on SQLite the write
	// lock) while nothing happens.
	if d.seenKnown.Load() {
		evs, err := d.store.Reader().EventList(ctx, store.EventListParams{AfterID: d.seen.Load(), Limit: 1})
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
		after, ok, err := x.WebhookCursorLock(ctx)
		if err != nil || !ok {
			return err // !ok: another dispatcher is enqueuing right now
		}
		cursor, locked = after, true
		evs, err := x.EventList(ctx, store.EventListParams{AfterID: after, Limit: d.opts.Batch})
		if err != nil || len(evs) == 0 {
			return err
		}
		more = len(evs) == d.opts.Batch
		var (
			final []*dt.Event
			ids   []string
			idSet = map[string]bool{}
		)
		for _, ev := range evs {
			if !dt.IsWebhookEvent(ev.Type) {
				continue
			}
			if now.Sub(ev.CreatedAt) > d.opts.MaxAge {
				tooOld++
				continue
			}
			final = append(final, ev)
			if !idSet[ev.TaskID] {
				idSet[ev.TaskID] = true
				ids = append(ids, ev.TaskID)
			}
		}
		var ds []*dt.WebhookDelivery
		if len(final) > 0 {
			// The tasks are read without locks: their events are committed,
			// so they are too, and nothing here decides their state.
			tasks, err := d.store.Reader().TaskGetMany(ctx, ids)
			if err != nil {
				return err
			}
			byID := make(map[string]*dt.Task, len(tasks))
			for _, t := range tasks {
				byID[t.ID] = t
			}
			for _, ev := range final {
				t := byID[ev.TaskID]
				if t == nil {
					continue // deleted by retention since
				}
				urls := d.opts.URLs
				if t.CallbackURL != "" && !contains(urls, t.CallbackURL) {
					urls = append([]string{t.CallbackURL}, urls...)
				}
				if len(urls) == 0 {
					continue
				}
				body, err := BuildPayload(ev, t)
				if err != nil {
					return err
				}
				for _, u := range urls {
					ds = append(ds, &dt.WebhookDelivery{
						EventID: ev.ID, URL: u, TaskID: t.ID, EventType: ev.Type, Payload: body,
						NextAttemptAt: now, CreatedAt: now, UpdatedAt: now,
					})
				}
			}
		}
		ins, err := x.WebhookDeliveryInsertMany(ctx, ds)
		if err != nil {
			return err
		}
		for _, ok := range ins {
			if ok {
				queued++
			}
		}
		cursor = evs[len(evs)-1].ID
		return x.WebhookCursorSet(ctx, cursor)
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
		d.log.Info("webhook: final-state events older than MaxAge not queued", "events", tooOld, "max_age", d.opts.MaxAge)
	}
	return more, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// prune deletes delivered and failed deliveries older than Retention.
func (d *Dispatcher) prune(ctx context.Context, now time.Time) {
	for ctx.Err() == nil {
		var n int
		err := d.store.InTx(ctx, func(ctx context.Context, x store.Executor) error {
			var err error
			n, err = x.WebhookDeliveryDeleteFinished(ctx, now.Add(-d.opts.Retention), 1000)
			return err
		})
		if err != nil {
			if ctx.Err() == nil {
				d.log.Warn("webhook: delete old deliveries", "err", err)
			}
			return
		}
		if n < 1000 {
			return
		}
	}
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

// send makes one attempt of w and returns its result.
func (d *Dispatcher) send(ctx context.Context, w *dt.WebhookDelivery) store.WebhookResult {
	d.attempts.Add(1)
	res := store.WebhookResult{ID: w.ID, ClaimedBy: d.opts.Instance, Attempt: w.Attempts}
	status, err := d.post(ctx, w)
	res.Now, res.LastStatus = d.clock.Now(), status
	var permanent *permanentError
	switch {
	case err == nil:
		res.Status = dt.WebhookDelivered
		d.log.Debug("webhook delivered", "delivery", w.ID, "event", w.EventID, "task", w.TaskID,
			"url", redact(w.URL), "attempt", w.Attempts, "status", status)
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
			"url", redact(w.URL), "attempt", w.Attempts, "next", res.NextAttemptAt, "err", res.LastError)
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
	if !slices.Contains(d.opts.URLs, w.URL) && !d.opts.AllowCallbacks.Allows(w.URL) {
		return 0, &permanentError{fmt.Errorf("callback URL %s is not allowed (allowed: %s)", redact(w.URL), d.opts.AllowCallbacks)}
	}
	ctx, cancel := context.WithTimeout(ctx, d.opts.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(w.Payload))
	if err != nil {
		return 0, &permanentError{fmt.Errorf("request to %s: %w", redact(w.URL), err)}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "drover-webhook/1")
	req.Header.Set(HeaderEventID, strconv.FormatInt(w.EventID, 10))
	req.Header.Set(HeaderEventType, string(w.EventType))
	req.Header.Set(HeaderAttempt, strconv.Itoa(w.Attempts))
	req.Header.Set(HeaderSignature, Sign(d.opts.Secret, w.Payload, d.clock.Now()))
	resp, err := d.client.Do(req)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
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
		msg += ": " + string(bytes.ToValidUTF8(s, []byte("?")))
	}
	return resp.StatusCode, errors.New(msg)
}
