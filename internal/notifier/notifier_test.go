package notifier_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/convoy"
	"github.com/drover-run/drover/internal/httpapi"
	"github.com/drover-run/drover/internal/notifier"
	"github.com/drover-run/drover/internal/testutil"
	"github.com/drover-run/drover/store"
	"github.com/drover-run/drover/store/postgres"
)

func TestParse(t *testing.T) {
	for in, want := range map[string]notifier.Topic{
		store.TopicTasks:          {Kind: notifier.Tasks},
		store.TopicRequests("a"):  {Kind: notifier.Requests, Name: "a"},
		store.TopicReplies("s/1"): {Kind: notifier.Replies, Name: "s/1"},
		convoy.Topic("q"):         {Kind: notifier.Queue, Name: "q"},
		notifier.EventsTopic:      {Kind: notifier.Events},
		store.TopicAll:            {Kind: notifier.All},
		"from-a-newer-version":    {Kind: notifier.All},
	} {
		if got := notifier.Parse(in); got != want {
			t.Errorf("Parse(%q) = %+v, want %+v", in, got, want)
		}
	}
}

// listening counts the PostgreSQL connections that LISTEN on schema's channel.
func listening(t *testing.T, admin *postgres.Driver, url, schema string) int {
	t.Helper()
	var n int
	err := admin.Pool().QueryRow(context.Background(),
		`SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN %' AND query LIKE '%' || $1 || '%'`, "drover_"+schema).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// One process (one driver) runs the task roles, a waiting session-queue
// consumer and a waiting remote-agent poll of the HTTP API: they share one
// LISTEN connection, and work notified by another process wakes each of
// them (their polling is slowed to an hour where it can be).
func TestOneListeningConnectionWakesEveryRole(t *testing.T) {
	url := testutil.PostgresURL(t)
	schema := testutil.FreshSchema(t)
	ctx := context.Background()
	open := func() *postgres.Driver {
		d, err := postgres.Open(ctx, url, postgres.Options{Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = d.Close() })
		return d
	}
	here, other := open(), open()
	if err := here.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	workflows := []drover.Workflow{
		{Name: "local", Steps: []drover.Step{{Name: "a", Agent: "echo"}}},
		{Name: "remote", Steps: []drover.Step{{Name: "a", Agent: "worker"}}},
	}
	c, err := drover.New(drover.Config{Store: here, PollInterval: time.Hour, Workflows: workflows, ExternalAgents: []string{"worker"},
		Agents: []drover.Agent{{Name: "echo", Func: func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) { return r.Input, nil }}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Stop(ctx) }()
	q, err := convoy.New(convoy.Config{Store: here, PollInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	h, err := httpapi.New(c, q, httpapi.Options{NoAuth: true, Rate: -1, AuthFailRate: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer h.CloseStreams()
	srv := httptest.NewServer(h)
	defer srv.Close()

	leased := make(chan *convoy.Lease, 1)
	go func() {
		l, err := q.AcceptLease(ctx, "orders", "", "", 20*time.Second)
		if err != nil {
			t.Error(err)
		}
		leased <- l
	}()
	polled := make(chan string, 1)
	go func() {
		req, _ := http.NewRequest("POST", srv.URL+"/v1/agents/worker/poll", strings.NewReader(`{"max":1,"wait_ms":20000}`))
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			polled <- ""
			return
		}
		defer res.Body.Close()
		var b strings.Builder
		_, _ = io.Copy(&b, res.Body)
		polled <- b.String()
	}()
	notes := notifier.For(here)
	waitFor(t, "three subscribers", func() bool { return notes.Subscribers() == 3 })
	// The first subscriber starts the LISTEN; a notification sent before
	// it is up would be lost.
	waitFor(t, "the LISTEN connection", func() bool { return listening(t, here, url, schema) > 0 })
	if n := listening(t, here, url, schema); n != 1 {
		t.Fatalf("%d connections LISTEN for one process, want 1", n)
	}

	// Another process makes work for each of them.
	oc, err := drover.New(drover.Config{Store: other, Workflows: workflows, ExternalAgents: []string{"worker"}})
	if err != nil {
		t.Fatal(err)
	}
	local, err := oc.Submit(ctx, "local", []byte(`"x"`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := oc.Submit(ctx, "remote", []byte(`"y"`), nil); err != nil {
		t.Fatal(err)
	}
	oq, err := convoy.New(convoy.Config{Store: other})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := oq.Publish(ctx, "orders", convoy.Message{SessionID: "o1", Body: []byte("m")}); err != nil {
		t.Fatal(err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if tk, err := c.Wait(waitCtx, local.ID); err != nil || tk.ProcessState != drover.Processed {
		t.Fatalf("local task: %+v, %v", tk, err)
	}
	if l := <-leased; l == nil {
		t.Fatal("the waiting consumer got no session")
	}
	if body := <-polled; !strings.Contains(body, `"agent":"worker"`) {
		t.Fatalf("the waiting remote agent's poll got %s", body)
	}
	if n := listening(t, here, url, schema); n != 1 {
		t.Fatalf("%d connections LISTEN for one process, want 1", n)
	}
}

// Live is true while the listening connection listens; when it dies,
// every subscriber is woken (an All topic) and Live is false until the
// connection listens again.
func TestLive(t *testing.T) {
	url := testutil.PostgresURL(t)
	schema := testutil.FreshSchema(t)
	ctx := context.Background()
	d, err := postgres.Open(ctx, url, postgres.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	notes := notifier.For(d)
	if notes.Live() {
		t.Fatal("Live before anyone subscribed")
	}
	all := make(chan struct{}, 16)
	unsubscribe := notes.Subscribe(func(tp notifier.Topic) {
		if tp.Kind == notifier.All {
			all <- struct{}{}
		}
	})
	waitFor(t, "Live", notes.Live)
	for len(all) > 0 {
		<-all
	}
	if _, err := d.Pool().Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE 'LISTEN %' AND query LIKE '%' || $1 || '%'`, "drover_"+schema); err != nil {
		t.Fatal(err)
	}
	select {
	case <-all:
	case <-time.After(10 * time.Second):
		t.Fatal("the lost connection woke no subscriber")
	}
	waitFor(t, "Live again", notes.Live)
	unsubscribe()
	if notes.Live() {
		t.Error("Live after the last subscriber left")
	}
}

func TestUntil(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	floor, ceiling := 100*time.Millisecond, 30*time.Second
	for _, tc := range []struct {
		name string
		dues []time.Time
		want time.Duration
	}{
		{"no due time", nil, ceiling},
		{"only zero due times", []time.Time{{}, {}}, ceiling},
		{"due within the bounds", []time.Time{now.Add(5 * time.Second)}, 5 * time.Second},
		{"the earliest of several, zero ones ignored", []time.Time{{}, now.Add(9 * time.Second), now.Add(2 * time.Second)}, 2 * time.Second},
		{"due in the past: the floor", []time.Time{now.Add(-time.Hour)}, floor},
		{"due before the floor", []time.Time{now.Add(time.Millisecond)}, floor},
		{"due after the ceiling", []time.Time{now.Add(time.Hour)}, ceiling},
	} {
		if got := notifier.Until(now, floor, ceiling, tc.dues...); got != tc.want {
			t.Errorf("%s: Until = %v, want %v", tc.name, got, tc.want)
		}
	}
	if got := notifier.Until(now, time.Second, time.Millisecond, now.Add(time.Hour)); got != time.Second {
		t.Errorf("floor above ceiling: Until = %v, want the floor", got)
	}
}
