package store

import (
	"bytes"
	"context"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/internal/natsrv"
	"github.com/acpfs/acpfs/ledger"
)

// hostLedger is one host's run directory with a signed ledger.
type hostLedger struct {
	path, pub string
	w         *ledger.Writer
}

func newHostLedger(t *testing.T, opts ledger.Options) *hostLedger {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "communication_ledger.jsonl")
	w, err := ledger.Open(path, opts)
	require.NoError(t, err)
	t.Cleanup(func() { w.Close() })
	return &hostLedger{path: path, pub: filepath.Join(dir, ledger.PublicKeyFile), w: w}
}

func (h *hostLedger) write(t *testing.T, n int) {
	t.Helper()
	for i := range n {
		_, err := h.w.Append(ledger.Record{Kind: ledger.KindRead, Agent: "alice", Grant: "G-alice",
			Path: "docs/brief-" + strconv.Itoa(i%7) + ".md", SHA256: "0123456789abcdef"})
		require.NoError(t, err)
	}
}

// bytes returns the whole chain as the host's files hold it.
func (h *hostLedger) bytes(t *testing.T) []byte {
	t.Helper()
	names, err := ledger.Segments(h.path)
	require.NoError(t, err)
	var all []byte
	for _, n := range names {
		b, err := os.ReadFile(n)
		require.NoError(t, err)
		all = append(all, b...)
	}
	return all
}

func ship(t *testing.T, s *Store, h *hostLedger) *Shipper {
	t.Helper()
	sh, err := ShipLedger(context.Background(), s, h.path, h.pub)
	require.NoError(t, err)
	t.Cleanup(func() { sh.Stop() })
	return sh
}

func flush(t *testing.T, sh *Shipper) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, sh.Flush(ctx))
}

// fetch downloads every host's ledger through s and verifies each with
// the keys the store holds.
func fetch(t *testing.T, s *Store) map[string]*ledger.VerifyReport {
	t.Helper()
	hls, err := s.FetchLedgers(context.Background(), t.TempDir())
	require.NoError(t, err)
	out := map[string]*ledger.VerifyReport{}
	for _, hl := range hls {
		rep, err := ledger.VerifyWith(hl.Path, ledger.VerifyOptions{Keys: hl.Keys})
		require.NoError(t, err)
		require.True(t, rep.SignaturesChecked, "host %s published its key", hl.Host)
		out[hl.Host] = rep
	}
	return out
}

// downloaded is the chain as downloaded for host.
func downloaded(t *testing.T, s *Store, host string) []byte {
	t.Helper()
	hls, err := s.FetchLedgers(context.Background(), t.TempDir())
	require.NoError(t, err)
	for _, hl := range hls {
		if hl.Host == host {
			names, err := ledger.Segments(hl.Path)
			require.NoError(t, err)
			var all []byte
			for _, n := range names {
				b, err := os.ReadFile(n)
				if errors.Is(err, os.ErrNotExist) {
					continue
				}
				require.NoError(t, err)
				all = append(all, b...)
			}
			return all
		}
	}
	t.Fatalf("no ledger of host %s in the store", host)
	return nil
}

func TestLedgerShipsWhole(t *testing.T) {
	tests := []struct {
		name string
		opts ledger.Options
	}{
		{"one file", ledger.Options{Sync: ledger.SyncOff, SignEvery: 64}},
		{"segments", ledger.Options{Sync: ledger.SyncOff, SignEvery: 64, SegmentBytes: 16 << 10}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := server(t)
			h := newHostLedger(t, tt.opts)
			sh := ship(t, open(t, u, "ha"), h)
			h.write(t, 150)
			flush(t, sh)
			h.write(t, 150)
			require.NoError(t, h.w.Close())
			flush(t, sh)

			local := h.bytes(t)
			assert.Equal(t, int64(bytes.Count(local, []byte("\n"))), sh.Shipped())
			reviewer := open(t, u, "reviewer")
			reps := fetch(t, reviewer)
			require.Len(t, reps, 1)
			rep := reps["ha"]
			require.True(t, rep.OK(), "%v", rep.Problem)
			assert.Equal(t, sh.Shipped(), rep.LastSeq)
			assert.Equal(t, string(local), string(downloaded(t, reviewer, "ha")), "shipped bytes unchanged")
			if tt.opts.SegmentBytes > 0 {
				assert.Greater(t, len(rep.Files), 2, "downloaded as segments, as on the host")
			}
		})
	}
}

// restartable is an embedded server that can be stopped and started
// again on the same port and directory.
type restartable struct {
	dir  string
	port int
	url  string
	stop func()
}

func newRestartable(t *testing.T) *restartable {
	t.Helper()
	r := &restartable{dir: t.TempDir(), port: -1}
	r.start(t)
	u, err := url.Parse(r.url)
	require.NoError(t, err)
	r.port, err = strconv.Atoi(u.Port())
	require.NoError(t, err)
	t.Cleanup(func() { r.stop() })
	return r
}

func (r *restartable) start(t *testing.T) {
	t.Helper()
	s, err := natsrv.Start(natsrv.Config{Name: "t", Dir: r.dir, Port: r.port})
	require.NoError(t, err)
	r.url, r.stop = s.ClientURL(), func() { s.Shutdown(); s.WaitForShutdown() }
}

func TestLedgerShipResumesAfterRestart(t *testing.T) {
	srv := newRestartable(t)
	s := open(t, srv.url, "ha")
	h := newHostLedger(t, ledger.Options{Sync: ledger.SyncOff, SignEvery: 32, SegmentBytes: 32 << 10})
	sh := ship(t, s, h)
	h.write(t, 120)
	flush(t, sh)
	before := sh.Shipped()
	require.Positive(t, before)

	// Cut off: records stay in the local ledger, the spool.
	srv.stop()
	require.Eventually(t, func() bool { return !s.Connected() }, 30*time.Second, 10*time.Millisecond)
	h.write(t, 200)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	require.ErrorIs(t, sh.Flush(ctx), ErrOffline)
	cancel()
	assert.Equal(t, before, sh.Shipped())

	srv.start(t)
	require.Eventually(t, s.Connected, 30*time.Second, 10*time.Millisecond)
	h.write(t, 50)
	require.NoError(t, h.w.Close())
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return sh.Flush(ctx) == nil
	}, 30*time.Second, 50*time.Millisecond)

	local := h.bytes(t)
	assert.Equal(t, int64(bytes.Count(local, []byte("\n"))), sh.Shipped())
	reviewer := open(t, srv.url, "reviewer")
	rep := fetch(t, reviewer)["ha"]
	require.True(t, rep.OK(), "no gap, no duplicate: %v", rep.Problem)
	assert.Equal(t, string(local), string(downloaded(t, reviewer, "ha")))

	// A shipper started again (the daemon restarted) sends nothing twice.
	require.NoError(t, sh.Stop())
	again := ship(t, open(t, srv.url, "ha"), h)
	flush(t, again)
	assert.Equal(t, sh.Shipped(), again.Shipped())
	assert.Equal(t, string(local), string(downloaded(t, reviewer, "ha")))
}

func TestLedgerTwoHostsVerifyFromAThird(t *testing.T) {
	u := server(t)
	ha, hb := newHostLedger(t, ledger.Options{Sync: ledger.SyncOff}), newHostLedger(t, ledger.Options{Sync: ledger.SyncOff})
	sa, sb := ship(t, open(t, u, "ha"), ha), ship(t, open(t, u, "hb"), hb)
	// Two shippers of one host: the stream still holds its chain once.
	sb2 := ship(t, open(t, u, "hb"), hb)
	ha.write(t, 100)
	hb.write(t, 70)
	require.NoError(t, ha.w.Close())
	require.NoError(t, hb.w.Close())
	flush(t, sa)
	errs := make(chan error, 2)
	for _, sh := range []*Shipper{sb, sb2} {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			errs <- sh.Flush(ctx)
		}()
	}
	require.NoError(t, <-errs)
	require.NoError(t, <-errs)

	reps := fetch(t, open(t, u, "hc"))
	require.Len(t, reps, 2)
	for host, h := range map[string]*hostLedger{"ha": ha, "hb": hb} {
		rep := reps[host]
		require.True(t, rep.OK(), "%s: %v", host, rep.Problem)
		assert.Equal(t, int64(bytes.Count(h.bytes(t), []byte("\n"))), rep.LastSeq, host)
	}
	assert.NotEqual(t, reps["ha"].Keys, reps["hb"].Keys, "each host's chain is checked with its own key")
}

func TestLedgerEditInTheStreamIsDetected(t *testing.T) {
	u := server(t)
	h := newHostLedger(t, ledger.Options{Sync: ledger.SyncOff})
	sh := ship(t, open(t, u, "ha"), h)
	h.write(t, 40)
	require.NoError(t, h.w.Close())
	flush(t, sh)

	// A party that can publish to the stream copies ha's chain to a
	// subject of its own with one record edited.
	nc, err := nats.Connect(u)
	require.NoError(t, err)
	defer nc.Close()
	pub, err := os.ReadFile(h.pub)
	require.NoError(t, err)
	key := &nats.Msg{Subject: "acp.c1.ledger.hz", Data: pub, Header: nats.Header{}}
	key.Header.Set(ledgerHeader, ledgerKindKey)
	key.Header.Set(ledgerAfterHeader, "0 ")
	_, err = nc.RequestMsg(key, 5*time.Second)
	require.NoError(t, err)
	edited := bytes.Replace(h.bytes(t), []byte("docs/brief-3.md"), []byte("docs/brief-9.md"), 1)
	_, err = nc.Request("acp.c1.ledger.hz", edited, 5*time.Second)
	require.NoError(t, err)

	reps := fetch(t, open(t, u, "reviewer"))
	require.True(t, reps["ha"].OK(), "%v", reps["ha"].Problem)
	p := reps["hz"].Problem
	require.NotNil(t, p)
	// The edited record carries no hash of its own (format version 3):
	// the edit shows where the chain is next stated, and the report
	// names the records since the last that states it, the edited one
	// among them.
	edit := firstSeqOf(t, h.bytes(t), "docs/brief-3.md")
	assert.Equal(t, ledger.ProblemPrev, p.Kind)
	m := regexp.MustCompile(`one of seq (\d+)–(\d+)`).FindStringSubmatch(p.Reason)
	require.NotNil(t, m, p.Reason)
	from, _ := strconv.ParseInt(m[1], 10, 64)
	to, _ := strconv.ParseInt(m[2], 10, 64)
	assert.LessOrEqual(t, from, edit, p.Reason)
	assert.GreaterOrEqual(t, to, edit, p.Reason)
	assert.Equal(t, to+1, p.Seq, p.Reason)
}

// firstSeqOf returns the seq of the first record of chain with path.
func firstSeqOf(t *testing.T, chain []byte, path string) int64 {
	t.Helper()
	rd := ledger.NewReader(bytes.NewReader(chain))
	for {
		r, err := rd.Next()
		require.NoError(t, err, "no record of %s", path)
		if r.Path == path {
			return r.Seq
		}
	}
}

func TestLedgerShipRefusesADivergedLedger(t *testing.T) {
	u := server(t)
	s := open(t, u, "ha")
	h := newHostLedger(t, ledger.Options{Sync: ledger.SyncOff})
	sh := ship(t, s, h)
	h.write(t, 10)
	require.NoError(t, h.w.Close())
	flush(t, sh)
	require.NoError(t, sh.Stop())

	// Another chain at the same place (the run directory was wiped):
	// shipping it would fork the host's chain in the store.
	other := newHostLedger(t, ledger.Options{Sync: ledger.SyncOff})
	other.write(t, 30)
	require.NoError(t, other.w.Close())
	sh2 := ship(t, s, other)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.ErrorIs(t, sh2.Flush(ctx), ledger.ErrDiverged)
	rep := fetch(t, open(t, u, "reviewer"))["ha"]
	require.True(t, rep.OK(), "%v", rep.Problem)
	assert.Equal(t, sh.Shipped(), rep.LastSeq, "nothing of the other chain shipped")
}

func TestLedgerForgedRecordsAreNotShipped(t *testing.T) {
	u := server(t)
	h := newHostLedger(t, ledger.Options{Sync: ledger.SyncOff})
	sh := ship(t, open(t, u, "ha"), h)
	h.write(t, 20)
	require.NoError(t, h.w.Close())
	flush(t, sh)
	signed := sh.Shipped()

	// Someone who can write the ledger file but not read the key appends
	// a record that chains correctly, in the file's format.
	var last ledger.Record
	require.NoError(t, ledger.Scan(h.path, ledger.Filter{}, func(r ledger.Record) error { last = r; return nil }))
	le := ledger.NewLineEncoder(ledger.CurrentVersion)
	le.After(last)
	line, err := le.Encode(&ledger.Record{Seq: last.Seq + 1, At: last.At, Kind: ledger.KindRead, Agent: "alice", Grant: "G-alice", Path: "oracle/answers.md"})
	require.NoError(t, err)
	f, err := os.OpenFile(h.path, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.Write(line)
	require.NoError(t, err)
	require.NoError(t, f.Close())

	flush(t, sh)
	assert.Equal(t, signed, sh.Shipped(), "no signature covers it: not shipped")

	// The operator's repair moves it aside and signs a repair record:
	// shipping goes on with that, and the store never held the forgery.
	info, err := ledger.Repair(h.path)
	require.NoError(t, err)
	require.NotNil(t, info)
	flush(t, sh)
	assert.Equal(t, signed+1, sh.Shipped())
	reviewer := open(t, u, "reviewer")
	rep := fetch(t, reviewer)["ha"]
	require.True(t, rep.OK(), "%v", rep.Problem)
	require.Len(t, rep.Repairs, 1)
	assert.NotContains(t, string(downloaded(t, reviewer, "ha")), "oracle/answers.md")
}
