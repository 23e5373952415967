package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/grants"
)

// Files of the shared data folder, relative to it.
const (
	treeRel  = "tree"          // treeFiles small files in nested directories
	roRel    = "big/read.bin"  // read-only for the grants: passthrough
	rwRel    = "rw/write.bin"  // writable for the grants: served by the daemon
	smallRel = "small/note.md" // the file of the open+close benchmark
)

// Shape of the listing tree: treeTop × treeSub directories of treeLeaf
// files each.
const (
	treeTop   = 10
	treeSub   = 10
	treeLeaf  = 100
	treeFiles = treeTop * treeSub * treeLeaf
)

// readSize is the size of the sequential-read files (ACPFS_BENCH_READ_MB,
// default 512, the size of the issue "Speed on real work"; 1024 for the
// figures of earlier issues).
func readSize() int64 {
	mb := 512
	if s := os.Getenv("ACPFS_BENCH_READ_MB"); s != "" {
		if v, err := strconv.Atoi(s); err == nil && v > 0 {
			mb = v
		}
	}
	return int64(mb) << 20
}

// dataset is the collaboration folder shared by the read, listing and
// open benchmarks, with its run directory (outside the folder).
type dataset struct {
	folder string
	runs   string
	hist   *history
}

var (
	dataOnce sync.Once
	dataSet  *dataset
	dataErr  error
)

// data builds the shared folder once per run; TestMain removes it with
// tmpRoot.
func data(tb testing.TB) *dataset {
	tb.Helper()
	dataOnce.Do(func() { dataSet, dataErr = buildData(tb) })
	require.NoError(tb, dataErr)
	require.NotNil(tb, dataSet, "building the data folder failed in an earlier test")
	return dataSet
}

func buildData(tb testing.TB) (*dataset, error) {
	root := filepath.Join(tmpRoot, "data")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	d := &dataset{hist: newHistory(tb, root, 6), runs: filepath.Join(root, "agent_runs")}
	d.folder = d.hist.folder
	content := []byte("# note\n\nA small file of the listing tree.\n")
	for i := 0; i < treeTop; i++ {
		for j := 0; j < treeSub; j++ {
			dir := filepath.Join(d.folder, treeRel, fmt.Sprintf("d%02d", i), fmt.Sprintf("s%02d", j))
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return nil, err
			}
			for k := 0; k < treeLeaf; k++ {
				if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%03d.md", k)), content, 0o644); err != nil {
					return nil, err
				}
			}
		}
	}
	if err := os.MkdirAll(filepath.Join(d.folder, "small"), 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(d.folder, smallRel), content, 0o644); err != nil {
		return nil, err
	}
	for _, rel := range []string{roRel, rwRel} {
		if err := writeBig(filepath.Join(d.folder, rel), readSize()); err != nil {
			return nil, err
		}
	}
	rd := grants.NewRunDir(d.runs)
	if err := rd.Init(); err != nil {
		return nil, err
	}
	for _, g := range []*grants.Grant{allGrant(), rulesGrant()} {
		if err := rd.SaveGrant(g); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// writeBig writes size bytes of a non-repeating pattern, so that nothing
// along the way can compress or deduplicate it.
func writeBig(path string, size int64) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	buf := make([]byte, 1<<20)
	x := uint64(0x9e3779b97f4a7c15)
	for off := int64(0); off < size; off += int64(len(buf)) {
		for i := 0; i+8 <= len(buf); i += 8 {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			for k := 0; k < 8; k++ {
				buf[i+k] = byte(x >> (8 * k))
			}
		}
		n := int64(len(buf))
		if size-off < n {
			n = size - off
		}
		if _, err := f.Write(buf[:n]); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

// allGrant reads everything and writes rw/ and the protocol files.
func allGrant() *grants.Grant {
	return &grants.Grant{
		GrantID: "G-all", AgentID: histOwner, Role: "benchmark", Objective: "Measure acpfs",
		MayRead:  []string{"**"},
		MayWrite: []string{"events.jsonl", "protocol.json", "rw/**"},
	}
}

// rulesGrant shows the same files as allGrant through 50 rules of the
// kinds real grants use (literal files, directories, extension globs,
// forbidden patterns anywhere in the tree), which every lookup and
// listing entry is checked against.
func rulesGrant() *grants.Grant {
	g := &grants.Grant{
		GrantID: "G-rules", AgentID: histOwner, Role: "benchmark", Objective: "Measure acpfs with many rules",
		MayRead: []string{
			"protocol.json", "events.jsonl", "README.md", "proposal.md", "review.md", "decisions.md",
			"readiness.md", "conclusion.md", "deliverables/**", "big/**", "small/*.md", "docs/**/*.md",
			"notes/*.txt", "**/*.keep", "src/**/*.go",
		},
		ForbiddenRead: []string{
			"oracle/**", "**/*.secret", "**/.env", "tree/**/hidden-*", "tree/d0*/s*/private/**",
			"answers/**", "**/*.key", "**/*.pem", "secrets/**", "tree/**/*.bak", "**/id_rsa*",
			"holdout/**", "eval/**/expected-*", "**/.git/**", "tmp/**/*.swp",
		},
		MayWrite: []string{
			"events.jsonl", "protocol.json", "proposal.md", "decisions.md", "readiness.md",
			"conclusion.md", "deliverables/**", "scratch/**", "rw/**", "notes/*.txt",
		},
	}
	for i := 0; i < treeTop; i++ {
		g.MayRead = append(g.MayRead, fmt.Sprintf("tree/d%02d/**", i))
	}
	return g
}

// ruleCount is the number of glob rules of g.
func ruleCount(g *grants.Grant) int { return len(g.MayRead) + len(g.ForbiddenRead) + len(g.MayWrite) }

// mountLoopback serves folder through the plain go-fuse loopback in its
// own process and returns the mountpoint.
func mountLoopback(tb testing.TB, folder string, passthrough bool) string {
	tb.Helper()
	mnt, _ := mountLoopbackDaemon(tb, folder, passthrough)
	return mnt
}

// mountLoopbackDaemon is mountLoopback that also returns the daemon.
func mountLoopbackDaemon(tb testing.TB, folder string, passthrough bool) (string, *daemon) {
	tb.Helper()
	mnt := newDir(tb, "mnt-loopback")
	args := []string{folder, mnt}
	if !passthrough {
		args = append([]string{"-no-passthrough"}, args...)
	}
	d := startDaemon(tb, []string{mnt}, []string{filepath.Join(mnt, "protocol.json")}, loopbackBin, args...)
	return mnt, d
}

// mountACPFS serves folder through `acpfs mount` with the grant file
// grantPath and a ledger of its own, and returns the mountpoint and the
// daemon.
func mountACPFS(tb testing.TB, folder, grantPath string, extra ...string) (string, *daemon) {
	tb.Helper()
	ledger := filepath.Join(newDir(tb, "ledger"), "communication_ledger.jsonl")
	return mountACPFSLedger(tb, folder, grantPath, ledger, extra...)
}

// mountACPFSLedger is mountACPFS with a ledger the caller chose (a view
// mounted again over the same ledger finds the content hashes the last
// one kept beside it).
func mountACPFSLedger(tb testing.TB, folder, grantPath, ledger string, extra ...string) (string, *daemon) {
	tb.Helper()
	mnt := newDir(tb, "mnt-acpfs")
	args := append([]string{"mount", "--folder", folder, "--grant", grantPath, "--ledger", ledger}, extra...)
	d := startDaemon(tb, []string{mnt}, []string{filepath.Join(mnt, "protocol.json")}, acpfsBin, append(args, mnt)...)
	d.ledger = ledger
	return mnt, d
}

// hashedAfter waits until the ledger holds a read_hash record of rel
// after byte offset from (the hash a view computes in the background
// after an open), and returns the record's line. It gives up after limit.
func hashedAfter(ledger string, from int64, rel string, limit time.Duration) (string, error) {
	deadline := time.Now().Add(limit)
	want := `"kind":"read_hash"`
	for {
		b, err := os.ReadFile(ledger)
		if err != nil {
			return "", err
		}
		if int64(len(b)) > from {
			for _, line := range strings.Split(string(b[from:]), "\n") {
				if strings.Contains(line, want) && strings.Contains(line, `"path":"`+rel+`"`) {
					return line, nil
				}
			}
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("no read_hash of %s in %s within %s", rel, ledger, limit)
		}
		time.Sleep(time.Millisecond)
	}
}

// grantFile is the path of a grant saved in d's run directory.
func grantFile(d *dataset, id string) string {
	return filepath.Join(d.runs, "context_grants", id+".json")
}
