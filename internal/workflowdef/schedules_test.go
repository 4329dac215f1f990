package workflowdef

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/drover-run/drover"
)

func TestParseSchedules(t *testing.T) {
	src := `name: report
steps: [{name: build, agent: builder}]
schedules:
  - name: nightly
    cron: "0 2 * * *"
    time_zone: Europe/Berlin
    input: {kind: sales, days: [1, 2]}
    catch_up: all
  - name: hourly
    every: 1h
`
	d, err := Parse("w.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Schedules) != 2 {
		t.Fatalf("schedules: %+v", d.Schedules)
	}
	n, h := d.Schedules[0], d.Schedules[1]
	if n.Name != "nightly" || n.Workflow != "report" || n.Cron != "0 2 * * *" || n.TimeZone != "Europe/Berlin" ||
		n.CatchUp != drover.CatchUpAll || string(n.Input) != `{"days":[1,2],"kind":"sales"}` {
		t.Errorf("nightly: %+v (input %s)", n, n.Input)
	}
	if h.Name != "hourly" || h.Every != time.Hour || h.Input != nil || h.CatchUp != "" {
		t.Errorf("hourly: %+v", h)
	}
}

func TestParseScheduleProblems(t *testing.T) {
	head := "name: w\nsteps: [{name: s, agent: a}]\nschedules:\n"
	for _, tc := range []struct{ src, want string }{
		{"  - {cron: '* * * * *'}\n", `w.yaml:4: schedules[0].name: required: the schedule's name`},
		{"  - {name: x}\n", `w.yaml:4: schedules[0]: give Cron or Every`},
		{"  - {name: x, cron: '61 * * * *'}\n", `w.yaml:4: schedules[0]: Cron "61 * * * *": `},
		{"  - {name: x, cron: '0 6 * * *', time_zone: Mars/Base}\n", `TimeZone "Mars/Base" is not a known IANA time zone`},
		{"  - {name: x, every: 10}\n", `schedules[0].every: 10 is not a duration`},
		{"  - {name: x, every: 1h, catch_up: some}\n", `CatchUp "some" is not skip, last or all`},
		{"  - {name: x, every: 1h, color: red}\n", `schedules[0].color: unknown key`},
		{"  - {name: x, every: 1h}\n  - {name: x, every: 2h}\n", `w.yaml:5: schedules[1].name: "x" is also the name of schedules[0]`},
		{"  name: x\n", `schedules: want a list`},
	} {
		_, err := Parse("w.yaml", []byte(head+tc.src))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.src, err, tc.want)
		}
	}
}

// TestDocScheduleExample: the schedules example of docs/workflows.md is
// a valid file with its two schedules.
func TestDocScheduleExample(t *testing.T) {
	doc, err := os.ReadFile("../../docs/workflows.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "## Schedules\n")
	_, block, ok2 := strings.Cut(rest, "```yaml\n")
	block, _, _ = strings.Cut(block, "```")
	if !ok || !ok2 {
		t.Fatal("no YAML block in the Schedules section of docs/workflows.md")
	}
	d, err := Parse("doc.yaml", []byte(block))
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Schedules) != 2 || d.Schedules[0].TimeZone != "Europe/Berlin" || d.Schedules[1].Every != time.Hour {
		t.Errorf("schedules: %+v", d.Schedules)
	}
}
