package sandbox

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/internal/atomicfile"
)

// The range agent uids are taken from, the one systemd uses for
// DynamicUser= (0xEF00–0xFFEF): outside what distributions give to
// people and system accounts, below 65534 (nobody).
const (
	UIDMin = 61184
	UIDMax = 65519
)

// UIDFile is the name, in the run directory, of the record of each
// grant's uid.
const UIDFile = "uids.json"

// uidRecord is the content of UIDFile.
type uidRecord struct {
	// Range says which uids the file allocates from, for a reader who
	// finds it without this documentation.
	Range string `json:"range"`
	// UIDs maps a grant id to the uid the host registry (HostRegistryDir)
	// gave it: the slot its id hashes to, unless that slot was held (by a
	// grant of this or another run directory, an account of /etc/passwd
	// or /etc/group, or a running process) when it was first allocated.
	// A run asks the registry for this uid again first.
	UIDs map[string]uint32 `json:"uids"`
}

// UIDSlot is where a grant's uid is looked for first: its id hashed into
// the range.
func UIDSlot(grantID string) uint32 { return slotIn(grantID, UIDMin, UIDMax) }

// slotIn is grantID hashed into min-max.
func slotIn(grantID string, min, max uint32) uint32 {
	h := fnv.New32a()
	h.Write([]byte(grantID))
	return min + h.Sum32()%(max-min+1)
}

// recordedUID is the uid runDir/uids.json records for grantID.
func recordedUID(runDir, grantID string) (uint32, bool) {
	b, err := os.ReadFile(filepath.Join(runDir, UIDFile))
	if err != nil {
		return 0, false
	}
	var rec uidRecord
	if json.Unmarshal(b, &rec) != nil {
		return 0, false
	}
	u, ok := rec.UIDs[grantID]
	return u, ok
}

// recordUID records in runDir/uids.json, under an exclusive lock so that
// concurrent runs do not lose each other's lines, that grantID runs as
// uid. The host registry decides; this file says, next to the grants,
// what it decided.
func recordUID(runDir, grantID string, uid uint32) error {
	lock, err := os.OpenFile(filepath.Join(runDir, "."+UIDFile+".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("record uid: %w", err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("record uid: lock: %w", err)
	}
	path := filepath.Join(runDir, UIDFile)
	rec := uidRecord{UIDs: map[string]uint32{}}
	if b, err := os.ReadFile(path); err == nil {
		if err := json.Unmarshal(b, &rec); err != nil {
			return fmt.Errorf("record uid: %s: %w", path, err)
		}
		if rec.UIDs == nil {
			rec.UIDs = map[string]uint32{}
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("record uid: %w", err)
	}
	if u, ok := rec.UIDs[grantID]; ok && u == uid {
		return nil
	}
	rec.UIDs[grantID] = uid
	rec.Range = fmt.Sprintf("%d-%d", UIDMin, UIDMax)
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	if err := writeAtomic(path, append(b, '\n')); err != nil {
		return fmt.Errorf("record uid: %w", err)
	}
	return nil
}

// freeUID probes min-max from slot on, wrapping around.
func freeUID(slot, min, max uint32, used map[uint32]bool) (uint32, bool) {
	n := max - min + 1
	for i := uint32(0); i < n; i++ {
		u := min + (slot-min+i)%n
		if !used[u] {
			return u, true
		}
	}
	return 0, false
}

// accountIDs lists the numeric ids (third field) of an /etc/passwd or
// /etc/group file; a missing file has none.
func accountIDs(path string) []uint32 {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var ids []uint32
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		if len(fields) < 3 {
			continue
		}
		if id, err := strconv.ParseUint(fields[2], 10, 32); err == nil {
			ids = append(ids, uint32(id))
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

// writeAtomic replaces path by the one rule of internal/atomicfile.
func writeAtomic(path string, data []byte) error {
	return atomicfile.WriteFile(path, data, 0o644)
}

// HostProcessWithUID returns a process of this PID namespace (the host's,
// as the daemon sees it) that runs with uid as its real, effective, saved
// or file-system uid, or 0 when there is none. Such a process could read
// the sandbox's private directories through /proc and would be taken for
// the agent: a run refuses to start as that uid.
func HostProcessWithUID(uid uint32) int {
	own, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return 0
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	want := strconv.FormatUint(uint64(uid), 10)
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			f, ok := strings.CutPrefix(line, "Uid:")
			if !ok {
				continue
			}
			if slices.Contains(strings.Fields(f), want) {
				if ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid)); err == nil && ns == own {
					return pid
				}
			}
			break
		}
	}
	return 0
}
