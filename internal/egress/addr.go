package egress

import (
	"net/netip"
)

// refusedRange is an address range refused by default, and why.
type refusedRange struct {
	prefix netip.Prefix
	why    string
}

// ranges lists the ranges Refused checks beyond what netip.Addr's own
// predicates (loopback, private, link-local, multicast, unspecified) say.
// Ranges that embed an IPv4 address (NAT64, 6to4) are checked by the
// embedded address instead.
var ranges = func() []refusedRange {
	list := []struct{ cidr, why string }{
		{"0.0.0.0/8", `a "this network" address`},
		{"100.64.0.0/10", "a shared (carrier-grade NAT) address"},
		{"192.0.0.0/24", "an IETF protocol assignment address"},
		{"192.0.2.0/24", "a documentation address"},
		{"198.18.0.0/15", "a benchmarking address"},
		{"198.51.100.0/24", "a documentation address"},
		{"203.0.113.0/24", "a documentation address"},
		{"240.0.0.0/4", "a reserved address"}, // 255.255.255.255 (broadcast) included
		{"::/96", "an IPv4-compatible address (deprecated)"},
		{"::ffff:0:0:0/96", "an IPv4-translated address"},
		{"64:ff9b:1::/48", "a local-use NAT64 address"},
		{"100::/64", "a discard-only address"},
		{"2001::/32", "a Teredo address"},
		{"2001:db8::/32", "a documentation address"},
		{"fec0::/10", "a site-local address (deprecated)"},
	}
	out := make([]refusedRange, len(list))
	for i, r := range list {
		out[i] = refusedRange{netip.MustParsePrefix(r.cidr), r.why}
	}
	return out
}()

var (
	nat64  = netip.MustParsePrefix("64:ff9b::/96")
	sixTo4 = netip.MustParsePrefix("2002::/16")
)

// Refused reports whether drover refuses to connect to a by default, and
// why ("a loopback address"): loopback, private (RFC 1918, IPv6 unique
// local fc00::/7), link-local (169.254.0.0/16, which holds cloud metadata
// services such as 169.254.169.254, and fe80::/10), unspecified, multicast,
// broadcast and the other special-purpose ranges of IANA's registries
// (carrier-grade NAT 100.64.0.0/10, documentation, benchmarking, reserved,
// Teredo, deprecated IPv6 forms). An IPv4-mapped IPv6 address
// (::ffff:127.0.0.1), a NAT64 address (64:ff9b::/96) and a 6to4 address
// (2002::/16) are judged by the IPv4 address they carry. Every other
// address is public: reachable unless an allow list says otherwise.
func Refused(a netip.Addr) (why string, refused bool) {
	a = a.WithZone("").Unmap()
	switch {
	case !a.IsValid():
		return "not an IP address", true
	case nat64.Contains(a):
		b := a.As16()
		return embedded(netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]}), "a NAT64 address")
	case sixTo4.Contains(a):
		b := a.As16()
		return embedded(netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]}), "a 6to4 address")
	case a.IsUnspecified():
		return "an unspecified address", true
	case a.IsLoopback():
		return "a loopback address", true
	case a == netip.AddrFrom4([4]byte{169, 254, 169, 254}):
		return "a link-local address (the cloud metadata service)", true
	case a.IsLinkLocalUnicast():
		return "a link-local address", true
	case a.IsPrivate():
		return "a private address", true
	case a.IsMulticast(), a.IsInterfaceLocalMulticast(), a.IsLinkLocalMulticast():
		return "a multicast address", true
	}
	for _, r := range ranges {
		if r.prefix.Contains(a) {
			return r.why, true
		}
	}
	return "", false
}

// embedded judges an IPv6 address by the IPv4 address v4 it carries.
func embedded(v4 netip.Addr, kind string) (string, bool) {
	if why, refused := Refused(v4); refused {
		return kind + " of " + v4.String() + ", " + why, true
	}
	return "", false
}
