package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestSignVerify(t *testing.T) {
	secret := []byte("0123456789abcdef-secret")
	body := []byte(`{"id":"42","type":"processed"}`)
	at := time.Unix(1_700_000_000, 0)
	h := Sign(secret, body, at)
	if !strings.HasPrefix(h, "t=1700000000,v1=") || len(h) != len("t=1700000000,v1=")+64 {
		t.Fatalf("Sign = %q, want t=<unix>,v1=<64 hex digits>", h)
	}
	// A known value, computed with the snippets of docs/webhooks.md:
	// printf '%s.%s' 1700000000 "$body" | openssl dgst -sha256 -hmac "$secret" -hex
	// and Python's hmac.new(secret, b"1700000000." + body, hashlib.sha256).
	if want := "t=1700000000,v1=876728d0a5017e0242bdac8c20f03c0b36a349cacec5cfbafa3101a9d33019ae"; h != want {
		t.Fatalf("Sign = %q, want %q", h, want)
	}
	cases := []struct {
		name    string
		secret  []byte
		header  string
		body    []byte
		now     time.Time
		tol     time.Duration
		wantErr error
	}{
		{"valid", secret, h, body, at.Add(time.Minute), 0, nil},
		{"valid, clock behind", secret, h, body, at.Add(-time.Minute), 0, nil},
		{"valid with spaces and unknown parts", secret, " t=1700000000 , v0=zz, v1=" + sigHex(secret, 1700000000, body), body, at, 0, nil},
		{"one of two v1 matches (rotation)", secret, "t=1700000000,v1=" + strings.Repeat("0", 64) + ",v1=" + sigHex(secret, 1700000000, body), body, at, 0, nil},
		{"wrong secret", []byte("another-secret-0123"), h, body, at, 0, ErrBadSignature},
		{"body changed", secret, h, []byte(`{"id":"43","type":"processed"}`), at, 0, ErrBadSignature},
		{"timestamp changed", secret, strings.Replace(h, "t=1700000000", "t=1700000001", 1), body, at, 0, ErrBadSignature},
		{"too old", secret, h, body, at.Add(6 * time.Minute), 0, ErrTimestamp},
		{"too far ahead", secret, h, body, at.Add(-6 * time.Minute), 0, ErrTimestamp},
		{"custom tolerance", secret, h, body, at.Add(6 * time.Minute), 10 * time.Minute, nil},
		{"custom tolerance exceeded", secret, h, body, at.Add(2 * time.Second), time.Second, ErrTimestamp},
		{"empty header", secret, "", body, at, 0, ErrNoSignature},
		{"no v1", secret, "t=1700000000", body, at, 0, ErrNoSignature},
		{"no t", secret, "v1=" + sigHex(secret, 1700000000, body), body, at, 0, ErrTimestamp},
		{"t not a number", secret, "t=abc,v1=" + sigHex(secret, 1700000000, body), body, at, 0, ErrTimestamp},
	}
	for _, c := range cases {
		err := Verify(c.secret, c.header, c.body, c.now, c.tol)
		if c.wantErr == nil && err != nil {
			t.Errorf("%s: Verify = %v, want nil", c.name, err)
		}
		if c.wantErr != nil && !errors.Is(err, c.wantErr) {
			t.Errorf("%s: Verify = %v, want %v", c.name, err, c.wantErr)
		}
	}
	if err := Verify(nil, h, body, at, 0); err == nil {
		t.Error("Verify with an empty secret succeeded")
	}
}

// sigHex computes the v1 value independently of the package under test.
func sigHex(secret []byte, t int64, body []byte) string {
	m := hmac.New(sha256.New, secret)
	fmt.Fprintf(m, "%d.", t)
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}
