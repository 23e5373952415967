// Package sandbox builds the allow-list sandbox that `acpfs run` starts
// an agent's command in: fresh mount, PID, IPC and UTS namespaces (and
// network with --net none or allow), a root that holds only the system
// directories, the paths the caller allowed, the grant's view at the
// folder's own path, a fresh /proc, a minimal /dev and private temporary
// directories; then the command's own uid, no_new_privs, Landlock and a
// seccomp filter.
//
// Plan and CheckReach run on the host side, before anything starts, so
// that a bad request fails with one clear line. Enter runs inside the new
// namespaces as the sandbox's first process: one linear sequence of
// system calls, then the command, then reaping until it exits.
package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
)

// Spec is everything the sandbox's first process needs. The daemon
// writes it, as JSON, to that process's descriptor 3.
type Spec struct {
	// Root is an empty directory the new root is built on.
	Root string `json:"root"`
	// View is where the daemon mounted the grant's view.
	View string `json:"view"`
	// Folder is where the view appears: the collaboration folder's own
	// path, symbolic links resolved.
	Folder string `json:"folder"`
	// Binds are the host paths the sandbox shows, at their own paths,
	// parents before children.
	Binds []Bind `json:"binds"`
	// Masks are host paths that must stay unreachable even when a bind
	// holds them: the run directory, the ledger, the grant.
	Masks []string `json:"masks"`
	// Net is "host", "none" or "allow".
	Net string `json:"net"`
	// Proxy is, for Net "allow", the egress proxy's unix socket (a path
	// of the daemon's mount namespace): the first process bridges
	// 127.0.0.1:egress.ProxyPort of the sandbox's network to it.
	Proxy string `json:"proxy,omitempty"`
	// Env is the command's whole environment (see BuildEnv); PWD is set,
	// and HOME replaced by /tmp when the sandbox does not show it.
	Env []string `json:"env"`
	// UID and GID are the command's credentials.
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
	// UserNS is the uid scheme (SchemeSubUID, SchemeSingle) of a rootless
	// sandbox, built in a user namespace; empty when root builds it.
	UserNS string `json:"userns,omitempty"`
	// Cwd is the caller's working directory; the command starts there
	// when the sandbox shows it to UID, in Folder otherwise.
	Cwd  string   `json:"cwd"`
	Args []string `json:"args"`
	// Home, when set, is where the agent's own home is shown (one of
	// Binds) and what HOME says; see PlanHome.
	Home string `json:"home,omitempty"`
}

// Bind is one host path the sandbox shows.
type Bind struct {
	Path string `json:"path"`
	// Link, when set, makes Path a symbolic link with this target (as
	// /bin -> usr/bin on merged-/usr systems) instead of a bind.
	Link string `json:"link,omitempty"`
	// Write lets the command write there (--rw); binds are read-only
	// otherwise.
	Write bool `json:"write,omitempty"`
	// Source, when set, is the host path shown at Path (the agent's
	// home); Path itself is shown otherwise.
	Source string `json:"source,omitempty"`
	// IDMap, when set, shows the bind through an idmapped mount: files
	// of one owner appear as the agent's (see MapWritable).
	IDMap *IDMap `json:"idmap,omitempty"`
	// Agent says the bind is the agent's own home, which is the agent's
	// uid's when the sandbox starts (GiveHome); a rootless run's daemon
	// gives it, after acpfs run checked the layout.
	Agent bool `json:"agent,omitempty"`
}

// Network modes.
const (
	NetHost = "host"
	NetNone = "none"
	// NetAllow: a network namespace of its own, and the named hosts
	// through the egress proxy (see internal/egress).
	NetAllow = "allow"
)

// SystemDirs are the host directories every sandbox shows, read-only:
// what programs need to run. Home directories, /root, /var, /run, /srv,
// /mnt, /media and every other place are absent unless --ro or --rw
// names them.
var SystemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt"}

// privateTmp are the temporary directories each sandbox has its own,
// empty copy of: a bind may lie below them (it is mounted inside the
// private copy) or hold them (the private copy is mounted over it).
var privateTmp = []string{"/tmp", "/var/tmp"}

// kernelDirs are the sandbox's own /dev and /proc, and /sys, which it
// does not have: nothing of the host's may be shown there.
var kernelDirs = []string{"/dev", "/proc", "/sys"}

// PlanOptions is what the caller asks for.
type PlanOptions struct {
	// Folder is the collaboration folder, absolute, symlinks resolved.
	Folder string
	// RO and RW are the --ro and --rw paths, as given.
	RO, RW []string
	// Masks are the run directory, the ledger and the grant (and their
	// directories), absolute.
	Masks []string
}

// Plan checks the caller's paths and returns the binds of the sandbox
// (system directories first) and the masks with symbolic links
// resolved. Each refusal is one line that names the flag and the path.
func Plan(o PlanOptions) ([]Bind, []string, error) {
	masks := realExisting(o.Masks)
	var binds []Bind
	for _, d := range SystemDirs {
		fi, err := os.Lstat(d)
		switch {
		case err != nil:
			continue
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(d)
			if err != nil {
				return nil, nil, err
			}
			binds = append(binds, Bind{Path: d, Link: target})
		case fi.IsDir():
			binds = append(binds, Bind{Path: d})
		}
	}
	// A resolv.conf that links into /run (systemd-resolved) would dangle:
	// show the file it names, and nothing else of /run.
	if real, err := filepath.EvalSymlinks("/etc/resolv.conf"); err == nil && real != "/etc/resolv.conf" && !underAny(real, binds) {
		binds = append(binds, Bind{Path: real})
	}
	seen := map[string]string{}
	for _, set := range []struct {
		flag  string
		paths []string
		write bool
	}{{"--ro", o.RO, false}, {"--rw", o.RW, true}} {
		for _, p := range set.paths {
			real, err := checkUserPath(set.flag, p, o.Folder, masks)
			if err != nil {
				return nil, nil, err
			}
			if prev, ok := seen[real]; ok {
				if prev != set.flag {
					return nil, nil, fmt.Errorf("%s %s: the same path is also given to %s", set.flag, p, prev)
				}
				continue
			}
			seen[real] = set.flag
			binds = append(binds, Bind{Path: real, Write: set.write})
		}
	}
	// A bind that shows a run directory holding the folder would show
	// all of it but what the masks cover (handoffs, artifacts...).
	for _, b := range binds {
		for _, m := range masks {
			if b.Link == "" && within(o.Folder, m) && (m == b.Path || within(m, b.Path)) {
				return nil, nil, fmt.Errorf("%s shows %s, which holds the folder and must stay hidden (run directory, ledger or grant): "+
					"keep the run directory and the ledger apart from the folder, or bind something narrower", describeBind(b), m)
			}
		}
	}
	// Parents before children: a string sort does it, since "/a" sorts
	// before every "/a/...".
	sort.SliceStable(binds, func(i, j int) bool { return binds[i].Path < binds[j].Path })
	return binds, masks, nil
}

// checkUserPath resolves a --ro or --rw path and refuses what would undo
// the sandbox.
func checkUserPath(flag, p, folder string, masks []string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", flag, p, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", flag, p, errors.Unwrap(err))
	}
	if real == "/" {
		return "", fmt.Errorf("%s %s: the sandbox shows only what is named; name the directories the command needs, not /", flag, p)
	}
	for _, d := range privateTmp {
		if real == d {
			return "", fmt.Errorf("%s %s: each sandbox has its own, empty %s; name a directory below it", flag, p, d)
		}
	}
	for _, d := range kernelDirs {
		if real == d || within(real, d) {
			return "", fmt.Errorf("%s %s: the sandbox has its own %s; nothing of the host's can be shown", flag, p, d)
		}
	}
	if real == folder || within(real, folder) {
		return "", fmt.Errorf("%s %s: it is the collaboration folder or lies in it, which the sandbox shows only through the grant's view", flag, p)
	}
	for _, m := range masks {
		if real == m || within(real, m) {
			return "", fmt.Errorf("%s %s: it lies in %s, which no agent may reach (run directory, ledger or grant)", flag, p, m)
		}
		if flag == "--rw" && within(m, real) {
			return "", fmt.Errorf("--rw %s: it holds %s (run directory, ledger or grant), which no agent may change or move; give it --ro, or a narrower path", p, m)
		}
	}
	return real, nil
}

// CheckReach fails, with one line, when uid cannot reach the folder in
// the sandbox: a directory above it that a bind shows as it is on the
// host (mode 0700 home directories, say) that uid may not enter. The
// directories above the folder that no bind holds are the sandbox's own,
// open to everyone, so a folder under /root or a private home works
// without any change on the host.
func CheckReach(folder string, binds []Bind, uid, gid uint32) error {
	if uid == 0 {
		return nil
	}
	for d := filepath.Dir(folder); ; d = filepath.Dir(d) {
		if b, ok := holder(d, binds); ok {
			st, err := statShown(b, d, uid, gid)
			if err != nil {
				return fmt.Errorf("%s: %w", d, err)
			}
			if !mayEnter(st, uid, gid) {
				return fmt.Errorf("uid %d cannot enter %s (mode %04o, owner %d:%d), which holds the folder %s and which %s shows as it is; "+
					"bind a directory below it, or let that uid in", uid, d, st.Mode&0o7777, st.Uid, st.Gid, folder, describeBind(b))
			}
		}
		if d == "/" {
			return nil
		}
	}
}

func describeBind(b Bind) string {
	if b.Source != "" {
		return "the agent's home " + b.Source
	}
	if b.Write {
		return "--rw " + b.Path
	}
	for _, s := range SystemDirs {
		if s == b.Path {
			return "the system directory " + b.Path
		}
	}
	return "--ro " + b.Path
}

// mayEnter tells whether uid:gid (and no other group) may search a
// directory.
func mayEnter(st *syscall.Stat_t, uid, gid uint32) bool {
	switch {
	case st.Uid == uid:
		return st.Mode&0o100 != 0
	case st.Gid == gid:
		return st.Mode&0o010 != 0
	}
	return st.Mode&0o001 != 0
}

// holder returns the bind that shows p as it is on the host, if any.
func holder(p string, binds []Bind) (Bind, bool) {
	var found Bind
	ok := false
	for _, b := range binds {
		if b.Link == "" && (p == b.Path || within(p, b.Path)) && len(b.Path) >= len(found.Path) {
			found, ok = b, true
		}
	}
	return found, ok
}

func underAny(p string, binds []Bind) bool {
	_, ok := holder(p, binds)
	return ok
}

// realExisting resolves symbolic links in paths; those that do not exist
// are kept as given (nothing can show them).
func realExisting(paths []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, p := range paths {
		if p == "" {
			continue
		}
		abs, err := filepath.Abs(p)
		if err != nil {
			continue
		}
		if r, err := filepath.EvalSymlinks(abs); err == nil {
			abs = r
		}
		if !seen[abs] {
			seen[abs] = true
			out = append(out, abs)
		}
	}
	return out
}

// within tells whether p lies strictly below dir (both absolute, clean).
func within(p, dir string) bool {
	if dir == "/" {
		return p != "/" && strings.HasPrefix(p, "/")
	}
	return strings.HasPrefix(p, dir+"/")
}
