package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// HomeNone is the --home value that gives the agent no home of its own
// (HOME is then the caller's when the sandbox shows it, else /tmp).
const HomeNone = "none"

// HomesDir is the directory of the run directory holding each grant's
// own home, RUNS/homes/<grant id>. It lies in the run directory, which
// no view and no sandbox shows, so no other agent can reach it.
const HomesDir = "homes"

// FallbackHome is where the home is shown when the caller's HOME is
// unset, relative or /.
const FallbackHome = "/home/agent"

// overflowID is the uid and gid the kernel shows for an id an idmapped
// mount does not map.
const overflowID = 65534

// IDMap is the idmapping of a bind: files owned on disk by UID (and
// group GID) appear owned by ToUID (ToGID), and what ToUID creates is
// owned on disk by UID. No other id is mapped: files of other owners
// appear owned by nobody and cannot be changed.
type IDMap struct {
	UID   uint32 `json:"uid"`
	GID   uint32 `json:"gid"`
	ToUID uint32 `json:"to_uid"`
	ToGID uint32 `json:"to_gid"`
	// FD is the descriptor, in the sandbox's first process, of a user
	// namespace holding this mapping (set by OpenUserns).
	FD int `json:"fd,omitempty"`
}

// DefaultHome is a grant's own home: RUNS/homes/<grant id>.
func DefaultHome(runDir, grantID string) string {
	return filepath.Join(runDir, HomesDir, grantID)
}

// HomeOptions is what PlanHome needs.
type HomeOptions struct {
	// Dir is the host directory that is the agent's home: DefaultHome,
	// or --home's.
	Dir string
	// Default says Dir is DefaultHome, which lies in the run directory
	// by design (and is made by EnsureHome).
	Default bool
	// At is the caller's HOME: the home is shown at the same path, so
	// that ~ in --ro and --rw paths, and PATH entries below it, mean
	// inside what they mean outside.
	At string
	// Folder, Masks and Binds are Plan's.
	Folder string
	Masks  []string
	Binds  []Bind
}

// PlanHome returns the bind that shows the agent's home (at the caller's
// HOME path, or FallbackHome), to be added to Plan's binds. It refuses,
// with one line, a home that would show or hide what must stay as it is.
func PlanHome(o HomeOptions) (Bind, error) {
	at := filepath.Clean(o.At)
	if o.At == "" || !filepath.IsAbs(at) || at == "/" {
		at = FallbackHome
	} else if real, err := filepath.EvalSymlinks(at); err == nil {
		at = real
	}
	bad := func(why string) (Bind, error) {
		return Bind{}, fmt.Errorf("the agent's home would be shown at %s (HOME), which %s; set HOME to another path, or give --home %s", at, why, HomeNone)
	}
	for _, d := range privateTmp {
		if at == d {
			return bad("is the sandbox's private " + d)
		}
	}
	for _, d := range kernelDirs {
		if at == d || within(at, d) {
			return bad("lies in the sandbox's own " + d)
		}
	}
	if at == o.Folder || within(at, o.Folder) {
		return bad("is the collaboration folder or lies in it")
	}
	for _, m := range o.Masks {
		if at == m || within(at, m) {
			return bad("lies in " + m + " (run directory, ledger or grant)")
		}
	}
	for _, b := range o.Binds {
		if b.Path == at {
			return Bind{}, fmt.Errorf("%s: the agent's home is shown there (HOME); leave the flag out (the home keeps the agent's state), or give --home %s", describeBind(b), HomeNone)
		}
	}
	src, err := filepath.Abs(o.Dir)
	if err != nil {
		return Bind{}, fmt.Errorf("--home %s: %w", o.Dir, err)
	}
	if src, err = filepath.EvalSymlinks(src); err != nil {
		return Bind{}, fmt.Errorf("--home %s: %w", o.Dir, errors.Unwrap(err))
	}
	if !o.Default {
		if src == "/" || src == o.Folder || within(src, o.Folder) || within(o.Folder, src) {
			return Bind{}, fmt.Errorf("--home %s: it is /, the collaboration folder, or lies in or holds it; give a directory of its own", o.Dir)
		}
		for _, m := range o.Masks {
			if src == m || within(src, m) || within(m, src) {
				return Bind{}, fmt.Errorf("--home %s: it lies in or holds %s (run directory, ledger or grant), which no agent may reach", o.Dir, m)
			}
		}
	}
	fi, err := os.Lstat(src)
	if err != nil {
		return Bind{}, fmt.Errorf("--home %s: %w", o.Dir, err)
	}
	if !fi.IsDir() {
		return Bind{}, fmt.Errorf("--home %s: not a directory", o.Dir)
	}
	return Bind{Path: at, Source: src, Write: true, Agent: o.Default}, nil
}

// EnsureHome makes dir, a grant's DefaultHome, if it is not there
// (MakeHome), and gives it to uid and gid (GiveHome).
func EnsureHome(dir string, uid, gid uint32) error {
	if err := MakeHome(dir); err != nil {
		return err
	}
	return GiveHome(dir, uid, gid)
}

// MakeHome makes dir, a grant's DefaultHome, if it is not there: mode
// 0700, below a RUNS/homes of the caller's at 0700, which it refuses
// otherwise.
func MakeHome(dir string) error {
	parent := filepath.Dir(dir)
	for _, d := range []string{parent, dir} {
		if err := os.Mkdir(d, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("the agent's home: %w", err)
		}
		fi, err := os.Lstat(d)
		if err != nil {
			return fmt.Errorf("the agent's home: %w", err)
		}
		if !fi.IsDir() {
			return fmt.Errorf("the agent's home: %s is not a directory", d)
		}
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(parent, &st); err != nil {
		return fmt.Errorf("the agent's home: %w", err)
	}
	if st.Uid != uint32(os.Geteuid()) || st.Mode&0o077 != 0 {
		return fmt.Errorf("the agent's home: %s must be the caller's (uid %d) at mode 0700, not uid %d at %04o: it keeps each agent's home from the others",
			parent, os.Geteuid(), st.Uid, st.Mode&0o7777)
	}
	return nil
}

// GiveHome gives dir, whole, to uid and gid, unless they own it already:
// a home made by the caller, or left owned by another uid (the grant's
// uid was given up and allocated anew). Nothing runs as uid yet, and no
// other uid can enter RUNS/homes. A rootless run's daemon calls it in its
// user namespace, where the caller's and the agent's ids are both mapped.
func GiveHome(dir string, uid, gid uint32) error {
	var st syscall.Stat_t
	if err := syscall.Lstat(dir, &st); err != nil {
		return fmt.Errorf("the agent's home: %w", err)
	}
	if st.Uid == uid && st.Gid == gid {
		return nil
	}
	err := filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, int(uid), int(gid))
	})
	if err != nil {
		return fmt.Errorf("the agent's home: give it to uid %d: %w", uid, err)
	}
	return nil
}

// MapWritable gives an idmapping to each writable bind (--rw, --home)
// that the agent's uid does not own and may not write, so that the agent may write there
// as its owner: files owned by the bind's owner appear as the agent's,
// and what the agent creates is owned on the host by that owner. The
// caller may map only what it owns, unless it is root. A bind it may not
// map is refused before anything starts.
func MapWritable(binds []Bind, caller, uid, gid uint32) error {
	if uid == 0 {
		return nil // root writes everywhere already
	}
	for i := range binds {
		b := &binds[i]
		if !b.Write || b.Link != "" || b.Agent {
			continue // the agent's own home is given to it (GiveHome)
		}
		src := b.Path
		if b.Source != "" {
			src = b.Source
		}
		var st syscall.Stat_t
		if err := syscall.Stat(src, &st); err != nil {
			return fmt.Errorf("%s: %w", describeBind(*b), err)
		}
		// The agent writes there as itself already: its own directory, or
		// one open to its group or to everyone (a shared 1777 spool).
		if st.Uid == uid || st.Gid == gid && st.Mode&0o020 != 0 || st.Mode&0o002 != 0 {
			continue
		}
		if caller != 0 && st.Uid != caller {
			return fmt.Errorf("%s: owned by uid %d, neither yours (%d) nor the agent's (%d): the agent could not write there; give a directory you own",
				describeBind(*b), st.Uid, caller, uid)
		}
		b.IDMap = &IDMap{UID: st.Uid, GID: st.Gid, ToUID: uid, ToGID: gid}
	}
	return nil
}

// statShown stats d as a bind shows it in the sandbox: the home's
// directories are its source's (one not made yet will be made by the
// sandbox, open to all), the home itself is the agent's, uid and gid,
// and an idmapped bind's owners are mapped.
func statShown(b Bind, d string, uid, gid uint32) (*syscall.Stat_t, error) {
	p := d
	if b.Source != "" {
		p = filepath.Join(b.Source, strings.TrimPrefix(d, b.Path))
	}
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		// Inside the agent's own home, which a rootless caller may not
		// enter once the agent owns it, a directory is one the sandbox
		// makes or the agent did: the agent's to enter either way.
		if b.Source != "" && (errors.Is(err, fs.ErrNotExist) || b.Agent && errors.Is(err, fs.ErrPermission)) {
			return &syscall.Stat_t{Mode: syscall.S_IFDIR | 0o755}, nil
		}
		return nil, err
	}
	if m := b.IDMap; m != nil {
		st.Uid, st.Gid = mapID(st.Uid, m.UID, m.ToUID), mapID(st.Gid, m.GID, m.ToGID)
	}
	if b.Agent && d == b.Path {
		// Given to the agent before the sandbox starts (GiveHome).
		st.Uid, st.Gid = uid, gid
	}
	return &st, nil
}

func mapID(id, from, to uint32) uint32 {
	if id == from {
		return to
	}
	return overflowID
}
