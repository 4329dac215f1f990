package egress_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/drover-run/drover/internal/egress"
	"github.com/drover-run/drover/internal/egress/egresstest"
)

func TestRefusedRanges(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]string{
		"127.0.0.1":           "loopback",
		"127.200.0.9":         "loopback",
		"::1":                 "loopback",
		"0.0.0.0":             "unspecified",
		"0.1.2.3":             "this network",
		"::":                  "unspecified",
		"10.1.2.3":            "private",
		"172.16.0.1":          "private",
		"172.31.255.255":      "private",
		"192.168.1.1":         "private",
		"fc00::1":             "private",
		"fd12:3456::1":        "private",
		"169.254.169.254":     "cloud metadata",
		"169.254.1.1":         "link-local",
		"fe80::1":             "link-local",
		"fe80::1%eth0":        "link-local",
		"100.64.0.1":          "carrier-grade NAT",
		"224.0.0.1":           "multicast",
		"ff02::1":             "multicast",
		"255.255.255.255":     "reserved",
		"240.0.0.1":           "reserved",
		"192.0.2.10":          "documentation",
		"2001:db8::1":         "documentation",
		"198.18.0.1":          "benchmarking",
		"::ffff:127.0.0.1":    "loopback",
		"::ffff:10.0.0.1":     "private",
		"::127.0.0.1":         "IPv4-compatible",
		"64:ff9b::7f00:1":     "NAT64 address of 127.0.0.1, a loopback",
		"64:ff9b::a9fe:a9fe":  "NAT64 address of 169.254.169.254",
		"2002:7f00:1::1":      "6to4 address of 127.0.0.1",
		"2002:c0a8:101::":     "6to4 address of 192.168.1.1, a private",
		"2001:0:4136:e378::1": "Teredo",
		"fec0::1":             "site-local",
		// Public: allowed.
		"8.8.8.8":          "",
		"1.1.1.1":          "",
		"172.32.0.1":       "",
		"100.128.0.1":      "",
		"2606:4700::1111":  "",
		"::ffff:8.8.8.8":   "",
		"64:ff9b::808:808": "",
		"2002:808:808::1":  "",
	} {
		why, refused := egress.Refused(netip.MustParseAddr(addr))
		switch {
		case want == "" && refused:
			t.Errorf("Refused(%s) = %q, want allowed", addr, why)
		case want != "" && (!refused || !strings.Contains(why, want)):
			t.Errorf("Refused(%s) = %q, %v; want refused with %q", addr, why, refused, want)
		}
	}
}

func TestParseRule(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"API.Example.com.":   "api.example.com",
		"*.example.com":      "*.example.com",
		"example.com:8443":   "example.com:8443",
		"127.0.0.1":          "127.0.0.1",
		"127.0.0.1:9001":     "127.0.0.1:9001",
		"::1":                "::1",
		"[::1]":              "::1",
		"[::1]:9001":         "[::1]:9001",
		"::ffff:10.0.0.1":    "10.0.0.1",
		"10.0.0.0/8":         "10.0.0.0/8",
		"fd00::/8":           "fd00::/8",
		" 192.168.0.0/16 ":   "192.168.0.0/16",
		"inventory.internal": "inventory.internal",
	} {
		r, err := egress.ParseRule(in)
		if err != nil || r.String() != want {
			t.Errorf("ParseRule(%q) = %v, %v; want %s", in, r, err, want)
		}
	}
	for in, want := range map[string]string{
		"":                  "empty",
		"10.0.0.1/8":        "did you mean 10.0.0.0/8",
		"10.0.0.0/33":       "not a CIDR prefix",
		"10.0.0.0/8:443":    "not a CIDR prefix",
		"example.com:0":     "1 to 65535",
		"example.com:http":  "1 to 65535",
		"example.com:99999": "1 to 65535",
		"2130706433":        "not a standard IP address",
		"0177.0.0.1":        "not a standard IP address",
		"0x7f.1":            "not a standard IP address",
		"a..b":              "labels",
		"ex ample.com":      "not allowed in a host name",
		"*.*.example.com":   "not allowed in a host name",
		"http://x.com/":     "not a URL",
		"fe80::1%eth0":      "without a zone",
		"[zz]:80":           "not an IPv6 address",
	} {
		if _, err := egress.ParseRule(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseRule(%q) = %v, want an error with %q", in, err, want)
		}
	}
}

func checkURL(p *egress.Policy, s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return err
	}
	return p.CheckURL(u)
}

func TestCheckURLRefusesLiteralDestinations(t *testing.T) {
	t.Parallel()
	var def *egress.Policy // the default policy
	for u, want := range map[string]string{
		"http://127.0.0.1:19999/latest/meta-data/": "egress denied: 127.0.0.1:19999 is a loopback address",
		"http://169.254.169.254/latest/meta-data/": "egress denied: 169.254.169.254:80 is a link-local address (the cloud metadata service)",
		"http://0.0.0.0:8080/":                     "is an unspecified address",
		"http://[::]/":                             "is an unspecified address",
		"http://[::1]:8080/":                       "is a loopback address",
		"http://[::ffff:127.0.0.1]/":               "[::ffff:127.0.0.1]:80 is a loopback address (127.0.0.1)",
		"http://[::ffff:7f00:1]/":                  "is a loopback address (127.0.0.1)",
		"http://[fe80::1%25eth0]/":                 "is a link-local address (fe80::1)",
		"http://[fd00::2]/":                        "is a private address",
		"https://10.0.0.1/":                        "10.0.0.1:443 is a private address",
		"http://2130706433/":                       "2130706433:80: not a standard IP address",
		"http://0177.0.0.1/":                       "not a standard IP address",
		"http://0x7f.0.0.1/":                       "not a standard IP address",
		"http://0x7f000001/":                       "not a standard IP address",
		"http://127.1/":                            "not a standard IP address",
		"http://localhost:8080/":                   "egress denied: localhost:8080 resolves to 127.0.0.1, a loopback address",
		"http://LOCALHOST./":                       "resolves to 127.0.0.1",
		"http://admin.localhost/":                  "resolves to 127.0.0.1",
		"http://127.0.0.1./":                       "is a loopback address",
		"http://[64:ff9b::7f00:1]/":                "NAT64 address of 127.0.0.1",
	} {
		err := checkURL(def, u)
		var de *egress.DeniedError
		if !errors.As(err, &de) || !strings.Contains(err.Error(), want) || !strings.HasPrefix(err.Error(), "egress denied: ") {
			t.Errorf("CheckURL(%s) = %v, want a *DeniedError with %q", u, err, want)
		}
	}
	for _, u := range []string{"https://example.com/", "http://8.8.8.8/", "http://[2606:4700::1111]/", "https://api.example.com:8443/x"} {
		if err := checkURL(def, u); err != nil {
			t.Errorf("CheckURL(%s) = %v, want allowed", u, err)
		}
	}
}

func TestAllowRulesOpenDestinations(t *testing.T) {
	t.Parallel()
	p := egress.New(egress.Options{Allow: egresstest.Rules(t, "127.0.0.1:9001", "10.0.0.0/8", "::1", "inventory.internal")})
	for u, allowed := range map[string]bool{
		"http://127.0.0.1:9001/":     true,
		"http://127.0.0.1:9002/":     false, // the rule names a port
		"http://10.20.30.40/":        true,
		"http://[::ffff:10.0.0.1]/":  true,
		"http://11.0.0.1/":           true, // public
		"http://192.168.1.1/":        false,
		"http://[::1]:5/":            true,
		"http://localhost:5/":        true, // ::1 is open
		"http://localhost:9001/":     true,
		"http://localhost:9003/":     true,
		"http://169.254.169.254/":    false,
		"http://inventory.internal/": true,
		"http://2130706433:9001/":    false, // never in a non-standard form
	} {
		err := checkURL(p, u)
		if (err == nil) != allowed {
			t.Errorf("CheckURL(%s) = %v, want allowed %v", u, err, allowed)
		}
	}
}

func TestRestrictListsTheHostsAURLMayName(t *testing.T) {
	t.Parallel()
	server := egress.New(egress.Options{Allow: egresstest.Rules(t, "192.168.0.0/16")})
	p := server.Restrict(egresstest.Rules(t, "hooks.example.com", "*.partner.example", "10.0.0.0/8", "api.example.com:8443"), `workflow "cb"'s egress.allow`)
	for u, want := range map[string]string{
		"https://hooks.example.com/x":        "",
		"https://HOOKS.example.com./x":       "",
		"https://a.partner.example/":         "",
		"https://a.b.partner.example/":       "",
		"http://10.1.1.1:8080/":              "", // listed, and so opened
		"https://api.example.com:8443/":      "",
		"https://api.example.com/":           `egress denied: api.example.com:443: not in workflow "cb"'s egress.allow (hooks.example.com, *.partner.example, 10.0.0.0/8, api.example.com:8443)`,
		"https://partner.example/":           "not in workflow",
		"https://evil.example/":              "not in workflow",
		"http://192.168.1.1/":                "not in workflow", // opened by the server, but not listed
		"http://127.0.0.1:19999/":            "not in workflow",
		"https://hooks.example.com.evil.io/": "not in workflow",
	} {
		err := checkURL(p, u)
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("CheckURL(%s) = %v, want %q", u, err, want)
		}
	}
	if server.Key() == p.Key() || p.Key() != server.Restrict(egresstest.Rules(t, "api.example.com:8443", "10.0.0.0/8", "*.partner.example", "hooks.example.com"), "x").Key() {
		t.Errorf("keys: server %q, restricted %q: want different, and independent of the order of the rules", server.Key(), p.Key())
	}
}

// client is an HTTP client through p's transport that follows redirects,
// to show that the dial check alone refuses what a redirect points to.
func client(t *testing.T, p *egress.Policy) *http.Client {
	t.Helper()
	tr := p.Transport(2 * time.Second)
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func get(c *http.Client, u string) (string, error) {
	res, err := c.Get(u)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return string(b), err
}

// TestDialRefusesResolvedAddresses dials names that a DNS server resolves
// to refused addresses: the check sees the address actually connected to.
func TestDialRefusesResolvedAddresses(t *testing.T) {
	t.Parallel()
	dns := egresstest.StartDNS(t)
	v4 := egresstest.NewSink(t, "127.0.0.1:0", nil)
	v6 := egresstest.NewSink(t, "[::1]:0", nil)
	dns.Set("loop.test", "127.0.0.1")
	dns.Set("loop6.test", "::1")
	dns.Set("mapped.test", "::ffff:127.0.0.1")
	dns.Set("private.test", "10.0.0.1")
	dns.Set("meta.test", "169.254.169.254")
	dns.Set("both.test", "127.0.0.1", "::1")
	dns.Set("opened.test", "127.0.0.1", "::1")
	dns.Set("wild.opened.test", "127.0.0.1")
	p := egress.New(egress.Options{Resolver: dns.Resolver(), Allow: egresstest.Rules(t, "opened.test", "*.opened.test")})
	c := client(t, p)

	port := v4.Port()
	for host, want := range map[string]string{
		"loop.test":    "loop.test:" + port + " resolves to 127.0.0.1, a loopback address",
		"mapped.test":  "resolves to 127.0.0.1, a loopback address",
		"private.test": "resolves to 10.0.0.1, a private address",
		"meta.test":    "resolves to 169.254.169.254, a link-local address (the cloud metadata service)",
		"both.test":    "a loopback address",
		// A wildcard rule matches names, but opens no address.
		"wild.opened.test": "resolves to 127.0.0.1, a loopback address",
		// /etc/hosts names loopback too.
		"localhost": "resolves to 127.0.0.1, a loopback address",
	} {
		_, err := get(c, "http://"+host+":"+port+"/")
		egresstest.WantDenied(t, err, want, v4, v6)
	}
	_, err := get(c, "http://loop6.test:"+v6.Port()+"/")
	egresstest.WantDenied(t, err, "resolves to ::1, a loopback address", v4, v6)
	// Literal addresses, in every spelling the URL parser lets through.
	for _, u := range []string{"http://127.0.0.1:" + port, "http://[::ffff:127.0.0.1]:" + port, "http://0.0.0.0:" + port,
		"http://[::]:" + port, "http://[::1]:" + v6.Port(), "http://2130706433:" + port, "http://0177.0.0.1:" + port} {
		_, err := get(c, u+"/")
		egresstest.WantDenied(t, err, "egress denied: ", v4, v6)
	}

	// An exact name rule opens the name: reached, on both families.
	if body, err := get(c, "http://opened.test:"+port+"/"); err != nil || body != `"reached"` {
		t.Fatalf("GET opened.test = %q, %v; want reached", body, err)
	}
	if body, err := get(c, "http://opened.test:"+v6.Port()+"/"); err != nil || body != `"reached"` {
		t.Fatalf("GET opened.test (IPv6) = %q, %v; want reached", body, err)
	}
}

// TestDNSRebindingIsCaughtAtConnect: the name resolves to a public address
// when looked up first (what a check before the call would see) and to
// loopback for the connection.
func TestDNSRebindingIsCaughtAtConnect(t *testing.T) {
	t.Parallel()
	dns := egresstest.StartDNS(t)
	sink := egresstest.NewSink(t, "127.0.0.1:0", nil)
	dns.Sequence("rebind.test", []string{"93.184.215.14"}, []string{"127.0.0.1"})
	p := egress.New(egress.Options{Resolver: dns.Resolver()})
	u := "http://rebind.test:" + sink.Port() + "/"
	if err := checkURL(p, u); err != nil {
		t.Fatalf("CheckURL(%s) = %v, want nothing refused before resolving", u, err)
	}
	first, err := dns.Resolver().LookupNetIP(context.Background(), "ip4", "rebind.test")
	if err != nil || len(first) != 1 || first[0].String() != "93.184.215.14" {
		t.Fatalf("first lookup = %v, %v; want the public address", first, err)
	}
	_, err = get(client(t, p), u)
	egresstest.WantDenied(t, err, "rebind.test:"+sink.Port()+" resolves to 127.0.0.1, a loopback address", sink)
}

// TestRedirectToARefusedAddressIsRefused follows a redirect (the HTTP
// agent and webhooks do not, but a redirect must not be a way around the
// policy either): the opened first host is reached, the target is not.
func TestRedirectToARefusedAddressIsRefused(t *testing.T) {
	t.Parallel()
	target := egresstest.NewSink(t, "127.0.0.1:0", nil)
	first := egresstest.NewSink(t, "127.0.0.1:0", http.RedirectHandler("http://127.0.0.1:"+target.Port()+"/secret", http.StatusFound))
	p := egress.New(egress.Options{Allow: egresstest.Rules(t, "127.0.0.1:"+first.Port())})
	_, err := get(client(t, p), "http://127.0.0.1:"+first.Port()+"/")
	egresstest.WantDenied(t, err, "127.0.0.1:"+target.Port()+" is a loopback address", target)
	if first.Requests() != 1 {
		t.Errorf("the opened host got %d requests, want 1", first.Requests())
	}
}

// TestProxyVariablesAreIgnored: a proxy would be dialed instead of the
// destination, so the transport never uses one.
func TestProxyVariablesAreIgnored(t *testing.T) {
	proxy := egresstest.NewSink(t, "127.0.0.1:0", nil)
	t.Setenv("HTTP_PROXY", "http://127.0.0.1:"+proxy.Port())
	t.Setenv("http_proxy", "http://127.0.0.1:"+proxy.Port())
	p := egress.New(egress.Options{Allow: egresstest.Rules(t, "127.0.0.1:"+proxy.Port())})
	_, err := get(client(t, p), "http://169.254.169.254/latest/meta-data/")
	egresstest.WantDenied(t, err, "169.254.169.254:80 is a link-local address", proxy)
}

func TestDialRefusesNonStandardNumbersBeforeResolving(t *testing.T) {
	t.Parallel()
	d := (*egress.Policy)(nil).Dial(net.Dialer{Timeout: time.Second})
	for _, addr := range []string{"2130706433:80", "0x7f.1:80", "127.1:80"} {
		if _, err := d(context.Background(), "tcp", addr); err == nil || !strings.Contains(err.Error(), "not a standard IP address") {
			t.Errorf("dial %s = %v, want refused as not a standard IP address", addr, err)
		}
	}
}
