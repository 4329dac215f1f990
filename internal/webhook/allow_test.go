package webhook

import (
	"strings"
	"testing"

	"github.com/drover-run/drover/internal/egress/egresstest"
)

func TestParseAllowRejectsWhatCannotBeAPrefix(t *testing.T) {
	for p, want := range map[string]string{
		"hooks.example.com/":                 "want an http or https URL",
		"ftp://hooks.example.com/":           "want an http or https URL",
		"https:///x/":                        "no host",
		"https://hooks.example.com/hooks":    `must end with "/"`,
		"https://u:p@hooks.example.com/":     "only a scheme, a host and a path",
		"https://hooks.example.com/?a=1":     "only a scheme, a host and a path",
		"https://hooks.example.com/a/../b/":  `"." or ".." segments`,
		"https://hooks.example.com/a//b/":    `"." or ".." segments`,
		"https://hooks.example.com/%zz/":     "invalid URL escape",
		"https://hooks.example.com/#section": "only a scheme, a host and a path",
	} {
		if _, err := ParseAllow([]string{p}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseAllow(%q) = %v, want an error with %q", p, err, want)
		}
	}
	if a, err := ParseAllow(nil); a != nil || err != nil || !a.Allows("http://anything/") {
		t.Errorf("ParseAllow(nil) = %v, %v; want nil (every URL allowed)", a, err)
	}
}

func TestAllowMatchesSchemeHostAndPath(t *testing.T) {
	a, err := ParseAllow([]string{"https://hooks.example.com/drover/", "http://10.0.0.7:8080"})
	if err != nil {
		t.Fatal(err)
	}
	a = a.WithEgress(egresstest.Open(t, "10.0.0.7"))
	for u, want := range map[string]bool{
		"https://hooks.example.com/drover/":            true,
		"https://hooks.example.com/drover/orders?x=1":  true,
		"https://HOOKS.example.com/drover/a":           true,
		"http://10.0.0.7:8080/anything":                true,
		"http://10.0.0.7:8080":                         true,
		"https://hooks.example.com/drover":             false, // not under /drover/
		"https://hooks.example.com/droverx/":           false,
		"https://hooks.example.com/drover/../admin":    false,
		"https://hooks.example.com/drover/%2e%2e/x":    false,
		"https://hooks.example.com/drover/./x":         false,
		"http://hooks.example.com/drover/":             false, // scheme
		"https://hooks.example.com.evil.com/drover/":   false,
		"https://hooks.example.com:444/drover/":        false, // port
		"https://u:p@hooks.example.com/drover/":        false,
		"http://10.0.0.7/anything":                     false,
		"http://10.0.0.7:8081/anything":                false,
		"https://169.254.169.254/latest/meta-data/":    false,
		"https://hooks.example.com/drover/a//b":        false,
		"https://hooks.example.com/other/drover/":      false,
		"https://hooks.example.com/drover/%2F..%2Fx":   false, // decoded: /drover//../x
		"not a url at all %":                           false,
		"https://hooks.example.com/drover/..%5cadmin":  false,
		"https://hooks.example.com/drover/..\\admin":   false,
		"https://hooks.example.com/drover/..;/admin":   false,
		"https://hooks.example.com/drover/a%3b/b":      false,
		"https://hooks.example.com/drover/%252e%252e/": false,
		"https://hooks.example.com/drover/a%20b":       true,
		"https://hooks.example.com/drover/ok/../../..": false,
	} {
		if got := a.Allows(u); got != want {
			t.Errorf("Allows(%q) = %v, want %v", u, got, want)
		}
	}
}

// TestAllowChecksTheEgressPolicy: without prefixes, a callback URL is
// still refused when its host is a refused literal address or a localhost
// name, with the reason; a policy that opens it lets it through.
func TestAllowChecksTheEgressPolicy(t *testing.T) {
	var none *Allow
	for u, want := range map[string]string{
		"http://127.0.0.1:9/cb":                     "is refused: egress denied: 127.0.0.1:9 is a loopback address",
		"http://169.254.169.254/latest/meta-data/":  "is refused: egress denied: 169.254.169.254:80 is a link-local address (the cloud metadata service)",
		"http://localhost:8080/cb":                  "is refused: egress denied: localhost:8080 resolves to 127.0.0.1",
		"http://[::ffff:10.0.0.1]/cb":               "is refused: egress denied: [::ffff:10.0.0.1]:80 is a private address (10.0.0.1)",
		"http://2130706433/cb":                      "is refused: egress denied: 2130706433:80: not a standard IP address",
		"https://hooks.example.com/x":               "",
		"https://hooks.example.com.evil.example/x/": "",
	} {
		err := none.Check(u)
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("Check(%s) = %v, want %q", u, err, want)
		}
	}
	open := none.WithEgress(egresstest.Open(t, "127.0.0.1"))
	if err := open.Check("http://127.0.0.1:9/cb"); err != nil || open.String() != "any URL" {
		t.Errorf("with 127.0.0.1 open: Check = %v, String %q", err, open.String())
	}
	a, _ := ParseAllow([]string{"https://hooks.example.com/drover/"})
	if err := a.WithEgress(nil).Check("https://other.example/"); err == nil || !strings.Contains(err.Error(), "is not allowed by this server: it must start with one of https://hooks.example.com/drover/") {
		t.Errorf("Check outside the prefixes = %v", err)
	}
}
