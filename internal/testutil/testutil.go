// Package testutil holds what the real-mount test suites (integration/
// and bench/) share: the harness of the daemons they start (daemon.go),
// an output sink, and the mounts they must not leave behind.
package testutil

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
)

// SyncBuffer is an output sink that a process's copier writes while a test
// reads it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// FUSEMounts lists the FUSE mountpoints under prefix ("" for all).
func FUSEMounts(prefix string) []string {
	var out []string
	for _, m := range mounts() {
		if strings.HasPrefix(m.fstype, "fuse.") && strings.HasPrefix(m.point, prefix) {
			out = append(out, m.point)
		}
	}
	return out
}

// Mounted reports whether anything is mounted at path in this mount
// namespace.
func Mounted(path string) bool {
	for _, m := range mounts() {
		if m.point == path {
			return true
		}
	}
	return false
}

// DetachLeftovers detaches every FUSE mount under prefix, which a suite
// must not leave behind, and returns an error naming them.
func DetachLeftovers(prefix string) error {
	left := FUSEMounts(prefix)
	if len(left) == 0 {
		return nil
	}
	for _, p := range left {
		_ = syscall.Unmount(p, syscall.MNT_DETACH)
	}
	return fmt.Errorf("mounts left behind: %s", strings.Join(left, ", "))
}

type mountEntry struct{ point, fstype string }

// mounts lists the mounts of this mount namespace (mountpoints as
// /proc/self/mounts escapes them).
func mounts() []mountEntry {
	f, err := os.Open("/proc/self/mounts")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []mountEntry
	s := bufio.NewScanner(f)
	for s.Scan() {
		if fields := strings.Fields(s.Text()); len(fields) >= 3 {
			out = append(out, mountEntry{point: fields[1], fstype: fields[2]})
		}
	}
	return out
}
