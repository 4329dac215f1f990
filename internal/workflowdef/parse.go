package workflowdef

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/drover-run/drover"
	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/egress"
	"github.com/drover-run/drover/internal/httpagent"
)

// HTTPAgentName is the agent name of every HTTP step and HTTP compensation.
const HTTPAgentName = "http"

// MaxFileBytes caps the size of one workflow file.
const MaxFileBytes = 1 << 20

// DefaultStepTimeout is a step's time budget when the file gives none.
const DefaultStepTimeout = 30 * time.Second

const maxNameLen = dt.MaxNameBytes

// Definition is one validated workflow file.
type Definition struct {
	Name        string
	Description string
	File        string // path it was read from; "<name> v<version> (stored)" when loaded from the store
	Source      []byte // the file's bytes
	Digest      string // hex sha256 of Source
	// Version is the stored version (WorkflowDefPut); 0 until stored.
	Version          int
	FailureThreshold int // 0: drover's default (3)
	OnFailure        drover.FailurePolicy
	RetryDelay       time.Duration
	Wait             drover.WaitPolicy // MaxWaits 0: off
	// Priority is the priority of the workflow's tasks, 0 to
	// drover.MaxPriority (a submission may give its own).
	Priority int
	// RequiredInput are the fields a task's input, a JSON object, must
	// have (not null): other inputs are refused at submission.
	RequiredInput []string
	// Egress lists the hosts the workflow's HTTP steps may reach (the
	// file's egress.allow); nil when the file declares none. Declared, it
	// also opens them when they are refused by default (a private or
	// loopback address), and it is required for a URL whose host comes
	// from data.
	Egress []egress.Rule
	Steps  []*Step
	// Schedules submit this workflow at recurring due times (the file's
	// schedules:).
	Schedules []drover.Schedule

	nameLine int

	egressMu   sync.Mutex
	egressBase *egress.Policy // the policy egressPol was made from
	egressPol  *egress.Policy
}

// EgressPolicy returns the policy the definition's calls go through: server
// restricted to (and opening) Egress, or server itself when the file
// declares no egress.
func (d *Definition) EgressPolicy(server *egress.Policy) *egress.Policy {
	if d.Egress == nil {
		return server
	}
	d.egressMu.Lock()
	defer d.egressMu.Unlock()
	if d.egressPol == nil || d.egressBase != server {
		d.egressBase = server
		d.egressPol = server.Restrict(d.Egress, fmt.Sprintf("workflow %q's egress.allow", d.Name))
	}
	return d.egressPol
}

// Step is one step of a definition.
type Step struct {
	Name    string
	Timeout time.Duration
	// OnFailure and Wait override the workflow's; "" and nil: its own.
	OnFailure drover.FailurePolicy
	Wait      *drover.WaitPolicy
	// Do is what the step does; Compensate, when not nil, undoes it.
	// Both are empty for a signal step.
	Do         Action
	Compensate *Action
	// Signal, when set, makes the step wait for this signal instead of
	// calling anything (drover.Step.Signal); SignalDefault is its outcome
	// at the deadline (nil: the deadline fails it).
	Signal        string
	SignalDefault []byte
	// Group names the parallel group the step is a branch of ("" for a
	// step of its own); a group's branches are consecutive in Steps.
	Group string
}

// Action is a call of the built-in HTTP agent or of a remote agent.
type Action struct {
	// HTTP is set for a URL call; Agent otherwise.
	HTTP  *HTTPCall
	Agent string
	// Retry shapes the HTTP agent's retries inside the step's deadline.
	Retry httpagent.RetryPolicy

	input *valueTmpl // agent steps: the mapped input; nil: the task input
}

// AgentName is the drover agent that runs the action.
func (a *Action) AgentName() string {
	if a.HTTP != nil {
		return HTTPAgentName
	}
	return a.Agent
}

// HasInputMapping reports whether an agent action maps its input.
func (a *Action) HasInputMapping() bool { return a.input != nil }

// HTTPCall is the request template of an HTTP action.
type HTTPCall struct {
	Method string
	Status httpagent.StatusPolicy

	url *strTmpl
	// origin is the scheme and host (with port) the URL template writes
	// literally; nil when data chooses them (the workflow's egress.allow
	// then lists what it may be).
	origin   *url.URL
	urlLine  int
	urlField string
	headers  []header
	body     *valueTmpl
	bodyText *strTmpl
}

type header struct {
	name string
	val  *strTmpl
}

// Workflow compiles the definition to the drover.Workflow registered with
// the client. HTTP steps and compensations use the agent HTTPAgentName.
func (d *Definition) Workflow() drover.Workflow {
	w := drover.Workflow{
		Name: d.Name, Version: d.Version, FailureThreshold: d.FailureThreshold,
		OnFailure: d.OnFailure, RetryDelay: d.RetryDelay, Wait: d.Wait, Priority: d.Priority,
	}
	if req := slices.Clone(d.RequiredInput); len(req) > 0 {
		w.ValidateInput = func(input []byte) error { return checkRequiredInput(input, req) }
	}
	for _, s := range d.Steps {
		st := drover.Step{Name: s.Name, Agent: s.Do.AgentName(), Timeout: s.Timeout, OnFailure: s.OnFailure}
		if s.Signal != "" {
			st = drover.Step{Name: s.Name, Signal: s.Signal, SignalDefault: s.SignalDefault, Timeout: s.Timeout, OnFailure: s.OnFailure}
		}
		if s.Wait != nil {
			w := *s.Wait
			st.Wait = &w
		}
		if s.Compensate != nil {
			st.Compensation = s.Compensate.AgentName()
		}
		if s.Group == "" {
			w.Steps = append(w.Steps, st)
			continue
		}
		if n := len(w.Steps); n == 0 || w.Steps[n-1].Name != s.Group || len(w.Steps[n-1].Parallel) == 0 {
			w.Steps = append(w.Steps, drover.Step{Name: s.Group})
		}
		g := &w.Steps[len(w.Steps)-1]
		g.Parallel = append(g.Parallel, st)
	}
	return w
}

// checkRequiredInput checks that input is a JSON object with every field
// of required, not null.
func checkRequiredInput(input []byte, required []string) error {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(input, &obj); err != nil || obj == nil {
		return fmt.Errorf("want a JSON object with the fields %s (required_input)", strings.Join(required, ", "))
	}
	var missing []string
	for _, k := range required {
		if v, ok := obj[k]; !ok || string(v) == "null" {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing %s (required_input: %s)", strings.Join(missing, ", "), strings.Join(required, ", "))
	}
	return nil
}

// ExternalAgents lists the remote agents the definition names.
func (d *Definition) ExternalAgents() []string {
	var out []string
	seen := map[string]bool{}
	for _, s := range d.Steps {
		for _, a := range []*Action{&s.Do, s.Compensate} {
			if a != nil && a.HTTP == nil && a.Agent != "" && !seen[a.Agent] {
				seen[a.Agent] = true
				out = append(out, a.Agent)
			}
		}
	}
	return out
}

// Digest returns the hex sha256 of a file's bytes: the identity of a version.
func Digest(src []byte) string {
	h := sha256.Sum256(src)
	return hex.EncodeToString(h[:])
}

// Parse validates one workflow file and returns its definition, or an *Error
// with every problem found.
func Parse(file string, src []byte) (*Definition, error) {
	d, probs := parse(file, src)
	if len(probs) > 0 {
		sortProblems(probs)
		return nil, &Error{Problems: probs}
	}
	return d, nil
}

type parser struct {
	file  string
	probs []Problem
	// egress is the workflow's egress.allow, as a policy restricted to it;
	// nil when the file declares none.
	egress *egress.Policy
	// suggested holds the fields an unknown key was probably meant as,
	// so a typo of a required key is reported once.
	suggested map[string]bool
	// defaultRetry is the workflow's retry, the policy of its http steps
	// that give none; nil when it gives none.
	defaultRetry *httpagent.RetryPolicy
}

func (p *parser) add(n *yaml.Node, field, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	p.probs = append(p.probs, Problem{File: p.file, Line: line, Field: field, Msg: fmt.Sprintf(format, args...)})
}

var yamlLineRe = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

func parse(file string, src []byte) (*Definition, []Problem) {
	p := &parser{file: file}
	if len(src) > MaxFileBytes {
		p.add(nil, "", "the file is %d bytes; the limit is %d", len(src), MaxFileBytes)
		return nil, p.probs
	}
	dec := yaml.NewDecoder(bytes.NewReader(src))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			p.add(nil, "", "the file is empty")
			return nil, p.probs
		}
		p.syntax(err)
		return nil, p.probs
	}
	var next yaml.Node
	if err := dec.Decode(&next); err == nil {
		p.add(&next, "", "a second YAML document: one workflow per file")
	} else if !errors.Is(err, io.EOF) {
		p.syntax(err)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	d := &Definition{File: file, Source: src, Digest: Digest(src)}
	p.workflow(root, d)
	if len(p.probs) > 0 {
		return nil, p.probs
	}
	// drover's own rules, as a last check; everything they cover is
	// reported above with its line, so this only catches a mismatch.
	if err := d.Workflow().Validate(); err != nil {
		p.add(root, "", "%v", err)
		return nil, p.probs
	}
	return d, nil
}

// syntax turns a YAML parser error into a problem with its line.
func (p *parser) syntax(err error) {
	msg := err.Error()
	if m := yamlLineRe.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		p.probs = append(p.probs, Problem{File: p.file, Line: line, Msg: "not valid YAML: " + m[2]})
		return
	}
	p.probs = append(p.probs, Problem{File: p.file, Msg: "not valid YAML: " + strings.TrimPrefix(msg, "yaml: ")})
}

// kv is one key of a mapping.
type kv struct {
	key, val *yaml.Node
}

// fields checks that n is a mapping with only the allowed keys and returns
// its entries by key. It reports unknown and repeated keys.
func (p *parser) fields(n *yaml.Node, field string, allowed ...string) (map[string]kv, bool) {
	if !p.kind(n, field, yaml.MappingNode) {
		return nil, false
	}
	out := map[string]kv{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		name := k.Value
		f := join(field, name)
		if k.Kind != yaml.ScalarNode {
			p.add(k, field, "a key must be a plain name")
			continue
		}
		if !contains(allowed, name) {
			msg := "unknown key"
			if s := suggest(name, allowed); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
				if p.suggested == nil {
					p.suggested = map[string]bool{}
				}
				p.suggested[join(field, s)] = true
			} else {
				msg += " (want one of " + strings.Join(allowed, ", ") + ")"
			}
			p.add(k, f, "%s", msg)
			continue
		}
		if _, dup := out[name]; dup {
			p.add(k, f, "repeated key")
			continue
		}
		out[name] = kv{k, v}
	}
	return out, true
}

func join(field, key string) string {
	if field == "" {
		return key
	}
	return field + "." + key
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// suggest returns the allowed key closest to a misspelt one, if close.
func suggest(s string, allowed []string) string {
	best, bestD := "", 3
	for _, a := range allowed {
		if d := editDistance(strings.ToLower(s), a); d < bestD {
			best, bestD = a, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	case yaml.ScalarNode:
		if n.ShortTag() == "!!null" {
			return "nothing"
		}
		return strconv.Quote(n.Value)
	}
	return "a document"
}

// kind checks n's kind. Aliases are refused: they would make one file's
// problems and values depend on another place in it.
func (p *parser) kind(n *yaml.Node, field string, want yaml.Kind) bool {
	if n.Kind == yaml.AliasNode {
		p.add(n, field, "YAML aliases (*name) are not supported")
		return false
	}
	if n.Kind == want {
		return true
	}
	what := map[yaml.Kind]string{yaml.MappingNode: "a mapping", yaml.SequenceNode: "a list", yaml.ScalarNode: "a value"}[want]
	p.add(n, field, "want %s, got %s", what, kindName(n))
	return false
}

func (p *parser) str(n *yaml.Node, field string) (string, bool) {
	if n.Kind == yaml.MappingNode || n.Kind == yaml.SequenceNode {
		p.add(n, field, "want a string, got %s", kindName(n))
		return "", false
	}
	if !p.kind(n, field, yaml.ScalarNode) {
		return "", false
	}
	if n.ShortTag() == "!!null" {
		p.add(n, field, "want a string, got nothing")
		return "", false
	}
	return n.Value, true
}

func (p *parser) integer(n *yaml.Node, field string, minimum int) (int, bool) {
	if !p.kind(n, field, yaml.ScalarNode) {
		return 0, false
	}
	var v int
	if n.ShortTag() != "!!int" || n.Decode(&v) != nil {
		p.add(n, field, "want an integer, got %s", kindName(n))
		return 0, false
	}
	if v < minimum {
		p.add(n, field, "%d is less than %d", v, minimum)
		return 0, false
	}
	return v, true
}

// duration parses a Go duration such as 500ms or 10s.
func (p *parser) duration(n *yaml.Node, field string, positive bool) (time.Duration, bool) {
	if !p.kind(n, field, yaml.ScalarNode) {
		return 0, false
	}
	if n.ShortTag() == "!!null" {
		p.add(n, field, "want a duration such as 10s, got nothing")
		return 0, false
	}
	d, err := time.ParseDuration(n.Value)
	if err != nil {
		if n.ShortTag() == "!!int" {
			p.add(n, field, "%s is not a duration: give a unit, such as %ss", n.Value, n.Value)
		} else {
			p.add(n, field, "%q is not a duration (such as 500ms, 10s, 1m)", n.Value)
		}
		return 0, false
	}
	if d < 0 {
		p.add(n, field, "%q is negative", n.Value)
		return 0, false
	}
	if positive && d == 0 {
		p.add(n, field, "%q must be positive", n.Value)
		return 0, false
	}
	return d, true
}

// validName is drover's rule for workflow, step and agent names
// (drovertype.NameProblem).
func validName(s string) bool { return dt.NameProblem(s) == "" }

func (p *parser) name(n *yaml.Node, field string) (string, bool) {
	s, ok := p.str(n, field)
	if !ok {
		return "", false
	}
	if !validName(s) {
		p.add(n, field, "%q must be 1-%d printable characters without spaces or \"/\"", s, maxNameLen)
		return "", false
	}
	return s, true
}

func (p *parser) template(n *yaml.Node, field string) (*strTmpl, bool) {
	s, ok := p.str(n, field)
	if !ok {
		return nil, false
	}
	t, err := parseTemplate(s)
	if err != nil {
		p.add(n, field, "%v", err)
		return nil, false
	}
	return t, true
}

// value converts a YAML value to a JSON template, checking the step
// references of its expressions against sc.
func (p *parser) value(n *yaml.Node, field string, sc refScope) (*valueTmpl, bool) {
	switch n.Kind {
	case yaml.AliasNode:
		p.add(n, field, "YAML aliases (*name) are not supported")
		return nil, false
	case yaml.MappingNode:
		v := &valueTmpl{obj: true}
		ok := true
		seen := map[string]bool{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, c := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode || k.ShortTag() == "!!null" {
				p.add(k, field, "a key must be a plain value")
				ok = false
				continue
			}
			if k.ShortTag() == "!!merge" {
				p.add(k, field, "YAML merge keys (<<) are not supported")
				ok = false
				continue
			}
			f := join(field, k.Value)
			if seen[k.Value] {
				p.add(k, f, "repeated key")
				ok = false
				continue
			}
			seen[k.Value] = true
			cv, cok := p.value(c, f, sc)
			if !cok {
				ok = false
				continue
			}
			v.keys = append(v.keys, k.Value)
			v.vals = append(v.vals, cv)
		}
		return v, ok
	case yaml.SequenceNode:
		v := &valueTmpl{list: true}
		ok := true
		for i, c := range n.Content {
			cv, cok := p.value(c, fmt.Sprintf("%s[%d]", field, i), sc)
			if !cok {
				ok = false
				continue
			}
			v.arr = append(v.arr, cv)
		}
		return v, ok
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return &valueTmpl{raw: json.RawMessage("null")}, true
		case "!!bool":
			var b bool
			if err := n.Decode(&b); err != nil {
				p.add(n, field, "%v", err)
				return nil, false
			}
			return &valueTmpl{raw: json.RawMessage(strconv.FormatBool(b))}, true
		case "!!int", "!!float":
			// Decimal integers keep every digit, however long.
			if d, ok := new(big.Int).SetString(strings.TrimPrefix(n.Value, "+"), 10); ok {
				return &valueTmpl{raw: json.RawMessage(d.String())}, true
			}
			var f any
			if err := n.Decode(&f); err != nil {
				p.add(n, field, "%v", err)
				return nil, false
			}
			if x, isF := f.(float64); isF && (math.IsInf(x, 0) || math.IsNaN(x)) {
				p.add(n, field, "%s is not a JSON number", n.Value)
				return nil, false
			}
			b, err := json.Marshal(f)
			if err != nil {
				p.add(n, field, "%v", err)
				return nil, false
			}
			return &valueTmpl{raw: b}, true
		case "!!str", "!!timestamp":
			t, err := parseTemplate(n.Value)
			if err != nil {
				p.add(n, field, "%v", err)
				return nil, false
			}
			if s, lit := t.literal(); lit {
				b, _ := marshal(s)
				return &valueTmpl{raw: b}, true
			}
			if !p.checkRefs(n, field, t.exprs(), sc) {
				return nil, false
			}
			return &valueTmpl{str: t}, true
		default:
			p.add(n, field, "YAML type %s is not supported; quote the value to make it a string", n.ShortTag())
			return nil, false
		}
	}
	p.add(n, field, "unsupported YAML node")
	return nil, false
}

func (p *parser) workflow(n *yaml.Node, d *Definition) {
	f, ok := p.fields(n, "", "name", "description", "failure_threshold", "on_failure", "retry_delay", "retry", "wait", "priority", "required_input", "egress", "steps", "schedules")
	if !ok {
		return
	}
	if e, ok := f["name"]; ok {
		d.nameLine = e.val.Line
		d.Name, _ = p.name(e.val, "name")
	} else {
		p.add(n, "name", "required: the workflow's name")
	}
	if e, ok := f["description"]; ok {
		d.Description, _ = p.str(e.val, "description")
	}
	if e, ok := f["failure_threshold"]; ok {
		d.FailureThreshold, _ = p.integer(e.val, "failure_threshold", 1)
	}
	if e, ok := f["on_failure"]; ok {
		d.OnFailure, _ = p.policy(e.val, "on_failure")
	}
	if e, ok := f["retry_delay"]; ok {
		d.RetryDelay, _ = p.duration(e.val, "retry_delay", false)
	}
	if e, ok := f["wait"]; ok {
		d.Wait, _ = p.wait(e.val, "wait")
	}
	if e, ok := f["priority"]; ok {
		if v, ok := p.integer(e.val, "priority", 0); ok && v > drover.MaxPriority {
			p.add(e.val, "priority", "%d is more than %d (from 0, lowest, to %d)", v, drover.MaxPriority, drover.MaxPriority)
		} else {
			d.Priority = v
		}
	}
	if e, ok := f["retry"]; ok {
		if r, ok := p.retry(e.val, "retry"); ok {
			p.defaultRetry = &r
		}
	}
	if e, ok := f["required_input"]; ok && p.kind(e.val, "required_input", yaml.SequenceNode) {
		for i, kn := range e.val.Content {
			field := fmt.Sprintf("required_input[%d]", i)
			k, ok := p.str(kn, field)
			switch {
			case !ok:
			case k == "":
				p.add(kn, field, "the field name is empty")
			case slices.Contains(d.RequiredInput, k):
				p.add(kn, field, "%q is listed twice", k)
			default:
				d.RequiredInput = append(d.RequiredInput, k)
			}
		}
	}
	if e, ok := f["egress"]; ok {
		d.Egress = p.egressAllow(e.val)
		if d.Egress != nil {
			p.egress = egress.New(egress.Options{}).Restrict(d.Egress, "egress.allow")
		}
	}
	if e, ok := f["schedules"]; ok {
		p.schedules(e.val, d)
	}
	e, ok := f["steps"]
	if !ok {
		p.add(n, "steps", "required: a list of at least one step")
		return
	}
	if !p.kind(e.val, "steps", yaml.SequenceNode) {
		return
	}
	if len(e.val.Content) == 0 {
		p.add(e.val, "steps", "the list is empty: give at least one step")
		return
	}
	// Names first, so references to any step can be checked in order.
	// A parallel group's branches are steps in their own right, indexed
	// as its tasks store them.
	entries := p.flatSteps(e.val)
	names := make([]string, len(entries))
	nameAt := map[string]string{}
	newName := func(v *yaml.Node, field string) bool {
		if prev, dup := nameAt[v.Value]; dup {
			p.add(v, field+".name", "%q is also the name of %s", v.Value, prev)
			return false
		}
		nameAt[v.Value] = field
		return true
	}
	for i, en := range entries {
		if v := stepName(en.group); v != nil && (i == 0 || entries[i-1].group != en.group) {
			newName(v, en.groupField)
		}
		if v := stepName(en.node); v != nil && newName(v, en.field) {
			names[i] = v.Value
		}
	}
	for i, en := range entries {
		if en.group == nil {
			if s := p.step(en.node, en.field, refScope{index: i, first: i, names: names}); s != nil {
				d.Steps = append(d.Steps, s)
			}
			continue
		}
		if s := p.step(en.node, en.field, refScope{index: i, first: en.first, names: names}); s != nil {
			if g := stepName(en.group); g != nil {
				s.Group = g.Value
			}
			d.Steps = append(d.Steps, s)
		}
	}
}

// stepEntry is one step of the file as its tasks store it: a step of its
// own, or a branch of the parallel group group.
type stepEntry struct {
	node, group       *yaml.Node
	field, groupField string
	first             int // index of the group's first branch; the step's own index when not in a group
}

// flatSteps lists the steps of the steps list, each parallel group's
// branches in its place, and checks the groups' shape.
func (p *parser) flatSteps(list *yaml.Node) []stepEntry {
	var out []stepEntry
	for i, sn := range list.Content {
		field := fmt.Sprintf("steps[%d]", i)
		par := mapValue(sn, "parallel")
		if par == nil {
			out = append(out, stepEntry{node: sn, field: field, first: len(out)})
			continue
		}
		f, ok := p.fields(sn, field, "name", "parallel")
		if !ok {
			continue
		}
		if _, ok := f["name"]; !ok {
			p.add(sn, field+".name", "required: a parallel group needs a name")
		} else if _, ok := p.name(f["name"].val, field+".name"); !ok {
			continue
		}
		if !p.kind(par, field+".parallel", yaml.SequenceNode) {
			continue
		}
		if len(par.Content) < 2 {
			p.add(par, field+".parallel", "a parallel group needs at least 2 branches, it has %d", len(par.Content))
			continue
		}
		first := len(out)
		for j, bn := range par.Content {
			bf := fmt.Sprintf("%s.parallel[%d]", field, j)
			if mapValue(bn, "parallel") != nil {
				p.add(bn, bf+".parallel", "a branch cannot be a parallel group itself")
				continue
			}
			out = append(out, stepEntry{node: bn, group: sn, field: bf, groupField: field, first: first})
		}
	}
	return out
}

// mapValue is the value of key in mapping n; nil when n is not a mapping
// or has no such key.
func mapValue(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for j := 0; j+1 < len(n.Content); j += 2 {
		if n.Content[j].Value == key {
			return n.Content[j+1]
		}
	}
	return nil
}

// stepName is the name node of step (or group) n; nil when it has no
// usable name.
func stepName(n *yaml.Node) *yaml.Node {
	v := mapValue(n, "name")
	if v == nil || v.Kind != yaml.ScalarNode || v.Value == "" {
		return nil
	}
	return v
}

// egressAllow reads egress: {allow: [RULE, ...]}; nil when it has problems.
func (p *parser) egressAllow(n *yaml.Node) []egress.Rule {
	f, ok := p.fields(n, "egress", "allow")
	if !ok {
		return nil
	}
	e, ok := f["allow"]
	if !ok {
		p.add(n, "egress.allow", "required: the hosts the workflow's HTTP steps may reach, such as [api.example.com, \"10.0.0.0/8\"]")
		return nil
	}
	if !p.kind(e.val, "egress.allow", yaml.SequenceNode) {
		return nil
	}
	if len(e.val.Content) == 0 {
		p.add(e.val, "egress.allow", "the list is empty: name at least one host")
		return nil
	}
	rules := []egress.Rule{}
	good := true
	for i, rn := range e.val.Content {
		field := fmt.Sprintf("egress.allow[%d]", i)
		s, ok := p.str(rn, field)
		if !ok {
			good = false
			continue
		}
		r, err := egress.ParseRule(s)
		if err != nil {
			p.add(rn, field, "%v", err)
			good = false
			continue
		}
		rules = append(rules, r)
	}
	if !good {
		return nil
	}
	return rules
}

// refScope says which step outputs an expression may use.
type refScope struct {
	index      int      // the step's index
	first      int      // its group's first branch (index when not a branch): siblings run at the same time
	compensate bool     // in its compensation: the step itself too, and step.output
	names      []string // every step's name, by index
}

func (p *parser) checkRefs(n *yaml.Node, field string, xs []*expr, sc refScope) bool {
	ok := true
	for _, x := range xs {
		if x.root != rootStepOutput {
			continue
		}
		if x.own {
			if !sc.compensate {
				p.add(n, field, "%s: step.output is only available in compensate; use steps.<name>.output for an earlier step", x)
				ok = false
			}
			continue
		}
		at := -1
		for i, nm := range sc.names {
			if nm == x.step {
				at = i
				break
			}
		}
		switch {
		case at < 0:
			p.add(n, field, "%s: there is no step named %q", x, x.step)
			ok = false
		case sc.compensate && at > sc.index:
			p.add(n, field, "%s: step %q comes after this one; a compensation may use this step's output or earlier ones", x, x.step)
			ok = false
		case !sc.compensate && at >= sc.index:
			p.add(n, field, "%s: step %q is not before this step; only earlier steps' outputs are available", x, x.step)
			ok = false
		case at >= sc.first && at != sc.index:
			p.add(n, field, "%s: step %q is a branch of the same parallel group, which runs at the same time; use it after the group", x, x.step)
			ok = false
		}
	}
	return ok
}

func (p *parser) step(n *yaml.Node, field string, sc refScope) *Step {
	f, ok := p.fields(n, field, "name", "timeout", "http", "agent", "input", "retry", "compensate", "on_failure", "wait", "signal", "default")
	if !ok {
		return nil
	}
	s := &Step{Timeout: DefaultStepTimeout}
	good := true
	if _, ok := f["signal"]; ok {
		return p.signalStep(n, f, field)
	}
	if e, ok := f["default"]; ok {
		p.add(e.key, field+".default", "only a signal step (signal: NAME) has a default outcome")
		good = false
	}
	if e, ok := f["on_failure"]; ok {
		if s.OnFailure, ok = p.policy(e.val, field+".on_failure"); !ok {
			good = false
		}
	}
	if e, ok := f["wait"]; ok {
		w, ok := p.wait(e.val, field+".wait")
		if !ok {
			good = false
		}
		s.Wait = &w
	}
	if !p.stepName(n, f, field, &s.Name) {
		good = false
	}
	if e, ok := f["timeout"]; ok {
		if s.Timeout, ok = p.duration(e.val, field+".timeout", true); !ok {
			good = false
		}
	}
	if a := p.action(n, f, field, sc); a != nil {
		s.Do = *a
	} else {
		good = false
	}
	if e, ok := f["compensate"]; ok {
		cf := field + ".compensate"
		sc.compensate = true
		cfs, ok := p.fields(e.val, cf, "http", "agent", "input", "retry")
		switch {
		case !ok:
			good = false
		default:
			a := p.action(e.val, cfs, cf, sc)
			if a == nil {
				good = false
				break
			}
			// A compensation without its own retry policy uses the step's.
			if _, own := cfs["retry"]; !own && a.HTTP != nil {
				a.Retry = s.Do.Retry
			}
			s.Compensate = a
		}
	}
	if !good {
		return nil
	}
	return s
}

// stepName reads a step's required name into name and reports whether
// it is good.
func (p *parser) stepName(n *yaml.Node, f map[string]kv, field string, name *string) bool {
	e, ok := f["name"]
	if !ok {
		p.add(n, field+".name", "required: every step needs a name")
		return false
	}
	*name, ok = p.name(e.val, field+".name")
	return ok
}

// signalStep reads a step that waits for a signal: name, signal, timeout
// (required: the deadline of the wait), on_failure and default (a literal
// JSON value, the step's output when the deadline passes).
func (p *parser) signalStep(n *yaml.Node, f map[string]kv, field string) *Step {
	s := &Step{}
	good, ok := true, false
	for _, k := range []string{"http", "agent", "input", "retry", "compensate", "wait"} {
		if e, ok := f[k]; ok {
			p.add(e.key, join(field, k), "a signal step waits for its signal and calls nothing: remove %s", k)
			good = false
		}
	}
	if !p.stepName(n, f, field, &s.Name) {
		good = false
	}
	if s.Signal, ok = p.name(f["signal"].val, field+".signal"); !ok {
		good = false
	}
	if e, ok := f["timeout"]; ok {
		if s.Timeout, ok = p.duration(e.val, field+".timeout", true); !ok {
			good = false
		}
	} else {
		p.add(n, field+".timeout", "required for a signal step: how long it waits for its signal")
		good = false
	}
	if e, ok := f["on_failure"]; ok {
		if s.OnFailure, ok = p.policy(e.val, field+".on_failure"); !ok {
			good = false
		}
	}
	if e, ok := f["default"]; ok {
		v, ok := p.value(e.val, field+".default", refScope{})
		switch {
		case !ok:
			good = false
		case !v.literal():
			p.add(e.val, field+".default", "a default outcome is a literal value: ${...} expressions are not evaluated here")
			good = false
		default:
			s.SignalDefault, _ = v.renderJSON(&evalEnv{})
		}
	}
	if !good {
		return nil
	}
	return s
}

// action reads http/agent/input/retry of a step or of its compensation.
func (p *parser) action(n *yaml.Node, f map[string]kv, field string, sc refScope) *Action {
	a := &Action{}
	good := true
	he, hasHTTP := f["http"]
	ae, hasAgent := f["agent"]
	switch {
	case hasHTTP && hasAgent:
		p.add(ae.key, field, "has both http and agent; give one")
		return nil
	case !hasHTTP && !hasAgent:
		if !p.suggested[field+".http"] && !p.suggested[field+".agent"] {
			p.add(n, field, "needs http (call a URL) or agent (a remote agent)")
		}
		return nil
	case hasHTTP:
		a.HTTP = p.httpCall(he.val, field+".http", sc)
		if a.HTTP == nil {
			good = false
		}
		if e, ok := f["input"]; ok {
			p.add(e.key, field+".input", "only agent steps take input; an http step sends body or body_text")
			good = false
		}
	default:
		name, ok := p.name(ae.val, field+".agent")
		switch {
		case !ok:
			good = false
		case name == HTTPAgentName:
			p.add(ae.val, field+".agent", "%q is the built-in HTTP agent; call a URL with http: instead", name)
			good = false
		}
		a.Agent = name
		if e, ok := f["input"]; ok {
			if v, ok := p.value(e.val, field+".input", sc); ok {
				a.input = v
			} else {
				good = false
			}
		}
		if e, ok := f["retry"]; ok {
			p.add(e.key, field+".retry", "only http steps take a retry policy; a remote agent retries on its own")
			good = false
		}
	}
	if e, ok := f["retry"]; ok && hasHTTP {
		r, ok := p.retry(e.val, field+".retry")
		if !ok {
			good = false
		}
		a.Retry = r
	} else if hasHTTP && p.defaultRetry != nil && !sc.compensate {
		a.Retry = *p.defaultRetry // the workflow's default
	}
	if !good {
		return nil
	}
	return a
}

// policy reads a failure policy: error or compensate.
func (p *parser) policy(n *yaml.Node, field string) (drover.FailurePolicy, bool) {
	s, ok := p.str(n, field)
	if !ok {
		return "", false
	}
	if pol := drover.FailurePolicy(s); pol.Valid() {
		return pol, true
	}
	p.add(n, field, "%q must be error or compensate", s)
	return "", false
}

// wait reads a wait policy (the supervisor's extended waits); drover's
// defaults fill what it leaves out.
func (p *parser) wait(n *yaml.Node, field string) (drover.WaitPolicy, bool) {
	var w drover.WaitPolicy
	f, ok := p.fields(n, field, "max_waits", "delay", "multiplier", "max_delay")
	if !ok {
		return w, false
	}
	good := true
	if e, ok := f["max_waits"]; ok {
		if w.MaxWaits, ok = p.integer(e.val, field+".max_waits", 0); !ok {
			good = false
		}
	} else {
		p.add(n, field+".max_waits", "required: how many extended waits a step may have (0: none)")
		good = false
	}
	if e, ok := f["delay"]; ok {
		if w.Delay, ok = p.duration(e.val, field+".delay", true); !ok {
			good = false
		}
	}
	if e, ok := f["multiplier"]; ok {
		if w.Multiplier, ok = p.number(e.val, field+".multiplier", 1, 1000); !ok {
			good = false
		}
	}
	if e, ok := f["max_delay"]; ok {
		if w.MaxDelay, ok = p.duration(e.val, field+".max_delay", true); !ok {
			good = false
		}
	}
	if delay := cmp.Or(w.Delay, drover.DefaultWaitDelay); good && w.MaxDelay > 0 && w.MaxDelay < delay {
		p.add(f["max_delay"].val, field+".max_delay", "%s is less than delay %s", w.MaxDelay, delay)
		good = false
	}
	return w, good
}

// number reads a number between lo and hi.
func (p *parser) number(n *yaml.Node, field string, lo, hi float64) (float64, bool) {
	if !p.kind(n, field, yaml.ScalarNode) {
		return 0, false
	}
	var v float64
	if (n.ShortTag() != "!!int" && n.ShortTag() != "!!float") || n.Decode(&v) != nil || math.IsNaN(v) {
		p.add(n, field, "want a number, got %s", kindName(n))
		return 0, false
	}
	if v < lo || v > hi {
		p.add(n, field, "%s must be between %g and %g", n.Value, lo, hi)
		return 0, false
	}
	return v, true
}

func (p *parser) retry(n *yaml.Node, field string) (httpagent.RetryPolicy, bool) {
	var r httpagent.RetryPolicy
	f, ok := p.fields(n, field, "initial_interval", "max_interval", "max_tries")
	if !ok {
		return r, false
	}
	good := true
	if e, ok := f["initial_interval"]; ok {
		if r.InitialInterval, ok = p.duration(e.val, field+".initial_interval", false); !ok {
			good = false
		}
	}
	if e, ok := f["max_interval"]; ok {
		if r.MaxInterval, ok = p.duration(e.val, field+".max_interval", false); !ok {
			good = false
		}
	}
	if e, ok := f["max_tries"]; ok {
		n, ok := p.integer(e.val, field+".max_tries", 0)
		if !ok {
			good = false
		}
		r.MaxTries = uint(n)
	}
	if good && r.MaxInterval > 0 && r.InitialInterval > r.MaxInterval {
		p.add(f["initial_interval"].val, field+".initial_interval", "%s is more than max_interval %s", r.InitialInterval, r.MaxInterval)
		good = false
	}
	return r, good
}

// validHeaderName reports whether s is an HTTP header field name (a token).
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return true
}

func (p *parser) statusList(n *yaml.Node, field string) ([]int, bool) {
	if !p.kind(n, field, yaml.SequenceNode) {
		return nil, false
	}
	var out []int
	good := true
	for i, c := range n.Content {
		v, ok := p.integer(c, fmt.Sprintf("%s[%d]", field, i), 0)
		if !ok {
			good = false
			continue
		}
		out = append(out, v)
	}
	return out, good
}

func (p *parser) httpCall(n *yaml.Node, field string, sc refScope) *HTTPCall {
	f, ok := p.fields(n, field, "method", "url", "headers", "body", "body_text", "transient_status", "permanent_status")
	if !ok {
		return nil
	}
	h := &HTTPCall{}
	good := true
	if e, ok := f["method"]; ok {
		if m, ok := p.str(e.val, field+".method"); ok {
			m = strings.ToUpper(m)
			if err := httpagent.ValidateMethod(m); err != nil {
				p.add(e.val, field+".method", "%v", err)
				good = false
			}
			h.Method = m
		} else {
			good = false
		}
	} else {
		p.add(n, field+".method", "required: the HTTP method, such as POST")
		good = false
	}
	if e, ok := f["url"]; ok {
		t, ok := p.template(e.val, field+".url")
		switch {
		case !ok:
			good = false
		case !p.checkURL(e.val, field+".url", t, h) || !p.checkRefs(e.val, field+".url", t.exprs(), sc):
			good = false
		default:
			h.url, h.urlLine, h.urlField = t, e.val.Line, field+".url"
		}
	} else {
		p.add(n, field+".url", "required: the URL to call")
		good = false
	}
	if e, ok := f["headers"]; ok {
		hf := field + ".headers"
		if p.kind(e.val, hf, yaml.MappingNode) {
			seen := map[string]bool{}
			for i := 0; i+1 < len(e.val.Content); i += 2 {
				k, v := e.val.Content[i], e.val.Content[i+1]
				name := k.Value
				ff := join(hf, name)
				canon := strings.ToLower(name)
				switch {
				case k.Kind != yaml.ScalarNode || !validHeaderName(name):
					p.add(k, ff, "%q is not a valid header name", name)
					good = false
					continue
				case canon == "idempotency-key":
					p.add(k, ff, "set by drover to the step's idempotency key; it cannot be overridden")
					good = false
					continue
				case seen[canon]:
					p.add(k, ff, "repeated header")
					good = false
					continue
				}
				seen[canon] = true
				t, ok := p.template(v, ff)
				if !ok || !p.checkRefs(v, ff, t.exprs(), sc) {
					good = false
					continue
				}
				h.headers = append(h.headers, header{name: name, val: t})
			}
		} else {
			good = false
		}
	}
	if e, ok := f["body"]; ok {
		if _, both := f["body_text"]; both {
			p.add(f["body_text"].key, field+".body_text", "give body (JSON) or body_text (a string), not both")
			good = false
		}
		if v, ok := p.value(e.val, field+".body", sc); ok {
			h.body = v
		} else {
			good = false
		}
	} else if e, ok := f["body_text"]; ok {
		t, ok := p.template(e.val, field+".body_text")
		if ok && p.checkRefs(e.val, field+".body_text", t.exprs(), sc) {
			h.bodyText = t
		} else {
			good = false
		}
	}
	var statusNode *yaml.Node
	statusGood := true
	for _, k := range []string{"transient_status", "permanent_status"} {
		e, ok := f[k]
		if !ok {
			continue
		}
		statusNode = e.val
		list, ok := p.statusList(e.val, field+"."+k)
		if !ok {
			statusGood = false
			continue
		}
		if k == "transient_status" {
			h.Status.Transient = list
		} else {
			h.Status.Permanent = list
		}
	}
	if statusNode != nil && statusGood {
		if err := httpagent.ValidateStatusPolicy(h.Status); err != nil {
			for _, line := range strings.Split(err.Error(), "\n") {
				p.add(statusNode, field, "%s", line)
			}
			good = false
		}
	}
	if !good {
		return nil
	}
	return h
}

// checkURL checks what can be known of a URL before run time: its literal
// start must be an absolute http or https URL; a URL whose scheme or host
// comes from data needs the workflow's egress.allow; a literal host must
// be in it when there is one; and the path may not have "." or ".."
// segments. It sets h.origin.
func (p *parser) checkURL(n *yaml.Node, field string, t *strTmpl, h *HTTPCall) bool {
	prefix := ""
	if t.parts[0].x == nil {
		prefix = t.parts[0].lit
	}
	lower := strings.ToLower(prefix)
	whole := t.whole() != nil
	if !whole && !strings.HasPrefix(lower, "http://") && !strings.HasPrefix(lower, "https://") {
		p.add(n, field, "%q must be an absolute http:// or https:// URL", n.Value)
		return false
	}
	origin, literal := t.origin()
	if !literal {
		if p.egress == nil {
			what := "the host"
			if whole {
				what = "the whole URL"
			}
			p.add(n, field, "%q: %s comes from the task's data, so the workflow must list the hosts it may reach: add egress: {allow: [HOST, ...]} (see docs/workflows.md)", n.Value, what)
			return false
		}
		return true
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || u.Hostname() == "" {
		msg := "has no host"
		if err != nil {
			var ue *url.Error
			if errors.As(err, &ue) {
				err = ue.Err
			}
			msg = err.Error()
		}
		p.add(n, field, "%q is not a valid URL: %s", n.Value, msg)
		return false
	}
	if p.egress != nil {
		if err := p.egress.CheckURL(u); err != nil {
			p.add(n, field, "%v", err)
			return false
		}
	}
	// The path as written, each expression standing for a plain segment.
	var b strings.Builder
	for _, pt := range t.parts {
		if pt.x != nil {
			b.WriteString("x")
		} else {
			b.WriteString(pt.lit)
		}
	}
	if full, err := url.Parse(b.String()); err == nil && dotSegments(full) {
		p.add(n, field, "%q: the path has \".\" or \"..\" segments", n.Value)
		return false
	}
	h.origin = u
	return true
}

// dotSegments reports whether u's path has a "." or ".." segment, as
// written or once percent-decoded.
func dotSegments(u *url.URL) bool {
	for _, p := range []string{u.EscapedPath(), u.Path} {
		for _, seg := range strings.Split(p, "/") {
			if seg == "." || seg == ".." {
				return true
			}
		}
	}
	return false
}
