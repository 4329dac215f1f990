package backend

import (
	"context"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/drover-run/drover/convoy"
	"github.com/drover-run/drover/droverclient"
	"github.com/drover-run/drover/internal/clicore"
)

// Err explains the server's refusals in the command line's terms and
// names the server when it cannot be reached.
func TestRemoteErr(t *testing.T) {
	r := &Remote{URL: "http://127.0.0.1:1"}
	if r.Err(nil) != nil {
		t.Fatal("Err(nil) is not nil")
	}
	unauth := &droverclient.APIError{Status: http.StatusUnauthorized, Code: "unauthorized", Message: "no token"}
	for _, c := range []struct {
		r    *Remote
		err  error
		want string
	}{
		{r, unauth, "server: 401 unauthorized: no token (no token given: use --token, --token-file or $" + EnvToken + ")"},
		{&Remote{HasToken: true}, unauth, "(the server does not accept this token)"},
		{r, &droverclient.APIError{Status: http.StatusForbidden, Code: "forbidden", Message: "x"}, "need an operator token"},
		{r, errors.New("droverclient: dial tcp: connection refused"), "server http://127.0.0.1:1: dial tcp: connection refused"},
	} {
		got := c.r.Err(c.err)
		if !strings.Contains(got.Error(), c.want) {
			t.Errorf("Err(%v) = %q, want it to contain %q", c.err, got, c.want)
		}
		if !errors.Is(got, c.err) {
			t.Errorf("Err(%v) does not wrap it", c.err)
		}
	}
	if err := r.Err(context.Canceled); err != context.Canceled {
		t.Errorf("Err(context.Canceled) = %v, want it unchanged", err)
	}
}

// Consume on the local store completes Count messages, each session's in
// order, and tells each settled one.
func TestConsumeLocal(t *testing.T) {
	ctx := context.Background()
	env := &clicore.Env{Stdout: io.Discard, Stderr: io.Discard, Getenv: func(string) string { return "" },
		DBURL: "sqlite:" + filepath.Join(t.TempDir(), "drover.db"), LogLevel: "error"}
	d, err := env.OpenStore(ctx, clicore.OpenOpts{Create: true, Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	q, err := OpenQueues(ctx, env, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	for _, m := range []convoy.Message{{SessionID: "a", Body: []byte("a1")}, {SessionID: "b", Body: []byte("b1")}, {SessionID: "a", Body: []byte("a2")}} {
		if _, err := q.Publish(ctx, "orders", m); err != nil {
			t.Fatal(err)
		}
	}
	var (
		mu   sync.Mutex
		seen = map[string][]string{}
	)
	st, err := Consume(ctx, q.Consumer("orders"), ConsumeOptions{Sessions: 2, Count: 3,
		Settled: func(m *Message, handleErr error) error {
			if handleErr != nil {
				t.Errorf("message %s/%d: %v", m.SessionID, m.Seq, handleErr)
			}
			mu.Lock()
			seen[m.SessionID] = append(seen[m.SessionID], string(m.Body))
			mu.Unlock()
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	if st.Completed != 3 || st.Abandoned != 0 {
		t.Errorf("stats %+v, want 3 completed", st)
	}
	if strings.Join(seen["a"], ",") != "a1,a2" || strings.Join(seen["b"], ",") != "b1" {
		t.Errorf("consumed %v", seen)
	}
}
