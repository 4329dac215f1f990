package droverclient_test

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

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/convoy"
	"github.com/drover-run/drover/droverclient"
	"github.com/drover-run/drover/internal/httpapi"
	"github.com/drover-run/drover/internal/httpapi/apitest"
	"github.com/drover-run/drover/internal/testutil"
)

const (
	submitTok   = "client-submit-token-0123456789"
	operatorTok = "client-operator-token-0123456789"
)

// env is a real API server over a started drover client on SQLite.
type env struct {
	srv *httptest.Server
	d   *drover.Client
	q   *convoy.Client
	// cut, when set, makes the next event stream end after that many
	// events (a dropped connection).
	cut atomic.Int64
}

// newEnv starts the API. Workflows: "echo" (two steps returning the
// input), "fail" (fails permanently: Error and an alert), "external" (an
// agent no process runs: stays Processing), "approval" (waits for the
// signal "approved", then echoes).
func newEnv(t *testing.T) *env {
	t.Helper()
	drv := testutil.SQLite(t)
	cfg := drover.Config{
		Store: drv, PollInterval: 10 * time.Millisecond, SupervisorInterval: 50 * time.Millisecond,
		Workflows: []drover.Workflow{
			{Name: "echo", Steps: []drover.Step{{Name: "a", Agent: "echo"}, {Name: "b", Agent: "echo"}}},
			{Name: "fail", Steps: []drover.Step{{Name: "a", Agent: "fail"}}},
			{Name: "external", Steps: []drover.Step{{Name: "a", Agent: "remote"}}},
			{Name: "approval", Steps: []drover.Step{{Name: "approve", Signal: "approved", Timeout: time.Hour}, {Name: "b", Agent: "echo"}}},
		},
		Agents: []drover.Agent{
			{Name: "echo", Func: func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) { return r.Input, nil }},
			{Name: "fail", Func: func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) {
				return nil, drover.Permanent(errors.New("card declined"))
			}},
		},
		ExternalAgents: []string{"remote"},
	}
	opts := httpapi.Options{Rate: -1, EventPollInterval: 10 * time.Millisecond, Tokens: []httpapi.Token{
		{Secret: submitTok, Scopes: []httpapi.Scope{httpapi.ScopeSubmit}},
		{Secret: operatorTok, Scopes: []httpapi.Scope{httpapi.ScopeOperator}},
	}}
	e := &env{}
	s := apitest.Start(t, cfg, opts, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if n := e.cut.Swap(0); n > 0 {
				ctx, cancel := context.WithCancel(r.Context())
				defer cancel()
				h.ServeHTTP(&cutWriter{ResponseWriter: w, left: n, cancel: cancel}, r.WithContext(ctx))
				return
			}
			h.ServeHTTP(w, r)
		})
	})
	e.srv, e.d, e.q = s.HTTP, s.Drover, s.Convoy
	return e
}

// cutWriter ends the request (as a dropped connection would) after left
// events were written.
type cutWriter struct {
	http.ResponseWriter
	mu     sync.Mutex
	left   int64
	cancel context.CancelFunc
}

func (c *cutWriter) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.left <= 0 {
		return 0, errors.New("cut")
	}
	if strings.HasPrefix(string(b), "id: ") {
		c.left--
		if c.left == 0 {
			defer c.cancel()
		}
	}
	return c.ResponseWriter.Write(b)
}

func (c *cutWriter) Flush() { c.ResponseWriter.(http.Flusher).Flush() }

func (c *cutWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

func (e *env) client(t *testing.T, token string) *droverclient.Client {
	t.Helper()
	c, err := droverclient.New(e.srv.URL, token)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// waitFor polls cond until it is true or 20s passed.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// wantAPIError checks err is an *APIError with status and code that
// matches sentinel with errors.Is.
func wantAPIError(t *testing.T, err error, status int, code string, sentinel error) {
	t.Helper()
	var ae *droverclient.APIError
	if !errors.As(err, &ae) {
		t.Fatalf("error %v (%T), want an *APIError", err, err)
	}
	if ae.Status != status || (code != "" && ae.Code != code) || ae.Message == "" {
		t.Fatalf("error %+v, want status %d code %q with a message", ae, status, code)
	}
	if !errors.Is(err, sentinel) {
		t.Fatalf("errors.Is(%v, %v) is false", err, sentinel)
	}
}

func TestSubmitGetList(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	c := e.client(t, submitTok)

	task, created, err := c.SubmitTask(ctx, droverclient.SubmitRequest{Workflow: "echo", ID: "t-1", OrderingKey: "k", Input: json.RawMessage(`{"n":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	if !created || task.ID != "t-1" || task.Workflow != "echo" || task.OrderingKey != "k" || task.OrderingSeq != 1 || len(task.Steps) != 2 || string(task.Input) != `{"n":1}` {
		t.Fatalf("submitted: created=%v %+v", created, task)
	}
	// The same ID and input: the existing task, not created.
	again, created, err := c.SubmitTask(ctx, droverclient.SubmitRequest{Workflow: "echo", ID: "t-1", OrderingKey: "k", Input: json.RawMessage(`{"n":1}`)})
	if err != nil || created || again.ID != "t-1" {
		t.Fatalf("idempotent submit: created=%v %v %v", created, again, err)
	}
	// Another input: 409.
	_, _, err = c.SubmitTask(ctx, droverclient.SubmitRequest{Workflow: "echo", ID: "t-1", Input: json.RawMessage(`{"n":2}`)})
	wantAPIError(t, err, 409, "conflict", droverclient.ErrConflict)
	// Unknown workflow, bad ID: 400, ErrInvalid.
	_, _, err = c.SubmitTask(ctx, droverclient.SubmitRequest{Workflow: "nope"})
	wantAPIError(t, err, 400, "", droverclient.ErrInvalid)
	// A generated ID and a null input.
	gen, created, err := c.SubmitTask(ctx, droverclient.SubmitRequest{Workflow: "echo"})
	if err != nil || !created || gen.ID == "" || string(gen.Input) != "null" {
		t.Fatalf("generated: %+v %v %v", gen, created, err)
	}

	var got *droverclient.Task
	waitFor(t, "t-1 Processed", func() bool {
		got, err = c.Task(ctx, "t-1")
		if err != nil {
			t.Fatal(err)
		}
		return got.State == droverclient.StateProcessed
	})
	if !got.Final() || string(got.Output) != `{"n":1}` || len(got.Steps) != 2 || got.Steps[1].State != "Processed" ||
		got.Steps[0].IdempotencyKey == "" || got.Steps[0].Attempt != 1 || got.Steps[0].FinishedAt == nil {
		t.Fatalf("task: %+v", got)
	}

	_, err = c.Task(ctx, "nope")
	wantAPIError(t, err, 404, "not_found", droverclient.ErrNotFound)
	if _, err := c.Task(ctx, ""); err == nil {
		t.Fatal("empty ID accepted")
	}

	// List: filters and pages.
	for _, id := range []string{"t-2", "t-3"} {
		if _, _, err := c.SubmitTask(ctx, droverclient.SubmitRequest{Workflow: "external", ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	page, err := c.Tasks(ctx, droverclient.ListParams{Workflow: "external", Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Tasks) != 1 || page.Tasks[0].ID != "t-2" || page.NextAfter != "t-2" || len(page.Tasks[0].Steps) != 0 {
		t.Fatalf("page 1: %+v", page)
	}
	page, err = c.Tasks(ctx, droverclient.ListParams{Workflow: "external", Limit: 1, After: page.NextAfter})
	if err != nil || len(page.Tasks) != 1 || page.Tasks[0].ID != "t-3" {
		t.Fatalf("page 2: %+v %v", page, err)
	}
	page, err = c.Tasks(ctx, droverclient.ListParams{States: []string{"Processed", "Cancelled"}})
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{}
	for _, tk := range page.Tasks {
		ids = append(ids, tk.ID)
	}
	if !contains(ids, "t-1") || contains(ids, "t-2") || page.NextAfter != "" {
		t.Fatalf("Processed or Cancelled: %v next %q", ids, page.NextAfter)
	}
	// By ordering key and by time of last update.
	listIDs := func(p droverclient.ListParams) string {
		t.Helper()
		page, err := c.Tasks(ctx, p)
		if err != nil {
			t.Fatalf("Tasks(%+v): %v", p, err)
		}
		ids := []string{}
		for _, tk := range page.Tasks {
			ids = append(ids, tk.ID)
		}
		return fmt.Sprint(ids)
	}
	at := got.UpdatedAt
	for _, c := range []struct {
		p    droverclient.ListParams
		want string
	}{
		{droverclient.ListParams{OrderingKey: "k"}, "[t-1]"},
		{droverclient.ListParams{OrderingKey: "other"}, "[]"},
		{droverclient.ListParams{OrderingKey: "k", UpdatedFrom: at.Add(time.Microsecond)}, "[]"},
	} {
		if got := listIDs(c.p); got != c.want {
			t.Errorf("Tasks(%+v) = %s, want %s", c.p, got, c.want)
		}
	}
	// The microsecond of t-1's last update: t-1, and any task one
	// transaction finished with it, none other.
	inRange, err := c.Tasks(ctx, droverclient.ListParams{UpdatedFrom: at, UpdatedBefore: at.Add(time.Microsecond)})
	if err != nil {
		t.Fatal(err)
	}
	sawT1 := false
	for _, tk := range inRange.Tasks {
		sawT1 = sawT1 || tk.ID == "t-1"
		if !tk.UpdatedAt.Equal(at) {
			t.Errorf("the microsecond of t-1's update lists %s, updated at %s", tk.ID, tk.UpdatedAt)
		}
	}
	if !sawT1 {
		t.Errorf("the microsecond of t-1's update does not list t-1: %+v", inRange.Tasks)
	}
	_, err = c.Tasks(ctx, droverclient.ListParams{UpdatedFrom: at, UpdatedBefore: at})
	wantAPIError(t, err, 400, "invalid_parameter", droverclient.ErrInvalid)
	_, err = c.Tasks(ctx, droverclient.ListParams{States: []string{"Bogus"}})
	wantAPIError(t, err, 400, "invalid_parameter", droverclient.ErrInvalid)
	// A bad query parameter is named in the error the client returns.
	_, err = c.Tasks(ctx, droverclient.ListParams{Limit: 5000})
	wantAPIError(t, err, 400, "invalid_parameter", droverclient.ErrInvalid)
	if !strings.Contains(err.Error(), `query parameter "limit"`) {
		t.Fatalf("error %q does not name the parameter", err)
	}
}

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

func TestCancelResubmitAndAuth(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	sub, op := e.client(t, submitTok), e.client(t, operatorTok)
	if _, _, err := sub.SubmitTask(ctx, droverclient.SubmitRequest{Workflow: "external", ID: "x-1"}); err != nil {
		t.Fatal(err)
	}
	// A submit token may not cancel: 403.
	_, err := sub.Cancel(ctx, "x-1", "no")
	wantAPIError(t, err, 403, "forbidden", droverclient.ErrForbidden)
	// No token, a wrong token: 401.
	_, err = e.client(t, "").Task(ctx, "x-1")
	wantAPIError(t, err, 401, "unauthorized", droverclient.ErrUnauthorized)
	_, err = e.client(t, "not-a-token-of-this-server").Task(ctx, "x-1")
	wantAPIError(t, err, 401, "unauthorized", droverclient.ErrUnauthorized)
	// Resubmitting a task that is not Error or Cancelled: 409.
	_, err = op.Resubmit(ctx, "x-1", nil)
	wantAPIError(t, err, 409, "wrong_state", droverclient.ErrConflict)

	tk, err := op.Cancel(ctx, "x-1", "customer asked")
	if err != nil || tk.State != droverclient.StateCancelled || len(tk.Steps) != 1 {
		t.Fatalf("cancel: %+v %v", tk, err)
	}
	_, err = op.Cancel(ctx, "x-1", "again")
	wantAPIError(t, err, 409, "wrong_state", droverclient.ErrConflict)
	_, err = op.Cancel(ctx, "nope", "")
	wantAPIError(t, err, 404, "not_found", droverclient.ErrNotFound)

	from := 0
	tk, err = op.Resubmit(ctx, "x-1", &droverclient.ResubmitOptions{FromStep: &from})
	if err != nil || tk.Final() {
		t.Fatalf("resubmit: %+v %v", tk, err)
	}
	_, err = op.Resubmit(ctx, "nope", nil)
	wantAPIError(t, err, 404, "not_found", droverclient.ErrNotFound)
	// The cancel reason is in the history.
	evs, err := sub.Events(ctx, droverclient.EventParams{TaskID: "x-1"})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, ev := range evs {
		found = found || strings.Contains(ev.Message, "customer asked")
	}
	if !found {
		t.Fatalf("no event with the cancel reason: %+v", evs)
	}
}

func TestAlerts(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	sub, op := e.client(t, submitTok), e.client(t, operatorTok)
	if _, _, err := sub.SubmitTask(ctx, droverclient.SubmitRequest{Workflow: "fail", ID: "f-1"}); err != nil {
		t.Fatal(err)
	}
	var page *droverclient.AlertPage
	waitFor(t, "an alert", func() bool {
		var err error
		if page, err = sub.Alerts(ctx, droverclient.AlertParams{}); err != nil {
			t.Fatal(err)
		}
		return len(page.Alerts) > 0
	})
	a := page.Alerts[0]
	if a.Subject != "f-1" || a.Acknowledged != nil || a.ID == 0 || a.Type == "" {
		t.Fatalf("alert: %+v", a)
	}
	_, err := sub.AckAlert(ctx, a.ID)
	wantAPIError(t, err, 403, "forbidden", droverclient.ErrForbidden)
	acked, err := op.AckAlert(ctx, a.ID)
	if err != nil || acked.ID != a.ID || acked.Acknowledged == nil || acked.Acknowledged.EventID <= a.ID {
		t.Fatalf("ack: %+v %v", acked, err)
	}
	again, err := op.AckAlert(ctx, a.ID)
	if err != nil || again.Acknowledged == nil || again.Acknowledged.EventID != acked.Acknowledged.EventID {
		t.Fatalf("second ack: %+v %v", again, err)
	}
	un, err := sub.Alerts(ctx, droverclient.AlertParams{Unacknowledged: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range un.Alerts {
		if x.ID == a.ID {
			t.Fatalf("acknowledged alert listed as unacknowledged: %+v", un)
		}
	}
	p1, err := sub.Alerts(ctx, droverclient.AlertParams{Limit: 1})
	if err != nil || len(p1.Alerts) != 1 || p1.NextAfter != p1.Alerts[0].ID {
		t.Fatalf("limit 1: %+v %v", p1, err)
	}
	_, err = op.AckAlert(ctx, 1<<40)
	wantAPIError(t, err, 404, "not_found", droverclient.ErrNotFound)
}

// newStub serves fn and returns its URL.
func newStub(t *testing.T, fn http.HandlerFunc) string {
	t.Helper()
	s := httptest.NewServer(fn)
	t.Cleanup(s.Close)
	return s.URL
}

// TestWithNamespace: a global token's clients of two namespaces submit the
// same ID without conflict and each reads its own task; the default
// namespace has neither.
func TestWithNamespace(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for _, ns := range []string{"a", "b"} {
		c, err := droverclient.New(e.srv.URL, submitTok, droverclient.WithNamespace(ns))
		if err != nil {
			t.Fatal(err)
		}
		if _, created, err := c.SubmitTask(ctx, droverclient.SubmitRequest{Workflow: "external", ID: "same", Input: []byte(`"` + ns + `"`)}); err != nil || !created {
			t.Fatalf("%s: submit: %v, created %v", ns, err, created)
		}
		task, err := c.Task(ctx, "same")
		if err != nil || string(task.Input) != `"`+ns+`"` || task.ID != "same" {
			t.Fatalf("%s: task %+v, %v", ns, task, err)
		}
	}
	if _, err := e.client(t, submitTok).Task(ctx, "same"); !errors.Is(err, droverclient.ErrNotFound) {
		t.Fatalf("the default namespace reads another's task: %v", err)
	}
}
