package httpapi

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/internal/webhook"
	"github.com/drover-run/drover/store"
)

// TestSubmitCallbackURLAndWorkflowVersion: POST /v1/tasks takes an optional
// callback_url; tasks show it and the version of their workflow; a bad
// callback_url is a 400 invalid_field naming it, and nothing is stored.
func TestSubmitCallbackURLAndWorkflowVersion(t *testing.T) {
	drivers(t, func(t *testing.T, open func(t *testing.T) store.Driver) {
		e := newEnv(t, open(t), Options{})
		if err := e.d.AddWorkflows([]drover.Workflow{{Name: "versioned", Version: 4, Steps: []drover.Step{{Name: "a", Agent: "echo"}}}}, nil); err != nil {
			t.Fatal(err)
		}
		// The query may carry a credential: only operators see it.
		const cb, redacted = "https://hooks.example.com/drover?tenant=7", "https://hooks.example.com/drover?REDACTED"
		r := e.do("POST", "/v1/tasks", submitTok, `{"workflow":"versioned","id":"v-1","callback_url":"`+cb+`"}`).must(t, 201)
		if r.str("callback_url") != redacted || r.json["workflow_version"] != float64(4) {
			t.Fatalf("submit response: %s; want callback_url %s and workflow_version 4", r.body, redacted)
		}
		r = e.waitState("v-1", "Processed")
		if r.str("callback_url") != redacted || r.json["workflow_version"] != float64(4) {
			t.Fatalf("GET: %s", r.body)
		}
		if r = e.do("GET", "/v1/tasks/v-1", operatorTok, "").must(t, 200); r.str("callback_url") != cb {
			t.Fatalf("GET by an operator: %s", r.body)
		}
		r = e.do("GET", "/v1/tasks?workflow=versioned", operatorTok, "").must(t, 200)
		tasks, _ := r.json["tasks"].([]any)
		if len(tasks) != 1 {
			t.Fatalf("list: %s", r.body)
		}
		if task := tasks[0].(map[string]any); task["callback_url"] != cb || task["workflow_version"] != float64(4) {
			t.Fatalf("listed task: %v", task)
		}
		// A workflow defined in code (version 0) and no callback: both left out.
		r = e.do("POST", "/v1/tasks", submitTok, `{"workflow":"echo","id":"plain"}`).must(t, 201)
		if _, ok := r.json["callback_url"]; ok {
			t.Errorf("task without a callback shows callback_url: %s", r.body)
		}
		if _, ok := r.json["workflow_version"]; ok {
			t.Errorf("task of a code workflow shows workflow_version: %s", r.body)
		}
		e.waitState("plain", "Processed")

		before := e.snapshot()
		for _, tc := range []struct{ body, says string }{
			{`{"workflow":"echo","callback_url":"ftp://example.com/x"}`, "http or https"},
			{`{"workflow":"echo","callback_url":"/relative"}`, "http or https"},
			{`{"workflow":"echo","callback_url":"https://"}`, "host"},
			{`{"workflow":"echo","callback_url":"https://h.example/#top"}`, "fragment"},
			{`{"workflow":"echo","callback_url":"https://u:p@h.example/"}`, "user information"},
			{`{"workflow":"echo","callback_url":"https://h.example/\u0001"}`, "control character"},
			{`{"workflow":"echo","callback_url":"https://h.example/` + strings.Repeat("a", drover.MaxCallbackURLBytes) + `"}`,
				fmt.Sprintf("the limit is %d", drover.MaxCallbackURLBytes)},
			{`{"workflow":"echo","callback_url":5}`, "want a string"},
			{`{"workflow":"echo","callback_url":null,"id":"x","Callback_URL":"https://h.example/"}`, ""},
		} {
			r := e.do("POST", "/v1/tasks", submitTok, tc.body)
			if r.status != 400 || !strings.Contains(strings.ToLower(r.errMsg()), "callback_url") || !strings.Contains(r.errMsg(), tc.says) {
				t.Errorf("body %.80s: %d %s; want 400 naming callback_url and saying %q", tc.body, r.status, r.body, tc.says)
			}
			if c := r.errCode(); c != "invalid_field" && c != "unknown_field" {
				t.Errorf("body %.80s: code %q", tc.body, c)
			}
			if len(r.errMsg()) > 300 {
				t.Errorf("body %.80s: error message is %d bytes", tc.body, len(r.errMsg()))
			}
		}
		if after := e.snapshot(); after != before {
			t.Fatal("a refused submission changed the store")
		}
	})
}

// TestOpenAPIDocumentsTaskFields checks that every JSON field of a task,
// its steps and the submit body is a property of its schema in
// openapi.json.
func TestOpenAPIDocumentsTaskFields(t *testing.T) {
	raw, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]json.RawMessage `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	for schema, v := range map[string]any{"Task": taskJSON{}, "Step": stepJSON{}, "SubmitRequest": SubmitRequest{}} {
		props := doc.Components.Schemas[schema].Properties
		typ := reflect.TypeOf(v)
		for i := range typ.NumField() {
			name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
			if name == "" || name == "-" {
				continue
			}
			if _, ok := props[name]; !ok {
				t.Errorf("openapi.json: schema %s has no property %q (field %s.%s)", schema, name, typ.Name(), typ.Field(i).Name)
			}
		}
	}
}

// With Options.CallbackAllow, POST /v1/tasks refuses a callback_url
// outside it (400, nothing stored) and takes one inside.
func TestSubmitCallbackURLOutsideTheAllowList(t *testing.T) {
	allow, err := webhook.ParseAllow([]string{"https://hooks.example.com/drover/"})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, testutilSQLite(t), Options{CallbackAllow: allow})
	for _, cb := range []string{"http://169.254.169.254/latest/meta-data/", "https://hooks.example.com/admin",
		"https://hooks.example.com/drover/../admin", "https://hooks.example.com.evil.net/drover/"} {
		r := e.do("POST", "/v1/tasks", submitTok, `{"workflow":"echo","id":"x","callback_url":"`+cb+`"}`).mustError(t, 400, "invalid_field")
		if msg := r.errMsg(); !strings.Contains(msg, `"callback_url" is not allowed`) || !strings.Contains(msg, "https://hooks.example.com/drover/") {
			t.Errorf("%s: message %q, want it to name the field and the allowed prefix", cb, msg)
		}
	}
	e.do("GET", "/v1/tasks/x", submitTok, "").mustError(t, 404, "not_found")
	r := e.do("POST", "/v1/tasks", operatorTok, `{"workflow":"echo","id":"y","callback_url":"https://hooks.example.com/drover/orders?t=1"}`).must(t, 201)
	if r.str("callback_url") != "https://hooks.example.com/drover/orders?t=1" {
		t.Errorf("submit response %s", r.body)
	}
}

// TestSubmitCallbackEvents: POST /v1/tasks takes callback_events, the events
// the callback URL receives; the task shows them. A bad one is a 400
// invalid_field naming it, and nothing is stored.
func TestSubmitCallbackEvents(t *testing.T) {
	e := newEnv(t, testutilSQLite(t), Options{})
	r := e.do("POST", "/v1/tasks", submitTok, `{"workflow":"echo","id":"ev-1","callback_url":"https://h.example/cb","callback_events":["step_waiting","alerts","final","alerts"]}`).must(t, 201)
	if got := fmt.Sprint(r.json["callback_events"]); got != "[alerts final step_waiting]" {
		t.Errorf("callback_events = %s, want [alerts final step_waiting]: %s", got, r.body)
	}
	if r = e.waitState("ev-1", "Processed"); fmt.Sprint(r.json["callback_events"]) != "[alerts final step_waiting]" {
		t.Errorf("GET: %s", r.body)
	}
	before := e.snapshot()
	for _, tc := range []struct{ body, says string }{
		{`{"workflow":"echo","callback_url":"https://h.example/cb","callback_events":["alerts","retries"]}`, `unknown event selector "retries"`},
		{`{"workflow":"echo","callback_url":"https://h.example/cb","callback_events":[""]}`, "empty"},
		{`{"workflow":"echo","callback_events":["alerts"]}`, `needs a "callback_url"`},
		{`{"workflow":"echo","callback_url":"https://h.example/cb","callback_events":"alerts"}`, "want"},
	} {
		r := e.do("POST", "/v1/tasks", submitTok, tc.body)
		if r.status != 400 || r.errCode() != "invalid_field" || !strings.Contains(r.errMsg(), "callback_events") || !strings.Contains(r.errMsg(), tc.says) {
			t.Errorf("body %s: %d %s; want 400 invalid_field naming callback_events and saying %q", tc.body, r.status, r.body, tc.says)
		}
	}
	if after := e.snapshot(); after != before {
		t.Fatal("a refused submission changed the store")
	}
}
