package integration

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/audit"
	"github.com/acpfs/acpfs/internal/natsrv"
	"github.com/acpfs/acpfs/internal/testutil"
)

// These tests run one collaboration on several "hosts": `acpfs up
// --store` processes with folders of their own, joined by a NATS server
// embedded in the test process (a 3-node cluster for the failover test).

const mhCollab = "mh"

// mhServer starts one embedded JetStream server.
func mhServer(t *testing.T, port int, dir string) *mhNode {
	t.Helper()
	n := &mhNode{t: t, cfg: natsrv.Config{Name: "solo", Dir: dir, Port: port}}
	n.start()
	t.Cleanup(n.stop)
	return n
}

type mhNode struct {
	t   *testing.T
	cfg natsrv.Config
	mu  sync.Mutex
	srv *server.Server
}

func (n *mhNode) start() {
	n.t.Helper()
	s, err := natsrv.Start(n.cfg)
	require.NoError(n.t, err)
	n.mu.Lock()
	n.srv = s
	n.cfg.Port = s.Addr().(*net.TCPAddr).Port // a restart listens where clients look
	n.mu.Unlock()
}

func (n *mhNode) stop() {
	n.mu.Lock()
	s := n.srv
	n.srv = nil
	n.mu.Unlock()
	if s != nil {
		s.Shutdown()
		s.WaitForShutdown()
	}
}

func (n *mhNode) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.cfg.Port) }

// mhEnv is one collaboration and its hosts.
type mhEnv struct {
	t     *testing.T
	dir   string
	first string // folder the collaboration was initialized in
	hosts int
	// replicas of the collaboration's streams, set by the first command
	replicas string
}

type mhHost struct {
	env                *mhEnv
	name, url          string
	folder, runs, root string
	agents             []string
	proc               *testutil.Daemon
}

func newMHEnv(t *testing.T, participants ...string) *mhEnv {
	t.Helper()
	testutil.RequireFUSE(t)
	e := &mhEnv{t: t, dir: newDir(t, "multihost"), replicas: "1"}
	e.first = filepath.Join(e.dir, "init")
	args := []string{"init", "--folder", e.first, "--objective", "Design the cache layer",
		"--completion", "Cache design reviewed", "--primary-deliverable-type", "design-spec"}
	for _, p := range participants {
		args = append(args, "--participant", p)
	}
	_, stderr, code := acpfs(t, args...)
	require.Equal(t, 0, code, stderr)
	return e
}

// host prepares a host's directories. The first host's folder is a copy
// of the initialized one, whose documents and history seed the store;
// the others start empty and get everything from the store.
func (e *mhEnv) host(name, url string) *mhHost {
	e.t.Helper()
	d := filepath.Join(e.dir, name)
	h := &mhHost{env: e, name: name, url: url, folder: filepath.Join(d, "folder"), runs: filepath.Join(d, "runs"), root: filepath.Join(d, "mnt")}
	if e.hosts == 0 {
		require.NoError(e.t, os.CopyFS(h.folder, os.DirFS(e.first)))
	} else {
		require.NoError(e.t, os.MkdirAll(h.folder, 0o755))
	}
	e.hosts++
	return h
}

// grant creates, through the store, a grant that this host mounts.
func (h *mhHost) grant(agent, participant string, extra ...string) {
	h.env.t.Helper()
	args := append([]string{"grant", "create", "--store", h.url, "--collab", mhCollab, "--host", h.name,
		"--replicas", h.env.replicas, "--folder", h.env.first, "--agent", agent, "--participant", participant, "--preset", "owner"}, extra...)
	// A cluster that has just elected its JetStream leader may not serve
	// the JetStream API on every node yet ("no responders"), or answer
	// within the CLI's request timeout on a loaded machine ("unreachable"):
	// the first grant waits for it, any other failure fails.
	eventually(h.env.t, func() bool {
		_, stderr, code := acpfs(h.env.t, args...)
		if code != 0 && !strings.Contains(stderr, "no responders") && !strings.Contains(stderr, "the store is unreachable") {
			h.env.t.Fatalf("grant create: %s", stderr)
		}
		return code == 0
	}, "grant create: the store's JetStream API does not answer")
	h.agents = append(h.agents, agent)
}

// up starts the host's coordinator and waits for its views.
func (h *mhHost) up() {
	h.env.t.Helper()
	mounts, ready, args := h.upArgs()
	h.proc = pmStart(h.env.t, mounts, ready, args...)
}

// upArgs returns the views of the host's coordinator, the paths that
// answer once they serve, and its command line.
func (h *mhHost) upArgs() (mounts, ready, args []string) {
	h.env.t.Helper()
	require.NoError(h.env.t, os.MkdirAll(h.root, 0o755))
	for _, a := range h.agents {
		mounts = append(mounts, filepath.Join(h.root, a))
		ready = append(ready, filepath.Join(h.root, a, ".acpfs", "status"))
	}
	return mounts, ready, []string{"up", "--store", h.url, "--collab", mhCollab, "--host", h.name, "--replicas", h.env.replicas,
		"--runs", h.runs, "--folder", h.folder, "--root", h.root}
}

func (h *mhHost) view(agent string) string { return filepath.Join(h.root, agent) }

func (h *mhHost) events() []byte {
	h.env.t.Helper()
	b, err := os.ReadFile(filepath.Join(h.folder, "events.jsonl"))
	require.NoError(h.env.t, err)
	return b
}

func countLines(b []byte) int { return bytes.Count(b, []byte("\n")) }

// waitLines waits until every host's copy has n lines.
func waitLines(t *testing.T, n int, hosts ...*mhHost) {
	t.Helper()
	for _, h := range hosts {
		eventually(t, func() bool { return countLines(h.events()) >= n },
			fmt.Sprintf("host %s has %d lines of events.jsonl", h.name, n))
	}
}

// writeSpec writes the primary deliverable in the first host's folder
// before it starts; the store carries it to the others.
func writeSpec(t *testing.T, first *mhHost) {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(first.folder, primary), []byte(designSpec("Draft")), 0o644))
}

// drafted appends a deliverable_drafted event as alice through a view,
// numbered after what the view shows.
func drafted(view, summary string) syscall.Errno {
	b, err := os.ReadFile(filepath.Join(view, "events.jsonl"))
	if err != nil {
		return pmErrno(err)
	}
	line := pmLine(countLines(b)+1, "alice", "deliverable_drafted", summary, time.Now(),
		map[string]any{"doc": primary, "role": "primary"})
	return pmAppend(filepath.Join(view, "events.jsonl"), line)
}

// twoMHHosts runs a server and two hosts: alice's view on ha, bob's on hb.
func twoMHHosts(t *testing.T) (srv *mhNode, a, b *mhHost) {
	t.Helper()
	e := newMHEnv(t, "alice", "bob")
	srv = mhServer(t, -1, filepath.Join(e.dir, "nats"))
	a, b = e.host("ha", srv.url()), e.host("hb", srv.url())
	a.grant("alice", "alice")
	b.grant("bob", "bob")
	writeSpec(t, a)
	a.up()
	b.up()
	return srv, a, b
}

func lastError(view string) string {
	b, _ := os.ReadFile(filepath.Join(view, ".acpfs", "last-error"))
	return string(b)
}

func TestMultiHostOneHistory(t *testing.T) {
	srv, a, b := twoMHHosts(t)

	require.Zero(t, drafted(a.view("alice"), "from host a"), lastError(a.view("alice")))
	waitLines(t, 2, a, b)
	eventually(t, func() bool {
		st, err := os.ReadFile(filepath.Join(b.view("bob"), ".acpfs", "status"))
		return err == nil && strings.Contains(string(st), "last seq: 2")
	}, "bob's view on host b shows seq 2")
	// Bob's view binds him to bob, whichever host serves it.
	line := pmLine(3, "alice", "deliverable_drafted", "forged", time.Now(), map[string]any{"doc": primary, "role": "primary"})
	require.Equal(t, syscall.EPERM, pmAppend(filepath.Join(b.view("bob"), "events.jsonl"), line))
	require.Equal(t, string(a.events()), string(b.events()))

	// A sandbox or a plain mount of a host's folder would not use the
	// store: refused, naming why.
	// Another run directory, a grant file and a ledger of one's own, or
	// a coordinator without --store: all refused, as the folder itself
	// says it is a store host's copy.
	other := newDir(t, "other-runs")
	grantCopy := filepath.Join(other, "G-bob.json")
	data, err := os.ReadFile(filepath.Join(b.runs, "context_grants", "G-bob.json"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(grantCopy, data, 0o644))
	for _, args := range [][]string{
		{"run", "--folder", b.folder, "--runs", b.runs, "--grant", "G-bob", "--", "true"},
		{"run", "--folder", b.folder, "--grant", grantCopy, "--ledger", filepath.Join(other, "l.jsonl"), "--", "true"},
		{"mount", "--folder", b.folder, "--grant", grantCopy, "--ledger", filepath.Join(other, "l.jsonl"), filepath.Join(other, "mnt")},
		{"up", "--folder", b.folder, "--runs", other, "--root", filepath.Join(other, "root")},
		{"append", "--folder", b.folder, "--participant", "bob", "--event", "blocked", "--summary", "s", "--reply-to", "1"},
	} {
		_, stderr, code := acpfs(t, args...)
		require.NotEqual(t, 0, code, "%v", args)
		require.Contains(t, stderr, "served from a store", "%v", args)
	}
	// The mark cannot be taken away through a view.
	require.Error(t, unix.Removexattr(b.view("bob"), "trusted.acpfs.store"))
	require.Error(t, unix.Setxattr(b.view("bob"), "trusted.acpfs.store", []byte("x"), 0))
	_, stderr, code := acpfs(t, "append", "--folder", b.folder, "--participant", "bob", "--event", "blocked", "--summary", "s", "--reply-to", "1")
	require.NotEqual(t, 0, code)
	require.Contains(t, stderr, "served from a store")

	// Each agent reads through its view, for the audit below.
	readFile(t, filepath.Join(a.view("alice"), "proposal.md"))
	readFile(t, filepath.Join(b.view("bob"), "proposal.md"))

	// Each host's ledger is in the store, and verifies from anywhere.
	require.NoError(t, a.proc.Stop())
	require.NoError(t, b.proc.Stop())
	out, stderr, code := acpfs(t, "ledger", "verify", "--store", srv.url(), "--collab", mhCollab)
	require.Equal(t, 0, code, "%s\n%s", out, stderr)
	require.Contains(t, out, "ha")
	require.Contains(t, out, "hb")
	show, _, code := acpfs(t, "ledger", "show", "--store", srv.url(), "--collab", mhCollab, "--host", "hb", "--kind", "append_rejected")
	require.Equal(t, 0, code)
	require.Contains(t, show, "from-mismatch")

	// The audit judges each host's records against the grants the store
	// holds for that host: one report per host, naming only that host's
	// agents and grants, isolated (signatures checked with the keys each
	// host published).
	out = filepath.Join(newDir(t, "audit"), "audit.json")
	_, stderr, code = acpfs(t, "audit", "--store", srv.url(), "--collab", mhCollab, "--format", "json", "--out", out)
	require.Equal(t, 0, code, stderr)
	for host, agent := range map[string]string{"ha": "alice", "hb": "bob"} {
		var rep audit.Report
		require.NoError(t, json.Unmarshal([]byte(readFile(t, strings.TrimSuffix(out, ".json")+"."+host+".json")), &rep))
		assert.Equal(t, audit.VerdictIsolated, rep.Verdict, host)
		assert.True(t, rep.Chain.SignaturesChecked, host)
		require.Len(t, rep.Agents, 1, host)
		assert.Equal(t, agent, rep.Agents[0].Agent, host)
		assert.Equal(t, []string{"G-" + agent}, rep.Agents[0].Grants, "host %s: only its own grants", host)
		assert.NotEmpty(t, rep.Agents[0].Reads, host)
	}
}

// mhProxy forwards TCP connections to a server until cut: a host behind
// it is then cut off from the store while the others are not.
type mhProxy struct {
	ln      net.Listener
	target  string
	mu      sync.Mutex
	cut     bool
	stalled atomic.Bool // connections stay open, no byte passes
	conns   []net.Conn
	wg      sync.WaitGroup
}

func newMHProxy(t *testing.T, target string) *mhProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &mhProxy{ln: ln, target: strings.TrimPrefix(target, "nats://")}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() { ln.Close(); p.setCut(true); p.wg.Wait() })
	return p
}

func (p *mhProxy) url() string { return "nats://" + p.ln.Addr().String() }

func (p *mhProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			c.Close()
			continue
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		go func() { p.pipe(s, c); s.Close() }()
		go func() { p.pipe(c, s); c.Close() }()
	}
}

// pipe copies src to dst, holding the bytes while the proxy is stalled:
// the connection stays open, nothing gets through.
func (p *mhProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		for p.stalled.Load() {
			time.Sleep(5 * time.Millisecond)
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// setCut cuts (true) or restores (false) the connection.
func (p *mhProxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for _, c := range p.conns {
			c.Close()
		}
		p.conns = nil
	}
}

func TestMultiHostCutOffHostIsReadOnlyAndCatchesUp(t *testing.T) {
	e := newMHEnv(t, "alice", "bob")
	srv := mhServer(t, -1, filepath.Join(e.dir, "nats"))
	proxy := newMHProxy(t, srv.url())
	a, b := e.host("ha", srv.url()), e.host("hb", proxy.url())
	a.grant("alice", "alice")
	b.grant("bob", "bob", "--may-write", "notes/**")
	writeSpec(t, a)
	a.up()
	b.up()
	bob := b.view("bob")
	require.NoError(t, os.WriteFile(filepath.Join(bob, "proposal.md"), []byte("# Proposal\n\nbefore\n"), 0o644))
	require.NoError(t, os.Mkdir(filepath.Join(bob, "notes"), 0o755))

	proxy.setCut(true)
	eventually(t, func() bool {
		err := os.WriteFile(filepath.Join(bob, "notes", "probe.md"), []byte("probe\n"), 0o644)
		return errors.Is(err, syscall.EROFS)
	}, "host b's view turns read-only once cut off")
	st, err := os.ReadFile(filepath.Join(bob, ".acpfs", "status"))
	require.NoError(t, err)
	require.Contains(t, string(st), "writes: refused with EROFS, reads go on (the store is unreachable)")
	require.ErrorIs(t, os.WriteFile(filepath.Join(bob, "proposal.md"), []byte("# Proposal\n\ncut off\n"), 0o644), syscall.EROFS)
	got, err := os.ReadFile(filepath.Join(bob, "proposal.md"))
	require.NoError(t, err, "reads of the local copy go on")
	require.Equal(t, "# Proposal\n\nbefore\n", string(got))
	require.Equal(t, syscall.EROFS, drafted(bob, "from a cut-off host"))
	le, err := os.ReadFile(filepath.Join(bob, ".acpfs", "last-error"))
	require.NoError(t, err)
	require.Contains(t, string(le), "store is unreachable")

	// Host a goes on meanwhile.
	for i := range 3 {
		require.Zero(t, drafted(a.view("alice"), fmt.Sprintf("while b is away %d", i)))
	}
	require.Equal(t, 1, countLines(b.events()), "b cannot hear of them")

	proxy.setCut(false)
	waitLines(t, 4, b)
	require.Equal(t, string(a.events()), string(b.events()))
	eventually(t, func() bool {
		return os.WriteFile(filepath.Join(bob, "proposal.md"), []byte("# Proposal\n\nback\n"), 0o644) == nil
	}, "host b writes again once reconnected")
}

// A server that stops answering without closing the connection (stopped,
// overloaded) must turn the views read-only too.
func TestMultiHostStalledServerTurnsViewsReadOnly(t *testing.T) {
	e := newMHEnv(t, "alice", "bob")
	srv := mhServer(t, -1, filepath.Join(e.dir, "nats"))
	proxy := newMHProxy(t, srv.url())
	a := e.host("ha", proxy.url())
	a.grant("alice", "alice", "--may-write", "notes/**")
	writeSpec(t, a)
	a.up()
	alice := a.view("alice")
	require.NoError(t, os.Mkdir(filepath.Join(alice, "notes"), 0o755))

	proxy.stalled.Store(true)
	eventually(t, func() bool {
		st, err := os.ReadFile(filepath.Join(alice, ".acpfs", "status"))
		return err == nil && strings.Contains(string(st), "writes: refused with EROFS")
	}, "the view turns read-only while the server does not answer")
	require.ErrorIs(t, os.WriteFile(filepath.Join(alice, "notes", "n.md"), []byte("x\n"), 0o644), syscall.EROFS)
	require.Equal(t, syscall.EROFS, drafted(alice, "while stalled"))

	proxy.stalled.Store(false)
	eventually(t, func() bool {
		return os.WriteFile(filepath.Join(alice, "notes", "n.md"), []byte("back\n"), 0o644) == nil
	}, "writes open again once the server answers")
	require.Zero(t, drafted(alice, "after the stall"), lastError(alice))
}

func TestMultiHostKilledHostRestartsAndCatchesUp(t *testing.T) {
	_, a, b := twoMHHosts(t)
	require.Zero(t, drafted(a.view("alice"), "one"))
	waitLines(t, 2, b)

	b.proc.Kill()
	for i := range 5 {
		require.Zero(t, drafted(a.view("alice"), "while b is dead "+strconv.Itoa(i)))
	}
	b.up() // restarts over the dead views the killed one left
	waitLines(t, 7, b)
	require.Equal(t, string(a.events()), string(b.events()))
	st, err := os.ReadFile(filepath.Join(b.view("bob"), ".acpfs", "status"))
	require.NoError(t, err)
	require.Contains(t, string(st), "last seq: 7")
}

// freePorts returns n ports free at the time of the call.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var out []int
	var lns []net.Listener
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		lns = append(lns, ln)
		out = append(out, ln.Addr().(*net.TCPAddr).Port)
	}
	for _, ln := range lns {
		ln.Close()
	}
	return out
}

// mhCluster starts a 3-node JetStream cluster and returns its nodes.
func mhCluster(t *testing.T, dir string) []*mhNode {
	t.Helper()
	ports := freePorts(t, 6)
	var routes []string
	for i := range 3 {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", ports[3+i]))
	}
	nodes := make([]*mhNode, 3)
	var wg sync.WaitGroup
	for i := range 3 {
		nodes[i] = &mhNode{t: t, cfg: natsrv.Config{Name: fmt.Sprintf("n%d", i+1), Dir: filepath.Join(dir, fmt.Sprintf("n%d", i+1)),
			Port: ports[i], Cluster: "acpfs", ClusterPort: ports[3+i], Routes: routes}}
		t.Cleanup(nodes[i].stop)
		wg.Add(1)
		go func() { defer wg.Done(); nodes[i].start() }() // nodes wait for each other
	}
	wg.Wait()
	eventually(t, func() bool {
		leader := false
		for _, n := range nodes {
			if !n.srv.JetStreamIsCurrent() {
				return false
			}
			leader = leader || n.srv.JetStreamIsLeader()
		}
		return leader
	}, "the cluster elects a JetStream leader")
	return nodes
}

// mhWriter is one agent appending as fast as its view lets it.
type mhWriter struct {
	agent string
	host  *mhHost
	acked []string // summaries of the appends acknowledged to it
	other map[string]int
	note  string       // the last version of its note that a write acknowledged
	n     atomic.Int64 // len(acked), read while it runs
}

func (w *mhWriter) run(stop <-chan struct{}) {
	view := w.host.view(w.agent)
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		summary := fmt.Sprintf("%s-%d", w.agent, i)
		switch errno := drafted(view, summary); errno {
		case 0:
			w.acked = append(w.acked, summary)
			w.n.Add(1)
			// A document update after each event: its last version
			// must reach every host.
			note := fmt.Sprintf("# %s\n\nafter %s\n", w.agent, summary)
			if os.WriteFile(filepath.Join(view, "notes", w.agent+".md"), []byte(note), 0o644) == nil {
				w.note = note
			}
		case syscall.EPERM:
			// Another agent took the seq first: read again and retry.
		default:
			// A dead host or a store failing over: try again shortly.
			w.other[errno.Error()]++
			if errno == syscall.EIO {
				w.other["EIO: "+lastError(view)]++
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// mhAppends is how many appends the writers make in each phase of the
// stress test (before a node dies, through its failover, with a host
// dead, after its restart): 40 by default, more for a soak.
func mhAppends() int64 {
	if v, err := strconv.Atoi(os.Getenv("ACPFS_MULTIHOST_APPENDS")); err == nil && v > 0 {
		return int64(v)
	}
	return 40
}

// mhProgress waits until the writers have had n more appends
// acknowledged, and the writers of host h (if any) at least one each:
// the scenario moves on when the collaboration has, not after a time.
func mhProgress(t *testing.T, writers []*mhWriter, n int64, h *mhHost) {
	t.Helper()
	total := func() (sum int64, of map[*mhWriter]int64) {
		of = map[*mhWriter]int64{}
		for _, w := range writers {
			of[w] = w.n.Load()
			sum += of[w]
		}
		return sum, of
	}
	from, fromOf := total()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		sum, of := total()
		done := sum >= from+n
		for _, w := range writers {
			if w.host == h && of[w] == fromOf[w] {
				done = false
			}
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the writers made %d of %d appends in this phase", sum-from, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestMultiHostClusterStress: 8 agents on 3 hosts append through a
// 3-node cluster (R3); one node is killed, and one host is
// killed and restarted, on the way. The result must be one continuous
// history on every host that holds every acknowledged event.
func TestMultiHostClusterStress(t *testing.T) {
	e := newMHEnv(t, "alice", "bob")
	e.replicas = "3"
	nodes := mhCluster(t, filepath.Join(e.dir, "nats"))
	urls := []string{nodes[0].url(), nodes[1].url(), nodes[2].url()}
	var hosts []*mhHost
	for i, name := range []string{"ha", "hb", "hc"} {
		// Each host prefers another node, so the killed one had clients.
		order := append(append([]string{}, urls[i:]...), urls[:i]...)
		hosts = append(hosts, e.host(name, strings.Join(order, ",")))
	}
	var writers []*mhWriter
	for i := range 8 {
		h := hosts[i%3]
		agent := fmt.Sprintf("agent%d", i+1)
		h.grant(agent, "alice", "--may-write", "notes/**")
		writers = append(writers, &mhWriter{agent: agent, host: h, other: map[string]int{}})
	}
	writeSpec(t, hosts[0])
	require.NoError(t, os.MkdirAll(filepath.Join(hosts[0].folder, "notes"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(hosts[0].folder, "notes", "README.md"), []byte("# Notes\n"), 0o644))
	for _, h := range hosts {
		h.up()
	}
	n := mhAppends()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, w := range writers {
		wg.Add(1)
		go func() { defer wg.Done(); w.run(stop) }()
	}
	mhProgress(t, writers, n, nil)
	nodes[1].stop()
	t.Log("killed node n2")
	mhProgress(t, writers, n, nil)
	hosts[2].proc.Kill()
	t.Log("killed host hc")
	mhProgress(t, writers, n, nil)
	hosts[2].up()
	t.Log("restarted host hc")
	mhProgress(t, writers, n, hosts[2])
	close(stop)
	wg.Wait()

	acked := 0
	for _, w := range writers {
		acked += len(w.acked)
		t.Logf("%s on %s: %d appends acknowledged, other errors %v", w.agent, w.host.name, len(w.acked), w.other)
	}
	require.Positive(t, acked)
	// An append a host published just before the writers stopped may
	// still be on its way to the others: wait for the longest copy.
	final := 0
	for _, h := range hosts {
		final = max(final, countLines(h.events()))
	}
	waitLines(t, final, hosts...)
	evs, err := pmParseEvents(hosts[0].events())
	require.NoError(t, err)
	pmRequireSeqs(t, evs)
	for _, h := range hosts[1:] {
		require.Equal(t, string(hosts[0].events()), string(h.events()), "host %s", h.name)
	}
	have := map[string]int{}
	for _, ev := range evs {
		have[ev.Summary]++
	}
	for _, w := range writers {
		for _, s := range w.acked {
			require.Equal(t, 1, have[s], "acknowledged append %s is in the history once", s)
		}
	}
	t.Logf("%d events, %d acknowledged", len(evs), acked)
	// No lost document update: each agent's last note is on every host.
	for _, w := range writers {
		if w.note == "" {
			continue
		}
		for _, h := range hosts {
			p := filepath.Join(h.folder, "notes", w.agent+".md")
			// The message names what is wanted only: reading the note for
			// it (before the wait) failed the test whenever the note had
			// not reached the host yet.
			eventually(t, func() bool {
				b, err := os.ReadFile(p)
				return err == nil && string(b) == w.note
			}, fmt.Sprintf("%s's last note on host %s: want %q", w.agent, h.name, w.note))
		}
	}
}
