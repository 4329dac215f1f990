package webhook

import (
	"fmt"
	"net/url"
	"path"
	"strings"

	"github.com/drover-run/drover/internal/egress"
)

// Allow is where tasks' callback URLs may point: optionally a list of URL
// prefixes, each a scheme, a host (with its port, if any) and a path
// ending in "/", and an egress policy. A callback URL is allowed when it
// has a prefix's scheme and host and its path starts with the prefix's
// path, with no "." or ".." segments, "\", ";" or "%25" (ways a receiver
// could resolve it to another path), also percent-encoded; and when the
// policy does not refuse its host on sight (egress.Policy.CheckURL: a
// loopback, private or link-local address, a localhost name...). A nil
// *Allow allows every URL the default egress policy does.
type Allow struct {
	prefixes []*url.URL     // nil: any
	egress   *egress.Policy // nil: the default policy
}

// WithEgress returns a copy of a (nil: no prefixes) checking hosts with
// policy p.
func (a *Allow) WithEgress(p *egress.Policy) *Allow {
	c := &Allow{egress: p}
	if a != nil {
		c.prefixes = a.prefixes
	}
	return c
}

// ParseAllow parses URL prefixes such as "https://hooks.example.com/" or
// "http://10.0.0.7:8080/drover/". It names what is wrong with a bad one.
// No prefixes: nil, allowing every URL.
func ParseAllow(prefixes []string) (*Allow, error) {
	if len(prefixes) == 0 {
		return nil, nil
	}
	a := &Allow{}
	for _, p := range prefixes {
		u, err := url.Parse(p)
		switch {
		case err != nil:
			return nil, fmt.Errorf("callback URL prefix %q: %v", p, err)
		case u.Scheme != "http" && u.Scheme != "https":
			return nil, fmt.Errorf("callback URL prefix %q: want an http or https URL", p)
		case u.Host == "" || u.Hostname() == "":
			return nil, fmt.Errorf("callback URL prefix %q: no host", p)
		case u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.ForceQuery:
			return nil, fmt.Errorf("callback URL prefix %q: only a scheme, a host and a path, like https://hooks.example.com/", p)
		case u.Path == "":
			u.Path, u.RawPath = "/", ""
		case !strings.HasSuffix(u.Path, "/"):
			return nil, fmt.Errorf("callback URL prefix %q: the path must end with \"/\" (so that /hooks does not allow /hooks-admin)", p)
		case !clean(u.Path):
			return nil, fmt.Errorf("callback URL prefix %q: the path has \".\" or \"..\" segments", p)
		}
		a.prefixes = append(a.prefixes, u)
	}
	return a, nil
}

// clean reports whether p has no "." or ".." segments and no empty ones.
func clean(p string) bool {
	return path.Clean(p) == strings.TrimSuffix(p, "/") || path.Clean(p) == p
}

// Check returns why the callback URL s is not allowed, phrased to follow
// the URL's name ("is not allowed by this server: ..."), or nil.
func (a *Allow) Check(s string) error {
	if !a.prefixAllows(s) {
		return fmt.Errorf("is not allowed by this server: it must start with one of %s (with no \".\" or \"..\" path segments, \"\\\", \";\" or \"%%25\")", a)
	}
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("is not a URL: %w", err)
	}
	var p *egress.Policy
	if a != nil {
		p = a.egress
	}
	if err := p.CheckURL(u); err != nil {
		return fmt.Errorf("is refused: %w", err)
	}
	return nil
}

// Allows reports whether the callback URL s is allowed (Check).
func (a *Allow) Allows(s string) bool { return a.Check(s) == nil }

// prefixAllows reports whether s is under one of the prefixes (any URL
// when there are none).
func (a *Allow) prefixAllows(s string) bool {
	if a == nil || a.prefixes == nil {
		return true
	}
	u, err := url.Parse(s)
	if err != nil || u.User != nil {
		return false
	}
	p := u.EscapedPath()
	if p == "" {
		p = "/"
	}
	// Both spellings: a receiver may decode %2e%2e before resolving.
	if !clean(p) || (u.Path != "" && !clean(u.Path)) {
		return false
	}
	// Other ways out of a path that some receivers take: "\" as a
	// separator, ";" parameters ("..;/" on Tomcat) and a second decoding
	// ("%252e").
	if strings.ContainsAny(u.Path, "\\;") || strings.Contains(p, "%25") {
		return false
	}
	for _, x := range a.prefixes {
		if u.Scheme == x.Scheme && strings.EqualFold(u.Host, x.Host) && strings.HasPrefix(p, x.EscapedPath()) {
			return true
		}
	}
	return false
}

// String lists the prefixes, for messages.
func (a *Allow) String() string {
	if a == nil || a.prefixes == nil {
		return "any URL"
	}
	s := make([]string, len(a.prefixes))
	for i, u := range a.prefixes {
		s[i] = u.String()
	}
	return strings.Join(s, ", ")
}
