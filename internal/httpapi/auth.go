package httpapi

import (
	"bufio"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"unicode"

	dt "github.com/drover-run/drover/drovertype"
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
	// them (operator may too), for the agents Token.Agents names (in a
	// tokens file: the scopes "agent:NAME"). Nothing else.
	ScopeAgent Scope = "agent"
	// ScopeMetrics: read GET /metrics (for a Prometheus scraper; operator
	// may too). Nothing else.
	ScopeMetrics Scope = "metrics"
)

// scopes are every scope a token may carry.
var scopes = []Scope{ScopeSubmit, ScopeOperator, ScopeAgent, ScopeMetrics}

// MinTokenLen is the shortest token accepted, in bytes.
const MinTokenLen = 16

// EnvTokens names the environment variable holding tokens: the lines of a
// tokens file separated by ";".
const EnvTokens = "DROVER_API_TOKENS"

// errGlobalScope: remote agents serve the requests of every namespace, so
// the scope that reaches them is global. (A namespace's metrics token
// scrapes its namespace's series only.)
const errGlobalScope = "the agent scope is global (remote agents serve every namespace): a token with ns:NAME cannot have it"

// agentScopePrefix starts a scope binding a token to one remote agent,
// "agent:NAME".
const agentScopePrefix = "agent:"

// Token is one accepted bearer token: its scopes and, for remote agents,
// the agents it serves.
type Token struct {
	Secret string
	Scopes []Scope
	// Agents are the remote agents a token with ScopeAgent may serve:
	// poll for their requests, complete and fail them (in a tokens file,
	// the scopes "agent:NAME"). Without Agents an agent token serves every
	// remote agent (the plain "agent" scope: New logs a warning, since a
	// leaked token then serves any agent's requests). No token ever serves
	// an agent that runs in the server (Options.RemoteAgent).
	Agents []string
	// Namespace, when set, confines the token to one namespace (in a
	// tokens file, the scope "ns:NAME"): it sees and acts on that
	// namespace's tasks, queues, alerts and events only, and scrapes its
	// series of the metrics only, whatever its other scopes
	// (drovertype.DefaultNamespace confines it to the default namespace).
	// It cannot have ScopeAgent. Without it the token is global: it chooses the
	// namespace of each request with the Drover-Namespace header, the
	// default namespace without it.
	Namespace string
	// Name identifies the token's holder in the history: operator actions
	// made with it are recorded with the actor "http:<Name>", and so are
	// the tasks it submits (Options.MaxInFlightPerToken). Default: the
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

// serves reports whether the token may serve the remote agent: an operator
// token or an agent token bound to it (or bound to none).
func (t Token) serves(agent string) bool {
	if slices.Contains(t.Scopes, ScopeOperator) {
		return true
	}
	return slices.Contains(t.Scopes, ScopeAgent) && (len(t.Agents) == 0 || slices.Contains(t.Agents, agent))
}

// unboundAgent reports whether the token has the agent scope without
// naming its agents.
func (t Token) unboundAgent() bool {
	return slices.Contains(t.Scopes, ScopeAgent) && len(t.Agents) == 0
}

// String describes the token for logs and messages: its actor, never
// the secret.
func (t Token) String() string { return strings.TrimPrefix(t.actorName(), "http:") }

// ParseTokens reads tokens, one "TOKEN SCOPE[,SCOPE] [NAME]" per line;
// blank lines and lines starting with # are ignored. A scope is submit,
// operator, metrics, agent:AGENT (binds the token to the remote agent
// AGENT; repeat it for several), agent (every remote agent; deprecated)
// or ns:NAMESPACE (the token's namespace, Token.Namespace; a token
// without one is global).
// Errors name the line, never the token.
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
		plainAgent := false
		for _, s := range strings.Split(f[1], ",") {
			switch sc := Scope(s); {
			case sc == ScopeSubmit, sc == ScopeOperator, sc == ScopeMetrics:
				t.Scopes = append(t.Scopes, sc)
			case sc == ScopeAgent:
				plainAgent = true
			case strings.HasPrefix(s, namespaceScopePrefix):
				ns := strings.TrimPrefix(s, namespaceScopePrefix)
				if p := dt.NamespaceProblem(ns); p != "" {
					return nil, fmt.Errorf("tokens %s %d: scope %q: the namespace %s", what, i+1, s, p)
				}
				if t.Namespace != "" {
					return nil, fmt.Errorf("tokens %s %d: a token belongs to one namespace; it names two", what, i+1)
				}
				t.Namespace = ns
			case strings.HasPrefix(s, agentScopePrefix):
				name := strings.TrimPrefix(s, agentScopePrefix)
				if p := dt.NameProblem(name); p != "" {
					return nil, fmt.Errorf("tokens %s %d: scope %q: the agent name %s", what, i+1, s, p)
				}
				t.Agents = append(t.Agents, name)
			default:
				return nil, fmt.Errorf("tokens %s %d: unknown scope %q (want submit, operator, metrics, agent:AGENT, agent or ns:NAMESPACE)", what, i+1, s)
			}
		}
		if plainAgent && len(t.Agents) > 0 {
			return nil, fmt.Errorf("tokens %s %d: the scopes agent (every remote agent) and agent:AGENT exclude each other", what, i+1)
		}
		if plainAgent || len(t.Agents) > 0 {
			t.Scopes = append(t.Scopes, ScopeAgent)
		}
		if t.Namespace != "" && slices.Contains(t.Scopes, ScopeAgent) {
			return nil, fmt.Errorf("tokens %s %d: %s", what, i+1, errGlobalScope)
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
		for _, sc := range t.Scopes {
			if !slices.Contains(scopes, sc) {
				return nil, fmt.Errorf("httpapi: token %d: unknown scope %q", i+1, sc)
			}
		}
		if t.Namespace != "" && slices.Contains(t.Scopes, ScopeAgent) {
			return nil, fmt.Errorf("httpapi: token %d: %s", i+1, errGlobalScope)
		}
		if len(t.Agents) > 0 && !slices.Contains(t.Scopes, ScopeAgent) {
			return nil, fmt.Errorf("httpapi: token %d names agents but lacks the agent scope", i+1)
		}
		if t.Namespace != "" {
			if p := dt.NamespaceProblem(t.Namespace); p != "" {
				return nil, fmt.Errorf("httpapi: token %d: namespace %q %s", i+1, t.Namespace, p)
			}
		}
		for _, name := range t.Agents {
			if p := dt.NameProblem(name); p != "" {
				return nil, fmt.Errorf("httpapi: token %d: agent name %q %s", i+1, name, p)
			}
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
// when scope is ""). It returns the caller's principal or writes 401, 403
// or, for an address that sent too many unknown tokens, 429, and returns
// nil.
func (h *Handler) authorize(w http.ResponseWriter, r *http.Request, scope Scope) *principal {
	if h.opts.NoAuth {
		return &principal{caller: h.callers[len(h.callers)-1]}
	}
	v := r.Header.Get("Authorization")
	scheme, secret, ok := strings.Cut(v, " ")
	if v == "" || !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(secret) == "" {
		w.Header().Set("WWW-Authenticate", `Bearer realm="drover"`)
		h.writeError(w, r, errorf(http.StatusUnauthorized, "unauthorized", "missing bearer token: send \"Authorization: Bearer <token>\""))
		return nil
	}
	addr, now := clientAddr(r), h.clock.Now()
	if d := h.authFail.limited(addr, now); d > 0 {
		// Guessing tokens: the token is not even looked at.
		w.Header().Set("Retry-After", retryAfter(d))
		h.writeError(w, r, errorf(http.StatusTooManyRequests, "rate_limited", "too many unknown tokens from this address; retry in %ss", retryAfter(d)))
		return nil
	}
	i := h.auth.find(strings.TrimSpace(secret))
	if i < 0 {
		h.authFail.failed(addr, now)
		h.log.Info("http: unknown bearer token", "client", addr, "method", r.Method, "path", r.URL.Path)
		w.Header().Set("WWW-Authenticate", `Bearer realm="drover", error="invalid_token"`)
		h.writeError(w, r, errorf(http.StatusUnauthorized, "unauthorized", "unknown bearer token"))
		return nil
	}
	tok := &h.auth.tokens[i]
	if scope != "" && !tok.has(scope) {
		h.writeError(w, r, errorf(http.StatusForbidden, "forbidden", "this token lacks the %q scope this endpoint needs", scope))
		return nil
	}
	return &principal{token: tok, caller: h.callers[i]}
}

// actor is who made the request, as recorded in the history: "http:<token
// name>", or Options.Actor without authentication.
func (h *Handler) actor(r *http.Request) string {
	if p := principalOf(r); p != nil && p.token != nil {
		return p.token.actorName()
	}
	return h.opts.Actor
}
