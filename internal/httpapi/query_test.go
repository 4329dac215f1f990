package httpapi

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/drover-run/drover/store"
)

// routeTarget fills a route pattern's {names} with values its handler
// accepts, so a request gets as far as the query string.
func routeTarget(pattern string) string {
	r := strings.NewReplacer("{id}", "1", "{queue}", "q", "{session}", "s", "{seq}", "1", "{agent}", "remote")
	if strings.HasPrefix(pattern, "/v1/tasks/") {
		r = strings.NewReplacer("{id}", "done")
	}
	return r.Replace(pattern)
}

// Every endpoint reads its query string the same way: a parameter that is
// not correctly percent-encoded, unknown or repeated is a 400 naming it,
// never ignored, and nothing changes.
func TestQueryParametersEveryRoute(t *testing.T) {
	drivers(t, func(t *testing.T, open func(t *testing.T) store.Driver) {
		e := newEnv(t, open(t), Options{Metrics: prometheus.NewRegistry()})
		seedState(t, e)
		before := e.snapshot()
		for _, rt := range e.h.routes {
			target := routeTarget(rt.pattern)
			body := ""
			if rt.method != "GET" {
				body = "{}"
			}
			for _, c := range []struct {
				query, code, name string
			}{
				{"limit=%zz", "invalid_parameter", `"limit"`},
				{"a=1&b=%zz", "invalid_parameter", `"b"`},
				{"%zz=1", "invalid_parameter", `"%zz"`},
				{"limit=1;after=2", "invalid_parameter", `"limit"`},
				{"bogus=1", "unknown_parameter", `"bogus"`},
			} {
				t.Run(rt.method+" "+rt.pattern+"?"+c.query, func(t *testing.T) {
					req := newReq(rt.method, target+"?"+c.query, body)
					req.Header.Set("Authorization", "Bearer "+operatorTok)
					// An event stream that wrongly opened ends with the context.
					ctx, cancel := context.WithTimeout(req.Context(), 5*time.Second)
					defer cancel()
					r := e.serve(req.WithContext(ctx)).mustError(t, 400, c.code)
					if !strings.Contains(r.errMsg(), "query parameter "+c.name) {
						t.Fatalf("the message does not name the parameter %s: %s", c.name, r.errMsg())
					}
				})
			}
		}
		if after := e.snapshot(); after != before {
			t.Fatalf("refused requests changed the store:\n%s\n---\n%s", before, after)
		}
	})
}

// Bad values of the listings' parameters: 400 invalid_parameter naming
// the parameter; an empty value is the same as none.
func TestQueryParameterValues(t *testing.T) {
	e := newEnv(t, testutilSQLite(t), Options{})
	seedState(t, e)
	for _, c := range []struct{ target, name string }{
		{"/v1/tasks?limit=%zz", "limit"},
		{"/v1/tasks?limit=0", "limit"},
		{"/v1/tasks?limit=1001", "limit"},
		{"/v1/tasks?limit=x", "limit"},
		{"/v1/tasks?limit=1&limit=2", "limit"},
		{"/v1/tasks?state=Done", "state"},
		{"/v1/tasks?workflow=a%20b", "workflow"},
		{"/v1/tasks?after=a%2Fb", "after"},
		{"/v1/tasks?ordering_key=a%00b", "ordering_key"},
		{"/v1/tasks?updated_from=yesterday", "updated_from"},
		{"/v1/tasks?updated_before=2026-01-02", "updated_before"},
		{"/v1/tasks?updated_from=2026-01-02T00:00:00Z&updated_before=2026-01-02T00:00:00Z", "updated_before"},
		{"/v1/alerts?after=-1", "after"},
		{"/v1/alerts?unacknowledged=maybe", "unacknowledged"},
		{"/v1/events?alerts=maybe", "alerts"},
		{"/v1/events?after=x", "after"},
		{"/v1/events?limit=10", "limit"}, // the stream has no limit
		{"/v1/queues/q/sessions?after=%00", "after"},
		{"/v1/queues/q/sessions/s/messages?from_seq=x", "from_seq"},
		{"/v1/queues/q/deadletters?after_seq=x", "after_seq"},
		{"/v1/queues/q/deadletters?after_seq=3", "after_seq"}, // a cursor without its session
		{"/v1/queues/q/deadletters?session=%00", "session"},
		{"/v1/queues/q/deadletters?after_session=%00&after_seq=1", "after_session"},
	} {
		t.Run(c.target, func(t *testing.T) {
			r := e.do("GET", c.target, operatorTok, "").mustError(t, 400, "invalid_parameter")
			if !strings.Contains(r.errMsg(), `query parameter "`+c.name+`"`) {
				t.Fatalf("the message does not name %q: %s", c.name, r.errMsg())
			}
		})
	}
	for _, target := range []string{"/v1/tasks?limit=&after=&workflow=&ordering_key=&updated_from=&updated_before=", "/v1/alerts?after=&unacknowledged=", "/v1/queues/q/deadletters?after_session=s&after_seq=1"} {
		t.Run(target, func(t *testing.T) {
			e.do("GET", target, operatorTok, "").must(t, 200)
		})
	}
}
