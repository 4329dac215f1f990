package remotesim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// guard bounds every wait on a condition so a bug fails the test instead of
// hanging it.
const guard = 10 * time.Second

type hangProbe struct {
	started  chan bool // afterApply of each hang that began
	released chan struct{}
	active   atomic.Int64
}

// startService serves svc over real HTTP; probe, if non-nil, observes hangs.
func startService(t *testing.T, cfg Config, probe *hangProbe) (*Service, *Client) {
	t.Helper()
	svc := New(cfg)
	if probe != nil {
		probe.started = make(chan bool, 16)
		probe.released = make(chan struct{}, 16)
		svc.onHang = func(after bool) { probe.active.Add(1); probe.started <- after }
		svc.onRelease = func() { probe.active.Add(-1); probe.released <- struct{}{} }
	}
	ts := httptest.NewServer(svc.Handler())
	t.Cleanup(ts.Close)
	t.Cleanup(svc.Close) // runs before ts.Close so no hung handler blocks it
	c := NewClient(ts.URL)
	t.Cleanup(c.HTTP.CloseIdleConnections)
	return svc, c
}

func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(guard):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

func wantStatus(t *testing.T, err error, code int) {
	t.Helper()
	_ = statusOf(t, err, code)
}

// statusOf is wantStatus returning the error, for checks of its details.
func statusOf(t *testing.T, err error, code int) *StatusError {
	t.Helper()
	var se *StatusError
	if !errors.As(err, &se) || se.Code != code {
		t.Fatalf("err = %v, want HTTP %d", err, code)
	}
	return se
}

func TestSameKeyTwiceAppliesOnce(t *testing.T) {
	t.Parallel()
	svc, c := startService(t, Config{Seed: 1}, nil)
	ctx := t.Context()

	r1, err := c.Call(ctx, "charge", "k1", "o-1", 100)
	if err != nil {
		t.Fatal(err)
	}
	if r1.Deduplicated || r1.Operation != "charge" || r1.OrderID != "o-1" || !strings.HasPrefix(r1.Confirmation, "charge-o-1-") {
		t.Fatalf("first response = %+v", r1)
	}
	r2, err := c.Call(ctx, "charge", "k1", "o-1", 100)
	if err != nil {
		t.Fatal(err)
	}
	if !r2.Deduplicated || r2.Confirmation != r1.Confirmation {
		t.Fatalf("second response = %+v, want deduplicated copy of %+v", r2, r1)
	}
	if n := svc.Applied("charge", "o-1"); n != 1 {
		t.Fatalf("Applied = %d, want 1", n)
	}
	want := Stats{Calls: 2, Applied: 1, DeduplicatedCalls: 1}
	if got := svc.Stats(); got != want {
		t.Fatalf("Stats = %+v, want %+v", got, want)
	}
}

func TestSameLogicalOpTwoKeysIsDuplicateEffect(t *testing.T) {
	t.Parallel()
	svc, c := startService(t, Config{Seed: 1}, nil)
	for _, k := range []string{"k1", "k2"} {
		if _, err := c.Call(t.Context(), "ship", k, "o-9", 0); err != nil {
			t.Fatal(err)
		}
	}
	if n := svc.Applied("ship", "o-9"); n != 2 {
		t.Fatalf("Applied = %d, want 2", n)
	}
	if s := svc.Stats(); s.DuplicateEffects != 1 || s.Applied != 2 || s.DeduplicatedCalls != 0 {
		t.Fatalf("Stats = %+v, want 1 duplicate effect", s)
	}
}

func TestKeyReusedForOtherOperationConflicts(t *testing.T) {
	t.Parallel()
	svc, c := startService(t, Config{Seed: 1}, nil)
	if _, err := c.Call(t.Context(), "charge", "k", "o-1", 1); err != nil {
		t.Fatal(err)
	}
	_, err := c.Call(t.Context(), "charge", "k", "o-2", 1)
	wantStatus(t, err, http.StatusConflict)
	if !IsPermanent(err) {
		t.Fatalf("409 should be permanent: %v", err)
	}
	if n := svc.Applied("charge", "o-2"); n != 0 {
		t.Fatalf("conflicting call applied %d times", n)
	}
}

func TestTransientAppliesNothing(t *testing.T) {
	t.Parallel()
	svc, c := startService(t, Config{Seed: 1, TransientRate: 1}, nil)
	_, err := c.Call(t.Context(), "reserve", "k", "o-1", 5)
	wantStatus(t, err, http.StatusServiceUnavailable)
	if !IsTransient(err) || IsPermanent(err) {
		t.Fatalf("503 classification wrong: %v", err)
	}
	if n := svc.Applied("reserve", "o-1"); n != 0 {
		t.Fatalf("Applied = %d, want 0", n)
	}
	// A transient failure is not remembered: the same key succeeds later.
	svc.SetRates(0, 0, 0)
	r, err := c.Call(t.Context(), "reserve", "k", "o-1", 5)
	if err != nil || r.Deduplicated {
		t.Fatalf("retry = %+v, %v; want fresh success", r, err)
	}
	want := Stats{Calls: 2, Applied: 1, Transient: 1}
	if got := svc.Stats(); got != want {
		t.Fatalf("Stats = %+v, want %+v", got, want)
	}
}

func TestPermanentIsStickyPerKey(t *testing.T) {
	t.Parallel()
	svc, c := startService(t, Config{Seed: 1, PermanentRate: 1}, nil)
	_, err := c.Call(t.Context(), "charge", "k", "o-1", 5)
	se := statusOf(t, err, http.StatusUnprocessableEntity)
	if !IsPermanent(err) || IsTransient(err) {
		t.Fatalf("422 classification wrong: %v", err)
	}
	var body map[string]string
	if json.Unmarshal([]byte(se.Body), &body) != nil || body["error"] == "" {
		t.Fatalf("422 body = %q, want JSON error", se.Body)
	}
	svc.SetRates(0, 0, 0)
	_, err = c.Call(t.Context(), "charge", "k", "o-1", 5)
	wantStatus(t, err, http.StatusUnprocessableEntity)
	// A new key is a new request and may succeed.
	if _, err := c.Call(t.Context(), "charge", "k2", "o-1", 5); err != nil {
		t.Fatal(err)
	}
	// Forgiven, the rejected key is served anew.
	svc.Forgive()
	if _, err := c.Call(t.Context(), "charge", "k", "o-2", 5); err != nil {
		t.Fatalf("the rejected key after Forgive: %v", err)
	}
	want := Stats{Calls: 4, Applied: 2, Permanent: 2}
	if got := svc.Stats(); got != want {
		t.Fatalf("Stats = %+v, want %+v", got, want)
	}
}

// TestHangBeforeAndAfter drives hangs until it has seen one of each kind; the
// caller gives up once the handler is hanging.
func TestHangBeforeAndAfter(t *testing.T) {
	t.Parallel()
	probe := &hangProbe{}
	svc, c := startService(t, Config{Seed: 7, HangRate: 1}, probe)

	keyOf := map[bool]string{} // afterApply → key that hung that way
	for i := 0; len(keyOf) < 2; i++ {
		if i == 64 {
			t.Fatal("never saw both hang kinds")
		}
		key, order := fmt.Sprintf("k%d", i), fmt.Sprintf("o-%d", i)
		ctx, cancel := context.WithCancel(t.Context())
		errc := make(chan error, 1)
		go func() {
			_, err := c.Call(ctx, "charge", key, order, 10)
			errc <- err
		}()
		after := recv(t, probe.started, "hang to start")
		cancel()
		err := recv(t, errc, "call to return")
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("call err = %v, want context.Canceled", err)
		}
		recv(t, probe.released, "hung handler to be released")

		wantApplied := 0
		if after {
			wantApplied = 1
		}
		if n := svc.Applied("charge", order); n != wantApplied {
			t.Fatalf("hang(after=%v): Applied = %d, want %d", after, n, wantApplied)
		}
		if _, seen := keyOf[after]; !seen {
			keyOf[after] = key
		}
	}
	if n := probe.active.Load(); n != 0 {
		t.Fatalf("%d handlers still hung", n)
	}

	svc.SetRates(0, 0, 0)
	for after, key := range keyOf {
		order := "o-" + strings.TrimPrefix(key, "k")
		r, err := c.Call(t.Context(), "charge", key, order, 10)
		if err != nil {
			t.Fatal(err)
		}
		if r.Deduplicated != after {
			t.Fatalf("retry after hang(after=%v): Deduplicated = %v", after, r.Deduplicated)
		}
		if n := svc.Applied("charge", order); n != 1 {
			t.Fatalf("retry after hang(after=%v): Applied = %d, want 1", after, n)
		}
	}
	if s := svc.Stats(); s.DuplicateEffects != 0 {
		t.Fatalf("DuplicateEffects = %d, want 0", s.DuplicateEffects)
	}
}

func TestHangHitsCallerDeadline(t *testing.T) {
	t.Parallel()
	probe := &hangProbe{}
	_, c := startService(t, Config{Seed: 3, HangRate: 1}, probe)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	_, err := c.Call(ctx, "refund", "k", "o-1", 1)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want DeadlineExceeded", err)
	}
	if !IsTransient(err) {
		t.Fatalf("a timed-out attempt should be transient: %v", err)
	}
	recv(t, probe.started, "hang to start")
	recv(t, probe.released, "hung handler to be released")
	if n := probe.active.Load(); n != 0 {
		t.Fatalf("%d handlers still hung", n)
	}
}

func TestCloseReleasesHang(t *testing.T) {
	t.Parallel()
	probe := &hangProbe{}
	svc, c := startService(t, Config{Seed: 3, HangRate: 1}, probe)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Call(t.Context(), "reserve", "k", "o-1", 1)
		errc <- err
	}()
	recv(t, probe.started, "hang to start")
	svc.Close()
	recv(t, probe.released, "hung handler to be released")
	wantStatus(t, recv(t, errc, "call to return"), http.StatusServiceUnavailable)
}

func TestBadRequests(t *testing.T) {
	t.Parallel()
	svc, c := startService(t, Config{Seed: 1}, nil)
	cases := []struct {
		name, method, path, key, body string
		code                          int
	}{
		{"no key", "POST", "/v1/charge", "", `{"order_id":"o"}`, 400},
		{"bad json", "POST", "/v1/charge", "k", `{"order_id":`, 400},
		{"no order_id", "POST", "/v1/charge", "k", `{"amount":3}`, 400},
		{"bad operation", "POST", "/v1/Charge", "k", `{"order_id":"o"}`, 400},
		{"wrong method", "GET", "/v1/charge", "k", ``, 405},
		{"unknown path", "POST", "/v2/charge", "k", `{"order_id":"o"}`, 404},
	}
	for _, tc := range cases {
		req, err := http.NewRequestWithContext(t.Context(), tc.method, c.BaseURL+tc.path, strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		if tc.key != "" {
			req.Header.Set("Idempotency-Key", tc.key)
		}
		res, err := c.HTTP.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body map[string]string
		derr := json.NewDecoder(res.Body).Decode(&body)
		res.Body.Close()
		if res.StatusCode != tc.code {
			t.Errorf("%s: status %d, want %d", tc.name, res.StatusCode, tc.code)
		}
		if derr != nil || body["error"] == "" {
			t.Errorf("%s: body %v (%v), want {\"error\":...}", tc.name, body, derr)
		}
		if ct := res.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s: Content-Type %q", tc.name, ct)
		}
	}
	if _, err := c.Call(t.Context(), "charge", "k", "o", 1); err != nil {
		t.Fatal(err)
	}
	want := Stats{Calls: 1, Applied: 1, BadRequests: int64(len(cases))}
	if got := svc.Stats(); got != want {
		t.Fatalf("Stats = %+v, want %+v", got, want)
	}
}

func TestUnknownFieldsIgnored(t *testing.T) {
	t.Parallel()
	svc, c := startService(t, Config{Seed: 1}, nil)
	req, _ := http.NewRequestWithContext(t.Context(), "POST", c.BaseURL+"/v1/release", strings.NewReader(`{"order_id":"o-1","amount":2,"note":"x"}`))
	req.Header.Set("Idempotency-Key", "k")
	res, err := c.HTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 || svc.Applied("release", "o-1") != 1 {
		t.Fatalf("status %d, applied %d", res.StatusCode, svc.Applied("release", "o-1"))
	}
}

func TestConcurrentDistinctKeysCountedExactly(t *testing.T) {
	t.Parallel()
	svc, c := startService(t, Config{Seed: 42, TransientRate: 0.3, PermanentRate: 0.1}, nil)
	const n = 50
	var wg sync.WaitGroup
	var ok, transient, permanent atomic.Int64
	for i := range n {
		wg.Go(func() {
			_, err := c.Call(t.Context(), "charge", fmt.Sprintf("k%d", i), fmt.Sprintf("o-%d", i), int64(i))
			switch {
			case err == nil:
				ok.Add(1)
			case IsPermanent(err):
				permanent.Add(1)
			case IsTransient(err):
				transient.Add(1)
			default:
				t.Errorf("call %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	s := svc.Stats()
	if s.Calls != n || s.Applied != ok.Load() || s.Transient != transient.Load() || s.Permanent != permanent.Load() ||
		s.Applied+s.Transient+s.Permanent != n || s.DuplicateEffects != 0 {
		t.Fatalf("Stats = %+v; client saw ok=%d transient=%d permanent=%d", s, ok.Load(), transient.Load(), permanent.Load())
	}
}

func TestConcurrentSameKeyAppliesOnce(t *testing.T) {
	t.Parallel()
	svc, c := startService(t, Config{Seed: 1}, nil)
	const n = 50
	var wg sync.WaitGroup
	confs := make([]string, n)
	for i := range n {
		wg.Go(func() {
			r, err := c.Call(t.Context(), "charge", "same", "o-1", 9)
			if err != nil {
				t.Error(err)
			}
			confs[i] = r.Confirmation
		})
	}
	wg.Wait()
	for _, cf := range confs {
		if cf != confs[0] {
			t.Fatalf("confirmations differ: %q vs %q", cf, confs[0])
		}
	}
	want := Stats{Calls: n, Applied: 1, DeduplicatedCalls: n - 1}
	if got := svc.Stats(); got != want {
		t.Fatalf("Stats = %+v, want %+v", got, want)
	}
}

func TestSeedIsDeterministic(t *testing.T) {
	t.Parallel()
	run := func() []int {
		_, c := startService(t, Config{Seed: 99, TransientRate: 0.4, PermanentRate: 0.2}, nil)
		var codes []int
		for i := range 30 {
			_, err := c.Call(t.Context(), "reserve", fmt.Sprintf("k%d", i), "o", 1)
			code := 200
			var se *StatusError
			if errors.As(err, &se) {
				code = se.Code
			} else if err != nil {
				t.Fatal(err)
			}
			codes = append(codes, code)
		}
		return codes
	}
	a, b := run(), run()
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Fatalf("same seed, different faults:\n%v\n%v", a, b)
	}
}

func TestLatency(t *testing.T) {
	t.Parallel()
	svc, c := startService(t, Config{Seed: 1, Latency: 20 * time.Millisecond}, nil)
	start := time.Now()
	if _, err := c.Call(t.Context(), "charge", "k", "o", 1); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 20*time.Millisecond {
		t.Fatalf("call took %v, want at least the latency", d)
	}
	if svc.Applied("charge", "o") != 1 {
		t.Fatal("not applied")
	}
}

func TestServe(t *testing.T) {
	t.Parallel()
	svc := New(Config{Seed: 1})
	probe := &hangProbe{started: make(chan bool, 1), released: make(chan struct{}, 1)}
	svc.onHang = func(bool) { probe.started <- true }
	svc.onRelease = func() { probe.released <- struct{}{} }
	url, stop, err := svc.Serve(t.Context(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	c := NewClient(url)
	defer c.HTTP.CloseIdleConnections()
	if _, err := c.Call(t.Context(), "charge", "k", "o", 1); err != nil {
		t.Fatal(err)
	}

	// stop must not wait on a hung handler.
	svc.SetRates(0, 1, 0)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Call(t.Context(), "ship", "k2", "o", 1)
		errc <- err
	}()
	recv(t, probe.started, "hang to start")
	stop()
	recv(t, probe.released, "hung handler to be released")
	if err := recv(t, errc, "call to return"); err == nil {
		t.Fatal("hung call succeeded")
	}
	_, err = c.Call(t.Context(), "charge", "k3", "o", 1)
	if err == nil || !IsTransient(err) {
		t.Fatalf("call after stop: %v, want transient transport error", err)
	}
	stop() // idempotent
}

func TestClassification(t *testing.T) {
	t.Parallel()
	cases := []struct {
		err                  error
		permanent, transient bool
	}{
		{nil, false, false},
		{&StatusError{Code: 400}, true, false},
		{&StatusError{Code: 409}, true, false},
		{&StatusError{Code: 422}, true, false},
		{&StatusError{Code: 408}, false, true},
		{&StatusError{Code: 429}, false, true},
		{fmt.Errorf("wrapped: %w", &StatusError{Code: 503}), false, true},
		{errors.New("connection refused"), false, true},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), false, true},
		{fmt.Errorf("x: %w", context.Canceled), false, false},
	}
	for _, tc := range cases {
		if got := IsPermanent(tc.err); got != tc.permanent {
			t.Errorf("IsPermanent(%v) = %v", tc.err, got)
		}
		if got := IsTransient(tc.err); got != tc.transient {
			t.Errorf("IsTransient(%v) = %v", tc.err, got)
		}
	}
}

func TestServeStopsWhenCtxDone(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	url, stop, err := New(Config{Seed: 1}).Serve(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := NewClient(url)
	defer c.HTTP.CloseIdleConnections()
	if _, err := c.Call(t.Context(), "charge", "k", "o", 1); err != nil {
		t.Fatal(err)
	}
	cancel()
	stop() // blocks until the ctx-triggered shutdown has finished
	c.HTTP.CloseIdleConnections()
	if _, err := c.Call(t.Context(), "charge", "k2", "o", 1); err == nil {
		t.Fatal("call succeeded after ctx was cancelled")
	}
}

func TestRejectAmountAbove(t *testing.T) {
	t.Parallel()
	svc, c := startService(t, Config{Seed: 1, RejectAmountAbove: 1000}, nil)
	if _, err := c.Call(t.Context(), "charge", "k1", "o-1", 1000); err != nil {
		t.Fatalf("amount at the limit: %v", err)
	}
	_, err := c.Call(t.Context(), "charge", "k2", "o-2", 1001)
	se := statusOf(t, err, http.StatusUnprocessableEntity)
	if !strings.Contains(se.Body, "over the limit 1000") {
		t.Fatalf("422 body = %q, want the limit named", se.Body)
	}
	// Sticky per key, like the random permanent failures.
	_, err = c.Call(t.Context(), "charge", "k2", "o-2", 1001)
	wantStatus(t, err, http.StatusUnprocessableEntity)
	if got := svc.Applied("charge", "o-2"); got != 0 {
		t.Fatalf("rejected charge applied %d times", got)
	}
	// Raising the limit lets a new key through; the rejected key stays rejected.
	svc.SetRejectAmountAbove(5000)
	_, err = c.Call(t.Context(), "charge", "k2", "o-2", 1001)
	wantStatus(t, err, http.StatusUnprocessableEntity)
	if _, err := c.Call(t.Context(), "charge", "k3", "o-2", 1001); err != nil {
		t.Fatalf("new key under the raised limit: %v", err)
	}
}
