package view

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readAt reads events.jsonl through a view's handle, as the kernel asks.
func readAt(t *testing.T, h *eventsFile, size int, off int64) string {
	t.Helper()
	b, errno := h.Read(context.Background(), make([]byte, size), off)
	require.Zero(t, errno)
	return string(b)
}

// TestEventsReadsEndAtANewline (issue 25, finding 2): whatever the size
// of the file does while a read runs, a read of events.jsonl ends at a
// newline, and a line longer than the read is handed out only once its
// newline is there.
func TestEventsReadsEndAtANewline(t *testing.T) {
	f, folder, _ := checkpointFS(t)
	events := filepath.Join(folder, "events.jsonl")
	base, err := os.ReadFile(events)
	require.NoError(t, err)
	fh, _, errno := f.Open(context.Background(), nil, "events.jsonl", syscall.O_RDONLY)
	require.Zero(t, errno)
	h := fh.(*eventsFile)
	defer h.Release(context.Background())

	appendRaw := func(s string) {
		w, err := os.OpenFile(events, os.O_WRONLY|os.O_APPEND, 0)
		require.NoError(t, err)
		_, err = w.WriteString(s)
		require.NoError(t, err)
		require.NoError(t, w.Close())
	}
	n := int64(len(base))
	// A line still being written, then more written after it: the read
	// that stops inside the first one ends at the newline before it.
	appendRaw(`{"a":"` + strings.Repeat("x", 40))
	assert.Equal(t, "", readAt(t, h, 4096, n), "a line without its newline is not shown")
	assert.Equal(t, string(base[len(base)-10:]), readAt(t, h, 10, n-10), "whole lines are")
	appendRaw(strings.Repeat("y", 10) + `"}` + "\n" + `{"b":1}` + "\n")
	full, err := os.ReadFile(events)
	require.NoError(t, err)
	first := strings.Index(string(full[n:]), "\n") + 1
	assert.Equal(t, string(full[n:n+int64(first)]), readAt(t, h, first+3, n), "a read stopping inside the next line ends at the newline before it")
	// A piece of a long line, complete further on, is handed out.
	assert.Equal(t, string(full[n:n+20]), readAt(t, h, 20, n))
	// A long line still being written is not.
	end := int64(len(full))
	appendRaw(`{"c":"` + strings.Repeat("z", 300))
	assert.Equal(t, "", readAt(t, h, 100, end))
}

// TestOpenJudgesAReplacedNameAgain (issue 25, finding 3): a name given to
// another file between the judgement and the open (protocol.json is
// replaced by every append) is judged again and opened, instead of
// failing with ENOENT; a replacement the grant hides is still refused.
func TestOpenJudgesAReplacedNameAgain(t *testing.T) {
	f, folder, _ := checkpointFS(t)
	ctx := context.Background()
	in := func(rel string) string { return filepath.Join(folder, rel) }
	require.NoError(t, os.WriteFile(in("scratch/d/g.md"), []byte("old"), 0o644))
	tg, errno := f.at(ctx, opOpenRead, "scratch/d/g.md")
	require.Zero(t, errno)
	require.NoError(t, os.WriteFile(in("scratch/d/g.md.new"), []byte("new"), 0o644))
	require.NoError(t, os.Rename(in("scratch/d/g.md.new"), in("scratch/d/g.md")))
	tg2, fd, errno := f.openJudged(ctx, tg, opOpenRead, os.O_RDONLY)
	require.Zero(t, errno)
	defer tg2.close()
	defer syscall.Close(fd)
	buf := make([]byte, 8)
	k, err := syscall.Read(fd, buf)
	require.NoError(t, err)
	assert.Equal(t, "new", string(buf[:k]))

	// A replacement by a second name of a file is not shown.
	tg, errno = f.at(ctx, opOpenRead, "scratch/d/g.md")
	require.Zero(t, errno)
	require.NoError(t, os.Remove(in("scratch/d/g.md")))
	require.NoError(t, os.Link(in("oracle/answer.md"), in("scratch/d/g.md")))
	_, _, errno = f.openJudged(ctx, tg, opOpenRead, os.O_RDONLY)
	assert.Equal(t, syscall.ENOENT, errno)
}

// TestCoordinatorDirectoriesConcealed (issue 23, outside attack F1):
// another coordinator's run directory or ledger directory in the folder
// is shown to no view, whatever it is called, and no agent can make an
// entry of a name that marks one.
func TestCoordinatorDirectoriesConcealed(t *testing.T) {
	f, folder, _ := checkpointFS(t)
	ctx := context.Background()
	in := func(rel string) string { return filepath.Join(folder, rel) }
	for _, d := range []string{"scratch/runs2/context_grants", "scratch/ledgers", "scratch/plain"} {
		require.NoError(t, os.MkdirAll(in(d), 0o755))
	}
	require.NoError(t, os.WriteFile(in("scratch/ledgers/ledger.key"), []byte("key"), 0o600))
	require.NoError(t, os.WriteFile(in("scratch/runs2/context_grants/G-x.json"), []byte("{}"), 0o644))
	for _, rel := range []string{"scratch/runs2", "scratch/runs2/context_grants/G-x.json", "scratch/ledgers", "scratch/ledgers/ledger.key"} {
		_, errno := f.at(ctx, opLookup, rel)
		assert.Equal(t, syscall.ENOENT, errno, rel)
	}
	tg, errno := f.at(ctx, opLookup, "scratch/plain")
	require.Zero(t, errno)
	tg.close()
	// A mark made later is seen (the directory's ctime changes).
	require.NoError(t, os.WriteFile(in("scratch/plain/communication_ledger.jsonl"), nil, 0o600))
	_, errno = f.at(ctx, opLookup, "scratch/plain")
	assert.Equal(t, syscall.ENOENT, errno)

	for _, rel := range []string{"scratch/d/ledger.key", "scratch/d/context_grants", "scratch/d/communication_ledger.jsonl"} {
		_, errno := f.at(ctx, opCreate, rel)
		assert.Equal(t, syscall.EACCES, errno, rel)
	}
}

// TestRenameOfADirectoryHoldingConcealedEntries (outside attack, round
// 2): a directory the grant shows whole cannot be renamed while it holds
// something no view shows (another coordinator's run directory, a file
// with several names, a symlink leading out of the folder).
func TestRenameOfADirectoryHoldingConcealedEntries(t *testing.T) {
	f, folder, _ := checkpointFS(t)
	ctx := context.Background()
	in := func(rel string) string { return filepath.Join(folder, rel) }
	tests := []struct {
		name  string
		plant func(dir string)
	}{
		{"a run directory below", func(dir string) { require.NoError(t, os.MkdirAll(filepath.Join(dir, "r9", "context_grants"), 0o755)) }},
		{"a file with two names", func(dir string) {
			require.NoError(t, os.WriteFile(filepath.Join(dir, "a"), nil, 0o644))
			require.NoError(t, os.Link(filepath.Join(dir, "a"), filepath.Join(dir, "b")))
		}},
		{"a symlink out of the folder", func(dir string) { require.NoError(t, os.Symlink("/etc/passwd", filepath.Join(dir, "l"))) }},
		{"a fifo", func(dir string) { require.NoError(t, syscall.Mkfifo(filepath.Join(dir, "p"), 0o644)) }},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rel := fmt.Sprintf("scratch/p%d", i)
			require.NoError(t, os.MkdirAll(in(rel+"/sub"), 0o755))
			tt.plant(in(rel + "/sub"))
			tg, errno := f.at(ctx, opRenameFrom, rel)
			require.Zero(t, errno)
			defer tg.close()
			assert.NotEmpty(t, f.holdsConcealed(tg))
		})
	}
	require.NoError(t, os.MkdirAll(in("scratch/clean/sub"), 0o755))
	require.NoError(t, os.WriteFile(in("scratch/clean/sub/f.md"), []byte("x"), 0o644))
	tg, errno := f.at(ctx, opRenameFrom, "scratch/clean")
	require.Zero(t, errno)
	defer tg.close()
	assert.Empty(t, f.holdsConcealed(tg))
}
