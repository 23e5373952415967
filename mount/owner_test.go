package mount

import (
	"syscall"
	"testing"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestOwnerMode(t *testing.T) {
	tests := []struct{ in, want uint32 }{
		{syscall.S_IFREG | 0o644, syscall.S_IFREG | 0o600},
		{syscall.S_IFREG | 0o444, syscall.S_IFREG | 0o600},
		{syscall.S_IFREG | 0o000, syscall.S_IFREG | 0o600},
		{syscall.S_IFREG | 0o755, syscall.S_IFREG | 0o700},
		{syscall.S_IFREG | 0o010, syscall.S_IFREG | 0o700},
		{syscall.S_IFREG | syscall.S_ISUID | 0o755, syscall.S_IFREG | 0o700},
		{syscall.S_IFDIR | 0o555, syscall.S_IFDIR | 0o700},
		{syscall.S_IFDIR | 0o1777, syscall.S_IFDIR | 0o700},
		{syscall.S_IFLNK | 0o777, syscall.S_IFLNK | 0o777},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, ownerMode(tt.in), "%o", tt.in)
	}
}

func TestNoSetID(t *testing.T) {
	assert.Equal(t, uint32(0o755), noSetID(0o6755))
	assert.Equal(t, uint32(0o1777), noSetID(0o1777))
}

// TestOwnerFixesDirPlus: the attributes inside a READDIRPLUS reply, which
// go-fuse serialises itself, show the owner too.
func TestOwnerFixesDirPlus(t *testing.T) {
	o := &ownerFS{owner: Owner{UID: 61234, GID: 61235}}
	buf := make([]byte, 4096)
	l := fuse.NewDirEntryList(buf, 0)
	names := []string{"a", "longer-name.md", "exactly8", ".acpfs"}
	for i, n := range names {
		e := l.AddDirLookupEntry(fuse.DirEntry{Name: n, Mode: syscall.S_IFREG, Ino: uint64(10 + i)})
		require.NotNil(t, e)
		e.NodeId = uint64(100 + i)
		e.Attr = fuse.Attr{Ino: uint64(10 + i), Mode: syscall.S_IFREG | 0o644}
	}
	o.fixDirPlus(l.Bytes())
	entries, outs, err := fuse.ParseDirLookupEntries(l.Bytes())
	require.NoError(t, err)
	require.Len(t, outs, len(names))
	for i, out := range outs {
		assert.Equal(t, names[i], entries[i].Name)
		assert.Equal(t, uint32(61234), out.Uid)
		assert.Equal(t, uint32(61235), out.Gid)
		assert.Equal(t, uint32(syscall.S_IFREG|0o600), out.Mode)
		assert.Equal(t, uint64(10+i), out.Ino, "the rest is kept")
	}
}

func TestOwnerAllowed(t *testing.T) {
	o, err := newOwnerFS(nil, Owner{UID: 61234, GID: 61234}, nil)
	require.NoError(t, err)
	self := uint32(syscall.Getpid())
	assert.True(t, o.allowed(&fuse.Caller{Owner: fuse.Owner{Uid: 61234}, Pid: self}))
	assert.False(t, o.allowed(&fuse.Caller{Owner: fuse.Owner{Uid: 61233}, Pid: self}))
	assert.True(t, o.allowed(&fuse.Caller{Owner: fuse.Owner{Uid: 0}, Pid: self}), "root in the daemon's PID namespace")
	assert.False(t, o.allowed(&fuse.Caller{Owner: fuse.Owner{Uid: 0}, Pid: 1 << 30}), "root whose namespace cannot be told")
}
