package egress

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/acpfs/acpfs/ledger"
)

// ProxyPort is the port of 127.0.0.1 in the sandbox's network namespace
// where the proxy answers (bridged to its unix socket).
const ProxyPort = 3128

// Recorder takes the proxy's ledger records; *ledger.Writer is one.
type Recorder interface {
	Append(ledger.Record) (ledger.Record, error)
}

// Config is what a proxy lets through and whom it records it for.
type Config struct {
	Policy       Policy
	Agent, Grant string
	Ledger       Recorder
	// Lookup resolves a name (nil: the host's resolver).
	Lookup func(ctx context.Context, host string) ([]netip.Addr, error)
	// Dial connects to an address (nil: a TCP dial of the host).
	Dial func(ctx context.Context, addr netip.AddrPort) (net.Conn, error)
}

// Timeouts: a client has this long to say where it goes, the proxy this
// long to get there.
const (
	handshakeTimeout = 30 * time.Second
	dialTimeout      = 15 * time.Second
)

// Server is a running proxy.
type Server struct {
	cfg   Config
	ln    net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns map[net.Conn]struct{}
	done  bool
	rep   *repeats
	stop  chan struct{}
	flush sync.WaitGroup
	once  sync.Once
	err   error
}

// Listen starts a proxy on a new unix socket at path (in a directory
// only the caller may reach: the proxy trusts whoever connects to be the
// sandbox's command).
func Listen(path string, cfg Config) (*Server, error) {
	if cfg.Ledger == nil {
		return nil, errors.New("egress proxy: no ledger")
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("egress proxy: %w", err)
	}
	s := &Server{cfg: cfg, ln: ln, conns: map[net.Conn]struct{}{}, rep: newRepeats(), stop: make(chan struct{})}
	s.wg.Add(1)
	go s.serve()
	s.flush.Add(1)
	go func() {
		defer s.flush.Done()
		s.flusher(s.stop)
	}()
	return s, nil
}

// Close stops the proxy: no new connection, and those open are cut;
// then the repeat counts are written.
func (s *Server) Close() error {
	s.once.Do(func() { s.err = s.close() })
	return s.err
}

func (s *Server) close() error {
	err := s.ln.Close()
	s.mu.Lock()
	s.done = true
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	close(s.stop)
	s.flush.Wait()
	s.flushRepeats()
	return err
}

func (s *Server) serve() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		if !s.track(c, true) {
			c.Close()
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer s.track(c, false)
			defer c.Close()
			s.handle(c)
		}()
	}
}

// track adds or removes a connection Close must cut; it reports false
// once the proxy is closed.
func (s *Server) track(c net.Conn, add bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if add {
		if s.done {
			return false
		}
		s.conns[c] = struct{}{}
	} else {
		delete(s.conns, c)
	}
	return true
}

// handle serves one client connection: SOCKS5 when its first byte is 5,
// HTTP otherwise.
func (s *Server) handle(c net.Conn) {
	_ = c.SetDeadline(time.Now().Add(handshakeTimeout))
	// The request is read through a cap, lifted once it is judged: a
	// client cannot make the proxy hold (or record) megabytes of it.
	lim := &capped{r: c, left: maxRequest}
	br := bufio.NewReader(lim)
	first, err := br.Peek(1)
	if err != nil {
		return
	}
	if first[0] == 5 {
		s.socks5(c, br, lim)
	} else {
		s.http(c, br, lim)
	}
}

// maxRequest bounds what a client sends before its destination is
// judged: a request line and headers, or a SOCKS5 greeting and request.
const maxRequest = 32 << 10

// capped reads at most left bytes from r until lifted.
type capped struct {
	r      io.Reader
	left   int64
	lifted bool
}

func (c *capped) Read(p []byte) (int, error) {
	if c.lifted {
		return c.r.Read(p)
	}
	if c.left <= 0 {
		return 0, errors.New("request too large")
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}

// destination is where a client asked to go.
type destination struct {
	op   ledger.Op // connect, http, socks5
	host string
	port int
}

func (d destination) String() string { return net.JoinHostPort(d.host, strconv.Itoa(d.port)) }

// maxHost is the longest host name the proxy judges (DNS's own limit);
// a longer one is refused and recorded cut short.
const maxHost = 253

// tracked is an upstream connection Close cuts.
type tracked struct {
	net.Conn
	s    *Server
	once sync.Once
}

func (t *tracked) Close() error {
	t.once.Do(func() { t.s.track(t.Conn, false) })
	return t.Conn.Close()
}

// CloseWrite half-closes the connection (the relay's end of one
// direction).
func (t *tracked) CloseWrite() error {
	if cw, ok := t.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// refusal is a destination the policy or the network refused; the
// client is told why.
type refusal struct {
	reason string
	policy bool // refused by the allow-list, not by the network
}

func (r *refusal) Error() string { return r.reason }

// open decides, records and connects. The ledger record comes first:
// a connection the ledger does not hold is never made (a repeat of one
// it holds is counted, see repeats).
func (s *Server) open(ctx context.Context, d destination) (net.Conn, error) {
	if len(d.host) > maxHost {
		d.host = strconv.Quote(d.host[:64]) + "..."
		s.record(ledger.KindNetRefused, d, "host name longer than 253 bytes")
		return nil, &refusal{reason: "host name too long", policy: true}
	}
	addrs, ref := s.decide(ctx, d)
	if ref != nil {
		s.record(ledger.KindNetRefused, d, ref.reason)
		return nil, ref
	}
	if err := s.record(ledger.KindNetAllowed, d, "resolved to "+joinAddrs(addrs)); err != nil {
		return nil, &refusal{reason: "the ledger did not take the record: " + err.Error()}
	}
	dctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	var last error
	for _, a := range addrs {
		c, err := s.dial(dctx, netip.AddrPortFrom(a, uint16(d.port)))
		if err == nil {
			// Close cuts it too: a quiet upstream would otherwise hold
			// its relay, and Close, forever.
			if !s.track(c, true) {
				c.Close()
				return nil, &refusal{reason: "the proxy is stopping"}
			}
			return &tracked{Conn: c, s: s}, nil
		}
		last = err
	}
	return nil, &refusal{reason: fmt.Sprintf("%s: %v", d, last)}
}

// decide applies the policy: the host must be allowed on that port, and
// lead to a public address unless its rule names it exactly.
func (s *Server) decide(ctx context.Context, d destination) ([]netip.Addr, *refusal) {
	rule, ok := s.cfg.Policy.Match(d.host, d.port)
	if !ok {
		return nil, &refusal{reason: fmt.Sprintf("%s is not in the allow-list (--net allow=)", d), policy: true}
	}
	addrs, err := s.resolve(ctx, normalHost(d.host))
	if err != nil {
		return nil, &refusal{reason: fmt.Sprintf("%s: resolve: %v", d, err)}
	}
	if rule.Wildcard {
		for _, a := range addrs {
			if Internal(a) {
				return nil, &refusal{reason: fmt.Sprintf("%s resolves to %s, an address of this machine or a private network, which only a rule naming the host exactly allows (%s is a wildcard)", d, a, rule), policy: true}
			}
		}
	}
	return addrs, nil
}

func (s *Server) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a}, nil
	}
	if a, ok := s.cfg.Policy.Resolve[host]; ok {
		return []netip.Addr{a}, nil
	}
	lookup := s.cfg.Lookup
	if lookup == nil {
		lookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	addrs, err := lookup(ctx, host)
	if err != nil {
		return nil, err
	}
	if len(addrs) == 0 {
		return nil, errors.New("no address")
	}
	for i := range addrs {
		addrs[i] = addrs[i].Unmap()
	}
	return addrs, nil
}

func (s *Server) dial(ctx context.Context, a netip.AddrPort) (net.Conn, error) {
	if s.cfg.Dial != nil {
		return s.cfg.Dial(ctx, a)
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", a.String())
}

func (s *Server) record(kind ledger.Kind, d destination, detail string) error {
	k := repeatKey{kind: kind, op: d.op, dest: d.String()}
	if s.rep.note(k, time.Now()) {
		return nil
	}
	_, err := s.cfg.Ledger.Append(ledger.Record{Kind: kind, Agent: s.cfg.Agent, Grant: s.cfg.Grant, Op: d.op,
		Detail: d.String() + ": " + detail})
	if err != nil {
		s.rep.forget(k)
		slog.Error("egress proxy: ledger record", "kind", kind, "host", d.String(), "err", err)
	}
	return err
}

func joinAddrs(addrs []netip.Addr) string {
	out := make([]string, len(addrs))
	for i, a := range addrs {
		out[i] = a.String()
	}
	return strings.Join(out, " ")
}

// http serves a CONNECT, or one plain-HTTP request in absolute form
// (sent on with "Connection: close", so that the next request, maybe for
// another host, is judged on its own connection).
func (s *Server) http(c net.Conn, br *bufio.Reader, lim *capped) {
	req, err := http.ReadRequest(br)
	if err != nil {
		httpError(c, http.StatusBadRequest, "not an HTTP proxy request")
		return
	}
	ctx := req.Context()
	if req.Method == http.MethodConnect {
		host, port, err := hostPort(req.Host, DefaultPort)
		if err != nil {
			httpError(c, http.StatusBadRequest, err.Error())
			return
		}
		up, err := s.open(ctx, destination{op: ledger.OpConnect, host: host, port: port})
		if err != nil {
			httpError(c, refusalStatus(err), err.Error())
			return
		}
		defer up.Close()
		if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
			return
		}
		lim.lifted = true
		relay(c, br, up)
		return
	}
	if req.URL == nil || !req.URL.IsAbs() || req.URL.Scheme != "http" {
		httpError(c, http.StatusBadRequest, "this proxy takes CONNECT, and plain requests with an absolute http:// URL")
		return
	}
	host, port, err := hostPort(req.URL.Host, 80)
	if err != nil {
		httpError(c, http.StatusBadRequest, err.Error())
		return
	}
	up, err := s.open(ctx, destination{op: ledger.OpHTTP, host: host, port: port})
	if err != nil {
		httpError(c, refusalStatus(err), err.Error())
		return
	}
	defer up.Close()
	for _, h := range []string{"Proxy-Connection", "Proxy-Authorization", "Keep-Alive", "Connection"} {
		req.Header.Del(h)
	}
	req.Close = true
	// The Host header is the host judged, so that a server several sites
	// share is not asked for another one (ReadRequest already takes an
	// absolute URL's host over the header; this does not depend on it).
	req.Host = req.URL.Host
	_ = c.SetDeadline(time.Time{})
	lim.lifted = true
	if err := req.Write(up); err != nil {
		httpError(c, http.StatusBadGateway, err.Error())
		return
	}
	_, _ = io.Copy(c, up)
}

func refusalStatus(err error) int {
	var r *refusal
	if errors.As(err, &r) && r.policy {
		return http.StatusForbidden
	}
	return http.StatusBadGateway
}

func httpError(c net.Conn, code int, msg string) {
	body := "acpfs egress proxy: " + msg + "\n"
	fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		code, http.StatusText(code), len(body), body)
}

// hostPort splits an authority; def is the port when it has none.
func hostPort(authority string, def int) (string, int, error) {
	host, port, err := net.SplitHostPort(authority)
	if err != nil {
		// No port.
		return strings.Trim(authority, "[]"), def, nil
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 {
		return "", 0, fmt.Errorf("%s: bad port", authority)
	}
	return host, p, nil
}

// SOCKS5 (RFC 1928), CONNECT without authentication only.
const (
	socksVersion      = 5
	socksNoAuth       = 0
	socksNoAcceptable = 0xff
	socksConnect      = 1
	atypIPv4          = 1
	atypName          = 3
	atypIPv6          = 4

	socksOK              = 0
	socksFailure         = 1
	socksNotAllowed      = 2
	socksHostUnreach     = 4
	socksCmdUnsupported  = 7
	socksAtypUnsupported = 8
)

func (s *Server) socks5(c net.Conn, br *bufio.Reader, lim *capped) {
	var hdr [2]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		return
	}
	methods := make([]byte, hdr[1])
	if _, err := io.ReadFull(br, methods); err != nil {
		return
	}
	if !strings.ContainsRune(string(methods), socksNoAuth) {
		_, _ = c.Write([]byte{socksVersion, socksNoAcceptable})
		return
	}
	if _, err := c.Write([]byte{socksVersion, socksNoAuth}); err != nil {
		return
	}
	var req [4]byte
	if _, err := io.ReadFull(br, req[:]); err != nil || req[0] != socksVersion {
		return
	}
	var host string
	switch req[3] {
	case atypIPv4, atypIPv6:
		n := 4
		if req[3] == atypIPv6 {
			n = 16
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(br, b); err != nil {
			return
		}
		a, _ := netip.AddrFromSlice(b)
		host = a.Unmap().String()
	case atypName:
		l, err := br.ReadByte()
		if err != nil {
			return
		}
		b := make([]byte, l)
		if _, err := io.ReadFull(br, b); err != nil {
			return
		}
		host = string(b)
	default:
		socksReply(c, socksAtypUnsupported)
		return
	}
	var pb [2]byte
	if _, err := io.ReadFull(br, pb[:]); err != nil {
		return
	}
	if req[1] != socksConnect {
		socksReply(c, socksCmdUnsupported)
		return
	}
	up, err := s.open(context.Background(), destination{op: ledger.OpSocks5, host: host, port: int(binary.BigEndian.Uint16(pb[:]))})
	if err != nil {
		code := byte(socksHostUnreach)
		var r *refusal
		if errors.As(err, &r) && r.policy {
			code = socksNotAllowed
		}
		socksReply(c, code)
		return
	}
	defer up.Close()
	if !socksReply(c, socksOK) {
		return
	}
	lim.lifted = true
	relay(c, br, up)
}

// socksReply answers a SOCKS5 request (bound address 0.0.0.0:0: the
// client has no use for the host side's).
func socksReply(c net.Conn, code byte) bool {
	_, err := c.Write([]byte{socksVersion, code, 0, atypIPv4, 0, 0, 0, 0, 0, 0})
	return err == nil
}

// relay copies both ways until both are done; what the client sent
// after its request (already buffered in br) goes first.
func relay(c net.Conn, br *bufio.Reader, up net.Conn) {
	_ = c.SetDeadline(time.Time{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = io.Copy(up, br)
		closeWrite(up)
	}()
	_, _ = io.Copy(c, up)
	closeWrite(c)
	wg.Wait()
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	} else {
		_ = c.Close()
	}
}
