package sandbox

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testRegistry is a registry in a temporary directory, with no process
// and no account holding a uid unless the test says so.
func testRegistry(t *testing.T) (*Registry, map[uint32]bool) {
	t.Helper()
	procs := map[uint32]bool{}
	var mu sync.Mutex
	return &Registry{
		Dir: filepath.Join(t.TempDir(), "acpfs"),
		ProcessUIDs: func() map[uint32]bool {
			mu.Lock()
			defer mu.Unlock()
			out := map[uint32]bool{}
			for u := range procs {
				out[u] = true
			}
			return out
		},
		Accounts: func() map[uint32]bool { return map[uint32]bool{} },
	}, procs
}

func newHolder(t *testing.T, grant string) (Holder, string) {
	t.Helper()
	dir := t.TempDir()
	h, err := HolderOf(dir, grant)
	require.NoError(t, err)
	return h, dir
}

func acquire(t *testing.T, r *Registry, h Holder) *Lease {
	t.Helper()
	l, err := r.Acquire(h, 0)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Release() })
	return l
}

// TestRegistryOneUIDPerGrantAcrossRunDirectories is finding 4 of issue
// 23: G-bob of two run directories got the same uid.
func TestRegistryOneUIDPerGrantAcrossRunDirectories(t *testing.T) {
	r, _ := testRegistry(t)
	bob1, _ := newHolder(t, "G-bob")
	bob2, _ := newHolder(t, "G-bob")
	l1 := acquire(t, r, bob1)
	l2 := acquire(t, r, bob2)
	assert.NotEqual(t, l1.UID, l2.UID, "live at once")
	assert.Equal(t, UIDSlot("G-bob"), l1.UID, "the first gets the grant's slot")
	for _, u := range []uint32{l1.UID, l2.UID} {
		assert.GreaterOrEqual(t, u, uint32(UIDMin))
		assert.LessOrEqual(t, u, uint32(UIDMax))
	}

	// Not live: still reserved for each, and each gets its own back.
	require.NoError(t, l1.Release())
	require.NoError(t, l2.Release())
	bob3, _ := newHolder(t, "G-bob")
	l3 := acquire(t, r, bob3)
	assert.NotContains(t, []uint32{l1.UID, l2.UID}, l3.UID, "a uid reserved for another run directory's grant is not handed out")
	assert.Equal(t, l2.UID, acquire(t, r, bob2).UID, "stable across runs")
	assert.Equal(t, l1.UID, acquire(t, r, bob1).UID, "stable across runs")

	// Two runs of one grant of one run directory share its uid.
	assert.Equal(t, l1.UID, acquire(t, r, bob1).UID)
}

func TestRegistryKnowsARunDirectoryByIdentity(t *testing.T) {
	r, _ := testRegistry(t)
	h, dir := newHolder(t, "G-bob")
	l := acquire(t, r, h)
	require.NoError(t, l.Release())

	link := filepath.Join(t.TempDir(), "link")
	require.NoError(t, os.Symlink(dir, link))
	other, err := HolderOf(link, "G-bob")
	require.NoError(t, err)
	assert.Equal(t, l.UID, acquire(t, r, other).UID, "another spelling is the same run directory")

	// Moved: the same directory keeps its uid.
	moved := filepath.Join(t.TempDir(), "moved")
	require.NoError(t, os.Rename(dir, moved))
	m, err := HolderOf(moved, "G-bob")
	require.NoError(t, err)
	assert.Equal(t, l.UID, acquire(t, r, m).UID)
}

func TestRegistryReclaimsGoneRunDirectories(t *testing.T) {
	r, _ := testRegistry(t)
	h, dir := newHolder(t, "G-bob")
	l := acquire(t, r, h)

	// Gone but live: still held.
	require.NoError(t, os.RemoveAll(dir))
	other, _ := newHolder(t, "G-bob")
	lo := acquire(t, r, other)
	assert.NotEqual(t, l.UID, lo.UID)

	// Gone and ended: free again, and its lease file is removed.
	require.NoError(t, l.Release())
	require.NoError(t, lo.Release())
	third, _ := newHolder(t, "G-bob")
	assert.Equal(t, l.UID, acquire(t, r, third).UID)
	rec := readRegistry(t, r)
	for _, e := range rec.UIDs {
		assert.NotEqual(t, dir, e.RunDir)
	}
}

func TestRegistrySkipsUIDsInUse(t *testing.T) {
	r, procs := testRegistry(t)
	slot := UIDSlot("G-bob")
	procs[slot] = true
	h, _ := newHolder(t, "G-bob")
	l := acquire(t, r, h)
	assert.NotEqual(t, slot, l.UID, "a uid a process runs with is not handed out")
	require.NoError(t, l.Release())

	// The reserved uid is taken over by a process while no run holds it:
	// the grant gets another one.
	procs[l.UID] = true
	assert.NotEqual(t, l.UID, acquire(t, r, h).UID)

	r.Accounts = func() map[uint32]bool { return map[uint32]bool{UIDSlot("G-carol"): true} }
	c, _ := newHolder(t, "G-carol")
	assert.NotEqual(t, UIDSlot("G-carol"), acquire(t, r, c).UID, "an account's id is not handed out")
}

func TestRegistryPrefersTheRunDirectorysRecord(t *testing.T) {
	r, _ := testRegistry(t)
	h, _ := newHolder(t, "G-bob")
	l, err := r.Acquire(h, UIDMin+7)
	require.NoError(t, err)
	defer l.Release()
	assert.Equal(t, uint32(UIDMin+7), l.UID)

	// A preference another holder has reserved is not honoured.
	o, _ := newHolder(t, "G-alice")
	lo, err := r.Acquire(o, UIDMin+7)
	require.NoError(t, err)
	defer lo.Release()
	assert.NotEqual(t, uint32(UIDMin+7), lo.UID)
}

func TestRegistryChosenUID(t *testing.T) {
	r, _ := testRegistry(t)
	bob1, _ := newHolder(t, "G-bob")
	bob2, _ := newHolder(t, "G-bob")
	l1 := acquire(t, r, bob1)

	_, err := r.AcquireUID(bob2, l1.UID)
	require.Error(t, err, "live for another run directory's grant")
	assert.Contains(t, err.Error(), "reserved for the sandbox of grant G-bob of run directory "+bob1.RunDir+" (running now)")

	require.NoError(t, l1.Release())
	_, err = r.AcquireUID(bob2, l1.UID)
	require.Error(t, err, "reserved for another run directory's grant")
	assert.Contains(t, err.Error(), "(not running now)")

	same, err := r.AcquireUID(bob1, l1.UID)
	require.NoError(t, err, "its own holder may name it")
	require.NoError(t, same.Release())

	// A chosen uid nobody reserved is held while its run lasts.
	chosen, err := r.AcquireUID(bob2, 4242)
	require.NoError(t, err)
	_, err = r.AcquireUID(bob1, 4242)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "uid 4242 is in use by the sandbox of grant G-bob of run directory "+bob2.RunDir)
	require.NoError(t, chosen.Release())
	l, err := r.AcquireUID(bob1, 4242)
	require.NoError(t, err, "free once that run ended")
	require.NoError(t, l.Release())
}

// TestRegistryLiveUIDChosenFirst: a uid a --uid run holds is skipped by
// the allocation, even for the grant it was reserved for.
func TestRegistryLiveUIDChosenFirst(t *testing.T) {
	r, _ := testRegistry(t)
	bob, _ := newHolder(t, "G-bob")
	other, _ := newHolder(t, "G-other")
	chosen, err := r.AcquireUID(other, UIDSlot("G-bob"))
	require.NoError(t, err)
	defer chosen.Release()
	assert.NotEqual(t, chosen.UID, acquire(t, r, bob).UID)
}

func TestRegistryConcurrently(t *testing.T) {
	r, _ := testRegistry(t)
	const n = 16
	got := make([]uint32, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		h, _ := newHolder(t, "G-bob")
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			l, err := r.Acquire(h, 0)
			if assert.NoError(t, err) {
				got[i] = l.UID
				t.Cleanup(func() { _ = l.Release() })
			}
		}(i)
	}
	wg.Wait()
	seen := map[uint32]bool{}
	for _, u := range got {
		assert.False(t, seen[u], "uid %d given twice", u)
		seen[u] = true
	}
}

func TestRegistryRefusesAnOpenDirectory(t *testing.T) {
	r, _ := testRegistry(t)
	require.NoError(t, os.MkdirAll(r.Dir, 0o755))
	require.NoError(t, os.Chmod(r.Dir, 0o755))
	h, _ := newHolder(t, "G-bob")
	_, err := r.Acquire(h, 0)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "nobody else may enter")

	// Its files are 0600 in a 0700 directory.
	require.NoError(t, os.Chmod(r.Dir, 0o700))
	l := acquire(t, r, h)
	ents, err := os.ReadDir(r.Dir)
	require.NoError(t, err)
	require.NotEmpty(t, ents)
	for _, e := range ents {
		fi, err := e.Info()
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), e.Name())
	}
	_ = l
}

func TestGrantUIDRecordsInTheRunDirectory(t *testing.T) {
	r, _ := testRegistry(t)
	dir := t.TempDir()
	l, err := GrantUID(r, dir, "G-alice")
	require.NoError(t, err)
	require.NoError(t, l.Release())
	u, ok := recordedUID(dir, "G-alice")
	require.True(t, ok)
	assert.Equal(t, l.UID, u)

	// A registry that lost its file gives the recorded uid back.
	require.NoError(t, os.RemoveAll(r.Dir))
	require.NoError(t, os.WriteFile(filepath.Join(dir, UIDFile), []byte(`{"uids":{"G-alice":`+itoa(UIDMin+3)+`}}`), 0o644))
	l, err = GrantUID(r, dir, "G-alice")
	require.NoError(t, err)
	defer l.Release()
	assert.Equal(t, uint32(UIDMin+3), l.UID)
}

func readRegistry(t *testing.T, r *Registry) regRecord {
	t.Helper()
	var rec regRecord
	require.NoError(t, json.Unmarshal([]byte(readString(t, filepath.Join(r.Dir, registryFile))), &rec))
	return rec
}

// TestRegistryFullGivesUpTheOldestReservation fills the range with
// reservations of run directories that still exist: a new grant gets the
// uid of the one used longest ago that is not running.
func TestRegistryFullGivesUpTheOldestReservation(t *testing.T) {
	r, _ := testRegistry(t)
	h, _ := newHolder(t, "G-bob")
	live := acquire(t, r, h)
	require.NoError(t, os.MkdirAll(r.Dir, 0o700))
	rec := readRegistry(t, r)
	base := rec.UIDs[itoa(live.UID)]
	for u := uint32(UIDMin); u <= UIDMax; u++ {
		if u == live.UID {
			continue
		}
		e := base
		e.Grant = "G-" + itoa(u)
		e.LastUsed = base.LastUsed.Add(time.Duration(u) * time.Second)
		rec.UIDs[itoa(u)] = e
	}
	// The live one is the oldest of all, and is kept.
	e := rec.UIDs[itoa(live.UID)]
	e.LastUsed = base.LastUsed.Add(-time.Hour)
	rec.UIDs[itoa(live.UID)] = e
	b, err := json.Marshal(rec)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(r.Dir, registryFile), b, 0o600))

	c, _ := newHolder(t, "G-carol")
	l := acquire(t, r, c)
	want := uint32(UIDMin)
	if want == live.UID {
		want++
	}
	assert.Equal(t, want, l.UID)
	after := readRegistry(t, r)
	assert.Equal(t, "G-carol", after.UIDs[itoa(want)].Grant)
	assert.Equal(t, "G-bob", after.UIDs[itoa(live.UID)].Grant, "a live reservation is never given up")
}

// TestRegistryOwnRange: a registry of a user's subordinate uids hands
// out that range only, one uid per grant of any run directory, where a
// hash into the range would have given two grants one uid; a
// reservation out of the range (the range changed) is given up.
func TestRegistryOwnRange(t *testing.T) {
	r, _ := testRegistry(t)
	r.Min, r.Max = 500000, 500002
	seen := map[uint32]string{}
	for _, grant := range []string{"G-alice", "G-bob", "G-carol"} {
		h, _ := newHolder(t, grant)
		l := acquire(t, r, h)
		assert.GreaterOrEqual(t, l.UID, uint32(500000))
		assert.LessOrEqual(t, l.UID, uint32(500002))
		assert.NotContains(t, seen, l.UID, "%s and %s share a uid", grant, seen[l.UID])
		seen[l.UID] = grant
	}
	d, _ := newHolder(t, "G-dave")
	_, err := r.Acquire(d, 0)
	assert.ErrorContains(t, err, "every uid of 500000-500002 is held")

	r2 := &Registry{Dir: r.Dir, Min: 600000, Max: 600009, ProcessUIDs: r.ProcessUIDs, Accounts: r.Accounts}
	rec := readRegistry(t, r2)
	assert.Len(t, rec.UIDs, 3)
	h, _ := newHolder(t, "G-erin")
	l := acquire(t, r2, h)
	assert.GreaterOrEqual(t, l.UID, uint32(600000))
	assert.Equal(t, "600000-600009", readRegistry(t, r2).Range)
}
