package workflowdef

import (
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/internal/testutil"
)

// splitYAML reserves a hotel and a car at a at the same time (a parallel
// group), then charges at b with both reservations' ids, read by branch
// name.
func splitYAML(a, b string) string {
	return fmt.Sprintf(`name: split
on_failure: compensate
steps:
  - name: reserve
    parallel:
      - name: hotel
        timeout: 20s
        http: {method: POST, url: "%s/hotels", body: {order: "${input.order_id}"}}
        compensate:
          http: {method: DELETE, url: "%s/hotels/${steps.hotel.output.id}"}
      - name: car
        timeout: 20s
        http: {method: POST, url: "%s/cars", body: {order: "${input.order_id}"}}
  - name: charge
    timeout: 20s
    http:
      method: POST
      url: "%s/charges"
      body: {amount: "${input.amount}", hotel: "${steps.hotel.output.id}", car: "${steps.car.output.id}"}
`, a, a, a, b)
}

func TestParseParallelGroup(t *testing.T) {
	d, err := Parse("split.yaml", []byte(splitYAML("http://a.example", "http://b.example")))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	want := []drover.Step{
		{Name: "reserve", Parallel: []drover.Step{
			{Name: "hotel", Agent: "http", Timeout: 20 * time.Second, Compensation: "http"},
			{Name: "car", Agent: "http", Timeout: 20 * time.Second},
		}},
		{Name: "charge", Agent: "http", Timeout: 20 * time.Second},
	}
	if got := d.Workflow().Steps; !reflect.DeepEqual(got, want) {
		t.Errorf("Workflow().Steps =\n%+v\nwant\n%+v", got, want)
	}
	if len(d.Steps) != 3 || d.Steps[0].Group != "reserve" || d.Steps[1].Group != "reserve" || d.Steps[2].Group != "" {
		t.Errorf("Steps: %d, groups %q", len(d.Steps), []string{d.Steps[0].Group, d.Steps[1].Group})
	}
}

func TestParseParallelProblems(t *testing.T) {
	head := "name: w\nsteps:\n"
	branch := func(name string) string {
		return fmt.Sprintf("      - name: %s\n        agent: x\n", name)
	}
	cases := []struct{ name, src, want string }{
		{"one branch", head + "  - name: g\n    parallel:\n" + branch("a"),
			"steps[0].parallel: a parallel group needs at least 2 branches, it has 1"},
		{"nested", head + "  - name: g\n    parallel:\n" + branch("a") + "      - name: h\n        parallel: []\n",
			"steps[0].parallel[1].parallel: a branch cannot be a parallel group itself"},
		{"agent on group", head + "  - name: g\n    agent: x\n    parallel:\n" + branch("a") + branch("b"),
			"steps[0].agent: unknown key"},
		{"no name", head + "  - parallel:\n" + branch("a") + branch("b"),
			"steps[0].name: required: a parallel group needs a name"},
		{"name twice", head + "  - name: a\n    agent: x\n  - name: g\n    parallel:\n" + branch("a") + branch("b"),
			`steps[1].parallel[0].name: "a" is also the name of steps[0]`},
		{"group name twice", head + "  - name: g\n    agent: x\n  - name: g\n    parallel:\n" + branch("a") + branch("b"),
			`steps[1].name: "g" is also the name of steps[0]`},
		{"sibling output", head + "  - name: g\n    parallel:\n" + branch("a") +
			"      - name: b\n        agent: x\n        input: {v: \"${steps.a.output}\"}\n",
			`step "a" is a branch of the same parallel group`},
	}
	for _, tc := range cases {
		_, err := Parse("w.yaml", []byte(tc.src))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Parse = %v; want a problem saying %q", tc.name, err, tc.want)
		}
	}
}

// A YAML workflow's parallel group runs its HTTP branches, and the next
// step reads each branch's output by name.
func TestParallelGroupEndToEnd(t *testing.T) {
	a, b := tripServices(t, nil)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "split.yaml"), splitYAML(a.URL, b.URL))
	f := start(t, testutil.SQLite(t), dir, true)
	if _, err := f.client.Submit(context.Background(), "split", []byte(`{"order_id":"o-1","amount":50}`), &drover.SubmitOptions{ID: "s-1"}); err != nil {
		t.Fatal(err)
	}
	task := waitFinal(t, f.client, "s-1")
	if task.ProcessState != drover.Processed {
		t.Fatalf("task %s: %s (%s)", task.ID, task.ProcessState, task.LastError)
	}
	for i, path := range []string{"/hotels", "/cars"} {
		if got := a.find(func(s seen) bool { return s.Path == path && s.Key == task.Steps[i].IdempotencyKey }); len(got) != 1 {
			t.Errorf("%s requests with branch %s's key: %+v", path, task.Steps[i].Name, got)
		}
	}
	ch := b.find(func(s seen) bool { return s.Key == task.Steps[2].IdempotencyKey })
	if len(ch) != 1 || ch[0].Body != `{"amount":50,"hotel":"r-o-1","car":"r-o-1"}` {
		t.Errorf("charge requests: %+v (all: %+v)", ch, b.requests())
	}
}
