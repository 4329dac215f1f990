package httpapi

import (
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// Defences against a browser made to call the API: a page on another site
// can send simple requests (forms: no JSON Content-Type, no preflight) to a
// server the browser reaches, and a DNS name rebound to 127.0.0.1 makes a
// page same-origin with a server on loopback. Without auth nothing else
// stops such a page, so there the server answers only requests for a
// loopback Host and refuses cross-origin Origin headers; and every write
// needs a JSON Content-Type, with or without auth (a console served later
// with cookies needs it too).

// checkBrowser refuses, on a server without auth, a Host that is not a
// loopback name or address and an Origin other than the Host's.
func (h *Handler) checkBrowser(r *http.Request) error {
	if !h.opts.NoAuth {
		return nil
	}
	if !loopbackHost(r.Host) {
		return errorf(http.StatusForbidden, "forbidden",
			"Host %q is not a loopback name or address: a server without auth (--insecure-no-auth) answers only requests for localhost, 127.0.0.1 or [::1]", r.Host)
	}
	if vs := r.Header.Values("Origin"); len(vs) > 0 {
		if len(vs) > 1 || !sameOrigin(vs[0], r.Host) {
			return errorf(http.StatusForbidden, "forbidden", "cross-origin request refused (Origin %q, Host %q): a server without auth answers only its own origin", strings.Join(vs, ", "), r.Host)
		}
	}
	return nil
}

// loopbackHost reports whether a Host header names this machine only:
// localhost or a loopback address, with or without a port.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// sameOrigin reports whether an Origin header is an http(s) origin whose
// host and port are the request's Host.
func sameOrigin(origin, host string) bool {
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" || u.User != nil {
		return false
	}
	return strings.EqualFold(u.Host, host)
}

// checkContentType refuses a write (any method but GET and HEAD) whose
// Content-Type is not JSON (application/json or a +json type), even
// without a body: browsers send other types, or none, without asking the
// server first.
func checkContentType(r *http.Request) error {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return nil
	}
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return errorf(http.StatusUnsupportedMediaType, "unsupported_media_type", "a %s needs the header Content-Type: application/json (even without a body)", r.Method)
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
		return errorf(http.StatusUnsupportedMediaType, "unsupported_media_type", "Content-Type %q is not application/json", ct)
	}
	return nil
}
