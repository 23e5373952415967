// Package limits puts a command in a control group of its own with a
// memory, process-count and CPU limit, on cgroup v2 where it is delegated
// and on the v1 hierarchies (pids, memory, cpu) otherwise. A limit that
// cannot be applied is an error: a limit that silently does nothing would
// be worse than none.
//
// It writes the few cgroup files it needs itself: a cgroup library would
// be initialised in every acpfs process, which nearly never sets limits.
package limits

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/internal/mountinfo"
)

// Limits of one command. A zero field sets no limit of that kind.
type Limits struct {
	Memory int64   `json:"memory,omitempty"` // bytes
	Pids   int64   `json:"pids,omitempty"`   // processes and threads
	CPU    float64 `json:"cpu,omitempty"`    // CPUs worth of time per period, e.g. 1.5
	// SocketMemory caps, on cgroup v1 only, the TCP and UDP socket
	// buffers of the group (memory.kmem.tcp.limit_in_bytes), which v1
	// does not charge to Memory. Zero with Memory set means Memory. On
	// v2, memory.max charges socket buffers and this field must be zero.
	SocketMemory int64 `json:"socket_memory,omitempty"`
}

// V1 says whether groups are made on the cgroup v1 hierarchies, where
// the memory limit leaves socket buffers out.
func V1() bool { return !unified() }

// cgroupRoot is where the cgroup v2 hierarchy is mounted on a unified
// system, and the v1 hierarchies' directories otherwise; tests point it
// at a directory of their own.
var cgroupRoot = "/sys/fs/cgroup"

// unified tells whether cgroupRoot is the cgroup v2 hierarchy (a
// unified system); a hybrid system sets limits on its v1 hierarchies.
func unified() bool { return V2At(cgroupRoot) }

// V2At reports whether dir is where a cgroup v2 hierarchy is mounted.
func V2At(dir string) bool {
	var st unix.Statfs_t
	return unix.Statfs(dir, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC
}

// V2Group is the cgroup v2 group that self, the content of a
// /proc/PID/cgroup file, gives ("0::/path"); "" when it gives none.
func V2Group(self []byte) string {
	for line := range strings.Lines(string(self)) {
		if p, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), "0::"); ok {
			return p
		}
	}
	return ""
}

// SocketCap is the cap New puts on the group's TCP and UDP socket
// buffers on cgroup v1: SocketMemory, or Memory when that is zero.
func (l Limits) SocketCap() int64 {
	if l.SocketMemory > 0 {
		return l.SocketMemory
	}
	return l.Memory
}

// V1SocketNote is the line `acpfs run` prints when a memory limit is in
// force on cgroup v1: what the limit leaves out and what holds it
// instead. wmemMax is net.core.wmem_max (0: unknown).
func V1SocketNote(l Limits, wmemMax int64) string {
	unix := "each held only by its socket's send buffer"
	if wmemMax > 0 {
		// The kernel doubles what SO_SNDBUF asks for, up to twice wmem_max.
		unix = fmt.Sprintf("at most %s each (2 x net.core.wmem_max)", FormatBytes(2*wmemMax))
	}
	return fmt.Sprintf("cgroup v1: --memory %s does not charge socket buffers; TCP and UDP socket buffers are capped separately at %s "+
		"(memory.kmem.tcp.limit_in_bytes, --socket-memory), so the command may pin up to %s; Unix-socket and netlink queues are not charged, %s",
		FormatBytes(l.Memory), FormatBytes(l.SocketCap()), FormatBytes(l.Memory+l.SocketCap()), unix)
}

// FormatBytes writes n in the largest of G, M, K that divides it.
func FormatBytes(n int64) string {
	for _, u := range []struct {
		s string
		v int64
	}{{"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}} {
		if n >= u.v && n%u.v == 0 {
			return strconv.FormatInt(n/u.v, 10) + u.s
		}
	}
	return strconv.FormatInt(n, 10)
}

// ReadSysctl reads a numeric /proc/sys value such as net/core/wmem_max;
// 0 when it cannot.
func ReadSysctl(name string) int64 {
	return readKey(filepath.Join("/proc/sys", name), "")
}

// Defaults stop a fork bomb and a runaway allocation without getting in
// the way of an agent's ordinary tools.
var Defaults = Limits{Memory: 4 << 30, Pids: 512, CPU: 0}

// cpuPeriod is the CFS period the CPU quota is expressed in (100 ms).
const cpuPeriod = 100000

// Group is a control group made for one command.
type Group struct {
	name string
	// v2 is the group's directory on cgroup v2, "" on v1.
	v2 string
	// dirs maps each v1 controller the group limits (memory, pids, cpu)
	// to the group's directory in its hierarchy.
	dirs map[string]string
}

// New makes the group name (a single path element) under this process's
// own groups, with l applied.
func New(name string, l Limits) (*Group, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	if unified() {
		own, err := ownV2Group()
		if err != nil {
			return nil, fmt.Errorf("cgroup v2: find this process's group: %w", err)
		}
		return NewUnder(own, name, l)
	}
	return newV1(name, l)
}

func checkName(name string) error {
	if name == "" || strings.ContainsRune(name, '/') || name == "." || name == ".." {
		return fmt.Errorf("cgroup name %q: want one path element", name)
	}
	return nil
}

// ownV2Group is this process's cgroup v2 group, as /proc/self/cgroup
// gives it ("0::/path").
func ownV2Group() (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	if p := V2Group(b); p != "" {
		return p, nil
	}
	return "", errors.New("no cgroup v2 entry in /proc/self/cgroup")
}

// NewUnder makes the cgroup v2 group name under parent (a group path,
// as /proc/self/cgroup gives it), with l applied: a rootless run makes
// its group beside its own, in the subtree delegated to it, since a
// group holding processes cannot give its children controllers.
func NewUnder(parent, name string, l Limits) (*Group, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	if l.SocketMemory > 0 {
		return nil, fmt.Errorf("cgroup v2 charges socket buffers to the memory limit: a separate socket memory limit (%d bytes) applies to cgroup v1 only", l.SocketMemory)
	}
	if !strings.HasPrefix(parent, "/") || filepath.Clean(parent) != parent {
		return nil, fmt.Errorf("cgroup v2 parent %q: want a clean absolute group path", parent)
	}
	dir := filepath.Join(cgroupRoot, parent, name)
	if err := makeV2(dir, l); err != nil {
		return nil, fmt.Errorf("cgroup v2 %s: %w (is the cgroup tree delegated to this user? --no-limits runs without limits)", name, err)
	}
	return &Group{name: name, v2: dir}, nil
}

// makeV2 makes the v2 group dir with the controllers l needs enabled
// above it and l written; it removes dir again when that fails.
func makeV2(dir string, l Limits) error {
	var ctl, files []string
	if l.CPU > 0 {
		ctl = append(ctl, "+cpu")
		files = append(files, "cpu.max", fmt.Sprintf("%d %d", int64(l.CPU*cpuPeriod), cpuPeriod))
	}
	if l.Memory > 0 {
		ctl = append(ctl, "+memory")
		files = append(files, "memory.max", strconv.FormatInt(l.Memory, 10))
	}
	if l.Pids > 0 {
		ctl = append(ctl, "+pids")
		files = append(files, "pids.max", strconv.FormatInt(l.Pids, 10))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	err := enableControllers(filepath.Dir(dir), strings.Join(ctl, " "))
	for i := 0; err == nil && i < len(files); i += 2 {
		err = writeFile(filepath.Join(dir, files[i]), files[i+1])
	}
	if err != nil {
		_ = unix.Rmdir(dir)
	}
	return err
}

// enableControllers writes ctl ("+cpu +memory") to the
// cgroup.subtree_control of every group from the root down to parent,
// so that parent's children get those controllers. Only parent's own
// answer counts: a rootless user may not write the ancestors above its
// delegated subtree, which already enable what it was given.
func enableControllers(parent, ctl string) error {
	if ctl == "" {
		return nil
	}
	rel, err := filepath.Rel(cgroupRoot, parent)
	if err != nil || strings.HasPrefix(rel, "..") {
		return fmt.Errorf("%s is not below %s", parent, cgroupRoot)
	}
	dir := cgroupRoot
	var last error
	for _, elem := range append([]string{""}, strings.Split(rel, "/")...) {
		if elem == "." {
			continue
		}
		dir = filepath.Join(dir, elem)
		last = writeFile(filepath.Join(dir, "cgroup.subtree_control"), ctl)
	}
	return last
}

// writeFile writes value to an existing cgroup file.
func writeFile(path, value string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(value)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s to %s: %w", value, path, err)
	}
	return nil
}

// v1Setting is one file a v1 group is given, in its controller.
type v1Setting struct{ ctl, file, value string }

func newV1(name string, l Limits) (*Group, error) {
	var set []v1Setting
	if l.Memory > 0 || l.SocketMemory > 0 {
		if l.Memory > 0 {
			set = append(set, v1Setting{"memory", "memory.limit_in_bytes", strconv.FormatInt(l.Memory, 10)})
		}
		// v1 charges TCP and UDP socket buffers to the memory group only
		// once its kmem.tcp limit is set, and then to that counter alone:
		// without it an agent pins any amount in receive queues.
		set = append(set, v1Setting{"memory", "memory.kmem.tcp.limit_in_bytes", strconv.FormatInt(l.SocketCap(), 10)})
	}
	if l.Pids > 0 {
		set = append(set, v1Setting{"pids", "pids.max", strconv.FormatInt(l.Pids, 10)})
	}
	if l.CPU > 0 {
		set = append(set, v1Setting{"cpu", "cpu.cfs_period_us", strconv.Itoa(cpuPeriod)},
			v1Setting{"cpu", "cpu.cfs_quota_us", strconv.FormatInt(int64(l.CPU*cpuPeriod), 10)})
	}
	g := &Group{name: name, dirs: map[string]string{}}
	if len(set) == 0 {
		return g, nil
	}
	var want []string
	for _, s := range set {
		if !slices.Contains(want, s.ctl) {
			want = append(want, s.ctl)
		}
	}
	dirs, err := v1Dirs(want)
	if err != nil {
		return nil, fmt.Errorf("cgroup v1: %w (--no-limits runs without limits)", err)
	}
	for _, ctl := range want {
		dir := filepath.Join(dirs[ctl], name)
		if err = os.MkdirAll(dir, 0o755); err != nil {
			break
		}
		g.dirs[ctl] = dir
	}
	for i := 0; err == nil && i < len(set); i++ {
		err = writeFile(filepath.Join(g.dirs[set[i].ctl], set[i].file), set[i].value)
	}
	if err != nil {
		for _, dir := range g.dirs {
			_ = unix.Rmdir(dir)
		}
		return nil, fmt.Errorf("cgroup v1 %s: %w (--no-limits runs without limits)", name, err)
	}
	return g, nil
}

// v1Dirs returns, for each v1 controller of want, this process's own
// group's directory in that controller's hierarchy: where the
// hierarchy is mounted (/proc/self/mountinfo) joined with the group's
// path in it (/proc/self/cgroup) relative to the mount's root.
func v1Dirs(want []string) (map[string]string, error) {
	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	return v1DirsFrom(want, string(own), string(mounts))
}

// v1DirsFrom is v1Dirs given /proc/self/cgroup and /proc/self/mountinfo.
func v1DirsFrom(want []string, own, mounts string) (map[string]string, error) {
	paths := map[string]string{}
	for _, line := range strings.Split(own, "\n") {
		// hierarchy-ID:controller,controller:path
		f := strings.SplitN(line, ":", 3)
		if len(f) == 3 {
			for _, ctl := range strings.Split(f[1], ",") {
				paths[ctl] = f[2]
			}
		}
	}
	dirs := map[string]string{}
	for _, m := range mountinfo.ParseAll(mounts) {
		if m.FSType != "cgroup" {
			continue
		}
		// A v1 hierarchy's controllers are among its super options.
		for _, ctl := range strings.Split(m.SuperOptions, ",") {
			p, inGroup := paths[ctl]
			if _, seen := dirs[ctl]; seen || !inGroup || !slices.Contains(want, ctl) {
				continue
			}
			rel, err := filepath.Rel(m.Root, p)
			if err != nil || strings.HasPrefix(rel, "..") {
				continue // this process's group is not inside that mount
			}
			dirs[ctl] = filepath.Join(m.Point, rel)
		}
	}
	if len(dirs) != len(want) {
		return nil, fmt.Errorf("need the %v hierarchies, found %d of them mounted", want, len(dirs))
	}
	return dirs, nil
}

// Add moves the process pid into the group.
func (g *Group) Add(pid int) error {
	for _, dir := range g.groupDirs() {
		if err := writeFile(filepath.Join(dir, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
			return err
		}
	}
	return nil
}

// groupDirs are the group's directories: one on v2, one per limited
// controller on v1.
func (g *Group) groupDirs() []string {
	if g.v2 != "" {
		return []string{g.v2}
	}
	var out []string
	for _, ctl := range []string{"pids", "memory", "cpu"} {
		if d, ok := g.dirs[ctl]; ok {
			out = append(out, d)
		}
	}
	return out
}

// Hit names the limits the group's processes ran into, for the exit
// message: "memory" when the kernel killed for memory, "pids" when a fork
// was refused.
func (g *Group) Hit() []string {
	var hit []string
	if g.v2 != "" {
		if readKey(filepath.Join(g.v2, "memory.events"), "oom_kill") > 0 {
			hit = append(hit, "memory")
		}
		if readKey(filepath.Join(g.v2, "pids.events"), "max") > 0 {
			hit = append(hit, "pids")
		}
		return hit
	}
	if d, ok := g.dirs["memory"]; ok {
		if readKey(filepath.Join(d, "memory.oom_control"), "oom_kill") > 0 || readKey(filepath.Join(d, "memory.failcnt"), "") > 0 {
			hit = append(hit, "memory")
		}
		if readKey(filepath.Join(d, "memory.kmem.tcp.failcnt"), "") > 0 {
			hit = append(hit, "socket memory")
		}
	}
	if d, ok := g.dirs["pids"]; ok && readKey(filepath.Join(d, "pids.events"), "max") > 0 {
		hit = append(hit, "pids")
	}
	return hit
}

// Delete kills what is left in the group and removes it, waiting (at
// most about two seconds) for the killed processes to leave it.
func (g *Group) Delete() error {
	dirs := g.groupDirs()
	if g.v2 != "" {
		// cgroup.kill (Linux 5.14) kills the whole subtree at once; the
		// loop below kills one by one where it is missing.
		_ = writeFile(filepath.Join(g.v2, "cgroup.kill"), "1")
	}
	var err error
	for i := 0; i < 200; i++ {
		procs := groupProcs(dirs)
		if len(procs) == 0 {
			if err = removeGroups(dirs); err == nil {
				return nil
			}
		}
		for _, p := range procs {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		time.Sleep(10 * time.Millisecond) // the kernel's exit path, not ours to signal
	}
	if err == nil {
		err = fmt.Errorf("cgroup %s still holds processes", g.name)
	}
	return err
}

// groupProcs lists the processes in the groups at dirs and below.
func groupProcs(dirs []string) []int {
	var out []int
	for _, dir := range dirs {
		_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			b, rerr := os.ReadFile(filepath.Join(p, "cgroup.procs"))
			if rerr != nil {
				return nil
			}
			for _, f := range strings.Fields(string(b)) {
				if pid, perr := strconv.Atoi(f); perr == nil {
					out = append(out, pid)
				}
			}
			return nil
		})
	}
	return out
}

// removeGroups removes the groups at dirs, their child groups first
// (a cgroup directory is removed with rmdir, its files and all).
func removeGroups(dirs []string) error {
	for _, dir := range dirs {
		var tree []string
		_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				tree = append(tree, p)
			}
			return nil
		})
		for i := len(tree) - 1; i >= 0; i-- {
			if err := unix.Rmdir(tree[i]); err != nil && !errors.Is(err, unix.ENOENT) {
				return fmt.Errorf("remove cgroup %s: %w", tree[i], err)
			}
		}
	}
	return nil
}

// readKey reads "key N" from a cgroup file (or the lone number when key
// is empty); 0 when absent.
func readKey(path, key string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		switch {
		case key == "" && len(f) == 1:
			n, _ := strconv.ParseInt(f[0], 10, 64)
			return n
		case len(f) == 2 && f[0] == key:
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n
		}
	}
	return 0
}

// ParseBytes reads a size such as 512M, 4G or 1048576.
func ParseBytes(s string) (int64, error) {
	s = strings.TrimSpace(s)
	mult := int64(1)
	if n := len(s); n > 0 {
		switch strings.ToUpper(s[n-1:]) {
		case "K":
			mult = 1 << 10
		case "M":
			mult = 1 << 20
		case "G":
			mult = 1 << 30
		}
		if mult > 1 {
			s = s[:n-1]
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("%q: want a size such as 512M or 4G", s)
	}
	return v * mult, nil
}
