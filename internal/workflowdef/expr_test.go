package workflowdef

import (
	"errors"
	"strings"
	"testing"

	"github.com/drover-run/drover"
)

const renderSrc = `name: w
egress: {allow: [svc.example, cb.example]}
steps:
  - name: reserve
    agent: x
  - name: call
    http:
      method: POST
      url: "https://svc.example/orders/${input.customer.name}/items?tag=${input.tag}&n=${input.items[1]}"
      headers:
        X-Task: "${task.id}"
        X-Key: "${step.idempotency_key}"
        X-Count: "${input.count}"
        Content-Type: application/vnd.test+json
      body:
        order: "${input.order_id}"
        seats: "${input.seats}"
        vip: "${input.vip}"
        nested: {items: "${input.items}", first: "${input.items[0]}"}
        reservation: "res-${steps.reserve.output.id}"
        name: "${step.name}"
        nothing: null
        list: [1, "two", "${input.seats}"]
        literal: "$${input.x} <&>"
    compensate:
      http:
        method: DELETE
        url: "${input.callback}"
        body_text: "undo ${step.output.id} of ${steps.reserve.output.id}"
`

func renderEnv(t *testing.T) (*Definition, *evalEnv) {
	t.Helper()
	d, err := Parse("w.yaml", []byte(renderSrc))
	if err != nil {
		t.Fatal(err)
	}
	env := &evalEnv{
		taskID: "t-1", stepName: "call", key: "t-1/1/call",
		input: []byte(`{"customer":{"name":"Ann Lee/3"},"tag":"a&b=c","items":["x",7],"order_id":"o-9","seats":2,"vip":true,
			"count":12.50,"callback":"http://cb.example/undo?x=1"}`),
		outputs: map[string][]byte{"reserve": []byte(`{"id":"r 1"}`), "call": []byte(`{"id":"c-2"}`)},
	}
	return d, env
}

func TestRenderHTTPRequest(t *testing.T) {
	d, env := renderEnv(t)
	r, err := d.Steps[1].Do.HTTP.request(env)
	if err != nil {
		t.Fatal(err)
	}
	// Path-escaped before "?", query-escaped after it.
	if want := "https://svc.example/orders/Ann%20Lee%2F3/items?tag=a%26b%3Dc&n=7"; r.URL != want {
		t.Errorf("URL = %s, want %s", r.URL, want)
	}
	for h, want := range map[string]string{"X-Task": "t-1", "X-Key": "t-1/1/call", "X-Count": "12.50", "Content-Type": "application/vnd.test+json"} {
		if got := r.Header.Get(h); got != want {
			t.Errorf("header %s = %q, want %q", h, got, want)
		}
	}
	// A string that is one expression takes the value with its type; keys
	// keep the file's order; literals pass through.
	want := `{"order":"o-9","seats":2,"vip":true,"nested":{"items":["x",7],"first":"x"},"reservation":"res-r 1","name":"call","nothing":null,"list":[1,"two",2],"literal":"${input.x} <&>"}`
	if string(r.Body) != want {
		t.Errorf("body =\n%s\nwant\n%s", r.Body, want)
	}
	if r.Method != "POST" {
		t.Errorf("method = %s", r.Method)
	}
}

func TestRenderCompensation(t *testing.T) {
	d, env := renderEnv(t)
	env.ownSet, env.own = true, []byte(`{"id":"c-2"}`)
	r, err := d.Steps[1].Compensate.HTTP.request(env)
	if err != nil {
		t.Fatal(err)
	}
	// A URL that is one expression is taken as it is.
	if r.URL != "http://cb.example/undo?x=1" || r.Method != "DELETE" {
		t.Errorf("request = %s %s", r.Method, r.URL)
	}
	if string(r.Body) != "undo c-2 of r 1" || r.Header.Get("Content-Type") != "text/plain; charset=utf-8" {
		t.Errorf("body = %q, Content-Type %q", r.Body, r.Header.Get("Content-Type"))
	}
}

func TestRenderMissingData(t *testing.T) {
	cases := []struct {
		input string
		out   string
		want  string
	}{
		{`{"customer":{},"tag":"t","items":[1,2],"order_id":1,"seats":1,"vip":1,"count":1}`, `{"id":1}`,
			`task t-1: ${input.customer.name}: the task input.customer has no field "name"`},
		{`{"customer":{"name":"a"},"tag":"t","items":[1],"order_id":1,"seats":1,"vip":1,"count":1}`, `{"id":1}`,
			`task t-1: ${input.items[1]}: the task input.items has 1 elements, no index 1`},
		{`{"customer":"ann"}`, `{"id":1}`,
			`task t-1: ${input.customer.name}: the task input.customer is a string, not an object`},
		{`{"customer":{"name":"a"},"tag":"t","items":[1,2],"order_id":1,"seats":1,"vip":1,"count":1}`, `[1]`,
			`task t-1: ${steps.reserve.output.id}: the output of step reserve is an array, not an object`},
		{`{"customer":{"name":"a"},"tag":"t","items":[1,2],"order_id":1,"seats":1,"vip":1,"count":1}`, `not json`,
			`task t-1: ${steps.reserve.output.id}: the output of step reserve is not JSON: invalid character 'o' in literal null (expecting 'u')`},
	}
	for _, c := range cases {
		d, env := renderEnv(t)
		env.input = []byte(c.input)
		env.outputs["reserve"] = []byte(c.out)
		_, err := d.Steps[1].Do.HTTP.request(env)
		var ee *evalError
		if !errors.As(err, &ee) {
			t.Errorf("input %s: err = %v, want an evaluation error", c.input, err)
			continue
		}
		if err.Error() != c.want {
			t.Errorf("err = %q\nwant  %q", err, c.want)
		}
		// Run-time data problems are permanent: retrying cannot fix them.
		if !drover.IsPermanent(permanentEval(err)) {
			t.Errorf("%v is not permanent", err)
		}
	}
}

func TestRenderHeaderInjection(t *testing.T) {
	d, err := Parse("w.yaml", []byte("name: w\nsteps: [{name: a, http: {method: GET, url: \"http://h/\", headers: {X-A: \"v ${input.v}\"}}}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	env := &evalEnv{taskID: "t", input: []byte(`{"v":"x\r\nEvil: 1"}`)}
	_, err = d.Steps[0].Do.HTTP.request(env)
	if err == nil || !strings.Contains(err.Error(), "header X-A would contain a line break") {
		t.Errorf("err = %v", err)
	}
}

func TestParseTemplate(t *testing.T) {
	for _, c := range []struct{ in, err string }{
		{"plain", ""},
		{"a $ b $$ c", ""},
		{"${ input.a }", ""},
		{`${input["a.b"][0]}`, ""},
		{"${input.}", `unexpected '}' in ${...}`},
		{"${input[x]}", `want an index [N] or a quoted key ["key"] in ${...}`},
		{"${task.name}", "${task.name}: want task.id"},
		{"${step.name.x}", "${step.name.x}: step.name has no fields"},
		{"${step.bogus}", "${step.bogus}: want step.output, step.name or step.idempotency_key"},
		{"${input.a b}", `unexpected 'b' in ${input.a`},
	} {
		_, err := parseTemplate(c.in)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != c.err {
			t.Errorf("parseTemplate(%q) error = %q, want %q", c.in, got, c.err)
		}
	}
}

// TestLiteralValues: YAML scalars become the JSON values they denote.
func TestLiteralValues(t *testing.T) {
	d, err := Parse("w.yaml", []byte(`name: w
steps:
  - name: a
    agent: x
    input: {big: 123456789012345678901234567890, hex: 0x1F, f: 1.5e3, yes: yes, t: true, n: ~, s: "007", date: 2024-01-02, neg: -7}
`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := d.Steps[0].Do.input.renderJSON(&evalEnv{})
	want := `{"big":123456789012345678901234567890,"hex":31,"f":1500,"yes":"yes","t":true,"n":null,"s":"007","date":"2024-01-02","neg":-7}`
	if err != nil || string(got) != want {
		t.Errorf("input = %s, %v\nwant %s", got, err, want)
	}
}
