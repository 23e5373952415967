package sandbox

import (
	"fmt"
	"sync"

	"golang.org/x/sys/unix"
)

// coverMode is the mode of the empty directory that covers a locked
// foreign mount: nobody may enter it.
const coverMode = "0000"

// coverLocked hides the locked mount at p (absolute in the sandbox)
// beneath root under an empty, read-only tmpfs (a directory) or
// /dev/null (a file). The command, without capabilities and under the
// seccomp filter, can unmount neither the cover nor anything else.
func coverLocked(root int, p string) error {
	st, found, err := statBeneath(root, p)
	if !found {
		return nil // under another cover already
	}
	if err != nil {
		// A view of another agent refuses even a stat: it is a directory.
		st = unix.Stat_t{Mode: unix.S_IFDIR}
	}
	if err := cover(root, p, &st, coverMode); err != nil {
		return fmt.Errorf("cover the locked mount at %s: %w", p, err)
	}
	coveredMu.Lock()
	covered[p] = true
	coveredMu.Unlock()
	return nil
}

// covered are the points coverLocked covered, in this process (the
// sandbox's first process, which builds one sandbox).
var (
	covered   = map[string]bool{}
	coveredMu sync.Mutex
)

// coveredAt tells whether a foreign mount at p is hidden: coverLocked
// covered p or a directory above it, and the cover is still mounted over
// it (a later entry of mis at that point).
func coveredAt(mis []mountEntry, p string) bool {
	coveredMu.Lock()
	defer coveredMu.Unlock()
	for c := range covered {
		if c != p && !within(p, c) {
			continue
		}
		seen := false
		for _, mi := range mis {
			if mi.point == p && !seen {
				seen = true
				continue
			}
			if seen && mi.point == c && !foreign(mi.fstype) {
				return true
			}
		}
	}
	return false
}
