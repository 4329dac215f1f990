package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/convoy"
	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/store"
)

func TestParseSubscription(t *testing.T) {
	for _, c := range []struct {
		in, url, events, err string
	}{
		{in: "https://h.example/hook", url: "https://h.example/hook"},
		{in: "https://h.example/hook?k=1#events=alerts,final", url: "https://h.example/hook?k=1", events: "alerts,final"},
		{in: "https://h.example/hook#events=final", url: "https://h.example/hook"},
		{in: "https://h.example/hook#events=step_waiting,session_blocked,step_waiting", url: "https://h.example/hook", events: "session_blocked,step_waiting"},
		{in: "https://h.example/hook#evnts=alerts", err: `the part after # must be events=LIST`},
		{in: "https://h.example/hook#events=", err: "lists no events"},
		{in: "https://h.example/hook#events=alerts,,final", err: "an empty event selector"},
		{in: "https://h.example/hook#events=step_retry", err: `unknown event selector "step_retry": want final, alerts or an event type (processed, compensated, error, cancelled, step_failed, step_waiting, session_blocked)`},
		{in: "ftp://h.example/#events=alerts", err: "want an http or https URL"},
	} {
		s, err := ParseSubscription(c.in)
		switch {
		case c.err != "":
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("ParseSubscription(%q) = %+v, %v; want an error containing %q", c.in, s, err, c.err)
			}
		case err != nil || s.URL != c.url || s.Events.String() != c.events:
			t.Errorf("ParseSubscription(%q) = %q %q, %v; want %q %q", c.in, s.URL, s.Events, err, c.url, c.events)
		}
	}
}

// Subscriptions that choose alerts get them, signed and retried like final
// states, once per (event, URL): a step's permanent failure, a step that
// failed for good past its threshold and starts compensation, an extended
// wait, a task in Error and a blocked session; a subscription choosing
// event types gets only those, and the default one only final states. A
// task's callback URL gets what its CallbackEvents choose; the same URL
// also subscribed gets each event once.
func TestAlertsDeliveredToSubscriptionsThatChooseThem(t *testing.T) {
	drivers(t, func(t *testing.T, open func(t *testing.T) store.Driver) {
		t.Parallel()
		drv := open(t)
		rc := newReceiver(t)
		// The alerts URL fails each event's first attempt: alerts are
		// retried like final states.
		rc.respond = func(h hit, before int) int {
			if h.Path == "/alerts" && before == 0 {
				return http.StatusServiceUnavailable
			}
			return http.StatusOK
		}
		c := startWorkflows(t, drv, 20*time.Millisecond,
			drover.Workflow{Name: "fail", Steps: []drover.Step{{Name: "a", Agent: "fail"}}},
			drover.Workflow{Name: "comp", OnFailure: drover.PolicyCompensate, Steps: []drover.Step{
				{Name: "a", Agent: "echo", Compensation: "echo"}, {Name: "b", Agent: "fail"}}},
			// "remote" runs nowhere: its steps time out.
			drover.Workflow{Name: "slow", FailureThreshold: 1, Wait: drover.WaitPolicy{MaxWaits: 1, Delay: time.Hour},
				Steps: []drover.Step{{Name: "a", Agent: "remote", Timeout: 300 * time.Millisecond}}},
			drover.Workflow{Name: "slowcomp", FailureThreshold: 1, OnFailure: drover.PolicyCompensate, Steps: []drover.Step{
				{Name: "a", Agent: "echo", Compensation: "echo"}, {Name: "b", Agent: "remote", Timeout: 300 * time.Millisecond}}},
		)
		ctx := context.Background()
		sub := func(workflow, id, callback string, events ...string) {
			t.Helper()
			if _, err := c.Submit(ctx, workflow, []byte(`{}`), &drover.SubmitOptions{ID: id, CallbackURL: callback, CallbackEvents: events}); err != nil {
				t.Fatalf("submit %s: %v", id, err)
			}
		}
		sub("fail", "fail-1", rc.url("/alerts"), "alerts") // the callback is also a subscription
		sub("comp", "comp-1", rc.url("/cb/comp-1"), "final", "step_failed")
		sub("slow", "slow-1", "")
		sub("slowcomp", "slowcomp-1", "")
		wait(t, c, "fail-1", drover.Error)
		wait(t, c, "comp-1", drover.Compensated)
		wait(t, c, "slowcomp-1", drover.Compensated)
		waitFor(t, "slow-1's extended wait", func() bool {
			evs, err := c.Events(ctx, drover.EventQuery{TaskID: "slow-1"})
			return err == nil && len(evs) > 0 && evs[len(evs)-1].Type == drover.EventStepWaiting
		})
		// A blocked session.
		q, err := convoy.New(convoy.Config{Store: drv})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := q.Publish(ctx, "orders", convoy.Message{SessionID: "o/7", Body: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
		r, err := q.AcceptSession(ctx, "orders", "o/7")
		if err != nil {
			t.Fatal(err)
		}
		m, err := r.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.DeadLetter(ctx, m, "unreadable"); err != nil {
			t.Fatal(err)
		}
		_ = r.Close(ctx)

		logs := &logBuffer{}
		opts := fastOptions(logs, rc.url("/final"))
		opts.Subscriptions = []Subscription{
			{URL: rc.url("/alerts"), Events: dt.WebhookEventSet{"alerts"}},
			{URL: rc.url("/typed"), Events: dt.WebhookEventSet{"step_waiting", "session_blocked"}},
		}
		d := newDispatcher(t, drv, opts)

		// What each URL should get: "path type subject[step]".
		all, err := drv.Reader().EventList(ctx, &store.EventListParams{})
		if err != nil {
			t.Fatal(err)
		}
		byKey := map[string]*dt.Event{} // "path eventID" → event
		var want []string
		expect := func(path string, ev *dt.Event) {
			byKey[fmt.Sprintf("%s %d", path, ev.ID)] = ev
			want = append(want, fmt.Sprintf("%s %s %s[%d]", path, ev.Type, ev.TaskID, ev.StepIndex))
		}
		for _, ev := range all {
			if dt.IsWebhookEvent(ev.Type) {
				expect("/final", ev)
			}
			if ev.Alert {
				expect("/alerts", ev)
			}
			if ev.Type == dt.EventStepWaiting || ev.Type == dt.EventSessionBlocked {
				expect("/typed", ev)
			}
			if ev.TaskID == "comp-1" && (ev.Type == dt.EventStepFailed || ev.Type == dt.EventCompensated) {
				expect("/cb/comp-1", ev)
			}
		}
		slices.Sort(want)
		wantSet := strings.Join(want, "\n")
		if want := strings.Join([]string{
			"/alerts error fail-1[-1]", "/alerts session_blocked session:orders/o/7[-1]", "/alerts step_failed comp-1[1]",
			"/alerts step_failed fail-1[0]", "/alerts step_failed slowcomp-1[1]", "/alerts step_waiting slow-1[0]",
			"/cb/comp-1 compensated comp-1[-1]", "/cb/comp-1 step_failed comp-1[1]",
			"/final compensated comp-1[-1]", "/final compensated slowcomp-1[-1]", "/final error fail-1[-1]",
			"/typed session_blocked session:orders/o/7[-1]", "/typed step_waiting slow-1[0]",
		}, "\n"); wantSet != want {
			t.Fatalf("the history does not hold the events this test is about:\n%s\nwant\n%s", wantSet, want)
		}

		stop := run(t, d)
		waitDelivered(t, rc, byKey, logs)
		stop()
		for k, n := range rc.okCount() {
			if byKey[k] == nil {
				t.Errorf("unexpected webhook %s", k)
			} else if n != 1 {
				t.Errorf("webhook %s delivered %d times, want once", k, n)
			}
		}
		for _, h := range rc.all() {
			ev := byKey[h.key()]
			if ev == nil {
				continue
			}
			if err := h.verify(testSecret); err != nil {
				t.Errorf("%s: signature does not verify: %v", h.key(), err)
			}
			wantAttempt := "1"
			if h.Path == "/alerts" && h.Status == http.StatusOK {
				wantAttempt = "2"
			}
			if h.Attempt != wantAttempt || h.EventID != strconv.FormatInt(ev.ID, 10) || h.EventType != string(ev.Type) {
				t.Errorf("%s (status %d): attempt %q event %q type %q", h.key(), h.Status, h.Attempt, h.EventID, h.EventType)
			}
			var p Payload
			if err := json.Unmarshal(h.Body, &p); err != nil {
				t.Fatalf("%s: %v", h.key(), err)
			}
			if p.ID != h.EventID || p.Subject != ev.TaskID || p.StepIndex != ev.StepIndex || p.Alert != ev.Alert || p.Message != ev.Message {
				t.Errorf("%s: payload %s", h.key(), h.Body)
			}
			switch ev.Type {
			case dt.EventSessionBlocked:
				if p.Task != nil || p.TaskID != "" || p.Session == nil || *p.Session != (SessionJSON{Queue: "orders", ID: "o/7"}) {
					t.Errorf("%s: a session's payload: %s", h.key(), h.Body)
				}
			case dt.EventStepWaiting:
				if p.Task == nil || p.TaskID != "slow-1" || p.State != "Pending" || !strings.Contains(p.Message, "next attempt at") {
					t.Errorf("%s: a wait's payload: %s", h.key(), h.Body)
				}
			default:
				if p.Task == nil || p.Task.ID != ev.TaskID || p.Session != nil {
					t.Errorf("%s: a task's payload: %s", h.key(), h.Body)
				}
			}
		}
		if ds := deliveries(t, drv, store.WebhookDeliveryListParams{}); len(ds) != len(byKey) {
			t.Errorf("%d deliveries stored, want one per (event, URL): %d%s", len(ds), len(byKey), brief(ds...))
		}
	})
}
