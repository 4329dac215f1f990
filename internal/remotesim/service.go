package remotesim

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"sync"
	"time"
)

// maxBody bounds request bodies; real requests are a few dozen bytes.
const maxBody = 1 << 20

var operationRE = regexp.MustCompile(`^[a-z-]+$`)

// Config sets the fault rates and timing of a Service. Rates are probabilities
// in [0, 1] and are checked in order permanent, transient, hang.
type Config struct {
	// TransientRate is the probability a call fails with 503 before applying anything.
	TransientRate float64
	// HangRate is the probability a call never answers; half of hangs happen
	// before the effect is applied and half after, so the caller cannot tell
	// whether it took effect.
	HangRate float64
	// PermanentRate is the probability a call fails with 422; the failure is
	// sticky, so retrying with the same key gets 422 again.
	PermanentRate float64
	// Seed makes the fault sequence reproducible.
	Seed int64
	// Latency is an optional fixed service time per call.
	Latency time.Duration
	// RejectAmountAbove, when positive, fails every call whose amount is
	// larger with 422 (sticky, like PermanentRate): a deterministic
	// permanent failure, e.g. a card declined over a limit.
	RejectAmountAbove int64
}

// Stats counts what the service saw. It is a snapshot; the JSON form is what
// the demo prints.
type Stats struct {
	// Calls is every valid request the service processed, deduplicated ones
	// included; a caller that gives up during Latency is not counted.
	Calls int64 `json:"calls"`
	// Applied is the number of effects applied.
	Applied int64 `json:"applied"`
	// DeduplicatedCalls is calls answered from the idempotency store.
	DeduplicatedCalls int64 `json:"deduplicated_calls"`
	// DuplicateEffects is logical operations applied more than once; it must
	// stay 0 when callers reuse idempotency keys on retry.
	DuplicateEffects int64 `json:"duplicate_effects"`
	// Transient is the number of injected 503s.
	Transient int64 `json:"transient"`
	// Permanent is the number of 422s returned, sticky repeats included.
	Permanent int64 `json:"permanent"`
	// Hangs is the number of calls that were left hanging.
	Hangs int64 `json:"hangs"`
	// BadRequests is rejected input: missing key or order_id, bad JSON, wrong
	// method or path, and keys reused for a different operation (409).
	BadRequests int64 `json:"bad_requests"`
}

// Response is the success body of a call.
type Response struct {
	Operation    string `json:"operation"`
	OrderID      string `json:"order_id"`
	Confirmation string `json:"confirmation"`
	Deduplicated bool   `json:"deduplicated"`
}

// keyRecord is what the idempotency store remembers for a key that reached a
// final outcome (success or permanent failure).
type keyRecord struct {
	operation string
	orderID   string
	permanent bool
	resp      Response
}

// Service is the simulated remote service. It is safe for concurrent use.
type Service struct {
	latency     time.Duration
	rejectAbove int64

	mu        sync.Mutex
	rng       *rand.Rand
	transient float64
	hang      float64
	permanent float64
	keys      map[string]keyRecord
	effects   map[string]int // logical op (operation, order_id) → times applied
	seq       int64
	stats     Stats

	closeOnce sync.Once
	closed    chan struct{}

	// Test hooks, set before serving: onHang runs when a handler starts to
	// hang, onRelease when it stops.
	onHang    func(afterApply bool)
	onRelease func()
}

// New returns a Service with the given fault configuration.
func New(cfg Config) *Service {
	seed := uint64(cfg.Seed)
	return &Service{
		latency:     cfg.Latency,
		rejectAbove: cfg.RejectAmountAbove,
		rng:         rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		transient:   cfg.TransientRate,
		hang:        cfg.HangRate,
		permanent:   cfg.PermanentRate,
		keys:        make(map[string]keyRecord),
		effects:     make(map[string]int),
		closed:      make(chan struct{}),
	}
}

// SetRates changes the fault rates of later calls, e.g. to let a test's retry
// succeed after a forced hang.
func (s *Service) SetRates(transient, hang, permanent float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.transient, s.hang, s.permanent = transient, hang, permanent
}

// SetRejectAmountAbove changes Config.RejectAmountAbove for later calls
// with new keys (a key rejected before stays rejected): an operator raised
// the limit.
func (s *Service) SetRejectAmountAbove(limit int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rejectAbove = limit
}

// Forgive forgets the permanent rejections of earlier calls, so a call
// repeated with a rejected key is served anew: the operator fixed the
// cause (the demo's console does, so resubmitted orders complete).
func (s *Service) Forgive() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, r := range s.keys {
		if r.permanent {
			delete(s.keys, k)
		}
	}
}

// Stats returns a snapshot of the counters.
func (s *Service) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// Applied reports how many times the logical operation (operation, orderID)
// was applied: 0, 1, or more if callers misbehaved.
func (s *Service) Applied(operation, orderID string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.effects[effectKey(operation, orderID)]
}

// Close releases every hung handler and makes later hangs return at once. It
// is idempotent.
func (s *Service) Close() {
	s.closeOnce.Do(func() { close(s.closed) })
}

// Handler serves POST /v1/{operation}.
func (s *Service) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/{operation}", s.serveCall)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.countBad()
		writeError(w, http.StatusNotFound, "no such endpoint")
	})
	return mux
}

// Serve listens on addr and serves Handler until stop is called or ctx is
// done. stop releases hung handlers, then shuts the server down; it is
// idempotent.
func (s *Service) Serve(ctx context.Context, addr string) (url string, stop func(), err error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("remotesim: listen %s: %w", addr, err)
	}
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(ln) // returns ErrServerClosed after Shutdown
	}()
	var once sync.Once
	stopping := make(chan struct{})
	stop = func() {
		once.Do(func() {
			close(stopping)
			s.Close()
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if srv.Shutdown(sctx) != nil {
				_ = srv.Close()
			}
			<-served
		})
	}
	go func() {
		select {
		case <-ctx.Done():
			stop()
		case <-stopping:
		}
	}()
	return "http://" + ln.Addr().String(), stop, nil
}

func (s *Service) countBad() {
	s.mu.Lock()
	s.stats.BadRequests++
	s.mu.Unlock()
}

type request struct {
	OrderID string `json:"order_id"`
	Amount  int64  `json:"amount"`
}

// outcome is what serveCall decided under the lock.
type outcome int

const (
	outSuccess outcome = iota
	outDedup
	outConflict
	outPermanent
	outTransient
	outHangBefore
	outHangAfter
)

func (s *Service) serveCall(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		s.countBad()
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, http.StatusMethodNotAllowed, "method must be POST")
		return
	}
	op := r.PathValue("operation")
	if !operationRE.MatchString(op) {
		s.countBad()
		writeError(w, http.StatusBadRequest, "operation must match [a-z-]+")
		return
	}
	key := r.Header.Get("Idempotency-Key")
	if key == "" {
		s.countBad()
		writeError(w, http.StatusBadRequest, "missing Idempotency-Key header")
		return
	}
	// Read the whole body: the server only notices a client disconnect (and
	// cancels r.Context, releasing hangs) once the body hit EOF.
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		s.countBad()
		writeError(w, http.StatusBadRequest, "read body: "+err.Error())
		return
	}
	var req request
	if err := json.Unmarshal(body, &req); err != nil {
		s.countBad()
		writeError(w, http.StatusBadRequest, "bad JSON body: "+err.Error())
		return
	}
	if req.OrderID == "" {
		s.countBad()
		writeError(w, http.StatusBadRequest, "missing order_id")
		return
	}

	ctx := r.Context()
	if s.latency > 0 {
		t := time.NewTimer(s.latency)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return // caller is gone; nothing was decided or applied
		case <-s.closed:
			t.Stop()
			writeError(w, http.StatusServiceUnavailable, "service closed")
			return
		}
	}

	out, resp, msg := s.decide(op, key, req.OrderID, req.Amount)
	switch out {
	case outSuccess, outDedup:
		writeJSON(w, http.StatusOK, resp)
	case outConflict:
		writeError(w, http.StatusConflict, msg)
	case outPermanent:
		writeError(w, http.StatusUnprocessableEntity, msg)
	case outTransient:
		writeError(w, http.StatusServiceUnavailable, msg)
	case outHangBefore, outHangAfter:
		s.hangUntilReleased(ctx, out == outHangAfter)
		// Only reached via Close or a gone caller; either way the caller
		// never learns whether the effect happened.
		writeError(w, http.StatusServiceUnavailable, "service closed")
	}
}

// decide does everything that must be atomic: dedup, fault choice, apply.
func (s *Service) decide(op, key, orderID string, amount int64) (outcome, Response, string) {
	s.mu.Lock()
	defer s.mu.Unlock()

	if rec, ok := s.keys[key]; ok {
		if rec.operation != op || rec.orderID != orderID {
			s.stats.BadRequests++
			return outConflict, Response{}, fmt.Sprintf("idempotency key already used for %s of order %s", rec.operation, rec.orderID)
		}
		s.stats.Calls++
		if rec.permanent {
			s.stats.Permanent++
			return outPermanent, Response{}, permanentMsg(op, orderID)
		}
		s.stats.DeduplicatedCalls++
		resp := rec.resp
		resp.Deduplicated = true
		return outDedup, resp, ""
	}
	s.stats.Calls++
	if s.rejectAbove > 0 && amount > s.rejectAbove {
		s.stats.Permanent++
		s.keys[key] = keyRecord{operation: op, orderID: orderID, permanent: true}
		return outPermanent, Response{}, fmt.Sprintf("%s rejected for order %s: amount %d is over the limit %d", op, orderID, amount, s.rejectAbove)
	}

	// One draw picks the fault so the configured rates are exact probabilities.
	x := s.rng.Float64()
	switch {
	case x < s.permanent:
		s.stats.Permanent++
		s.keys[key] = keyRecord{operation: op, orderID: orderID, permanent: true}
		return outPermanent, Response{}, permanentMsg(op, orderID)
	case x < s.permanent+s.transient:
		s.stats.Transient++
		return outTransient, Response{}, "transient failure, retry later"
	case x < s.permanent+s.transient+s.hang:
		s.stats.Hangs++
		if s.rng.IntN(2) == 0 {
			return outHangBefore, Response{}, ""
		}
		resp := s.apply(op, key, orderID)
		return outHangAfter, resp, ""
	}
	return outSuccess, s.apply(op, key, orderID), ""
}

// apply records the effect and the stored response; s.mu must be held.
func (s *Service) apply(op, key, orderID string) Response {
	ek := effectKey(op, orderID)
	s.effects[ek]++
	if s.effects[ek] > 1 {
		s.stats.DuplicateEffects++
	}
	s.stats.Applied++
	s.seq++
	resp := Response{
		Operation:    op,
		OrderID:      orderID,
		Confirmation: op + "-" + orderID + "-" + strconv.FormatInt(s.seq, 10),
	}
	s.keys[key] = keyRecord{operation: op, orderID: orderID, resp: resp}
	return resp
}

// hangUntilReleased blocks until the caller gives up or the service closes, so
// a hang never outlives its request.
func (s *Service) hangUntilReleased(ctx context.Context, afterApply bool) {
	if s.onHang != nil {
		s.onHang(afterApply)
	}
	select {
	case <-ctx.Done():
	case <-s.closed:
	}
	if s.onRelease != nil {
		s.onRelease()
	}
}

func permanentMsg(op, orderID string) string {
	return fmt.Sprintf("%s rejected for order %s", op, orderID)
}

func effectKey(op, orderID string) string { return op + "\x00" + orderID }

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v) // the caller may be gone; nothing to do
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}
