package mount

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/grants"
	"github.com/acpfs/acpfs/ledger"
	"github.com/acpfs/acpfs/protocol"
)

// RunConfig describes `acpfs run`: one command that sees the collaboration
// folder only through a grant's view.
type RunConfig struct {
	Folder     string // absolute
	Grant      *grants.Grant
	GrantPath  string
	LedgerPath string
	LedgerSync ledger.SyncMode
	// Masked lists absolute directories made empty and unreadable for
	// the command (the run directory, the ledger's directory).
	Masked []string
	// UID and GID, when UID >= 0, are the credentials the command runs
	// with; the view then allows other uids with default_permissions.
	UID, GID   int
	AuditReads bool
	Args       []string
}

// Sandbox runs cfg.Args in the calling process's mount namespace, which
// must already be private to it (the CLI re-executes itself with
// CLONE_NEWNS for that). It returns the command's exit status.
//
// The view is bound over the folder's own path, so the command uses the
// paths it would use anyway and cannot reach the real files by them. The
// daemon itself keeps reaching the real folder through a descriptor
// opened before the bind.
func Sandbox(cfg RunConfig) (int, error) {
	// prctl(PR_SET_NO_NEW_PRIVS) and the fork that starts the command
	// must happen on the same thread: the flag is per thread.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return 0, fmt.Errorf("make mounts private: %w", err)
	}
	dirfd, err := unix.Open(cfg.Folder, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("open folder: %w", err)
	}
	defer unix.Close(dirfd)
	backing := fmt.Sprintf("/proc/self/fd/%d", dirfd)

	// The grant's directory may be masked below; keep reaching it (for
	// live changes and revocation) through a descriptor too.
	grantPath := cfg.GrantPath
	if grantPath != "" {
		gfd, err := unix.Open(filepath.Dir(grantPath), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return 0, fmt.Errorf("open grant directory: %w", err)
		}
		defer unix.Close(gfd)
		grantPath = fmt.Sprintf("/proc/self/fd/%d/%s", gfd, filepath.Base(grantPath))
	}

	log, err := protocol.OpenLog(backing)
	if err != nil {
		return 0, err
	}
	defer log.Close()
	lw, err := ledger.Open(cfg.LedgerPath, ledger.Options{Sync: cfg.LedgerSync})
	if err != nil {
		return 0, err
	}
	defer lw.Close()

	tmp, err := os.MkdirTemp("", "acpfs-run-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(tmp)
	view := filepath.Join(tmp, "view")
	if err := os.Mkdir(view, 0o755); err != nil {
		return 0, err
	}

	// Hidden paths are computed against the real folder path; the view
	// resolves them relative to its root, whatever path reaches it.
	hidden := append([]string{}, cfg.Masked...)
	m, err := Start(Config{
		Folder: backing, Mountpoint: view, Grant: cfg.Grant, GrantPath: grantPath, Log: log, Ledger: lw,
		Hidden: rebase(hidden, cfg.Folder, backing), AuditReads: cfg.AuditReads, AllowOther: cfg.UID >= 0,
	})
	if err != nil {
		return 0, err
	}
	defer m.Stop()

	if err := unix.Mount(view, cfg.Folder, "", unix.MS_BIND, ""); err != nil {
		return 0, fmt.Errorf("bind view over %s: %w", cfg.Folder, err)
	}
	defer unix.Unmount(cfg.Folder, unix.MNT_DETACH)
	for _, d := range cfg.Masked {
		if err := mask(d); err != nil {
			return 0, err
		}
		defer unix.Unmount(d, unix.MNT_DETACH)
	}

	// A working directory inside the folder still points at the real
	// directory; enter it again through the view.
	if wd, err := os.Getwd(); err == nil {
		_ = os.Chdir(wd)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return 0, fmt.Errorf("no_new_privs: %w", err)
	}
	// The command is started through a fresh exec of this binary (see
	// ExecShimEnv), never directly: Go starts children with vfork, and a
	// child resolving a path inside the view (a relative command, a
	// script in the folder) while sharing memory with the daemon that
	// serves the view can deadlock with the garbage collector.
	cmd := exec.Command("/proc/self/exe", cfg.Args...)
	cmd.Env = append(os.Environ(), ExecShimEnv+"=1")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if cfg.UID >= 0 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(cfg.UID), Gid: uint32(cfg.GID)}
	}
	err = RunForwardingSignals(cmd)
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), nil
		}
		return ee.ExitCode(), nil
	default:
		return 127, fmt.Errorf("start %s: %w", cfg.Args[0], err)
	}
}

// RunForwardingSignals runs cmd and passes SIGINT, SIGTERM and SIGHUP on
// to it, so that stopping `acpfs run` stops the command first and the
// view is then unmounted and recorded normally.
func RunForwardingSignals(cmd *exec.Cmd) error {
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sig)
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for {
		select {
		case s := <-sig:
			_ = cmd.Process.Signal(s)
		case err := <-done:
			return err
		}
	}
}

// ExecShimEnv, set to "1", tells the acpfs binary to exec its arguments
// at once: `acpfs run` starts the sandboxed command through it.
const ExecShimEnv = "ACPFS_EXEC_SHIM"

// ExecShim replaces the process with args[0] (looked up in PATH). It only
// returns on failure.
func ExecShim(args []string) error {
	os.Unsetenv(ExecShimEnv)
	if len(args) == 0 {
		return errors.New("exec shim: no command")
	}
	path, err := exec.LookPath(args[0])
	if err != nil {
		return err
	}
	return syscall.Exec(path, args, os.Environ())
}

// mask hides a directory from the command behind an empty read-only
// tmpfs.
func mask(dir string) error {
	if _, err := os.Stat(dir); err != nil {
		return nil // nothing there to hide
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=4k,mode=000"); err != nil {
		return fmt.Errorf("mask %s: %w", dir, err)
	}
	return nil
}

// rebase rewrites absolute paths under from to the same paths under to.
func rebase(paths []string, from, to string) []string {
	out := make([]string, 0, len(paths))
	for _, p := range paths {
		if rel, err := filepath.Rel(from, p); err == nil && rel != ".." && !filepath.IsAbs(rel) && (len(rel) < 3 || rel[:3] != "../") {
			out = append(out, filepath.Join(to, rel))
		}
	}
	return out
}
