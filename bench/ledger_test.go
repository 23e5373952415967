package bench

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/audit"
)

// Ledger growth target of the compact records: 100 `grep -r` passes over
// 1,000 files grow the ledger by at most 3 MB, and the audit still names
// every file.
const (
	growthPasses = 100
	growthLimit  = 3 << 20
)

// TestLedgerGrowth greps one 1,000-file directory of the tree 100 times
// through a view and measures what the ledger grew by.
func TestLedgerGrowth(t *testing.T) {
	gate(t)
	d := data(t)
	mnt, dmn := mountACPFS(t, d.folder, grantFile(d, "G-all"))
	ledgerPath := dmn.ledger
	dir := filepath.Join(mnt, treeRel, "d00")
	before := fileSize(t, ledgerPath)
	start := time.Now()
	for i := 0; i < growthPasses; i++ {
		out, err := exec.Command("grep", "-r", "-c", "small file", dir).CombinedOutput()
		require.NoError(t, err, "grep pass %d: %s", i, out)
		require.Equal(t, treeSub*treeLeaf, strings.Count(string(out), "\n"))
	}
	took := time.Since(start)
	dmn.Close() // flushes the repeat counts and signs the end
	grew := fileSize(t, ledgerPath) - before

	gs, err := audit.LoadGrants(filepath.Join(d.runs, "context_grants"))
	require.NoError(t, err)
	a := audit.New(gs, audit.Options{Ledger: ledgerPath})
	require.NoError(t, a.AddFile(ledgerPath))
	rep, err := a.Report()
	require.NoError(t, err)
	named, reads := 0, int64(0)
	for _, ag := range rep.Agents {
		for _, acc := range ag.Reads {
			if strings.HasPrefix(acc.Path, treeRel+"/d00/") {
				named++
				reads += acc.Count
			}
		}
		// Nothing else is read through this view: its repeated reads
		// are the greps'.
		reads += ag.RepeatedReads
	}
	require.Equal(t, treeSub*treeLeaf, named, "the audit names every file read")
	require.Equal(t, int64(growthPasses*treeSub*treeLeaf), reads, "the audit counts every open, each file's first in full")

	ok := grew <= growthLimit
	record("ledger", "100 grep -r over 1,000 files", fmt.Sprintf("%.2f MB in %v", float64(grew)/(1<<20), took.Round(time.Second)),
		fmt.Sprintf("%.0f B/open", float64(grew)/float64(growthPasses*treeSub*treeLeaf)), verdict(ok)+" (≤ 3 MB)")
	require.LessOrEqual(t, grew, int64(growthLimit))
}

func fileSize(t testing.TB, p string) int64 {
	t.Helper()
	st, err := os.Stat(p)
	require.NoError(t, err)
	return st.Size()
}
