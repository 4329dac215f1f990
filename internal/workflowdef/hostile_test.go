package workflowdef

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/internal/testutil"
	"github.com/drover-run/drover/store"
)

// TestHTTPAgentHostileErrorBody: a service answers 422 with a NUL byte and
// invalid UTF-8 in its body to the built-in http agent, while other tasks
// of the same workflow succeed. The failing task ends in Error with a
// readable reason quoting the body, its bad bytes replaced and marked;
// the others are Processed; the same on every driver.
func TestHTTPAgentHostileErrorBody(t *testing.T) {
	for name, open := range map[string]func(t *testing.T) store.Driver{
		"sqlite":   func(t *testing.T) store.Driver { return testutil.SQLite(t) },
		"postgres": func(t *testing.T) store.Driver { return testutil.Postgres(t) },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			svc := newService(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
				if strings.Contains(string(body), "bad") {
					w.WriteHeader(http.StatusUnprocessableEntity)
					_, _ = w.Write([]byte("invalid \x00 field \xff"))
					return
				}
				_, _ = w.Write([]byte(`{"ok":true}`))
			})
			dir := t.TempDir()
			writeFile(t, filepath.Join(dir, "call.yaml"), fmt.Sprintf(`name: call
steps:
  - name: post
    timeout: 20s
    http:
      method: POST
      url: "%s/things"
      body: {what: "${input.what}"}
`, svc.URL))
			f := start(t, open(t), dir, true)
			ctx := context.Background()
			ids := []string{"bad-1", "ok-1", "ok-2", "ok-3"}
			for _, id := range ids {
				what := "fine"
				if strings.HasPrefix(id, "bad") {
					what = "bad"
				}
				if _, err := f.client.Submit(ctx, "call", []byte(`{"what":"`+what+`"}`), &drover.SubmitOptions{ID: id}); err != nil {
					t.Fatal(err)
				}
			}
			for _, id := range ids {
				task := waitFinal(t, f.client, id)
				if id != "bad-1" {
					if task.ProcessState != drover.Processed {
						t.Errorf("%s is %s (%q), want Processed", id, task.ProcessState, task.LastError)
					}
					continue
				}
				e := task.LastError
				if task.ProcessState != drover.Error || !utf8.ValidString(e) || strings.ContainsRune(e, 0) ||
					!strings.Contains(e, "HTTP 422: invalid \uFFFD field \uFFFD") || !strings.Contains(e, "[drover replaced 1 NUL character and 1 byte of invalid UTF-8 with U+FFFD]") {
					t.Errorf("%s is %s with LastError %q; want Error, the body with its bad bytes replaced, and a note", id, task.ProcessState, e)
				}
			}
		})
	}
}
