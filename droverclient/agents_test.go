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
	"github.com/drover-run/drover/droverclient"
	"github.com/drover-run/drover/internal/httpapi"
	"github.com/drover-run/drover/internal/httpapi/apitest"
	"github.com/drover-run/drover/internal/testutil"
	"github.com/drover-run/drover/store"
)

const agentTok = "client-agent-token-0123456789"

// agentEnv is a real API server over a started drover client whose
// workflows call the external agent "worker" that only remote agents
// serve. Workflows: "remote" (one step on worker) and "remote-comp" (echo
// with compensation undo, then worker; policy compensate).
type agentEnv struct {
	srv *httptest.Server
	d   *drover.Client
	// failPolls, while positive, makes polls answer 503 (and counts down).
	failPolls atomic.Int64
	polls     atomic.Int64
}

func newAgentEnv(t *testing.T, drv store.Driver) *agentEnv {
	t.Helper()
	cfg := drover.Config{
		Store: drv, PollInterval: 10 * time.Millisecond, SupervisorInterval: 50 * time.Millisecond,
		Workflows: []drover.Workflow{
			{Name: "remote", Steps: []drover.Step{{Name: "a", Agent: "worker"}}},
			{Name: "remote-comp", OnFailure: drover.PolicyCompensate,
				Steps: []drover.Step{{Name: "a", Agent: "echo", Compensation: "undo"}, {Name: "b", Agent: "worker"}}},
		},
		Agents: []drover.Agent{
			{Name: "echo", Func: func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) { return r.Input, nil }},
			{Name: "undo", Func: func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) { return []byte(`"undone"`), nil }},
		},
		ExternalAgents: []string{"worker"},
	}
	opts := httpapi.Options{Rate: -1, Tokens: []httpapi.Token{
		{Secret: submitTok, Scopes: []httpapi.Scope{httpapi.ScopeSubmit}},
		{Secret: agentTok, Scopes: []httpapi.Scope{httpapi.ScopeAgent}},
	}}
	e := &agentEnv{}
	s := apitest.Start(t, cfg, opts, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasSuffix(r.URL.Path, "/poll") {
				e.polls.Add(1)
				if e.failPolls.Add(-1) >= 0 {
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(http.StatusServiceUnavailable)
					_, _ = w.Write([]byte(`{"error":{"code":"unavailable","message":"try later"}}`))
					return
				}
			}
			h.ServeHTTP(w, r)
		})
	})
	e.srv, e.d = s.HTTP, s.Drover
	return e
}

func (e *agentEnv) client(t *testing.T, token string) *droverclient.Client {
	t.Helper()
	c, err := droverclient.New(e.srv.URL, token)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// waitTask polls the task until it is in state.
func waitTask(t *testing.T, c *droverclient.Client, id, state string) *droverclient.Task {
	t.Helper()
	var last *droverclient.Task
	waitFor(t, "task "+id+" "+state, func() bool {
		tk, err := c.Task(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		last = tk
		return string(tk.State) == state
	})
	return last
}

func submit(t *testing.T, c *droverclient.Client, workflow, id, input string) {
	t.Helper()
	if _, _, err := c.SubmitTask(context.Background(), droverclient.SubmitRequest{Workflow: workflow, ID: id, Input: json.RawMessage(input)}); err != nil {
		t.Fatal(err)
	}
}

// drivers opens a fresh store of each driver.
var drivers = map[string]func(t *testing.T) store.Driver{
	"sqlite":   func(t *testing.T) store.Driver { return testutil.SQLite(t) },
	"postgres": func(t *testing.T) store.Driver { return testutil.Postgres(t) },
}

// Poll, Complete and Fail against a real server, on both drivers.
func TestAgentPollCompleteFail(t *testing.T) {
	for name, open := range drivers {
		t.Run(name, func(t *testing.T) {
			e := newAgentEnv(t, open(t))
			sub, ag := e.client(t, submitTok), e.client(t, agentTok)
			ctx := context.Background()

			submit(t, sub, "remote", "c-1", `{"n":1}`)
			reqs, err := ag.Poll(ctx, "worker", 10, 20*time.Second)
			if err != nil || len(reqs) != 1 {
				t.Fatalf("Poll = %v, %v; want one request", reqs, err)
			}
			r := reqs[0]
			if r.TaskID != "c-1" || r.Agent != "worker" || r.Kind != "do" || r.Attempt != 1 || r.IdempotencyKey != "c-1/0/a" ||
				string(r.Input) != `{"n":1}` || !r.CompleteBy.After(time.Now()) {
				t.Fatalf("request: %+v", r)
			}
			if err := ag.Complete(ctx, r, json.RawMessage(`{"done":true}`)); err != nil {
				t.Fatal(err)
			}
			tk := waitTask(t, sub, "c-1", "Processed")
			if string(tk.Output) != `{"done":true}` {
				t.Fatalf("output %s", tk.Output)
			}
			err = ag.Complete(ctx, r, nil)
			if !errors.Is(err, droverclient.ErrStale) || !errors.Is(err, droverclient.ErrConflict) {
				t.Fatalf("second Complete: %v, want ErrStale", err)
			}
			if err := ag.Fail(ctx, r, "x", true); !errors.Is(err, droverclient.ErrStale) {
				t.Fatalf("Fail after Complete: %v, want ErrStale", err)
			}

			// Transient: delivered again; permanent: compensated.
			submit(t, sub, "remote-comp", "c-2", `{"n":2}`)
			reqs, err = ag.Poll(ctx, "worker", 1, 20*time.Second)
			if err != nil || len(reqs) != 1 {
				t.Fatalf("Poll = %v, %v", reqs, err)
			}
			if string(reqs[0].PreviousOutput) != `{"n":2}` {
				t.Fatalf("previous output %s", reqs[0].PreviousOutput)
			}
			if err := ag.Fail(ctx, reqs[0], "busy", false); err != nil {
				t.Fatal(err)
			}
			again, err := ag.Poll(ctx, "worker", 1, 20*time.Second)
			if err != nil || len(again) != 1 || again[0].ID != reqs[0].ID || again[0].Token == reqs[0].Token {
				t.Fatalf("redelivery: %v, %v (first %+v)", again, err, reqs[0])
			}
			if err := ag.Fail(ctx, again[0], "out of stock", true); err != nil {
				t.Fatal(err)
			}
			waitTask(t, sub, "c-2", "Compensated")

			// Nothing left: an empty, non-nil answer after the wait.
			reqs, err = ag.Poll(ctx, "worker", 1, 0)
			if err != nil || reqs == nil || len(reqs) != 0 {
				t.Fatalf("empty Poll = %v, %v", reqs, err)
			}
			// Argument and scope errors.
			if _, err := ag.Poll(ctx, "worker", 0, 0); err == nil {
				t.Fatal("Poll with max 0 succeeded")
			}
			if _, err := sub.Poll(ctx, "worker", 1, 0); !errors.Is(err, droverclient.ErrForbidden) {
				t.Fatalf("Poll with a submit token: %v", err)
			}
			if err := ag.Complete(ctx, &droverclient.Request{}, nil); err == nil {
				t.Fatal("Complete of a zero Request succeeded")
			}
			if err := ag.Complete(ctx, r, json.RawMessage(`{bad`)); err == nil || errors.Is(err, droverclient.ErrStale) {
				t.Fatalf("Complete with invalid JSON: %v", err)
			}
		})
	}
}

// RunAgent serves requests concurrently: outputs become the tasks',
// Permanent errors fail tasks, other errors are retried, the handler's
// deadline is CompleteBy, and polls that fail with 503 are retried.
func TestRunAgent(t *testing.T) {
	e := newAgentEnv(t, testutil.SQLite(t))
	sub, ag := e.client(t, submitTok), e.client(t, agentTok)
	e.failPolls.Store(3)

	var (
		mu       sync.Mutex
		tries    = map[string]int{}
		running  atomic.Int64
		maxSeen  atomic.Int64
		badDline atomic.Int64
	)
	handler := func(ctx context.Context, r *droverclient.Request) (json.RawMessage, error) {
		n := running.Add(1)
		defer running.Add(-1)
		for {
			m := maxSeen.Load()
			if n <= m || maxSeen.CompareAndSwap(m, n) {
				break
			}
		}
		if dl, ok := ctx.Deadline(); !ok || !dl.Equal(r.CompleteBy) {
			badDline.Add(1)
		}
		mu.Lock()
		tries[r.TaskID]++
		try := tries[r.TaskID]
		mu.Unlock()
		switch {
		case r.TaskID == "bad":
			return nil, droverclient.Permanent(errors.New("rejected by the service"))
		case r.TaskID == "flaky" && try == 1:
			return nil, errors.New("connection reset")
		case r.TaskID == "panics" && try == 1:
			panic("boom")
		}
		time.Sleep(20 * time.Millisecond) // let calls overlap
		return json.RawMessage(fmt.Sprintf(`{"task":%q,"input":%s}`, r.TaskID, r.Input)), nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- ag.RunAgent(ctx, "worker", handler, droverclient.AgentOptions{Concurrency: 4, Wait: 5 * time.Second, RetryDelay: time.Millisecond})
	}()

	ids := []string{"bad", "flaky", "panics"}
	for i := range 8 {
		ids = append(ids, fmt.Sprintf("ok-%d", i))
	}
	for i, id := range ids {
		submit(t, sub, "remote", id, fmt.Sprint(i))
	}
	for i, id := range ids {
		if id == "bad" {
			tk := waitTask(t, sub, id, "Error")
			if !strings.Contains(tk.LastError, "rejected by the service") {
				t.Fatalf("bad: last error %q", tk.LastError)
			}
			continue
		}
		tk := waitTask(t, sub, id, "Processed")
		if want := fmt.Sprintf(`{"task":%q,"input":%d}`, id, i); string(tk.Output) != want {
			t.Fatalf("%s: output %s, want %s", id, tk.Output, want)
		}
	}
	mu.Lock()
	if tries["flaky"] != 2 || tries["panics"] != 2 || tries["bad"] != 1 {
		t.Fatalf("tries: %v", tries)
	}
	mu.Unlock()
	if m := maxSeen.Load(); m < 2 || m > 4 {
		t.Fatalf("at most %d calls ran at once; want 2-4 (Concurrency 4)", m)
	}
	if badDline.Load() != 0 {
		t.Fatal("a handler's context deadline was not the request's CompleteBy")
	}
	if e.polls.Load() <= 3 {
		t.Fatalf("%d polls: the failed ones were not retried", e.polls.Load())
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("RunAgent: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("RunAgent did not return after its context ended")
	}
}

// RunAgent gives up at once on a refusal that retrying cannot fix.
func TestRunAgentForbidden(t *testing.T) {
	e := newAgentEnv(t, testutil.SQLite(t))
	err := e.client(t, submitTok).RunAgent(context.Background(), "worker", func(ctx context.Context, r *droverclient.Request) (json.RawMessage, error) {
		return nil, nil
	}, droverclient.AgentOptions{})
	if !errors.Is(err, droverclient.ErrForbidden) {
		t.Fatalf("RunAgent with a submit token: %v, want ErrForbidden", err)
	}
}

// A remote agent's error text with a NUL character and invalid UTF-8 is
// sent storable and marked (the server refuses NUL characters), and the
// task fails with it, on both drivers.
func TestAgentFailHostileText(t *testing.T) {
	for name, open := range drivers {
		t.Run(name, func(t *testing.T) {
			e := newAgentEnv(t, open(t))
			sub, ag := e.client(t, submitTok), e.client(t, agentTok)
			ctx := context.Background()
			submit(t, sub, "remote", "h-1", `{}`)
			reqs, err := ag.Poll(ctx, "worker", 1, 20*time.Second)
			if err != nil || len(reqs) != 1 {
				t.Fatalf("Poll = %v, %v", reqs, err)
			}
			if err := ag.Fail(ctx, reqs[0], "bad \x00 input \xff", true); err != nil {
				t.Fatalf("Fail: %v", err)
			}
			tk := waitTask(t, sub, "h-1", "Error")
			if !strings.HasPrefix(tk.LastError, "bad \uFFFD input \uFFFD [drover replaced") {
				t.Errorf("LastError %q, want the text made storable and marked", tk.LastError)
			}
		})
	}
}
