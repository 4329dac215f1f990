package crashtest

import (
	"compress/gzip"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/droverclient"
	"github.com/drover-run/drover/internal/tracing"
	"github.com/drover-run/drover/store/sqlite"
)

// collectedSpan is a span as an OTLP receiver got it.
type collectedSpan struct {
	service, name           string
	traceID, spanID, parent string
	attrs                   map[string]string
}

// otlpReceiver is an OTLP/HTTP trace receiver (protobuf) on loopback: what
// a collector gets from the exporters.
type otlpReceiver struct {
	mu    sync.Mutex
	spans []collectedSpan
	bad   []string
}

func (o *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	data, err := io.ReadAll(body)
	var req coltracepb.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(data, &req)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if r.URL.Path != "/v1/traces" || err != nil {
		o.bad = append(o.bad, fmt.Sprintf("%s %s: %v", r.Method, r.URL.Path, err))
		http.Error(w, "bad export", http.StatusBadRequest)
		return
	}
	for _, rs := range req.ResourceSpans {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.Key == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				c := collectedSpan{service: service, name: s.Name, traceID: hex.EncodeToString(s.TraceId),
					spanID: hex.EncodeToString(s.SpanId), parent: hex.EncodeToString(s.ParentSpanId), attrs: map[string]string{}}
				for _, kv := range s.Attributes {
					v := kv.GetValue()
					switch {
					case v.GetStringValue() != "":
						c.attrs[kv.Key] = v.GetStringValue()
					default:
						c.attrs[kv.Key] = fmt.Sprint(v.GetIntValue())
					}
				}
				o.spans = append(o.spans, c)
			}
		}
	}
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// trace returns the spans received of trace id.
func (o *otlpReceiver) trace(id string) []collectedSpan {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []collectedSpan
	for _, s := range o.spans {
		if s.traceID == id {
			out = append(out, s)
		}
	}
	return out
}

const traceWorkflow = `name: traced
steps:
  - name: call
    timeout: 10s
    http:
      method: POST
      url: "SERVICE/do"
      body: {id: "${input.id}"}
  - name: notify
    timeout: 10s
    agent: notifier
`

// TestTracingAcrossProcesses: a task submitted by one process (this test,
// through the HTTP API, traced with the OTLP/HTTP exporter) and executed by
// another (the drover binary, `drover server`, traced from the standard
// OTEL_EXPORTER_OTLP_* environment), with one step run by the server's
// built-in HTTP agent and one by a remote agent in this process
// (droverclient.RunAgent), shows in an OTLP receiver as one connected
// trace: every span's parent is in it, from this process's span around
// the submit through the server's drover.submit, step attempts, agent
// call and final state, to the remote agent's call here; and the HTTP
// step's request carried the trace to the service it called. Then a task
// submitted with the library (drover.Client with a TracerProvider, no
// roles) on the same store is run by the server in the trace stored
// with it.
func TestTracingAcrossProcesses(t *testing.T) {
	bin := buildDrover(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()

	rcv := &otlpReceiver{}
	collector := httptest.NewServer(rcv)
	defer collector.Close()

	var (
		svcMu        sync.Mutex
		traceparents []string
	)
	service := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		svcMu.Lock()
		traceparents = append(traceparents, r.Header.Get("traceparent"))
		svcMu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"done":true}`)
	}))
	defer service.Close()

	wfDir := filepath.Join(dir, "workflows")
	must(t, os.MkdirAll(wfDir, 0o755))
	must(t, os.WriteFile(filepath.Join(wfDir, "traced.yaml"), []byte(strings.ReplaceAll(traceWorkflow, "SERVICE", service.URL)), 0o644))
	tokens := filepath.Join(dir, "tokens")
	must(t, os.WriteFile(tokens, []byte(e2eSubmitToken+" submit\n"+e2eAgentToken+" agent:notifier\n"), 0o600))
	port, err := freePort()
	must(t, err)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)

	// The server's tracing comes from the environment only.
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_SERVICE_NAME", "drover-server")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
	args := []string{"server", "--db", "sqlite:" + filepath.Join(dir, "drover.db"), "--instance-id", "traced",
		"--listen", fmt.Sprintf("127.0.0.1:%d", port), "--tokens-file", tokens, "--workflows", wfDir,
		"--egress-allow", "127.0.0.1", "--supervisor-interval", "100ms", "--lease-ttl", "1s", "--shutdown-timeout", "10s"}
	logw := serverLog(t)
	srv := startE2EServer(t, bin, args, logw)
	defer func() { _ = srv.cmd.Process.Kill(); <-srv.done }()
	if !strings.Contains(logw.String(), "tracing on") {
		t.Errorf("the server did not say tracing is on")
	}

	// This process: its own provider, exporting to the same receiver.
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(collector.URL+"/v1/traces"))
	must(t, err)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp),
		sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName("submitter"))))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	submitter, err := droverclient.New(base, e2eSubmitToken, droverclient.WithTracerProvider(tp))
	must(t, err)
	agents, err := droverclient.New(base, e2eAgentToken, droverclient.WithTracerProvider(tp))
	must(t, err)
	var (
		agentMu    sync.Mutex
		agentTrace trace.SpanContext
	)
	go func() {
		_ = agents.RunAgent(ctx, "notifier", func(ctx context.Context, r *droverclient.Request) (json.RawMessage, error) {
			agentMu.Lock()
			agentTrace = trace.SpanContextFromContext(ctx)
			agentMu.Unlock()
			return json.RawMessage(`{"notified":true}`), nil
		}, droverclient.AgentOptions{Concurrency: 1, Wait: time.Second})
	}()

	rootCtx, root := tp.Tracer("test").Start(ctx, "place-order")
	if _, _, err := submitter.SubmitTask(rootCtx, droverclient.SubmitRequest{Workflow: "traced", ID: "t-1",
		Input: json.RawMessage(`{"id":"t-1"}`)}); err != nil {
		t.Fatalf("submit: %v", err)
	}
	root.End()
	waitE2E(t, ctx, "the task processed", func() bool {
		tk, err := submitter.Task(ctx, "t-1")
		return err == nil && tk.State == "Processed"
	})

	traceID := root.SpanContext().TraceID().String()
	// service/name/step of each span the trace must hold.
	want := []string{
		"submitter/place-order/", "drover-server/drover.submit/",
		"drover-server/drover.step/0", "drover-server/drover.agent.call/0", "drover-server/drover.step/1",
		"submitter/drover.agent.call/1", "drover-server/drover.task.final/",
	}
	var spans []collectedSpan
	waitE2E(t, ctx, "the trace's spans at the receiver", func() bool {
		spans = rcv.trace(traceID)
		return hasSpans(spans, want)
	})
	for _, s := range spans {
		t.Logf("%s %s step=%s outcome=%s span=%s parent=%s", s.service, s.name, s.attrs["drover.step"], s.attrs["drover.outcome"], s.spanID, s.parent)
	}
	rcv.mu.Lock()
	if len(rcv.bad) > 0 {
		t.Errorf("bad exports: %v", rcv.bad)
	}
	rcv.mu.Unlock()

	// Connected: every span but the root has its parent in the trace, and
	// the task's spans hang off its submit span.
	ids := map[string]collectedSpan{}
	var submit collectedSpan
	for _, s := range spans {
		ids[s.spanID] = s
		if s.name == "drover.submit" {
			submit = s
		}
	}
	for _, s := range spans {
		switch {
		case s.name == "place-order":
			if s.parent != "" {
				t.Errorf("the root span has a parent %s", s.parent)
			}
		case s.name == "drover.submit":
			if s.parent != root.SpanContext().SpanID().String() {
				t.Errorf("drover.submit's parent is %s, not the submitter's span", s.parent)
			}
		case strings.HasPrefix(s.name, "drover."):
			if s.parent != submit.spanID {
				t.Errorf("%s (%s) has parent %s, not the task's submit span %s", s.name, s.service, s.parent, submit.spanID)
			}
			if s.attrs["drover.task.id"] != "t-1" {
				t.Errorf("%s (%s): drover.task.id %q", s.name, s.service, s.attrs["drover.task.id"])
			}
		default:
			if _, ok := ids[s.parent]; !ok {
				t.Errorf("%s (%s) has parent %s, not in the trace", s.name, s.service, s.parent)
			}
		}
	}
	// The HTTP step sent its call's span as traceparent.
	var call collectedSpan
	for _, s := range spans {
		if s.name == "drover.agent.call" && s.service == "drover-server" {
			call = s
		}
	}
	svcMu.Lock()
	if len(traceparents) == 0 || traceparents[0] != "00-"+traceID+"-"+call.spanID+"-01" {
		t.Errorf("the service got traceparent %q, want the HTTP step's call span 00-%s-%s-01", traceparents, traceID, call.spanID)
	}
	svcMu.Unlock()
	agentMu.Lock()
	if agentTrace.TraceID().String() != traceID {
		t.Errorf("the remote agent's handler ran in trace %s, not the task's", agentTrace.TraceID())
	}
	agentMu.Unlock()

	// The library: a Client of this process, with the tracer provider,
	// submits on the store itself (no roles); the server's scheduler runs
	// the task from the trace context stored with it.
	drv, err := sqlite.Open(ctx, filepath.Join(dir, "drover.db"), sqlite.Options{})
	must(t, err)
	defer drv.Close()
	lib, err := drover.New(drover.Config{Store: drv, TracerProvider: tp, ExternalAgents: []string{"notifier"},
		Workflows: []drover.Workflow{{Name: "lib", Steps: []drover.Step{{Name: "notify", Agent: "notifier", Timeout: 10 * time.Second}}}}})
	must(t, err)
	task, err := lib.Submit(ctx, "lib", []byte(`{}`), &drover.SubmitOptions{ID: "lib-1"})
	must(t, err)
	libTrace := tracing.TraceID(task.TraceContext)
	if libTrace == "" {
		t.Fatalf("the library's task stored no trace context")
	}
	waitE2E(t, ctx, "the library's task processed", func() bool {
		tk, err := submitter.Task(ctx, "lib-1")
		return err == nil && tk.State == "Processed"
	})
	want = []string{"submitter/drover.submit/", "drover-server/drover.step/0", "submitter/drover.agent.call/0",
		"drover-server/drover.task.final/"}
	waitE2E(t, ctx, "the library task's spans at the receiver", func() bool {
		spans = rcv.trace(libTrace)
		return hasSpans(spans, want)
	})
	for _, s := range spans {
		if s.name == "drover.submit" {
			submit = s
		}
	}
	for _, s := range spans {
		if s.name != "drover.submit" && s.parent != submit.spanID {
			t.Errorf("library task: %s (%s) has parent %s, not its submit span %s", s.name, s.service, s.parent, submit.spanID)
		}
	}
}

// hasSpans reports whether spans hold every one of want, each written
// "service/name/step".
func hasSpans(spans []collectedSpan, want []string) bool {
	have := map[string]bool{}
	for _, s := range spans {
		have[s.service+"/"+s.name+"/"+s.attrs["drover.step"]] = true
	}
	for _, w := range want {
		if !have[w] {
			return false
		}
	}
	return true
}
