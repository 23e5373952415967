// Package mount starts and stops acpfs views: one grant on one
// mountpoint, the coordinator that mounts every grant of a run directory,
// and private mount namespaces for sandboxed commands. It owns the
// lifecycle; fs/ owns the behaviour of a mounted view.
package mount

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	acpfs "github.com/acpfs/acpfs/fs"
	"github.com/acpfs/acpfs/grants"
	"github.com/acpfs/acpfs/ledger"
	"github.com/acpfs/acpfs/protocol"
)

// Config describes one view.
type Config struct {
	Folder     string // backing collaboration folder
	Mountpoint string
	Grant      *grants.Grant
	// GrantPath, when set, is watched: a changed grant applies to the
	// live view, a revoked or removed one hides everything at once.
	GrantPath string
	Log       *protocol.Log
	Ledger    *ledger.Writer
	// Hidden lists absolute directories never visible in the view (the
	// run directory); those outside Folder are ignored.
	Hidden     []string
	AuditReads bool
	// Passthrough lets the kernel read files the grant can only read
	// straight from the backing folder (FUSE passthrough): near-native
	// speed, but a descriptor opened before the grant narrows keeps
	// reading, which only the ledger then shows (see fs.Options).
	Passthrough bool
	// AllowOther lets other uids use the mount, with the kernel checking
	// permissions (default_permissions) so they do not act as the daemon.
	AllowOther bool
	Handoffs   map[string]string
	// Watcher, when set, is shared with other views of the same folder.
	Watcher *acpfs.Watcher
	Debug   bool
	// Fault is passed to fs.Options.Fault (tests only).
	Fault func(op, rel string)
}

// Mount is one running view.
type Mount struct {
	cfg      Config
	FS       *acpfs.FS
	server   *fuse.Server
	watcher  *acpfs.Watcher
	ownWatch bool
	grantW   *fsnotify.Watcher
	stopOnce sync.Once
	stopErr  error
}

// Start mounts the view and returns once the kernel serves it.
func Start(cfg Config) (*Mount, error) {
	folder, err := filepath.Abs(cfg.Folder)
	if err != nil {
		return nil, err
	}
	cfg.Folder = folder
	if err := CheckMountpoint(cfg.Mountpoint); err != nil {
		return nil, err
	}
	// A daemon killed between an event line and its protocol.json
	// rewrite leaves the two out of step; put them back before serving.
	if changed, err := cfg.Log.Reconcile(); err != nil {
		slog.Warn("cannot reconcile protocol.json with events.jsonl", "folder", folder, "err", err)
	} else if changed {
		slog.Warn("protocol.json was behind events.jsonl (interrupted append); rewritten", "folder", folder)
	}
	hidden := relHidden(folder, cfg.Hidden)
	f, err := acpfs.New(acpfs.Options{
		Folder: folder, Grant: cfg.Grant, Hidden: hidden, Log: cfg.Log, Ledger: cfg.Ledger,
		AuditReads: cfg.AuditReads, Passthrough: cfg.Passthrough, Handoffs: cfg.Handoffs, Fault: cfg.Fault,
	})
	if err != nil {
		return nil, err
	}
	m := &Mount{cfg: cfg, FS: f, watcher: cfg.Watcher}
	if m.watcher == nil {
		if m.watcher, err = acpfs.NewWatcher(folder, hidden); err != nil {
			return nil, err
		}
		m.ownWatch = true
	}
	m.watcher.Add(f)

	// One-second entry and attribute caches keep `ls -lR` close to a
	// plain loopback; the watcher invalidates them when the folder
	// changes. Negative entries are not cached, so a name a new grant
	// reveals appears at once.
	sec, zero := time.Second, time.Duration(0)
	opts := &gofs.Options{
		EntryTimeout:    &sec,
		AttrTimeout:     &sec,
		NegativeTimeout: &zero,
		MountOptions: fuse.MountOptions{
			FsName:     "acpfs:" + folder,
			Name:       "acpfs",
			AllowOther: cfg.AllowOther,
			// O_TRUNC must arrive with the open (not as a separate
			// truncate before it) so protocol.json rewrites can be judged
			// as a whole and events.jsonl can refuse O_TRUNC at open.
			ExtraCapabilities: fuse.CAP_ATOMIC_O_TRUNC,
			DirectMount:       os.Geteuid() == 0,
			MaxWrite:          1 << 20,
			Debug:             cfg.Debug,
		},
	}
	if cfg.AllowOther {
		opts.MountOptions.Options = append(opts.MountOptions.Options, "default_permissions")
	}
	server, err := gofs.Mount(cfg.Mountpoint, f.Root(), opts)
	if err != nil {
		m.watcher.Remove(f)
		f.Close()
		if m.ownWatch {
			m.watcher.Close()
		}
		return nil, fmt.Errorf("mount %s: %w", cfg.Mountpoint, err)
	}
	m.server = server
	// go-fuse's direct mount opens /dev/fuse without O_CLOEXEC: every
	// command this process started afterwards (the sandboxed command of
	// `acpfs run` first of all) would inherit the device and could answer
	// the kernel's requests itself, bypassing every check.
	if err := closeOnExecFUSE(); err != nil {
		m.Stop()
		return nil, fmt.Errorf("protect /dev/fuse: %w", err)
	}
	g := cfg.Grant
	if _, err := cfg.Ledger.Append(ledger.Record{Kind: ledger.KindMountStarted, Agent: g.AgentID, Grant: g.GrantID, Path: cfg.Mountpoint, PID: uint32(os.Getpid())}); err != nil {
		slog.Error("ledger", "err", err)
	}
	if cfg.GrantPath != "" {
		if err := m.watchGrant(); err != nil {
			m.Stop()
			return nil, err
		}
	}
	return m, nil
}

// relHidden converts absolute hidden directories to folder-relative ones.
// Symlinks are resolved on both sides, so that a run directory reached
// through another path is still recognised as lying inside the folder.
func relHidden(folder string, abs []string) []string {
	real := func(p string) string {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			return r
		}
		a, _ := filepath.Abs(p)
		return a
	}
	base := real(folder)
	var out []string
	for _, h := range abs {
		if h == "" {
			continue
		}
		rel, err := filepath.Rel(base, real(h))
		if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") {
			continue
		}
		out = append(out, filepath.ToSlash(rel))
	}
	return out
}

// watchGrant reloads the grant when its file changes. The directory is
// watched, not the file, because grant tools replace the file by rename.
func (m *Mount) watchGrant() error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	if err := w.Add(filepath.Dir(m.cfg.GrantPath)); err != nil {
		w.Close()
		return fmt.Errorf("watch grant: %w", err)
	}
	m.grantW = w
	go func() {
		for {
			select {
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				if filepath.Clean(ev.Name) == filepath.Clean(m.cfg.GrantPath) {
					m.ReloadGrant()
				}
			case _, ok := <-w.Errors:
				if !ok {
					return
				}
			}
		}
	}()
	return nil
}

// ReloadGrant reads the grant file again and applies it. A grant that is
// gone or no longer valid fails closed: the view shows nothing.
func (m *Mount) ReloadGrant() {
	g, err := grants.Load(m.cfg.GrantPath)
	if err != nil {
		slog.Warn("grant reload failed; hiding everything", "grant", m.cfg.GrantPath, "err", err)
		closed := *m.FS.Grant()
		closed.Revoked = true
		g = &closed
	}
	if err := m.FS.SetGrant(g, m.cfg.Handoffs); err != nil {
		slog.Error("apply grant", "err", err)
	}
}

// Wait blocks until the filesystem is unmounted.
func (m *Mount) Wait() { m.server.Wait() }

// Stop unmounts the view, records it and flushes the ledger. It is safe
// to call more than once.
func (m *Mount) Stop() error {
	m.stopOnce.Do(func() {
		if m.grantW != nil {
			m.grantW.Close()
		}
		if m.server != nil {
			m.stopErr = unmountServer(m.server, m.cfg.Mountpoint)
		}
		m.watcher.Remove(m.FS)
		if m.ownWatch {
			m.watcher.Close()
		}
		m.FS.Close()
		g := m.FS.Grant()
		if _, err := m.cfg.Ledger.Append(ledger.Record{Kind: ledger.KindMountStopped, Agent: g.AgentID, Grant: g.GrantID, Path: m.cfg.Mountpoint, PID: uint32(os.Getpid())}); err != nil {
			slog.Error("ledger", "err", err)
		}
		if err := m.cfg.Ledger.Sync(); err != nil && m.stopErr == nil {
			m.stopErr = err
		}
	})
	return m.stopErr
}

// unmountServer retries while the mount is busy (a shell still sitting in
// it), then detaches it lazily so that Stop never leaves it behind.
func unmountServer(s *fuse.Server, mountpoint string) error {
	var err error
	for i := 0; i < 20; i++ {
		if err = s.Unmount(); err == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	if derr := syscall.Unmount(mountpoint, syscall.MNT_DETACH); derr != nil {
		return fmt.Errorf("unmount %s: %w", mountpoint, err)
	}
	return nil
}

// ErrStale means the mountpoint belongs to a FUSE daemon that is gone.
var ErrStale = errors.New("transport endpoint is not connected: a previous acpfs mount died; run `acpfs umount` on it")

// CheckMountpoint verifies that p is an existing directory that is not a
// dead mount.
func CheckMountpoint(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		if errors.Is(err, syscall.ENOTCONN) {
			return fmt.Errorf("mountpoint %s: %w", p, ErrStale)
		}
		return fmt.Errorf("mountpoint: %w", err)
	}
	if !st.IsDir() {
		return fmt.Errorf("mountpoint %s is not a directory", p)
	}
	return nil
}

// Unmount unmounts p, including a stale mount whose daemon died and a
// mount whose daemon hangs: when a plain unmount fails, the FUSE
// connection is aborted first (so processes blocked in it get an error
// instead of hanging forever), then the mount is detached.
func Unmount(p string) error {
	err := syscall.Unmount(p, 0)
	if err == nil {
		return nil
	}
	if errors.Is(err, syscall.EINVAL) {
		return fmt.Errorf("%s is not mounted", p)
	}
	if aerr := abortConnection(p); aerr != nil {
		slog.Debug("abort FUSE connection", "mountpoint", p, "err", aerr)
	}
	if derr := syscall.Unmount(p, syscall.MNT_DETACH); derr == nil {
		return nil
	}
	if os.Geteuid() != 0 {
		for _, tool := range []string{"fusermount3", "fusermount"} {
			if path, lerr := lookPath(tool); lerr == nil {
				return runQuiet(path, "-u", "-z", p)
			}
		}
	}
	return fmt.Errorf("unmount %s: %w", p, err)
}
