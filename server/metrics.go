package server

import (
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/internal/webhook"
	"github.com/drover-run/drover/internal/workflowdef"
	"github.com/drover-run/drover/metrics"
)

// newMetrics returns the registry the server's GET /metrics serves: the
// client's metrics (package metrics), and Go's and the process's.
func newMetrics(c *drover.Client) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewCollector(c, metrics.Options{}),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// scrapeTimeout bounds a scrape of the metrics listener (503 after it).
const scrapeTimeout = 10 * time.Second

// serveMetrics serves GET /metrics of reg on addr (Config.MetricsListen),
// without tokens, for processes that run no HTTP API or keep it apart
// from monitoring. It binds at once, so a taken port fails the start.
func serveMetrics(addr string, reg prometheus.Gatherer, log *slog.Logger) (*http.Server, net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, &AddrError{"metrics-listen", addr, err}
	}
	mux := http.NewServeMux()
	// No tokens here: metrics.Handler's bound on concurrent scrapes keeps
	// a caller who can reach the address from loading the store.
	mux.Handle("GET /metrics", metrics.Handler(reg, log, scrapeTimeout))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, WriteTimeout: time.Minute,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
	go func() {
		if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
			log.Error("metrics listener stopped", "err", err)
		}
	}()
	return srv, ln, nil
}

// namespaceMetrics are the gauges of the per-namespace limits, the series
// a namespace's metrics token scrapes: the tasks the schedulers hold, the
// http agent's calls, the webhook requests and, with the API, the waiting
// calls and event streams of each namespace.
func namespaceMetrics(c *drover.Client, reg *workflowdef.Registry, hooks *webhook.Dispatcher, api *apiServer) prometheus.Collector {
	gauges := []metrics.NamespaceGauge{
		{Name: "drover_namespace_tasks_held", Help: "Tasks this process's schedulers hold, per namespace, once namespaces are in use.", Counts: c.NamespaceHeld},
		{Name: "drover_http_calls_in_flight", Help: "Calls of the built-in http agent in flight, per namespace.", Counts: reg.HTTPCalls},
	}
	if hooks != nil {
		gauges = append(gauges, metrics.NamespaceGauge{Name: "drover_webhook_namespace_in_flight", Help: "Webhook requests in flight, per namespace of their events, once namespaces are in use.", Counts: hooks.NamespaceInFlight})
	}
	if api != nil {
		gauges = append(gauges,
			metrics.NamespaceGauge{Name: "drover_api_waiting_calls", Help: "Waiting API calls (polls, accepts, receives) held, per namespace, once namespaces are in use.", Counts: api.handler.NamespaceWaiting},
			metrics.NamespaceGauge{Name: "drover_api_event_streams", Help: "Open event streams, per namespace, once namespaces are in use.", Counts: api.handler.NamespaceStreams})
	}
	return metrics.NewNamespaceCollector(gauges...)
}
