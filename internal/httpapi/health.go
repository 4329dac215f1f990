package httpapi

import (
	"context"
	_ "embed"
	"net/http"

	"github.com/drover-run/drover/droverapi"
)

//go:embed openapi.json
var openAPIDoc []byte

// OpenAPI returns the embedded OpenAPI 3.1 document.
func OpenAPI() []byte { return append([]byte(nil), openAPIDoc...) }

func (h *Handler) openAPI(w http.ResponseWriter, r *http.Request) error {
	if err := noQuery(r); err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openAPIDoc)
	return nil
}

func (h *Handler) healthz(w http.ResponseWriter, r *http.Request) error {
	if err := noQuery(r); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, droverapi.Status{Status: "ok"})
	return nil
}

// readyz answers 200 when the store answers a cheap read (its schema
// version) within ReadyTimeout and the schema is current; 503 otherwise,
// and once the server is shutting down. Callers need no token, so the
// answer says only which check failed; the store's error is logged.
func (h *Handler) readyz(w http.ResponseWriter, r *http.Request) error {
	if err := noQuery(r); err != nil {
		return err
	}
	if h.draining.Load() {
		return errorf(http.StatusServiceUnavailable, "not_ready", "shutting down")
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.opts.ReadyTimeout)
	defer cancel()
	applied, latest, err := h.drover.Store().SchemaVersion(ctx)
	if err != nil {
		h.log.Warn("readiness: store read failed", "err", err)
		if ctx.Err() != nil {
			return errorf(http.StatusServiceUnavailable, "not_ready", "the store did not answer within %s", h.opts.ReadyTimeout)
		}
		return errorf(http.StatusServiceUnavailable, "not_ready", "the store is not reachable (the reason is in the server's log)")
	}
	if applied != latest {
		h.log.Warn("readiness: the store schema is not current", "applied", applied, "needed", latest)
		return errorf(http.StatusServiceUnavailable, "not_ready", "the store schema is not current (details in the server's log)")
	}
	writeJSON(w, http.StatusOK, droverapi.Status{Status: "ready"})
	return nil
}

// serveMetrics serves Options.Metrics (Prometheus text format).
func (h *Handler) serveMetrics(w http.ResponseWriter, r *http.Request) error {
	if h.metrics == nil {
		return errorf(http.StatusNotFound, "not_found", "metrics are not served by this server")
	}
	if err := noQuery(r); err != nil {
		return err
	}
	if p := principalOf(r); p != nil && p.token != nil && p.token.Namespace != "" {
		h.nsMetrics[p.ns].ServeHTTP(w, r)
		return nil
	}
	h.metrics.ServeHTTP(w, r)
	return nil
}
