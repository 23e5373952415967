package fs

import (
	"fmt"
	"testing"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/stretchr/testify/assert"
)

// TestNotifyQueueCoalescesAndBounds: the same invalidation queued twice
// is sent once, and a queue past its bound turns into one walk that
// drops every cache. (No drain runs here: running is set, as while a
// drain is blocked in the kernel.)
func TestNotifyQueueCoalescesAndBounds(t *testing.T) {
	f := &FS{}
	f.notifyq.running = true
	dir, file := &gofs.Inode{}, &gofs.Inode{}
	f.queueEntry(dir, "a")
	f.queueEntry(dir, "a")
	f.queueEntry(dir, "b")
	f.queueContent(file)
	f.queueContent(file)
	assert.Equal(t, []notifyKey{{n: dir, name: "a", entry: true}, {n: dir, name: "b", entry: true}, {n: file}}, f.notifyq.order)
	assert.False(t, f.notifyq.all)

	for i := 0; len(f.notifyq.order) < maxQueuedNotifies; i++ {
		f.queueEntry(dir, fmt.Sprint(i))
	}
	f.queueEntry(dir, "one too many")
	assert.True(t, f.notifyq.all, "past the bound, the queue becomes one walk")
	assert.Empty(t, f.notifyq.order, "and holds nothing else")
	f.queueContent(file)
	assert.Empty(t, f.notifyq.order, "what the walk covers is not queued")
}
