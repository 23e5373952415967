package view

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/ledger"
)

// Open files are bounded per view and per process, so that an agent
// holding thousands of descriptors open cannot take the daemon's
// descriptor table from the other views it serves. The check is made
// before each open, so concurrent opens may pass a cap by the number of
// requests in flight.
var (
	processHandles    atomic.Int64
	processMaxHandles atomic.Int64
	limitOnce         sync.Once
)

// DefaultMaxHandles is a view's cap on open files unless Options say
// otherwise; the process cap is three quarters of RLIMIT_NOFILE.
const DefaultMaxHandles = 4096

// RaiseFileLimit lifts the soft RLIMIT_NOFILE to the hard limit, once
// per process, and sets the process cap on open files from it.
func RaiseFileLimit() {
	limitOnce.Do(func() {
		var rl unix.Rlimit
		if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
			processMaxHandles.Store(768)
			return
		}
		if rl.Cur < rl.Max {
			want := rl
			want.Cur = rl.Max
			if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &want); err == nil {
				rl = want
			} else {
				slog.Debug("raise RLIMIT_NOFILE", "err", err)
			}
		}
		processMaxHandles.Store(int64(rl.Cur) * 3 / 4)
	})
}

// handleRoom refuses an open with EMFILE when this view, or the process,
// holds as many open files as it may.
func (f *View) handleRoom(ctx context.Context, op ledger.Op, rel string) syscall.Errno {
	RaiseFileLimit()
	if n := f.openHandles.Load(); f.maxHandles > 0 && n >= f.maxHandles {
		return f.deny(ctx, ledger.KindDenied, op, rel, syscall.EMFILE,
			fmt.Sprintf("too many open files in this view (at most %d)", f.maxHandles))
	}
	if processHandles.Load() >= processMaxHandles.Load() {
		return f.deny(ctx, ledger.KindDenied, op, rel, syscall.ENFILE,
			"too many open files in the daemon; other views are served first")
	}
	return 0
}

func (f *View) handleOpened() {
	f.openHandles.Add(1)
	processHandles.Add(1)
}

func (f *View) handleClosed() {
	f.openHandles.Add(-1)
	processHandles.Add(-1)
}

// Unfinished event lines are held in memory until their newline: a view
// may hold maxPendingView bytes of them, the process maxPendingProcess,
// so that thousands of handles each holding most of a line cannot take
// the daemon's memory.
const (
	maxPendingView    = 8 << 20
	maxPendingProcess = 64 << 20
)

var processPending atomic.Int64

// holdPending charges n bytes of unfinished lines, or reports that the
// view or the process holds too many.
func (f *View) holdPending(n int64) bool {
	if !charge(&f.pending, n, maxPendingView) {
		return false
	}
	if !charge(&processPending, n, maxPendingProcess) {
		f.pending.Add(-n)
		return false
	}
	return true
}

func (f *View) releasePending(n int64) {
	if n > 0 {
		f.pending.Add(-n)
		processPending.Add(-n)
	}
}
