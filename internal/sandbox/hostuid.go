package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/internal/atomicfile"
)

// HostRegistryDir is where every `acpfs run` of the host records which
// uid each grant of each run directory holds. Uids are a host-wide
// resource (the kernel counts processes, inotify instances and pipe
// pages per uid), so two collaborations must never hand one to two
// sandboxes: a run directory's own uids.json cannot see the others.
const HostRegistryDir = "/var/lib/acpfs"

// The files of a registry directory, all 0600 in a 0700 directory of
// root: nobody else can open the lock, so nobody else can hold it.
const (
	registryFile = "uids.json"
	registryLock = "uids.lock"
	leasePrefix  = "lease-"
)

// Holder is who holds a uid: a grant of a run directory, known by the
// directory's device and inode (its path is kept for people and to see
// when it is gone), so that another spelling of the path is the same
// holder and another directory at the same path is not.
type Holder struct {
	RunDir string `json:"run_dir"`
	Dev    uint64 `json:"dev"`
	Ino    uint64 `json:"ino"`
	// Birth is the directory's creation time (statx), in nanoseconds,
	// when the file system keeps one: a new directory that was given a
	// removed one's inode number is another holder.
	Birth int64  `json:"birth,omitempty"`
	Grant string `json:"grant"`
}

// HolderOf is the holder of grant in the run directory runDir.
func HolderOf(runDir, grant string) (Holder, error) {
	if grant == "" {
		return Holder{}, errors.New("uid holder: empty grant id")
	}
	abs, err := filepath.Abs(runDir)
	if err != nil {
		return Holder{}, fmt.Errorf("uid holder: %w", err)
	}
	// The path is for people; what the directory is comes from statx.
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		abs = real
	}
	id, err := dirIdentity(abs)
	if err != nil {
		return Holder{}, fmt.Errorf("uid holder: run directory %s: %w", abs, err)
	}
	id.Grant = grant
	return id, nil
}

// dirIdentity is what a directory is on disk: device, inode, birth.
func dirIdentity(path string) (Holder, error) {
	var stx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, path, 0, unix.STATX_BASIC_STATS|unix.STATX_BTIME, &stx); err != nil {
		return Holder{}, err
	}
	if stx.Mode&unix.S_IFMT != unix.S_IFDIR {
		return Holder{}, unix.ENOTDIR
	}
	h := Holder{RunDir: path, Dev: unix.Mkdev(stx.Dev_major, stx.Dev_minor), Ino: stx.Ino}
	if stx.Mask&unix.STATX_BTIME != 0 {
		h.Birth = stx.Btime.Sec*1e9 + int64(stx.Btime.Nsec)
	}
	return h, nil
}

// same says whether h and o are one grant of one run directory.
func (h Holder) same(o Holder) bool {
	return h.Dev == o.Dev && h.Ino == o.Ino && h.Birth == o.Birth && h.Grant == o.Grant
}

func (h Holder) String() string {
	return fmt.Sprintf("grant %s of run directory %s", h.Grant, h.RunDir)
}

// gone says whether h's run directory no longer exists (its path leads
// nowhere, or to another directory): its uids may be handed out again.
func (h Holder) gone() bool {
	id, err := dirIdentity(h.RunDir)
	if err != nil {
		return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR)
	}
	return id.Dev != h.Dev || id.Ino != h.Ino || id.Birth != h.Birth
}

// regEntry is one reservation of the registry.
type regEntry struct {
	Holder
	LastUsed time.Time `json:"last_used"`
}

// regRecord is the content of the registry file.
type regRecord struct {
	Range string              `json:"range"`
	UIDs  map[string]regEntry `json:"uids"`
}

// Registry hands out agent uids so that one uid is never held by two
// grants at once, whichever run directories they come from. A uid is
// reserved for a holder in the registry file and kept for it across runs
// while its run directory exists; while a run uses it, the run holds a
// shared flock on the uid's lease file, which the kernel lets go when the
// run ends, however it ends. Everything happens under an exclusive flock
// of the registry's lock file.
type Registry struct {
	// Dir holds the registry; it must be a directory of this process's
	// uid that nobody else may enter (made 0700 when missing).
	Dir string
	// Min and Max bound the uids it hands out: UIDMin-UIDMax when both
	// are 0 (the host's registry); a rootless run's registry hands out
	// the caller's subordinate uids.
	Min, Max uint32
	// ProcessUIDs lists the uids any process of the host (any PID
	// namespace) runs with; nil scans /proc.
	ProcessUIDs func() map[uint32]bool
	// Accounts lists the ids of /etc/passwd and /etc/group; nil reads
	// them.
	Accounts func() map[uint32]bool
}

// HostRegistry is the registry every `acpfs run` of the host consults.
func HostRegistry() *Registry { return &Registry{Dir: HostRegistryDir} }

// bounds is the range r hands out.
func (r *Registry) bounds() (uint32, uint32) {
	if r.Min == 0 && r.Max == 0 {
		return UIDMin, UIDMax
	}
	return r.Min, r.Max
}

// inRange says whether r may hand out u.
func (r *Registry) inRange(u uint32) bool {
	min, max := r.bounds()
	return u >= min && u <= max
}

// Lease is a uid held for one run: Release, or the end of the process,
// gives it back.
type Lease struct {
	UID uint32
	f   *os.File
}

// Release lets the uid go; it stays reserved for its holder.
func (l *Lease) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

// Acquire returns a lease on h's uid: the one the registry keeps for h
// if it is still free of everyone else, else a new one, tried first at
// prefer (the run directory's own record, when the registry lost its
// own) and then at the grant's slot. A new uid is one no other holder has
// reserved or uses, no account of /etc/passwd or /etc/group has, and no
// process of the host runs with.
func (r *Registry) Acquire(h Holder, prefer uint32) (*Lease, error) {
	var lease *Lease
	err := r.locked(func(rec *regRecord, st *regState) error {
		var u uint32
		found := false
		for key, e := range rec.UIDs {
			if !e.same(h) {
				continue
			}
			id := parseUIDKey(key)
			if !r.inRange(id) {
				// The range changed (a new /etc/subuid line): given up.
				delete(rec.UIDs, key)
				continue
			}
			holder, live := st.lease(id)
			switch {
			case live && holder.same(h):
			case live, st.procs()[id]:
				// Someone else runs with it (a sandbox of --uid started
				// before the reservation, or a process the registry does
				// not know): h gets another.
				delete(rec.UIDs, key)
				continue
			}
			if found {
				delete(rec.UIDs, key) // one uid per holder
				continue
			}
			u, found = id, true
			e.Holder.RunDir = h.RunDir // it may have moved
			e.LastUsed = time.Now().UTC()
			rec.UIDs[key] = e
		}
		if !found {
			var ok bool
			u, ok = st.free(rec, h, prefer)
			for !ok && st.evictOldest(rec) {
				u, ok = st.free(rec, h, prefer)
			}
			if !ok {
				min, max := r.bounds()
				return fmt.Errorf("every uid of %d-%d is held (%s)", min, max, filepath.Join(r.Dir, registryFile))
			}
			rec.UIDs[strconv.FormatUint(uint64(u), 10)] = regEntry{Holder: h, LastUsed: time.Now().UTC()}
		}
		var err error
		lease, err = st.take(u, h)
		return err
	})
	if err != nil {
		lease.Release() // taken, but the registry could not be written
		return nil, fmt.Errorf("allocate uid for %s: %w", h, err)
	}
	return lease, nil
}

// AcquireUID returns a lease on uid, which the caller chose (--uid): it
// is refused while it is reserved for, or used by, another holder.
func (r *Registry) AcquireUID(h Holder, uid uint32) (*Lease, error) {
	var lease *Lease
	err := r.locked(func(rec *regRecord, st *regState) error {
		if e, ok := rec.UIDs[strconv.FormatUint(uint64(uid), 10)]; ok && !e.same(h) {
			state := "not running now"
			if holder, live := st.lease(uid); live && !holder.same(h) {
				state = "running now"
			}
			return fmt.Errorf("uid %d is reserved for the sandbox of %s (%s); give --uid another uid", uid, e.Holder, state)
		}
		if holder, live := st.lease(uid); live && !holder.same(h) {
			return fmt.Errorf("uid %d is in use by the sandbox of %s; give --uid another uid", uid, holder)
		}
		var err error
		lease, err = st.take(uid, h)
		return err
	})
	if err != nil {
		lease.Release() // taken, but the registry could not be written
		return nil, fmt.Errorf("--uid %d: %w", uid, err)
	}
	return lease, nil
}

// regState is what one locked pass of the registry knows and caches.
type regState struct {
	r        *Registry
	dir      *os.File
	procUIDs map[uint32]bool
	accounts map[uint32]bool
}

// locked runs fn on the registry's record under its lock, after taking
// out the reservations of holders whose run directory is gone, and
// writes the record back when fn succeeds.
func (r *Registry) locked(fn func(*regRecord, *regState) error) error {
	dir, err := r.openDir()
	if err != nil {
		return err
	}
	defer dir.Close()
	lock, err := openAt(dir, registryLock, unix.O_RDWR|unix.O_CREAT)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("lock %s: %w", filepath.Join(r.Dir, registryLock), err)
	}
	st := &regState{r: r, dir: dir}
	rec, err := st.read()
	if err != nil {
		return err
	}
	st.reclaim(rec)
	if err := fn(rec, st); err != nil {
		return err
	}
	return st.write(rec)
}

// openDir opens the registry directory, making it when missing, and
// refuses one that another uid owns or may write or enter: whoever could
// would hand out uids, or hold the lock.
func (r *Registry) openDir() (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(r.Dir), 0o755); err != nil {
		return nil, fmt.Errorf("uid registry: %w", err)
	}
	if err := unix.Mkdir(r.Dir, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
		return nil, fmt.Errorf("uid registry %s: %w", r.Dir, err)
	}
	fd, err := unix.Open(r.Dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("uid registry %s: %w", r.Dir, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("uid registry %s: %w", r.Dir, err)
	}
	if st.Uid != uint32(os.Geteuid()) || st.Mode&0o077 != 0 {
		unix.Close(fd)
		return nil, fmt.Errorf("uid registry %s: owned by uid %d with mode %04o; want a directory of uid %d that nobody else may enter (chmod 0700)",
			r.Dir, st.Uid, st.Mode&0o7777, os.Geteuid())
	}
	return os.NewFile(uintptr(fd), r.Dir), nil
}

// openAt opens name in dir, never through a link, 0600 when made.
func openAt(dir *os.File, name string, flags int) (*os.File, error) {
	fd, err := unix.Openat(int(dir.Fd()), name, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir.Name(), name), err)
	}
	return os.NewFile(uintptr(fd), filepath.Join(dir.Name(), name)), nil
}

func (st *regState) read() (*regRecord, error) {
	rec := &regRecord{UIDs: map[string]regEntry{}}
	f, err := openAt(st.dir, registryFile, unix.O_RDONLY)
	if errors.Is(err, unix.ENOENT) {
		return rec, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.Name(), err)
	}
	if err := json.Unmarshal(b, rec); err != nil {
		return nil, fmt.Errorf("%s: %w (move it away to start a new registry)", f.Name(), err)
	}
	if rec.UIDs == nil {
		rec.UIDs = map[string]regEntry{}
	}
	return rec, nil
}

// write replaces the registry file by the one rule of
// internal/atomicfile, by last name inside the registry directory held
// open.
func (st *regState) write(rec *regRecord) error {
	min, max := st.r.bounds()
	rec.Range = fmt.Sprintf("%d-%d", min, max)
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.At(int(st.dir.Fd())).WriteFile(registryFile, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", filepath.Join(st.r.Dir, registryFile), err)
	}
	return nil
}

// reclaim takes out the reservations whose run directory is gone and
// that no run uses, and the lease files nobody holds or reserved.
func (st *regState) reclaim(rec *regRecord) {
	for key, e := range rec.UIDs {
		if _, live := st.lease(parseUIDKey(key)); !live && e.gone() {
			delete(rec.UIDs, key)
		}
	}
	for _, u := range st.leaseFiles() {
		if _, reserved := rec.UIDs[strconv.FormatUint(uint64(u), 10)]; reserved {
			continue
		}
		if _, live := st.lease(u); !live {
			_ = unix.Unlinkat(int(st.dir.Fd()), leasePrefix+strconv.FormatUint(uint64(u), 10), 0)
		}
	}
}

// evictOldest takes out the reservation used longest ago among those no
// run holds, when every uid is reserved: a run directory that still
// exists but has not run for the longest time gives its uid up first. It
// says whether it took one out.
func (st *regState) evictOldest(rec *regRecord) bool {
	var oldest string
	for key, e := range rec.UIDs {
		if _, live := st.lease(parseUIDKey(key)); live {
			continue
		}
		if oldest == "" || e.LastUsed.Before(rec.UIDs[oldest].LastUsed) {
			oldest = key
		}
	}
	if oldest == "" {
		return false
	}
	delete(rec.UIDs, oldest)
	return true
}

// leaseFiles lists the uids that have a lease file.
func (st *regState) leaseFiles() []uint32 {
	if _, err := st.dir.Seek(0, io.SeekStart); err != nil {
		return nil
	}
	names, err := st.dir.Readdirnames(-1)
	if err != nil {
		return nil
	}
	var out []uint32
	for _, n := range names {
		if k, ok := strings.CutPrefix(n, leasePrefix); ok {
			if u, err := strconv.ParseUint(k, 10, 32); err == nil {
				out = append(out, uint32(u))
			}
		}
	}
	return out
}

// lease says whether a run holds uid now, and who.
func (st *regState) lease(uid uint32) (Holder, bool) {
	f, err := openAt(st.dir, leasePrefix+strconv.FormatUint(uint64(uid), 10), unix.O_RDONLY)
	if err != nil {
		return Holder{}, false
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err == nil {
		_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
		return Holder{}, false
	}
	var h Holder
	b, _ := io.ReadAll(f)
	_ = json.Unmarshal(b, &h)
	return h, true
}

// take opens uid's lease file and holds a shared lock on it: several
// runs of one holder may share the uid; the lock goes with the last.
func (st *regState) take(uid uint32, h Holder) (*Lease, error) {
	f, err := openAt(st.dir, leasePrefix+strconv.FormatUint(uint64(uid), 10), unix.O_RDWR|unix.O_CREAT)
	if err != nil {
		return nil, err
	}
	// Free (no run holds it): say who holds it now. Another holder's
	// live lease was refused before, under the same registry lock.
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err == nil {
		b, _ := json.Marshal(h)
		if err := f.Truncate(0); err == nil {
			_, err = f.WriteAt(append(b, '\n'), 0)
		}
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("%s: %w", f.Name(), err)
		}
	}
	// From exclusive to shared: nobody else can take it in between, since
	// everyone takes leases under the registry lock.
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", f.Name(), err)
	}
	return &Lease{UID: uid, f: f}, nil
}

// free picks a uid for h that nobody holds, uses or has as an account.
func (st *regState) free(rec *regRecord, h Holder, prefer uint32) (uint32, bool) {
	used := map[uint32]bool{}
	for key := range rec.UIDs {
		used[parseUIDKey(key)] = true
	}
	for u := range st.accountIDs() {
		used[u] = true
	}
	for u := range st.procs() {
		used[u] = true
	}
	for _, u := range st.leaseFiles() {
		if _, live := st.lease(u); live {
			used[u] = true
		}
	}
	if st.r.inRange(prefer) && !used[prefer] {
		return prefer, true
	}
	min, max := st.r.bounds()
	return freeUID(slotIn(h.Grant, min, max), min, max, used)
}

func (st *regState) procs() map[uint32]bool {
	if st.procUIDs == nil {
		if st.r.ProcessUIDs != nil {
			st.procUIDs = st.r.ProcessUIDs()
		} else {
			st.procUIDs = ProcessUIDs()
		}
	}
	return st.procUIDs
}

func (st *regState) accountIDs() map[uint32]bool {
	if st.accounts == nil {
		if st.r.Accounts != nil {
			st.accounts = st.r.Accounts()
		} else {
			st.accounts = map[uint32]bool{}
			for _, f := range []string{"/etc/passwd", "/etc/group"} {
				for _, id := range accountIDs(f) {
					st.accounts[id] = true
				}
			}
		}
	}
	return st.accounts
}

// parseUIDKey reads a registry key; a key that is not a uid is 0, which
// is never in the range.
func parseUIDKey(s string) uint32 {
	u, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return 0
	}
	return uint32(u)
}

// ProcessUIDs lists every uid (real, effective, saved, file-system) a
// process of the host runs with, in every PID namespace: sandboxes of
// other runs included.
func ProcessUIDs() map[uint32]bool {
	out := map[uint32]bool{}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if f, ok := strings.CutPrefix(line, "Uid:"); ok {
				for _, s := range strings.Fields(f) {
					if u, err := strconv.ParseUint(s, 10, 32); err == nil {
						out[uint32(u)] = true
					}
				}
				break
			}
		}
	}
	return out
}

// GrantUID is the uid the grant of runDir runs as: the host registry's,
// leased for the run, and recorded in runDir's uids.json as well.
func GrantUID(reg *Registry, runDir, grantID string) (*Lease, error) {
	h, err := HolderOf(runDir, grantID)
	if err != nil {
		return nil, err
	}
	prefer, _ := recordedUID(runDir, grantID)
	l, err := reg.Acquire(h, prefer)
	if err != nil {
		return nil, err
	}
	if err := recordUID(runDir, grantID, l.UID); err != nil {
		l.Release()
		return nil, err
	}
	return l, nil
}

// ChosenUID leases uid, given with --uid, for the grant of runDir.
func ChosenUID(reg *Registry, runDir, grantID string, uid uint32) (*Lease, error) {
	h, err := HolderOf(runDir, grantID)
	if err != nil {
		return nil, err
	}
	return reg.AcquireUID(h, uid)
}
