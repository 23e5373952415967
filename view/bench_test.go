package view

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/ledger"
	"github.com/acpfs/acpfs/protocol"
)

// BenchmarkEventsAppend is `echo >> events.jsonl` through a view without
// FUSE: the open, write, flush and release of events.jsonl as the core
// handles them (the line validated, the lock taken, append_accepted
// recorded in a ledger synced in batches, the line written, protocol.json
// rewritten in the background), as a daemon serves them.
func BenchmarkEventsAppend(b *testing.B) {
	c := newCollab(b)
	lw, err := ledger.Open(filepath.Join(c.root, "runs", "bench-ledger.jsonl"), ledger.Options{Sync: ledger.SyncBatch})
	require.NoError(b, err)
	b.Cleanup(func() { lw.Close() })
	log, err := protocol.OpenLog(c.folder)
	require.NoError(b, err)
	log.DeferProtocolWrites()
	f, err := New(Options{Folder: c.folder, Grant: ownerGrant(), Log: log, Ledger: lw})
	require.NoError(b, err)
	b.Cleanup(func() { f.Close(); log.Close() })
	views := map[string]*View{"alice": f, "bob": c.newView(reviewerGrant())}
	seq := 2
	for _, s := range acpSteps()[:4] { // to decision_review
		_, err := appendVia(views[s.from], s.line(c, seq))
		require.NoError(b, err, views[s.from].LastError())
		seq++
	}
	// The owner classifies questions and proposes a decision in turn: a
	// history that stays valid for ever.
	lines := make([][]byte, b.N)
	for i := range lines {
		event := "decision_proposed"
		if (seq+i)%2 == 0 {
			event = "question_classified"
		}
		lines[i] = fmt.Appendf(nil, `{"seq":%d,"from":"alice","event":%q,"at":%q,"summary":"benchmark step","reply_to":%d}`,
			seq+i, event, time.Now().UTC().Format("2006-01-02T15:04:05Z"), seq+i-1)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := appendVia(f, lines[i]); err != nil {
			b.Fatalf("append %d: %v (%s)", i, err, f.LastError())
		}
	}
}
