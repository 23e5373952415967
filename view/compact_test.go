package view

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/ledger"
)

// TestRepeatsKeepLastContentPerPath: 60,000 contents of one path read in
// turn keep one key in memory, and a repeat of the last one is still a
// repeat.
func TestRepeatsKeepLastContentPerPath(t *testing.T) {
	r := newRepeats()
	now := time.Now()
	for i := 0; i < 60000; i++ {
		k := repeatKey{kind: ledger.KindRead, op: "open", path: "scratch/a.md", sha: fmt.Sprintf("%064d", i)}
		require.False(t, r.again(k, now), "version %d is new", i)
		r.recorded(k)
	}
	assert.Len(t, r.seen, 1)
	assert.Len(t, r.latest, 1)
	last := repeatKey{kind: ledger.KindRead, op: "open", path: "scratch/a.md", sha: fmt.Sprintf("%064d", 59999)}
	assert.True(t, r.again(last, now), "the last content read again is a repeat")
	first := repeatKey{kind: ledger.KindRead, op: "open", path: "scratch/a.md", sha: fmt.Sprintf("%064d", 0)}
	assert.False(t, r.again(first, now), "a superseded content read again is recorded in full")
	// Other paths and kinds keep their own keys.
	other := repeatKey{kind: ledger.KindRead, op: "open", path: "scratch/b.md", sha: "x"}
	noop := repeatKey{kind: ledger.KindWrite, op: "open", path: "scratch/a.md", why: noopOpen}
	r.recorded(other)
	r.recorded(noop)
	assert.True(t, r.again(other, now))
	assert.True(t, r.again(noop, now))
	assert.True(t, r.again(last, now))
	assert.Zero(t, r.refusals, "no-op writes are no refusals")
}

// TestRepeatsPendingBounded: repeats of many keys between two flushes ask
// for an early flush.
func TestRepeatsPendingBounded(t *testing.T) {
	r := newRepeats()
	now := time.Now()
	for i := 0; i < maxPending; i++ {
		k := repeatKey{kind: ledger.KindDenied, op: "lookup", path: fmt.Sprint("p", i), why: "w"}
		r.recorded(k)
		require.True(t, r.again(k, now))
	}
	select {
	case <-r.kick:
	default:
		t.Fatal("no early flush asked for")
	}
	pending, _ := r.takeAll()
	assert.Len(t, pending, maxPending)
}

// TestHashCachesKeepLastVersionPerFile: a file rewritten 60,000 times
// costs one entry in the view's cache and in the store.
func TestHashCachesKeepLastVersionPerFile(t *testing.T) {
	var c hashCache
	s := openHashStore(filepath.Join(t.TempDir(), HashStoreName))
	defer s.release()
	v := fileVersion{dev: 1, ino: 2, size: 8}
	for i := 0; i < 60000; i++ {
		v.mtimeNs, v.ctimeNs = int64(i), int64(i)
		c.put(v, fmt.Sprint(i))
		s.put(v, fmt.Sprintf("%064d", i))
	}
	assert.Len(t, c.m, 1)
	assert.Len(t, s.m, 1)
	assert.Len(t, s.order, 1)
	sha, ok := c.get(v)
	assert.True(t, ok)
	assert.Equal(t, "59999", sha)
	sha, ok = s.get(v)
	assert.True(t, ok)
	assert.Equal(t, fmt.Sprintf("%064d", 59999), sha)
	old := v
	old.mtimeNs, old.ctimeNs = 5, 5
	_, ok = c.get(old)
	assert.False(t, ok, "a superseded version is not given")
	c.put(old, "late")
	sha, _ = c.get(v)
	assert.Equal(t, "59999", sha, "a late hash of an older version does not replace the last one")
}

// TestHashStoreFileBounded: the store's file drops the lines of
// superseded versions.
func TestHashStoreFileBounded(t *testing.T) {
	s := openHashStore(filepath.Join(t.TempDir(), HashStoreName))
	defer s.release()
	v := fileVersion{dev: 1, ino: 2, size: 8}
	for i := 0; i < 10000; i++ {
		v.mtimeNs, v.ctimeNs = int64(i), int64(i)
		s.put(v, fmt.Sprintf("%064d", i))
	}
	assert.LessOrEqual(t, s.lines, 2*len(s.m)+1024)
}

// TestRepeatsForgetLeastRecentlyUsed: past maxRepeatKeys keys, the one
// used least recently is forgotten, not every new one.
func TestRepeatsForgetLeastRecentlyUsed(t *testing.T) {
	r := newRepeats()
	now := time.Now()
	key := func(i int) repeatKey { return repeatKey{kind: ledger.KindList, path: fmt.Sprint("d", i)} }
	for i := 0; i < maxRepeatKeys; i++ {
		r.recorded(key(i))
	}
	require.True(t, r.again(key(0), now), "key 0 used again: now the most recent")
	r.recorded(key(maxRepeatKeys))
	assert.Len(t, r.seen, maxRepeatKeys)
	assert.Equal(t, maxRepeatKeys, r.lru.Len())
	assert.True(t, r.again(key(0), now))
	assert.False(t, r.again(key(1), now), "the least recently used key is forgotten")
	assert.True(t, r.again(key(maxRepeatKeys), now), "the new key is kept")
}
