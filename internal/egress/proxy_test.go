package egress

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/ledger"
)

// fakeLedger keeps the proxy's records.
type fakeLedger struct {
	mu   sync.Mutex
	recs []ledger.Record
	err  error
}

func (l *fakeLedger) Append(r ledger.Record) (ledger.Record, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return ledger.Record{}, l.err
	}
	l.recs = append(l.recs, r)
	return r, nil
}

func (l *fakeLedger) records() []ledger.Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]ledger.Record(nil), l.recs...)
}

// proxyEnv is a fake model API on loopback, named api.test, and a proxy
// that allows it by name (and, by wildcard, *.wild.test, which also
// resolves to loopback).
type proxyEnv struct {
	api     *httptest.Server
	apiPort int
	sock    string
	led     *fakeLedger
	srv     *Server
}

func newProxyEnv(t *testing.T) *proxyEnv {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "model API: %s %s host=%s", r.Method, r.URL.Path, r.Host)
	}))
	t.Cleanup(api.Close)
	port := api.Listener.Addr().(*net.TCPAddr).Port
	rules, err := ParseAllow(fmt.Sprintf("api.test:%d,*.wild.test:%d", port, port))
	require.NoError(t, err)
	loop := netip.MustParseAddr("127.0.0.1")
	e := &proxyEnv{api: api, apiPort: port, sock: filepath.Join(t.TempDir(), "proxy.sock"), led: &fakeLedger{}}
	s, err := Listen(e.sock, Config{
		Policy: Policy{Allow: rules, Resolve: map[string]netip.Addr{"api.test": loop}},
		Agent:  "alice", Grant: "G-alice", Ledger: e.led,
		Lookup: func(_ context.Context, host string) ([]netip.Addr, error) {
			if strings.HasSuffix(host, ".wild.test") {
				return []netip.Addr{loop}, nil
			}
			return nil, fmt.Errorf("no such host %s", host)
		},
	})
	require.NoError(t, err)
	e.srv = s
	t.Cleanup(func() { assert.NoError(t, s.Close()) })
	return e
}

// client is an HTTP client whose proxy is the unix socket.
func (e *proxyEnv) client() *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: "proxy"}),
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", e.sock)
		},
	}}
}

func (e *proxyEnv) dial(t *testing.T) net.Conn {
	c, err := net.Dial("unix", e.sock)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// connect sends a CONNECT and returns the status line and the reader.
func (e *proxyEnv) connect(t *testing.T, target string) (net.Conn, *bufio.Reader, *http.Response) {
	c := e.dial(t)
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	require.NoError(t, err)
	return c, br, resp
}

func TestProxyHTTPAbsoluteURI(t *testing.T) {
	e := newProxyEnv(t)
	resp, err := e.client().Get(fmt.Sprintf("http://api.test:%d/v1/messages", e.apiPort))
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, fmt.Sprintf("model API: GET /v1/messages host=api.test:%d", e.apiPort), string(body))

	// Another host, another port of the allowed one: refused, 403.
	for _, u := range []string{"http://evil.test/", fmt.Sprintf("http://127.0.0.1:%d/", e.apiPort), "http://api.test/"} {
		resp, err := e.client().Get(u)
		require.NoError(t, err, u)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, 403, resp.StatusCode, u)
		assert.Contains(t, string(body), "not in the allow-list", u)
	}
	recs := e.led.records()
	require.Len(t, recs, 4)
	assert.Equal(t, ledger.KindNetAllowed, recs[0].Kind)
	assert.Equal(t, ledger.OpHTTP, recs[0].Op)
	assert.Equal(t, "alice", recs[0].Agent)
	assert.Equal(t, "G-alice", recs[0].Grant)
	assert.Equal(t, fmt.Sprintf("api.test:%d: resolved to 127.0.0.1", e.apiPort), recs[0].Detail)
	for _, r := range recs[1:] {
		assert.Equal(t, ledger.KindNetRefused, r.Kind)
	}
	assert.True(t, strings.HasPrefix(recs[1].Detail, "evil.test:80: "), recs[1].Detail)
	assert.True(t, strings.HasPrefix(recs[3].Detail, "api.test:80: "), recs[3].Detail)
}

func TestProxyConnect(t *testing.T) {
	e := newProxyEnv(t)
	c, br, resp := e.connect(t, fmt.Sprintf("api.test:%d", e.apiPort))
	require.Equal(t, 200, resp.StatusCode)
	// The tunnel carries the client's own request to the API.
	fmt.Fprintf(c, "GET /tunnel HTTP/1.1\r\nHost: api.test\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	assert.Equal(t, "model API: GET /tunnel host=api.test", string(body))

	_, _, resp = e.connect(t, "evil.test:443")
	assert.Equal(t, 403, resp.StatusCode)
	// A wildcard does not lead to a loopback address.
	_, _, resp = e.connect(t, fmt.Sprintf("x.wild.test:%d", e.apiPort))
	assert.Equal(t, 403, resp.StatusCode)

	recs := e.led.records()
	require.Len(t, recs, 3)
	assert.Equal(t, ledger.KindNetAllowed, recs[0].Kind)
	assert.Equal(t, ledger.OpConnect, recs[0].Op)
	assert.Equal(t, ledger.KindNetRefused, recs[1].Kind)
	assert.Equal(t, "evil.test:443: evil.test:443 is not in the allow-list (--net allow=)", recs[1].Detail)
	assert.Equal(t, ledger.KindNetRefused, recs[2].Kind)
	assert.Contains(t, recs[2].Detail, "resolves to 127.0.0.1")
}

// socks5 connects through the proxy to a name and port, and returns the
// reply code.
func socks5(t *testing.T, c net.Conn, host string, port int) byte {
	_, err := c.Write([]byte{5, 1, 0})
	require.NoError(t, err)
	var m [2]byte
	_, err = io.ReadFull(c, m[:])
	require.NoError(t, err)
	require.Equal(t, [2]byte{5, 0}, m)
	req := append([]byte{5, 1, 0, 3, byte(len(host))}, host...)
	req = append(req, byte(port>>8), byte(port))
	_, err = c.Write(req)
	require.NoError(t, err)
	var rep [10]byte
	_, err = io.ReadFull(c, rep[:])
	require.NoError(t, err)
	return rep[1]
}

func TestProxySOCKS5(t *testing.T) {
	e := newProxyEnv(t)
	c := e.dial(t)
	require.Equal(t, byte(0), socks5(t, c, "api.test", e.apiPort))
	fmt.Fprintf(c, "GET /socks HTTP/1.1\r\nHost: api.test\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	assert.Equal(t, "model API: GET /socks host=api.test", string(body))

	assert.Equal(t, byte(socksNotAllowed), socks5(t, e.dial(t), "evil.test", 443))
	recs := e.led.records()
	require.Len(t, recs, 2)
	assert.Equal(t, ledger.KindNetAllowed, recs[0].Kind)
	assert.Equal(t, ledger.OpSocks5, recs[0].Op)
	assert.Equal(t, ledger.KindNetRefused, recs[1].Kind)
}

// TestProxyNoRecordNoConnection: a connection the ledger cannot record
// is not made.
func TestProxyNoRecordNoConnection(t *testing.T) {
	e := newProxyEnv(t)
	e.led.err = fmt.Errorf("disk full")
	_, _, resp := e.connect(t, fmt.Sprintf("api.test:%d", e.apiPort))
	assert.Equal(t, 502, resp.StatusCode)
}

// TestProxyHTTPHostIsTheJudgedHost: a plain request for an allowed URL
// reaches its server with that host in Host, whatever Host it carried.
func TestProxyHTTPHostIsTheJudgedHost(t *testing.T) {
	e := newProxyEnv(t)
	c := e.dial(t)
	fmt.Fprintf(c, "GET http://api.test:%d/x HTTP/1.1\r\nHost: other.example\r\n\r\n", e.apiPort)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	assert.Equal(t, fmt.Sprintf("model API: GET /x host=api.test:%d", e.apiPort), string(body))
}

func TestProxyRefusesGarbage(t *testing.T) {
	e := newProxyEnv(t)
	c := e.dial(t)
	fmt.Fprintf(c, "GET /relative HTTP/1.1\r\nHost: api.test\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	assert.Equal(t, 400, resp.StatusCode)
	assert.Empty(t, e.led.records())
}

// TestProxyCloseCutsOpenTunnels: stopping the proxy does not wait for a
// tunnel whose upstream says nothing.
func TestProxyCloseCutsOpenTunnels(t *testing.T) {
	quiet, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer quiet.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := quiet.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	port := quiet.Addr().(*net.TCPAddr).Port
	rules, err := ParseAllow(fmt.Sprintf("127.0.0.1:%d", port))
	require.NoError(t, err)
	sock := filepath.Join(t.TempDir(), "proxy.sock")
	s, err := Listen(sock, Config{Policy: Policy{Allow: rules}, Ledger: &fakeLedger{}})
	require.NoError(t, err)
	c, err := net.Dial("unix", sock)
	require.NoError(t, err)
	defer c.Close()
	fmt.Fprintf(c, "CONNECT 127.0.0.1:%d HTTP/1.1\r\n\r\n", port)
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
	require.NoError(t, err)
	require.Equal(t, 200, resp.StatusCode)
	up := <-accepted
	defer up.Close()
	require.NoError(t, s.Close())
	// The client's side is cut too.
	_, err = io.ReadAll(c)
	assert.NoError(t, err)
}

// TestProxyRepeatsAreCounted: the first connection to each destination
// is recorded in full, its repeats are counted in one record of the same
// kind when the proxy stops, so a loop costs the ledger a few records.
func TestProxyRepeatsAreCounted(t *testing.T) {
	e := newProxyEnv(t)
	for range 30 {
		_, _, resp := e.connect(t, "evil.test:443")
		require.Equal(t, 403, resp.StatusCode)
	}
	for range 5 {
		_, _, resp := e.connect(t, fmt.Sprintf("api.test:%d", e.apiPort))
		require.Equal(t, 200, resp.StatusCode)
	}
	require.Len(t, e.led.records(), 2)
	require.NoError(t, e.srv.Close())
	recs := e.led.records()
	require.Len(t, recs, 4)
	counts := map[ledger.Kind]int64{}
	for _, r := range recs[2:] {
		assert.NotEmpty(t, r.First)
		assert.NotEmpty(t, r.Last)
		host, _, _ := strings.Cut(r.Detail, ": ")
		counts[r.Kind+ledger.Kind(" "+host)] = r.Count
	}
	assert.Equal(t, map[ledger.Kind]int64{
		ledger.KindNetRefused + " evil.test:443":                                    29,
		ledger.KindNetAllowed + ledger.Kind(fmt.Sprintf(" api.test:%d", e.apiPort)): 4,
	}, counts)
}

// TestProxyBoundsWhatAClientSends: an overlong host is refused and
// recorded cut short; a request that never ends is cut at maxRequest.
func TestProxyBoundsWhatAClientSends(t *testing.T) {
	e := newProxyEnv(t)
	long := strings.Repeat("a", 300) + ".test"
	assert.Equal(t, byte(socksNotAllowed), socks5(t, e.dial(t), long[:255], 443))
	recs := e.led.records()
	require.Len(t, recs, 1)
	assert.Equal(t, ledger.KindNetRefused, recs[0].Kind)
	assert.Less(t, len(recs[0].Detail), 200)

	c := e.dial(t)
	go func() {
		fmt.Fprintf(c, "CONNECT api.test:%d HTTP/1.1\r\nX-Pad: ", e.apiPort)
		pad := strings.Repeat("x", 4096)
		for range 64 {
			if _, err := io.WriteString(c, pad); err != nil {
				return
			}
		}
	}()
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
	require.NoError(t, err)
	assert.Equal(t, 400, resp.StatusCode)
	assert.Len(t, e.led.records(), 1)
}
