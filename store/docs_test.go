package store

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	natsserver "github.com/nats-io/nats-server/v2/server"

	"github.com/acpfs/acpfs/internal/digest"
	"github.com/acpfs/acpfs/internal/natsrv"
	"github.com/acpfs/acpfs/ledger"
	"github.com/acpfs/acpfs/protocol"
)

// docHost is one host of a test: a store connection, a folder and the
// documents' sync between them.
type docHost struct {
	t      *testing.T
	name   string
	dir    string
	url    string
	s      *Store
	d      *Docs
	mu     sync.Mutex
	rec    []string // "kind rel"
	frozen map[string]string
}

const runDir = "agent_runs"

func newDocHost(t *testing.T, url, name, dir string) *docHost {
	t.Helper()
	require.NoError(t, os.MkdirAll(dir, 0o755))
	s, err := Open(context.Background(), Options{URL: url, Collab: "c1", Host: name, Timeout: 2 * time.Second})
	require.NoError(t, err)
	t.Cleanup(s.Close)
	h := &docHost{t: t, name: name, dir: dir, url: url, s: s, frozen: map[string]string{}}
	h.start()
	return h
}

func (h *docHost) start() {
	h.t.Helper()
	d, err := SyncDocs(context.Background(), h.s, h.dir, DocsOptions{
		Skip: func(rel string) bool { return rel == runDir },
		Frozen: func(rel string) (string, bool) {
			h.mu.Lock()
			defer h.mu.Unlock()
			sum, ok := h.frozen[rel]
			return sum, ok
		},
		Record: func(kind ledger.Kind, rel, detail string) {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.rec = append(h.rec, string(kind)+" "+rel)
		},
	})
	require.NoError(h.t, err)
	h.d = d
	h.t.Cleanup(func() { h.stop() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(h.t, d.Bootstrap(ctx))
}

func (h *docHost) stop() {
	if h.d != nil {
		require.NoError(h.t, h.d.Close())
		h.d = nil
	}
}

func (h *docHost) sync() {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(h.t, h.d.Sync(ctx))
}

func (h *docHost) recorded(kind ledger.Kind, rel string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.rec {
		if r == string(kind)+" "+rel {
			return true
		}
	}
	return false
}

func (h *docHost) write(rel, content string) {
	h.t.Helper()
	p := filepath.Join(h.dir, rel)
	require.NoError(h.t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(h.t, os.WriteFile(p, []byte(content), 0o644))
}

// read returns rel's content, or "" when it is absent.
func (h *docHost) read(rel string) string {
	b, err := os.ReadFile(filepath.Join(h.dir, rel))
	if err != nil {
		return ""
	}
	return string(b)
}

// files lists the folder's synced files and their content.
func (h *docHost) files() map[string]string {
	out := map[string]string{}
	_ = filepath.WalkDir(h.dir, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(h.dir, p)
		if de.IsDir() {
			if rel == runDir {
				return filepath.SkipDir
			}
			return nil
		}
		if rel == protocol.EventsFile || strings.HasPrefix(de.Name(), ".") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err == nil {
			out[filepath.ToSlash(rel)] = string(b)
		}
		return nil
	})
	return out
}

func eventually(t *testing.T, cond func() bool, msg string, args ...any) {
	t.Helper()
	require.Eventually(t, cond, 30*time.Second, 20*time.Millisecond, append([]any{msg}, args...)...)
}

// twoHosts starts a server and hosts ha and hb on empty folders.
func twoHosts(t *testing.T) (*docHost, *docHost) {
	t.Helper()
	url := server(t)
	base := t.TempDir()
	return newDocHost(t, url, "ha", filepath.Join(base, "a")), newDocHost(t, url, "hb", filepath.Join(base, "b"))
}

func (h *docHost) recordedKind(kind ledger.Kind) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.rec {
		if strings.HasPrefix(r, string(kind)+" ") {
			return true
		}
	}
	return false
}

func TestDocsFollowWritesAndRemovals(t *testing.T) {
	a, b := twoHosts(t)
	outside := t.TempDir()
	steps := []struct {
		name string
		on   *docHost // the host that acts; the other one must follow
		do   func(h *docHost)
		want map[string]string // "" for absent
	}{
		{"create", a, func(h *docHost) { h.write("deliverables/spec.md", "v1") },
			map[string]string{"deliverables/spec.md": "v1"}},
		{"overwrite", a, func(h *docHost) { h.write("deliverables/spec.md", "v2") },
			map[string]string{"deliverables/spec.md": "v2"}},
		{"the other host writes back", b, func(h *docHost) { h.write("deliverables/spec.md", "v3 from b") },
			map[string]string{"deliverables/spec.md": "v3 from b"}},
		{"rename into place", a, func(h *docHost) {
			h.write("tmpname", "v4")
			require.NoError(t, os.Rename(filepath.Join(h.dir, "tmpname"), filepath.Join(h.dir, "deliverables/spec.md")))
		}, map[string]string{"deliverables/spec.md": "v4", "tmpname": ""}},
		{"directory moved in", a, func(h *docHost) {
			require.NoError(t, os.MkdirAll(filepath.Join(outside, "notes", "deep"), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(outside, "notes", "deep", "n.md"), []byte("note"), 0o644))
			require.NoError(t, os.Rename(filepath.Join(outside, "notes"), filepath.Join(h.dir, "notes")))
		}, map[string]string{"notes/deep/n.md": "note"}},
		{"file in the moved directory", a, func(h *docHost) { h.write("notes/deep/m.md", "more") },
			map[string]string{"notes/deep/m.md": "more"}},
		{"directory renamed", a, func(h *docHost) {
			require.NoError(t, os.Rename(filepath.Join(h.dir, "notes"), filepath.Join(h.dir, "archive")))
		}, map[string]string{"notes/deep/n.md": "", "archive/deep/n.md": "note", "archive/deep/m.md": "more"}},
		{"remove", b, func(h *docHost) { require.NoError(t, os.Remove(filepath.Join(h.dir, "deliverables/spec.md"))) },
			map[string]string{"deliverables/spec.md": ""}},
		{"create again after removal", a, func(h *docHost) { h.write("deliverables/spec.md", "v5") },
			map[string]string{"deliverables/spec.md": "v5"}},
		{"run directory never synced", a, func(h *docHost) { h.write(runDir+"/x.json", "secret") },
			map[string]string{runDir + "/x.json": ""}},
	}
	for _, st := range steps {
		other := b
		if st.on == b {
			other = a
		}
		st.do(st.on)
		for rel, want := range st.want {
			eventually(t, func() bool { return other.read(rel) == want },
				"%s: %s on %s is %q, want %q", st.name, rel, other.name, other.read(rel), want)
		}
	}
	a.sync()
	b.sync()
	assert.Equal(t, a.files(), b.files())
}

func TestDocsStaleWriteKeepsBothVersions(t *testing.T) {
	const rel = "deliverables/spec.md"
	tests := []struct {
		name  string
		loser string                            // b's version, which reaches the store last
		stale func(t *testing.T, a, b *docHost) // b writes loser on top of v1 while a writes "v2 by a"
	}{
		{"written while the newer revision arrives", "v3 by b", func(t *testing.T, a, b *docHost) {
			f, err := os.OpenFile(filepath.Join(b.dir, rel), os.O_WRONLY|os.O_TRUNC, 0)
			require.NoError(t, err)
			_, err = f.WriteString("v3 by b")
			require.NoError(t, err)
			a.write(rel, "v2 by a")
			a.sync()
			b.sync()
			require.NoError(t, f.Close())
		}},
		{"edited while the sync was stopped", "v3 by b", func(t *testing.T, a, b *docHost) {
			b.stop()
			a.write(rel, "v2 by a")
			a.sync()
			b.write(rel, "v3 by b")
			b.start()
		}},
		{"writes go on after the newer revision arrived", "part 1, part 2", func(t *testing.T, a, b *docHost) {
			f, err := os.OpenFile(filepath.Join(b.dir, rel), os.O_WRONLY|os.O_TRUNC, 0)
			require.NoError(t, err)
			_, err = f.WriteString("part 1, ")
			require.NoError(t, err)
			a.write(rel, "v2 by a")
			a.sync()
			b.sync()
			_, err = f.WriteString("part 2")
			require.NoError(t, err)
			require.NoError(t, f.Close())
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := twoHosts(t)
			a.write(rel, "v1")
			a.sync()
			b.sync()
			require.Equal(t, "v1", b.read(rel))
			tt.stale(t, a, b)
			// The first revision to reach the store keeps the name; the
			// other version is beside it, on every host.
			kept := conflictName(rel, "hb", digest.Bytes([]byte(tt.loser))[:12])
			for _, h := range []*docHost{a, b} {
				eventually(t, func() bool { return h.read(rel) == "v2 by a" && h.read(kept) == tt.loser },
					"%s: %s=%q, %s=%q", h.name, rel, h.read(rel), kept, h.read(kept))
			}
			eventually(t, func() bool { return b.recorded(RecordConflict, rel) }, "conflict recorded on hb")
			a.sync()
			b.sync()
			assert.Equal(t, a.files(), b.files())
		})
	}
}

func TestDocsFrozenDeliverable(t *testing.T) {
	const rel = "deliverables/spec.md"
	a, b := twoHosts(t)
	a.write(rel, "frozen text")
	a.sync()
	b.sync()
	b.mu.Lock()
	b.frozen[rel] = digest.Bytes([]byte("frozen text"))
	b.mu.Unlock()

	// a has not seen the freeze yet: b refuses its new version.
	a.write(rel, "changed after the freeze")
	a.sync()
	b.sync()
	assert.Equal(t, "frozen text", b.read(rel))
	assert.True(t, b.recorded(RecordFrozen, rel))

	// Nor does b publish a local copy that differs from the frozen hash.
	b.write(rel, "tampered on disk")
	b.sync()
	a.sync()
	assert.Equal(t, "changed after the freeze", a.read(rel))
}

func TestDocsCarryModes(t *testing.T) {
	a, b := twoHosts(t)
	outside := t.TempDir()
	// put writes rel on a with mode perm, renamed into place so that the
	// sync never sees it with another mode.
	put := func(rel, content string, perm os.FileMode) {
		tmp := filepath.Join(outside, "tmp")
		require.NoError(t, os.WriteFile(tmp, []byte(content), 0o600))
		require.NoError(t, os.Chmod(tmp, perm))
		p := filepath.Join(a.dir, rel)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.Rename(tmp, p))
	}
	mode := func(rel string) uint32 {
		var st unix.Stat_t
		if unix.Lstat(filepath.Join(b.dir, rel), &st) != nil {
			return 0
		}
		return st.Mode
	}
	tests := []struct {
		name    string
		rel     string
		perm    os.FileMode
		want    uint32            // rel's mode on b
		dirs    map[string]uint32 // directories b makes on the way
		content string
	}{
		{"private file, private directories", "secret/deep/key.md", 0o600, 0o600,
			map[string]uint32{"secret": 0o700, "secret/deep": 0o700}, "k"},
		{"executable", "bin/run.sh", 0o750, 0o750, map[string]uint32{"bin": 0o750}, "#!/bin/sh\n"},
		{"set-id and sticky bits are not carried", "tool", 0o755 | os.ModeSetuid | os.ModeSetgid | os.ModeSticky, 0o755, nil, "t"},
		{"a new revision brings its mode", "notes.md", 0o644, 0o644, nil, "v1"},
		{"a narrower mode replaces a wider one", "notes.md", 0o600, 0o600, nil, "v2"},
	}
	for _, tt := range tests {
		put(tt.rel, tt.content, tt.perm)
		eventually(t, func() bool { return b.read(tt.rel) == tt.content }, "%s: %s reaches b", tt.name, tt.rel)
		assert.Equal(t, unix.S_IFREG|tt.want, mode(tt.rel), "%s: %s", tt.name, tt.rel)
		for dir, want := range tt.dirs {
			assert.Equal(t, unix.S_IFDIR|want, mode(dir), "%s: %s", tt.name, dir)
		}
	}
}

// TestConflictName pins the format grants/ relies on to judge a
// conflict copy by its original's name.
func TestConflictName(t *testing.T) {
	long := strings.Repeat("é", 120) // 240 bytes
	tests := []struct {
		rel, host, tag, want string
	}{
		{"deliverables/spec.md", "hb", "0123456789ab", "deliverables/spec.md.conflict-hb-0123456789ab"},
		{"proposal.md", "host-2_x", "local", "proposal.md.conflict-host-2_x-local"},
		{"a/b/c.txt", "h", "local3", "a/b/c.txt.conflict-h-local3"},
		// Cut to 255 bytes, never inside a character.
		{"d/" + long, "hbc", "0123456789ab", "d/" + strings.Repeat("é", 114) + ".conflict-hbc-0123456789ab"},
	}
	for _, tt := range tests {
		got := conflictName(tt.rel, tt.host, tt.tag)
		assert.Equal(t, tt.want, got)
		assert.LessOrEqual(t, len(path.Base(got)), 255)
		assert.True(t, utf8.ValidString(got))
	}
}

func TestDocsRefusesBadEntries(t *testing.T) {
	a, b := twoHosts(t)
	escape := filepath.Join(filepath.Dir(b.dir), "escape.md")
	good := func(rel, content string) []byte { return a.d.encode(rel, []byte(content), 0o644, 0, "") }
	tests := []struct {
		name  string
		key   string
		value []byte
		rel   string // what b must not have
	}{
		{"parent directory", keyOf("../escape.md"), good("../escape.md", "x"), "../escape.md"},
		{"absolute", keyOf("/tmp/abs.md"), good("/tmp/abs.md", "x"), "tmp/abs.md"},
		{"dot component", keyOf("a/./b.md"), good("a/./b.md", "x"), "a/b.md"},
		{"history", keyOf(protocol.EventsFile), good(protocol.EventsFile, "{}\n"), protocol.EventsFile},
		{"run directory", keyOf(runDir + "/g.json"), good(runDir+"/g.json", "x"), runDir + "/g.json"},
		{"staging", keyOf(".acpfs-staging/x"), good(".acpfs-staging/x", "x"), ".acpfs-staging/x"},
		{"header names another path", keyOf("doc.md"), good("other.md", "x"), "doc.md"},
		{"content does not match its hash", keyOf("hash.md"),
			[]byte(strings.Replace(string(good("hash.md", "good")), "good", "evil", 1)), "hash.md"},
		{"no header", keyOf("raw.md"), []byte("just text"), "raw.md"},
		{"key not base64", "not-base64-a", good("x", "x"), "x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := a.s.ctx()
			defer cancel()
			_, err := a.s.docs.Put(ctx, tt.key, tt.value)
			require.NoError(t, err)
			b.sync()
			_, err = os.Lstat(filepath.Join(b.dir, tt.rel))
			assert.ErrorIs(t, err, fs.ErrNotExist)
		})
	}
	_, err := os.Lstat(escape)
	assert.ErrorIs(t, err, fs.ErrNotExist)
	b.mu.Lock()
	defer b.mu.Unlock()
	assert.Len(t, b.rec, len(tests))
	for _, r := range b.rec {
		assert.True(t, strings.HasPrefix(r, string(RecordRefused)+" "), r)
	}
}

func TestDocsSymlinkNotFollowed(t *testing.T) {
	tests := []struct {
		name    string
		plant   func(t *testing.T, bdir, outside string) // in b's folder
		rel     string                                   // a writes it
		applied bool                                     // b gets it as a regular file
	}{
		{"symlink at the file", func(t *testing.T, bdir, outside string) {
			require.NoError(t, os.MkdirAll(filepath.Join(bdir, "deliverables"), 0o755))
			require.NoError(t, os.Symlink(filepath.Join(outside, "victim"), filepath.Join(bdir, "deliverables", "spec.md")))
		}, "deliverables/spec.md", true},
		{"symlink at a directory", func(t *testing.T, bdir, outside string) {
			require.NoError(t, os.Symlink(outside, filepath.Join(bdir, "notes")))
		}, "notes/victim", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url := server(t)
			base, outside := t.TempDir(), t.TempDir()
			require.NoError(t, os.WriteFile(filepath.Join(outside, "victim"), []byte("untouched"), 0o600))
			bdir := filepath.Join(base, "b")
			require.NoError(t, os.MkdirAll(bdir, 0o755))
			tt.plant(t, bdir, outside)
			a := newDocHost(t, url, "ha", filepath.Join(base, "a"))
			b := newDocHost(t, url, "hb", bdir)
			a.write(tt.rel, "from a")
			a.sync()
			b.sync()
			if tt.applied {
				fi, err := os.Lstat(filepath.Join(bdir, tt.rel))
				require.NoError(t, err)
				assert.True(t, fi.Mode().IsRegular(), "the link was replaced")
				assert.Equal(t, "from a", b.read(tt.rel))
			} else {
				assert.True(t, b.recorded(RecordRefused, tt.rel))
			}
			got, err := os.ReadFile(filepath.Join(outside, "victim"))
			require.NoError(t, err)
			assert.Equal(t, "untouched", string(got))
			ents, err := os.ReadDir(outside)
			require.NoError(t, err)
			assert.Len(t, ents, 1, "nothing was made outside the folder")
		})
	}
}

func TestDocsBootstrapEmptyFolder(t *testing.T) {
	url := server(t)
	base := t.TempDir()
	adir, bdir := filepath.Join(base, "a"), filepath.Join(base, "b")
	_, err := protocol.Init(protocol.InitOptions{Folder: adir, Participants: []string{"alice", "bob"},
		Objective: "o", Completion: []string{"c"}, PrimaryType: "design-spec"})
	require.NoError(t, err)
	a := newDocHost(t, url, "ha", adir)
	b := newDocHost(t, url, "hb", bdir) // Bootstrap returned: b's folder is complete
	want := a.files()
	require.Contains(t, want, protocolJSON)
	require.Contains(t, want, "deliverables/design-spec.md")
	assert.Equal(t, want, b.files())

	// The fields each host derives from the history are never published.
	ctx, cancel := a.s.ctx()
	defer cancel()
	before, err := a.s.docs.Get(ctx, keyOf(protocolJSON))
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(a.read(protocolJSON)), &m))
	m["updatedAt"], m["currentPhase"], m["waitingFor"] = "2099-01-01T00:00:00Z", "reviewing", []string{"bob"}
	churn, err := json.MarshalIndent(m, "", "  ")
	require.NoError(t, err)
	a.write(protocolJSON, string(churn))
	a.sync()
	b.sync()
	after, err := a.s.docs.Get(ctx, keyOf(protocolJSON))
	require.NoError(t, err)
	assert.Equal(t, before.Revision(), after.Revision())
	assert.NotEqual(t, a.read(protocolJSON), b.read(protocolJSON), "b keeps its own derived fields")
}

func TestDocsCatchUpAfterReconnect(t *testing.T) {
	r := newRestartable(t)
	url := r.url
	base := t.TempDir()
	a := newDocHost(t, url, "ha", filepath.Join(base, "a"))
	b := newDocHost(t, url, "hb", filepath.Join(base, "b"))
	a.write("kept.md", "before")
	a.sync()
	b.sync()

	r.stop()
	eventually(t, func() bool { return !a.s.Connected() && !b.s.Connected() }, "both hosts see the server gone")
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	require.ErrorIs(t, a.d.Sync(ctx), ErrOffline)
	// Disk writes behind the views' backs while cut off.
	a.write("offline.md", "written while offline")
	a.write("kept.md", "changed while offline")
	require.NoError(t, os.Remove(filepath.Join(b.dir, "kept.md")))
	b.write("from-b.md", "b offline")

	r.start(t)
	for rel, want := range map[string]string{"offline.md": "written while offline", "from-b.md": "b offline"} {
		for _, h := range []*docHost{a, b} {
			eventually(t, func() bool { return h.read(rel) == want }, "%s on %s: %q", rel, h.name, h.read(rel))
		}
	}
	// The two hosts' changes to kept.md met: an edit outlives a removal,
	// or the first to reach the store wins and the other is kept.
	eventually(t, func() bool {
		a.sync()
		b.sync()
		fa, fb := a.files(), b.files()
		return fmt.Sprint(fa) == fmt.Sprint(fb)
	}, "the folders agree")
	found := false
	for _, c := range a.files() {
		found = found || c == "changed while offline"
	}
	assert.True(t, found, "a's offline edit survived: %v", a.files())
}

func TestDocsConcurrentWritersLoseNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("stress")
	}
	// Eight writers over three hosts. Rounds stay under the bucket's
	// history (64) for the three writers of a shared file, so that every
	// revision of it can be checked.
	url := server(t)
	base := t.TempDir()
	a := newDocHost(t, url, "ha", filepath.Join(base, "a"))
	b := newDocHost(t, url, "hb", filepath.Join(base, "b"))
	c := newDocHost(t, url, "hc", filepath.Join(base, "c"))
	hosts := []*docHost{a, b, c}
	const rounds = 20
	type last struct{ own, shared string }
	results := map[string]*last{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, h := range hosts {
		writers := 3
		if i == 2 {
			writers = 2
		}
		for w := range writers {
			id := fmt.Sprintf("%s-%d", h.name, w)
			l := &last{}
			results[id] = l
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := range rounds {
					own := fmt.Sprintf("own %s version %d", id, n)
					shared := fmt.Sprintf("shared %s version %d", id, n)
					h.write("own-"+id+".md", own)
					// Writer w of each host shares a file with writer w of
					// the others: the hosts race for it.
					h.write(fmt.Sprintf("shared-%d.md", w), shared)
					mu.Lock()
					l.own, l.shared = own, shared
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	var fa map[string]string
	eventually(t, func() bool {
		for _, h := range hosts {
			h.sync()
		}
		fa = a.files()
		return fmt.Sprint(fa) == fmt.Sprint(b.files()) && fmt.Sprint(fa) == fmt.Sprint(c.files())
	}, "the folders agree")
	// A version is kept in the folders (the name or a conflict copy), or
	// it was published and a later write based on it replaced it: the
	// other host's writer wrote the file again after the version came.
	kept := map[string]bool{}
	for _, c := range fa {
		kept[c] = true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	lister, err := a.s.docs.ListKeys(ctx)
	require.NoError(t, err)
	for key := range lister.Keys() {
		rel, ok := pathOfKey(key)
		require.True(t, ok, key)
		hist, err := a.s.docs.History(ctx, key)
		require.NoError(t, err)
		for i, e := range hist {
			h, content, err := decodeDoc(e.Value(), rel)
			require.NoError(t, err, "%s revision %d", rel, e.Revision())
			kept[string(content)] = true
			assert.NotEmpty(t, content, "%s revision %d: no half-written version is published", rel, e.Revision())
			if i > 0 {
				assert.Equal(t, hist[i-1].Revision(), h.Base,
					"%s revision %d replaced revision %d without being based on it", rel, e.Revision(), hist[i-1].Revision())
			}
		}
	}
	for id, l := range results {
		assert.Equal(t, l.own, fa["own-"+id+".md"], "%s's own file", id)
		assert.True(t, kept[l.shared], "%s's last version of its shared file is kept: %q", id, l.shared)
	}
	for rel, c := range fa {
		if strings.Contains(rel, ".conflict-") {
			assert.True(t, strings.HasPrefix(rel, "shared-"), "conflicts only on shared files: %s", rel)
			assert.NotEmpty(t, c, rel)
		}
	}
}

func TestDocsRemovalMeetsEdit(t *testing.T) {
	const rel = "notes.md"
	tests := []struct {
		name   string
		bEdits bool   // b changes the file while its sync is stopped
		want   string // rel on both hosts afterwards ("" absent)
	}{
		{"unchanged copy is removed", false, ""},
		{"an edit outlives the removal", true, "edited on b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := twoHosts(t)
			a.write(rel, "v1")
			a.sync()
			b.sync()
			require.Equal(t, "v1", b.read(rel))
			b.stop()
			require.NoError(t, os.Remove(filepath.Join(a.dir, rel)))
			a.sync()
			if tt.bEdits {
				b.write(rel, "edited on b")
			}
			b.start()
			for _, h := range []*docHost{a, b} {
				eventually(t, func() bool { h.sync(); return h.read(rel) == tt.want }, "%s: %q", h.name, h.read(rel))
			}
		})
	}
}

func TestDocsNotDocuments(t *testing.T) {
	a, b := twoHosts(t)
	outside := filepath.Join(t.TempDir(), "secret")
	require.NoError(t, os.WriteFile(outside, []byte("secret"), 0o600))
	big := strings.Repeat("x", int(a.d.limit())+1)
	tests := []struct {
		name   string
		rel    string
		make   func(p string) error
		record ledger.Kind // what a records, if anything
	}{
		{"hard link", "hard.md", func(p string) error { return os.Link(outside, p) }, ""},
		{"symlink", "link.md", func(p string) error { return os.Symlink(outside, p) }, ""},
		{"too large", "big.md", func(p string) error { return os.WriteFile(p, []byte(big), 0o644) }, RecordTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.NoError(t, tt.make(filepath.Join(a.dir, tt.rel)))
			a.sync()
			b.sync()
			_, err := os.Lstat(filepath.Join(b.dir, tt.rel))
			assert.ErrorIs(t, err, fs.ErrNotExist)
			if tt.record != "" {
				assert.True(t, a.recorded(tt.record, tt.rel))
			}
		})
	}
}

// initHosts starts a server, a host ha whose folder holds a new
// collaboration (acpfs init), and a host hb that bootstraps from it.
// frozen marks documents frozen, with their initial content, on every
// host started by newHost.
func initHosts(t *testing.T, frozen ...string) (a, b *docHost, newHost func(name string) *docHost, srv *restartable) {
	t.Helper()
	srv = newRestartable(t)
	url := srv.url
	base := t.TempDir()
	adir := filepath.Join(base, "ha")
	_, err := protocol.Init(protocol.InitOptions{Folder: adir, Participants: []string{"alice", "bob"},
		Objective: "o", Completion: []string{"c"}, PrimaryType: "design-spec"})
	require.NoError(t, err)
	sums := map[string]string{}
	for _, rel := range frozen {
		b, err := os.ReadFile(filepath.Join(adir, rel))
		require.NoError(t, err)
		sums[rel] = digest.Bytes(b)
	}
	newHost = func(name string) *docHost {
		h := &docHost{t: t, name: name, dir: filepath.Join(base, name), url: url, frozen: map[string]string{}}
		for rel, sum := range sums {
			h.frozen[rel] = sum
		}
		require.NoError(t, os.MkdirAll(h.dir, 0o755))
		s, err := Open(context.Background(), Options{URL: url, Collab: "c1", Host: name, Timeout: 2 * time.Second})
		require.NoError(t, err)
		t.Cleanup(s.Close)
		h.s = s
		h.start()
		return h
	}
	a = newHost("ha")
	b = newHost("hb")
	require.Equal(t, a.files(), b.files())
	return a, b, newHost, srv
}

// TestDocsNeverRemoved: the documents that views never let anyone
// remove (the protocol's, protocol.json, frozen deliverables) are not
// removed through the sync either, however the removal is made.
func TestDocsNeverRemoved(t *testing.T) {
	const spec = "deliverables/design-spec.md"
	onDisk := func(t *testing.T, a, b *docHost, _ *restartable, rel string) {
		require.NoError(t, os.Remove(filepath.Join(b.dir, rel)))
	}
	type remover func(t *testing.T, a, b *docHost, srv *restartable, rel string)
	tests := []struct {
		name   string
		rels   []string
		frozen bool
		remove remover
		// silent: nothing is refused, as nothing was removed from the
		// store's point of view (a host starts without the file).
		silent bool
	}{
		{"removed on disk", append(protocol.ProtocolDocs(), protocolJSON), false, onDisk, false},
		{"frozen deliverable removed on disk", []string{spec}, true, onDisk, false},
		{"directory of a frozen deliverable removed", []string{spec}, true, func(t *testing.T, a, b *docHost, _ *restartable, rel string) {
			// Out of the folder in one step, then removed: the sync may
			// put the file back at once, which would race a RemoveAll.
			dir := filepath.Join(b.dir, filepath.Dir(rel))
			gone := filepath.Join(t.TempDir(), "gone")
			require.NoError(t, os.Rename(dir, gone))
			require.NoError(t, os.RemoveAll(gone))
		}, false},
		{"renamed away", []string{protocol.ReviewFile}, false, func(t *testing.T, a, b *docHost, _ *restartable, rel string) {
			require.NoError(t, os.Rename(filepath.Join(b.dir, rel), filepath.Join(b.dir, "old-"+rel)))
		}, false},
		{"removed while the sync was stopped", []string{protocol.DecisionsFile, spec}, true, func(t *testing.T, a, b *docHost, _ *restartable, rel string) {
			b.stop()
			require.NoError(t, os.Remove(filepath.Join(b.dir, rel)))
			b.start()
		}, true},
		{"removed while cut off from the server", []string{protocol.ReadinessFile, spec}, true, func(t *testing.T, a, b *docHost, srv *restartable, rel string) {
			srv.stop()
			eventually(t, func() bool { return !a.s.Connected() && !b.s.Connected() }, "both hosts see the server gone")
			require.NoError(t, os.Remove(filepath.Join(b.dir, rel)))
			srv.start(t)
			eventually(t, func() bool { return a.s.Connected() && b.s.Connected() }, "both hosts reconnect")
		}, false},
		{"removal written to the bucket", []string{protocol.ProposalFile, protocolJSON, spec}, true, func(t *testing.T, a, b *docHost, _ *restartable, rel string) {
			// By something that is not an acpfs host, or one that does
			// not refuse it.
			ctx, cancel := a.s.ctx()
			defer cancel()
			require.NoError(t, a.s.docs.Delete(ctx, keyOf(rel)))
		}, false},
		{"removal written to the bucket while every host lacks it", []string{protocol.ConclusionFile, spec}, true, func(t *testing.T, a, b *docHost, _ *restartable, rel string) {
			a.stop()
			b.stop()
			for _, h := range []*docHost{a, b} {
				require.NoError(t, os.Remove(filepath.Join(h.dir, rel)))
			}
			ctx, cancel := a.s.ctx()
			defer cancel()
			require.NoError(t, a.s.docs.Delete(ctx, keyOf(rel)))
			a.start()
			b.start()
		}, false},
	}
	for _, tt := range tests {
		for _, rel := range tt.rels {
			t.Run(tt.name+"/"+rel, func(t *testing.T) {
				var frozen []string
				if tt.frozen {
					frozen = []string{spec}
				}
				a, b, newHost, srv := initHosts(t, frozen...)
				want := a.read(rel)
				require.NotEmpty(t, want)
				tt.remove(t, a, b, srv, rel)
				for _, h := range []*docHost{a, b} {
					eventually(t, func() bool { h.sync(); return h.read(rel) == want }, "%s has %s back: %q", h.name, rel, h.read(rel))
				}
				if !tt.silent {
					eventually(t, func() bool { return a.recorded(RecordRefused, rel) || b.recorded(RecordRefused, rel) }, "the refusal is recorded")
				}
				a.sync()
				b.sync()
				assert.Equal(t, a.files(), b.files())
				// A host that starts now gets it too.
				c := newHost("hc")
				assert.Equal(t, want, c.read(rel))
			})
		}
	}

	t.Run("an ordinary document's removal spreads", func(t *testing.T) {
		a, b, _, _ := initHosts(t, spec)
		a.write("notes.md", "n")
		a.sync()
		b.sync()
		require.Equal(t, "n", b.read("notes.md"))
		require.NoError(t, os.Remove(filepath.Join(b.dir, "notes.md")))
		eventually(t, func() bool { a.sync(); return a.read("notes.md") == "" }, "removed on ha")
	})
}

// TestDocsProtocolJSONCreateOnly: protocol.json's static part is the
// collaboration's from its first revision on; no edit, on any host or
// in the bucket, reaches another host.
func TestDocsProtocolJSONCreateOnly(t *testing.T) {
	// edited is protocol.json from h's folder with a participant added.
	edited := func(t *testing.T, h *docHost) []byte {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(h.read(protocolJSON)), &m))
		m["participants"] = append(m["participants"].([]any), "mallory")
		b, err := json.MarshalIndent(m, "", "  ")
		require.NoError(t, err)
		return b
	}
	tests := []struct {
		name string
		edit func(t *testing.T, a, b *docHost)
		// onDisk: the edit is on hb's disk, so the bucket must still
		// hold only the first revision.
		onDisk bool
	}{
		{"edited on disk", func(t *testing.T, a, b *docHost) {
			b.write(protocolJSON, string(edited(t, b)))
		}, true},
		{"edited while the sync was stopped", func(t *testing.T, a, b *docHost) {
			b.stop()
			b.write(protocolJSON, string(edited(t, b)))
			b.start()
		}, true},
		{"a later revision written to the bucket", func(t *testing.T, a, b *docHost) {
			ctx, cancel := a.s.ctx()
			defer cancel()
			_, err := a.s.docs.Put(ctx, keyOf(protocolJSON), a.d.encode(protocolJSON, edited(t, a), 0o644, 0, ""))
			require.NoError(t, err)
		}, false},
		{"removed from the bucket and created again", func(t *testing.T, a, b *docHost) {
			ctx, cancel := a.s.ctx()
			defer cancel()
			require.NoError(t, a.s.docs.Delete(ctx, keyOf(protocolJSON)))
			_, err := a.s.docs.Create(ctx, keyOf(protocolJSON), a.d.encode(protocolJSON, edited(t, a), 0o644, 0, ""))
			require.NoError(t, err)
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b, newHost, _ := initHosts(t)
			ctx, cancel := a.s.ctx()
			defer cancel()
			first, err := a.s.docs.Get(ctx, keyOf(protocolJSON))
			require.NoError(t, err)
			static := versionDigest(protocolJSON, []byte(a.read(protocolJSON)))
			tt.edit(t, a, b)
			a.sync()
			b.sync()
			if tt.onDisk {
				last, err := a.s.docs.Get(ctx, keyOf(protocolJSON))
				require.NoError(t, err)
				assert.Equal(t, first.Revision(), last.Revision(), "nothing was published")
			}
			assert.Equal(t, static, versionDigest(protocolJSON, []byte(a.read(protocolJSON))), "ha keeps the collaboration's")
			assert.NotContains(t, a.read(protocolJSON), "mallory")
			// A host that starts now takes the first revision.
			c := newHost("hc")
			assert.Equal(t, static, versionDigest(protocolJSON, []byte(c.read(protocolJSON))))
			assert.NotContains(t, c.read(protocolJSON), "mallory")
			eventually(t, func() bool { return b.recorded(RecordRefused, protocolJSON) }, "hb records the refusal")
		})
	}
}

// docsCluster starts a 3-node JetStream cluster and returns its nodes
// and their client URLs.
func docsCluster(t *testing.T) ([]*natsserver.Server, []string) {
	t.Helper()
	var lns []net.Listener
	var ports []int
	for range 6 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	for _, ln := range lns {
		ln.Close()
	}
	var routes []string
	for i := range 3 {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", ports[3+i]))
	}
	dir := t.TempDir()
	nodes := make([]*natsserver.Server, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Add(1)
		go func() { // the nodes wait for each other
			defer wg.Done()
			nodes[i], errs[i] = natsrv.Start(natsrv.Config{Name: fmt.Sprintf("n%d", i+1), Dir: filepath.Join(dir, fmt.Sprintf("n%d", i+1)),
				Port: ports[i], Cluster: "acpfs", ClusterPort: ports[3+i], Routes: routes})
		}()
	}
	wg.Wait()
	var urls []string
	for i := range 3 {
		require.NoError(t, errs[i])
		t.Cleanup(nodes[i].Shutdown)
		urls = append(urls, nodes[i].ClientURL())
	}
	require.Eventually(t, func() bool {
		leader := false
		for _, n := range nodes {
			if !n.JetStreamIsCurrent() {
				return false
			}
			leader = leader || n.JetStreamIsLeader()
		}
		return leader
	}, 60*time.Second, 50*time.Millisecond, "the cluster elects a JetStream leader")
	return nodes, urls
}

// A node of the cluster dies while every host keeps rewriting its
// writers' notes: every writer's last note still reaches every host,
// the hosts whose preferred node died included.
func TestDocsClusterNodeDies(t *testing.T) {
	nodes, urls := docsCluster(t)
	base := t.TempDir()
	var hosts []*docHost
	for i, name := range []string{"ha", "hb", "hc"} {
		// Each host prefers its own node, as in the integration test.
		url := strings.Join([]string{urls[i], urls[(i+1)%3], urls[(i+2)%3]}, ",")
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		s, err := Open(ctx, Options{URL: url, Collab: "c1", Host: name, Replicas: 3, Timeout: 10 * time.Second, Retry: true})
		cancel()
		require.NoError(t, err)
		t.Cleanup(s.Close)
		dir := filepath.Join(base, name)
		require.NoError(t, os.MkdirAll(filepath.Join(dir, "notes"), 0o755))
		h := &docHost{t: t, name: name, dir: dir, url: url, s: s, frozen: map[string]string{}}
		h.start()
		hosts = append(hosts, h)
	}

	type writer struct {
		name string
		host *docHost
		last string
		n    atomic.Int64
	}
	var writers []*writer
	for i := range 6 {
		writers = append(writers, &writer{name: fmt.Sprintf("w%d", i), host: hosts[i%3]})
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := filepath.Join(w.host.dir, "notes", w.name+".md")
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-time.After(10 * time.Millisecond): // a writer's pace, not a synchronisation
				}
				note := fmt.Sprintf("# %s\n\nversion %d\n", w.name, i)
				if os.WriteFile(p, []byte(note), 0o644) == nil {
					w.last = note
					w.n.Add(1)
				}
			}
		}()
	}
	// Every note reaches every host; then a node dies, and the writers
	// go on through the failover.
	require.Eventually(t, func() bool {
		for _, h := range hosts {
			for _, w := range writers {
				if h.read("notes/"+w.name+".md") == "" {
					return false
				}
			}
		}
		return true
	}, 60*time.Second, 20*time.Millisecond, "every note reaches every host")
	// The JetStream meta leader dies: the host that prefers it watches
	// the bucket again while the cluster elects another, publications
	// in flight time out, and the watches' consumers may die with it.
	victim := 1
	for i, n := range nodes {
		if n.JetStreamIsLeader() {
			victim = i
		}
	}
	t.Logf("killing node n%d", victim+1)
	nodes[victim].Shutdown()
	nodes[victim].WaitForShutdown()
	var from []int64
	for _, w := range writers {
		from = append(from, w.n.Load())
	}
	require.Eventually(t, func() bool {
		for i, w := range writers {
			if w.n.Load() < from[i]+300 {
				return false
			}
		}
		return true
	}, 60*time.Second, 50*time.Millisecond, "the writers go on")
	close(stop)
	wg.Wait()
	for _, w := range writers {
		for _, h := range hosts {
			require.Eventually(t, func() bool { return h.read("notes/"+w.name+".md") == w.last }, 60*time.Second, 50*time.Millisecond,
				"%s's last note on host %s: want %q, have %q", w.name, h.name, w.last, h.read("notes/"+w.name+".md"))
		}
	}
	// Each note has one writer: no version of it ever conflicts, not
	// even with one whose publication timed out but was stored.
	for _, h := range hosts {
		for rel := range h.files() {
			assert.NotContains(t, rel, ".conflict-", "host %s", h.name)
		}
		assert.False(t, h.recordedKind(RecordConflict), "host %s recorded a conflict", h.name)
	}
}
