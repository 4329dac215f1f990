package httpapi

import (
	"net/http"
	"net/url"

	dt "github.com/drover-run/drover/drovertype"
)

// HeaderNamespace names the request header by which a global token (or a
// server without auth) chooses the namespace of a request; without it, the
// default namespace. A token of a namespace may send only its own.
const HeaderNamespace = "Drover-Namespace"

// namespaceScopePrefix starts the scope that puts a token in a namespace
// ("ns:NAME" in a tokens file).
const namespaceScopePrefix = "ns:"

// requestNamespace is the namespace a request acts in, as stored ("" for
// the default one), or a 400/403 error.
func requestNamespace(r *http.Request, tok *Token) (string, error) {
	vs := r.Header.Values(HeaderNamespace)
	if len(vs) > 1 {
		return "", badRequest("header %s given %d times", HeaderNamespace, len(vs))
	}
	want := ""
	if len(vs) == 1 {
		want = vs[0]
		if want != dt.DefaultNamespace {
			if p := dt.NamespaceProblem(want); p != "" {
				return "", badRequest("%s", &dt.FieldError{Field: "header " + HeaderNamespace, Value: want, Problem: p})
			}
		}
		want = dt.StoredNamespace(want)
	}
	if tok != nil && tok.Namespace != "" {
		own := dt.StoredNamespace(tok.Namespace)
		if len(vs) == 1 && want != own {
			return "", errorf(http.StatusForbidden, "forbidden", "this token belongs to another namespace than %q", vs[0])
		}
		return own, nil
	}
	return want, nil
}

// ns is the namespace of an authorized request, as stored ("": default).
func (h *Handler) ns(r *http.Request) string {
	if p := principalOf(r); p != nil {
		return p.ns
	}
	return ""
}

// listNamespace is the Namespace filter of the request's listings.
func (h *Handler) listNamespace(r *http.Request) string {
	if ns := h.ns(r); ns != "" {
		return ns
	}
	return dt.DefaultNamespace
}

// qualify is the stored name of a task ID or queue name of the request's
// namespace.
func (h *Handler) qualify(r *http.Request, name string) string {
	return dt.QualifyName(h.ns(r), name)
}

// operator reports whether the request's token has the operator scope
// (every request without auth has).
func (h *Handler) operator(r *http.Request) bool {
	p := principalOf(r)
	return p == nil || p.token == nil || p.token.has(ScopeOperator)
}

// redactURL hides what a URL may carry as a credential, its userinfo and
// query, from callers who are not operators: they see "REDACTED" in
// their place.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "REDACTED"
	}
	if u.User != nil {
		u.User = url.User("REDACTED")
	}
	if u.RawQuery != "" {
		u.RawQuery = "REDACTED"
	}
	u.Fragment, u.RawFragment = "", ""
	return u.String()
}

// checkQueueName validates a queue name of a path, which wrap has
// qualified with the request's namespace (qualifyQueue).
func checkQueueName(s string) error {
	return fieldProblem("queue name", dt.LocalName(s), dt.StoredNameProblem(s))
}

// qualifyQueue checks the {queue} of a route's path and replaces it with
// its stored name in the request's namespace, so every queue handler acts
// in that namespace only.
func qualifyQueue(r *http.Request, ns string) error {
	v := r.PathValue("queue")
	if v == "" {
		return nil
	}
	if err := checkName("queue name", v); err != nil {
		return err
	}
	r.SetPathValue("queue", dt.QualifyName(ns, v))
	return nil
}
