package console

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// cookieName is the session cookie.
const cookieName = "drover_session"

// SessionTTL is how long a console session lasts after sign-in.
const SessionTTL = 12 * time.Hour

// session is what the cookie seals.
type session struct {
	ID      string `json:"i"`           // random, names the session (CSRF)
	Secret  string `json:"s,omitempty"` // the bearer token; "" without auth
	Expires int64  `json:"e"`           // Unix seconds
	NS      string `json:"n,omitempty"` // the namespace a global token chose ("": default)
}

// sealer seals and opens sessions and derives their CSRF tokens.
type sealer struct {
	aead cipher.AEAD
	mac  []byte
}

func newSealer(key []byte) (*sealer, error) {
	if key == nil {
		// Without auth: a key of this process only.
		key = make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return nil, err
		}
	}
	enc := hmac.New(sha256.New, key)
	enc.Write([]byte("encrypt"))
	block, err := aes.NewCipher(enc.Sum(nil))
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte("csrf"))
	return &sealer{aead: aead, mac: mac.Sum(nil)}, nil
}

// newSession is a session of secret expiring SessionTTL after now.
func newSession(secret string, now time.Time) (*session, error) {
	id := make([]byte, 16)
	if _, err := rand.Read(id); err != nil {
		return nil, err
	}
	return &session{ID: base64.RawURLEncoding.EncodeToString(id), Secret: secret, Expires: now.Add(SessionTTL).Unix()}, nil
}

func (s *sealer) seal(sess *session) (string, error) {
	plain, err := json.Marshal(sess)
	if err != nil {
		return "", err
	}
	nonce := make([]byte, s.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(s.aead.Seal(nonce, nonce, plain, []byte(cookieName))), nil
}

// errNoSession: no cookie, or one that does not open (forged, from
// another token set, or expired).
var errNoSession = errors.New("no valid session")

func (s *sealer) open(v string, now time.Time) (*session, error) {
	b, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil || len(b) < s.aead.NonceSize() {
		return nil, errNoSession
	}
	plain, err := s.aead.Open(nil, b[:s.aead.NonceSize()], b[s.aead.NonceSize():], []byte(cookieName))
	if err != nil {
		return nil, errNoSession
	}
	var sess session
	if err := json.Unmarshal(plain, &sess); err != nil || sess.ID == "" {
		return nil, errNoSession
	}
	if now.Unix() >= sess.Expires {
		return nil, fmt.Errorf("%w: it expired", errNoSession)
	}
	return &sess, nil
}

// csrf is the session's CSRF token.
func (s *sealer) csrf(sess *session) string {
	m := hmac.New(sha256.New, s.mac)
	m.Write([]byte(sess.ID))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// checkCSRF reports whether token is the session's CSRF token.
func (s *sealer) checkCSRF(sess *session, token string) bool {
	return token != "" && hmac.Equal([]byte(token), []byte(s.csrf(sess)))
}

// setCookie sets the session cookie (maxAge < 0 deletes it).
func setCookie(w http.ResponseWriter, r *http.Request, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: value, Path: "/", MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
}
