package integration

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The model APIs the recipes of docs/agents.md allow, which the fake
// answers for.
const (
	anthropicAPI = "api.anthropic.com"
	openaiAPI    = "api.openai.com"
	geminiAPI    = "generativelanguage.googleapis.com"
)

// fakeReply is what the fake model answers every prompt with.
const fakeReply = "FAKE MODEL: the design holds"

// fakeModelAPI stands for the three model APIs on this machine's
// loopback, port 443, with a certificate of a CA of its own: the agent
// CLIs reach it through acpfs run's proxy (--resolve HOST=IP) and trust
// it through the CA file the test hands them, and it answers their
// requests with fakeReply in each API's own wire format.
type fakeModelAPI struct {
	ip    string // the loopback address it listens on
	caDir string // holds ca.pem, readable by every uid
	mu    sync.Mutex
	seen  []fakeRequest
}

// fakeRequest is one request the fake API got.
type fakeRequest struct{ host, method, path, key string }

// startFakeModelAPI starts the fake API for the test; it stops at
// cleanup. caDir is made by mkdir (e.newDir), so that an unprivileged
// caller may show it to its sandbox.
func startFakeModelAPI(t *testing.T, caDir string) *fakeModelAPI {
	t.Helper()
	a := &fakeModelAPI{caDir: caDir}
	cert := a.certificates(t)
	ln := listenLoopback443(t)
	a.ip = ln.Addr().(*net.TCPAddr).IP.String()
	// The CLIs' first tries (a WebSocket, a host they then give up) end
	// in handshake errors the server would log: nothing to report.
	srv := &http.Server{Handler: a, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}, ReadHeaderTimeout: time.Minute,
		ErrorLog: log.New(io.Discard, "", 0)}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { _ = srv.Close() })
	return a
}

// listenLoopback443 listens on port 443 of a loopback address of this
// test binary's own (127.0.0.0/8 is all loopback): the recipes allow
// their API host on 443 only, and other test binaries may be listening
// on another address at the same time.
func listenLoopback443(t *testing.T) net.Listener {
	t.Helper()
	base := os.Getpid() % 250
	for i := 0; i < 250; i++ {
		ip := fmt.Sprintf("127.77.%d.1", (base+i)%250+1)
		ln, err := net.Listen("tcp", ip+":443")
		if err == nil {
			return ln
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			require.NoError(t, err)
		}
	}
	t.Fatal("no loopback address with port 443 free")
	return nil
}

// certificates makes a CA (written to caDir/ca.pem) and the server's
// certificate for the three API hosts, signed by it: some clients
// (rustls) refuse a self-signed server certificate that is its own CA.
func (a *fakeModelAPI) certificates(t *testing.T) tls.Certificate {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	now := time.Now()
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "acpfs test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	caCert, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(a.caDir, "ca.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o644))

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "fake model API"},
		DNSNames: []string{anthropicAPI, openaiAPI, geminiAPI}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// caFlags are the flags that let a recipe's CLI trust the fake API: its
// CA shown read-only, and named by the variables the CLIs read (Node.js
// and Bun, Codex).
func (a *fakeModelAPI) caFlags(host string) []string {
	ca := filepath.Join(a.caDir, "ca.pem")
	return []string{"--resolve", host + "=" + a.ip, "--ro", a.caDir, "--env", "NODE_EXTRA_CA_CERTS=" + ca, "--env", "CODEX_CA_CERTIFICATE=" + ca}
}

// requests returns what the fake API was asked so far.
func (a *fakeModelAPI) requests() []fakeRequest {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]fakeRequest(nil), a.seen...)
}

// ServeHTTP answers a model request of any of the three APIs with
// fakeReply, and anything else with 404.
func (a *fakeModelAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 4<<20))
	key := r.Header.Get("x-api-key")
	if key == "" {
		key = r.Header.Get("x-goog-api-key")
	}
	if key == "" {
		key = strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	}
	a.mu.Lock()
	a.seen = append(a.seen, fakeRequest{host: r.Host, method: r.Method, path: r.URL.Path, key: key})
	a.mu.Unlock()
	var req struct {
		Stream bool `json:"stream"`
	}
	_ = json.Unmarshal(body, &req)
	switch p := r.URL.Path; {
	case r.Method == http.MethodPost && p == "/v1/messages":
		anthropicReply(w, req.Stream)
	case p == "/v1/responses" && r.Method == http.MethodGet:
		// Codex tries a WebSocket first: told so, it falls back to HTTPS.
		http.Error(w, "use HTTPS", http.StatusUpgradeRequired)
	case r.Method == http.MethodPost && p == "/v1/responses":
		sse(w, []sseEvent{
			{"response.created", map[string]any{"type": "response.created", "response": map[string]any{"id": "resp_fake"}}},
			{"response.output_item.done", map[string]any{"type": "response.output_item.done", "output_index": 0, "item": map[string]any{
				"type": "message", "role": "assistant", "id": "msg_fake", "content": []any{map[string]any{"type": "output_text", "text": fakeReply}}}}},
			{"response.completed", map[string]any{"type": "response.completed", "response": map[string]any{"id": "resp_fake", "usage": map[string]any{
				"input_tokens": 1, "input_tokens_details": nil, "output_tokens": 1, "output_tokens_details": nil, "total_tokens": 2}}}},
		})
	case r.Method == http.MethodPost && (strings.HasSuffix(p, ":streamGenerateContent") || strings.HasSuffix(p, ":generateContent")):
		d := map[string]any{"candidates": []any{map[string]any{"content": map[string]any{"parts": []any{map[string]any{"text": fakeReply}}, "role": "model"},
			"finishReason": "STOP", "index": 0}}, "usageMetadata": map[string]any{"promptTokenCount": 1, "candidatesTokenCount": 1, "totalTokenCount": 2}}
		if r.URL.Query().Get("alt") == "sse" {
			sse(w, []sseEvent{{"", d}})
			return
		}
		writeJSON(w, d)
	default:
		http.NotFound(w, r)
	}
}

// anthropicReply is a Messages API answer: a stream of events, or one
// message.
func anthropicReply(w http.ResponseWriter, stream bool) {
	msg := map[string]any{"id": "msg_fake", "type": "message", "role": "assistant", "model": "claude-fake", "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": 1, "output_tokens": 1}}
	if !stream {
		msg["content"], msg["stop_reason"] = []any{map[string]any{"type": "text", "text": fakeReply}}, "end_turn"
		writeJSON(w, msg)
		return
	}
	msg["content"], msg["stop_reason"] = []any{}, nil
	sse(w, []sseEvent{
		{"message_start", map[string]any{"type": "message_start", "message": msg}},
		{"content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""}}},
		{"content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "text_delta", "text": fakeReply}}},
		{"content_block_stop", map[string]any{"type": "content_block_stop", "index": 0}},
		{"message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": "end_turn", "stop_sequence": nil},
			"usage": map[string]any{"output_tokens": 2}}},
		{"message_stop", map[string]any{"type": "message_stop"}},
	})
}

// sseEvent is one server-sent event: its name ("" for none) and data.
type sseEvent struct {
	name string
	data any
}

func sse(w http.ResponseWriter, events []sseEvent) {
	w.Header().Set("Content-Type", "text/event-stream")
	for _, e := range events {
		b, _ := json.Marshal(e.data)
		if e.name != "" {
			fmt.Fprintf(w, "event: %s\n", e.name)
		}
		fmt.Fprintf(w, "data: %s\n\n", b)
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
