// Package limits puts a command in a control group of its own with a
// memory, process-count and CPU limit, on cgroup v2 where it is delegated
// and on the v1 hierarchies (pids, memory, cpu) otherwise. A limit that
// cannot be applied is an error: a limit that silently does nothing would
// be worse than none.
package limits

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/containerd/cgroups/v3"
	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
	specs "github.com/opencontainers/runtime-spec/specs-go"
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
func V1() bool { return cgroups.Mode() != cgroups.Unified }

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
	v1   cgroup1.Cgroup
	v2   *cgroup2.Manager
	// v2path is the v2 group's path below /sys/fs/cgroup.
	v2path string
	dirs   map[string]string // v1 subsystem -> directory, for the events files
}

// New makes the group name (a single path element) under this process's
// own groups, with l applied.
func New(name string, l Limits) (*Group, error) {
	if name == "" || strings.ContainsRune(name, '/') {
		return nil, fmt.Errorf("cgroup name %q: want one path element", name)
	}
	if cgroups.Mode() == cgroups.Unified {
		return newV2(name, l)
	}
	return newV1(name, l)
}

func newV2(name string, l Limits) (*Group, error) {
	own, err := cgroup2.NestedGroupPath("")
	if err != nil {
		return nil, fmt.Errorf("cgroup v2: find this process's group: %w", err)
	}
	return NewUnder(own, name, l)
}

// NewUnder makes the cgroup v2 group name under parent (a group path,
// as /proc/self/cgroup gives it), with l applied: a rootless run makes
// its group beside its own, in the subtree delegated to it, since a
// group holding processes cannot give its children controllers.
func NewUnder(parent, name string, l Limits) (*Group, error) {
	if name == "" || strings.ContainsRune(name, '/') {
		return nil, fmt.Errorf("cgroup name %q: want one path element", name)
	}
	if l.SocketMemory > 0 {
		return nil, fmt.Errorf("cgroup v2 charges socket buffers to the memory limit: a separate socket memory limit (%d bytes) applies to cgroup v1 only", l.SocketMemory)
	}
	own := parent
	res := &cgroup2.Resources{}
	if l.Memory > 0 {
		res.Memory = &cgroup2.Memory{Max: &l.Memory}
	}
	if l.Pids > 0 {
		res.Pids = &cgroup2.Pids{Max: l.Pids}
	}
	if l.CPU > 0 {
		quota := int64(l.CPU * cpuPeriod)
		period := uint64(cpuPeriod)
		res.CPU = &cgroup2.CPU{Max: cgroup2.NewCPUMax(&quota, &period)}
	}
	m, err := cgroup2.NewManager("/sys/fs/cgroup", filepath.Join(own, name), res)
	if err != nil {
		return nil, fmt.Errorf("cgroup v2 %s: %w (is the cgroup tree delegated to this user? --no-limits runs without limits)", name, err)
	}
	return &Group{name: name, v2: m, v2path: filepath.Join(own, name)}, nil
}

func newV1(name string, l Limits) (*Group, error) {
	res := &specs.LinuxResources{}
	var want []cgroup1.Name
	if l.Memory > 0 || l.SocketMemory > 0 {
		// v1 charges TCP and UDP socket buffers to the memory group only
		// once its kmem.tcp limit is set, and then to that counter alone:
		// without it an agent pins any amount in receive queues.
		tcp := l.SocketCap()
		res.Memory = &specs.LinuxMemory{KernelTCP: &tcp}
		if l.Memory > 0 {
			res.Memory.Limit = &l.Memory
		}
		want = append(want, cgroup1.Memory)
	}
	if l.Pids > 0 {
		res.Pids = &specs.LinuxPids{Limit: &l.Pids}
		want = append(want, cgroup1.Pids)
	}
	if l.CPU > 0 {
		quota := int64(l.CPU * cpuPeriod)
		period := uint64(cpuPeriod)
		res.CPU = &specs.LinuxCPU{Quota: &quota, Period: &period}
		want = append(want, cgroup1.Cpu)
	}
	if len(want) == 0 {
		return &Group{name: name}, nil
	}
	hier := func() ([]cgroup1.Subsystem, error) {
		all, err := cgroup1.Default()
		if err != nil {
			return nil, err
		}
		var out []cgroup1.Subsystem
		for _, s := range all {
			for _, n := range want {
				if s.Name() == n {
					out = append(out, s)
				}
			}
		}
		if len(out) != len(want) {
			return nil, fmt.Errorf("cgroup v1: need the %v hierarchies, found %d of them mounted", want, len(out))
		}
		return out, nil
	}
	cg, err := cgroup1.New(cgroup1.NestedPath(name), res, cgroup1.WithHierarchy(hier))
	if err != nil {
		return nil, fmt.Errorf("cgroup v1 %s: %w (--no-limits runs without limits)", name, err)
	}
	g := &Group{name: name, v1: cg, dirs: map[string]string{}}
	own, err := cgroup1.ParseCgroupFile("/proc/self/cgroup")
	if err == nil {
		for _, n := range want {
			g.dirs[string(n)] = filepath.Join("/sys/fs/cgroup", string(n), own[string(n)], name)
		}
	}
	return g, nil
}

// Add moves the process pid into the group.
func (g *Group) Add(pid int) error {
	switch {
	case g.v2 != nil:
		return g.v2.AddProc(uint64(pid))
	case g.v1 != nil:
		return g.v1.AddProc(uint64(pid))
	}
	return nil
}

// Hit names the limits the group's processes ran into, for the exit
// message: "memory" when the kernel killed for memory, "pids" when a fork
// was refused.
func (g *Group) Hit() []string {
	var hit []string
	if g.v2 != nil {
		if st, err := g.v2.Stat(); err == nil {
			if st.MemoryEvents != nil && st.MemoryEvents.OomKill > 0 {
				hit = append(hit, "memory")
			}
		}
		dir := filepath.Join("/sys/fs/cgroup", g.v2Path())
		if n := readKey(filepath.Join(dir, "pids.events"), "max"); n > 0 {
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

func (g *Group) v2Path() string { return g.v2path }

// Delete kills what is left in the group and removes it, waiting (at
// most about two seconds) for the killed processes to leave it.
func (g *Group) Delete() error {
	switch {
	case g.v2 != nil:
		_ = g.v2.Kill()
		return g.v2.Delete()
	case g.v1 != nil:
		var err error
		for i := 0; i < 200; i++ {
			procs, perr := g.v1.Processes(cgroup1.Pids, true)
			if perr != nil || len(procs) == 0 {
				if err = g.v1.Delete(); err == nil {
					return nil
				}
			}
			for _, p := range procs {
				_ = syscall.Kill(p.Pid, syscall.SIGKILL)
			}
			time.Sleep(10 * time.Millisecond) // the kernel's exit path, not ours to signal
		}
		return err
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
