package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/drover-run/drover/droverclient"
)

func TestSignVerify(t *testing.T) {
	secret := []byte("0123456789abcdef-secret")
	const url = "https://hooks.example.com/drover"
	body := []byte(`{"id":"42","type":"processed"}`)
	at := time.Unix(1_700_000_000, 0)
	h := Sign(secret, url, "42", body, at)
	// A known value, computed with the snippets of docs/webhooks.md:
	// key=$(printf '%s' "$URL" | openssl dgst -sha256 -hmac "$SECRET" -hex | sed 's/^.* //')
	// printf '%s.%s.' 42 1700000000 | cat - body.json | openssl dgst -sha256 -mac HMAC -macopt hexkey:$key -hex
	// and Python's hmac.new(hmac.new(secret, url, sha256).digest(), b"42.1700000000." + body, sha256).
	if want := "t=1700000000,v2=7e8e412627befc2f57f372c2b4e2dcd773c29980a4c07b7f4ebb0b79234f057a"; h != want {
		t.Fatalf("Sign = %q, want %q", h, want)
	}
	if k := hex.EncodeToString(droverclient.WebhookKey(secret, url)); k != "c043da440ae41142fa5df16fe2b2335aa0b141cbb92b7830beb5193eb13539b3" {
		t.Fatalf("WebhookKey = %s", k)
	}
	hdr := func(sig, id string) http.Header {
		h := http.Header{}
		if sig != "" {
			h.Set(HeaderSignature, sig)
		}
		if id != "" {
			h.Set(HeaderEventID, id)
		}
		return h
	}
	cases := []struct {
		name    string
		secret  []byte
		url     string
		header  http.Header
		body    []byte
		now     time.Time
		tol     time.Duration
		wantErr error
	}{
		{"valid", secret, url, hdr(h, "42"), body, at.Add(time.Minute), 0, nil},
		{"valid, clock behind", secret, url, hdr(h, "42"), body, at.Add(-time.Minute), 0, nil},
		{"valid with spaces and unknown parts", secret, url, hdr(" t=1700000000 , v0=zz, v2="+sigHex(secret, url, "42", 1700000000, body), "42"), body, at, 0, nil},
		{"one of two v2 matches (rotation)", secret, url, hdr("t=1700000000,v2="+strings.Repeat("0", 64)+",v2="+sigHex(secret, url, "42", 1700000000, body), "42"), body, at, 0, nil},
		{"wrong secret", []byte("another-secret-0123"), url, hdr(h, "42"), body, at, 0, ErrBadSignature},
		{"body changed", secret, url, hdr(h, "42"), []byte(`{"id":"43","type":"processed"}`), at, 0, ErrBadSignature},
		{"timestamp changed", secret, url, hdr(strings.Replace(h, "t=1700000000", "t=1700000001", 1), "42"), body, at, 0, ErrBadSignature},
		// The destination and the event ID are signed: a request collected
		// at one URL does not verify at another, nor under another ID.
		{"another receiver", secret, "https://victim.example.com/drover", hdr(h, "42"), body, at, 0, ErrBadSignature},
		{"same host, another path", secret, url + "/", hdr(h, "42"), body, at, 0, ErrBadSignature},
		{"another event ID", secret, url, hdr(h, "43"), body, at, 0, ErrBadSignature},
		{"no event ID", secret, url, hdr(h, ""), body, at, 0, ErrBadSignature},
		{"too old", secret, url, hdr(h, "42"), body, at.Add(6 * time.Minute), 0, ErrTimestamp},
		{"too far ahead", secret, url, hdr(h, "42"), body, at.Add(-6 * time.Minute), 0, ErrTimestamp},
		{"custom tolerance", secret, url, hdr(h, "42"), body, at.Add(6 * time.Minute), 10 * time.Minute, nil},
		{"custom tolerance exceeded", secret, url, hdr(h, "42"), body, at.Add(2 * time.Second), time.Second, ErrTimestamp},
		{"empty header", secret, url, hdr("", "42"), body, at, 0, ErrNoSignature},
		{"no v2", secret, url, hdr("t=1700000000", "42"), body, at, 0, ErrNoSignature},
		{"only the old v1 scheme", secret, url, hdr("t=1700000000,v1="+strings.Repeat("a", 64), "42"), body, at, 0, ErrNoSignature},
		{"no t", secret, url, hdr("v2="+sigHex(secret, url, "42", 1700000000, body), "42"), body, at, 0, ErrTimestamp},
		{"t not a number", secret, url, hdr("t=abc,v2="+sigHex(secret, url, "42", 1700000000, body), "42"), body, at, 0, ErrTimestamp},
	}
	for _, c := range cases {
		err := Verify(c.secret, c.url, c.header, c.body, c.now, c.tol)
		if c.wantErr == nil && err != nil {
			t.Errorf("%s: Verify = %v, want nil", c.name, err)
		}
		if c.wantErr != nil && !errors.Is(err, c.wantErr) {
			t.Errorf("%s: Verify = %v, want %v", c.name, err, c.wantErr)
		}
	}
	if err := Verify(nil, url, hdr(h, "42"), body, at, 0); err == nil {
		t.Error("Verify with an empty secret succeeded")
	}
	// A receiver given only its key verifies the same way.
	if err := droverclient.VerifyWebhookKey(droverclient.WebhookKey(secret, url), hdr(h, "42"), body, at, 0); err != nil {
		t.Errorf("VerifyWebhookKey = %v", err)
	}
	if err := droverclient.VerifyWebhookKey(droverclient.WebhookKey(secret, "https://victim.example.com/"), hdr(h, "42"), body, at, 0); !errors.Is(err, ErrBadSignature) {
		t.Errorf("VerifyWebhookKey with another destination's key = %v, want ErrBadSignature", err)
	}
}

// sigHex computes the v2 value independently of the package under test.
func sigHex(secret []byte, url, id string, t int64, body []byte) string {
	k := hmac.New(sha256.New, secret)
	k.Write([]byte(url))
	m := hmac.New(sha256.New, k.Sum(nil))
	fmt.Fprintf(m, "%s.%d.", id, t)
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}
