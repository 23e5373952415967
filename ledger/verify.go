package ledger

import (
	"errors"
	"fmt"
	"io"
)

// Problem kinds reported by Verify.
const (
	ProblemGarbage      = "garbage"       // the line is not a ledger record
	ProblemHash         = "hash_mismatch" // the record was edited after it was sealed
	ProblemNonCanonical = "non_canonical" // right hash, but not the bytes a writer produces
	ProblemSeq          = "seq_mismatch"  // a record was removed, inserted or moved
	ProblemPrev         = "prev_mismatch" // the record does not follow its predecessor
	ProblemTorn         = "torn_tail"     // the last line has no trailing newline
)

// Problem is the first break in a ledger's chain.
type Problem struct {
	Seq    int64  `json:"seq"`             // first bad seq: the seq expected at the bad line
	Found  int64  `json:"found,omitempty"` // the seq the bad line carries, when readable
	Line   int64  `json:"line"`            // 1-based line number
	Offset int64  `json:"offset"`          // byte offset of the bad line
	Kind   string `json:"kind"`            // one of the Problem* constants
	Reason string `json:"reason"`
}

func (p *Problem) Error() string {
	return fmt.Sprintf("first bad seq %d (line %d, offset %d): %s: %s", p.Seq, p.Line, p.Offset, p.Kind, p.Reason)
}

// VerifyReport is the result of checking a ledger's chain.
type VerifyReport struct {
	Path     string   `json:"path"`
	Records  int64    `json:"records"`   // sound records before the first problem
	LastSeq  int64    `json:"last_seq"`  // seq of the last sound record
	LastHash string   `json:"last_hash"` // its hash: keep it to detect a later rewrite of the tail
	FirstAt  string   `json:"first_at,omitempty"`
	LastAt   string   `json:"last_at,omitempty"`
	Repairs  []Record `json:"repairs,omitempty"` // repair records found in the chain
	Problem  *Problem `json:"problem,omitempty"` // nil when the chain is valid
}

// OK reports whether the whole ledger is a valid chain.
func (r *VerifyReport) OK() bool { return r.Problem == nil }

// Verify checks every record of the ledger at path: its own hash, its
// canonical form, its seq and its link to the previous record. It stops at
// the first problem. The error is for I/O failures only; a broken chain is
// reported in VerifyReport.Problem.
func Verify(path string) (*VerifyReport, error) {
	f, src, err := openSnapshot(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rep, err := VerifyStream(src)
	if rep != nil {
		rep.Path = path
	}
	if err != nil {
		return rep, fmt.Errorf("verify ledger %s: %w", path, err)
	}
	return rep, nil
}

// VerifyStream checks the ledger read from src (see Verify).
func VerifyStream(src io.Reader) (*VerifyReport, error) {
	rep := &VerifyReport{}
	rd := NewReader(src)
	enc := newEncoder()
	for {
		want := rep.LastSeq + 1
		line, n, off, complete, err := rd.next()
		if errors.Is(err, io.EOF) {
			return rep, nil
		}
		if err != nil {
			var le *LineError
			if errors.As(err, &le) {
				rep.Problem = &Problem{Seq: want, Line: le.Line, Offset: le.Offset, Kind: ProblemGarbage, Reason: le.Err.Error()}
				return rep, nil
			}
			return rep, err
		}
		bad := func(kind string, found int64, format string, args ...any) (*VerifyReport, error) {
			rep.Problem = &Problem{Seq: want, Found: found, Line: n, Offset: off, Kind: kind, Reason: fmt.Sprintf(format, args...)}
			return rep, nil
		}
		if !complete {
			return bad(ProblemTorn, 0, "the last line has no trailing newline (%d bytes): a write was cut short; `acpfs ledger verify --repair` cuts it and records the repair", len(line))
		}
		r, kind, reason := enc.checkLine(line)
		if kind != "" {
			return bad(kind, r.Seq, "%s", reason)
		}
		if r.Seq != want {
			return bad(ProblemSeq, r.Seq, "expected seq %d, found %d: a record was removed, inserted or moved", want, r.Seq)
		}
		if r.Prev != rep.LastHash {
			return bad(ProblemPrev, r.Seq, "prev is %s but the previous record's hash is %s: a record was removed, inserted or moved", short(r.Prev), short(rep.LastHash))
		}
		rep.Records++
		rep.LastSeq, rep.LastHash, rep.LastAt = r.Seq, r.Hash, r.At
		if rep.FirstAt == "" {
			rep.FirstAt = r.At
		}
		if r.Kind == KindRepair {
			rep.Repairs = append(rep.Repairs, r)
		}
	}
}
