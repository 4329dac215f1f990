package workflowdef

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/internal/testutil"
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

// A reload stops the client firing the schedules no file defines any
// more: dropped from a workflow's file, or with the file removed (the
// workflow stays registered); an invalid file keeps its schedules; a
// schedule defined again is fired again. Each is reported once.
func TestReloadDropsSchedulesNoFileDefines(t *testing.T) {
	dir := t.TempDir()
	file := func(name, workflow string, schedules ...string) string {
		src := "name: " + workflow + "\nsteps: [{name: build, agent: builder}]\n"
		if len(schedules) > 0 {
			src += "schedules:\n"
			for _, s := range schedules {
				src += "  - {name: " + s + ", every: 1h}\n"
			}
		}
		path := filepath.Join(dir, name)
		writeFile(t, path, src)
		return path
	}
	file("a.yaml", "a", "a-hourly", "a-extra")
	b := file("b.yaml", "b", "b-hourly")
	c := file("c.yaml", "c", "c-hourly")
	f := start(t, testutil.SQLite(t), dir, false)
	ctx := context.Background()
	if err := f.client.AddSchedules(ctx, f.reg.Schedules()); err != nil { // as a server does at start
		t.Fatal(err)
	}
	reload := func() {
		t.Helper()
		if _, err := f.reg.Reload(ctx); err != nil {
			t.Fatalf("reload: %v", err)
		}
	}
	fired := func(want map[string]bool) {
		t.Helper()
		for name, w := range want {
			if got := f.client.DefinesSchedule(name); got != w {
				t.Errorf("DefinesSchedule(%s) = %v, want %v", name, got, w)
			}
		}
	}

	file("a.yaml", "a", "a-hourly") // a-extra dropped from its file
	if err := os.Remove(b); err != nil {
		t.Fatal(err)
	}
	writeFile(t, c, "name: c\nsteps: [{name: build, agnt: builder}]\n") // invalid: keeps its previous version
	reload()
	fired(map[string]bool{"a-hourly": true, "a-extra": false, "b-hourly": false, "c-hourly": true})
	if _, ok := f.reg.Current("b"); !ok {
		t.Error("workflow b unregistered with its file")
	}
	reload() // nothing new: nothing reported again
	if n := strings.Count(f.logs.String(), "schedules no workflow file defines any more"); n != 1 {
		t.Errorf("reported %d times, want once:\n%s", n, f.logs.String())
	}

	file("b.yaml", "b", "b-hourly") // the same file back: its workflow has not changed
	reload()
	fired(map[string]bool{"b-hourly": true, "a-extra": false})
	if err := f.client.DeleteSchedule(ctx, "a-extra"); err != nil {
		t.Errorf("DeleteSchedule of the dropped schedule: %v", err)
	}
}
