package ledger

import (
	"encoding/json"
	"fmt"
)

// Ledger format versions. A file states its version in its first record
// (Record.Version); a file without one is version 1.
//
// The compatibility rule: a reader reads every version up to the one it
// writes, and refuses a newer one with a VersionError rather than
// misreading it. A change a reader of the previous version could not read
// (a new field, a field moved, another hash rule) bumps CurrentVersion and
// keeps the reading of every earlier version; a new record kind does not.
// A writer stamps the version on the first record of every file it
// starts, so that a ledger whose older segments were written by an older
// acpfs keeps verifying.
const (
	// Version1 is the original format, whose files carry no version.
	Version1 = 1
	// Version2 is version 1 with the version stated in the first record
	// of every file.
	Version2 = 2
	// CurrentVersion is the format this package starts new files in:
	// version 3 (v3.go), which leaves out of unsigned records what every
	// reader can derive.
	CurrentVersion = Version3
)

// VersionError is a ledger file in a format this package does not know.
type VersionError struct {
	File    string
	Version int64
}

func (e *VersionError) Error() string {
	what := "the ledger"
	if e.File != "" {
		what = "ledger " + e.File
	}
	return fmt.Sprintf("%s is in format version %d, but this acpfs reads versions %d to %d only: read it with a newer acpfs",
		what, e.Version, Version1, CurrentVersion)
}

// fileVersion returns the version a file's first line states: fl holds
// the line when parseFast read it (parsed), otherwise the line is read
// leniently, so that a newer format with fields this package does not
// know is still recognised as one. A line that says nothing readable is
// version 1: the usual checks then name what is wrong with it.
func fileVersion(line []byte, fl *fastLine, parsed bool) int64 {
	v := int64(fl.num[fVersion])
	if !parsed {
		var probe struct {
			Version int64 `json:"version"`
		}
		if json.Unmarshal(line, &probe) != nil {
			return Version1
		}
		v = probe.Version
	}
	if v == 0 {
		return Version1
	}
	return v
}

// checkVersion refuses a file whose first line states a version this
// package does not read.
func checkVersion(file string, line []byte, fl *fastLine, parsed bool) error {
	if v := fileVersion(line, fl, parsed); v < Version1 || v > CurrentVersion {
		return &VersionError{File: file, Version: v}
	}
	return nil
}
