package integration

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/internal/sandbox"
)

// The uids the tests run sandboxes (--uid) and outsider processes as come
// from testUIDFirst-testUIDLast: below the range the host registry hands
// out to sandboxes started without --uid (sandbox.UIDMin-UIDMax), so that
// an `acpfs run` of another test, or of anyone on the host, never gets one
// of them, and apart from the ids distributions give accounts (nobody is
// 65534). A test that pinned a uid failed whenever a host process ran as
// it: the sandbox's --uid is refused while any process holds it, and a
// test counting a uid's processes counted the stranger's too.
const (
	testUIDFirst = 40000
	testUIDLast  = 49999
)

// The range stays below the registry's: this fails to compile otherwise.
const _ = uint(sandbox.UIDMin - testUIDLast - 1)

// testUIDLockDir holds one lock file per uid a test holds: test binaries
// running at the same time (packages in parallel, several worktrees)
// never hand one uid to two tests. Root's alone (/run is not
// world-writable), so no other uid can hold a lock or plant a link.
const testUIDLockDir = "/run/acpfs-test-uids"

// freeUID is a uid that no process of the host runs as, no account of
// /etc/passwd or /etc/group has, the host uid registry neither reserves
// nor leases, and no other test holds; it is the test's until the test
// ends (its lock is let go by the last cleanup, after those that end the
// test's processes).
func freeUID(t *testing.T) int {
	t.Helper()
	require.NoError(t, os.MkdirAll(testUIDLockDir, 0o700))
	taken := registryUIDs()
	for id := range accountIDs() {
		taken[id] = true
	}
	for id := range sandbox.ProcessUIDs() {
		taken[id] = true
	}
	// Start at a place of this process's own, so that binaries running at
	// once seldom try the same uids first.
	n := testUIDLast - testUIDFirst + 1
	start := (os.Getpid() * 7919) % n
	for i := 0; i < n; i++ {
		u := testUIDFirst + (start+i)%n
		if taken[uint32(u)] {
			continue
		}
		f, ok := lockUID(t, u)
		if !ok {
			continue
		}
		// A process that began running as u before the lock was taken.
		if len(uidProcs(t, u)) > 0 {
			f.Close()
			continue
		}
		t.Cleanup(func() { f.Close() })
		return u
	}
	t.Fatalf("no free uid in %d-%d", testUIDFirst, testUIDLast)
	return 0
}

// lockUID takes u's lock file without waiting; ok is false when another
// test holds it.
func lockUID(t *testing.T, u int) (*os.File, bool) {
	t.Helper()
	p := filepath.Join(testUIDLockDir, strconv.Itoa(u)+".lock")
	fd, err := syscall.Open(p, syscall.O_RDWR|syscall.O_CREAT|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	require.NoError(t, err, "uid lock %s", p)
	f := os.NewFile(uintptr(fd), p)
	if err := syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		require.True(t, errors.Is(err, syscall.EWOULDBLOCK), "flock %s: %v", p, err)
		return nil, false
	}
	return f, true
}

// registryUIDs lists the uids the host registry reserves (uids.json) or
// has a lease file for, whoever holds them.
func registryUIDs() map[uint32]bool {
	out := map[uint32]bool{}
	dir := sandbox.HostRegistryDir
	if b, err := os.ReadFile(filepath.Join(dir, "uids.json")); err == nil {
		var rec struct {
			UIDs map[string]json.RawMessage `json:"uids"`
		}
		if json.Unmarshal(b, &rec) == nil {
			for k := range rec.UIDs {
				if u, err := strconv.ParseUint(k, 10, 32); err == nil {
					out[uint32(u)] = true
				}
			}
		}
	}
	names, _ := filepath.Glob(filepath.Join(dir, "lease-*"))
	for _, n := range names {
		if u, err := strconv.ParseUint(strings.TrimPrefix(filepath.Base(n), "lease-"), 10, 32); err == nil {
			out[uint32(u)] = true
		}
	}
	return out
}

// accountIDs lists the uids of /etc/passwd and the gids of /etc/group.
func accountIDs() map[uint32]bool {
	out := map[uint32]bool{}
	for _, p := range []string{"/etc/passwd", "/etc/group"} {
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if fields := strings.Split(sc.Text(), ":"); len(fields) > 2 {
				if id, err := strconv.ParseUint(fields[2], 10, 32); err == nil {
					out[uint32(id)] = true
				}
			}
		}
		f.Close()
	}
	return out
}
