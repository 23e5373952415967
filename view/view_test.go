package view

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSymlinkTarget: a link's target is judged under the one name the
// grant gives it, whether the view is rooted at the folder or at the
// repository that holds it, and a target above the view's root is
// refused.
func TestSymlinkTarget(t *testing.T) {
	repo := newPlace("collab")
	tests := []struct {
		at                place
		rel, target, want string
		ok                bool
	}{
		{place{}, "a.md", "b.md", "b.md", true},
		{place{}, "dir/a.md", "b.md", "dir/b.md", true},
		{place{}, "dir/a.md", "../b.md", "b.md", true},
		{place{}, "dir/a.md", "..", "", true},
		{place{}, "dir/sub/a.md", "../../x/y", "x/y", true},
		{place{}, "a.md", "../outside", "", false},
		{place{}, "dir/a.md", "../../folder/oracle", "", false},
		{place{}, "a.md", "/etc/passwd", "", false},
		{place{}, "dir/a.md", "./././c", "dir/c", true},
		{place{}, "dir/a.md", "me/../../oracle", "", false},
		{place{}, "dir/a.md", "sub/../x", "", false},
		// Rooted at the repository: names beside the folder start with "..".
		{repo, "a.md", "../outside", "../outside", true},
		{repo, "../deliverables/l", "../collab/oracle.md", "oracle.md", true},
		{repo, "../deliverables/l", "../../collab/oracle.md", "", false},
		{repo, "../l", "collab/oracle.md", "oracle.md", true},
		{repo, "../l", "../x", "", false},
		{repo, "../l", "..", "", false},
		{repo, "../deliverables/l", "..", "..", true},
		{repo, "../deliverables/l", "../collab", "", true},
		{repo, "notes/l", "../../docs/x", "../docs/x", true},
		{repo, "notes/l", "../../../etc/passwd", "", false},
		{newPlace("a/collab"), "../../b/l", "../a/collab/x", "x", true},
		{newPlace("a/collab"), "../../b/l", "../a/y", "../y", true},
	}
	for _, tc := range tests {
		t.Run(tc.at.within+":"+tc.rel+"->"+tc.target, func(t *testing.T) {
			got, ok := tc.at.symlinkTarget(tc.rel, tc.target)
			assert.Equal(t, tc.ok, ok)
			assert.Equal(t, tc.want, got)
		})
	}
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func TestAppendHasherFollowsGrowthAndRestartsOnShrink(t *testing.T) {
	p := filepath.Join(t.TempDir(), "events.jsonl")
	var a appendHasher
	content := []byte("line 1\n")
	require.NoError(t, os.WriteFile(p, content, 0o644))
	sumFile := func() (string, error) {
		f, err := os.Open(p)
		if err != nil {
			return "", err
		}
		defer f.Close()
		return a.sum(int(f.Fd()))
	}
	got, err := sumFile()
	require.NoError(t, err)
	assert.Equal(t, sum(content), got)

	f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString("line 2\n")
	require.NoError(t, err)
	require.NoError(t, f.Close())
	content = append(content, "line 2\n"...)
	got, err = sumFile()
	require.NoError(t, err)
	assert.Equal(t, sum(content), got)
	assert.Equal(t, int64(len(content)), a.off, "only new bytes are hashed")

	require.NoError(t, os.WriteFile(p, []byte("x\n"), 0o644))
	got, err = sumFile()
	require.NoError(t, err)
	assert.Equal(t, sum([]byte("x\n")), got)
}

func TestHashFileAndWhatIsKept(t *testing.T) {
	p := filepath.Join(t.TempDir(), "doc.md")
	for _, content := range []string{"one", "two, longer", "three"} {
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
		f, err := os.Open(p)
		require.NoError(t, err)
		v, got, err := hashFile(int(f.Fd()))
		f.Close()
		require.NoError(t, err)
		assert.Equal(t, sum([]byte(content)), got)
		assert.EqualValues(t, len(content), v.size)
		// Just written: a change in the same clock tick could keep
		// this version's key, so its hash is not kept.
		assert.False(t, cacheable(v, time.Now()))
		assert.True(t, cacheable(v, time.Now().Add(2*time.Second)))
	}
}

func TestManaged(t *testing.T) {
	assert.True(t, managed("events.jsonl"))
	assert.True(t, managed("protocol.json"))
	assert.False(t, managed("sub/events.jsonl"))
	assert.Equal(t, "/", displayPath(""))
}

func TestCacheTimeoutFollowsTheWatcher(t *testing.T) {
	f := &View{}
	assert.Equal(t, ShortTimeout, f.cacheTimeout(), "no watcher: nobody invalidates")
	wt, err := NewWatcher(t.TempDir(), nil)
	require.NoError(t, err)
	defer wt.Close()
	wt.Add(f)
	assert.Equal(t, CacheTimeout, f.cacheTimeout())
	wt.degrade("test", nil)
	assert.Equal(t, ShortTimeout, f.cacheTimeout(), "a directory it cannot watch")
	wt.Remove(f)
	assert.Equal(t, ShortTimeout, f.cacheTimeout())
}

func TestHashVersionRefusesAChangedFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "big.bin")
	require.NoError(t, os.WriteFile(p, []byte("version one"), 0o644))
	f, err := os.Open(p)
	require.NoError(t, err)
	defer f.Close()
	var st syscall.Stat_t
	require.NoError(t, syscall.Fstat(int(f.Fd()), &st))
	v := versionOf(&st)
	got, err := hashVersion(int(f.Fd()), v)
	require.NoError(t, err)
	assert.Equal(t, sum([]byte("version one")), got)

	// Same size, other bytes: the change time tells.
	require.NoError(t, os.WriteFile(p, []byte("version two"), 0o644))
	_, err = hashVersion(int(f.Fd()), v)
	assert.ErrorIs(t, err, errChanged)
}

func TestHashStoreSurvivesReopeningAndRefusesForeignFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, HashStoreName)
	v := fileVersion{dev: 1, ino: 2, size: 3, mtimeNs: 4, ctimeNs: 5}
	sha := strings.Repeat("ab", 32)
	s := openHashStore(path)
	s.put(v, sha)
	s.release()

	s = openHashStore(path)
	got, ok := s.get(v)
	assert.True(t, ok)
	assert.Equal(t, sha, got)
	s.release()

	// A store others may write is not believed.
	require.NoError(t, os.Chmod(path, 0o666))
	s = openHashStore(path)
	_, ok = s.get(v)
	assert.False(t, ok)
	s.release()
}
