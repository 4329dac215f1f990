package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
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
	signed := Sign(secret, url, "42", body, at)
	// Known values, computed with the snippets of docs/webhooks.md:
	// key=$(printf '%s' "$URL" | openssl dgst -sha256 -hmac "$SECRET" -binary | base64)
	// and Python's base64.b64encode(hmac.new(hmac.new(secret, url, sha256).digest(), b"42.1700000000." + body, sha256).digest()).
	const wantSig = "v1,fo5BJie+/C9X83LCtOLc13PCmYCkwHt/TrsLeSNPBXo="
	if signed.Get(HeaderID) != "42" || signed.Get(HeaderTimestamp) != "1700000000" || signed.Get(HeaderSignature) != wantSig || len(signed) != 3 {
		t.Fatalf("Sign = %v, want webhook-id 42, webhook-timestamp 1700000000, webhook-signature %s", signed, wantSig)
	}
	if k := hex.EncodeToString(droverclient.WebhookKey(secret, url)); k != "c043da440ae41142fa5df16fe2b2335aa0b141cbb92b7830beb5193eb13539b3" {
		t.Fatalf("WebhookKey = %s", k)
	}
	const wantSecret = "whsec_wEPaRArkEUL6XfFv4rIzWqCxQcu5K3gwvrUZPrE1ObM="
	if s := droverclient.WebhookSecret(secret, url); s != wantSecret {
		t.Fatalf("WebhookSecret = %s, want %s", s, wantSecret)
	}
	hdr := func(id, ts, sig string) http.Header {
		h := http.Header{}
		for k, v := range map[string]string{HeaderID: id, HeaderTimestamp: ts, HeaderSignature: sig} {
			if v != "" {
				h.Set(k, v)
			}
		}
		return h
	}
	good := sigB64(secret, url, "42", 1700000000, body)
	cases := []struct {
		name    string
		secret  []byte
		url     string
		header  http.Header
		body    []byte
		now     time.Time
		tol     time.Duration
		wantErr error
		wantMsg string // in the error's text
	}{
		{"valid", secret, url, signed, body, at.Add(time.Minute), 0, nil, ""},
		{"valid, clock behind", secret, url, signed, body, at.Add(-time.Minute), 0, nil, ""},
		{"other versions ignored", secret, url, hdr("42", "1700000000", "v1a,AAAA v2,zz  v1,"+good), body, at, 0, nil, ""},
		{"one of two v1 matches (rotation)", secret, url, hdr("42", "1700000000", "v1,"+base64.StdEncoding.EncodeToString(make([]byte, 32))+" v1,"+good), body, at, 0, nil, ""},
		{"wrong secret", []byte("another-secret-0123"), url, signed, body, at, 0, ErrBadSignature, "none of 1 v1 signatures matches"},
		{"body changed", secret, url, signed, []byte(`{"id":"43","type":"processed"}`), at, 0, ErrBadSignature, ""},
		{"timestamp changed", secret, url, hdr("42", "1700000001", "v1,"+good), body, at, 0, ErrBadSignature, ""},
		{"signature in hex", secret, url, hdr("42", "1700000000", "v1,"+sigHex(secret, url, "42", 1700000000, body)), body, at, 0, ErrBadSignature, ""},
		// The destination and the event ID are signed: a request collected
		// at one URL does not verify at another, nor under another ID.
		{"another receiver", secret, "https://victim.example.com/drover", signed, body, at, 0, ErrBadSignature, ""},
		{"same host, another path", secret, url + "/", signed, body, at, 0, ErrBadSignature, ""},
		{"another event ID", secret, url, hdr("43", "1700000000", "v1,"+good), body, at, 0, ErrBadSignature, ""},
		{"no webhook-id", secret, url, hdr("", "1700000000", "v1,"+good), body, at, 0, ErrBadSignature, "no webhook-id header"},
		{"too old", secret, url, signed, body, at.Add(6 * time.Minute), 0, ErrTimestamp, "too old: signed at 2023-11-14T22:13:20Z, 6m0s ago (tolerance 5m0s)"},
		{"too new", secret, url, signed, body, at.Add(-6 * time.Minute), 0, ErrTimestamp, "too new: signed at 2023-11-14T22:13:20Z, 6m0s in the future"},
		{"custom tolerance", secret, url, signed, body, at.Add(6 * time.Minute), 10 * time.Minute, nil, ""},
		{"custom tolerance exceeded", secret, url, signed, body, at.Add(2 * time.Second), time.Second, ErrTimestamp, "too old"},
		{"no headers", secret, url, http.Header{}, body, at, 0, ErrNoSignature, "no webhook-signature header"},
		{"no v1 entry", secret, url, hdr("42", "1700000000", "v1a,"+good), body, at, 0, ErrNoSignature, "no v1,… entry"},
		{"the old Drover-Signature scheme", secret, url, http.Header{"Drover-Signature": {"t=1700000000,v2=" + strings.Repeat("a", 64)}, "Drover-Event-Id": {"42"}}, body, at, 0, ErrNoSignature, ""},
		{"no webhook-timestamp", secret, url, hdr("42", "", "v1,"+good), body, at, 0, ErrTimestamp, "no webhook-timestamp header"},
		{"timestamp not a number", secret, url, hdr("42", "abc", "v1,"+good), body, at, 0, ErrTimestamp, `webhook-timestamp "abc" is not Unix seconds`},
		{"timestamp in milliseconds", secret, url, hdr("42", "1700000000000", "v1,"+good), body, at, 0, ErrTimestamp, "too new"},
	}
	for _, c := range cases {
		err := Verify(c.secret, c.url, c.header, c.body, c.now, c.tol)
		if c.wantErr == nil && err != nil {
			t.Errorf("%s: Verify = %v, want nil", c.name, err)
		}
		if c.wantErr != nil && !errors.Is(err, c.wantErr) {
			t.Errorf("%s: Verify = %v, want %v", c.name, err, c.wantErr)
		}
		if err != nil && !strings.Contains(err.Error(), c.wantMsg) {
			t.Errorf("%s: Verify = %q, want it to say %q", c.name, err, c.wantMsg)
		}
	}
	if err := Verify(nil, url, signed, body, at, 0); err == nil {
		t.Error("Verify with an empty secret succeeded")
	}
	// A receiver given only its whsec_ secret verifies the same way.
	key, err := droverclient.ParseWebhookSecret(wantSecret)
	if err != nil {
		t.Fatal(err)
	}
	if err := droverclient.VerifyWebhookKey(key, signed, body, at, 0); err != nil {
		t.Errorf("VerifyWebhookKey = %v", err)
	}
	if err := droverclient.VerifyWebhookKey(droverclient.WebhookKey(secret, "https://victim.example.com/"), signed, body, at, 0); !errors.Is(err, ErrBadSignature) {
		t.Errorf("VerifyWebhookKey with another destination's key = %v, want ErrBadSignature", err)
	}
	for _, bad := range []string{"whsec_not base64!", "whsec_", ""} {
		if _, err := droverclient.ParseWebhookSecret(bad); err == nil {
			t.Errorf("ParseWebhookSecret(%q) succeeded", bad)
		}
	}
}

// sigB64 computes the v1 value independently of the package under test.
func sigB64(secret []byte, url, id string, t int64, body []byte) string {
	return base64.StdEncoding.EncodeToString(mac(secret, url, id, t, body))
}

// sigHex is the same MAC in hexadecimal, which is not the scheme's encoding.
func sigHex(secret []byte, url, id string, t int64, body []byte) string {
	return hex.EncodeToString(mac(secret, url, id, t, body))
}

func mac(secret []byte, url, id string, t int64, body []byte) []byte {
	k := hmac.New(sha256.New, secret)
	k.Write([]byte(url))
	m := hmac.New(sha256.New, k.Sum(nil))
	fmt.Fprintf(m, "%s.%d.", id, t)
	m.Write(body)
	return m.Sum(nil)
}
