// Package testutil holds what the real-mount test suites (integration/
// and bench/) share: an output sink for the daemons they start and the
// list of FUSE mounts they must not leave behind.
package testutil

import (
	"bufio"
	"bytes"
	"os"
	"strings"
	"sync"
)

// SyncBuffer is an output sink that a process's copier writes while a test
// reads it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// FUSEMounts lists the FUSE mountpoints under prefix ("" for all).
func FUSEMounts(prefix string) []string {
	f, err := os.Open("/proc/self/mounts")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) >= 3 && strings.HasPrefix(fields[2], "fuse.") && strings.HasPrefix(fields[1], prefix) {
			out = append(out, fields[1])
		}
	}
	return out
}
