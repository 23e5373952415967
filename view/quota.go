package view

import (
	"context"
	"fmt"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/ledger"
)

// Default write quotas of a view whose grant sets none (see
// Options.MaxWriteBytes): enough for any document work, small enough
// that one agent cannot fill the disk the others share.
const (
	DefaultMaxWriteBytes = 1 << 30
	DefaultMaxFiles      = 10000
)

// quota counts what the agent created or grew through this view since it
// was mounted: bytes that extended a file, and new names.
type quota struct {
	bytes, files atomic.Int64
}

// limits returns the caps: the grant's, else the view's defaults. Zero
// means no cap.
func (f *View) limits() (maxBytes, maxFiles int64) {
	g := f.gv.Load().grant
	maxBytes, maxFiles = f.maxBytes, f.maxFiles
	if g.MaxWriteBytes > 0 {
		maxBytes = g.MaxWriteBytes
	}
	if g.MaxFiles > 0 {
		maxFiles = g.MaxFiles
	}
	return maxBytes, maxFiles
}

// charge adds n to c unless that passes max; it reports whether it did.
func charge(c *atomic.Int64, n, max int64) bool {
	for {
		cur := c.Load()
		if max > 0 && cur+n > max {
			return false
		}
		if c.CompareAndSwap(cur, cur+n) {
			return true
		}
	}
}

// chargeGrowth accounts for a write that makes rel n bytes longer, or
// refuses it with EDQUOT. The caller gives the bytes back (refund) if the
// write then fails or writes less.
func (f *View) chargeGrowth(ctx context.Context, op ledger.Op, rel string, n int64) syscall.Errno {
	if n <= 0 {
		return 0
	}
	maxBytes, _ := f.limits()
	if !charge(&f.quota.bytes, n, maxBytes) {
		return f.deny(ctx, ledger.KindDenied, op, rel, syscall.EDQUOT,
			fmt.Sprintf("over the grant's write quota (max_write_bytes %d)", maxBytes))
	}
	return 0
}

func (f *View) refund(n int64) {
	if n > 0 {
		f.quota.bytes.Add(-n)
	}
}

// chargeFile accounts for a new name (file, directory, symlink), or
// refuses it with EDQUOT.
func (f *View) chargeFile(ctx context.Context, op ledger.Op, rel string) syscall.Errno {
	_, maxFiles := f.limits()
	if !charge(&f.quota.files, 1, maxFiles) {
		return f.deny(ctx, ledger.KindDenied, op, rel, syscall.EDQUOT,
			fmt.Sprintf("over the grant's file quota (max_files %d)", maxFiles))
	}
	return 0
}

// newName charges a new name and records it before it is made.
func (f *View) newName(ctx context.Context, op ledger.Op, rel, detail string) syscall.Errno {
	if errno := f.chargeFile(ctx, op, rel); errno != 0 {
		return errno
	}
	if errno := f.recordChange(ctx, op, rel, detail); errno != 0 {
		f.quota.files.Add(-1)
		return errno
	}
	return 0
}

// growth is how much longer a write of n bytes at off makes the file
// open at fd (appending: always n).
func growth(fd int, off, n int64, appending bool) int64 {
	if appending {
		return n
	}
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil {
		return n // unknown: count it all
	}
	return max(0, off+n-st.Size)
}

// quotaText is the quota line of .acpfs/status.
func (f *View) quotaText() string {
	maxBytes, maxFiles := f.limits()
	return fmt.Sprintf("quota: %s of %s bytes written, %d of %s new files\n",
		fmt.Sprint(f.quota.bytes.Load()), capText(maxBytes), f.quota.files.Load(), capText(maxFiles))
}

func capText(n int64) string {
	if n <= 0 {
		return "unlimited"
	}
	return fmt.Sprint(n)
}
