package sandbox

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// The uid schemes of a rootless sandbox: how its user namespace maps the
// agent's uid onto the host's.
const (
	// SchemeSubUID gives the agent a subordinate uid and gid of the
	// caller's (/etc/subuid and /etc/subgid, mapped by newuidmap and
	// newgidmap): another uid on the host, which the backing folder, the
	// run directory and the key (the caller's, mode 0600/0700) refuse.
	SchemeSubUID = "subuid"
	// SchemeSingle maps the caller's own uid alone, as uid 0 of the user
	// namespace, with every capability dropped before the command runs:
	// on the host the agent is the caller's uid, so only the mount and
	// PID namespaces and Landlock keep it from the backing folder, the
	// run directory and the key.
	SchemeSingle = "single"
)

// UserNS is how a rootless `acpfs run` maps uids: the caller's uid and
// gid become 0 in the user namespace (the daemon and the sandbox's first
// process), and the agent runs as AgentUID:AgentGID there, which is
// HostUID:HostGID on the host.
type UserNS struct {
	Scheme string `json:"scheme"`
	// CallerUID and CallerGID are the caller's, on the host.
	CallerUID uint32 `json:"caller_uid"`
	CallerGID uint32 `json:"caller_gid"`
	// AgentUID and AgentGID are the agent's in the user namespace.
	AgentUID uint32 `json:"agent_uid"`
	AgentGID uint32 `json:"agent_gid"`
	// HostUID and HostGID are the agent's on the host.
	HostUID uint32 `json:"host_uid"`
	HostGID uint32 `json:"host_gid"`
	// FormerUID and FormerGID, when set, are subordinate ids of the
	// caller's that own the agent's home from an earlier run: they are
	// mapped too (at formerInside), so that the daemon may give the home
	// to the agent's ids.
	FormerUID uint32 `json:"former_uid,omitempty"`
	FormerGID uint32 `json:"former_gid,omitempty"`
	// Why says, for SchemeSingle, why no subordinate uid could be had.
	Why string `json:"why,omitempty"`

	// subUID and subGID are the caller's subordinate ranges (SchemeSubUID);
	// home is the caller's home directory of /etc/passwd.
	subUID, subGID SubIDRange
	home           string
}

// SubIDRange is one line of /etc/subuid or /etc/subgid.
type SubIDRange struct{ Start, Count uint32 }

// SubIDs returns the first range of path (/etc/subuid or /etc/subgid)
// given to the user name or the numeric id, as newuidmap reads it.
func SubIDs(path, name string, id uint32) (SubIDRange, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return SubIDRange{}, false
	}
	return parseSubIDs(b, name, id)
}

func parseSubIDs(b []byte, name string, id uint32) (SubIDRange, bool) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	ids := strconv.FormatUint(uint64(id), 10)
	for sc.Scan() {
		f := strings.Split(strings.TrimSpace(sc.Text()), ":")
		if len(f) != 3 || (f[0] != ids && (name == "" || f[0] != name)) {
			continue
		}
		start, err1 := strconv.ParseUint(f[1], 10, 32)
		count, err2 := strconv.ParseUint(f[2], 10, 32)
		if err1 != nil || err2 != nil || count == 0 {
			continue
		}
		return SubIDRange{Start: uint32(start), Count: uint32(count)}, true
	}
	return SubIDRange{}, false
}

// pick is the subordinate id a chosen uid inside (--uid) maps to: its
// offset in the range grant uids are taken from.
func (r SubIDRange) pick(inside uint32) uint32 {
	off := inside
	if inside >= UIDMin && inside <= UIDMax {
		off = inside - UIDMin
	}
	return r.Start + off%r.Count
}

// ProbeUserNS chooses the uid scheme of a rootless run for the calling
// user. With want "" it is SchemeSubUID when /etc/subuid and /etc/subgid
// give the caller a range and newuidmap and newgidmap are installed,
// SchemeSingle otherwise; want SchemeSingle chooses the single mapping
// whatever the host offers, and want SchemeSubUID fails, saying why,
// where subordinate ids cannot be had. The agent's ids are set with
// SetAgent.
func ProbeUserNS(want string) (UserNS, error) {
	u := UserNS{CallerUID: uint32(os.Getuid()), CallerGID: uint32(os.Getgid())}
	if want != "" && want != SchemeSubUID && want != SchemeSingle {
		return u, fmt.Errorf("--uid-scheme %q: want %s or %s", want, SchemeSubUID, SchemeSingle)
	}
	name := ""
	if me, err := user.LookupId(strconv.Itoa(os.Getuid())); err == nil {
		name, u.home = me.Username, me.HomeDir
	}
	var okU, okG bool
	u.subUID, okU = SubIDs("/etc/subuid", name, u.CallerUID)
	u.subGID, okG = SubIDs("/etc/subgid", name, u.CallerUID)
	_, errU := exec.LookPath("newuidmap")
	_, errG := exec.LookPath("newgidmap")
	why := ""
	switch {
	case name == "":
		why = fmt.Sprintf("uid %d has no name in /etc/passwd, which newuidmap needs", u.CallerUID)
	case !okU || !okG:
		why = fmt.Sprintf("/etc/subuid and /etc/subgid give %s no subordinate ids", name)
	case errU != nil || errG != nil:
		why = "newuidmap and newgidmap are not installed (Debian: apt-get install uidmap)"
	}
	switch {
	case want == SchemeSingle:
		u.Scheme, u.Why = SchemeSingle, "chosen with --uid-scheme "+SchemeSingle
	case why == "":
		u.Scheme = SchemeSubUID
	case want == SchemeSubUID:
		return u, fmt.Errorf("--uid-scheme %s: %s", SchemeSubUID, why)
	default:
		u.Scheme, u.Why = SchemeSingle, why
	}
	return u, nil
}

// SetAgent gives the agent, in the subuid scheme, the uid inU and gid
// inG in the namespace and the subordinate uid hostU on the host; its
// host gid is the subordinate gid at the same offset.
func (u *UserNS) SetAgent(inU, inG, hostU uint32) {
	u.AgentUID, u.AgentGID, u.HostUID = inU, inG, hostU
	u.HostGID = u.SubGIDOf(hostU)
}

// ChosenHostUID is the subordinate uid a chosen uid in the namespace
// (--uid) runs as on the host: its offset in the caller's range.
func (u UserNS) ChosenHostUID(inside uint32) uint32 { return u.subUID.pick(inside) }

// OwnsSub says whether uid is one of the caller's subordinate uids.
func (u UserNS) OwnsSub(uid uint32) bool {
	return u.subUID.Count > 0 && uid >= u.subUID.Start && uid-u.subUID.Start < u.subUID.Count
}

// SubGIDOf is the subordinate gid at the offset of the subordinate uid
// uid.
func (u UserNS) SubGIDOf(uid uint32) uint32 {
	return u.subGID.Start + (uid-u.subUID.Start)%u.subGID.Count
}

// UserRegistrySub is where a user's registry of subordinate uids lives,
// below the home directory /etc/passwd gives it (not $HOME, which another
// environment may spell otherwise): one registry per user, whatever the
// collaboration.
const UserRegistrySub = ".local/state/acpfs/uids"

// Registry is the registry that hands out the caller's subordinate uids
// to its grants, so that no two grants of any of its collaborations
// share one: the range is the caller's alone, so the registry is too.
func (u UserNS) Registry() (*Registry, error) {
	if u.Scheme != SchemeSubUID || u.subUID.Count == 0 {
		return nil, errors.New("uid registry: only the subuid scheme hands out uids")
	}
	if u.home == "" || !filepath.IsAbs(u.home) || u.home == "/" {
		return nil, fmt.Errorf("uid registry: uid %d has no home directory in /etc/passwd to keep its registry in", u.CallerUID)
	}
	return &Registry{Dir: filepath.Join(u.home, UserRegistrySub), Min: u.subUID.Start, Max: u.subUID.Start + u.subUID.Count - 1}, nil
}

// formerInside is the id in the namespace that a former owner's id is
// mapped to, in a map whose other ids are 0 (the caller) and agent: the
// smallest above 0 that is not the agent's. Each map picks its own (a
// uid 1 and a gid 2 of the agent's leave 2 and 1), or the newuidmap and
// newgidmap of one of them would refuse an id given twice.
func formerInside(agent uint32) uint32 {
	if agent == 1 {
		return 2
	}
	return 1
}

// Describe is the first line a rootless run prints: which scheme, and
// what keeps the agent from the caller's files.
func (u UserNS) Describe() string {
	if u.Scheme == SchemeSubUID {
		return fmt.Sprintf("rootless sandbox, uid scheme subuid: the command runs as uid %d (uid %d on the host, a subordinate uid of yours): your files are closed to it as to any other uid",
			u.AgentUID, u.HostUID)
	}
	return fmt.Sprintf("rootless sandbox, uid scheme single: the command runs as uid 0 without capabilities in its user namespace, which is your own uid %d on the host (%s); "+
		"only the mount and PID namespaces and Landlock keep it from the backing folder, the run directory and the key", u.CallerUID, u.Why)
}

// Map writes the uid and gid maps of the user namespace of pid, which
// must not have run anything that needs them yet.
func (u UserNS) Map(pid int) error {
	if u.Scheme == SchemeSubUID {
		for _, cmd := range u.subIDMaps(pid) {
			if out, err := exec.Command(cmd[0], cmd[1:]...).CombinedOutput(); err != nil {
				return fmt.Errorf("%s: %w: %s", strings.Join(cmd, " "), err, strings.TrimSpace(string(out)))
			}
		}
		return nil
	}
	// An unprivileged process may map its own ids alone, and its gid only
	// once setgroups is denied in the namespace.
	dir := fmt.Sprintf("/proc/%d", pid)
	for _, w := range []struct{ file, data string }{
		{"setgroups", "deny"},
		{"uid_map", fmt.Sprintf("0 %d 1\n", u.CallerUID)},
		{"gid_map", fmt.Sprintf("0 %d 1\n", u.CallerGID)},
	} {
		if err := os.WriteFile(filepath.Join(dir, w.file), []byte(w.data), 0); err != nil {
			return fmt.Errorf("user namespace: write %s: %w", w.file, err)
		}
	}
	return nil
}

// subIDMaps are the newuidmap and newgidmap commands (the tool, then
// its arguments) that map the subuid scheme's ids in the user namespace
// of pid: the caller's at 0, the agent's, and a former owner's of the
// home when there is one.
func (u UserNS) subIDMaps(pid int) [][]string {
	var out [][]string
	for _, m := range []struct {
		tool                      string
		caller, in, agent, former uint32
	}{{"newuidmap", u.CallerUID, u.AgentUID, u.HostUID, u.FormerUID}, {"newgidmap", u.CallerGID, u.AgentGID, u.HostGID, u.FormerGID}} {
		cmd := []string{m.tool, strconv.Itoa(pid), "0", fmt.Sprint(m.caller), "1", fmt.Sprint(m.in), fmt.Sprint(m.agent), "1"}
		if m.former != 0 && m.former != m.agent {
			cmd = append(cmd, fmt.Sprint(formerInside(m.in)), fmt.Sprint(m.former), "1")
		}
		out = append(out, cmd)
	}
	return out
}

// UserNSUsable tells whether this kernel lets an unprivileged process
// make a user namespace, and why not.
func UserNSUsable() error {
	if n := readInt("/proc/sys/user/max_user_namespaces"); n == 0 {
		return errors.New("user.max_user_namespaces is 0")
	}
	if n := readInt("/proc/sys/kernel/unprivileged_userns_clone"); n == 0 {
		return errors.New("kernel.unprivileged_userns_clone is 0")
	}
	if n := readInt("/proc/sys/kernel/apparmor_restrict_unprivileged_userns"); n > 0 {
		return errors.New("kernel.apparmor_restrict_unprivileged_userns is 1 (AppArmor refuses unprivileged user namespaces)")
	}
	return nil
}

// readInt reads a number from a /proc/sys file; -1 when there is none.
func readInt(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return -1
	}
	return n
}

// DelegatedCgroup returns the cgroup v2 group (a path as
// /proc/self/cgroup gives it) under which this user may make the control
// group of a run, or why there is none. It is the parent of this
// process's own group: a group that holds processes (acpfs run's own)
// cannot give controllers to its children, its parent can, when the
// subtree is delegated to this user (systemd does so for user sessions).
func DelegatedCgroup() (string, error) {
	var sfs unix.Statfs_t
	if err := unix.Statfs("/sys/fs/cgroup", &sfs); err != nil || sfs.Type != unix.CGROUP2_SUPER_MAGIC {
		return "", errors.New("no cgroup v2 hierarchy at /sys/fs/cgroup (the controllers are cgroup v1's, which only root may use)")
	}
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", fmt.Errorf("own control group: %w", err)
	}
	return delegatedIn("/sys/fs/cgroup", b, func(p string) bool { return unix.Access(p, unix.W_OK) == nil })
}

// delegatedIn is DelegatedCgroup for a cgroup v2 hierarchy mounted at
// mnt, the content of /proc/self/cgroup and a test of write access.
func delegatedIn(mnt string, self []byte, writable func(string) bool) (string, error) {
	own := ""
	for _, line := range strings.Split(string(self), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			own = p
		}
	}
	if own == "" {
		return "", errors.New("this process is in no cgroup v2 group")
	}
	if own == "/" {
		return "", errors.New("this process is in the top cgroup v2 group, which has no parent to make a group beside it in")
	}
	parent := filepath.Dir(own)
	dir := filepath.Join(mnt, parent)
	for _, p := range []string{dir, filepath.Join(dir, "cgroup.subtree_control"), filepath.Join(dir, "cgroup.procs")} {
		if !writable(p) {
			return "", fmt.Errorf("the control group %s is not delegated to uid %d (systemd: start acpfs run from a user session, or under systemd-run --user --scope -p Delegate=yes)", parent, os.Getuid())
		}
	}
	words := func(name string) string {
		b, _ := os.ReadFile(filepath.Join(dir, name))
		return " " + strings.Join(strings.Fields(string(b)), " ") + " "
	}
	ctl, sub, procs := words("cgroup.controllers"), words("cgroup.subtree_control"), strings.TrimSpace(words("cgroup.procs"))
	for _, c := range []string{"memory", "pids"} {
		if !strings.Contains(ctl, " "+c+" ") {
			return "", fmt.Errorf("the control group %s has no %s controller", parent, c)
		}
		if !strings.Contains(sub, " "+c+" ") && procs != "" {
			return "", fmt.Errorf("the control group %s holds processes, so its children cannot have the %s controller", parent, c)
		}
	}
	return parent, nil
}
