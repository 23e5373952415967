package protocol

import (
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLogMemoryPerEvent (issue 25, finding 4): what a Log keeps does not
// grow with the history. After a warm-up, 10,000 more appends leave the
// live heap within a few tens of bytes per event of where it was.
func TestLogMemoryPerEvent(t *testing.T) {
	const warm, more = 1_000, 10_000
	dir := benchFolder(t, 1_000)
	l, err := OpenLog(dir)
	require.NoError(t, err)
	defer l.Close()
	l.DeferProtocolWrites()
	at := kitEpoch.Add(2 * time.Hour)
	seq := 1_001
	appendN := func(n int) {
		for i := 0; i < n; i++ {
			_, err := l.AppendLine(benchLine(seq, at.Add(time.Duration(seq)*time.Second)), benchCycle[(seq-7)%len(benchCycle)].from)
			require.NoError(t, err, "seq %d", seq)
			seq++
		}
	}
	live := func() int64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return int64(m.HeapAlloc)
	}
	appendN(warm)
	before := live()
	appendN(more)
	after := live()
	perEvent := float64(after-before) / more
	t.Logf("live heap %d -> %d bytes over %d appends: %.1f bytes per event", before, after, more, perEvent)
	assert.Less(t, perEvent, 32.0, "the log keeps %.1f bytes per event", perEvent)
}
