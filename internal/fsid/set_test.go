package fsid

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func statOf(t *testing.T, p string) *unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	require.NoError(t, unix.Lstat(p, &st))
	return &st
}

// TestSetKeepsWhatHasAName: a held entry stays in the set wherever it is
// moved, and is let go by Prune once it has no name left; devices are
// counted.
func TestSetKeepsWhatHasAName(t *testing.T) {
	d := t.TempDir()
	s := NewSet()
	defer s.Close()
	grant := filepath.Join(d, "G-bob.json")
	require.NoError(t, os.WriteFile(grant, []byte("{}"), 0o644))
	v := s.Version()
	require.NoError(t, s.Hold(grant))
	assert.Greater(t, s.Version(), v, "a change is a new version")
	v = s.Version()
	require.NoError(t, s.Hold(filepath.Join(d, "missing")), "a missing path adds nothing")
	require.NoError(t, s.Hold(grant), "nor one held already")
	assert.Equal(t, v, s.Version())
	st := statOf(t, grant)
	assert.True(t, s.Has(st))

	moved := filepath.Join(d, "elsewhere.json")
	require.NoError(t, os.Rename(grant, moved))
	s.Prune()
	assert.True(t, s.Has(statOf(t, moved)), "moved, it is still held")

	require.NoError(t, os.Remove(moved))
	s.Prune()
	assert.False(t, s.Has(st), "without a name it is let go")

	dir, err := os.Open(d)
	require.NoError(t, err)
	defer dir.Close()
	require.NoError(t, os.Symlink("nowhere", filepath.Join(d, "link")))
	require.NoError(t, s.HoldAt(int(dir.Fd()), "link"))
	assert.True(t, s.Has(statOf(t, filepath.Join(d, "link"))), "the symlink itself, not followed")

	other := &unix.Stat_t{Dev: 12345, Ino: 1}
	s.AddDev(12345)
	s.AddDev(12345)
	s.DropDev(12345)
	assert.True(t, s.Has(other), "one AddDev is left")
	s.DropDev(12345)
	assert.False(t, s.Has(other))
	var none *Set
	assert.False(t, none.Has(other))
	assert.Zero(t, none.Version())
}

// TestSetFullSaysSo: past its bound a Set holds nothing more, and says
// so: an entry it silently did not hold would be shown by every view
// once it moved.
func TestSetFullSaysSo(t *testing.T) {
	d := t.TempDir()
	s := NewSet()
	defer s.Close()
	s.max = 2
	for i, name := range []string{"a", "b", "c"} {
		p := filepath.Join(d, name)
		require.NoError(t, os.WriteFile(p, nil, 0o644))
		err := s.Hold(p)
		if i < s.max {
			require.NoError(t, err)
			assert.True(t, s.Has(statOf(t, p)))
			continue
		}
		require.ErrorIs(t, err, ErrSetFull)
		assert.False(t, s.Has(statOf(t, p)))
	}
	require.NoError(t, s.Hold(filepath.Join(d, "a")), "one already held is no new entry")
}
