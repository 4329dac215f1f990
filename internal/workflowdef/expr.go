package workflowdef

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// root is what an expression starts from.
type root int

const (
	rootInput      root = iota // input: the task input
	rootStepOutput             // steps.<name>.output, or step.output (own output, in a compensation)
	rootTaskID                 // task.id
	rootStepName               // step.name
	rootStepKey                // step.idempotency_key
)

// pathElem is one ".field" or "[N]" after a root.
type pathElem struct {
	key   string
	index int
	isIdx bool
}

// expr is one parsed ${...} expression.
type expr struct {
	src  string // the text between ${ and }, trimmed, for messages
	root root
	step string // rootStepOutput: the step named; "" for step.output
	own  bool   // step.output
	path []pathElem
}

func (e *expr) String() string { return "${" + e.src + "}" }

// part is a literal text or an expression of a string template.
type part struct {
	lit string
	x   *expr
}

// strTmpl is a string with ${...} expressions in it.
type strTmpl struct {
	parts []part
}

// whole returns the expression when the template is exactly one expression.
func (t *strTmpl) whole() *expr {
	if len(t.parts) == 1 && t.parts[0].x != nil {
		return t.parts[0].x
	}
	return nil
}

// literal reports whether the template holds no expression, and its text.
func (t *strTmpl) literal() (string, bool) {
	var b strings.Builder
	for _, p := range t.parts {
		if p.x != nil {
			return "", false
		}
		b.WriteString(p.lit)
	}
	return b.String(), true
}

// origin returns the scheme and authority ("https://api.example.com:8443")
// a URL template writes literally, and whether it does: the text up to the
// first "/", "?" or "#" after "://" holds no expression.
func (t *strTmpl) origin() (string, bool) {
	if t.parts[0].x != nil {
		return "", false
	}
	s := t.parts[0].lit
	i := strings.Index(s, "://")
	if i < 0 {
		return "", false
	}
	j := strings.IndexAny(s[i+3:], "/?#")
	if j < 0 {
		if len(t.parts) > 1 {
			return "", false // an expression continues the host or port
		}
		return s, true
	}
	return s[:i+3+j], true
}

func (t *strTmpl) exprs() []*expr {
	var out []*expr
	for _, p := range t.parts {
		if p.x != nil {
			out = append(out, p.x)
		}
	}
	return out
}

// parseTemplate splits s into literal text and expressions. "$${" stands for
// a literal "${".
func parseTemplate(s string) (*strTmpl, error) {
	t := &strTmpl{}
	var lit strings.Builder
	for i := 0; i < len(s); {
		switch {
		case strings.HasPrefix(s[i:], "$${"):
			lit.WriteString("${")
			i += 3
		case strings.HasPrefix(s[i:], "${"):
			x, n, err := parseExpr(s[i+2:])
			if err != nil {
				return nil, err
			}
			if lit.Len() > 0 {
				t.parts = append(t.parts, part{lit: lit.String()})
				lit.Reset()
			}
			t.parts = append(t.parts, part{x: x})
			i += 2 + n
		default:
			lit.WriteByte(s[i])
			i++
		}
	}
	if lit.Len() > 0 || len(t.parts) == 0 {
		t.parts = append(t.parts, part{lit: lit.String()})
	}
	return t, nil
}

func isIdentByte(c byte) bool {
	return c == '_' || c == '-' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// parseExpr parses the expression at the start of s (just after "${") up to
// its closing "}", and returns it and the bytes consumed, "}" included.
//
//	expr := segment ( "." segment | "[" N "]" | "[" "\"" text "\"" "]" )*
func parseExpr(s string) (*expr, int, error) {
	type seg struct {
		key   string
		index int
		isIdx bool
	}
	var segs []seg
	i := 0
	skipSpace := func() {
		for i < len(s) && s[i] == ' ' {
			i++
		}
	}
	ident := func() (string, error) {
		j := i
		for i < len(s) && isIdentByte(s[i]) {
			i++
		}
		if i == j {
			if i < len(s) {
				return "", fmt.Errorf("unexpected %q in ${...}", s[i])
			}
			return "", errors.New("unterminated ${ (no closing })")
		}
		return s[j:i], nil
	}
	skipSpace()
	start := i
	first, err := ident()
	if err != nil {
		return nil, 0, err
	}
	segs = append(segs, seg{key: first})
	for {
		if i >= len(s) {
			return nil, 0, errors.New("unterminated ${ (no closing })")
		}
		switch s[i] {
		case '.':
			i++
			k, err := ident()
			if err != nil {
				return nil, 0, err
			}
			segs = append(segs, seg{key: k})
			continue
		case '[':
			i++
			if i < len(s) && s[i] == '"' {
				// A quoted key: JSON string syntax, for keys with dots or spaces.
				j := i + 1
				for j < len(s) && s[j] != '"' {
					if s[j] == '\\' {
						j++
					}
					j++
				}
				if j >= len(s) {
					return nil, 0, errors.New("unterminated quoted key in ${...}")
				}
				k, err := strconv.Unquote(s[i : j+1])
				if err != nil {
					return nil, 0, fmt.Errorf("bad quoted key %s in ${...}", s[i:j+1])
				}
				i = j + 1
				if i >= len(s) || s[i] != ']' {
					return nil, 0, errors.New(`want "]" after a quoted key in ${...}`)
				}
				i++
				segs = append(segs, seg{key: k})
				continue
			}
			j := i
			for i < len(s) && s[i] >= '0' && s[i] <= '9' {
				i++
			}
			if i == j || i >= len(s) || s[i] != ']' {
				return nil, 0, errors.New(`want an index [N] or a quoted key ["key"] in ${...}`)
			}
			n, err := strconv.Atoi(s[j:i])
			if err != nil {
				return nil, 0, fmt.Errorf("index %s is too large", s[j:i])
			}
			i++
			segs = append(segs, seg{index: n, isIdx: true})
			continue
		}
		break
	}
	src := s[start:i]
	skipSpace()
	if i >= len(s) {
		return nil, 0, errors.New("unterminated ${ (no closing })")
	}
	if s[i] != '}' {
		return nil, 0, fmt.Errorf("unexpected %q in ${%s", s[i], src)
	}
	i++
	x := &expr{src: src}
	bad := func(msg string) (*expr, int, error) {
		return nil, 0, fmt.Errorf("${%s}: %s", src, msg)
	}
	rest := func(from int) []pathElem {
		var p []pathElem
		for _, sg := range segs[from:] {
			p = append(p, pathElem(sg))
		}
		return p
	}
	keyAt := func(k int) (string, bool) {
		if k < len(segs) && !segs[k].isIdx {
			return segs[k].key, true
		}
		return "", false
	}
	switch first {
	case "input":
		x.root, x.path = rootInput, rest(1)
	case "steps":
		name, ok := keyAt(1)
		if out, ok2 := keyAt(2); !ok || !ok2 || out != "output" {
			return bad("want steps.<step name>.output")
		}
		x.root, x.step, x.path = rootStepOutput, name, rest(3)
	case "step":
		k, _ := keyAt(1)
		switch k {
		case "output":
			x.root, x.own, x.path = rootStepOutput, true, rest(2)
		case "name", "idempotency_key":
			if len(segs) > 2 {
				return bad("step." + k + " has no fields")
			}
			x.root = map[string]root{"name": rootStepName, "idempotency_key": rootStepKey}[k]
		default:
			return bad("want step.output, step.name or step.idempotency_key")
		}
	case "task":
		if k, _ := keyAt(1); k != "id" || len(segs) > 2 {
			return bad("want task.id")
		}
		x.root = rootTaskID
	default:
		return bad(fmt.Sprintf("unknown root %q (want input, steps, step or task)", first))
	}
	return x, i, nil
}

// evalEnv is what expressions of one request are evaluated against.
type evalEnv struct {
	taskID   string
	stepName string
	key      string
	input    []byte
	outputs  map[string][]byte // step name → output of a processed step
	own      []byte            // this step's output, in a compensation
	ownSet   bool

	decoded map[string]any // cache: "input", "step:<name>", "own"
}

func decodeJSON(b []byte) (any, error) {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, nil
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// evalError is a run-time failure of an expression: the data does not have
// what the expression names.
type evalError struct {
	taskID string
	x      *expr
	msg    string
}

func (e *evalError) Error() string {
	return fmt.Sprintf("task %s: %s: %s", e.taskID, e.x, e.msg)
}

func (env *evalEnv) doc(x *expr) (any, string, error) {
	var key, what string
	var raw []byte
	switch {
	case x.root == rootInput:
		key, what, raw = "input", "the task input", env.input
	case x.own:
		if !env.ownSet {
			return nil, "", &evalError{env.taskID, x, "step.output is only available in a compensation"}
		}
		key, what, raw = "own", "the output of step "+env.stepName, env.own
	default:
		out, ok := env.outputs[x.step]
		if !ok {
			return nil, "", &evalError{env.taskID, x, fmt.Sprintf("step %s has no output yet", x.step)}
		}
		key, what, raw = "step:"+x.step, "the output of step "+x.step, out
	}
	if v, ok := env.decoded[key]; ok {
		return v, what, nil
	}
	v, err := decodeJSON(raw)
	if err != nil {
		return nil, "", &evalError{env.taskID, x, what + " is not JSON: " + err.Error()}
	}
	if env.decoded == nil {
		env.decoded = map[string]any{}
	}
	env.decoded[key] = v
	return v, what, nil
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	}
	return fmt.Sprintf("%T", v)
}

// eval returns the value the expression names.
func (env *evalEnv) eval(x *expr) (any, error) {
	switch x.root {
	case rootTaskID:
		return env.taskID, nil
	case rootStepName:
		return env.stepName, nil
	case rootStepKey:
		return env.key, nil
	}
	v, what, err := env.doc(x)
	if err != nil {
		return nil, err
	}
	for _, p := range x.path {
		if p.isIdx {
			a, ok := v.([]any)
			if !ok {
				return nil, &evalError{env.taskID, x, fmt.Sprintf("%s is %s, not an array", what, jsonKind(v))}
			}
			if p.index >= len(a) {
				return nil, &evalError{env.taskID, x, fmt.Sprintf("%s has %d elements, no index %d", what, len(a), p.index)}
			}
			v, what = a[p.index], fmt.Sprintf("%s[%d]", what, p.index)
			continue
		}
		m, ok := v.(map[string]any)
		if !ok {
			return nil, &evalError{env.taskID, x, fmt.Sprintf("%s is %s, not an object", what, jsonKind(v))}
		}
		nv, ok := m[p.key]
		if !ok {
			return nil, &evalError{env.taskID, x, fmt.Sprintf("%s has no field %q", what, p.key)}
		}
		v, what = nv, fmt.Sprintf("%s.%s", what, p.key)
	}
	return v, nil
}

// text renders a value inside a string: strings as they are, anything else
// as its JSON text.
func text(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case json.Number:
		return v.String()
	}
	b, _ := marshal(v)
	return string(b)
}

// marshal is json.Marshal without HTML escaping: bodies and URLs carry
// "<", ">" and "&" as they are.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	if err := e.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// renderText renders the template as text. With escape, expressions are
// escaped for a URL: before the first literal "?", every byte but the
// unreserved ones (letters, digits, "-", ".", "_", "~") is percent-encoded,
// so a value cannot add a "/", "@", ":" or "?" (another path, host or
// port), and a value "." or ".." is refused; after it, values are
// query-escaped. A template that is exactly one expression is never
// escaped (it is a whole URL, checked by the egress policy).
func (t *strTmpl) renderText(env *evalEnv, escape bool) (string, error) {
	if x := t.whole(); x != nil {
		v, err := env.eval(x)
		if err != nil {
			return "", err
		}
		return text(v), nil
	}
	var b strings.Builder
	inQuery := false
	for _, p := range t.parts {
		if p.x == nil {
			b.WriteString(p.lit)
			if strings.Contains(p.lit, "?") {
				inQuery = true
			}
			continue
		}
		v, err := env.eval(p.x)
		if err != nil {
			return "", err
		}
		s := text(v)
		switch {
		case !escape:
		case inQuery:
			s = url.QueryEscape(s)
		case s == "." || s == "..":
			return "", &evalError{env.taskID, p.x, fmt.Sprintf("the value %q would be a %q segment of the URL's path", s, s)}
		default:
			s = escapeUnreserved(s)
		}
		b.WriteString(s)
	}
	return b.String(), nil
}

// escapeUnreserved percent-encodes every byte of s but the unreserved
// characters of RFC 3986.
func escapeUnreserved(s string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}

// valueTmpl is a JSON value with expressions in its strings.
type valueTmpl struct {
	raw  json.RawMessage // a literal scalar
	str  *strTmpl        // a string with expressions
	keys []string        // an object, in file order
	vals []*valueTmpl
	arr  []*valueTmpl
	obj  bool
	list bool
}

// render writes the value as JSON. A string that is exactly one expression
// takes the value it names with its type; other strings with expressions are
// interpolated as text.
func (v *valueTmpl) render(env *evalEnv, b *bytes.Buffer) error {
	switch {
	case v.obj:
		b.WriteByte('{')
		for i, k := range v.keys {
			if i > 0 {
				b.WriteByte(',')
			}
			kb, _ := marshal(k)
			b.Write(kb)
			b.WriteByte(':')
			if err := v.vals[i].render(env, b); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	case v.list:
		b.WriteByte('[')
		for i, c := range v.arr {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := c.render(env, b); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	case v.str != nil:
		if x := v.str.whole(); x != nil {
			val, err := env.eval(x)
			if err != nil {
				return err
			}
			out, err := marshal(val)
			if err != nil {
				return &evalError{env.taskID, x, err.Error()}
			}
			b.Write(out)
			return nil
		}
		s, err := v.str.renderText(env, false)
		if err != nil {
			return err
		}
		out, _ := marshal(s)
		b.Write(out)
	default:
		b.Write(v.raw)
	}
	return nil
}

// literal reports whether the value has no expressions.
func (v *valueTmpl) literal() bool {
	if v.str != nil {
		return false
	}
	for _, c := range append(slices.Clone(v.vals), v.arr...) {
		if !c.literal() {
			return false
		}
	}
	return true
}

func (v *valueTmpl) renderJSON(env *evalEnv) ([]byte, error) {
	var b bytes.Buffer
	if err := v.render(env, &b); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
