// Package procstat reads /proc/PID/stat, the one place acpfs learns a
// process's state and start time from: a pid alone does not name a
// process (pids are reused), a pid with its start time does.
package procstat

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// Stat is what acpfs uses of /proc/PID/stat.
type Stat struct {
	// State is field 3: R running, S sleeping, D uninterruptible, Z
	// zombie, T stopped, t traced, X dead, I idle.
	State byte
	// Start is field 22: the start time in clock ticks after boot.
	Start uint64
}

// Zombie reports whether the process has exited and waits to be reaped
// (or, for a thread group leader, whether its other threads are still
// being torn down).
func (s Stat) Zombie() bool { return s.State == 'Z' || s.State == 'X' }

// Read parses /proc/PID/stat.
func Read(pid int) (Stat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Stat{}, err
	}
	return Parse(b)
}

// Parse parses the content of a /proc/PID/stat file. The command name
// (field 2) is in parentheses and may hold spaces and parentheses
// itself: fields are counted after the last ')'.
func Parse(b []byte) (Stat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return Stat{}, fmt.Errorf("/proc stat: malformed: no command name")
	}
	fields := bytes.Fields(b[i+1:])
	const stateField, startField = 3 - 3, 22 - 3 // fields after ')' start with field 3
	if len(fields) <= startField || len(fields[stateField]) != 1 {
		return Stat{}, fmt.Errorf("/proc stat: malformed: %d fields", len(fields)+2)
	}
	start, err := strconv.ParseUint(string(fields[startField]), 10, 64)
	if err != nil {
		return Stat{}, fmt.Errorf("/proc stat: start time: %w", err)
	}
	return Stat{State: fields[stateField][0], Start: start}, nil
}
