package convoy_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/drover-run/drover/convoy"
	"github.com/drover-run/drover/internal/testutil"
	"github.com/drover-run/drover/store"
)

func withTracer(tp trace.TracerProvider) clientOpt {
	return func(cfg *convoy.Config) { cfg.TracerProvider = tp }
}

// TestTracingPublishReceiveSettle: a message published by one client and
// consumed by a processor of another (another driver on the store, as
// another process) is one trace: its publish span, stored with it, and
// its receive and settle spans as children, with the session and the
// sequence number; a failed handler's settle (abandon) shows too, and the
// handler's context carries the receive span.
func TestTracingPublishReceiveSettle(t *testing.T) {
	t.Parallel()
	drivers(t, func(t *testing.T, d store.Driver) {
		tp, exp := testutil.MemTracer(t)
		ctx := ctxT(t)
		pub := newClient(t, d, withTracer(tp), withID("publisher"))
		con := newClient(t, secondDriver(t, d), withTracer(tp), withID("consumer"))

		parentCtx, parent := tp.Tracer("test").Start(ctx, "order")
		if _, err := pub.Publish(parentCtx, "q", convoy.Message{SessionID: "o1", Body: []byte(`1`)}); err != nil {
			t.Fatal(err)
		}
		parent.End()
		var (
			mu       sync.Mutex
			handlers []trace.SpanContext
			failed   bool
		)
		p := must[*convoy.Processor](t)(convoy.NewProcessor(con, "q", func(ctx context.Context, m *convoy.ReceivedMessage) error {
			mu.Lock()
			defer mu.Unlock()
			handlers = append(handlers, trace.SpanContextFromContext(ctx))
			if !failed {
				failed = true
				return errors.New("transient")
			}
			return nil
		}, convoy.ProcessorOptions{AbandonDelay: -1}))
		startProcessor(t, p)
		var spans tracetest.SpanStubs
		count := func(name, outcome string) int {
			n := 0
			for _, s := range spans {
				if s.Name == name && (outcome == "" || testutil.SpanAttr(s, "drover.outcome") == outcome) {
					n++
				}
			}
			return n
		}
		testutil.WaitFor(t, "publish, two receives, abandon and complete spans", func() bool {
			spans = exp.GetSpans()
			return count("drover.convoy.publish", "") == 1 && count("drover.convoy.receive", "") == 2 &&
				count("drover.convoy.settle", "abandon") == 1 && count("drover.convoy.settle", "complete") == 1
		})
		var publish tracetest.SpanStub
		for _, s := range spans {
			if s.Name == "drover.convoy.publish" {
				publish = s
			}
		}
		if publish.Parent.SpanID() != parent.SpanContext().SpanID() {
			t.Errorf("the publish span's parent is %s, not the publisher's span", publish.Parent.SpanID())
		}
		for _, s := range spans {
			if s.Name == "order" || s.Name == "drover.convoy.publish" {
				continue
			}
			if s.SpanContext.TraceID() != publish.SpanContext.TraceID() || s.Parent.SpanID() != publish.SpanContext.SpanID() {
				t.Errorf("span %s is not a child of the publish span", s.Name)
			}
			if testutil.SpanAttr(s, "drover.session") != "o1" || testutil.SpanAttr(s, "drover.seq") != "1" || testutil.SpanAttr(s, "messaging.destination.name") != "q" {
				t.Errorf("span %s: session %q seq %q queue %q", s.Name, testutil.SpanAttr(s, "drover.session"), testutil.SpanAttr(s, "drover.seq"),
					testutil.SpanAttr(s, "messaging.destination.name"))
			}
		}
		mu.Lock()
		defer mu.Unlock()
		for _, h := range handlers {
			if h.TraceID() != publish.SpanContext.TraceID() {
				t.Errorf("a handler ran with trace %s, not the message's", h.TraceID())
			}
		}
	})
}

// A consumer in another process settling through a lease (the HTTP API's
// remote consumers) records the settle span too, a child of the publish
// span.
func TestTracingLeaseSettle(t *testing.T) {
	t.Parallel()
	drivers(t, func(t *testing.T, d store.Driver) {
		tp, exp := testutil.MemTracer(t)
		ctx := ctxT(t)
		c := newClient(t, d, withTracer(tp), withID("server"))
		if _, err := c.Publish(ctx, "q", convoy.Message{SessionID: "o1", Body: []byte(`1`)}); err != nil {
			t.Fatal(err)
		}
		l, err := c.AcceptLease(ctx, "q", "o1", "remote-1", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		m, err := c.LeaseReceive(ctx, l.Ref(), time.Second)
		if err != nil || m == nil {
			t.Fatalf("receive: %v %v", m, err)
		}
		if err := c.LeaseComplete(ctx, l.Ref(), m.Seq); err != nil {
			t.Fatal(err)
		}
		var publish, settle tracetest.SpanStub
		for _, s := range exp.GetSpans() {
			switch s.Name {
			case "drover.convoy.publish":
				publish = s
			case "drover.convoy.settle":
				settle = s
			}
		}
		if settle.Name == "" || testutil.SpanAttr(settle, "drover.outcome") != "complete" {
			t.Fatalf("no complete settle span: %+v", exp.GetSpans())
		}
		if settle.Parent.SpanID() != publish.SpanContext.SpanID() || settle.SpanContext.TraceID() != publish.SpanContext.TraceID() {
			t.Errorf("the settle span is not a child of the publish span")
		}
	})
}
