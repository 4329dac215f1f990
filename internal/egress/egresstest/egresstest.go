package egresstest

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/drover-run/drover/internal/egress"
)

// Rules parses allow rules, failing the test on a bad one.
func Rules(t testing.TB, list ...string) []egress.Rule {
	t.Helper()
	rs, err := egress.ParseRules(list)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// Open returns a policy that opens the rules of list.
func Open(t testing.TB, list ...string) *egress.Policy {
	t.Helper()
	return egress.New(egress.Options{Allow: Rules(t, list...)})
}

// WantDenied checks that err is (or wraps) an *egress.DeniedError, that
// err's message contains want, and that no connection reached any of
// sinks.
func WantDenied(t testing.TB, err error, want string, sinks ...*Sink) {
	t.Helper()
	var de *egress.DeniedError
	if !errors.As(err, &de) || !strings.HasPrefix(de.Error(), "egress denied: ") || !strings.Contains(err.Error(), want) {
		t.Errorf("err = %v, want a *DeniedError naming %q", err, want)
	}
	for _, s := range sinks {
		if n := s.Conns(); n != 0 {
			t.Errorf("%d connection(s) reached %s", n, s.Listener.Addr())
		}
	}
}

// DNS is a DNS server on 127.0.0.1 (UDP) answering A and AAAA queries from
// a table a test sets; names not in the table are NXDOMAIN.
type DNS struct {
	pc net.PacketConn

	mu      sync.Mutex
	answers map[string][][]netip.Addr // name (lower case, no trailing dot) → answer of each lookup, the last repeated
	asked   map[string]int            // name and query type → queries answered
	drop    map[string]bool           // names whose queries get no answer
}

// StartDNS starts a DNS server; it stops when the test ends.
func StartDNS(t testing.TB) *DNS {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &DNS{pc: pc, answers: map[string][][]netip.Addr{}, asked: map[string]int{}, drop: map[string]bool{}}
	t.Cleanup(func() { _ = pc.Close() })
	go d.serve()
	return d
}

// Set makes name resolve to addrs (IPv4 addresses in A answers, IPv6 in
// AAAA answers).
func (d *DNS) Set(name string, addrs ...string) { d.Sequence(name, addrs) }

// Sequence makes name's n-th lookup (an A and an AAAA query) answer the
// n-th list, and every later one the last: a name that changes its
// address between a check and a connection, as DNS rebinding does.
func (d *DNS) Sequence(name string, lists ...[]string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var seq [][]netip.Addr
	for _, l := range lists {
		var as []netip.Addr
		for _, s := range l {
			as = append(as, netip.MustParseAddr(s))
		}
		seq = append(seq, as)
	}
	d.answers[key(name)] = seq
	for k := range d.asked {
		if strings.HasPrefix(k, key(name)+" ") {
			delete(d.asked, k)
		}
	}
}

// Drop makes queries for name go unanswered, as a server that packets do
// not reach: a dial of the name lasts until its timeout.
func (d *DNS) Drop(name string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.drop[key(name)] = true
}

func key(name string) string { return strings.TrimSuffix(strings.ToLower(name), ".") }

// Resolver returns a resolver asking only this server.
func (d *DNS) Resolver() *net.Resolver {
	addr := d.pc.LocalAddr().String()
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var dl net.Dialer
		return dl.DialContext(ctx, "udp", addr)
	}}
}

func (d *DNS) serve() {
	buf := make([]byte, 1500)
	for {
		n, from, err := d.pc.ReadFrom(buf)
		if err != nil {
			return
		}
		if out := d.answer(buf[:n]); out != nil {
			_, _ = d.pc.WriteTo(out, from)
		}
	}
}

func (d *DNS) answer(msg []byte) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(msg)
	if err != nil {
		return nil
	}
	q, err := p.Question()
	if err != nil {
		return nil
	}
	name := key(q.Name.String())
	d.mu.Lock()
	if d.drop[name] {
		d.mu.Unlock()
		return nil
	}
	seq, known := d.answers[name]
	var addrs []netip.Addr
	if known && len(seq) > 0 {
		k := name + " " + q.Type.String()
		addrs = seq[min(d.asked[k], len(seq)-1)]
		d.asked[k]++
	}
	d.mu.Unlock()
	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired, RecursionAvailable: true}
	if !known {
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, rh)
	_ = b.StartQuestions()
	_ = b.Question(q)
	_ = b.StartAnswers()
	for _, a := range addrs {
		res := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 0}
		switch {
		case q.Type == dnsmessage.TypeA && a.Is4():
			res.Type = dnsmessage.TypeA
			_ = b.AResource(res, dnsmessage.AResource{A: a.As4()})
		case q.Type == dnsmessage.TypeAAAA && !a.Is4():
			res.Type = dnsmessage.TypeAAAA
			_ = b.AAAAResource(res, dnsmessage.AAAAResource{AAAA: a.As16()})
		}
	}
	out, err := b.Finish()
	if err != nil {
		return nil
	}
	return out
}

// Blackhole returns a loopback address ("127.0.0.1:PORT") whose
// connections never complete: a listening socket with a backlog of 0 that
// never accepts, its queue filled first. A dial of it lasts until its
// timeout, like one to an address that drops packets. Linux only.
func Blackhole(t testing.TB) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
	for range 64 {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return addr // the queue is full: dials now hang
			}
			t.Fatalf("dial %s: %v", addr, err)
		}
		t.Cleanup(func() { _ = c.Close() })
	}
	t.Fatalf("%s kept accepting connections", addr)
	return ""
}

// Sink is an HTTP server that counts the connections reaching it.
type Sink struct {
	*httptest.Server
	conns    atomic.Int64
	requests atomic.Int64
}

// NewSink serves handler (nil: 200 "reached") on addr ("127.0.0.1:0",
// "[::1]:0"); it stops when the test ends.
func NewSink(t testing.TB, addr string, handler http.Handler) *Sink {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on %s: %v", addr, err)
	}
	s := &Sink{}
	if handler == nil {
		handler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(`"reached"`)) })
	}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.requests.Add(1)
		handler.ServeHTTP(w, r)
	}))
	_ = s.Listener.Close()
	s.Listener = &countingListener{Listener: ln, n: &s.conns}
	s.Start()
	t.Cleanup(s.Close)
	return s
}

// Conns is the number of connections accepted so far.
func (s *Sink) Conns() int64 { return s.conns.Load() }

// Requests is the number of requests served so far.
func (s *Sink) Requests() int64 { return s.requests.Load() }

// Port is the port the sink listens on.
func (s *Sink) Port() string {
	_, p, _ := net.SplitHostPort(s.Listener.Addr().String())
	return p
}

type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}
