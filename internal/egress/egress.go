package egress

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Options configures a Policy.
type Options struct {
	// Allow opens destinations that are refused by default.
	Allow []Rule
	// Resolver resolves host names when dialing. Default: the system's
	// (net.DefaultResolver). Tests point one at a DNS server of their own.
	Resolver *net.Resolver
}

// Policy is where outbound calls may connect. A nil *Policy is the
// default policy: every refused range closed, nothing opened. A Policy
// is immutable and safe for concurrent use.
type Policy struct {
	open     []Rule
	only     []Rule // with onlyWhat set: URL hosts must match one of these
	onlyWhat string
	resolver *net.Resolver
	key      string
}

// New returns a policy with opts.
func New(opts Options) *Policy {
	p := &Policy{open: slices.Clone(opts.Allow), resolver: opts.Resolver}
	p.key = p.makeKey()
	return p
}

var defaultPolicy = New(Options{})

func (p *Policy) or() *Policy {
	if p == nil {
		return defaultPolicy
	}
	return p
}

// Restrict returns a policy that also opens what rules open, and lets a
// URL's host through only if it matches one of rules (a name rule for a
// host name, an address rule for an IP literal, and its port): a
// workflow's declared hosts. what names the list in errors, such as
// `workflow "trip"'s egress.allow`.
func (p *Policy) Restrict(rules []Rule, what string) *Policy {
	p = p.or()
	q := &Policy{
		open:     append(slices.Clone(p.open), rules...),
		only:     slices.Clone(rules),
		onlyWhat: what,
		resolver: p.resolver,
	}
	q.key = q.makeKey()
	return q
}

// Key identifies what the policy allows: two policies with the same key
// allow the same destinations. Callers keep one connection pool per key,
// so a connection opened under one policy never serves a call of another.
func (p *Policy) Key() string { return p.or().key }

func (p *Policy) makeKey() string {
	str := func(rs []Rule) string {
		s := make([]string, len(rs))
		for i, r := range rs {
			s[i] = r.String()
		}
		slices.Sort(s)
		return strings.Join(slices.Compact(s), ",")
	}
	k := "open=" + str(p.open)
	if p.onlyWhat != "" {
		k += ";only=" + str(p.only)
	}
	return k
}

// Opened lists the rules that open destinations, for logs.
func (p *Policy) Opened() string {
	p = p.or()
	if len(p.open) == 0 {
		return "none"
	}
	s := make([]string, len(p.open))
	for i, r := range p.open {
		s[i] = r.String()
	}
	return strings.Join(s, ", ")
}

func (p *Policy) opensName(host, port string) bool {
	return slices.ContainsFunc(p.open, func(r Rule) bool { return r.opensName(host, port) })
}

func (p *Policy) opensAddr(a netip.Addr, port string) bool {
	return slices.ContainsFunc(p.open, func(r Rule) bool { return r.opensAddr(a, port) })
}

// DeniedError is a destination the policy refuses. Its message starts with
// "egress denied: " and names the host, the address and why.
type DeniedError struct {
	// Host is the destination as called: a host, with its port when known.
	Host string
	// Addr is the refused address: the host's own, or the one it resolved
	// to. Invalid when the host itself is refused (Reason says why).
	Addr netip.Addr
	// Reason is why: the kind of address ("a loopback address"), or what
	// is wrong with the host.
	Reason string
}

// Error implements error.
func (e *DeniedError) Error() string {
	if !e.Addr.IsValid() {
		return "egress denied: " + e.Host + ": " + e.Reason
	}
	h := e.Host
	if hh, _, err := net.SplitHostPort(e.Host); err == nil {
		h = hh
	}
	s := "egress denied: " + e.Host
	if _, err := netip.ParseAddr(normalize(h)); err == nil {
		s += " is " + e.Reason
		if normalize(h) != e.Addr.String() {
			s += " (" + e.Addr.String() + ")"
		}
	} else {
		s += " resolves to " + e.Addr.String() + ", " + e.Reason
	}
	return s + ", refused unless an egress allow rule opens it (such as " + e.Addr.String() + ")"
}

// CheckURL checks what can be known of u's destination without resolving
// it (see the package documentation). Its error is a *DeniedError.
func (p *Policy) CheckURL(u *url.URL) error {
	port := u.Port()
	if port == "" {
		switch strings.ToLower(u.Scheme) {
		case "http":
			port = "80"
		case "https":
			port = "443"
		}
	}
	return p.CheckHost(u.Hostname(), port)
}

// CheckHost is CheckURL for a host and port ("" when unknown).
func (p *Policy) CheckHost(host, port string) error {
	p = p.or()
	h := normalize(host)
	hp := h
	if port != "" {
		hp = net.JoinHostPort(h, port)
	}
	if h == "" {
		return &DeniedError{Host: hp, Reason: "no host"}
	}
	a, err := netip.ParseAddr(h)
	isIP := err == nil
	if isIP {
		a = a.WithZone("").Unmap()
	} else if numeric(h) {
		return &DeniedError{Host: hp, Reason: "not a standard IP address (decimal, octal and hexadecimal forms are refused; write IPv4 addresses like 192.0.2.1)"}
	}
	if p.onlyWhat != "" && !slices.ContainsFunc(p.only, func(r Rule) bool { return r.matchesHost(h, a, port) }) {
		list := make([]string, len(p.only))
		for i, r := range p.only {
			list[i] = r.String()
		}
		return &DeniedError{Host: hp, Reason: fmt.Sprintf("not in %s (%s)", p.onlyWhat, strings.Join(list, ", "))}
	}
	if isIP {
		if why, refused := Refused(a); refused && !p.opensAddr(a, port) {
			return &DeniedError{Host: hp, Addr: a, Reason: why}
		}
		return nil
	}
	// RFC 6761: localhost names resolve to loopback addresses.
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		v4, v6 := netip.AddrFrom4([4]byte{127, 0, 0, 1}), netip.IPv6Loopback()
		if !p.opensName(h, port) && !p.opensAddr(v4, port) && !p.opensAddr(v6, port) {
			return &DeniedError{Host: hp, Addr: v4, Reason: "a loopback address"}
		}
	}
	return nil
}

// Dial returns a DialContext function for an http.Transport: it dials
// with base (its timeouts; its Resolver, or the policy's) and refuses,
// before connecting, every resolved address the policy does not allow. The
// error then wraps a *DeniedError.
func (p *Policy) Dial(base net.Dialer) func(ctx context.Context, network, addr string) (net.Conn, error) {
	p = p.or()
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		h := normalize(host)
		if _, err := netip.ParseAddr(h); err != nil && numeric(h) {
			// A resolver implementing inet_aton would accept it.
			return nil, &DeniedError{Host: addr, Reason: "not a standard IP address"}
		}
		named := p.opensName(h, port)
		d := base
		if d.Resolver == nil {
			d.Resolver = p.resolver
		}
		d.ControlContext = nil
		d.Control = func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return &DeniedError{Host: addr, Reason: fmt.Sprintf("dialing %q, which is not an IP address and port", address)}
			}
			a := ap.Addr().WithZone("").Unmap()
			if why, refused := Refused(a); refused && !named && !p.opensAddr(a, port) {
				return &DeniedError{Host: addr, Addr: a, Reason: why}
			}
			return nil
		}
		return d.DialContext(ctx, network, addr)
	}
}

// Transport returns an http.Transport whose every connection the policy
// checks, with connectTimeout bounding each dial. It uses no proxy (see
// the package documentation). Callers adjust its pool sizes.
func (p *Policy) Transport(connectTimeout time.Duration) *http.Transport {
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           p.Dial(net.Dialer{Timeout: connectTimeout, KeepAlive: 30 * time.Second}),
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          256,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}
