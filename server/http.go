package server

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/convoy"
	"github.com/drover-run/drover/internal/console"
	"github.com/drover-run/drover/internal/httpapi"
	"github.com/drover-run/drover/internal/instrument"
	"github.com/drover-run/drover/internal/tracing"
	"github.com/drover-run/drover/internal/workflowdef"
	droverMetrics "github.com/drover-run/drover/metrics"
	"github.com/drover-run/drover/store"
)

// apiServer is the HTTP API of a running server.
type apiServer struct {
	ln      net.Listener
	srv     *http.Server
	handler *httpapi.Handler
	tls     bool
	done    chan error
}

// listenHTTP binds the API's address (before the roles start, so a taken
// port fails at once). Without tokens the bound address must be a
// loopback one.
func listenHTTP(h *HTTPConfig) (net.Listener, error) {
	ln, err := net.Listen("tcp", h.Listen)
	if err != nil {
		return nil, &AddrError{"listen", h.Listen, err}
	}
	if h.NoAuth {
		if a, ok := ln.Addr().(*net.TCPAddr); !ok || !a.IP.IsLoopback() {
			ln.Close()
			return nil, &AddrError{"listen", h.Listen, ErrNoAuthNotLoopback}
		}
	}
	return ln, nil
}

// serveHTTP starts serving the API on ln.
func (s *Server) serveHTTP(ln net.Listener, c *drover.Client, drv store.Driver, reg *workflowdef.Registry, metrics prometheus.Gatherer) (*apiServer, error) {
	h, log := s.cfg.HTTP, s.log
	q, err := convoy.New(convoy.Config{Store: drv, InstanceID: c.InstanceID(), Logger: log, TracerProvider: s.cfg.TracerProvider,
		Observer: droverMetrics.ConvoyObserver(c)})
	if err != nil {
		return nil, err
	}
	handler, err := httpapi.New(c, q, httpapi.Options{Tokens: h.Tokens, NoAuth: h.NoAuth, MaxBodyBytes: h.MaxBodyBytes,
		Rate: h.Rate, Burst: h.Burst, MaxStreams: h.MaxStreams, MaxStreamsPerToken: h.MaxStreamsPerToken, MaxWaiting: h.MaxWaiting, MaxWaitingPerToken: h.MaxWaitingPerToken,
		MaxWaitingPerNamespace: h.MaxWaitingPerNamespace, MaxStreamsPerNamespace: h.MaxStreamsPerNamespace, MaxInFlightPerToken: h.MaxInFlightPerToken,
		Heartbeat: h.Heartbeat, RemoteInput: reg.RemoteInput, RemoteAgent: s.remoteAgent(reg), QueueCreate: h.QueueCreate, Logger: log,
		Metrics: metrics, Recorder: instrument.ClientRecorder(c), CallbackAllow: s.allow, Redelivery: h.Redelivery, MaxInFlightPerNamespace: h.MaxInFlightPerNamespace})
	if err != nil {
		return nil, err
	}
	ui, err := console.New(console.Options{Client: c, Queues: q, API: handler, Versions: reg.Versions, HTTPHosts: reg.HTTPHosts, Logger: log})
	if err != nil {
		return nil, err
	}
	a := &apiServer{ln: ln, handler: handler, done: make(chan error, 1), tls: h.TLSCert != nil}
	a.srv = &http.Server{
		Handler:           withTrace(tracing.New(s.cfg.TracerProvider), withConsole(handler, ui)),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       time.Minute,
		WriteTimeout:      time.Minute,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	// Open event streams end on Shutdown instead of holding it until its
	// deadline (shutdown's SetDraining ends them too).
	a.srv.RegisterOnShutdown(handler.CloseStreams)
	a.srv.RegisterOnShutdown(ui.CloseStreams)
	if h.TLSCert != nil {
		a.srv.TLSConfig = serverTLS(h.TLSCert)
	}
	go func() {
		var err error
		if h.TLSCert != nil {
			err = a.srv.ServeTLS(ln, "", "") // HTTP/2 is negotiated by ALPN
		} else {
			err = a.srv.Serve(ln)
		}
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		a.done <- err
	}()
	return a, nil
}

// withTrace makes, when tr is on, the context of every request carry the
// remote span of its traceparent header, so a task submitted through the
// API (or a message published) continues its caller's trace.
func withTrace(tr *tracing.Tracer, h http.Handler) http.Handler {
	if !tr.On() {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(tracing.Extract(r.Context(), r.Header)))
	})
}

// withConsole serves the API's paths (/v1, /healthz, /readyz,
// /openapi.json, /metrics) with api and every other path with the
// operator console.
func withConsole(api, ui http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch p := r.URL.Path; {
		case p == "/v1", strings.HasPrefix(p, "/v1/"), p == "/healthz", p == "/readyz", p == "/openapi.json", p == "/metrics":
			api.ServeHTTP(w, r)
		default:
			ui.ServeHTTP(w, r)
		}
	})
}

// serverTLS is the API's TLS configuration: TLS 1.2 or later, and on 1.2
// only AEAD cipher suites with forward secrecy (TLS 1.3 has no others).
// The CBC suites Go also offers by default are left out.
func serverTLS(cert *tls.Certificate) *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{*cert},
		MinVersion:   tls.VersionTLS12,
		CipherSuites: []uint16{
			tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
			tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
			tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
			tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
			tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
			tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
		},
	}
}

// url is the API's base URL.
func (a *apiServer) url() string {
	if a.tls {
		return "https://" + a.ln.Addr().String()
	}
	return "http://" + a.ln.Addr().String()
}

// shutdown stops accepting connections, marks the server not ready and
// lets requests in flight finish until ctx ends.
func (a *apiServer) shutdown(ctx context.Context) error {
	a.handler.SetDraining()
	err := a.srv.Shutdown(ctx)
	if err != nil {
		a.srv.Close()
	}
	return err
}
