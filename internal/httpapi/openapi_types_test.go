package httpapi

import (
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/drover-run/drover/droverapi"
)

// apiSchemas names the Go type of every object schema of openapi.json: the
// type the server encodes (or decodes) and droverclient decodes (or
// encodes).
var apiSchemas = map[string]reflect.Type{
	"Error":            reflect.TypeFor[droverapi.Error](),
	"SubmitRequest":    reflect.TypeFor[droverapi.SubmitRequest](),
	"Step":             reflect.TypeFor[droverapi.Step](),
	"Task":             reflect.TypeFor[droverapi.Task](),
	"TaskList":         reflect.TypeFor[droverapi.TaskList](),
	"ResubmitRequest":  reflect.TypeFor[droverapi.ResubmitRequest](),
	"CancelRequest":    reflect.TypeFor[droverapi.CancelRequest](),
	"SignalRequest":    reflect.TypeFor[droverapi.SignalRequest](),
	"SignalResult":     reflect.TypeFor[droverapi.SignalResult](),
	"Empty":            reflect.TypeFor[struct{}](),
	"Ack":              reflect.TypeFor[droverapi.Ack](),
	"Alert":            reflect.TypeFor[droverapi.Alert](),
	"AlertList":        reflect.TypeFor[droverapi.AlertList](),
	"Event":            reflect.TypeFor[droverapi.Event](),
	"EventList":        reflect.TypeFor[droverapi.EventList](),
	"PublishMessage":   reflect.TypeFor[droverapi.PublishMessage](),
	"PublishRequest":   reflect.TypeFor[droverapi.PublishRequest](),
	"PublishResult":    reflect.TypeFor[droverapi.PublishResult](),
	"Queue":            reflect.TypeFor[droverapi.Queue](),
	"QueueList":        reflect.TypeFor[droverapi.QueueList](),
	"Session":          reflect.TypeFor[droverapi.Session](),
	"SessionList":      reflect.TypeFor[droverapi.SessionList](),
	"Message":          reflect.TypeFor[droverapi.Message](),
	"MessageList":      reflect.TypeFor[droverapi.MessageList](),
	"DeadLetterList":   reflect.TypeFor[droverapi.DeadLetterList](),
	"DeadLetterAction": reflect.TypeFor[droverapi.DeadLetterAction](),
	"Status":           reflect.TypeFor[droverapi.Status](),
	"PolicyChange":     reflect.TypeFor[droverapi.PolicyChange](),
	"AcceptRequest":    reflect.TypeFor[droverapi.AcceptRequest](),
	"Lease":            reflect.TypeFor[droverapi.Lease](),
	"ReceiveRequest":   reflect.TypeFor[droverapi.ReceiveRequest](),
	"ReceivedMessage":  reflect.TypeFor[droverapi.ReceivedMessage](),
	"ReceiveResult":    reflect.TypeFor[droverapi.ReceiveResult](),
	"SettleRequest":    reflect.TypeFor[droverapi.SettleRequest](),
	"SettleResult":     reflect.TypeFor[droverapi.SettleResult](),
	"LockRequest":      reflect.TypeFor[droverapi.LockRequest](),
	"LockRenewed":      reflect.TypeFor[droverapi.LockRenewed](),
	"LockReleased":     reflect.TypeFor[droverapi.LockReleased](),
	"PollRequest":      reflect.TypeFor[droverapi.PollRequest](),
	"AgentRequest":     reflect.TypeFor[droverapi.AgentRequest](),
	"PollResult":       reflect.TypeFor[droverapi.PollResult](),
	"CompleteRequest":  reflect.TypeFor[droverapi.CompleteRequest](),
	"FailRequest":      reflect.TypeFor[droverapi.FailRequest](),
	"Accepted":         reflect.TypeFor[droverapi.Accepted](),
	"WaitPolicy":       reflect.TypeFor[droverapi.WaitPolicy](),

	// Schedules.
	"Schedule":           reflect.TypeFor[droverapi.Schedule](),
	"ScheduleList":       reflect.TypeFor[droverapi.ScheduleList](),
	"RunScheduleRequest": reflect.TypeFor[droverapi.RunScheduleRequest](),
}

// apiScalarSchemas are the schemas that are not objects.
var apiScalarSchemas = []string{"ProcessState"}

// schemaJSON is the part of a JSON Schema the check reads.
type schemaJSON struct {
	Ref        string                 `json:"$ref"`
	Type       any                    `json:"type"`
	Properties map[string]*schemaJSON `json:"properties"`
	Items      *schemaJSON            `json:"items"`
	OneOf      []*schemaJSON          `json:"oneOf"`
	AnyOf      []*schemaJSON          `json:"anyOf"`
}

// TestOpenAPIMatchesTypes checks the OpenAPI document the server serves
// against droverapi, both ways: every schema has its Go type, every
// property of a schema is a JSON field of its type and every JSON field a
// property; a property that refers to another schema has that schema's
// type, and one with an inline object schema is checked the same way
// against its field's type. The document and the types cannot drift.
func TestOpenAPIMatchesTypes(t *testing.T) {
	e := newEnv(t, testutilSQLite(t), Options{})
	r := e.do("GET", "/openapi.json", "", "").must(t, 200)
	var doc struct {
		Components struct {
			Schemas map[string]*schemaJSON `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(r.body, &doc); err != nil {
		t.Fatal(err)
	}
	c := &schemaCheck{t: t, schemas: doc.Components.Schemas}
	for name, s := range doc.Components.Schemas {
		if slices.Contains(apiScalarSchemas, name) {
			continue
		}
		typ, ok := apiSchemas[name]
		if !ok {
			t.Errorf("schema %s has no Go type in apiSchemas (add its type to droverapi)", name)
			continue
		}
		c.object(name, s, typ)
	}
	for name := range apiSchemas {
		if _, ok := doc.Components.Schemas[name]; !ok {
			t.Errorf("apiSchemas names %s, which openapi.json does not define", name)
		}
	}
}

// The server's decoders of a publish keep pointers (to tell a missing field
// from a zero one) in their own structs; they take exactly droverapi's
// fields.
func TestPublishDecodersMatchTypes(t *testing.T) {
	for _, tc := range []struct{ decoder, api reflect.Type }{
		{reflect.TypeFor[publishBody](), reflect.TypeFor[droverapi.PublishRequest]()},
		{reflect.TypeFor[publishMessage](), reflect.TypeFor[droverapi.PublishMessage]()},
	} {
		got, want := slices.Sorted(maps.Keys(jsonFields(tc.decoder))), slices.Sorted(maps.Keys(jsonFields(tc.api)))
		if !slices.Equal(got, want) {
			t.Errorf("%s decodes %v; %s has %v", tc.decoder, got, tc.api, want)
		}
	}
}

type schemaCheck struct {
	t       *testing.T
	schemas map[string]*schemaJSON
}

// object checks schema s (at path) against the struct type typ.
func (c *schemaCheck) object(path string, s *schemaJSON, typ reflect.Type) {
	props := map[string]*schemaJSON{}
	for _, b := range c.branches(s) {
		if b.Ref != "" {
			b = c.schemas[strings.TrimPrefix(b.Ref, "#/components/schemas/")]
		}
		if b == nil {
			c.t.Errorf("%s: a reference to an undefined schema", path)
			continue
		}
		for k, v := range b.Properties {
			props[k] = v
		}
	}
	fields := jsonFields(typ)
	for name, p := range props {
		f, ok := fields[name]
		if !ok {
			c.t.Errorf("%s: property %q is no JSON field of %s", path, name, typ)
			continue
		}
		c.property(path+"."+name, p, f)
	}
	for name, f := range fields {
		if _, ok := props[name]; !ok {
			c.t.Errorf("%s: field %s.%s (JSON %q) is no property of the schema", path, typ, f.Name, name)
		}
	}
}

// property checks a property's schema p against its field's type.
func (c *schemaCheck) property(path string, p *schemaJSON, f reflect.StructField) {
	typ := f.Type
	for typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	if typ.Kind() == reflect.Slice && typ.Elem().Kind() != reflect.Uint8 {
		for _, b := range c.branches(p) {
			if b.Items != nil {
				p = b.Items
			}
		}
		typ = typ.Elem()
		for typ.Kind() == reflect.Pointer {
			typ = typ.Elem()
		}
	}
	if typ.Kind() != reflect.Struct || typ == reflect.TypeFor[time.Time]() {
		return
	}
	for _, b := range c.branches(p) {
		switch {
		case b.Ref != "":
			name := strings.TrimPrefix(b.Ref, "#/components/schemas/")
			if want := apiSchemas[name]; want != typ {
				c.t.Errorf("%s refers to schema %s (%v); its field has type %s", path, name, want, typ)
			}
			return
		case b.Properties != nil:
			c.object(path, b, typ)
			return
		}
	}
	c.t.Errorf("%s: field of type %s, but the schema is no object", path, typ)
}

// branches returns the schemas s stands for: its oneOf/anyOf branches
// that are not null, or s itself.
func (c *schemaCheck) branches(s *schemaJSON) []*schemaJSON {
	var out []*schemaJSON
	for _, b := range append(slices.Clone(s.OneOf), s.AnyOf...) {
		if b.Type != "null" {
			out = append(out, b)
		}
	}
	if len(out) == 0 {
		out = []*schemaJSON{s}
	}
	return out
}

// jsonFields returns typ's fields by JSON name.
func jsonFields(typ reflect.Type) map[string]reflect.StructField {
	out := map[string]reflect.StructField{}
	for i := range typ.NumField() {
		f := typ.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f
	}
	return out
}
