package egress

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// Rule is one allow rule: a host name ("api.example.com"), a wildcard
// name ("*.example.com": its subdomains, not the name itself), an IP
// address ("10.0.0.7", "::1") or a CIDR prefix ("10.0.0.0/8",
// "fd00::/8"); names and addresses may carry a port ("api.example.com:8443",
// "127.0.0.1:9001", "[::1]:9001"), and then allow that port only.
type Rule struct {
	name     string       // lower case, no trailing dot; "" for an address rule
	wildcard bool         // name is a suffix: subdomains match
	prefix   netip.Prefix // address rules; one address is a /32 or /128
	port     string       // "": any port
}

// ParseRule parses one rule. The error says what is wrong and what a rule
// looks like.
func ParseRule(s string) (Rule, error) {
	t := strings.TrimSpace(s)
	bad := func(format string, args ...any) (Rule, error) {
		return Rule{}, fmt.Errorf("egress rule %q: %s", s, fmt.Sprintf(format, args...))
	}
	const want = "want a host name, *.domain, an IP address or a CIDR prefix, optionally with :PORT (a CIDR without)"
	switch {
	case t == "":
		return bad("empty; %s", want)
	case strings.Contains(t, "://"):
		return bad("a rule names a host, not a URL; %s", want)
	case strings.Contains(t, "/"):
		p, err := netip.ParsePrefix(t)
		if err != nil {
			return bad("not a CIDR prefix such as 10.0.0.0/8 or fd00::/8")
		}
		if p.Addr().Zone() != "" {
			return bad("a prefix has no zone")
		}
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		if p.Masked() != p {
			return bad("bits are set after the prefix length; did you mean %s?", p.Masked())
		}
		return Rule{prefix: p}, nil
	}
	host, port := t, ""
	if a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(t, "["), "]")); err == nil {
		return addrRule(s, a, "")
	}
	if strings.HasPrefix(t, "[") || strings.Count(t, ":") == 1 {
		h, p, err := net.SplitHostPort(t)
		if err != nil || h == "" {
			return bad("%s", want)
		}
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != p {
			return bad("port %q is not a number from 1 to 65535", p)
		}
		host, port = h, p
		if a, err := netip.ParseAddr(h); err == nil {
			return addrRule(s, a, port)
		}
		if strings.HasPrefix(t, "[") {
			return bad("%q is not an IPv6 address", h)
		}
	} else if strings.Contains(t, ":") {
		return bad("%s", want)
	}
	name := normalize(host)
	r := Rule{port: port}
	if rest, ok := strings.CutPrefix(name, "*."); ok {
		r.wildcard, name = true, rest
	}
	if msg := nameProblem(name); msg != "" {
		return bad("%s", msg)
	}
	if numeric(name) {
		return bad("not a standard IP address (write IPv4 addresses in dotted decimal, like 127.0.0.1)")
	}
	r.name = name
	return r, nil
}

func addrRule(s string, a netip.Addr, port string) (Rule, error) {
	if a.Zone() != "" {
		return Rule{}, fmt.Errorf("egress rule %q: give the address without a zone", s)
	}
	a = a.Unmap()
	return Rule{prefix: netip.PrefixFrom(a, a.BitLen()), port: port}, nil
}

// ParseRules parses a list of rules; the error names each bad one.
func ParseRules(list []string) ([]Rule, error) {
	out := make([]Rule, 0, len(list))
	for _, s := range list {
		r, err := ParseRule(s)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// String is the rule in the form ParseRule reads.
func (r Rule) String() string {
	var s string
	switch {
	case r.name != "" && r.wildcard:
		s = "*." + r.name
	case r.name != "":
		s = r.name
	case r.prefix.IsSingleIP():
		s = r.prefix.Addr().String()
		if r.port != "" {
			return net.JoinHostPort(s, r.port)
		}
		return s
	default:
		return r.prefix.String()
	}
	if r.port != "" {
		s += ":" + r.port
	}
	return s
}

// matchesHost reports whether the host of a URL (normalized; addr is its
// address when it is an IP literal) and port match r: names match names,
// addresses match addresses.
func (r Rule) matchesHost(host string, addr netip.Addr, port string) bool {
	if r.port != "" && r.port != port {
		return false
	}
	switch {
	case r.name == "":
		return addr.IsValid() && r.prefix.Contains(addr)
	case addr.IsValid():
		return false
	case r.wildcard:
		return strings.HasSuffix(host, "."+r.name)
	default:
		return host == r.name
	}
}

// opensName reports whether r opens every address of the host name: an
// exact name does; a wildcard does not (whoever controls a subdomain's DNS
// could point it anywhere).
func (r Rule) opensName(host, port string) bool {
	return r.name != "" && !r.wildcard && r.name == host && (r.port == "" || r.port == port)
}

// opensAddr reports whether r opens address a on port.
func (r Rule) opensAddr(a netip.Addr, port string) bool {
	return r.name == "" && r.prefix.Contains(a) && (r.port == "" || r.port == port)
}

// normalize is a host as rules compare it: lower case, without brackets
// and trailing dot.
func normalize(host string) string {
	h := strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	return strings.TrimSuffix(strings.ToLower(h), ".")
}

// nameProblem says what is wrong with a host name of a rule, "" if nothing.
func nameProblem(name string) string {
	if name == "" || len(name) > 253 {
		return "a host name is 1-253 characters"
	}
	for _, label := range strings.Split(name, ".") {
		if label == "" || len(label) > 63 {
			return "a host name is dot-separated labels of 1-63 characters"
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return fmt.Sprintf("%q is not allowed in a host name (a wildcard is *.domain)", c)
			}
		}
	}
	return ""
}

// numeric reports whether a host name (normalized) is written as a number:
// its last label is all digits or hexadecimal with 0x. No top-level domain
// is, so such a host is an IP address in some form ("2130706433",
// "0177.0.0.1", "0x7f.1", "127.1"); resolvers that accept these forms
// (inet_aton) map them to addresses a reader would not expect.
func numeric(host string) bool {
	last := host[strings.LastIndexByte(host, '.')+1:]
	if last == "" {
		return false
	}
	if x, ok := strings.CutPrefix(last, "0x"); ok {
		last = x
		for i := 0; i < len(last); i++ {
			c := last[i]
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
				return false
			}
		}
		return true
	}
	for i := 0; i < len(last); i++ {
		if last[i] < '0' || last[i] > '9' {
			return false
		}
	}
	return true
}
