package httpapi

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/droverapi"
	"github.com/drover-run/drover/store"
)

// The schedule routes list, show, pause, resume, run and delete a
// schedule; run with an id submits once; the server's own schedules are
// not deleted; a request in another namespace sees none.
func TestScheduleRoutes(t *testing.T) {
	drivers(t, func(t *testing.T, open func(t *testing.T) store.Driver) {
		drv := open(t)
		e := newEnv(t, drv, Options{Tokens: append(testTokens, nsTokens[:4]...)})
		if err := e.d.AddSchedules(context.Background(), []drover.Schedule{
			{Name: "nightly", Workflow: "echo", Input: []byte(`{"n":1}`), Cron: "0 2 * * *", TimeZone: "Europe/Berlin", CatchUp: drover.CatchUpAll},
		}); err != nil {
			t.Fatal(err)
		}
		var list droverapi.ScheduleList
		if err := json.Unmarshal(e.do("GET", "/v1/schedules", submitTok, "").must(t, 200).body, &list); err != nil {
			t.Fatal(err)
		}
		if len(list.Schedules) != 1 {
			t.Fatalf("schedules: %+v", list)
		}
		s := list.Schedules[0]
		if s.Name != "nightly" || s.Cron != "0 2 * * *" || s.TimeZone != "Europe/Berlin" || s.CatchUp != "all" || s.Paused ||
			len(s.NextDue) != drover.ScheduleStateNext || s.NextDue[0].Location() != time.UTC || string(s.Input) != `{"n":1}` {
			t.Errorf("schedule: %+v", s)
		}
		berlin, _ := time.LoadLocation("Europe/Berlin")
		if local := s.NextDue[0].In(berlin); local.Hour() != 2 || local.Minute() != 0 {
			t.Errorf("next due %v, want 02:00 in Berlin", s.NextDue[0])
		}
		e.do("GET", "/v1/schedules/nightly", submitTok, "").must(t, 200)
		e.do("GET", "/v1/schedules/missing", submitTok, "").mustError(t, 404, "not_found")
		e.do("POST", "/v1/schedules/nightly/pause", submitTok, "{}").mustError(t, 403, "")

		if r := e.do("POST", "/v1/schedules/nightly/pause", operatorTok, "{}").must(t, 200); r.json["paused"] != true {
			t.Errorf("pause: %s", r.body)
		}
		if r := e.do("POST", "/v1/schedules/nightly/resume", operatorTok, "").must(t, 200); r.json["paused"] != false {
			t.Errorf("resume: %s", r.body)
		}
		r := e.do("POST", "/v1/schedules/nightly/run", operatorTok, `{"id":"nightly-manual"}`).must(t, 201)
		if r.str("id") != "nightly-manual" || r.str("workflow") != "echo" {
			t.Errorf("run: %s", r.body)
		}
		e.do("POST", "/v1/schedules/nightly/run", operatorTok, `{"id":"nightly-manual"}`).must(t, 201)
		if r := e.do("POST", "/v1/schedules/nightly/run", operatorTok, "").must(t, 201); !strings.HasPrefix(r.str("id"), "schedule:nightly:run:") {
			t.Errorf("run without an id: %s", r.body)
		}
		e.do("POST", "/v1/schedules/nightly/run", operatorTok, `{"id":"a b"}`).mustError(t, 400, "")
		e.do("POST", "/v1/schedules/nightly/run", operatorTok, `{"other":1}`).mustError(t, 400, "")
		if r := e.do("GET", "/v1/schedules/nightly", submitTok, "").must(t, 200); !strings.HasPrefix(r.str("last_task"), "schedule:nightly:run:") {
			t.Errorf("last task: %s", r.body)
		}

		// Namespace a sees no schedule and changes none.
		if r := e.do("GET", "/v1/schedules", aSubmitTok, "").must(t, 200); strings.Contains(string(r.body), "nightly") {
			t.Errorf("namespace a lists: %s", r.body)
		}
		e.do("GET", "/v1/schedules/nightly", aSubmitTok, "").mustError(t, 404, "not_found")
		e.do("POST", "/v1/schedules/nightly/pause", aOperatorTok, "{}").mustError(t, 404, "not_found")
		e.do("POST", "/v1/schedules/nightly/run", aOperatorTok, "{}").mustError(t, 404, "not_found")
		if r := e.do("GET", "/v1/schedules/nightly", submitTok, "").must(t, 200); r.json["paused"] != false {
			t.Errorf("namespace a paused it: %s", r.body)
		}

		// Delete: the server's own schedule is refused; one another
		// process stored (and the server does not define) is deleted.
		other, err := drover.New(drover.Config{Store: drv, Workflows: []drover.Workflow{{Name: "echo", Steps: []drover.Step{{Name: "a", Agent: "echo"}}}},
			ExternalAgents: []string{"echo"}})
		if err != nil {
			t.Fatal(err)
		}
		if err := other.AddSchedules(context.Background(), []drover.Schedule{{Name: "retired", Workflow: "echo", Every: time.Hour}}); err != nil {
			t.Fatal(err)
		}
		e.do("DELETE", "/v1/schedules/nightly", operatorTok, "").mustError(t, 409, "wrong_state")
		e.do("DELETE", "/v1/schedules/retired", submitTok, "").mustError(t, 403, "")
		e.do("DELETE", "/v1/schedules/retired", aOperatorTok, "").mustError(t, 404, "not_found")
		e.do("DELETE", "/v1/schedules/retired", operatorTok, `{"other":1}`).mustError(t, 400, "")
		if r := e.do("DELETE", "/v1/schedules/retired", operatorTok, "").must(t, 204); len(r.body) != 0 {
			t.Errorf("delete: body %q", r.body)
		}
		e.do("GET", "/v1/schedules/retired", submitTok, "").mustError(t, 404, "not_found")
		e.do("DELETE", "/v1/schedules/retired", operatorTok, "").mustError(t, 404, "not_found")
		e.do("GET", "/v1/schedules/nightly", submitTok, "").must(t, 200)
	})
}
