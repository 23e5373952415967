package ledger

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// Segments: a ledger at path P (say run/ledger.jsonl) may have sealed
// segments beside it, named <stem>.<first seq, 12 digits>.jsonl with stem
// the base name without ".jsonl" (run/ledger.000000000001.jsonl,
// run/ledger.000000100001.jsonl, ...). P holds the records after the last
// sealed segment, and the chain (seq, prev) runs on across the files. A
// sealed segment ends with a signed segment_end record and the next file
// starts with a signed segment_start record.

// segmentDigits is the width of the first seq in a segment's name.
const segmentDigits = 12

// SegmentName returns the name of the sealed segment of the ledger at path
// whose first record has seq first.
func SegmentName(path string, first int64) string {
	return filepath.Join(filepath.Dir(path), fmt.Sprintf("%s.%0*d.jsonl", segmentStem(path), segmentDigits, first))
}

func segmentStem(path string) string {
	return strings.TrimSuffix(filepath.Base(path), ".jsonl")
}

// Segments returns the files that hold the ledger at path: its sealed
// segments in seq order, then path itself (listed even when it does not
// exist: a writer may be between sealing a segment and starting the next).
func Segments(path string) ([]string, error) {
	dir := filepath.Dir(path)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list ledger segments in %s: %w", dir, err)
	}
	prefix := segmentStem(path) + "."
	var segs []string
	for _, e := range ents {
		mid, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok {
			continue
		}
		mid, ok = strings.CutSuffix(mid, ".jsonl")
		if !ok || len(mid) != segmentDigits || strings.Trim(mid, "0123456789") != "" {
			continue
		}
		segs = append(segs, e.Name())
	}
	// Fixed-width numbers sort as strings.
	slices.Sort(segs)
	out := make([]string, 0, len(segs)+1)
	for _, s := range segs {
		out = append(out, filepath.Join(dir, s))
	}
	return append(out, path), nil
}

// ledgerFile is one open file of a ledger.
type ledgerFile struct {
	name   string
	sealed bool      // a sealed segment, not the live file
	f      *os.File  // nil for a live file that does not exist yet
	src    io.Reader // the file up to its size when opened
	size   int64
}

// ledgerFiles is a consistent set of open files of one ledger.
type ledgerFiles []ledgerFile

func (lf ledgerFiles) Close() {
	for _, f := range lf {
		if f.f != nil {
			_ = f.f.Close()
		}
	}
}

// openLedgerFiles opens every file of the ledger at path (see Segments).
// Sealed segments never change; the live file is read up to its size at a
// moment no writer was mid-write. A segment sealed while the files were
// being opened would make the set inconsistent, so the listing is taken
// again afterwards and the whole set reopened if it changed.
func openLedgerFiles(path string) (ledgerFiles, error) {
	for attempt := 0; ; attempt++ {
		names, err := Segments(path)
		if err != nil {
			return nil, err
		}
		files, err := openListed(names)
		if err != nil {
			return nil, err
		}
		again, err := Segments(path)
		if err != nil {
			files.Close()
			return nil, err
		}
		if slices.Equal(names, again) {
			return files, nil
		}
		files.Close()
		if attempt == 2 {
			return nil, fmt.Errorf("open ledger %s: its segments keep changing", path)
		}
	}
}

func openListed(names []string) (ledgerFiles, error) {
	var files ledgerFiles
	for i, name := range names {
		sealed := i < len(names)-1
		var lf ledgerFile
		var err error
		if sealed {
			lf, err = openSealed(name)
		} else {
			lf, err = openLive(name, len(names) > 1)
		}
		if err != nil {
			files.Close()
			return nil, err
		}
		files = append(files, lf)
	}
	return files, nil
}

// openSealed opens a sealed segment. Its name comes from a directory
// listing, so a symlink in its place is refused rather than followed.
func openSealed(name string) (ledgerFile, error) {
	f, err := os.OpenFile(name, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return ledgerFile{}, fmt.Errorf("open ledger segment: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return ledgerFile{}, fmt.Errorf("stat ledger segment: %w", err)
	}
	if !st.Mode().IsRegular() {
		_ = f.Close()
		return ledgerFile{}, fmt.Errorf("ledger segment %s is not a regular file", name)
	}
	return ledgerFile{name: name, sealed: true, f: f, src: io.LimitReader(f, st.Size()), size: st.Size()}, nil
}

// openLive opens the live file; when sealed segments exist it may be
// missing for a moment, and reads as empty.
func openLive(name string, haveSegments bool) (ledgerFile, error) {
	f, src, err := openSnapshot(name)
	if err != nil {
		if haveSegments && errors.Is(err, fs.ErrNotExist) {
			return ledgerFile{name: name, src: strings.NewReader("")}, nil
		}
		return ledgerFile{}, err
	}
	size := int64(0)
	if lr, ok := src.(*io.LimitedReader); ok {
		size = lr.N
	}
	return ledgerFile{name: name, f: f, src: src, size: size}, nil
}
