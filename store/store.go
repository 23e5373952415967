// Package store serves one collaboration to several hosts through NATS
// JetStream. The stream is the authority for the history: every host
// validates an append against its caught-up state and publishes it on
// condition that the stream still ends where it validated, so two hosts
// never both append line N. Each host keeps an ordinary folder as a copy
// (events.jsonl, protocol.json, documents), so views and local tools see
// the usual files. Grants live in a key-value bucket, and each host's
// ledger is shipped to a subject of its own.
//
// store knows nothing of FUSE: mount/ and the CLI wire it to views.
package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Options says which server and which collaboration.
type Options struct {
	// URL lists the servers, comma-separated (nats://host:port,...).
	URL string
	// Collab names the collaboration: letters, digits, '-' and '_'.
	Collab string
	// Host names this host (its ledger subject, its documents' author);
	// default the machine's host name.
	Host string
	// Replicas is the number of copies a cluster keeps of each stream
	// and bucket (1 for a single server, 3 for a 3-node cluster). Only
	// used when the collaboration is first created.
	Replicas int
	// Timeout bounds each request to the server (default 5 s).
	Timeout time.Duration
	// Retry keeps trying to connect at start instead of failing when no
	// server answers.
	Retry bool
	// Existing binds to a collaboration that exists and never creates
	// one: for commands that only read or change it (a mistyped name
	// would otherwise create an empty collaboration).
	Existing bool
}

// ErrNoCollab says the collaboration is not in the store.
var ErrNoCollab = errors.New("no such collaboration in the store")

// validName reports whether s names a collaboration or a host: 1 to 64
// letters, digits, '-' or '_' (subject tokens and bucket names take
// nothing else). Plain code, not a regexp: every CLI process would pay
// for compiling one at start.
func validName(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !nameByte(s[i]) {
			return false
		}
	}
	return true
}

func nameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

// hostName makes a machine's host name a valid name: every other byte
// becomes '_'.
func hostName(h string) string {
	b := []byte(h)
	for i, c := range b {
		if !nameByte(c) {
			b[i] = '_'
		}
	}
	return string(b)
}

// Store is one host's connection to a collaboration.
type Store struct {
	opts   Options
	nc     *nats.Conn
	js     jetstream.JetStream
	events jetstream.Stream
	grants jetstream.KeyValue
	docs   jetstream.KeyValue
	ledger jetstream.Stream

	connected atomic.Bool
	stop      chan struct{} // closed by Close: ends the health check
	// eventsFloor: the events stream holds at least this many messages
	// (see Events.seen).
	eventsFloor atomic.Uint64
	mu          sync.Mutex
	onChange    []func(connected bool)
}

// ErrOffline says the server cannot be reached now.
var ErrOffline = errors.New("the store is unreachable")

// Open connects and makes sure the collaboration's stream and buckets
// exist.
func Open(ctx context.Context, o Options) (*Store, error) {
	if !validName(o.Collab) {
		return nil, fmt.Errorf("collaboration name %q: use 1 to 64 letters, digits, '-' or '_'", o.Collab)
	}
	if o.Host == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("host name: %w", err)
		}
		o.Host = hostName(h)
	}
	if !validName(o.Host) {
		return nil, fmt.Errorf("host name %q: use 1 to 64 letters, digits, '-' or '_'", o.Host)
	}
	if o.Replicas <= 0 {
		o.Replicas = 1
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
	s := &Store{opts: o, stop: make(chan struct{})}
	nopts := []nats.Option{
		nats.Name("acpfs " + o.Host),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(200 * time.Millisecond),
		nats.Timeout(o.Timeout),
		nats.DisconnectErrHandler(func(*nats.Conn, error) { s.setConnected(false) }),
		nats.ReconnectHandler(func(*nats.Conn) { s.setConnected(true) }),
		nats.ConnectHandler(func(*nats.Conn) { s.setConnected(true) }),
		nats.ClosedHandler(func(*nats.Conn) { s.setConnected(false) }),
	}
	if o.Retry {
		nopts = append(nopts, nats.RetryOnFailedConnect(true))
	}
	nc, err := nats.Connect(o.URL, nopts...)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", o.URL, err)
	}
	s.nc = nc
	s.connected.Store(nc.IsConnected())
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	s.js = js
	if err := s.ensure(ctx); err != nil {
		nc.Close()
		return nil, err
	}
	go s.health()
	return s, nil
}

// healthEvery is how often the server is asked to answer a ping.
const healthEvery = time.Second

// health pings the server: a server that stops answering without closing
// the connection (stopped, overloaded, partitioned behind a proxy) counts
// as unreachable until it answers again, so that views turn read-only
// within seconds instead of taking writes they cannot publish.
func (s *Store) health() {
	t := time.NewTicker(healthEvery)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		if !s.nc.IsConnected() {
			continue // the connection's handlers say so
		}
		s.setConnected(s.nc.FlushTimeout(min(s.opts.Timeout, 2*time.Second)) == nil)
	}
}

// unreachable marks the server unreachable after a request timed out;
// the health check says when it answers again.
func (s *Store) unreachable(err error) {
	if errors.Is(err, ErrOffline) {
		s.setConnected(false)
	}
}

// ensure creates the collaboration's stream and buckets if they are
// missing, and binds to them.
func (s *Store) ensure(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 4*s.opts.Timeout)
	defer cancel()
	c, r := s.opts.Collab, s.opts.Replicas
	var err error
	s.events, err = s.stream(ctx, jetstream.StreamConfig{
		Name:        "ACP_" + c + "_EVENTS",
		Description: "acpfs: the history (events.jsonl) of collaboration " + c,
		Subjects:    []string{s.eventsSubject()},
		Storage:     jetstream.FileStorage,
		Replicas:    r,
		// The history is append-only: nothing may delete or purge it.
		DenyDelete: true,
		DenyPurge:  true,
		Duplicates: 2 * time.Minute,
	})
	if errors.Is(err, ErrNoCollab) {
		return fmt.Errorf("collaboration %s: %w (check --collab and --store)", c, err)
	}
	if err != nil {
		return fmt.Errorf("events stream of %s: %w", c, err)
	}
	s.ledger, err = s.stream(ctx, jetstream.StreamConfig{
		Name:        "ACP_" + c + "_LEDGER",
		Description: "acpfs: every host's ledger of collaboration " + c,
		Subjects:    []string{s.ledgerSubject("*")},
		Storage:     jetstream.FileStorage,
		Replicas:    r,
		DenyDelete:  true,
		DenyPurge:   true,
		Duplicates:  2 * time.Minute,
	})
	if err != nil {
		return fmt.Errorf("ledger stream of %s: %w", c, err)
	}
	s.grants, err = s.bucket(ctx, jetstream.KeyValueConfig{
		Bucket:      "ACP_" + c + "_GRANTS",
		Description: "acpfs: context grants of collaboration " + c,
		History:     16,
		Storage:     jetstream.FileStorage,
		Replicas:    r,
	})
	if err != nil {
		return fmt.Errorf("grants bucket of %s: %w", c, err)
	}
	s.docs, err = s.bucket(ctx, jetstream.KeyValueConfig{
		Bucket:       "ACP_" + c + "_DOCS",
		Description:  "acpfs: documents and deliverables of collaboration " + c,
		History:      64,
		Storage:      jetstream.FileStorage,
		Replicas:     r,
		MaxValueSize: maxDocValue,
	})
	if err != nil {
		return fmt.Errorf("documents bucket of %s: %w", c, err)
	}
	return nil
}

// stream binds to an existing stream, or creates it: a collaboration's
// configuration (its replicas above all) is set once by whoever creates
// it, never changed by a host that connects later with other options.
func (s *Store) stream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	st, err := s.js.Stream(ctx, cfg.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) && s.opts.Existing {
		return nil, ErrNoCollab
	}
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		st, err = s.js.CreateStream(ctx, cfg)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			st, err = s.js.Stream(ctx, cfg.Name)
		}
	}
	return st, offline(err)
}

// bucket is stream for a key-value bucket.
func (s *Store) bucket(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := s.js.KeyValue(ctx, cfg.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) && s.opts.Existing {
		return nil, ErrNoCollab
	}
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = s.js.CreateKeyValue(ctx, cfg)
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = s.js.KeyValue(ctx, cfg.Bucket)
		}
	}
	return kv, offline(err)
}

func (s *Store) eventsSubject() string         { return "acp." + s.opts.Collab + ".events" }
func (s *Store) ledgerSubject(h string) string { return "acp." + s.opts.Collab + ".ledger." + h }

// Host returns this host's name.
func (s *Store) Host() string { return s.opts.Host }

// Collab returns the collaboration's name.
func (s *Store) Collab() string { return s.opts.Collab }

// Connected reports whether the server answers now.
func (s *Store) Connected() bool { return s.connected.Load() && s.nc.IsConnected() }

// Check returns ErrOffline while the server cannot be reached: writes
// must not go on then, or hosts would fork the folder.
func (s *Store) Check() error {
	if !s.Connected() {
		return ErrOffline
	}
	return nil
}

// OnChange registers fn to be called when the connection goes down or
// comes back.
func (s *Store) OnChange(fn func(connected bool)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onChange = append(s.onChange, fn)
}

func (s *Store) setConnected(up bool) {
	if s.connected.Swap(up) == up {
		return
	}
	slog.Info("store connection", "connected", up, "collab", s.opts.Collab)
	s.mu.Lock()
	fns := append([]func(bool){}, s.onChange...)
	s.mu.Unlock()
	for _, fn := range fns {
		fn(up)
	}
}

// Close closes the connection.
func (s *Store) Close() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	if s.nc != nil {
		s.nc.Close()
	}
}

// ctx bounds one request.
func (s *Store) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), s.opts.Timeout)
}

// noFollow: the folder is written by agents; the daemon never follows a
// link planted there.
const noFollow = syscall.O_NOFOLLOW

// maxDocValue bounds one document revision in the bucket (content and
// metadata).
const maxDocValue = 8 << 20
