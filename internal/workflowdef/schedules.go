package workflowdef

import (
	"encoding/json"
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/drover-run/drover"
)

// schedules reads the file's schedules: a list, each submitting this
// file's workflow at the due times of cron (in time_zone) or every, with
// input (any YAML value, sent as JSON) and catch_up.
func (p *parser) schedules(n *yaml.Node, d *Definition) {
	if !p.kind(n, "schedules", yaml.SequenceNode) {
		return
	}
	seen := map[string]int{}
	for i, sn := range n.Content {
		field := fmt.Sprintf("schedules[%d]", i)
		f, ok := p.fields(sn, field, "name", "cron", "time_zone", "every", "input", "catch_up")
		if !ok {
			continue
		}
		s := drover.Schedule{Workflow: d.Name}
		e, ok := f["name"]
		if !ok {
			p.add(sn, field+".name", "required: the schedule's name")
			continue
		}
		if s.Name, ok = p.name(e.val, field+".name"); !ok {
			continue
		}
		if prev, dup := seen[s.Name]; dup {
			p.add(e.val, field+".name", "%q is also the name of schedules[%d]", s.Name, prev)
			continue
		}
		seen[s.Name] = i
		if e, ok := f["cron"]; ok {
			s.Cron, _ = p.str(e.val, field+".cron")
		}
		if e, ok := f["time_zone"]; ok {
			s.TimeZone, _ = p.str(e.val, field+".time_zone")
		}
		if e, ok := f["every"]; ok {
			s.Every, _ = p.duration(e.val, field+".every", true)
		}
		if e, ok := f["catch_up"]; ok {
			c, _ := p.str(e.val, field+".catch_up")
			s.CatchUp = drover.CatchUpPolicy(c)
		}
		if e, ok := f["input"]; ok {
			var v any
			if err := e.val.Decode(&v); err != nil {
				p.add(e.val, field+".input", "%v", err)
				continue
			}
			b, err := json.Marshal(v)
			if err != nil {
				p.add(e.val, field+".input", "not a JSON value: %v", err)
				continue
			}
			s.Input = b
		}
		if err := s.Validate(); err != nil {
			// Validate's message starts with the schedule's name, which
			// the field already says.
			msg := strings.TrimPrefix(err.Error(), fmt.Sprintf("%v %q: ", drover.ErrInvalidSchedule, s.Name))
			p.add(sn, field, "%s", msg)
			continue
		}
		d.Schedules = append(d.Schedules, s)
	}
}

// Schedules returns the schedules of the current version of every loaded
// workflow, in workflow then file order.
func (r *Registry) Schedules() []drover.Schedule {
	var out []drover.Schedule
	for _, w := range r.Workflows() {
		r.mu.Lock()
		d := r.current[w.Name]
		r.mu.Unlock()
		if d != nil {
			out = append(out, d.Schedules...)
		}
	}
	return out
}
