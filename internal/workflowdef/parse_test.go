package workflowdef

import (
	"errors"
	"github.com/drover-run/drover/internal/httpagent"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/drover-run/drover"
)

func TestParseExample(t *testing.T) {
	src, err := os.ReadFile("testdata/trip.yaml")
	if err != nil {
		t.Fatal(err)
	}
	d, err := Parse("trip.yaml", src)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	want := drover.Workflow{
		Name: "trip", FailureThreshold: 3, OnFailure: drover.PolicyCompensate, RetryDelay: time.Second,
		Wait: drover.WaitPolicy{MaxWaits: 3, Delay: 10 * time.Minute, MaxDelay: time.Hour},
		Steps: []drover.Step{
			{Name: "reserve", Agent: "http", Timeout: 10 * time.Second, Compensation: "http"},
			{Name: "charge", Agent: "payments", Timeout: 30 * time.Second, Compensation: "refunds"},
		},
	}
	got := d.Workflow()
	validate := got.ValidateInput
	got.ValidateInput = nil // a func: checked below
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Workflow() =\n%+v\nwant\n%+v", got, want)
	}
	// required_input: the input must be an object with those fields.
	if validate == nil {
		t.Fatal("no ValidateInput with required_input")
	}
	if err := validate([]byte(`{"order_id":"o-1","customer":"ann","seats":2,"amount":42,"note":"x"}`)); err != nil {
		t.Errorf("a complete input refused: %v", err)
	}
	for in, msg := range map[string]string{
		`{"order_id":"o-1","customer":"ann"}`:                         "missing seats, amount",
		`{"order_id":"o-1","customer":"ann","seats":null,"amount":1}`: "missing seats",
		`null`:       "want a JSON object with the fields order_id, customer, seats, amount",
		`[1]`:        "want a JSON object",
		`"order_id"`: "want a JSON object",
	} {
		if err := validate([]byte(in)); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("input %s: %v, want an error containing %q", in, err, msg)
		}
	}
	if got := d.ExternalAgents(); !reflect.DeepEqual(got, []string{"payments", "refunds"}) {
		t.Errorf("ExternalAgents() = %v", got)
	}
	if d.Digest != Digest(src) || len(d.Digest) != 64 {
		t.Errorf("Digest = %q", d.Digest)
	}
	r := d.Steps[0].Do.Retry
	if r.InitialInterval != 100*time.Millisecond || r.MaxInterval != 2*time.Second || r.MaxTries != 5 {
		t.Errorf("retry = %+v", r)
	}
	// The compensation has no retry of its own: it takes the step's.
	if d.Steps[0].Compensate.Retry != r {
		t.Errorf("compensation retry = %+v, want the step's %+v", d.Steps[0].Compensate.Retry, r)
	}
	if st := d.Steps[0].Do.HTTP.Status; !reflect.DeepEqual(st.Transient, []int{409}) || len(st.Permanent) != 0 {
		t.Errorf("status policy = %+v", st)
	}
	if d.Steps[0].Do.HTTP.Method != "POST" || d.Steps[0].Compensate.HTTP.Method != "DELETE" {
		t.Errorf("methods = %s, %s", d.Steps[0].Do.HTTP.Method, d.Steps[0].Compensate.HTTP.Method)
	}
}

// TestParseWaitPolicy: the workflow's wait policy, with drover's defaults
// for what it leaves out, and a step's own failure policy and wait.
func TestParseWaitPolicy(t *testing.T) {
	src := `name: w
on_failure: error
priority: 6
wait: {max_waits: 3, delay: 10m, multiplier: 1.5, max_delay: 2h}
steps:
  - name: a
    agent: x
  - name: b
    agent: y
    on_failure: compensate
    wait: {max_waits: 1}
  - name: c
    agent: z
    wait: {max_waits: 0}
`
	d, err := Parse("w.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	w := d.Workflow()
	if w.Priority != 6 {
		t.Errorf("workflow priority = %d, want 6", w.Priority)
	}
	if want := (drover.WaitPolicy{MaxWaits: 3, Delay: 10 * time.Minute, Multiplier: 1.5, MaxDelay: 2 * time.Hour}); w.Wait != want {
		t.Errorf("workflow wait = %+v, want %+v", w.Wait, want)
	}
	if s := w.Steps[0]; s.OnFailure != "" || s.Wait != nil {
		t.Errorf("step a: %q %+v, want the workflow's policy", s.OnFailure, s.Wait)
	}
	if s := w.Steps[1]; s.OnFailure != drover.PolicyCompensate || s.Wait == nil || *s.Wait != (drover.WaitPolicy{MaxWaits: 1}) {
		t.Errorf("step b: %q %+v", s.OnFailure, s.Wait)
	}
	if s := w.Steps[2]; s.Wait == nil || s.Wait.On() {
		t.Errorf("step c: wait %+v, want off", s.Wait)
	}
	if err := w.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
}

// TestParseJSON: a .json file is YAML too.
func TestParseJSON(t *testing.T) {
	src := `{"name": "j", "steps": [{"name": "a", "agent": "x", "input": {"n": "${input.n}", "k": 1.5}}]}`
	d, err := Parse("j.json", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != "j" || d.Steps[0].Do.Agent != "x" || !d.Steps[0].Do.HasInputMapping() {
		t.Errorf("parsed %+v", d)
	}
	// A JSON syntax error has a line too.
	_, err = Parse("bad.json", []byte("{\"name\": \"j\",\n \"steps\": [\n}"))
	checkProblems(t, err, []string{`bad.json:2: not valid YAML: did not find expected node content`})
}

func checkProblems(t *testing.T, err error, want []string) {
	t.Helper()
	var pe *Error
	if !errors.As(err, &pe) {
		t.Fatalf("error %v (%T) is not an *Error", err, err)
	}
	var got []string
	for _, p := range pe.Problems {
		got = append(got, p.String())
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("problems:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// minimal wraps one step's YAML (indented by 4) into a valid workflow.
func oneStep(step string) string {
	return "name: w\nsteps:\n  - name: s\n" + step
}

func TestParseProblems(t *testing.T) {
	cases := []struct {
		name string
		src  string
		want []string
	}{
		{"empty", "", []string{"w.yaml: the file is empty"}},
		{"not a mapping", "- a\n- b\n", []string{"w.yaml:1: want a mapping, got a list"}},
		{"syntax", "name: w\nsteps: [\n", []string{"w.yaml:2: not valid YAML: did not find expected node content"}},
		{"two documents", "name: w\nsteps: [{name: s, agent: a}]\n---\nname: x\n", []string{"w.yaml:3: a second YAML document: one workflow per file"}},
		{"missing name and steps", "description: x\n", []string{
			"w.yaml:1: name: required: the workflow's name",
			"w.yaml:1: steps: required: a list of at least one step",
		}},
		{"empty steps", "name: w\nsteps: []\n", []string{"w.yaml:2: steps: the list is empty: give at least one step"}},
		{"bad workflow name", "name: \"a b\"\nsteps: [{name: s, agent: a}]\n", []string{`w.yaml:1: name: "a b" must be 1-200 printable characters without spaces or "/"`}},
		{"unknown top key", "name: w\nstep: []\n", []string{
			`w.yaml:1: steps: required: a list of at least one step`,
			`w.yaml:2: step: unknown key (did you mean "steps"?)`,
		}},
		{"typo in step", oneStep("    agent: a\n    timout: 10s\n"), []string{`w.yaml:5: steps[0].timout: unknown key (did you mean "timeout"?)`}},
		{"far-off key", oneStep("    agent: a\n    color: red\n"), []string{`w.yaml:5: steps[0].color: unknown key (want one of name, timeout, http, agent, input, retry, compensate, on_failure, wait)`}},
		{"repeated key", oneStep("    agent: a\n    agent: b\n"), []string{`w.yaml:5: steps[0].agent: repeated key`}},
		{"bad duration", oneStep("    agent: a\n    timeout: 10x\n"), []string{`w.yaml:5: steps[0].timeout: "10x" is not a duration (such as 500ms, 10s, 1m)`}},
		{"duration without unit", oneStep("    agent: a\n    timeout: 10\n"), []string{`w.yaml:5: steps[0].timeout: 10 is not a duration: give a unit, such as 10s`}},
		{"negative duration", "name: w\nretry_delay: -1s\nsteps: [{name: s, agent: a}]\n", []string{`w.yaml:2: retry_delay: "-1s" is negative`}},
		{"zero timeout", oneStep("    agent: a\n    timeout: 0s\n"), []string{`w.yaml:5: steps[0].timeout: "0s" must be positive`}},
		{"threshold type", "name: w\nfailure_threshold: three\nsteps: [{name: s, agent: a}]\n", []string{`w.yaml:2: failure_threshold: want an integer, got "three"`}},
		{"threshold zero", "name: w\nfailure_threshold: 0\nsteps: [{name: s, agent: a}]\n", []string{`w.yaml:2: failure_threshold: 0 is less than 1`}},
		{"priority too high", "name: w\npriority: 11\nsteps: [{name: s, agent: a}]\n", []string{`w.yaml:2: priority: 11 is more than 10 (from 0, lowest, to 10)`}},
		{"priority negative", "name: w\npriority: -1\nsteps: [{name: s, agent: a}]\n", []string{`w.yaml:2: priority: -1 is less than 0`}},
		{"policy", "name: w\non_failure: retry\nsteps: [{name: s, agent: a}]\n", []string{`w.yaml:2: on_failure: "retry" must be error or compensate`}},
		{"required_input not a list", "name: w\nrequired_input: a\nsteps: [{name: s, agent: a}]\n", []string{`w.yaml:2: required_input: want a list, got "a"`}},
		{"required_input items", "name: w\nrequired_input: [a, '', a, {b: 1}]\nsteps: [{name: s, agent: a}]\n", []string{
			`w.yaml:2: required_input[1]: the field name is empty`,
			`w.yaml:2: required_input[2]: "a" is listed twice`,
			`w.yaml:2: required_input[3]: want a string, got a mapping`,
		}},
		{"steps not a list", "name: w\nsteps: {a: 1}\n", []string{`w.yaml:2: steps: want a list, got a mapping`}},
		{"step policy", oneStep("    agent: a\n    on_failure: wait\n"), []string{`w.yaml:5: steps[0].on_failure: "wait" must be error or compensate`}},
		{"wait without max_waits", "name: w\nwait: {delay: 1h}\nsteps: [{name: s, agent: a}]\n", []string{
			`w.yaml:2: wait.max_waits: required: how many extended waits a step may have (0: none)`,
		}},
		{"wait fields", "name: w\nwait:\n  max_waits: -1\n  delay: 0s\n  multiplier: 0.5\n  max_delay: soon\n  forever: true\nsteps: [{name: s, agent: a}]\n", []string{
			`w.yaml:3: wait.max_waits: -1 is less than 0`,
			`w.yaml:4: wait.delay: "0s" must be positive`,
			`w.yaml:5: wait.multiplier: 0.5 must be between 1 and 1000`,
			`w.yaml:6: wait.max_delay: "soon" is not a duration (such as 500ms, 10s, 1m)`,
			`w.yaml:7: wait.forever: unknown key (want one of max_waits, delay, multiplier, max_delay)`,
		}},
		{"wait multiplier type", "name: w\nwait: {max_waits: 2, multiplier: x2}\nsteps: [{name: s, agent: a}]\n", []string{
			`w.yaml:2: wait.multiplier: want a number, got "x2"`,
		}},
		{"step wait delays", oneStep("    agent: a\n    wait:\n      max_waits: 2\n      delay: 2h\n      max_delay: 1h\n"), []string{
			`w.yaml:8: steps[0].wait.max_delay: 1h0m0s is less than delay 2h0m0s`,
		}},
		{"step wait max_delay below the default delay", oneStep("    agent: a\n    wait: {max_waits: 1, max_delay: 1m}\n"), []string{
			`w.yaml:5: steps[0].wait.max_delay: 1m0s is less than delay 5m0s`,
		}},
		{"wait not a mapping", "name: w\nwait: 3\nsteps: [{name: s, agent: a}]\n", []string{`w.yaml:2: wait: want a mapping, got "3"`}},
		{"neither http nor agent", oneStep("    timeout: 1s\n"), []string{`w.yaml:3: steps[0]: needs http (call a URL) or agent (a remote agent)`}},
		{"both http and agent", oneStep("    agent: a\n    http: {method: GET, url: \"http://h/\"}\n"), []string{`w.yaml:4: steps[0]: has both http and agent; give one`}},
		{"missing step name", "name: w\nsteps:\n  - agent: a\n", []string{`w.yaml:3: steps[0].name: required: every step needs a name`}},
		{"duplicate step", "name: w\nsteps:\n  - {name: s, agent: a}\n  - {name: s, agent: b}\n", []string{`w.yaml:4: steps[1].name: "s" is also the name of steps[0]`}},
		{"bad agent name", oneStep("    agent: a/b\n"), []string{`w.yaml:4: steps[0].agent: "a/b" must be 1-200 printable characters without spaces or "/"`}},
		{"agent http reserved", oneStep("    agent: http\n"), []string{`w.yaml:4: steps[0].agent: "http" is the built-in HTTP agent; call a URL with http: instead`}},
		{"input on http step", oneStep("    http: {method: GET, url: \"http://h/\"}\n    input: {a: 1}\n"), []string{`w.yaml:5: steps[0].input: only agent steps take input; an http step sends body or body_text`}},
		{"retry on agent step", oneStep("    agent: a\n    retry: {max_tries: 2}\n"), []string{`w.yaml:5: steps[0].retry: only http steps take a retry policy; a remote agent retries on its own`}},
		{"retry fields", oneStep("    http: {method: GET, url: \"http://h/\"}\n    retry: {initial_interval: 5s, max_interval: 1s, max_tries: -1}\n"), []string{
			`w.yaml:5: steps[0].retry.max_tries: -1 is less than 0`,
		}},
		{"retry intervals", oneStep("    http: {method: GET, url: \"http://h/\"}\n    retry: {initial_interval: 5s, max_interval: 1s}\n"), []string{
			`w.yaml:5: steps[0].retry.initial_interval: 5s is more than max_interval 1s`,
		}},
		{"bad method", oneStep("    http: {method: FETCH, url: \"http://h/\"}\n"), []string{
			`w.yaml:4: steps[0].http.method: method "FETCH" is not one of GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS`,
		}},
		{"missing method and url", oneStep("    http: {}\n"), []string{
			`w.yaml:4: steps[0].http.method: required: the HTTP method, such as POST`,
			`w.yaml:4: steps[0].http.url: required: the URL to call`,
		}},
		{"relative url", oneStep("    http: {method: GET, url: \"/x\"}\n"), []string{`w.yaml:4: steps[0].http.url: "/x" must be an absolute http:// or https:// URL`}},
		{"url without host", oneStep("    http: {method: GET, url: \"http:///x\"}\n"), []string{`w.yaml:4: steps[0].http.url: "http:///x" is not a valid URL: has no host`}},
		{"status out of range", oneStep("    http: {method: GET, url: \"http://h/\", transient_status: [409, 700]}\n"), []string{
			`w.yaml:4: steps[0].http: transient status 700 is not an HTTP status code (100-599)`,
		}},
		{"status both", oneStep("    http:\n      method: GET\n      url: \"http://h/\"\n      transient_status: [409]\n      permanent_status: [409]\n"), []string{
			`w.yaml:8: steps[0].http: status 409 is listed as both transient and permanent`,
		}},
		{"status type", oneStep("    http: {method: GET, url: \"http://h/\", permanent_status: [abc]}\n"), []string{
			`w.yaml:4: steps[0].http.permanent_status[0]: want an integer, got "abc"`,
		}},
		{"body and body_text", oneStep("    http:\n      method: POST\n      url: \"http://h/\"\n      body: {a: 1}\n      body_text: x\n"), []string{
			`w.yaml:8: steps[0].http.body_text: give body (JSON) or body_text (a string), not both`,
		}},
		{"idempotency header", oneStep("    http: {method: GET, url: \"http://h/\", headers: {idempotency-key: x}}\n"), []string{
			`w.yaml:4: steps[0].http.headers.idempotency-key: set by drover to the step's idempotency key; it cannot be overridden`,
		}},
		{"bad header name", oneStep("    http: {method: GET, url: \"http://h/\", headers: {\"a b\": x}}\n"), []string{
			`w.yaml:4: steps[0].http.headers.a b: "a b" is not a valid header name`,
		}},
		{"unknown root", oneStep("    agent: a\n    input: {x: \"${inptu.x}\"}\n"), []string{
			`w.yaml:5: steps[0].input.x: ${inptu.x}: unknown root "inptu" (want input, steps, step or task)`,
		}},
		{"unterminated expression", oneStep("    agent: a\n    input: \"${input.x\"\n"), []string{
			`w.yaml:5: steps[0].input: unterminated ${ (no closing })`,
		}},
		{"bad steps expression", oneStep("    agent: a\n    input: \"${steps.s}\"\n"), []string{
			`w.yaml:5: steps[0].input: ${steps.s}: want steps.<step name>.output`,
		}},
		{"own output in forward step", oneStep("    agent: a\n    input: \"${step.output}\"\n"), []string{
			`w.yaml:5: steps[0].input: ${step.output}: step.output is only available in compensate; use steps.<name>.output for an earlier step`,
		}},
		{"reference to itself", oneStep("    http: {method: GET, url: \"http://h/${steps.s.output.id}\"}\n"), []string{
			`w.yaml:4: steps[0].http.url: ${steps.s.output.id}: step "s" is not before this step; only earlier steps' outputs are available`,
		}},
		{"reference to a later step", "name: w\nsteps:\n  - name: a\n    agent: x\n    input: {v: \"${steps.b.output}\"}\n  - name: b\n    agent: y\n", []string{
			`w.yaml:5: steps[0].input.v: ${steps.b.output}: step "b" is not before this step; only earlier steps' outputs are available`,
		}},
		{"reference to an unknown step", oneStep("    agent: a\n    input: [\"${steps.nope.output}\"]\n"), []string{
			`w.yaml:5: steps[0].input[0]: ${steps.nope.output}: there is no step named "nope"`,
		}},
		{"compensation refers to a later step", "name: w\nsteps:\n  - name: a\n    agent: x\n    compensate: {agent: u, input: \"${steps.b.output}\"}\n  - name: b\n    agent: y\n", []string{
			`w.yaml:5: steps[0].compensate.input: ${steps.b.output}: step "b" comes after this one; a compensation may use this step's output or earlier ones`,
		}},
		{"compensation without action", oneStep("    agent: a\n    compensate: {input: 1}\n"), []string{
			`w.yaml:5: steps[0].compensate: needs http (call a URL) or agent (a remote agent)`,
		}},
		{"compensation typo", oneStep("    agent: a\n    compensate: {agnet: u}\n"), []string{
			`w.yaml:5: steps[0].compensate.agnet: unknown key (did you mean "agent"?)`,
		}},
		{"alias", "name: w\nsteps:\n  - &s {name: s, agent: a}\n  - *s\n", []string{
			`w.yaml:4: steps[1]: YAML aliases (*name) are not supported`,
		}},
		{"non-finite number", oneStep("    agent: a\n    input: {x: .inf}\n"), []string{
			`w.yaml:5: steps[0].input.x: .inf is not a JSON number`,
		}},
		{"wrong type for http", oneStep("    http: \"http://h/\"\n"), []string{
			`w.yaml:4: steps[0].http: want a mapping, got "http://h/"`,
		}},
		{"null string", "name:\nsteps: [{name: s, agent: a}]\n", []string{`w.yaml:1: name: want a string, got nothing`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, err := Parse("w.yaml", []byte(c.src))
			if err == nil {
				t.Fatalf("parsed without problems: %+v", d)
			}
			checkProblems(t, err, c.want)
		})
	}
}

// TestParseValidEdgeCases: what is accepted.
func TestParseValidEdgeCases(t *testing.T) {
	for name, src := range map[string]string{
		"expressions everywhere": `name: w
steps:
  - name: a
    http:
      method: post
      url: "https://h.example/${input.id}?q=${input.q}"
      headers: {X-Task: "${task.id}", X-Key: "${step.idempotency_key}", X-Step: "${step.name}"}
      body_text: "order ${input.id}"
  - name: b
    agent: x
    input: {prev: "${steps.a.output}", first: "${steps.a.output.items[0]}", odd: "${input[\"a.b\"]}", lit: "$${not}"}
    compensate: {agent: y, input: {own: "${step.output}", b: "${steps.b.output.id}", a: "${steps.a.output}"}}
`,
		"url from data":                   "name: w\negress: {allow: [hooks.example.com, \"*.partner.example\"]}\nsteps: [{name: a, http: {method: GET, url: \"${input.callback}\"}}]\n",
		"http compensation of agent step": "name: w\nsteps: [{name: a, agent: x, compensate: {http: {method: DELETE, url: \"http://h/${step.output.id}\"}, retry: {max_tries: 2}}}]\n",
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := Parse("w.yaml", []byte(src)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestParseReportsEveryProblem: a file with many problems reports all of
// them, in line order, and yields no definition.
func TestParseReportsEveryProblem(t *testing.T) {
	src := `name: trip
failure_threshold: -2
on_failure: explode
steps:
  - name: reserve
    timout: 10s
    http:
      method: FETCH
      url: "http://h/${input.id"
      transient_status: [99]
  - name: charge
    agent: pay/ments
    input: {amount: "${steps.refund.output}"}
    compensate: {agent: refunds, input: "${stepz.x}"}
  - name: reserve
    timeout: 10x
`
	d, err := Parse("trip.yaml", []byte(src))
	if d != nil {
		t.Fatalf("got a definition from an invalid file: %+v", d)
	}
	checkProblems(t, err, []string{
		`trip.yaml:2: failure_threshold: -2 is less than 1`,
		`trip.yaml:3: on_failure: "explode" must be error or compensate`,
		`trip.yaml:6: steps[0].timout: unknown key (did you mean "timeout"?)`,
		`trip.yaml:8: steps[0].http.method: method "FETCH" is not one of GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS`,
		`trip.yaml:9: steps[0].http.url: unterminated ${ (no closing })`,
		`trip.yaml:10: steps[0].http: transient status 99 is not an HTTP status code (100-599)`,
		`trip.yaml:12: steps[1].agent: "pay/ments" must be 1-200 printable characters without spaces or "/"`,
		`trip.yaml:13: steps[1].input.amount: ${steps.refund.output}: there is no step named "refund"`,
		`trip.yaml:14: steps[1].compensate.input: ${stepz.x}: unknown root "stepz" (want input, steps, step or task)`,
		`trip.yaml:15: steps[2].name: "reserve" is also the name of steps[0]`,
		`trip.yaml:15: steps[2]: needs http (call a URL) or agent (a remote agent)`,
		`trip.yaml:16: steps[2].timeout: "10x" is not a duration (such as 500ms, 10s, 1m)`,
	})
}

func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, src := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestLoad(t *testing.T) {
	good := "name: %s\nsteps: [{name: s, agent: a}]\n"
	t.Run("valid", func(t *testing.T) {
		dir := writeFiles(t, map[string]string{
			"b.yaml":       strings.Replace(good, "%s", "beta", 1),
			"a.yml":        strings.Replace(good, "%s", "alpha", 1),
			"c.json":       `{"name": "gamma", "steps": [{"name": "s", "agent": "a"}]}`,
			"README.md":    "not a workflow",
			".hidden.yaml": "not: [valid",
		})
		defs, err := Load(dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, d := range defs {
			names = append(names, d.Name)
		}
		if !reflect.DeepEqual(names, []string{"alpha", "beta", "gamma"}) {
			t.Errorf("names = %v", names)
		}
	})
	t.Run("every invalid file", func(t *testing.T) {
		dir := writeFiles(t, map[string]string{
			"a.yaml": strings.Replace(good, "%s", "trip", 1),
			"b.yaml": strings.Replace(good, "%s", "trip", 1),
			"c.yaml": strings.Replace(good, "%s", "orders", 1),
			"d.yaml": "name: d\nsteps: [{name: s, agent: a, timeout: 1y}]\n",
		})
		defs, err := Load(dir, nil, "orders")
		if defs != nil {
			t.Errorf("Load returned definitions with an invalid file: %v", defs)
		}
		checkProblems(t, err, []string{
			filepath.Join(dir, "b.yaml") + `:1: name: workflow "trip" is also defined in ` + filepath.Join(dir, "a.yaml"),
			filepath.Join(dir, "c.yaml") + `:1: name: "orders" is a built-in workflow; choose another name`,
			filepath.Join(dir, "d.yaml") + `:2: steps[0].timeout: "1y" is not a duration (such as 500ms, 10s, 1m)`,
		})
	})
	t.Run("missing directory", func(t *testing.T) {
		if _, err := Load(filepath.Join(t.TempDir(), "nope"), nil); err == nil || !os.IsNotExist(errors.Unwrap(err)) {
			t.Errorf("err = %v, want a not-exist error", err)
		}
	})
}

// TestDocExample: the example of docs/workflows.md is the file
// TestParseExample checks.
func TestDocExample(t *testing.T) {
	doc, err := os.ReadFile("../../docs/workflows.md")
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("testdata/trip.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(doc), "```yaml\n")
	block, _, _ = strings.Cut(block, "```")
	if !ok || block != string(want) {
		t.Errorf("the first YAML block of docs/workflows.md differs from testdata/trip.yaml:\n%s", block)
	}
}

// A workflow's retry is the retry of its http steps that give none (and of
// their compensations); a step's own retry overrides it.
func TestWorkflowRetryDefault(t *testing.T) {
	src := `name: ship
retry: {initial_interval: 10ms, max_interval: 1s, max_tries: 7}
steps:
  - name: label
    http: {method: POST, url: "https://labels.example/v1"}
    compensate: {http: {url: "https://labels.example/v1/void", method: DELETE}}
  - name: pickup
    http: {method: POST, url: "https://couriers.example/v1"}
    retry: {max_tries: 2}
`
	d, err := Parse("ship.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	def := httpagent.RetryPolicy{InitialInterval: 10 * time.Millisecond, MaxInterval: time.Second, MaxTries: 7}
	if got := d.Steps[0].Do.Retry; got != def {
		t.Errorf("label's retry = %+v, want the workflow's %+v", got, def)
	}
	if got := d.Steps[0].Compensate.Retry; got != def {
		t.Errorf("label's compensation retry = %+v, want the workflow's %+v", got, def)
	}
	if got := d.Steps[1].Do.Retry; got != (httpagent.RetryPolicy{MaxTries: 2}) {
		t.Errorf("pickup's retry = %+v, want its own {MaxTries: 2}", got)
	}
	if _, err := Parse("bad.yaml", []byte("name: w\nretry: {max_tries: -1}\nsteps:\n  - name: s\n    http: {method: GET, url: \"https://a.example\"}\n")); err == nil || !strings.Contains(err.Error(), "bad.yaml:2: retry.max_tries") {
		t.Errorf("a bad workflow retry: %v", err)
	}
}
