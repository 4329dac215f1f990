package stdverify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/droverapi"
	"github.com/drover-run/drover/internal/cli"
	"github.com/drover-run/drover/internal/egress/egresstest"
	"github.com/drover-run/drover/internal/testutil"
	"github.com/drover-run/drover/internal/testutil/clienttest"
	"github.com/drover-run/drover/internal/webhook"
)

const secret = "stdverify-webhook-secret-0123456789"

// request is one webhook request as the receiver got it.
type request struct {
	header http.Header
	body   []byte
}

// TestReferenceLibraryVerifiesADelivery: a real dispatcher sends a real
// task's final event to a receiver, which verifies it with the Standard
// Webhooks reference library and the whsec_ secret "drover webhook
// secret" prints; a tampered body, another event ID and another
// destination's secret fail the same library.
func TestReferenceLibraryVerifiesADelivery(t *testing.T) {
	var (
		mu   sync.Mutex
		reqs []request
	)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		reqs = append(reqs, request{r.Header.Clone(), body})
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(recv.Close)
	hookURL := recv.URL + "/hooks/drover"

	drv := testutil.SQLite(t)
	c := clienttest.Start(t, drover.Config{
		Store: drv, PollInterval: 10 * time.Millisecond,
		Workflows: []drover.Workflow{{Name: "echo", Steps: []drover.Step{{Name: "a", Agent: "echo"}}}},
		Agents: []drover.Agent{{Name: "echo", Func: func(ctx context.Context, r *drover.AgentRequest) ([]byte, error) {
			return r.Input, nil
		}}},
	})
	if _, err := c.Submit(t.Context(), "echo", []byte(`{"order":"o-1"}`), &drover.SubmitOptions{ID: "order-1", CallbackURL: hookURL}); err != nil {
		t.Fatal(err)
	}

	d, err := webhook.New(drv, webhook.Options{
		Secret: []byte(secret), PollInterval: 5 * time.Millisecond, Timeout: 5 * time.Second,
		Egress: egresstest.Open(t, "127.0.0.1"), // where the receiver listens
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("dispatcher Run = %v", err)
		}
	})
	testutil.WaitFor(t, "the task's webhook", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(reqs) > 0
	})
	mu.Lock()
	got := reqs[0]
	mu.Unlock()
	var p droverapi.WebhookPayload
	if err := json.Unmarshal(got.body, &p); err != nil || p.TaskID != "order-1" || p.Type != "processed" {
		t.Fatalf("the webhook is not order-1's final event (%v): %s", err, got.body)
	}

	// The receiver's secret, as an operator prints it for the receiver.
	t.Setenv(cli.EnvWebhookSecret, secret)
	var out, errOut bytes.Buffer
	if code := cli.MainIO(t.Context(), []string{"webhook", "secret", hookURL}, strings.NewReader(""), &out, &errOut); code != 0 {
		t.Fatalf("drover webhook secret: exit %d: %s", code, errOut.String())
	}
	whsec := strings.TrimSpace(out.String())
	wh, err := standardwebhooks.NewWebhook(whsec)
	if err != nil {
		t.Fatalf("the reference library refuses the secret %q: %v", whsec, err)
	}
	if err := wh.Verify(got.body, got.header); err != nil {
		t.Fatalf("the reference library does not verify drover's webhook: %v\nheaders: %v", err, got.header)
	}

	tampered := bytes.Replace(got.body, []byte(`"order-1"`), []byte(`"order-2"`), 1)
	if bytes.Equal(tampered, got.body) {
		t.Fatalf("the body does not name order-1: %s", got.body)
	}
	if err := wh.Verify(tampered, got.header); !errors.Is(err, standardwebhooks.ErrNoMatchingSignature) {
		t.Errorf("a tampered body: Verify = %v, want ErrNoMatchingSignature", err)
	}
	otherID := got.header.Clone()
	otherID.Set("webhook-id", otherID.Get("webhook-id")+"0")
	if err := wh.Verify(got.body, otherID); !errors.Is(err, standardwebhooks.ErrNoMatchingSignature) {
		t.Errorf("another webhook-id: Verify = %v, want ErrNoMatchingSignature", err)
	}
	other, err := standardwebhooks.NewWebhook(droverapi.WebhookSecret([]byte(secret), recv.URL+"/elsewhere"))
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Verify(got.body, got.header); !errors.Is(err, standardwebhooks.ErrNoMatchingSignature) {
		t.Errorf("another destination's secret: Verify = %v, want ErrNoMatchingSignature", err)
	}

	// The other way round: drover's verifier accepts what the reference
	// library signs, with the key of the same whsec_ secret.
	key, err := droverapi.ParseWebhookSecret(whsec)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	sig, err := wh.Sign("msg_2Lh9KoSDLkLd1mbOaaRYz4Dtp8I", now, got.body)
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	h.Set(standardwebhooks.HeaderWebhookID, "msg_2Lh9KoSDLkLd1mbOaaRYz4Dtp8I")
	h.Set(standardwebhooks.HeaderWebhookTimestamp, strconv.FormatInt(now.Unix(), 10))
	h.Set(standardwebhooks.HeaderWebhookSignature, "v1a,c2lnbmF0dXJl "+sig)
	if err := droverapi.VerifyWebhookKey(key, h, got.body, now, 0); err != nil {
		t.Errorf("drover does not verify what the reference library signs: %v", err)
	}
	if err := droverapi.VerifyWebhookKey(key, h, tampered, now, 0); !errors.Is(err, droverapi.ErrWebhookBadSignature) {
		t.Errorf("drover verifies a tampered body the reference library signed: %v", err)
	}
}
