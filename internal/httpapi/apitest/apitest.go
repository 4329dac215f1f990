package apitest

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/convoy"
	"github.com/drover-run/drover/internal/httpapi"
	"github.com/drover-run/drover/internal/testutil/clienttest"
)

// Server is a running API server and the clients it serves.
type Server struct {
	// URL is the server's base URL, as droverclient.New and --server take it.
	URL string
	// HTTP is the test server itself.
	HTTP *httptest.Server
	// Handler is the API handler the server runs.
	Handler *httpapi.Handler
	// Drover is the started workflow client.
	Drover *drover.Client
	// Convoy is the queue client, on the same store as Drover.
	Convoy *convoy.Client
}

// Start starts a drover client from cfg, a convoy client on cfg.Store
// (polling every 10ms) and an API server over both with opts. wrap, when
// not nil, wraps the API handler (to inject faults or count requests).
// Everything is stopped when the test ends: first the server and its event
// streams, then the drover client.
func Start(t testing.TB, cfg drover.Config, opts httpapi.Options, wrap func(http.Handler) http.Handler) *Server {
	t.Helper()
	d := clienttest.Start(t, cfg)
	q, err := convoy.New(convoy.Config{Store: cfg.Store, PollInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	h, err := httpapi.New(d, q, opts)
	if err != nil {
		t.Fatal(err)
	}
	var served http.Handler = h
	if wrap != nil {
		served = wrap(h)
	}
	srv := httptest.NewServer(served)
	t.Cleanup(func() {
		h.CloseStreams()
		srv.Close()
	})
	return &Server{URL: srv.URL, HTTP: srv, Handler: h, Drover: d, Convoy: q}
}
