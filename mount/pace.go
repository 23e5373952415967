package mount

import (
	"runtime"
	"sync/atomic"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// paceFS lets the request readers go-fuse has started run before this
// one takes more requests, once the process holds more goroutines than
// its views need.
//
// go-fuse starts a new reader goroutine whenever a reader takes a
// request and no other reader is waiting, and it counts only readers
// that have already run. On a busy machine the reader that spawned one
// keeps its processor, answers the next request the kernel had queued,
// and spawns another: thousands of goroutines, each with its own stack,
// pile up in the run queue within one time slice (the daemon's memory
// spiked to 170 MB over a soak that otherwise held 60). A yield lets
// them run: the first takes the next request, the rest see enough
// readers and end. Below the bound a request pays one atomic load and a
// count of goroutines.
//
// It embeds the file system it paces, so that a method it does not
// override passes straight through; the requests that come often and
// expect an answer are overridden. It guards nothing: the owner guard
// (ownerFS) still implements every method itself.
type paceFS struct {
	fuse.RawFileSystem
}

// liveViews counts the views this process serves; the bound on
// goroutines grows with them.
var liveViews atomic.Int64

// paceBase and pacePerView make the bound: a view needs a few readers,
// a notify queue and watchers, well under pacePerView.
const (
	paceBase    = 1024
	pacePerView = 32
)

// pace yields when the process holds more goroutines than its views
// account for.
func pace() {
	if int64(runtime.NumGoroutine()) > paceBase+pacePerView*liveViews.Load() {
		runtime.Gosched()
	}
}

var _ fuse.RawFileSystem = paceFS{}

func (p paceFS) Lookup(cancel <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	pace()
	return p.RawFileSystem.Lookup(cancel, h, name, out)
}

func (p paceFS) GetAttr(cancel <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	pace()
	return p.RawFileSystem.GetAttr(cancel, in, out)
}

func (p paceFS) SetAttr(cancel <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	pace()
	return p.RawFileSystem.SetAttr(cancel, in, out)
}

func (p paceFS) Access(cancel <-chan struct{}, in *fuse.AccessIn) fuse.Status {
	pace()
	return p.RawFileSystem.Access(cancel, in)
}

func (p paceFS) Open(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	pace()
	return p.RawFileSystem.Open(cancel, in, out)
}

func (p paceFS) Create(cancel <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	pace()
	return p.RawFileSystem.Create(cancel, in, name, out)
}

func (p paceFS) Read(cancel <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	pace()
	return p.RawFileSystem.Read(cancel, in, buf)
}

func (p paceFS) Write(cancel <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	pace()
	return p.RawFileSystem.Write(cancel, in, data)
}

func (p paceFS) Flush(cancel <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	pace()
	return p.RawFileSystem.Flush(cancel, in)
}

func (p paceFS) Release(cancel <-chan struct{}, in *fuse.ReleaseIn) {
	pace()
	p.RawFileSystem.Release(cancel, in)
}

func (p paceFS) OpenDir(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	pace()
	return p.RawFileSystem.OpenDir(cancel, in, out)
}

func (p paceFS) ReadDirPlus(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	pace()
	return p.RawFileSystem.ReadDirPlus(cancel, in, out)
}

func (p paceFS) ReadDir(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	pace()
	return p.RawFileSystem.ReadDir(cancel, in, out)
}

func (p paceFS) ReleaseDir(in *fuse.ReleaseIn) {
	pace()
	p.RawFileSystem.ReleaseDir(in)
}

func (p paceFS) GetXAttr(cancel <-chan struct{}, h *fuse.InHeader, attr string, dest []byte) (uint32, fuse.Status) {
	pace()
	return p.RawFileSystem.GetXAttr(cancel, h, attr, dest)
}

func (p paceFS) Lseek(cancel <-chan struct{}, in *fuse.LseekIn, out *fuse.LseekOut) fuse.Status {
	pace()
	return p.RawFileSystem.Lseek(cancel, in, out)
}
