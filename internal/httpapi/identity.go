package httpapi

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	dt "github.com/drover-run/drover/drovertype"
)

// What the operator console (internal/console) needs of the API's
// authentication, so a console session is checked exactly as a bearer
// token is: the same tokens, scopes, failed-token limit per client
// address, actor names and Host/Origin checks.

// Identity is the holder of a bearer token (or, without auth, every
// caller), as the console sees it.
type Identity struct {
	token *Token // nil without auth
	actor string
	ns    string // the namespace a global identity chose (In), as stored; "": default
	// caller is the token's state shared with its API requests: its rate
	// limit (Allow).
	caller *caller
}

// ErrUnknownToken is Authenticate's error for a token no one configured.
var ErrUnknownToken = errors.New("unknown token")

// RateLimitedError is Authenticate's error for a client address that sent
// too many unknown tokens (the token was not looked at), and Allow's for
// a token over its rate limit (PerToken).
type RateLimitedError struct {
	RetryAfter time.Duration
	PerToken   bool
}

func (e *RateLimitedError) Error() string {
	if e.PerToken {
		return "too many requests for this token; retry in " + retryAfter(e.RetryAfter) + "s"
	}
	return "too many unknown tokens from this address; retry in " + retryAfter(e.RetryAfter) + "s"
}

// RetryAfterHeader is the value of the Retry-After header that goes with
// the error.
func (e *RateLimitedError) RetryAfterHeader() string { return retryAfter(e.RetryAfter) }

// NoAuth reports whether the API serves without tokens.
func (h *Handler) NoAuth() bool { return h.opts.NoAuth }

// Anonymous is the identity of every caller of a server without auth: an
// operator, recorded in the history as Options.Actor.
func (h *Handler) Anonymous() *Identity {
	return &Identity{actor: h.opts.Actor, caller: h.callers[len(h.callers)-1]}
}

// Allow applies the rate limit of the identity's token (Options.Rate and
// Burst, shared with the token's API requests) to one console request:
// nil, or a *RateLimitedError saying how long to wait.
func (h *Handler) Allow(id *Identity) error {
	if id.caller == nil {
		return nil
	}
	if d := h.reserve(id.caller); d > 0 {
		return &RateLimitedError{RetryAfter: d, PerToken: true}
	}
	return nil
}

// Authenticate looks secret up among the tokens as the API does for a
// bearer token (in constant time, counting unknown ones against the
// client address of r). Without auth it returns Anonymous.
func (h *Handler) Authenticate(r *http.Request, secret string) (*Identity, error) {
	if h.opts.NoAuth {
		return h.Anonymous(), nil
	}
	addr, now := clientAddr(r), h.clock.Now()
	if d := h.authFail.limited(addr, now); d > 0 {
		return nil, &RateLimitedError{RetryAfter: d}
	}
	i := h.auth.find(secret)
	if i < 0 {
		h.authFail.failed(addr, now)
		h.log.Info("console: unknown token", "client", addr)
		return nil, ErrUnknownToken
	}
	tok := &h.auth.tokens[i]
	return &Identity{token: tok, actor: tok.actorName(), caller: h.callers[i]}, nil
}

// CheckBrowser applies the API's defences of a server without auth to a
// console request: a loopback Host and no cross-origin Origin.
func (h *Handler) CheckBrowser(r *http.Request) error { return h.checkBrowser(r) }

// SessionKey is a 32-byte key every server configured with the same
// tokens derives alike, so a console session sealed by one process opens
// in another behind the same load balancer, and no longer opens once the
// token set changes. Without auth it is nil.
func (h *Handler) SessionKey() []byte {
	if h.opts.NoAuth {
		return nil
	}
	secrets := make([]string, 0, len(h.auth.tokens))
	for _, t := range h.auth.tokens {
		secrets = append(secrets, t.Secret)
	}
	slices.Sort(secrets)
	d := sha256.New()
	d.Write([]byte("drover console session key v1\x00"))
	for _, s := range secrets {
		d.Write(binary.BigEndian.AppendUint32(nil, uint32(len(s))))
		d.Write([]byte(s))
	}
	return d.Sum(nil)
}

// CanRead reports whether the identity may read tasks, alerts and queues
// (the submit or operator scope; without auth, yes).
func (id *Identity) CanRead() bool { return id.token == nil || id.token.has(ScopeSubmit) }

// Operator reports whether the identity may act: resubmit, cancel,
// acknowledge (the operator scope; without auth, yes).
func (id *Identity) Operator() bool {
	return id.token == nil || slices.Contains(id.token.Scopes, ScopeOperator)
}

// Actor is who the history records for the identity's actions:
// "http:<token name>", or Options.Actor without auth.
func (id *Identity) Actor() string { return id.actor }

// Confined reports whether the token belongs to one namespace
// (Token.Namespace): it must see nothing of the others, not even counts.
func (id *Identity) Confined() bool { return id.token != nil && id.token.Namespace != "" }

// ListNamespace is the Namespace filter of the identity's listings, as
// the API's: a namespace's token's own, else the one chosen with In
// (drovertype.DefaultNamespace until one is).
func (id *Identity) ListNamespace() string {
	if id.token != nil && id.token.Namespace != "" {
		if ns := dt.StoredNamespace(id.token.Namespace); ns != "" {
			return ns
		}
		return dt.DefaultNamespace
	}
	if id.ns != "" {
		return id.ns
	}
	return dt.DefaultNamespace
}

// In returns the identity acting in namespace ns (as a user writes it,
// drovertype.DefaultNamespace for the default one), as a request's
// Drover-Namespace header does: a global token (or a server without auth)
// may choose any namespace; a namespace's token only its own.
func (id *Identity) In(ns string) (*Identity, error) {
	if ns != dt.DefaultNamespace {
		if p := dt.NamespaceProblem(ns); p != "" {
			return nil, &dt.FieldError{Field: "namespace", Value: ns, Problem: p}
		}
	}
	if id.Confined() {
		if dt.StoredNamespace(ns) != dt.StoredNamespace(id.token.Namespace) {
			return nil, fmt.Errorf("this token belongs to the namespace %q, not %q", id.token.Namespace, ns)
		}
		return id, nil
	}
	c := *id
	c.ns = dt.StoredNamespace(ns)
	return &c, nil
}

// TokenNamespaces are the namespaces of the configured tokens, sorted,
// for a console's namespace picker.
func (h *Handler) TokenNamespaces() []string {
	var out []string
	for _, t := range h.opts.Tokens {
		if t.Namespace != "" && !slices.Contains(out, t.Namespace) {
			out = append(out, t.Namespace)
		}
	}
	slices.Sort(out)
	return out
}

// Qualify is the stored name of a task ID (or queue name) the identity
// gives: in its namespace.
func (id *Identity) Qualify(name string) string {
	return dt.QualifyName(id.ListNamespace(), name)
}

// Name is the token's name for display (never the secret); "" without
// auth.
func (id *Identity) Name() string {
	if id.token == nil {
		return ""
	}
	return id.token.String()
}

// Status is the HTTP status the API answers err with (404 for an unknown
// task, 409 for a task in the wrong state, ...).
func (h *Handler) Status(err error) int { return h.classify(err).status }
