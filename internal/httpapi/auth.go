package httpapi

import (
	"bufio"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strings"
	"unicode"
)

// Scope is a permission a token carries.
type Scope string

// Scopes.
const (
	// ScopeSubmit: submit tasks, read tasks, alerts and queues, publish.
	ScopeSubmit Scope = "submit"
	// ScopeOperator: everything, including resubmit, cancel, acknowledge
	// and dead-letter actions.
	ScopeOperator Scope = "operator"
	// ScopeAgent: remote agents — poll for requests and complete or fail
	// them (operator may too). Nothing else.
	ScopeAgent Scope = "agent"
	// ScopeMetrics: read GET /metrics (for a Prometheus scraper; operator
	// may too). Nothing else.
	ScopeMetrics Scope = "metrics"
)

// MinTokenLen is the shortest token accepted, in bytes.
const MinTokenLen = 16

// EnvTokens names the environment variable holding tokens: the lines of a
// tokens file separated by ";".
const EnvTokens = "DROVER_API_TOKENS"

// Token is one accepted bearer token and its scopes.
type Token struct {
	Secret string
	Scopes []Scope
	// Name identifies the token's holder in the history: operator actions
	// made with it are recorded with the actor "http:<Name>". Default: the
	// first 8 hex digits of the token's SHA-256, "token-1a2b3c4d" (never the
	// token itself).
	Name string
}

// maxTokenNameLen caps a token's name.
const maxTokenNameLen = 64

// actorName is the actor recorded for the token's operator actions.
func (t Token) actorName() string {
	if t.Name != "" {
		return "http:" + t.Name
	}
	h := sha256.Sum256([]byte(t.Secret))
	return "http:token-" + hex.EncodeToString(h[:4])
}

// checkTokenName reports what is wrong with a token's name.
func checkTokenName(n string) error {
	if len(n) > maxTokenNameLen {
		return fmt.Errorf("the name is %d bytes; at most %d", len(n), maxTokenNameLen)
	}
	for _, c := range n {
		if c > unicode.MaxASCII || !(unicode.IsLetter(c) || unicode.IsDigit(c) || strings.ContainsRune("-_.@", c)) {
			return fmt.Errorf("the name %q may hold only letters, digits and - _ . @", n)
		}
	}
	return nil
}

// has reports whether the token grants scope s (operator grants all).
func (t Token) has(s Scope) bool {
	for _, x := range t.Scopes {
		if x == s || x == ScopeOperator {
			return true
		}
	}
	return false
}

// ParseTokens reads tokens, one "TOKEN SCOPE[,SCOPE]" per line; blank lines
// and lines starting with # are ignored. Errors name the line, never the
// token.
func ParseTokens(r io.Reader) ([]Token, error) {
	var lines []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read tokens: %w", err)
	}
	return parseTokenLines(lines, "line")
}

// ParseTokensEnv parses the value of EnvTokens: entries as in a tokens file,
// separated by ";".
func ParseTokensEnv(s string) ([]Token, error) {
	return parseTokenLines(strings.Split(s, ";"), "entry")
}

func parseTokenLines(lines []string, what string) ([]Token, error) {
	var out []Token
	seen := map[string]bool{}
	for i, l := range lines {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		f := strings.Fields(l)
		if len(f) != 2 && len(f) != 3 {
			return nil, fmt.Errorf("tokens %s %d: want \"TOKEN SCOPE[,SCOPE] [NAME]\" (two or three fields), got %d fields", what, i+1, len(f))
		}
		secret := f[0]
		if len(secret) < MinTokenLen {
			return nil, fmt.Errorf("tokens %s %d: the token is %d bytes; at least %d are required", what, i+1, len(secret), MinTokenLen)
		}
		for _, c := range secret {
			if c > unicode.MaxASCII || !unicode.IsPrint(c) {
				return nil, fmt.Errorf("tokens %s %d: the token must be printable ASCII", what, i+1)
			}
		}
		if seen[secret] {
			return nil, fmt.Errorf("tokens %s %d: the token is listed twice", what, i+1)
		}
		seen[secret] = true
		t := Token{Secret: secret}
		if len(f) == 3 {
			if err := checkTokenName(f[2]); err != nil {
				return nil, fmt.Errorf("tokens %s %d: %w", what, i+1, err)
			}
			t.Name = f[2]
		}
		for _, s := range strings.Split(f[1], ",") {
			switch Scope(s) {
			case ScopeSubmit, ScopeOperator, ScopeAgent, ScopeMetrics:
				t.Scopes = append(t.Scopes, Scope(s))
			default:
				return nil, fmt.Errorf("tokens %s %d: unknown scope %q (want submit, operator, agent or metrics)", what, i+1, s)
			}
		}
		out = append(out, t)
	}
	return out, nil
}

type authenticator struct {
	hashes [][32]byte
	tokens []Token
}

func newAuthenticator(tokens []Token) (*authenticator, error) {
	a := &authenticator{tokens: tokens}
	for i, t := range tokens {
		if len(t.Secret) < MinTokenLen {
			return nil, fmt.Errorf("httpapi: token %d is shorter than %d bytes", i+1, MinTokenLen)
		}
		if len(t.Scopes) == 0 {
			return nil, fmt.Errorf("httpapi: token %d has no scope", i+1)
		}
		if err := checkTokenName(t.Name); err != nil {
			return nil, fmt.Errorf("httpapi: token %d: %w", i+1, err)
		}
		a.hashes = append(a.hashes, sha256.Sum256([]byte(t.Secret)))
	}
	return a, nil
}

// find returns the index of the token equal to secret, or -1. It compares
// hashes in constant time against every token, matching or not.
func (a *authenticator) find(secret string) int {
	h := sha256.Sum256([]byte(secret))
	found := -1
	for i := range a.hashes {
		if subtle.ConstantTimeCompare(h[:], a.hashes[i][:]) == 1 {
			found = i
		}
	}
	return found
}

// authorize checks the bearer token and that it grants scope (any token
// when scope is ""). It returns the token's index (-1 without auth) or
// writes 401/403 and returns false.
func (h *Handler) authorize(w http.ResponseWriter, r *http.Request, scope Scope) (int, bool) {
	if h.opts.NoAuth {
		return -1, true
	}
	v := r.Header.Get("Authorization")
	scheme, secret, ok := strings.Cut(v, " ")
	if v == "" || !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(secret) == "" {
		w.Header().Set("WWW-Authenticate", `Bearer realm="drover"`)
		h.writeError(w, r, errorf(http.StatusUnauthorized, "unauthorized", "missing bearer token: send \"Authorization: Bearer <token>\""))
		return 0, false
	}
	i := h.auth.find(strings.TrimSpace(secret))
	if i < 0 {
		w.Header().Set("WWW-Authenticate", `Bearer realm="drover", error="invalid_token"`)
		h.writeError(w, r, errorf(http.StatusUnauthorized, "unauthorized", "unknown bearer token"))
		return 0, false
	}
	if scope != "" && !h.auth.tokens[i].has(scope) {
		h.writeError(w, r, errorf(http.StatusForbidden, "forbidden", "this token lacks the %q scope this endpoint needs", scope))
		return 0, false
	}
	return i, true
}

// actorKey carries the actor of a request (the token's) in its context.
type actorKey struct{}

// actor is who made the request, as recorded in the history: "http:<token
// name>", or Options.Actor without authentication.
func (h *Handler) actor(r *http.Request) string {
	if a, ok := r.Context().Value(actorKey{}).(string); ok {
		return a
	}
	return h.opts.Actor
}
