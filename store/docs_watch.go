package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// dirWatch watches the directories of a folder with inotify directly:
// fsnotify offers no IN_CLOSE_WRITE, and "a written file was closed" is
// exactly when a document is complete and may be published. IN_MODIFY
// is watched too, to know which files are being written: a remote
// version is not put over a file someone holds open for writing.
type dirWatch struct {
	f      *os.File
	folder string
	events chan []fileEvent
	errs   chan error
	done   chan struct{}
}

// fileEvent is one inotify event, named by its directory's descriptor.
type fileEvent struct {
	wd   int
	mask uint32
	name string
}

const watchMask = unix.IN_CLOSE_WRITE | unix.IN_MODIFY | unix.IN_CREATE | unix.IN_DELETE |
	unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_ONLYDIR | unix.IN_DONT_FOLLOW | unix.IN_EXCL_UNLINK

// errOverflow says events were lost: the folder must be scanned again.
var errOverflow = errors.New("inotify queue overflow")

func newDirWatch(folder string) (*dirWatch, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	w := &dirWatch{
		f:      os.NewFile(uintptr(fd), "inotify"),
		folder: folder,
		events: make(chan []fileEvent, 64),
		errs:   make(chan error, 1),
		done:   make(chan struct{}),
	}
	go w.read()
	return w, nil
}

// add watches the directory rel ("" for the folder). IN_DONT_FOLLOW and
// IN_ONLYDIR: a symlink planted in place of a directory is not watched.
// Watching a directory that moved in after the check only brings events
// to names the caller resolves safely anyway.
func (w *dirWatch) add(rel string) (int, error) {
	p := w.folder
	if rel != "" {
		p = filepath.Join(w.folder, filepath.FromSlash(rel))
	}
	wd, err := unix.InotifyAddWatch(int(w.f.Fd()), p, watchMask)
	if err != nil {
		return -1, fmt.Errorf("watch %s: %w", p, err)
	}
	return wd, nil
}

func (w *dirWatch) remove(wd int) {
	_, _ = unix.InotifyRmWatch(int(w.f.Fd()), uint32(wd))
}

func (w *dirWatch) close() error {
	close(w.done)
	return w.f.Close()
}

func (w *dirWatch) read() {
	defer close(w.events)
	buf := make([]byte, 64<<10)
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			if !errors.Is(err, os.ErrClosed) && !errors.Is(err, io.EOF) {
				w.report(err)
			}
			return
		}
		var batch []fileEvent
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			mask := binary.NativeEndian.Uint32(buf[off+4:])
			wd := int(int32(binary.NativeEndian.Uint32(buf[off:])))
			l := int(binary.NativeEndian.Uint32(buf[off+12:]))
			name := string(buf[off+unix.SizeofInotifyEvent : min(n, off+unix.SizeofInotifyEvent+l)])
			name = strings.TrimRight(name, "\x00")
			off += unix.SizeofInotifyEvent + l
			if mask&unix.IN_Q_OVERFLOW != 0 {
				w.report(errOverflow)
				continue
			}
			batch = append(batch, fileEvent{wd: wd, mask: mask, name: name})
		}
		if len(batch) > 0 {
			select {
			case w.events <- batch:
			case <-w.done:
				return
			}
		}
	}
}

func (w *dirWatch) report(err error) {
	select {
	case w.errs <- err:
	default:
	}
}
