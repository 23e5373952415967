package view

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/ledger"
)

// versionAt is the version of the file at the backing path p.
func versionAt(t *testing.T, p string) fileVersion {
	t.Helper()
	var st syscall.Stat_t
	require.NoError(t, syscall.Stat(p, &st))
	return versionOf(&st)
}

// TestDeferredHashOfALargeFile: the open of a file over syncHashMax is
// recorded at once with the version opened, and its hash follows in a
// read_hash record naming the read's seq; a repeat of that version is
// counted, not hashed again.
func TestDeferredHashOfALargeFile(t *testing.T) {
	c := newCollab(t)
	big := bytes.Repeat([]byte("0123456789abcdef"), syncHashMax/16+1)
	c.write("docs/big.bin", string(big))
	f := c.newView(reviewerGrant())
	ctx := context.Background()

	seq := c.lastSeq()
	fh, _, errno := f.Open(ctx, nil, "docs/big.bin", syscall.O_RDONLY)
	require.Zero(t, errno)
	reads := recordsOf(c.since(seq), ledger.KindRead, "bob", "docs/big.bin", ledger.OpOpen)
	require.Len(t, reads, 1)
	assert.Empty(t, reads[0].SHA256, "the open does not wait for the hash")
	assert.Contains(t, reads[0].Detail, "sha256 follows in a read_hash record")
	require.Zero(t, fh.Release(ctx))

	f.waitHashes()
	hashes := recordsOf(c.since(seq), ledger.KindReadHash, "bob", "docs/big.bin", ledger.OpOpen)
	require.Len(t, hashes, 1)
	assert.Equal(t, sum(big), hashes[0].SHA256)
	assert.Equal(t, "read seq "+itoa(reads[0].Seq), hashes[0].Detail)

	// A version changed within the last second: its hash cannot be kept
	// (see cacheable), so the next open records and hashes it again.
	seq = c.lastSeq()
	fh, _, errno = f.Open(ctx, nil, "docs/big.bin", syscall.O_RDONLY)
	require.Zero(t, errno)
	require.Zero(t, fh.Release(ctx))
	f.waitHashes()
	hashes = recordsOf(c.since(seq), ledger.KindReadHash, "bob", "docs/big.bin", ledger.OpOpen)
	require.Len(t, hashes, 1)
	assert.Equal(t, sum(big), hashes[0].SHA256)

	// Opens of the version while its hash runs are repeats of the read
	// that waits for it.
	hashSlots <- struct{}{}
	hashSlots <- struct{}{}
	released := false
	release := func() {
		if !released {
			released = true
			<-hashSlots
			<-hashSlots
		}
	}
	defer release() // a failed assertion must not leave the hashes waiting
	c.write("docs/big.bin", string(big[1:]))
	seq = c.lastSeq()
	for i := 0; i < 3; i++ {
		fh, _, errno = f.Open(ctx, nil, "docs/big.bin", syscall.O_RDONLY)
		require.Zero(t, errno)
		require.Zero(t, fh.Release(ctx))
	}
	assert.Len(t, recordsOf(c.since(seq), ledger.KindRead, "bob", "docs/big.bin", ledger.OpOpen), 1)
	f.FlushRepeats()
	rep := recordsOf(c.since(seq), ledger.KindReadsRepeated, "bob", "", ledger.OpOpen)
	require.Len(t, rep, 1)
	assert.EqualValues(t, 2, rep[0].Count)
	release()
	f.waitHashes()
	assert.Len(t, recordsOf(c.since(seq), ledger.KindReadHash, "bob", "docs/big.bin", ledger.OpOpen), 1)
}

// TestKnownHashes: a hash the view or the store beside the ledger holds
// for the version opened is recorded with the open, without hashing.
func TestKnownHashes(t *testing.T) {
	c := newCollab(t)
	big := bytes.Repeat([]byte("z"), syncHashMax+1)
	c.write("docs/big.bin", string(big))
	f := c.newView(reviewerGrant())
	ctx := context.Background()
	v := versionAt(t, c.in("docs/big.bin"))
	// Hashes taken by an earlier mount (the store) and by this view:
	// the record gives what they say, so a false one shows that the
	// file was not read again.
	tests := []struct {
		name string
		keep func(sha string)
	}{
		{"in the view", func(sha string) { f.hashes.put(v, sha) }},
		{"in the store", func(sha string) { f.hashes = hashCache{}; f.store.put(v, sha) }},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sha := strings.Repeat(string(rune('a'+i)), 64)
			tc.keep(sha)
			seq := c.lastSeq()
			fh, _, errno := f.Open(ctx, nil, "docs/big.bin", syscall.O_RDONLY)
			require.Zero(t, errno)
			require.Zero(t, fh.Release(ctx))
			reads := recordsOf(c.since(seq), ledger.KindRead, "bob", "docs/big.bin", ledger.OpOpen)
			require.Len(t, reads, 1)
			assert.Equal(t, sha, reads[0].SHA256)
			got, ok := f.hashes.get(v)
			assert.True(t, ok)
			assert.Equal(t, sha, got)
		})
	}
	t.Run("a file open for writing elsewhere is hashed again", func(t *testing.T) {
		f.hashes.put(v, strings.Repeat("f", 64))
		w, err := os.OpenFile(c.in("docs/big.bin"), os.O_WRONLY, 0)
		require.NoError(t, err)
		defer w.Close()
		seq := c.lastSeq()
		fh, _, errno := f.Open(ctx, nil, "docs/big.bin", syscall.O_RDONLY)
		require.Zero(t, errno)
		require.Zero(t, fh.Release(ctx))
		f.waitHashes()
		hashes := recordsOf(c.since(seq), ledger.KindReadHash, "bob", "docs/big.bin", ledger.OpOpen)
		require.Len(t, hashes, 1)
		assert.Equal(t, sum(big), hashes[0].SHA256)
	})
}

// TestDeferredHashJobs: reads of one version recorded while its hash
// runs all get its read_hash; a file that changed before it was hashed
// gets a read_hash that says so, without a hash.
func TestDeferredHashJobs(t *testing.T) {
	c := newCollab(t)
	big := bytes.Repeat([]byte("y"), syncHashMax+1)
	c.write("docs/big.bin", string(big))
	f := c.newView(reviewerGrant())
	fd, err := syscall.Open(c.in("docs/big.bin"), syscall.O_RDONLY, 0)
	require.NoError(t, err)
	defer syscall.Close(fd)
	v := versionAt(t, c.in("docs/big.bin"))

	// Both slots taken: the job waits, and the second read joins it.
	hashSlots <- struct{}{}
	hashSlots <- struct{}{}
	seq := c.lastSeq()
	f.deferHash(fd, v, pendingRead{seq: 101, agent: "bob", grant: "G-bob", path: "docs/big.bin"})
	f.deferHash(fd, v, pendingRead{seq: 102, agent: "bob", grant: "G-bob", path: "docs/big.bin"})
	<-hashSlots
	<-hashSlots
	f.waitHashes()
	hashes := recordsOf(c.since(seq), ledger.KindReadHash, "bob", "docs/big.bin", ledger.OpOpen)
	require.Len(t, hashes, 2)
	assert.ElementsMatch(t, []string{"read seq 101", "read seq 102"}, []string{hashes[0].Detail, hashes[1].Detail})
	assert.Equal(t, sum(big), hashes[1].SHA256)

	tests := []struct {
		name   string
		fd     int
		v      fileVersion
		detail string
	}{
		{"the file changed since the open", fd, fileVersion{dev: v.dev, ino: v.ino, size: v.size, mtimeNs: 1, ctimeNs: 1}, "the file changed while it was hashed"},
		{"no descriptor to hash", -1, v, "dup"},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			seq := c.lastSeq()
			read := int64(200 + i)
			f.deferHash(tc.fd, tc.v, pendingRead{seq: read, agent: "bob", grant: "G-bob", path: "docs/big.bin"})
			f.waitHashes()
			hashes := recordsOf(c.since(seq), ledger.KindReadHash, "bob", "docs/big.bin", ledger.OpOpen)
			require.Len(t, hashes, 1)
			assert.Empty(t, hashes[0].SHA256)
			assert.Contains(t, hashes[0].Detail, "read seq "+itoa(read)+": ")
			assert.Contains(t, hashes[0].Detail, tc.detail)
		})
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
