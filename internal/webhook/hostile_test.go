package webhook

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/drover-run/drover"
	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/fault"
	"github.com/drover-run/drover/store"
)

// TestHostileAnswerDoesNotHoldBackOthers: one receiver answers 500 with a
// NUL byte and invalid UTF-8 in its body, another with a body the store
// refuses (the fault point stands in for a database refusing a value);
// their results are recorded, readable and marked, and every other
// delivery's result after them is recorded too, on every driver.
func TestHostileAnswerDoesNotHoldBackOthers(t *testing.T) {
	drivers(t, func(t *testing.T, open func(t *testing.T) store.Driver) {
		t.Parallel()
		marker := "refuse-webhook-" + t.Name()
		defer fault.RefuseText(marker)()
		drv := open(t)
		bad := make(chan struct{}, 2)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/nul":
				w.WriteHeader(http.StatusInternalServerError)
				_, _ = w.Write([]byte("oops \x00 \xff"))
				bad <- struct{}{}
			case "/refused":
				w.WriteHeader(http.StatusInternalServerError)
				_, _ = w.Write([]byte("no " + marker))
				bad <- struct{}{}
			default:
				// Answer only after both bad answers: their results come
				// first, the healthy ones after them.
				<-bad
				bad <- struct{}{}
				w.WriteHeader(http.StatusNoContent)
			}
		}))
		t.Cleanup(srv.Close)
		c := startClient(t, drv)
		for id, path := range map[string]string{"nul-1": "/nul", "ref-1": "/refused", "ok-1": "/ok", "ok-2": "/ok", "ok-3": "/ok"} {
			submit(t, c, "echo", id, srv.URL+path)
		}
		for _, id := range []string{"nul-1", "ref-1", "ok-1", "ok-2", "ok-3"} {
			wait(t, c, id, drover.Processed)
		}
		opts := fastOptions(&logBuffer{})
		opts.MaxAttempts = 1
		stop := run(t, newDispatcher(t, drv, opts))
		waitFor(t, "every result recorded", func() bool {
			ds := deliveries(t, drv, store.WebhookDeliveryListParams{})
			if len(ds) < 5 {
				return false
			}
			for _, w := range ds {
				if s := w.Status(); s != dt.WebhookDelivered && s != dt.WebhookFailed {
					return false
				}
			}
			return true
		})
		stop()
		for _, w := range deliveries(t, drv, store.WebhookDeliveryListParams{}) {
			e := w.LastError
			switch {
			case strings.HasSuffix(w.URL, "/ok"):
				if w.Status() != dt.WebhookDelivered {
					t.Errorf("%s: %s (%q), want delivered", w.TaskID, w.Status(), e)
				}
			case strings.HasSuffix(w.URL, "/nul"):
				if w.Status() != dt.WebhookFailed || !utf8.ValidString(e) || strings.ContainsRune(e, 0) ||
					!strings.Contains(e, "HTTP 500: oops \uFFFD \uFFFD [drover replaced 1 NUL character and 1 byte of invalid UTF-8 with U+FFFD]") {
					t.Errorf("%s: %s with LastError %q; want failed, the answer made storable and marked", w.TaskID, w.Status(), e)
				}
			default:
				if w.Status() != dt.WebhookFailed || !strings.HasPrefix(e, "the result could not be stored: ") {
					t.Errorf("%s: %s with LastError %q; want failed, saying the result could not be stored", w.TaskID, w.Status(), e)
				}
			}
		}
	})
}
