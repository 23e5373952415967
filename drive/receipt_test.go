package drive

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestEventsFrom(t *testing.T) {
	dir := t.TempDir()
	lines := `{"seq":1,"from":"alice","event":"initialized","at":"2026-01-01T00:00:00Z","summary":"x"}
{"seq":2,"from":"alice","event":"deliverable_drafted","at":"2026-01-01T00:00:00Z","summary":"x","reply_to":1}
{"seq":3,"from":"bob","event":"blocked","at":"2026-01-01T00:00:00Z","summary":"x","reply_to":2}
{"seq":4,"from":"alice","event":"proposal_submitted","at":"2026-01-01T00:00:00Z","summary":"x","reply_to":3}
`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "events.jsonl"), []byte(lines), 0o644))
	evs, err := eventsFrom(dir, "alice", 1)
	require.NoError(t, err)
	assert.Equal(t, []EventRef{{2, "deliverable_drafted"}, {4, "proposal_submitted"}}, evs)
}

// TestEventsFromHostileFolder: whoever writes the folder cannot make the
// driver follow a symlink or block on a FIFO.
func TestEventsFromHostileFolder(t *testing.T) {
	for name, plant := range map[string]func(p string) error{
		"symlink": func(p string) error { return os.Symlink("/etc/passwd", p) },
		"fifo":    func(p string) error { return syscall.Mkfifo(p, 0o644) },
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			require.NoError(t, plant(filepath.Join(dir, "events.jsonl")))
			_, err := eventsFrom(dir, "alice", 0)
			assert.Error(t, err)
		})
	}
}
